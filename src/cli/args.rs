//! The command line's arguments (clap): subcommands, their flags, and the
//! value enums that map onto shoal's types.

use clap::{Parser, Subcommand, ValueEnum};
use shoal::IndexKind;
use shoal::Metric;
use shoal::{Nprobes, PerQueryParams, SearchMode};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "shoal",
    version,
    about = "Embedded vector search with shared batch scans"
)]
pub struct Cli {
    /// TOML configuration file (see config/default.toml for every key).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum MetricArg {
    L2,
    Cosine,
    Dot,
}

impl From<MetricArg> for Metric {
    fn from(m: MetricArg) -> Metric {
        match m {
            MetricArg::L2 => Metric::L2,
            MetricArg::Cosine => Metric::Cosine,
            MetricArg::Dot => Metric::Dot,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// The index if the column has one, else exact.
    Auto,
    /// Brute force, shared over the batch.
    Exact,
    /// The single-query ANN path for each query.
    #[value(alias = "per_query")]
    PerQuery,
    /// The shared IVF partition scan.
    Shared,
}

impl From<ModeArg> for SearchMode {
    fn from(m: ModeArg) -> SearchMode {
        match m {
            ModeArg::Auto => SearchMode::Auto,
            ModeArg::Exact => SearchMode::Exact,
            ModeArg::PerQuery => SearchMode::PerQuery,
            ModeArg::Shared => SearchMode::Shared,
        }
    }
}

/// The variant names are the CLI values (`ivf-flat`, `ivf-pq`, `ivf-sq`,
/// `ivf-rq`, `hnsw`).
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, ValueEnum)]
pub enum IndexTypeArg {
    #[value(alias = "ivf_flat")]
    IvfFlat,
    #[value(alias = "ivf_pq")]
    IvfPq,
    #[value(alias = "ivf_sq")]
    IvfSq,
    #[value(alias = "ivf_rq")]
    IvfRq,
    /// A graph index (HNSW), searched with --ef.
    Hnsw,
}

