//! Datasets on object storage (S3, GCS, Azure, or any `object_store`
//! implementation): one [`Remote`] per dataset URL.
//!
//! Every file of the format is immutable once written except the list of
//! versions, so a remote dataset is served from a local *mirror*: a
//! directory laid out like a local dataset, under the disk cache
//! (`cache.disk_dir`). A small or wholly needed file (a manifest, a
//! segment's metadata, an Arrow IPC fragment) is downloaded into it the
//! first time it is read and then read like a local one (checksums and
//! all); byte ranges (index partitions, pages of paged fragments) are
//! fetched and kept on their own (`ranges.rs`). The mirror's files are
//! weighed in a [`DiskCache`] bounded by `cache.disk_bytes` and the least
//! recently used are deleted first. A write creates its files in
//! the mirror, uploads them when it commits, and publishes its manifest
//! with a conditional put (`PutMode::Create`: S3's `If-None-Match: *`), so
//! two writers on one version never both win. Versions are listed at most
//! once per `storage.refresh_ms`, except by a commit, which always lists.
//!
//! The store's calls are async; they run on one small runtime of their own
//! ([`block_on`]) so that the synchronous readers (scan threads, blocking
//! write threads) can wait for them from any thread.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::storage::io_meter::{self, IoCounts, StorageIo};
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

mod prefetch;
mod ranges;

/// What a dataset location names.
#[derive(Debug, PartialEq)]
pub enum Location<'a> {
    /// A local directory: a plain path, or the path of a `file://` URL.
    Local(std::borrow::Cow<'a, Path>),
    /// A URL on object storage (`s3://…`, `gs://…`, `az://…`, `memory://…`).
    Remote(&'a str),
}

/// Tells a local directory from an object-storage URL.
pub fn location_of(location: &Path) -> Location<'_> {
    match location.to_str().filter(|t| is_url(t)) {
        None => Location::Local(std::borrow::Cow::Borrowed(location)),
        Some(text) => match file_url_path(text) {
            Some(path) => Location::Local(std::borrow::Cow::Owned(path)),
            None => Location::Remote(text),
        },
    }
}

/// Is `location` a URL (`scheme://…`) rather than a local path?
fn is_url(location: &str) -> bool {
    match location.split_once("://") {
        Some((scheme, _)) => {
            scheme.len() > 1
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

/// The local path a `file://` URL names (`None` for other schemes).
fn file_url_path(location: &str) -> Option<PathBuf> {
    let url = url::Url::parse(location).ok()?;
    if url.scheme() == "file" {
        url.to_file_path().ok()
    } else {
        None
    }
}

/// The runtime every object-store request runs on.
fn io_runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("shoal-io")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Internal(format!("object-storage runtime: {e}")))
}

/// Runs `work` on the object-storage runtime and waits for its answer;
/// callable from any thread (an async runtime's included: the caller
/// blocks, as every storage call of the synchronous layers does).
pub(crate) fn block_on<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T> {
    let runtime = io_runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(work.await);
    });
    rx.recv()
        .map_err(|_| Error::Internal("an object-storage request ended without an answer".into()))
}

/// The store a URL belongs to (`scheme://authority`, the key under which
/// a session shares one client) and the object prefix it names.
pub fn parse_location(url: &str) -> Result<(String, ObjectPath)> {
    let parsed = url::Url::parse(url)
        .map_err(|e| Error::InvalidArgument(format!("'{url}' is not a valid URL: {e}")))?;
    let (_, path) = object_store::ObjectStoreScheme::parse(&parsed)
        .map_err(|e| Error::InvalidArgument(format!("'{url}': {e}")))?;
    let prefix = ObjectPath::parse(path)
        .map_err(|e| Error::InvalidArgument(format!("'{url}': bad object path: {e}")))?;
    Ok((
        format!("{}://{}", parsed.scheme(), parsed.authority()),
        prefix,
    ))
}

