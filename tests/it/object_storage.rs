//! Datasets on object storage: the storage suite (create, append, delete,
//! index, optimize, search, versions, corruption checks), with paged and
//! with Arrow IPC fragments, on an in-memory store and on a local S3
//! server (moto, started by the test), concurrent
//! writers on one bucket, compaction and cleanup on a store, the disk cache
//! saving GETs, and unreachable storage as a clear error.
//!
//! Every check compares the remote dataset against the same operations on a
//! local directory (exact searches, bit for bit) or against a second
//! process's view of the same URL (a fresh session with a cold cache).

use crate::common::*;
use rand::SeedableRng;
use shoal::object_store::memory::InMemory;
use shoal::object_store::path::Path as ObjectPath;
use shoal::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use shoal::{
    BatchQuery, Config, Dataset, Engine, Error, FragmentLayout, IndexKind, IndexParams, Metric,
    Query, SearchMode, Session,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const DIM: usize = 8;

/// The config of a test session: its disk cache in `cache`, versions
/// listed again after 50 ms, and (for the S3 server) its endpoint.
fn config_for(cache: &std::path::Path, s3_endpoint: Option<&str>) -> Config {
    let mut config = Config::default();
    config.cache.disk_dir = cache.display().to_string();
    config.storage.refresh_ms = 50;
    if let Some(endpoint) = s3_endpoint {
        config.storage.endpoint = endpoint.to_string();
        config.storage.allow_http = true;
        config.storage.region = "us-east-1".into();
        config.storage.access_key_id = "testing".into();
        config.storage.secret_access_key = "testing".into();
    }
    config
}

/// Where a suite runs: an in-memory store shared by registering it in
/// every session, or an S3 endpoint every session reaches by config.
#[derive(Clone)]
enum Backend {
    Memory(Arc<dyn ObjectStore>),
    S3 { endpoint: String },
}

impl Backend {
    /// A session (a replica) with its own disk cache in `cache`.
    fn session(&self, cache: &std::path::Path, url: &str) -> Session {
        self.session_writing(cache, url, FragmentLayout::Paged)
    }

    /// [`Backend::session`] writing new fragments in `layout`.
    fn session_writing(
        &self,
        cache: &std::path::Path,
        url: &str,
        layout: FragmentLayout,
    ) -> Session {
        let endpoint = match self {
            Backend::Memory(_) => None,
            Backend::S3 { endpoint } => Some(endpoint.as_str()),
        };
        let mut config = config_for(cache, endpoint);
        config.storage.fragment_layout = layout;
        let session = Session::new(config);
        if let Backend::Memory(store) = self {
            session.register_object_store(url, store.clone()).unwrap();
        }
        session
    }

    /// The store itself, for damaging an object behind shoal's back.
    fn raw(&self, bucket: &str) -> Arc<dyn ObjectStore> {
        match self {
            Backend::Memory(store) => store.clone(),
            Backend::S3 { endpoint } => Arc::new(
                shoal::object_store::aws::AmazonS3Builder::new()
                    .with_endpoint(endpoint)
                    .with_allow_http(true)
                    .with_region("us-east-1")
                    .with_access_key_id("testing")
                    .with_secret_access_key("testing")
                    .with_bucket_name(bucket)
                    .build()
                    .unwrap(),
            ),
        }
    }
}

fn queries(rows: &[Row]) -> Vec<Vec<f32>> {
    (0..12)
        .map(|i| rows[i * 53 % rows.len()].vector.clone())
        .collect()
}

fn exact_searches(rows: &[Row]) -> Vec<BatchQuery> {
    vec![
        BatchQuery::new(queries(rows), 10).mode(SearchMode::Exact),
        BatchQuery::new(queries(rows), 20)
            .mode(SearchMode::Exact)
            .filter("len < 9")
            .select(["category", "len"]),
    ]
}

fn ann_searches(rows: &[Row]) -> Vec<BatchQuery> {
    vec![
        BatchQuery::new(queries(rows), 10).nprobes(3),
        BatchQuery::new(queries(rows), 7)
            .nprobes(4)
            .filter("category = 'noun'")
            .select(["len"]),
    ]
}

/// The same writes on `ds` (remote) and `local`: three appends, a
/// delete, an index, another append, an optimize. Returns the rows.
fn write_both(ds: &mut Dataset, local: &mut Dataset) -> Vec<Row> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut rows = Vec::new();
    for n in [300, 200, 100] {
        let more = make_rows(&mut rng, rows.len() as i64, n, DIM);
        for d in [&mut *ds, &mut *local] {
            d.append([batch_of(&more, DIM)]).unwrap();
        }
        rows.extend(more);
    }
    for d in [&mut *ds, &mut *local] {
        assert!(d.delete("len = 3").unwrap().rows > 0);
    }
    for d in [&mut *ds, &mut *local] {
        d.create_index(None, IndexParams::new(IndexKind::IvfFlat, 8))
            .unwrap();
    }
    let more = make_rows(&mut rng, rows.len() as i64, 150, DIM);
    for d in [&mut *ds, &mut *local] {
        d.append([batch_of(&more, DIM)]).unwrap();
    }
    rows.extend(more);
    for d in [&mut *ds, &mut *local] {
        assert_eq!(d.optimize().unwrap().rows, 150);
    }
    rows
}