impl IndexTypeArg {
    /// The index kind, with `sub_vectors` for PQ, `bits` for RaBitQ and
    /// the graph's `(m, ef_construction)` for hnsw.
    pub fn kind(self, sub_vectors: usize, bits: usize, graph: (usize, usize)) -> IndexKind {
        match self {
            IndexTypeArg::Hnsw => IndexKind::Hnsw {
                m: graph.0,
                ef_construction: graph.1,
            },
            IndexTypeArg::IvfFlat => IndexKind::IvfFlat,
            IndexTypeArg::IvfPq => IndexKind::IvfPq { sub_vectors },
            IndexTypeArg::IvfSq => IndexKind::IvfSq,
            IndexTypeArg::IvfRq => IndexKind::IvfRq { bits },
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum BenchModeArg {
    /// Kernel and exact batch search against a per-query loop.
    Exact,
    /// IVF indexes: build time, recall@k and QPS per nprobes.
    Ivf,
    /// Shared scan vs per-query loop on an indexed dataset, per batch size.
    Batch,
    /// Closed-loop clients against the engine, coalesced vs direct.
    Engine,
    /// A dataset on object storage (with --latency-ms per request) against
    /// the same dataset on local disk: cold first pass, warm QPS.
    Remote,
}

/// Index-search options shared by `search` and `bench`.
#[derive(clap::Args, Clone)]
pub struct AnnArgs {
    /// Partitions probed per query (fixed).
    #[arg(long, conflicts_with_all = ["min_nprobes", "max_nprobes"])]
    pub nprobes: Option<usize>,
    /// Adaptive probing: partitions always probed.
    #[arg(long, requires = "max_nprobes")]
    pub min_nprobes: Option<usize>,
    /// Adaptive probing: partitions never exceeded.
    #[arg(long, requires = "min_nprobes")]
    pub max_nprobes: Option<usize>,
    /// Candidates a graph walk keeps per query (hnsw indexes; at least k).
    #[arg(long)]
    pub ef: Option<usize>,
    /// Rerank (k + offset) × R index candidates with exact vectors.
    #[arg(long)]
    pub refine_factor: Option<usize>,
    /// Skip fragments no index covers yet.
    #[arg(long)]
    pub fast_search: bool,
}

impl AnnArgs {
    /// The per-query probing these arguments ask for (`fast_search` is
    /// the batch's: [`AnnArgs::fast_search`]).
    pub fn own(&self) -> PerQueryParams {
        let mut o = PerQueryParams::default();
        if let Some(n) = self.nprobes {
            o.nprobes = Some(Nprobes::Fixed(n));
        }
        if let (Some(min), Some(max)) = (self.min_nprobes, self.max_nprobes) {
            o.nprobes = Some(Nprobes::Adaptive { min, max });
        }
        o.ef = self.ef;
        o.refine_factor = self.refine_factor;
        o
    }
}

// Parsed once per process, so the size of its largest variant (`Bench`)
// costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Serve every dataset under --data over HTTP (builds a demo dataset
    /// when there is none).
    Serve {
        /// The directory whose subdirectories are the datasets.
        #[arg(long, default_value = "data")]
        data: PathBuf,
        /// Address to listen on (default: the config's server.listen,
        /// 127.0.0.1:8080).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Create (or reuse) a clustered demo dataset and run searches on it.
    Demo {
        /// Where the demo dataset lives.
        #[arg(long, default_value = "data/demo")]
        dir: PathBuf,
    },
    /// Append vectors from .fvecs, .npy, .parquet or .jsonl (creates the dataset if needed).
    Ingest {
        #[arg(long)]
        dataset: PathBuf,
        /// The input file; its extension gives the format.
        #[arg(long)]
        vectors: PathBuf,
        /// Vector column name (for .fvecs/.npy; default `vector`).
        #[arg(long)]
        column: Option<String>,
        /// JSON Lines of scalar columns, one line per vector (.fvecs/.npy only).
        #[arg(long)]
        meta: Option<PathBuf>,
        /// Metric of a new dataset's vector columns (default l2); for an
        /// existing dataset it must match the dataset's.
        #[arg(long, value_enum)]
        metric: Option<MetricArg>,
    },
    /// Show schema, versions, rows and fragments.
    Info {
        #[arg(long)]
        dataset: PathBuf,
        /// Show this version instead of the latest.
        #[arg(long)]
        version: Option<u64>,
    },
    /// Search with the vectors of a query file.
    Search {
        #[arg(long)]
        dataset: PathBuf,
        /// Query vectors (.fvecs or .npy).
        #[arg(long)]
        queries: PathBuf,
        #[arg(long, default_value_t = 10)]
        k: usize,
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// SQL filter over scalar columns, e.g. "category = 'noun' AND len < 12".
        #[arg(long)]
        filter: Option<String>,
        /// Apply the filter after the search (may return fewer than k rows).
        #[arg(long)]
        postfilter: bool,
        /// Queries per batch.
        #[arg(long, default_value_t = 64)]
        batch: usize,
        #[arg(long, value_enum, default_value = "auto")]
        mode: ModeArg,
        #[command(flatten)]
        ann: AnnArgs,
        /// Print each batch's execution profile to stderr.
        #[arg(long)]
        explain: bool,
        /// Vector column (needed when the dataset has several).
        #[arg(long)]
        column: Option<String>,
        /// Metric (default: the column's).
        #[arg(long, value_enum)]
        metric: Option<MetricArg>,
        /// Search this version instead of the latest.
        #[arg(long)]
        version: Option<u64>,
        /// Comma-separated columns to return with each row.
        #[arg(long, value_delimiter = ',')]
        project: Vec<String>,
        /// Write results to FILE.ivecs (ids per query) or FILE.jsonl; else print.
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Build an index on a vector column (a new version): IVF (trained
    /// partitions) or hnsw (a graph).
    Index {
        #[arg(long)]
        dataset: PathBuf,
        /// Vector column (may be left out when there is only one).
        #[arg(long)]
        column: Option<String>,
        #[arg(long = "type", value_enum)]
        index_type: IndexTypeArg,
        /// Partitions (k-means centroids).
        #[arg(long, default_value_t = 256)]
        partitions: usize,
        /// PQ sub-vectors (bytes per code); must divide the dimension.
        #[arg(long, default_value_t = 16)]
        sub_vectors: usize,
        /// RaBitQ bits per dimension (1 to 8).
        #[arg(long, default_value_t = shoal::IndexKind::DEFAULT_RQ_BITS)]
        bits: usize,
        /// hnsw: neighbours per node on the upper layers (2m on layer 0).
        #[arg(long, default_value_t = shoal::IndexKind::DEFAULT_HNSW_M)]
        m: usize,
        /// hnsw: candidates kept while linking a row.
        #[arg(long, default_value_t = shoal::IndexKind::DEFAULT_EF_CONSTRUCTION)]
        ef_construction: usize,
        /// Training sample: rows per partition.
        #[arg(long, default_value_t = 256)]
        sample: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Index the fragments appended since the last index build (delta
    /// segments), after rewriting Arrow IPC fragments into paged ones.
    Optimize {
        #[arg(long)]
        dataset: PathBuf,
    },
    /// Fill the disk cache of a dataset on object storage with what its
    /// searches read (index partitions, id pages, unindexed vectors).
    Prewarm {
        #[arg(long)]
        dataset: PathBuf,
        /// Vector column (default: every indexed one).
        #[arg(long)]
        column: Option<String>,
        /// Partition numbers, comma-separated (default: all).
        #[arg(long, value_delimiter = ',')]
        partitions: Vec<u32>,
    },
    /// Merge the small unindexed fragments many small appends leave at the
    /// end of a dataset (a new version; answers unchanged).
    Compact {
        #[arg(long)]
        dataset: PathBuf,
    },
    /// Remove old versions and the files only they use (the newest --keep
    /// versions, and any replaced less than --min-age-ms ago, stay).
    Cleanup {
        #[arg(long)]
        dataset: PathBuf,
        /// Versions kept, newest first.
        #[arg(long, default_value_t = 1)]
        keep: usize,
        /// Versions that were the latest less than this many milliseconds
        /// ago are kept (default: the config's retention.min_age_ms).
        #[arg(long)]
        min_age_ms: Option<u64>,
    },
    /// Retrain a column's index over all rows, replacing its segments.
    Reindex {
        #[arg(long)]
        dataset: PathBuf,
        #[arg(long)]
        column: Option<String>,
    },
    /// Delete the rows matching a filter (a new version).
    Delete {
        #[arg(long)]
        dataset: PathBuf,
        #[arg(long)]
        filter: String,
    },
    /// Measure kernel and search throughput (synthetic data, or your files).
    Bench {
        /// What to measure; `batch` when --dataset is given, else `exact`.
        #[arg(long, value_enum)]
        mode: Option<BenchModeArg>,
        #[arg(long, default_value_t = 100_000)]
        rows: usize,
        #[arg(long, default_value_t = 128)]
        dim: usize,
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        batch_sizes: Vec<usize>,
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Also write the report as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// ivf: base vectors (.fvecs/.npy) instead of synthetic data.
        #[arg(long)]
        base: Option<PathBuf>,
        /// ivf: query vectors (.fvecs/.npy); synthetic when left out.
        #[arg(long)]
        queries: Option<PathBuf>,
        /// ivf: ground truth (.ivecs of base row ids); exact search when left out.
        #[arg(long)]
        groundtruth: Option<PathBuf>,
        /// ivf: metric.
        #[arg(long, value_enum, default_value = "l2")]
        metric: MetricArg,
        /// ivf: index types to build.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "ivf-flat,ivf-pq,ivf-sq"
        )]
        types: Vec<IndexTypeArg>,
        /// ivf: partitions.
        #[arg(long, default_value_t = 256)]
        partitions: usize,
        /// ivf: PQ sub-vectors.
        #[arg(long, default_value_t = 32)]
        sub_vectors: usize,
        /// ivf: RaBitQ bits per dimension (one ivf_rq index per value).
        #[arg(long, value_delimiter = ',', default_value = "4")]
        bits: Vec<usize>,
        /// ivf: nprobes values to measure.
        #[arg(long, value_delimiter = ',', default_value = "4,8,16,32")]
        nprobes: Vec<usize>,
        /// ivf: hnsw's m.
        #[arg(long, default_value_t = shoal::IndexKind::DEFAULT_HNSW_M)]
        m: usize,
        /// ivf: hnsw's ef_construction.
        #[arg(long, default_value_t = shoal::IndexKind::DEFAULT_EF_CONSTRUCTION)]
        ef_construction: usize,
        /// ivf: ef values to measure on hnsw indexes (default 16,32,64,128);
        /// batch, engine: the first is every query's ef (an hnsw dataset).
        #[arg(long = "ef", value_delimiter = ',')]
        efs: Vec<usize>,
        /// ivf: synthetic query count.
        #[arg(long, default_value_t = 1000)]
        num_queries: usize,
        /// ivf: write the base, queries and ground truth used to this directory.
        #[arg(long)]
        export: Option<PathBuf>,
        /// batch, engine: the indexed dataset.
        #[arg(long)]
        dataset: Option<PathBuf>,
        /// batch: modes to compare.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "per-query,shared"
        )]
        modes: Vec<ModeArg>,
        /// batch, engine: partition cache capacity in bytes (default: the config's).
        #[arg(long)]
        cache_bytes: Option<u64>,
        /// batch, engine: timed passes over the queries.
        #[arg(long, default_value_t = 3)]
        passes: usize,
        /// remote: wait before every object-store request, ms.
        #[arg(long, default_value_t = 5)]
        latency_ms: u64,
        /// remote: columns every query returns besides `id` (comma-separated).
        #[arg(long, value_delimiter = ',')]
        select: Vec<String>,
        /// engine: closed-loop client counts (implies --mode engine).
        #[arg(long, value_delimiter = ',')]
        concurrency: Vec<usize>,
        /// engine: coalescing windows to measure, µs (default: the config's).
        #[arg(long, value_delimiter = ',')]
        window_us: Vec<u64>,
        /// engine: draw latency against throughput into this PNG.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// batch, engine: a SQL filter every query brings; with --filters N,
        /// `{i}` in it is replaced by the filter's number (0..N).
        #[arg(long)]
        filter: Option<String>,
        /// batch, engine: N distinct filters, query i drawing filter i mod N.
        /// Without `{i}` in --filter, filter i is `(FILTER) AND id <> -(i+1)`:
        /// distinct filters that admit the same rows.
        #[arg(long, default_value_t = 1)]
        filters: usize,
        /// batch, engine: adaptive nprobes MIN,MAX instead of --nprobes.
        #[arg(long, value_delimiter = ',')]
        adaptive: Vec<usize>,
        /// batch, engine: rerank (k + offset) × R index candidates exactly.
        #[arg(long)]
        refine_factor: Option<usize>,
    },
}