/// A client for the store `url` is in, built with the `[storage]`
/// settings over the provider's environment variables.
pub fn build_store(url: &str, config: &Config) -> Result<Arc<dyn ObjectStore>> {
    let parsed = url::Url::parse(url)
        .map_err(|e| Error::InvalidArgument(format!("'{url}' is not a valid URL: {e}")))?;
    let (scheme, _) = object_store::ObjectStoreScheme::parse(&parsed)
        .map_err(|e| Error::InvalidArgument(format!("'{url}': {e}")))?;
    Ok(match scheme {
        object_store::ObjectStoreScheme::Memory => Arc::new(object_store::memory::InMemory::new()),
        #[cfg(feature = "cloud")]
        object_store::ObjectStoreScheme::AmazonS3 => cloud::s3(url, config)?,
        #[cfg(feature = "cloud")]
        object_store::ObjectStoreScheme::GoogleCloudStorage => cloud::gcs(url, config)?,
        #[cfg(feature = "cloud")]
        object_store::ObjectStoreScheme::MicrosoftAzure => cloud::azure(url, config)?,
        other => {
            let _ = config;
            return Err(Error::InvalidArgument(format!(
                "'{url}': {other:?} storage is not supported by this build (s3://, gs:// and \
                 az:// need shoal's `cloud` feature)"
            )));
        }
    })
}

#[cfg(feature = "cloud")]
mod cloud {
    //! The builders of the cloud providers' stores.
    use super::*;
    use object_store::{ClientOptions, RetryConfig};

    fn retry(config: &Config) -> RetryConfig {
        RetryConfig {
            max_retries: config.storage.max_retries,
            retry_timeout: Duration::from_millis(config.storage.retry_timeout_ms),
            ..RetryConfig::default()
        }
    }

    fn client(config: &Config, allow_http_env: &str) -> ClientOptions {
        let from_env = std::env::var(allow_http_env).is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        let timeout = Duration::from_millis(config.storage.request_timeout_ms);
        ClientOptions::new()
            .with_allow_http(config.storage.allow_http || from_env)
            .with_timeout(timeout)
            .with_connect_timeout(timeout)
    }

    fn unavailable(url: &str, e: object_store::Error) -> Error {
        Error::StorageUnavailable {
            url: url.to_string(),
            message: e.to_string(),
        }
    }

    pub(super) fn s3(url: &str, config: &Config) -> Result<Arc<dyn ObjectStore>> {
        let s = &config.storage;
        let mut b = object_store::aws::AmazonS3Builder::from_env()
            .with_url(url)
            .with_retry(retry(config))
            .with_client_options(client(config, "AWS_ALLOW_HTTP"));
        if !s.endpoint.is_empty() {
            b = b.with_endpoint(&s.endpoint);
        }
        if !s.region.is_empty() {
            b = b.with_region(&s.region);
        }
        if !s.access_key_id.is_empty() {
            b = b.with_access_key_id(&s.access_key_id);
        }
        if !s.secret_access_key.is_empty() {
            b = b.with_secret_access_key(&s.secret_access_key);
        }
        Ok(Arc::new(b.build().map_err(|e| unavailable(url, e))?))
    }

    pub(super) fn gcs(url: &str, config: &Config) -> Result<Arc<dyn ObjectStore>> {
        let b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
            .with_url(url)
            .with_retry(retry(config))
            .with_client_options(client(config, "GOOGLE_ALLOW_HTTP"));
        Ok(Arc::new(b.build().map_err(|e| unavailable(url, e))?))
    }

    pub(super) fn azure(url: &str, config: &Config) -> Result<Arc<dyn ObjectStore>> {
        let b = object_store::azure::MicrosoftAzureBuilder::from_env()
            .with_url(url)
            .with_retry(retry(config))
            .with_client_options(client(config, "AZURE_ALLOW_HTTP"));
        Ok(Arc::new(b.build().map_err(|e| unavailable(url, e))?))
    }
}

