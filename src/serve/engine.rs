//! The engine: one [`Session`], the coalescer actor and the scanner, and
//! the datasets of one data directory served through [`DatasetHandle`]s.
//!
//! `Engine::start` runs on the caller's tokio runtime: it spawns the
//! coalescer actor there; scans and file work run on blocking threads and
//! the session's scan pool. Dropping every `Engine` and handle lets the
//! actor finish what is queued and end; [`Engine::shutdown`] does so
//! explicitly and waits for it.

use super::budget::MemoryBudget;
use super::coalescer::{CoalescerActor, Message};
use super::handle::DatasetHandle;
use super::scanner::{Scanner, SlotGuard};
use super::stats::{EngineStats, Stats};
use crate::config::Config;
use crate::db::Session;
use crate::error::{Error, Result};
use crate::storage::remote::{location_of, Location};
use crate::storage::Schema;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Capacity of the actor's inbox. Submitters beyond it wait to send (the
/// queue bound that rejects is `coalescer.max_pending`, inside the actor).
const INBOX_CAPACITY: usize = 1024;

/// A running engine over the datasets of one directory. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Engine {
    core: Arc<EngineCore>,
    handles: Arc<tokio::sync::Mutex<HashMap<String, DatasetHandle>>>,
}

/// What handles share with the engine (no reference back to the handles,
/// so there is no cycle and the actor ends when all are dropped).
#[derive(Debug)]
pub(crate) struct EngineCore {
    pub session: Session,
    pub data_dir: PathBuf,
    pub inbox: mpsc::Sender<Message>,
    pub scanner: Arc<Scanner>,
    pub stats: Arc<Stats>,
    pub closing: AtomicBool,
    /// False while the start-up prewarm (`storage.prewarm`) runs.
    pub ready: AtomicBool,
    pub next_request: AtomicU64,
    actor: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    /// Starts an engine serving the datasets under `data_dir` (created if
    /// missing) with `config`. Must be called inside a tokio runtime; the
    /// blocking wrapper [`BlockingEngine`](super::BlockingEngine) brings
    /// its own.
    pub fn start(config: Config, data_dir: impl AsRef<Path>) -> Result<Engine> {
        config.validate()?;
        Engine::with_session(Session::new(config), data_dir)
    }

