//! Running each subcommand: open or create datasets, call the library,
//! print what happened.

use super::args::{BenchModeArg, Cli, Command};
use super::bench::{
    run_batch, run_exact, run_ivf, write_json, BatchBenchOptions, ExactBenchOptions,
    IvfBenchOptions, QueryShape,
};
use super::engine_bench::{run_engine_bench, EngineBenchOptions};
use super::print::{committed, info, progress_printer, write_results};
use shoal::db::ingest::ingest;
use shoal::index::IndexParams;
use shoal::query::{FilterMode, PerQuery};
use shoal::storage::ingest::{read_vectors, IngestOptions};
use shoal::{BatchQuery, Config, Dataset, Error, Result};

/// Runs one parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    let config = match &cli.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    match cli.command {
        Command::Serve { data, listen } => super::serve::run_serve(&data, listen, config),
        Command::Demo { dir } => super::demo::run_demo(&dir, &config),
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
                metric: metric.map(Into::into),
                progress: true,
            };
            let report = ingest(&dataset, &vectors, &opts, &config)?;
            committed(
                report.version,
                format_args!(
                    "{} {} rows into {} (version {})",
                    if report.created {
                        "created dataset with"
                    } else {
                        "appended"
                    },
                    report.rows,
                    dataset.display(),
                    report.version
                ),
            )?;
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
            committed(
                ds.version(),
                format_args!(
                    "built {} on '{}': {} partitions over {} rows in {:.1} s (version {})",
                    meta.params.kind.name(),
                    meta.column,
                    meta.params.partitions,
                    meta.rows,
                    start.elapsed().as_secs_f64(),
                    ds.version()
                ),
            )?;
            Ok(())
        }
        Command::Optimize { dataset } => {
            let mut ds = Dataset::open_with_config(&dataset, config)?;
            let built = ds.optimize(&mut progress_printer())?;
            eprintln!();
            if built.is_empty() {
                committed(
                    ds.version(),
                    format_args!(
                        "every fragment is indexed; nothing to do (version {})",
                        ds.version()
                    ),
                )?;
            }
            for m in built {
                committed(
                    ds.version(),
                    format_args!(
                        "delta segment {} on '{}': {} rows in fragments {:?} (version {})",
                        m.id,
                        m.column,
                        m.rows,
                        m.fragments,
                        ds.version()
                    ),
                )?;
            }
            Ok(())
        }
        Command::Reindex { dataset, column } => {
            let mut ds = Dataset::open_with_config(&dataset, config)?;
            let meta = ds.reindex(column.as_deref(), &mut progress_printer())?;
            eprintln!();
            committed(
                ds.version(),
                format_args!(
                    "rebuilt {} on '{}' over {} rows (version {})",
                    meta.params.kind.name(),
                    meta.column,
                    meta.rows,
                    ds.version()
                ),
            )?;
            Ok(())
        }
        Command::Delete { dataset, filter } => {
            let mut ds = Dataset::open_with_config(&dataset, config)?;
            let n = ds.delete(&filter)?;
            if n == 0 {
                committed(
                    ds.version(),
                    format_args!(
                        "no rows matched; nothing deleted (version {})",
                        ds.version()
                    ),
                )?;
            } else {
                committed(
                    ds.version(),
                    format_args!("deleted {n} rows (version {})", ds.version()),
                )?;
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
            concurrency,
            window_us,
            plot,
            filter,
            filters,
            adaptive,
            refine_factor,
        } => match mode.unwrap_or(if !concurrency.is_empty() {
            BenchModeArg::Engine
        } else if dataset.is_some() {
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
                let shape = QueryShape::new(
                    filter,
                    filters,
                    nprobes.first().copied().unwrap_or(16),
                    &adaptive,
                    refine_factor,
                )?;
                let opts = BatchBenchOptions {
                    dataset,
                    queries,
                    groundtruth,
                    k,
                    shape,
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
            BenchModeArg::Engine => {
                let (Some(dataset), Some(queries)) = (dataset, queries) else {
                    return Err(Error::InvalidArgument(
                        "--mode engine needs --dataset and --queries".into(),
                    ));
                };
                let mut config = config;
                if let Some(c) = cache_bytes {
                    config.cache.capacity_bytes = shoal::config::CacheCapacity::Bytes(c);
                }
                let shape = QueryShape::new(
                    filter,
                    filters,
                    nprobes.first().copied().unwrap_or(16),
                    &adaptive,
                    refine_factor,
                )?;
                let opts = EngineBenchOptions {
                    dataset,
                    queries,
                    groundtruth,
                    k,
                    shape,
                    concurrency: if concurrency.is_empty() {
                        vec![1, 16, 64, 256]
                    } else {
                        concurrency
                    },
                    windows_us: if window_us.is_empty() {
                        vec![config.coalescer.window_us]
                    } else {
                        window_us
                    },
                    seconds,
                    passes,
                    plot,
                };
                let rows = run_engine_bench(&opts, &config)?;
                if let Some(p) = json {
                    write_json(&p, &rows)?;
                }
                Ok(())
            }
        },
    }
}