/// The size of a mirror file this process has not accounted yet: one an
/// earlier process downloaded (downloads are renamed into place whole,
/// and every file is checked against its checksums when read), adopted
/// instead of downloaded again.
fn left_by_earlier_process(local: &Path) -> Option<u64> {
    std::fs::metadata(local)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

/// The local disk cache of downloaded files, shared by every remote
/// dataset of a session: mirror path → size, weighed in KiB, bounded by
/// `cache.disk_bytes`; an evicted entry's file is deleted.
#[derive(Clone)]
pub struct DiskCache {
    files: moka::sync::Cache<PathBuf, u64>,
    dir: PathBuf,
    /// GETs and bytes fetched by every remote dataset of the session.
    io: Arc<IoCounts>,
}

impl std::fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskCache")
            .field("dir", &self.dir)
            .field("files", &self.files.entry_count())
            .finish()
    }
}

impl DiskCache {
    /// A cache under `config.cache.disk_dir` (or the temp dir) of at most
    /// `config.cache.disk_bytes`.
    pub fn new(config: &Config) -> DiskCache {
        let dir = if config.cache.disk_dir.is_empty() {
            std::env::temp_dir().join("shoal-cache")
        } else {
            PathBuf::from(&config.cache.disk_dir)
        };
        let files = moka::sync::Cache::builder()
            .max_capacity(config.cache.disk_bytes.div_ceil(1024))
            .weigher(|_path: &PathBuf, bytes: &u64| {
                u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
            })
            .eviction_listener(|path: Arc<PathBuf>, _bytes, cause| {
                if cause != moka::notification::RemovalCause::Replaced {
                    let _ = std::fs::remove_file(&*path);
                }
            })
            .build();
        DiskCache {
            files,
            dir,
            io: Arc::default(),
        }
    }

    /// GET requests and bytes fetched so far by the session's remote
    /// datasets.
    pub fn io(&self) -> StorageIo {
        self.io.read()
    }

    /// Bytes of files held (after pending evictions).
    pub fn bytes(&self) -> u64 {
        self.files.run_pending_tasks();
        self.files.iter().map(|(_, b)| b).sum()
    }

    /// The mirror directory of the dataset at `url`: a readable name and a
    /// hash, so that two URLs never share one.
    fn mirror_of(&self, url: &str) -> PathBuf {
        let readable: String = url
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(80)
            .collect();
        self.dir.join(format!(
            "{readable}-{:08x}",
            crc32fast::hash(url.as_bytes())
        ))
    }
}

/// One dataset on object storage: its store, its prefix there, and its
/// local mirror.
pub struct Remote {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    mirror: PathBuf,
    disk: DiskCache,
    /// Files written into the mirror by this process and not uploaded yet
    /// (paths relative to the dataset).
    unsent: Mutex<HashSet<String>>,
    /// The last listing of versions and when it was made.
    versions: Mutex<Option<(Instant, Vec<u64>)>>,
    refresh: Duration,
    /// Sizes of objects learned by [`Remote::size`] (files never change
    /// once written; a deleted one is forgotten).
    sizes: Mutex<std::collections::HashMap<String, u64>>,
    /// GETs one read keeps in flight (`storage.max_concurrent_gets`).
    max_gets: usize,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field("mirror", &self.mirror)
            .finish()
    }
}

impl Remote {
    /// The dataset at `url` in `store` under `prefix`, mirrored under the
    /// disk cache.
    pub fn new(
        url: &str,
        store: Arc<dyn ObjectStore>,
        prefix: ObjectPath,
        disk: DiskCache,
        config: &Config,
    ) -> Result<Remote> {
        let mirror = disk.mirror_of(url);
        // Writers create files in these folders as in a local dataset.
        for dir in [
            crate::storage::fragment::DATA_DIR,
            crate::storage::deletions::DELETIONS_DIR,
            crate::storage::index_meta::INDICES_DIR,
        ] {
            let path = mirror.join(dir);
            std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        }
        Ok(Remote {
            url: url.trim_end_matches('/').to_string(),
            store,
            prefix,
            mirror,
            disk,
            unsent: Mutex::default(),
            versions: Mutex::default(),
            refresh: Duration::from_millis(config.storage.refresh_ms),
            sizes: Mutex::default(),
            max_gets: config.storage.max_concurrent_gets.max(1),
        })
    }