    /// Starts an engine over an existing `session`: its datasets share the
    /// session's caches, scan pool and config with every other user of the
    /// session (say, a program that also opens datasets directly).
    pub fn with_session(session: Session, data_dir: impl AsRef<Path>) -> Result<Engine> {
        let config = session.config().clone();
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::InvalidArgument(
                "Engine::start must be called inside a tokio runtime (or use BlockingEngine)"
                    .into(),
            )
        })?;
        config.validate()?;
        let data_dir = data_dir.as_ref().to_path_buf();
        if let Location::Local(dir) = location_of(&data_dir) {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&*dir, e))?;
        }
        let stats = Arc::new(Stats::new());
        let budget = MemoryBudget::new(config.limits.memory_budget_bytes.bytes());
        let scanner = Arc::new(Scanner::new(
            config.concurrent_batches(),
            budget,
            Duration::from_millis(config.limits.budget_wait_ms),
            Arc::clone(&stats),
            config.scan_threads(),
        ));
        let (inbox, receiver) = mpsc::channel(INBOX_CAPACITY);
        let actor = CoalescerActor::new(
            &config.coalescer,
            config.coalesced_batch_size(),
            receiver,
            Arc::clone(&scanner),
            Arc::clone(&stats),
        );
        let actor = runtime.spawn(actor.run());
        let engine = Engine {
            core: Arc::new(EngineCore {
                session,
                data_dir,
                inbox,
                scanner,
                stats,
                closing: AtomicBool::new(false),
                ready: AtomicBool::new(!config.storage.prewarm),
                next_request: AtomicU64::new(1),
                actor: std::sync::Mutex::new(Some(actor)),
            }),
            handles: Arc::default(),
        };
        if config.storage.prewarm {
            runtime.spawn(engine.clone().prewarm_all());
        }
        Ok(engine)
    }

    /// Ready to take traffic (`/readyz`): false until the start-up prewarm
    /// (`storage.prewarm`) has finished.
    pub fn is_ready(&self) -> bool {
        self.core.ready.load(Ordering::SeqCst)
    }

    /// Prewarms every dataset (each indexed column, every partition) on
    /// blocking threads, then reports ready; progress goes to stderr. A
    /// dataset that fails to prewarm is reported and left cold: the
    /// replica still serves it.
    async fn prewarm_all(self) {
        let started = std::time::Instant::now();
        let names = match self.dataset_names().await {
            Ok(names) => names,
            Err(e) => {
                eprintln!("prewarm: cannot list datasets: {e}");
                Vec::new()
            }
        };
        for name in names {
            let warmed = match self.dataset(&name).await {
                Ok(handle) => {
                    let ds = handle.latest();
                    tokio::task::spawn_blocking(move || {
                        ds.prewarm(None, &crate::db::PrewarmPartitions::All)
                    })
                    .await
                    .map_err(|e| Error::Internal(format!("prewarm task failed: {e}")))
                    .and_then(|r| r)
                }
                Err(e) => Err(e),
            };
            match warmed {
                Ok(r) => eprintln!(
                    "prewarmed '{name}': {} partitions, {} fragments, {} GETs, {:.1} MiB in {:.0} ms",
                    r.partitions,
                    r.fragments,
                    r.gets,
                    r.bytes as f64 / (1 << 20) as f64,
                    r.elapsed_ms
                ),
                Err(e) => eprintln!("prewarm of '{name}' failed, serving it cold: {e}"),
            }
        }
        eprintln!(
            "prewarm done in {:.1} s: ready",
            started.elapsed().as_secs_f64()
        );
        self.core.ready.store(true, Ordering::SeqCst);
    }

    /// The engine's session (caches, scan pool, config).
    pub fn session(&self) -> &Session {
        &self.core.session
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        self.core.session.config()
    }

    /// The directory (or object-storage URL) whose children are the
    /// datasets.
    pub fn data_dir(&self) -> &Path {
        &self.core.data_dir
    }

    /// A handle on dataset `name` (a subdirectory of the data directory),
    /// opened once and shared by every caller.
    pub async fn dataset(&self, name: &str) -> Result<DatasetHandle> {
        check_name(name)?;
        let mut handles = self.handles.lock().await;
        if let Some(handle) = handles.get(name) {
            return Ok(handle.clone());
        }
        let session = self.core.session.clone();
        let root = self.core.data_dir.join(name);
        let dataset = on_blocking_thread(move || session.open(root)).await?;
        let handle = DatasetHandle::new(name, Arc::clone(&self.core), dataset);
        handles.insert(name.to_string(), handle.clone());
        Ok(handle)
    }

    /// Creates dataset `name` with `schema` and returns its handle.
    pub async fn create_dataset(&self, name: &str, schema: Schema) -> Result<DatasetHandle> {
        check_name(name)?;
        self.core.check_open()?;
        let mut handles = self.handles.lock().await;
        let session = self.core.session.clone();
        let root = self.core.data_dir.join(name);
        let dataset = on_blocking_thread(move || session.create(root, schema)).await?;
        let handle = DatasetHandle::new(name, Arc::clone(&self.core), dataset);
        handles.insert(name.to_string(), handle.clone());
        Ok(handle)
    }

    /// Names of the datasets under the data directory, sorted.
    pub async fn dataset_names(&self) -> Result<Vec<String>> {
        let dir = self.core.data_dir.clone();
        let session = self.core.session.clone();
        on_blocking_thread(move || dataset_names_in(&session, &dir)).await
    }

    /// A snapshot of the engine's counters, histograms and gauges.
    pub fn stats(&self) -> EngineStats {
        let mut stats = self.core.stats.snapshot();
        let cache = self.core.session.partition_cache().counters();
        stats.cache_hits = cache.hits;
        stats.cache_misses = cache.misses;
        let io = self.core.session.disk_cache().io();
        (stats.storage_gets, stats.storage_bytes) = (io.gets, io.bytes);
        stats.ready = self.is_ready();
        stats.budget_in_use = self.core.scanner.budget().in_use();
        stats.budget_limit = self.core.scanner.budget().limit();
        stats
    }

    /// Stops admitting searches and writes (they get
    /// [`Error::ShuttingDown`]), scans every search already queued, and
    /// returns once no batch is running. Later calls return at once.
    pub async fn shutdown(&self) {
        self.core.closing.store(true, Ordering::SeqCst);
        let (reply, done) = oneshot::channel();
        if self.core.inbox.send(Message::Shutdown(reply)).await.is_ok() {
            let _ = done.await;
        }
        let actor = self
            .core
            .actor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(actor) = actor {
            let _ = actor.await;
        }
    }
}

impl EngineCore {
    /// A scan slot for a search that need not pass through the coalescer:
    /// with `coalescer.flush_when_idle`, when no search waits in it (none
    /// in its inbox, none in its groups) and a slot is free, the coalescer
    /// would close the search's group of one at once anyway.
    pub(crate) fn idle_slot(&self) -> Option<SlotGuard> {
        let idle = self.session.config().coalescer.flush_when_idle
            && !self.closing.load(Ordering::SeqCst)
            && self.inbox.capacity() == self.inbox.max_capacity()
            && self.stats.pending.load(Ordering::SeqCst) == 0;
        if idle {
            self.scanner.try_slot()
        } else {
            None
        }
    }

    /// `Err(ShuttingDown)` once shutdown has begun.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closing.load(Ordering::SeqCst) {
            Err(Error::ShuttingDown)
        } else {
            Ok(())
        }
    }
}

/// Names of the datasets an engine on `dir` (a directory or an
/// object-storage URL) serves, sorted: the children holding a dataset
/// whose names pass `check_name`. Blocking.
pub fn dataset_names_in(session: &Session, dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for name in session.children(dir)? {
        if check_name(&name).is_ok() && session.exists(dir.join(&name))? {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Dataset names are `[A-Za-z0-9_-]{1,64}`: no path can reach outside the
/// data directory.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "dataset name '{}' must be 1 to 64 letters, digits, '_' or '-'",
            name.escape_debug()
        )))
    }
}

/// Runs file or CPU work on tokio's blocking threads.
pub(crate) async fn on_blocking_thread<T, F>(work: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(format!("a blocking task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_names_cannot_leave_the_data_directory() {
        for bad in ["", "..", "a/b", "../etc", "a b", "é", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["demo", "gcide_v2", "A-1", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }
}
