//! Configuration: a TOML file whose every key has a default.
//!
//! The defaults live in `config/default.toml` (compiled in), so the file a
//! user reads is the one the code uses. Unknown keys are errors; values are
//! validated on load.

use crate::error::{Error, Result};
use serde::Deserialize;
use std::path::Path;

const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// All of shoal's settings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Limits on what one request may ask for.
    pub limits: Limits,
    /// How searches run.
    pub search: SearchConfig,
    /// How ingest writes data.
    pub ingest: IngestConfig,
    /// The partition cache.
    pub cache: CacheConfig,
    /// How the engine gathers concurrent searches into batches.
    pub coalescer: CoalescerConfig,
    /// How the engine runs batches.
    pub scan: ScanConfig,
    /// The HTTP service (`shoal serve`).
    pub server: ServerConfig,
    /// How many old versions the engine keeps.
    pub retention: RetentionConfig,
    /// Object storage (datasets given by URL).
    pub storage: StorageConfig,
}

/// Which old versions (and the files only they use) the engine removes
/// after each write; see `Dataset::cleanup`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Versions kept, newest first (0: keep every version).
    pub keep_versions: usize,
    /// Versions that stopped being the latest less than this long ago are
    /// kept whatever their number (other processes may be reading them).
    pub min_age_ms: u64,
}

/// The HTTP service.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address `shoal serve` listens on (`host:port`).
    pub listen: String,
    /// Largest request body accepted, in bytes (or a size string).
    #[serde(deserialize_with = "deserialize_size")]
    pub max_body_bytes: u64,
    /// Bearer token every request but `/healthz` and `/readyz` must carry; empty = no
    /// authentication.
    pub api_key: String,
}

/// A size as written in TOML: a number of bytes or a string.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawSize {
    Int(u64),
    Text(String),
}

/// A byte count given as a number or a size string (`"16MiB"`).
fn deserialize_size<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    match RawSize::deserialize(d)? {
        RawSize::Int(b) => Ok(b),
        RawSize::Text(t) => parse_size(&t).map_err(serde::de::Error::custom),
    }
}

/// The coalescer: which concurrent searches share a batch, and when a
/// batch leaves.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CoalescerConfig {
    /// Longest a search waits for others to join its batch, in microseconds.
    pub window_us: u64,
    /// Most searches in one coalesced batch.
    pub max_batch_size: usize,
    /// Flush a group as soon as a scan slot is free instead of waiting out
    /// the window.
    pub flush_when_idle: bool,
    /// Most searches waiting (queued or ready, not yet scanning); beyond it
    /// a search is rejected with `Overloaded`.
    pub max_pending: usize,
    /// Deadline of a search that sets none, in milliseconds; 0 = none.
    pub default_deadline_ms: u64,
}

/// The scan side of the engine.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScanConfig {
    /// Batches scanning at once; 0 = one per core.
    pub max_concurrent_batches: usize,
}

/// Partition cache settings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Bytes of decoded partitions kept in memory.
    pub capacity_bytes: CacheCapacity,
    /// Bytes of fragment columns (vectors for exact scans, ids and
    /// projected or filtered scalars) kept in memory.
    pub column_bytes: CacheCapacity,
    /// Bytes of cached filter results (which rows of a partition or
    /// fragment match a filter).
    pub filter_mask_bytes: CacheCapacity,
    /// Partition loads in flight at once.
    pub max_concurrent_loads: usize,
    /// Bytes of object-storage files kept on local disk.
    #[serde(deserialize_with = "deserialize_size")]
    pub disk_bytes: u64,
    /// Directory of that disk cache (empty: the system's temp dir).
    pub disk_dir: String,
}