    /// The dataset's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The local mirror directory.
    pub fn mirror(&self) -> &Path {
        &self.mirror
    }

    fn object(&self, rel: &str) -> ObjectPath {
        rel.split('/')
            .filter(|p| !p.is_empty())
            .fold(self.prefix.clone(), |p, part| p.join(part))
    }

    /// Counts requests to this session's totals and the current search's.
    fn record(&self, gets: u64, bytes: u64) {
        io_meter::record(&self.disk.io, gets, bytes);
    }

    fn unavailable(&self, rel: &str, e: impl std::fmt::Display) -> Error {
        Error::StorageUnavailable {
            url: format!("{}/{rel}", self.url),
            message: e.to_string(),
        }
    }

    /// The bytes of `rel`, or `None` when there is no such object.
    pub fn get(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        let (store, path) = (self.store.clone(), self.object(rel));
        let got = block_on(async move {
            match store.get(&path).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        let got = got.map_err(|e| self.unavailable(rel, e))?;
        if let Some(b) = &got {
            self.record(1, b.len() as u64);
        }
        Ok(got.map(|b| b.to_vec()))
    }

    /// Opens `rel` from the mirror, downloaded first unless the disk cache
    /// holds it. `Ok(None)`: there is no such object.
    pub fn open(&self, rel: &str) -> Result<Option<std::fs::File>> {
        let local = self.mirror.join(rel);
        self.open_cached(&local, &|| self.download(rel, &local))
    }

    /// Opens the mirror file `local`: the copy the disk cache holds (or an
    /// earlier process left), or else a new one from `download` (one
    /// download at a time per file). The cache may evict the copy between
    /// the download and the open (another download made room): then it is
    /// fetched again. `Ok(None)`: `download` found no object.
    fn open_cached(
        &self,
        local: &Path,
        download: &dyn Fn() -> Result<u64>,
    ) -> Result<Option<std::fs::File>> {
        for _ in 0..3 {
            if !(self.disk.files.contains_key(local) && local.exists()) {
                if let Some(bytes) = left_by_earlier_process(local) {
                    self.disk.files.insert(local.to_path_buf(), bytes);
                } else {
                    self.disk.files.invalidate(local);
                    let loaded = self.disk.files.try_get_with(local.to_path_buf(), download);
                    if let Err(e) = loaded {
                        return match &*e {
                            Error::DatasetNotFound(_) => Ok(None),
                            other => Err(other.clone()),
                        };
                    }
                }
            }
            match std::fs::File::open(local) {
                Ok(file) => return Ok(Some(file)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(local, e)),
            }
        }
        Err(Error::Internal(format!(
            "{} was evicted from the disk cache three times while being opened; raise \
             cache.disk_bytes",
            local.display()
        )))
    }

    /// A temp file beside the mirror path `local` (its folder made), for a
    /// download to be renamed into place whole: a reader never sees half a
    /// file.
    fn temp_beside(local: &Path) -> Result<(PathBuf, std::fs::File)> {
        let dir = local.parent().ok_or_else(|| {
            Error::Internal(format!("mirror path {} has no parent", local.display()))
        })?;
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tmp = dir.join(format!(".part-{:016x}", rand::random::<u64>()));
        let file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        Ok((tmp, file))
    }

    /// Streams `rel` into a temp file beside its mirror path, then renames
    /// it into place; its length. `DatasetNotFound` stands for a missing
    /// object here.
    fn download(&self, rel: &str, local: &Path) -> Result<u64> {
        let (tmp, mut file) = Self::temp_beside(local)?;
        let (store, path) = (self.store.clone(), self.object(rel));
        let (tx, rx) = std::sync::mpsc::sync_channel::<bytes::Bytes>(4);
        // The runtime streams the body; this thread writes it to disk.
        let streamed = std::thread::scope(|s| {
            let writer = s.spawn(move || -> std::io::Result<u64> {
                let mut n = 0u64;
                for chunk in rx {
                    file.write_all(&chunk)?;
                    n += chunk.len() as u64;
                }
                file.sync_all()?;
                Ok(n)
            });
            let got = block_on(async move {
                let mut stream = match store.get(&path).await {
                    Ok(r) => r.into_stream(),
                    Err(e) => return Err(e),
                };
                while let Some(chunk) = stream.next().await {
                    if tx.send(chunk?).is_err() {
                        break;
                    }
                }
                Ok(())
            });
            let written = writer.join();
            (got, written)
        });
        let cleanup = |e: Error| {
            let _ = std::fs::remove_file(&tmp);
            e
        };
        match streamed {
            (Ok(Ok(())), Ok(Ok(bytes))) => {
                self.record(1, bytes);
                std::fs::rename(&tmp, local).map_err(|e| cleanup(Error::io(local, e)))?;
                Ok(bytes)
            }
            (Ok(Err(object_store::Error::NotFound { .. })), _) => {
                Err(cleanup(Error::DatasetNotFound(local.to_path_buf())))
            }
            (Ok(Err(e)), _) => Err(cleanup(self.unavailable(rel, e))),
            (Err(e), _) => Err(cleanup(e)),
            (_, Ok(Err(e))) => Err(cleanup(Error::io(&tmp, e))),
            (_, Err(_)) => Err(cleanup(Error::Internal("mirror writer panicked".into()))),
        }
    }

    /// Notes that `rel` was written into the mirror and must be uploaded
    /// by the commit that names it.
    pub fn wrote(&self, rel: &str) {
        self.unsent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(rel.to_string());
    }

    /// Uploads every written, unsent file for which `wanted` holds, then
    /// accounts it in the disk cache.
    pub fn upload_written(&self, wanted: impl Fn(&str) -> bool) -> Result<()> {
        let todo: Vec<String> = self
            .unsent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|rel| wanted(rel))
            .cloned()
            .collect();
        for rel in todo {
            let local = self.mirror.join(&rel);
            let bytes = self.upload(&rel, &local)?;
            self.unsent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&rel);
            self.disk.files.insert(local, bytes);
        }
        Ok(())
    }

