//! The `shoal` command line: demo, ingest, info, search, delete, bench.

use clap::{Parser, Subcommand, ValueEnum};
use shoal::bench::{run_exact, write_json, ExactBenchOptions};
use shoal::query::{FilterMode, PerQuery};
use shoal::storage::ingest::{ingest, read_vectors, write_ivecs, IngestOptions};
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
    Exact,
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
        #[arg(long, value_enum, default_value = "exact")]
        mode: ModeArg,
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
    /// Delete the rows matching a filter (a new version).
    Delete {
        #[arg(long)]
        dataset: PathBuf,
        #[arg(long)]
        filter: String,
    },
    /// Measure kernel and search throughput on synthetic data.
    Bench {
        #[arg(long, value_enum, default_value = "exact")]
        mode: ModeArg,
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
        Command::Demo { dir } => shoal::demo::run_demo(&dir, &config),
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
            mode: ModeArg::Exact,
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
                all.extend(ds.search_batch(&q)?.hits);
            }
            write_results(&all, &project, output.as_deref())
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
            mode: ModeArg::Exact,
            rows,
            dim,
            batch_sizes,
            k,
            seconds,
            json,
        } => {
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
    println!("indices: none");
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