/// Object storage: credentials, endpoint, retries, and how often a
/// dataset's versions are listed again.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// Endpoint URL (empty: from the environment or the provider's).
    pub endpoint: String,
    /// Region (empty: from the environment).
    pub region: String,
    /// Access key id (empty: from the environment).
    pub access_key_id: String,
    /// Secret access key (empty: from the environment).
    pub secret_access_key: String,
    /// Allows plain-HTTP endpoints (also `AWS_ALLOW_HTTP=true`).
    pub allow_http: bool,
    /// Longest a process goes without noticing another's commit.
    pub refresh_ms: u64,
    /// Retries of a failed request (transient errors only).
    pub max_retries: usize,
    /// Time limit over all tries of one request.
    pub retry_timeout_ms: u64,
    /// Time limit of one try.
    pub request_timeout_ms: u64,
    /// GET requests one read of a remote dataset keeps in flight (the
    /// probed partitions of a batch, a fragment's pages).
    pub max_concurrent_gets: usize,
    /// `serve`: fill the disk cache with every indexed column's partitions
    /// and the fragments' `id` pages before reporting ready (`/readyz`).
    pub prewarm: bool,
    /// The layout of new fragment files: `paged` (each column readable
    /// alone; manifest format 4) or `arrow_ipc` (one Arrow IPC file, what
    /// shoal builds before format 4 read).
    pub fragment_layout: FragmentLayout,
}

/// How new fragment files are laid out (`storage.fragment_layout`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FragmentLayout {
    /// Paged columns: a search reads only the columns and rows it uses.
    Paged,
    /// One Arrow IPC file per fragment (read whole on object storage).
    ArrowIpc,
}

/// A memory size: a number of bytes, a size string (`"512MiB"`, `"2GB"`,
/// `"64KiB"`), or `"auto"` (a quarter of the memory available).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CacheCapacity {
    /// A fixed number of bytes.
    Bytes(u64),
    /// `"auto"`: a quarter of the available memory.
    Auto,
}

impl<'de> Deserialize<'de> for CacheCapacity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match RawSize::deserialize(d)? {
            RawSize::Int(b) => Ok(CacheCapacity::Bytes(b)),
            RawSize::Text(t) if t.trim().eq_ignore_ascii_case("auto") => Ok(CacheCapacity::Auto),
            RawSize::Text(t) => parse_size(&t)
                .map(CacheCapacity::Bytes)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `"512MiB"`, `"2 GB"`, `"4096"`, `"64k"`: binary (KiB, MiB, GiB,
/// TiB) and decimal (KB, MB, GB, TB) units; a bare `k`/`m`/`g` is binary.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let bad = || {
        format!("'{text}' is not a size (examples: 4096, \"64KiB\", \"512MiB\", \"2GB\", \"auto\")")
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes.round() as u64)
}

impl CacheCapacity {
    /// The capacity in bytes; `auto` reads available memory with `sysinfo`.
    pub fn bytes(&self) -> u64 {
        match self {
            CacheCapacity::Bytes(b) => *b,
            CacheCapacity::Auto => {
                let mut sys = sysinfo::System::new();
                sys.refresh_memory();
                (sys.available_memory() / 4).max(64 << 20)
            }
        }
    }
}

/// Limits on requests; exceeding one is a clear error, never a partial result.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest k per query.
    pub max_k: usize,
    /// Largest offset per query.
    pub max_offset: usize,
    /// Largest refine factor: a query takes (k + offset) × factor index
    /// candidates, kept in heaps and reranked with exact vectors.
    pub max_refine_factor: usize,
    /// Most query vectors in one batch.
    pub max_batch_size: usize,
    /// Largest vector dimension of a column.
    pub max_dim: usize,
    /// Bytes all running batches of the engine may hold at once (query
    /// vectors, heaps, result rows), or `"auto"`.
    pub memory_budget_bytes: CacheCapacity,
    /// How long a batch waits for budget before its callers get
    /// `Overloaded`, in milliseconds; 0 = reject at once.
    pub budget_wait_ms: u64,
}

/// Search execution settings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    /// Scan threads per search; 0 means one per core.
    pub threads: usize,
    /// Microseconds a scan thread that has just run a batch keeps looking
    /// for its next task before it sleeps (at most [`MAX_IDLE_SPIN_US`];
    /// 0: sleep at once).
    pub idle_spin_us: u64,
}

