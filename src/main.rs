//! The `shoal` command line: demo, ingest, info, search, delete, bench.

use clap::{Parser, Subcommand, ValueEnum};
mod cli;

/// mimalloc instead of the system allocator: glibc keeps freed partition
/// buffers in its per-thread arenas, so a search over a small cache held
/// several times the cache bound in memory; mimalloc returns freed pages.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use cli::bench::{
    run_batch, run_exact, run_ivf, write_json, BatchBenchOptions, ExactBenchOptions,
    IvfBenchOptions,
};
use shoal::db::ingest::ingest;
use shoal::index::{IndexKind, IndexParams};
use shoal::query::{FilterMode, Nprobes, PerQuery, SearchMode, SearchOptions};
use shoal::storage::ingest::{read_vectors, write_ivecs, IngestOptions};
use shoal::{BatchQuery, Config, Dataset, Error, Metric, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "shoal",
    version,
    about = "Embedded vector search with shared batch scans"
)]
struct Cli {
    /// TOML configuration file (see config/default.toml for every key).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum MetricArg {
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
enum ModeArg {
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

/// The variant names are the CLI values (`ivf-flat`, `ivf-pq`, `ivf-sq`).
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, ValueEnum)]
enum IndexTypeArg {
    #[value(alias = "ivf_flat")]
    IvfFlat,
    #[value(alias = "ivf_pq")]
    IvfPq,
    #[value(alias = "ivf_sq")]
    IvfSq,
}

