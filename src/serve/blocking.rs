//! A blocking wrapper for callers without an async runtime: it owns a small
//! tokio runtime and waits on the engine's futures. Searches from many
//! threads are coalesced exactly as async ones are.

use super::engine::Engine;
use super::handle::DatasetHandle;
use super::stats::EngineStats;
use crate::config::Config;
use crate::db::Commit;
use crate::error::{Error, Result};
use crate::exec::Profile;
use crate::index::IndexParams;
use crate::query::{BatchQuery, Query, SearchResponse, SearchResults};
use arrow_array::RecordBatch;
use std::path::Path;

/// An [`Engine`] for synchronous code. Do not call it from inside an async
/// runtime (blocking there would stall the runtime's threads).
#[derive(Debug)]
pub struct BlockingEngine {
    runtime: tokio::runtime::Runtime,
    engine: Engine,
}

/// A [`DatasetHandle`] for synchronous code; cheap to clone, usable from
/// many threads at once.
#[derive(Clone, Debug)]
pub struct BlockingDataset {
    runtime: tokio::runtime::Handle,
    handle: DatasetHandle,
}

impl BlockingEngine {
    /// Starts an engine on its own runtime (one worker thread: the actor
    /// and the hand-offs are light; scans run on the scan pool).
    pub fn start(config: Config, data_dir: impl AsRef<Path>) -> Result<BlockingEngine> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("shoal-engine")
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("cannot start the engine's runtime: {e}")))?;
        let engine = {
            let _inside = runtime.enter();
            Engine::start(config, data_dir)?
        };
        Ok(BlockingEngine { runtime, engine })
    }

    /// The async engine inside.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A handle on dataset `name`.
    pub fn dataset(&self, name: &str) -> Result<BlockingDataset> {
        let handle = self.runtime.block_on(self.engine.dataset(name))?;
        Ok(BlockingDataset {
            runtime: self.runtime.handle().clone(),
            handle,
        })
    }

    /// The engine's counters.
    pub fn stats(&self) -> EngineStats {
        self.engine.stats()
    }

    /// Drains and stops the engine.
    pub fn shutdown(self) {
        self.runtime.block_on(self.engine.shutdown());
    }
}

impl BlockingDataset {
    /// See [`DatasetHandle::search`].
    pub fn search(&self, query: &Query) -> Result<SearchResponse> {
        self.runtime.block_on(self.handle.search(query))
    }

    /// See [`DatasetHandle::search_batch`].
    pub fn search_batch(&self, batch: &BatchQuery) -> Result<SearchResults> {
        self.runtime.block_on(self.handle.search_batch(batch))
    }

    /// See [`DatasetHandle::explain`].
    pub fn explain(&self, batch: &BatchQuery) -> Result<(SearchResults, Profile)> {
        self.runtime.block_on(self.handle.explain(batch))
    }

    /// See [`DatasetHandle::append`].
    pub fn append(&self, batches: Vec<RecordBatch>) -> Result<Commit> {
        self.runtime.block_on(self.handle.append(batches))
    }

    /// See [`DatasetHandle::delete`].
    pub fn delete(&self, filter: &str) -> Result<Commit> {
        self.runtime.block_on(self.handle.delete(filter))
    }

    /// See [`DatasetHandle::create_index`].
    pub fn create_index(&self, column: Option<&str>, params: IndexParams) -> Result<Commit> {
        self.runtime
            .block_on(self.handle.create_index(column, params))
    }

    /// See [`DatasetHandle::optimize`].
    pub fn optimize(&self) -> Result<Commit> {
        self.runtime.block_on(self.handle.optimize())
    }

    /// The async handle inside.
    pub fn handle(&self) -> &DatasetHandle {
        &self.handle
    }
}