/// The most `search.idle_spin_us` may be: a thread looking for work longer
/// than this costs more CPU than a wake-up saves.
pub const MAX_IDLE_SPIN_US: u64 = 10_000;

/// Ingest settings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IngestConfig {
    /// Rows per fragment file.
    pub rows_per_fragment: usize,
    /// Rows converted per chunk while ingesting.
    pub chunk_rows: usize,
    /// The engine compacts a dataset after an append that leaves this many
    /// small unindexed fragments at its end (0: only on demand).
    pub compact_after_fragments: usize,
}

impl Default for Config {
    fn default() -> Self {
        // The compiled-in defaults are tested to parse and validate.
        Config::from_toml_str("").expect("config/default.toml is valid")
    }
}

impl Config {
    /// Parses a TOML document; keys it leaves out take their defaults.
    pub fn from_toml_str(text: &str) -> Result<Config> {
        let mut merged: toml::Table = DEFAULT_TOML
            .parse()
            .map_err(|e| Error::Internal(format!("default config: {e}")))?;
        let user: toml::Table = text
            .parse()
            .map_err(|e| Error::InvalidArgument(format!("config: {e}")))?;
        for (section, value) in user {
            match (merged.get_mut(&section), value) {
                (Some(toml::Value::Table(base)), toml::Value::Table(over)) => {
                    for (k, v) in over {
                        if !base.contains_key(&k) {
                            return Err(Error::InvalidArgument(format!(
                                "config: unknown key '{section}.{k}'"
                            )));
                        }
                        base.insert(k, v);
                    }
                }
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "config: unknown section '{section}'"
                    )))
                }
            }
        }
        let config: Config = toml::Value::Table(merged)
            .try_into()
            .map_err(|e| Error::InvalidArgument(format!("config: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads a config file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Config::from_toml_str(&text)
    }

    /// Checks value ranges.
    pub fn validate(&self) -> Result<()> {
        if self.server.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(Error::InvalidArgument(format!(
                "config: server.listen '{}' is not an address like 127.0.0.1:8080",
                self.server.listen
            )));
        }
        if self.server.max_body_bytes == 0 {
            return Err(Error::InvalidArgument(
                "config: server.max_body_bytes must be at least 1".into(),
            ));
        }
        if self.cache.disk_bytes < 1 << 20 {
            return Err(Error::InvalidArgument(
                "config: cache.disk_bytes must be at least 1MiB (object-storage files are \
                 read from it)"
                    .into(),
            ));
        }
        let positive = [
            ("limits.max_k", self.limits.max_k),
            ("limits.max_refine_factor", self.limits.max_refine_factor),
            ("limits.max_batch_size", self.limits.max_batch_size),
            ("limits.max_dim", self.limits.max_dim),
            ("ingest.rows_per_fragment", self.ingest.rows_per_fragment),
            ("ingest.chunk_rows", self.ingest.chunk_rows),
            (
                "cache.max_concurrent_loads",
                self.cache.max_concurrent_loads,
            ),
            (
                "storage.max_concurrent_gets",
                self.storage.max_concurrent_gets,
            ),
            ("coalescer.max_batch_size", self.coalescer.max_batch_size),
            ("coalescer.max_pending", self.coalescer.max_pending),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(Error::InvalidArgument(format!(
                    "config: {name} must be at least 1"
                )));
            }
        }
        if self.search.idle_spin_us > MAX_IDLE_SPIN_US {
            return Err(Error::InvalidArgument(format!(
                "config: search.idle_spin_us is {}; at most {MAX_IDLE_SPIN_US} (10 ms)",
                self.search.idle_spin_us
            )));
        }
        if self.coalescer.window_us > 10_000_000 {
            return Err(Error::InvalidArgument(
                "config: coalescer.window_us above 10 s would hold every search that long".into(),
            ));
        }
        if let CacheCapacity::Bytes(0) = self.limits.memory_budget_bytes {
            return Err(Error::InvalidArgument(
                "config: limits.memory_budget_bytes must be above 0".into(),
            ));
        }
        if self.ingest.rows_per_fragment > u32::MAX as usize {
            return Err(Error::InvalidArgument(
                "config: ingest.rows_per_fragment must fit in 32 bits".into(),
            ));
        }
        Ok(())
    }

    /// Most searches in one coalesced batch: `coalescer.max_batch_size`,
    /// capped by `limits.max_batch_size` (a coalesced batch obeys the same
    /// limit as an explicit one).
    pub fn coalesced_batch_size(&self) -> usize {
        self.coalescer
            .max_batch_size
            .min(self.limits.max_batch_size)
    }

    /// Batches the engine scans at once: the configured number, or one per
    /// core.
    pub fn concurrent_batches(&self) -> usize {
        if self.scan.max_concurrent_batches > 0 {
            self.scan.max_concurrent_batches
        } else {
            cores()
        }
    }

    /// Scan threads to use: the configured number, or one per core.
    pub fn scan_threads(&self) -> usize {
        if self.search.threads > 0 {
            self.search.threads
        } else {
            cores()
        }
    }
}