    /// Uploads the mirror file `local` as `rel` (multipart for large
    /// files); its size.
    fn upload(&self, rel: &str, local: &Path) -> Result<u64> {
        let mut file = std::fs::File::open(local).map_err(|e| Error::io(local, e))?;
        let (store, path) = (self.store.clone(), self.object(rel));
        let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(2);
        let sent = std::thread::scope(|s| {
            let reader = s.spawn(move || -> std::io::Result<u64> {
                let mut n = 0u64;
                loop {
                    let mut buf = vec![0u8; 8 << 20];
                    let got = file.read(&mut buf)?;
                    if got == 0 {
                        return Ok(n);
                    }
                    buf.truncate(got);
                    n += got as u64;
                    if tx.blocking_send(bytes::Bytes::from(buf)).is_err() {
                        return Ok(n);
                    }
                }
            });
            let put = block_on(async move {
                use tokio::io::AsyncWriteExt;
                let mut w = object_store::buffered::BufWriter::new(store, path);
                while let Some(chunk) = rx.recv().await {
                    if let Err(e) = w.put(chunk).await {
                        let _ = w.abort().await;
                        return Err(e.to_string());
                    }
                }
                w.shutdown().await.map_err(|e| e.to_string())
            });
            (put, reader.join())
        });
        match sent {
            (Ok(Ok(())), Ok(Ok(bytes))) => Ok(bytes),
            (Ok(Err(e)), _) => Err(self.unavailable(rel, e)),
            (Err(e), _) => Err(e),
            (_, Ok(Err(e))) => Err(Error::io(local, e)),
            (_, Err(_)) => Err(Error::Internal("upload reader panicked".into())),
        }
    }

    /// Creates `rel` with `bytes` unless it exists (`Ok(false)` then):
    /// the conditional put that makes a commit atomic.
    pub fn put_if_absent(&self, rel: &str, bytes: Vec<u8>) -> Result<bool> {
        let (store, path) = (self.store.clone(), self.object(rel));
        let put = block_on(async move {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            store.put_opts(&path, PutPayload::from(bytes), opts).await
        })?;
        match put {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(self.unavailable(rel, e)),
        }
    }