/// The storage suite on `url` (whose object prefix in its bucket or
/// store is `prefix`).
/// The suite on a dataset whose fragments are written in `layout` (paged,
/// or Arrow IPC as before manifest format 4), against a local one
/// written the same way.
fn storage_suite(backend: &Backend, url: &str, bucket: &str, prefix: &str, layout: FragmentLayout) {
    let caches = tempfile::tempdir().unwrap();
    let writer = backend.session_writing(&caches.path().join("a"), url, layout);
    let local_dir = tempfile::tempdir().unwrap();
    let mut local_config = Config::default();
    local_config.storage.fragment_layout = layout;
    let mut local =
        Dataset::create(local_dir.path(), schema(DIM, Metric::L2), local_config).unwrap();
    let mut ds = writer.create(url, schema(DIM, Metric::L2)).unwrap();
    assert_eq!(ds.uri(), url);
    assert!(matches!(
        writer.create(url, schema(DIM, Metric::L2)),
        Err(Error::DatasetExists(_))
    ));
    let rows = write_both(&mut ds, &mut local);
    assert!(ds
        .manifest()
        .fragments
        .iter()
        .all(|f| f.paged.is_some() == (layout == FragmentLayout::Paged)));
    assert_eq!(ds.version(), local.version());
    assert_eq!(ds.count_rows(), local.count_rows());
    for b in exact_searches(&rows) {
        assert_eq!(seen(&ds, &b), seen(&local, &b), "remote = local, exact");
    }

    // A second process (fresh session, cold cache) sees the same dataset.
    let reader = backend.session(&caches.path().join("b"), url);
    let other = reader.open(url).unwrap();
    assert_eq!(other.version(), ds.version());
    let history: Vec<(u64, String)> = other
        .versions()
        .unwrap()
        .into_iter()
        .map(|v| (v.version, v.operation))
        .collect();
    let local_history: Vec<(u64, String)> = local
        .versions()
        .unwrap()
        .into_iter()
        .map(|v| (v.version, v.operation))
        .collect();
    assert_eq!(history, local_history);
    for b in exact_searches(&rows).iter().chain(&ann_searches(&rows)) {
        assert_eq!(seen(&other, b), seen(&ds, b), "reader = writer");
    }
    let old = other.checkout(4).unwrap();
    assert_eq!(old.count_rows(), 600);
    assert!(matches!(
        reader.open(format!("{url}-missing")),
        Err(Error::DatasetNotFound(_))
    ));

    // Corruption: a flipped byte in a fragment object is caught by a
    // replica that downloads it, never returned as data.
    let file = &other.manifest().fragments[0].file;
    let object = ObjectPath::from(format!("{prefix}/data/{file}"));
    let raw = backend.raw(bucket);
    let mut bytes = shoal_get(&raw, &object);
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    let payload = PutPayload::from(bytes);
    let store = raw.clone();
    run_async(async move { store.put(&object, payload).await.map(|_| ()) }).unwrap();
    let damaged_reader = backend.session(&caches.path().join("c"), url);
    let damaged = damaged_reader.open(url).unwrap();
    let err = damaged
        .search_batch(&BatchQuery::new(queries(&rows), 10).mode(SearchMode::Exact))
        .unwrap_err();
    assert!(
        matches!(err, Error::Corrupt { .. }),
        "a damaged fragment is reported as corrupt: {err}"
    );
}