/// Cores available to this process, read once (the standard library reads
/// cgroup files on every call, which costs more than a small search).
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_overrides_apply() {
        let d = Config::default();
        assert_eq!(d.limits.max_k, 10000);
        let c = Config::from_toml_str("[limits]\nmax_k = 5\n").unwrap();
        assert_eq!(c.limits.max_k, 5);
        assert_eq!(c.limits.max_batch_size, d.limits.max_batch_size);
    }

    #[test]
    fn cache_capacity_is_bytes_or_auto() {
        let c = Config::from_toml_str("[cache]\ncapacity_bytes = 1000\n").unwrap();
        assert_eq!(c.cache.capacity_bytes.bytes(), 1000);
        assert!(Config::default().cache.capacity_bytes.bytes() >= 64 << 20);
        assert!(Config::from_toml_str("[cache]\ncapacity_bytes = 'lots'\n").is_err());
        let c = Config::from_toml_str("[cache]\ncapacity_bytes = '512MiB'\n").unwrap();
        assert_eq!(c.cache.capacity_bytes.bytes(), 512 << 20);
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size(" 1.5 KiB"), Ok(1536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("-3MiB").is_err());
        assert!(parse_size("1e30 TB").is_err());
    }

    #[test]
    fn typos_and_bad_values_are_errors() {
        assert!(Config::from_toml_str("[limits]\nmax_kk = 5\n").is_err());
        assert!(Config::from_toml_str("[limitz]\nmax_k = 5\n").is_err());
        assert!(Config::from_toml_str("[limits]\nmax_k = 0\n").is_err());
        assert!(Config::from_toml_str("[limits]\nmax_k = 'x'\n").is_err());
        assert!(Config::from_toml_str("[coalescer]\nmax_batch_size = 0\n").is_err());
        let capped = Config::from_toml_str("[coalescer]\nmax_batch_size = 100000\n").unwrap();
        assert_eq!(capped.coalesced_batch_size(), capped.limits.max_batch_size);
        assert!(Config::from_toml_str("[coalescer]\nwindow = 5\n").is_err());
        assert!(Config::from_toml_str("[limits]\nmemory_budget_bytes = 0\n").is_err());
        assert!(Config::from_toml_str("[cache]\ndisk_bytes = 0\n").is_err());
        assert!(Config::from_toml_str("[storage]\nregion = 3\n").is_err());
        assert!(Config::from_toml_str("[search]\nidle_spin_us = 10001\n").is_err());
        assert_eq!(
            Config::from_toml_str("[search]\nidle_spin_us = 0\n")
                .unwrap()
                .search
                .idle_spin_us,
            0
        );
        let s3 = Config::from_toml_str(
            "[storage]\nendpoint = 'http://127.0.0.1:9000'\nallow_http = true\n\
             [cache]\ndisk_bytes = '2GiB'\n",
        )
        .unwrap();
        assert_eq!(s3.storage.endpoint, "http://127.0.0.1:9000");
        assert_eq!(s3.cache.disk_bytes, 2 << 30);
    }
}