impl IndexTypeArg {
    /// The index kind, with `sub_vectors` for PQ.
    fn kind(self, sub_vectors: usize) -> IndexKind {
        match self {
            IndexTypeArg::IvfFlat => IndexKind::IvfFlat,
            IndexTypeArg::IvfPq => IndexKind::IvfPq { sub_vectors },
            IndexTypeArg::IvfSq => IndexKind::IvfSq,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum BenchModeArg {
    /// Kernel and exact batch search against a per-query loop.
    Exact,
    /// IVF indexes: build time, recall@k and QPS per nprobes.
    Ivf,
    /// Shared scan vs per-query loop on an indexed dataset, per batch size.
    Batch,
}

/// Index-search options shared by `search` and `bench`.
#[derive(clap::Args, Clone)]
struct AnnArgs {
    /// Partitions probed per query (fixed).
    #[arg(long, conflicts_with_all = ["min_nprobes", "max_nprobes"])]
    nprobes: Option<usize>,
    /// Adaptive probing: partitions always probed.
    #[arg(long, requires = "max_nprobes")]
    min_nprobes: Option<usize>,
    /// Adaptive probing: partitions never exceeded.
    #[arg(long, requires = "min_nprobes")]
    max_nprobes: Option<usize>,
    /// Rerank (k + offset) × R index candidates with exact vectors.
    #[arg(long)]
    refine_factor: Option<usize>,
    /// Skip fragments no index covers yet.
    #[arg(long)]
    fast_search: bool,
}

impl AnnArgs {
    fn options(&self) -> SearchOptions {
        let mut o = SearchOptions::default();
        if let Some(n) = self.nprobes {
            o.nprobes = Nprobes::Fixed(n);
        }
        if let (Some(min), Some(max)) = (self.min_nprobes, self.max_nprobes) {
            o.nprobes = Nprobes::Adaptive { min, max };
        }
        o.refine_factor = self.refine_factor;
        o.fast_search = self.fast_search;
        o
    }
}

#[derive(Subcommand)]
enum Command {
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
        /// Default metric of a new dataset's vector columns.
        #[arg(long, value_enum, default_value = "l2")]
        metric: MetricArg,
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
    /// Train and build an IVF index on a vector column (a new version).
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
        /// Training sample: rows per partition.
        #[arg(long, default_value_t = 256)]
        sample: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Index the fragments appended since the last index build (delta segments).
    Optimize {
        #[arg(long)]
        dataset: PathBuf,
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
        /// ivf: nprobes values to measure.
        #[arg(long, value_delimiter = ',', default_value = "4,8,16,32")]
        nprobes: Vec<usize>,
        /// ivf: synthetic query count.
        #[arg(long, default_value_t = 1000)]
        num_queries: usize,
        /// ivf: write the base, queries and ground truth used to this directory.
        #[arg(long)]
        export: Option<PathBuf>,
        /// batch: the indexed dataset.
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
        /// batch: partition cache capacity in bytes (default: the config's).
        #[arg(long)]
        cache_bytes: Option<u64>,
        /// batch: timed passes over the queries.
        #[arg(long, default_value_t = 3)]
        passes: usize,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let config = match &cli.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    match cli.command {
        Command::Demo { dir } => cli::demo::run_demo(&dir, &config),
        Command::Ingest {
            dataset,
            vectors,
            column,
            meta,
            metric,
        } => {
            let opts = IngestOptions {
                column,
                meta,
                metric: metric.into(),
                progress: true,
            };
            let report = ingest(&dataset, &vectors, &opts, &config)?;
            println!(
                "{} {} rows into {} (version {})",
                if report.created {
                    "created dataset with"
                } else {
                    "appended"
                },
                report.rows,
                dataset.display(),
                report.version
            );
            Ok(())
        }
        Command::Info { dataset, version } => info(&dataset, version, &config),
        Command::Search {
            dataset,
            queries,
            k,
            offset,
            filter,
            postfilter,
            batch,
            mode,
            ann,
            explain,
            column,
            metric,
            version,
            project,
            output,
        } => {
            if batch == 0 {
                return Err(Error::InvalidArgument("--batch must be at least 1".into()));
            }
            let ds = Dataset::open_with_config(&dataset, config)?;
            let (_, vectors) = read_vectors(&queries)?;
            let mut all = Vec::with_capacity(vectors.len());
            for chunk in vectors.chunks(batch) {
                let mut q = BatchQuery::new(chunk.to_vec(), k);
                q.offset = PerQuery::All(offset);
                q.filter = filter.clone();
                q.filter_mode = if postfilter {
                    FilterMode::Postfilter
                } else {
                    FilterMode::Prefilter
                };
                q.column = column.clone();
                q.metric = metric.map(Into::into);
                q.version = version;
                q.projection = project.clone();
                q.mode = mode.into();
                q.options = ann.options();
                let (res, profile) = ds.search_batch_profiled(&q)?;
                if explain {
                    eprintln!("{}\n", profile.render());
                }
                all.extend(res.hits);
            }
            write_results(&all, &project, output.as_deref())
        }
        Command::Index {
            dataset,
            column,
            index_type,
            partitions,
            sub_vectors,
            sample,
            seed,
        } => {
            let mut params = IndexParams::new(index_type.kind(sub_vectors), partitions);
            params.sample_per_partition = sample;
            params.seed = seed;
            let mut ds = Dataset::open_with_config(&dataset, config)?;
            let start = std::time::Instant::now();
            let meta =
                ds.create_index_with_progress(column.as_deref(), params, &mut progress_printer())?;
            eprintln!();
            println!(
                "built {} on '{}': {} partitions over {} rows in {:.1} s (version {})",
                meta.params.kind.name(),
                meta.column,
                meta.params.partitions,
                meta.rows,
                start.elapsed().as_secs_f64(),
                ds.version()
            );
            Ok(())
        }
        Command::Optimize { dataset } => {
            let mut ds = Dataset::open_with_config(&dataset, config)?;
            let built = ds.optimize(&mut progress_printer())?;
            eprintln!();
            if built.is_empty() {
                println!(
                    "every fragment is indexed; nothing to do (version {})",
                    ds.version()
                );
            }
            for m in built {
                println!(
                    "delta segment {} on '{}': {} rows in fragments {:?} (version {})",
                    m.id,
                    m.column,
                    m.rows,
                    m.fragments,
                    ds.version()
                );
            }
            Ok(())
        }
        Command::Reindex { dataset, column } => {
            let mut ds = Dataset::open_with_config(&dataset, config)?;
            let meta = ds.reindex(column.as_deref(), &mut progress_printer())?;
            eprintln!();
            println!(
                "rebuilt {} on '{}' over {} rows (version {})",
                meta.params.kind.name(),
                meta.column,
                meta.rows,
                ds.version()
            );
            Ok(())
        }
        Command::Delete { dataset, filter } => {
            let mut ds = Dataset::open_with_config(&dataset, config)?;
            let n = ds.delete(&filter)?;
            if n == 0 {
                println!(
                    "no rows matched; nothing deleted (version {})",
                    ds.version()
                );
            } else {
                println!("deleted {n} rows (version {})", ds.version());
            }
            Ok(())
        }
        Command::Bench {
            mode,
            rows,
            dim,
            batch_sizes,
            k,
            seconds,
            json,
            base,
            queries,
            groundtruth,
            metric,
            types,
            partitions,
            sub_vectors,
            nprobes,
            num_queries,
            export,
            dataset,
            modes,
            cache_bytes,
            passes,
        } => match mode.unwrap_or(if dataset.is_some() {
            BenchModeArg::Batch
        } else {
            BenchModeArg::Exact
        }) {
            BenchModeArg::Exact => {
                let opts = ExactBenchOptions {
                    rows,
                    dim,
                    batch_sizes,
                    k,
                    seconds,
                };
                let report = run_exact(&opts, &config)?;
                if let Some(p) = json {
                    write_json(&p, &report)?;
                }
                Ok(())
            }
            BenchModeArg::Ivf => {
                let opts = IvfBenchOptions {
                    base,
                    queries,
                    groundtruth,
                    rows,
                    dim,
                    num_queries,
                    metric: metric.into(),
                    kinds: types.iter().map(|t| t.kind(sub_vectors)).collect(),
                    partitions,
                    nprobes,
                    k,
                    export,
                };
                let report = run_ivf(&opts, &config)?;
                if let Some(p) = json {
                    write_json(&p, &report)?;
                }
                Ok(())
            }
            BenchModeArg::Batch => {
                let (Some(dataset), Some(queries)) = (dataset, queries) else {
                    return Err(Error::InvalidArgument(
                        "--mode batch needs --dataset and --queries".into(),
                    ));
                };
                let mut config = config;
                if let Some(c) = cache_bytes {
                    config.cache.capacity_bytes = shoal::config::CacheCapacity::Bytes(c);
                }
                let opts = BatchBenchOptions {
                    dataset,
                    queries,
                    groundtruth,
                    k,
                    nprobes: nprobes.first().copied().unwrap_or(16),
                    batch_sizes,
                    modes: modes.into_iter().map(Into::into).collect(),
                    passes,
                };
                let rows = run_batch(&opts, &config)?;
                if let Some(p) = json {
                    write_json(&p, &rows)?;
                }
                Ok(())
            }
        },
    }
}

/// Prints `stage done/total` on one stderr line while long work runs.
fn progress_printer() -> impl FnMut(&str, usize, usize) {
    let mut last = std::time::Instant::now() - std::time::Duration::from_secs(1);
    move |stage: &str, done: usize, total: usize| {
        if last.elapsed().as_millis() >= 200 || done == total {
            eprint!("\r{stage}: {done}/{total}        ");
            let _ = std::io::stderr().flush();
            last = std::time::Instant::now();
        }
    }
}

fn info(path: &Path, version: Option<u64>, config: &Config) -> Result<()> {
    let mut ds = Dataset::open_with_config(path, config.clone())?;
    if let Some(v) = version {
        ds = ds.checkout(v)?;
    }
    println!(
        "dataset {}  version {}  rows {}",
        path.display(),
        ds.version(),
        ds.count_rows()
    );
    println!("schema:");
    for c in &ds.schema().columns {
        match &c.ty {
            shoal::ColumnType::Vector { dim, metric } => {
                println!("  {:<16} vector[{dim}] (metric {metric})", c.name)
            }
            other => println!("  {:<16} {}", c.name, other.describe()),
        }
    }
    println!("fragments:");
    for f in &ds.manifest().fragments {
        println!(
            "  {:>4}  {:>10} rows  {:>8} deleted  {}",
            f.id, f.rows, f.deleted_rows, f.file
        );
    }
    println!("index segments:");
    if ds.index_segments().is_empty() {
        println!("  none");
    }
    for m in ds.index_segments() {
        println!(
            "  {}  column '{}'  {}  metric {}  {} partitions  {} rows  fragments {:?}{}",
            m.id,
            m.column,
            m.params.kind.name(),
            m.metric,
            m.params.partitions,
            m.rows,
            m.fragments,
            if m.trained_in == m.id {
                String::new()
            } else {
                format!("  (delta; model of {})", m.trained_in)
            }
        );
    }
    println!("versions:");
    for v in ds.versions()? {
        println!(
            "  {:>4}  {:<8} {:>10} rows  {:>4} fragments  t={}",
            v.version, v.operation, v.rows, v.fragments, v.timestamp_ms
        );
    }
    Ok(())
}

fn write_results(
    hits: &[Vec<shoal::Hit>],
    projection: &[String],
    output: Option<&Path>,
) -> Result<()> {
    match output {
        Some(path) if path.extension().and_then(|e| e.to_str()) == Some("ivecs") => {
            let ids = hits
                .iter()
                .map(|h| {
                    h.iter()
                        .map(|h| {
                            i32::try_from(h.id).map_err(|_| {
                                Error::InvalidArgument(format!(
                                    "id {} does not fit in .ivecs (int32); use a .jsonl output",
                                    h.id
                                ))
                            })
                        })
                        .collect::<Result<Vec<i32>>>()
                })
                .collect::<Result<Vec<Vec<i32>>>>()?;
            write_ivecs(path, &ids)
        }
        Some(path) => {
            let mut text = String::new();
            for (qi, h) in hits.iter().enumerate() {
                let line = serde_json::json!({ "query": qi, "projection": projection, "hits": h });
                text.push_str(&line.to_string());
                text.push('\n');
            }
            std::fs::write(path, text).map_err(|e| Error::io(path, e))
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            for (qi, h) in hits.iter().enumerate() {
                let row: Vec<String> = h
                    .iter()
                    .map(|h| format!("{}:{:.5}", h.id, h.distance))
                    .collect();
                let _ = writeln!(out, "{qi}\t{}", row.join(" "));
            }
            Ok(())
        }
    }
}