fn run_async<T: Send + 'static>(work: impl std::future::Future<Output = T> + Send + 'static) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(work)
}

fn shoal_get(store: &Arc<dyn ObjectStore>, path: &ObjectPath) -> Vec<u8> {
    let (store, path) = (store.clone(), path.clone());
    run_async(async move { store.get(&path).await.unwrap().bytes().await.unwrap() }).to_vec()
}

#[test]
fn the_storage_suite_runs_on_an_in_memory_store() {
    let backend = Backend::Memory(Arc::new(InMemory::new()));
    storage_suite(
        &backend,
        "memory:///suite/ds",
        "",
        "suite/ds",
        FragmentLayout::Paged,
    );
    storage_suite(
        &backend,
        "memory:///suite/old",
        "",
        "suite/old",
        FragmentLayout::ArrowIpc,
    );
}

/// Two engines (replicas, each with its own session and cache) append to
/// one dataset 50 times each at once: every append is committed exactly
/// once or answered `CommitConflict`, and the rows are those committed.
fn concurrent_appends(backend: &Backend, data_url: &str) {
    let caches = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let a = Engine::with_session(
            backend.session(&caches.path().join("a"), data_url),
            data_url,
        )
        .unwrap();
        let b = Engine::with_session(
            backend.session(&caches.path().join("b"), data_url),
            data_url,
        )
        .unwrap();
        a.create_dataset("ds", schema(DIM, Metric::L2))
            .await
            .unwrap();
        assert_eq!(b.dataset_names().await.unwrap(), vec!["ds".to_string()]);
        let (ha, hb) = (
            a.dataset("ds").await.unwrap(),
            b.dataset("ds").await.unwrap(),
        );
        // Both writers start at once, from the same version: their first
        // commits race for one version number.
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let writer = |handle: shoal::DatasetHandle, seed: u64| {
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let (mut committed, mut conflicts) = (0u64, 0u64);
                let mut ids = Vec::new();
                for i in 0..50 {
                    let first = seed as i64 * 10_000 + i * 4;
                    let rows = make_rows(&mut rng, first, 4, DIM);
                    match handle.append(vec![batch_of(&rows, DIM)]).await {
                        Ok(commit) => {
                            committed += commit.rows;
                            ids.extend(first..first + 4);
                        }
                        Err(Error::CommitConflict { .. }) => conflicts += 1,
                        Err(e) => panic!("append failed: {e}"),
                    }
                }
                (committed, conflicts, ids)
            })
        };
        let (ra, rb) = (writer(ha, 1), writer(hb, 2));
        let (ra, rb) = (ra.await.unwrap(), rb.await.unwrap());
        assert_eq!(
            ra.1 + rb.1 + (ra.0 + rb.0) / 4,
            100,
            "each append answered once"
        );
        let fresh = backend
            .session(&caches.path().join("c"), data_url)
            .open(format!("{data_url}/ds"))
            .unwrap();
        assert_eq!(fresh.count_rows(), ra.0 + rb.0, "rows = committed appends");
        let redone = a.stats().write_conflicts + b.stats().write_conflicts;
        eprintln!(
            "{data_url}: appends committed {} + {}, conflicts answered {} + {}, writes redone after a conflict {redone}, version {}",
            ra.0 / 4,
            rb.0 / 4,
            ra.1,
            rb.1,
            fresh.version()
        );
        assert!(
            redone + ra.1 + rb.1 > 0,
            "the writers never conflicted: nothing here tested a race"
        );
        // The rows there are exactly those of the committed appends, each
        // once.
        let all = fresh
            .search(&Query::new(vec![0.0; DIM], 400).mode(SearchMode::Exact))
            .unwrap();
        let mut found: Vec<i64> = all.hits.iter().map(|h| h.id).collect();
        found.sort_unstable();
        let mut committed: Vec<i64> = ra.2.iter().chain(&rb.2).copied().collect();
        committed.sort_unstable();
        assert_eq!(found, committed);
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn two_engines_appending_at_once_on_one_store_lose_no_commit() {
    // A little latency per request, as a real store has, widens the
    // window in which two commits race.
    concurrent_appends(
        &Backend::Memory(Arc::new(SlowCountingStore::new(
            Duration::from_millis(1),
            LostAnswer::ConnectionError,
        ))),
        "memory:///replicas",
    );
}