    /// Objects under the folder `rel` (recursively), as paths relative to
    /// the dataset with their sizes and when they were last modified
    /// (milliseconds since the Unix epoch).
    pub fn list(&self, rel: &str) -> Result<Vec<(String, u64, u64)>> {
        let (store, path) = (self.store.clone(), self.object(rel));
        let prefix = self.prefix.clone();
        let listed = block_on(async move {
            let mut out = Vec::new();
            let mut stream = store.list(Some(&path));
            while let Some(meta) = stream.next().await {
                let meta = meta?;
                let rel: Vec<String> = match meta.location.prefix_match(&prefix) {
                    Some(parts) => parts.map(|p| p.as_ref().to_string()).collect(),
                    None => continue,
                };
                let modified = u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0);
                out.push((rel.join("/"), meta.size, modified));
            }
            Ok::<_, object_store::Error>(out)
        })?;
        listed.map_err(|e| self.unavailable(rel, e))
    }

    /// The size of the object `rel`, or `None` when there is none.
    pub fn size(&self, rel: &str) -> Result<Option<u64>> {
        let known = self
            .sizes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(rel)
            .copied();
        if known.is_some() {
            return Ok(known);
        }
        let (store, path) = (self.store.clone(), self.object(rel));
        let head = block_on(async move {
            match store.head(&path).await {
                Ok(meta) => Ok(Some(meta.size)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        let size = head.map_err(|e| self.unavailable(rel, e))?;
        if let Some(n) = size {
            self.sizes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(rel.to_string(), n);
        }
        Ok(size)
    }

    /// Deletes the object `rel` (a missing one is not an error) and its
    /// mirror copy.
    pub fn delete(&self, rel: &str) -> Result<()> {
        let (store, path) = (self.store.clone(), self.object(rel));
        let gone = block_on(async move {
            match store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        })?;
        gone.map_err(|e| self.unavailable(rel, e))?;
        self.sizes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(rel);
        let local = self.mirror.join(rel);
        self.disk.files.invalidate(&local);
        let _ = std::fs::remove_file(&local);
        Ok(())
    }

    /// The committed versions, ascending: the cached listing while it is
    /// younger than `storage.refresh_ms`, unless `fresh`.
    pub fn versions(&self, dir: &str, suffix: &str, fresh: bool) -> Result<Vec<u64>> {
        if !fresh {
            let cached = self.versions.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, list)) = &*cached {
                if at.elapsed() < self.refresh {
                    return Ok(list.clone());
                }
            }
        }
        let mut list: Vec<u64> = self
            .list(dir)?
            .into_iter()
            .filter_map(|(rel, _, _)| {
                let name = rel.rsplit('/').next()?;
                let stem = name.strip_suffix(suffix)?;
                (stem.len() == 20).then(|| stem.parse().ok())?
            })
            .collect();
        list.sort_unstable();
        *self.versions.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), list.clone()));
        Ok(list)
    }

    /// Forgets the cached listing (after a commit, so the committer sees
    /// its own version at once).
    pub fn forget_versions(&self) {
        *self.versions.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths_are_told_apart() {
        assert!(is_url("s3://bucket/a/b"));
        assert!(is_url("memory:///x"));
        assert!(is_url("file:///tmp/x"));
        assert!(!is_url("/tmp/x"));
        assert!(!is_url("data/x"));
        assert!(!is_url("C:\\x"));
        assert!(!is_url("://x"));
        assert_eq!(
            file_url_path("file:///tmp/x"),
            Some(PathBuf::from("/tmp/x"))
        );
        assert_eq!(file_url_path("s3://b/x"), None);
        assert_eq!(
            location_of(Path::new("file:///tmp/x")),
            Location::Local(std::borrow::Cow::Owned(PathBuf::from("/tmp/x")))
        );
        assert_eq!(
            location_of(Path::new("s3://b/x")),
            Location::Remote("s3://b/x")
        );
        assert!(matches!(
            location_of(Path::new("data/x")),
            Location::Local(_)
        ));
    }
}