#[test]
fn a_thousand_small_appends_on_a_store_compact_and_clean_up_with_identical_answers() {
    let caches = tempfile::tempdir().unwrap();
    let url = "memory:///many/ds";
    let store = Arc::new(SlowCountingStore::new(
        Duration::ZERO,
        LostAnswer::ConnectionError,
    ));
    let backend = Backend::Memory(store.clone());
    let session = backend.session(caches.path(), url);
    let mut ds = session.create(url, schema(DIM, Metric::L2)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut rows = Vec::new();
    for _ in 0..1_000 {
        let more = make_rows(&mut rng, rows.len() as i64, 2, DIM);
        ds.append([batch_of(&more, DIM)]).unwrap();
        rows.extend(more);
    }
    assert_eq!(ds.manifest().fragments.len(), 1_000);
    let searches = exact_searches(&rows);
    let before: Vec<Seen> = searches.iter().map(|b| seen(&ds, b)).collect();
    let pinned = ds.checkout(500).unwrap();
    let pinned_before: Vec<Seen> = searches.iter().map(|b| seen(&pinned, b)).collect();

    ds.compact().unwrap();
    assert!(ds.manifest().fragments.len() <= 2, "a handful of fragments");
    let after: Vec<Seen> = searches.iter().map(|b| seen(&ds, b)).collect();
    assert_eq!(after, before, "answers bit-identical after compaction");

    // Cleanup runs while the pinned old version keeps searching: the store
    // holds cleanup's first removal of a data file (its manifests are gone
    // by then) until the searcher has searched three rounds.
    store.deletes.held.store(true, Ordering::SeqCst);
    let searcher = {
        let (pinned, searches, store) = (pinned.clone(), searches.clone(), store.clone());
        let pinned_before = pinned_before.clone();
        std::thread::spawn(move || {
            // Released however this thread ends: a failed assertion must
            // fail the test, not leave cleanup waiting forever.
            struct Release(Arc<DeleteGate>);
            impl Drop for Release {
                fn drop(&mut self) {
                    self.0.held.store(false, Ordering::SeqCst);
                }
            }
            let _release = Release(store.deletes.clone());
            let started = std::time::Instant::now();
            while store.deletes.waiting.load(Ordering::SeqCst) == 0 {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "no data file removed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            for _ in 0..3 {
                for (b, expected) in searches.iter().zip(&pinned_before) {
                    assert_eq!(&seen(&pinned, b), expected, "pinned version during cleanup");
                }
            }
        })
    };
    let report = ds.cleanup(1, Duration::ZERO).unwrap();
    searcher.join().unwrap();
    assert!(report.versions_removed.len() > 900, "{report:?}");
    assert!(
        !report.versions_removed.contains(&500),
        "the pinned version is kept"
    );
    // Read cold: a replica with an empty disk cache reads the kept versions
    // from the files cleanup left in the store, which are all there.
    let fresh = backend
        .session(&caches.path().join("fresh"), url)
        .open(url)
        .unwrap();
    let versions: Vec<u64> = fresh
        .versions()
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(versions, vec![500, ds.version()]);
    let again: Vec<Seen> = searches.iter().map(|b| seen(&fresh, b)).collect();
    assert_eq!(
        again, before,
        "a replica reads the cleaned-up dataset alike"
    );
    let old = fresh.checkout(500).unwrap();
    let old_again: Vec<Seen> = searches.iter().map(|b| seen(&old, b)).collect();
    assert_eq!(old_again, pinned_before, "the pinned version, read cold");
    for kept in [&old, &fresh] {
        for file in kept.manifest().files() {
            assert!(
                stored(&backend.raw(""), &format!("many/ds/{file}")),
                "version {} names {file}, which is gone from the store",
                kept.version()
            );
        }
    }
}

/// Is there an object at `path`, or under it (an index segment's folder)?
fn stored(store: &Arc<dyn ObjectStore>, path: &str) -> bool {
    let (store, path) = (store.clone(), ObjectPath::from(path));
    run_async(async move {
        use futures_util::StreamExt;
        store.head(&path).await.is_ok() || store.list(Some(&path)).next().await.is_some()
    })
}

/// A store that sleeps before every request and counts GETs (what the
/// disk cache saves, seen from the store's side), and can lose the answer
/// of conditional puts it took (a manifest's commit).
#[derive(Debug)]
struct SlowCountingStore {
    inner: InMemory,
    gets: AtomicU64,
    latency: Duration,
    /// How many of the next successful conditional puts lose their answer.
    lose_answers: AtomicU64,
    /// What the writer hears instead of a lost answer.
    lost_as: LostAnswer,
    /// Holds deletes of data files while asked to.
    deletes: Arc<DeleteGate>,
}

/// Holds each delete of a data file (`…/data/…`) while `held` is set,
/// counting the deletes that wait: a test can act while a cleanup is
/// certainly in the middle of removing files.
#[derive(Debug, Default)]
struct DeleteGate {
    held: std::sync::atomic::AtomicBool,
    waiting: AtomicU64,
}

impl DeleteGate {
    async fn pass(&self, path: &ObjectPath) {
        if path.as_ref().contains("/data/") && self.held.load(Ordering::SeqCst) {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            while self.held.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
}

/// What a writer hears when the store took its conditional put and the
/// answer was lost on the way back.
#[derive(Clone, Copy, Debug)]
enum LostAnswer {
    /// The client sent the put again, and the store refused it: the
    /// object exists (S3's 412 to `If-None-Match: *`).
    RetriedAndRefused,
    /// The client gave up: a connection error.
    ConnectionError,
}

impl SlowCountingStore {
    fn new(latency: Duration, lost_as: LostAnswer) -> SlowCountingStore {
        SlowCountingStore {
            inner: InMemory::new(),
            gets: AtomicU64::new(0),
            latency,
            lose_answers: AtomicU64::new(0),
            lost_as,
            deletes: Arc::default(),
        }
    }
}

impl std::fmt::Display for SlowCountingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlowCountingStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for SlowCountingStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: shoal::object_store::PutOptions,
    ) -> shoal::object_store::Result<shoal::object_store::PutResult> {
        tokio::time::sleep(self.latency).await;
        let conditional = matches!(opts.mode, shoal::object_store::PutMode::Create);
        let put = self
            .inner
            .put_opts(location, payload.clone(), opts.clone())
            .await?;
        let lose = conditional
            && self
                .lose_answers
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if !lose {
            return Ok(put);
        }
        match self.lost_as {
            LostAnswer::RetriedAndRefused => self.inner.put_opts(location, payload, opts).await,
            LostAnswer::ConnectionError => Err(shoal::object_store::Error::Generic {
                store: "test",
                source: "connection reset before the answer".into(),
            }),
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: shoal::object_store::PutMultipartOptions,
    ) -> shoal::object_store::Result<Box<dyn shoal::object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: shoal::object_store::GetOptions,
    ) -> shoal::object_store::Result<shoal::object_store::GetResult> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &ObjectPath,
        ranges: &[std::ops::Range<u64>],
    ) -> shoal::object_store::Result<Vec<bytes::Bytes>> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: futures_util::stream::BoxStream<
            'static,
            shoal::object_store::Result<ObjectPath>,
        >,
    ) -> futures_util::stream::BoxStream<'static, shoal::object_store::Result<ObjectPath>> {
        use futures_util::StreamExt;
        let gate = self.deletes.clone();
        let gated = locations.then(move |location| {
            let gate = gate.clone();
            async move {
                if let Ok(path) = &location {
                    gate.pass(path).await;
                }
                location
            }
        });
        self.inner.delete_stream(gated.boxed())
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> futures_util::stream::BoxStream<
        'static,
        shoal::object_store::Result<shoal::object_store::ObjectMeta>,
    > {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> shoal::object_store::Result<shoal::object_store::ListResult> {
        tokio::time::sleep(self.latency).await;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: shoal::object_store::CopyOptions,
    ) -> shoal::object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[test]
fn the_second_search_over_the_same_partitions_issues_no_get() {
    let caches = tempfile::tempdir().unwrap();
    let url = "memory:///slow/ds";
    let store = Arc::new(SlowCountingStore::new(
        Duration::from_millis(5),
        LostAnswer::ConnectionError,
    ));
    let writer = Backend::Memory(store.clone()).session(&caches.path().join("w"), url);
    let mut ds = writer.create(url, schema(DIM, Metric::L2)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let rows = make_rows(&mut rng, 0, 800, DIM);
    ds.append([batch_of(&rows, DIM)]).unwrap();
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 8))
        .unwrap();

    // A replica with a cold cache: the first search downloads the files it
    // needs, the second finds them all on local disk.
    let mut config = config_for(&caches.path().join("r"), None);
    config.storage.refresh_ms = 60_000;
    let replica = Session::new(config);
    replica.register_object_store(url, store.clone()).unwrap();
    let opened = replica.open(url).unwrap();
    let search = BatchQuery::new(queries(&rows), 10)
        .nprobes(3)
        .select(["len"]);
    let at_open = store.gets.load(Ordering::SeqCst);
    let first = seen(&opened, &search);
    let after_first = store.gets.load(Ordering::SeqCst);
    assert!(after_first > at_open, "the first search downloads");
    let second = seen(&opened, &search);
    assert_eq!(second, first);
    eprintln!(
        "GETs: opening {at_open}, first search {}, second search {}",
        after_first - at_open,
        store.gets.load(Ordering::SeqCst) - after_first
    );
    assert_eq!(
        store.gets.load(Ordering::SeqCst),
        after_first,
        "the second search over the same partitions issues no GET"
    );
    assert!(replica.disk_cache().bytes() > 0);
    // Partitions were read by ranged GETs: the replica holds the ranges it
    // probed, never the whole partitions file.
    let mut names = Vec::new();
    let mut dirs = vec![caches.path().join("r")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            if entry.path().is_dir() {
                dirs.push(entry.path());
            }
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    assert!(!names.iter().any(|n| n == "partitions.bin"), "{names:?}");
    assert!(
        names.iter().any(|n| n == "partitions.bin.ranges"),
        "{names:?}"
    );
}

/// A conditional put the store took but whose answer was lost (retried and
/// refused, or a connection error) is a commit, not a conflict or an
/// outage: the writer finds its own nonce in the manifest. Reported as a
/// conflict, the engine would redo the append and store its rows twice.
#[test]
fn a_commit_whose_answer_was_lost_is_reported_as_committed_once() {
    for lost_as in [LostAnswer::RetriedAndRefused, LostAnswer::ConnectionError] {
        let caches = tempfile::tempdir().unwrap();
        let url = "memory:///lost";
        let store = Arc::new(SlowCountingStore::new(Duration::ZERO, lost_as));
        let backend = Backend::Memory(store.clone());
        let mut ds = backend
            .session(&caches.path().join("w"), url)
            .create(format!("{url}/ds"), schema(DIM, Metric::L2))
            .unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        store.lose_answers.store(1, Ordering::SeqCst);
        let commit = ds
            .append([batch_of(&make_rows(&mut rng, 0, 10, DIM), DIM)])
            .unwrap_or_else(|e| panic!("{lost_as:?}: the commit took, yet: {e}"));
        assert_eq!(store.lose_answers.load(Ordering::SeqCst), 0, "lost one");
        assert_eq!((commit.version, commit.rows), (2, 10), "{lost_as:?}");

        // Through an engine, which redoes a write that conflicted.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let engine_session = backend.session(&caches.path().join("e"), url);
        let rows = make_rows(&mut rng, 10, 10, DIM);
        let (commit, stats) = runtime.block_on(async {
            let engine = Engine::with_session(engine_session, url).unwrap();
            let handle = engine.dataset("ds").await.unwrap();
            store.lose_answers.store(1, Ordering::SeqCst);
            let commit = handle.append(vec![batch_of(&rows, DIM)]).await;
            let stats = engine.stats();
            engine.shutdown().await;
            (commit, stats)
        });
        let commit = commit.unwrap_or_else(|e| panic!("{lost_as:?}: engine append: {e}"));
        assert_eq!(store.lose_answers.load(Ordering::SeqCst), 0, "lost one");
        assert_eq!((commit.version, commit.rows), (3, 10), "{lost_as:?}");
        assert_eq!(stats.write_conflicts, 0, "{lost_as:?}: nothing to redo");

        let fresh = backend
            .session(&caches.path().join("r"), url)
            .open(format!("{url}/ds"))
            .unwrap();
        assert_eq!(fresh.version(), 3, "{lost_as:?}");
        assert_eq!(fresh.count_rows(), 20, "{lost_as:?}: each row once");
    }
}

#[cfg(feature = "cloud")]
#[test]
fn unreachable_storage_is_a_clear_error_not_a_hang() {
    let caches = tempfile::tempdir().unwrap();
    // Nothing listens on port 9 of the loopback: every request is refused.
    let mut config = config_for(caches.path(), Some("http://127.0.0.1:9"));
    config.storage.max_retries = 1;
    config.storage.retry_timeout_ms = 2_000;
    let session = Session::new(config);
    let started = std::time::Instant::now();
    let err = session.open("s3://no-such-bucket/ds").unwrap_err();
    assert!(
        matches!(err, Error::StorageUnavailable { .. }),
        "got {err:?}"
    );
    assert_eq!(err.kind(), shoal::ErrorKind::Unavailable);
    assert!(err.to_string().contains("s3://no-such-bucket/ds"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let err = session
        .create("s3://no-such-bucket/ds", schema(DIM, Metric::L2))
        .unwrap_err();
    assert!(
        matches!(err, Error::StorageUnavailable { .. }),
        "got {err:?}"
    );
}

/// A local S3 server (moto, from PyPI) on a free loopback port, stopped
/// on drop. Found through `SHOAL_MOTO_SERVER` (the path of `moto_server`)
/// or on the PATH; `.ci/run` installs it into a venv.
#[cfg(feature = "cloud")]
struct MotoServer {
    child: std::process::Child,
    endpoint: String,
}

#[cfg(feature = "cloud")]
impl MotoServer {
    fn start() -> MotoServer {
        let program = std::env::var("SHOAL_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start the S3 test server '{program}' (pip install 'moto[server]', or set SHOAL_MOTO_SERVER): {e}")
            });
        let server = MotoServer {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the S3 test server did not start listening within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn create_bucket(&self, bucket: &str) {
        ureq::put(&format!("{}/{bucket}", self.endpoint))
            .send_empty()
            .expect("bucket created");
    }
}

#[cfg(feature = "cloud")]
impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The storage suite, concurrent writers and conditional puts against a
/// real S3 protocol server. Ignored by plain `cargo test` (it needs moto);
/// `.ci/run` runs it, and it fails, never skips, where the server cannot
/// start.
#[cfg(feature = "cloud")]
#[test]
#[ignore = "needs the moto S3 server; run by .ci/run"]
fn s3_server_storage_suite_and_concurrent_writers() {
    let server = MotoServer::start();
    server.create_bucket("shoal");
    let backend = Backend::S3 {
        endpoint: server.endpoint.clone(),
    };
    // The server must honour If-None-Match, or commits would not be safe
    // there: a second create of one object is refused.
    let raw = backend.raw("shoal");
    let refused = run_async(async move {
        let path = ObjectPath::from("probe/once");
        let create = || shoal::object_store::PutOptions {
            mode: shoal::object_store::PutMode::Create,
            ..Default::default()
        };
        raw.put_opts(&path, PutPayload::from("a"), create())
            .await
            .unwrap();
        raw.put_opts(&path, PutPayload::from("b"), create()).await
    });
    assert!(
        matches!(
            refused,
            Err(shoal::object_store::Error::AlreadyExists { .. })
        ),
        "conditional put honoured: {refused:?}"
    );
    storage_suite(
        &backend,
        "s3://shoal/suite/ds",
        "shoal",
        "suite/ds",
        FragmentLayout::Paged,
    );
    storage_suite(
        &backend,
        "s3://shoal/suite/old",
        "shoal",
        "suite/old",
        FragmentLayout::ArrowIpc,
    );
    concurrent_appends(&backend, "s3://shoal/replicas");
}
