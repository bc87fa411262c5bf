//! Running each subcommand: open or create datasets, call the library,
//! print what happened.

use super::args::{BenchModeArg, Cli, Command, IndexTypeArg};
use super::bench::batch::{run_batch, BatchBenchOptions};
use super::bench::engine::{run_engine_bench, EngineBenchOptions};
use super::bench::exact::{run_exact, ExactBenchOptions};
use super::bench::ivf::{run_ivf, IvfBenchOptions};
use super::bench::remote::{run_remote, RemoteBenchOptions};
use super::bench::{write_json, QueryShape};
use super::print::{committed, info, ingest_bar, progress_printer, write_results};
use shoal::ingest::{ingest, read_vectors, Format, IngestOptions};
use shoal::{
    BatchQuery, Config, Dataset, Error, FilterMode, IndexParams, PerQuery, Result, SharedParams,
};

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
            if meta.is_some() && !matches!(Format::of(&vectors)?, Format::Fvecs | Format::Npy) {
                return Err(Error::InvalidArgument(
                    "--meta only applies to .fvecs and .npy input".into(),
                ));
            }
            let (progress, bar) = ingest_bar();
            let opts = IngestOptions {
                column,
                meta,
                metric: metric.map(Into::into),
                progress: Some(progress),
            };
            let report = ingest(&dataset, &vectors, &opts, &config);
            bar.finish_and_clear();
            let report = report?;
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
                let mut q = BatchQuery::new(chunk.to_vec(), k).offset(offset);
                let mut own = ann.own();
                own.filter = filter.clone();
                own.filter_mode = if postfilter {
                    FilterMode::Postfilter
                } else {
                    FilterMode::Prefilter
                };
                own.projection = project.clone();
                q.own = PerQuery::All(own);
                q.shared = SharedParams {
                    column: column.clone(),
                    metric: metric.map(Into::into),
                    version,
                    mode: mode.into(),
                    fast_search: ann.fast_search,
                    ..SharedParams::default()
                };
                let (res, profile) = ds.explain(&q)?;
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
            bits,
            m,
            ef_construction,
            sample,
            seed,
        } => {
            let kind = index_type.kind(sub_vectors, bits, (m, ef_construction));
            let mut params = IndexParams::new(kind, partitions);
            params.sample_per_partition = sample;
            params.seed = seed;
            let mut ds =
                Dataset::open_with_config(&dataset, config)?.with_progress(progress_printer());
            let start = std::time::Instant::now();
            let commit = ds.create_index(column.as_deref(), params)?;
            eprintln!();
            let Some(meta) = commit.segments.first() else {
                return Err(Error::Internal(
                    "an index build committed no segment".into(),
                ));
            };
            committed(
                ds.version(),
                format_args!(
                    "built {} on '{}': {} over {} rows in {:.1} s (version {})",
                    meta.params.kind.name(),
                    meta.column,
                    match meta.params.kind {
                        shoal::IndexKind::Hnsw { m, ef_construction } => {
                            format!("m {m}, ef_construction {ef_construction}")
                        }
                        _ => format!("{} partitions", meta.params.partitions),
                    },
                    meta.rows,
                    start.elapsed().as_secs_f64(),
                    ds.version()
                ),
            )?;
            Ok(())
        }
        Command::Cleanup {
            dataset,
            keep,
            min_age_ms,
        } => {
            let min_age_ms = min_age_ms.unwrap_or(config.retention.min_age_ms);
            let ds = Dataset::open_with_config(&dataset, config)?;
            let report = ds.cleanup(keep, std::time::Duration::from_millis(min_age_ms))?;
            super::print::stdout_line(format_args!(
                "removed {} versions and {} files, {} bytes ({} of the files named by no \
                 version); version {} is the latest",
                report.versions_removed.len(),
                report.files_removed,
                report.bytes_removed,
                report.orphans_removed,
                ds.version()
            ))
        }
        Command::Compact { dataset } => {
            let mut ds = Dataset::open_with_config(&dataset, config)?;
            let before = ds.manifest().fragments.len();
            let commit = ds.compact()?;
            let after = ds.manifest().fragments.len();
            let what = if commit.rows == 0 {
                format!("nothing to compact (version {})", commit.version)
            } else {
                format!(
                    "compacted {} rows: {before} fragments -> {after} (version {})",
                    commit.rows, commit.version
                )
            };
            committed(commit.version, format_args!("{what}"))?;
            Ok(())
        }
        Command::Prewarm {
            dataset,
            column,
            partitions,
        } => {
            let ds = Dataset::open_with_config(&dataset, config)?.with_progress(progress_printer());
            let which = if partitions.is_empty() {
                shoal::PrewarmPartitions::All
            } else {
                shoal::PrewarmPartitions::Only(partitions)
            };
            let r = ds.prewarm(column.as_deref(), &which)?;
            eprintln!();
            println!(
                "prewarmed {} ({}): {} partitions, {} fragments; {} GETs, {:.1} MiB in {:.1} s",
                dataset.display(),
                r.columns.join(", "),
                r.partitions,
                r.fragments,
                r.gets,
                r.bytes as f64 / (1 << 20) as f64,
                r.elapsed_ms / 1e3
            );
            Ok(())
        }
        Command::Optimize { dataset } => {
            let mut ds =
                Dataset::open_with_config(&dataset, config)?.with_progress(progress_printer());
            let before = ds.manifest().fragments.clone();
            let commit = ds.optimize()?;
            let built = commit.segments;
            eprintln!();
            let rewritten = before.iter().filter(|f| f.paged.is_none()).count();
            if rewritten > 0 {
                println!(
                    "rewrote {rewritten} Arrow IPC fragment(s) into paged fragments (same rows)"
                );
            }
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
            let mut ds =
                Dataset::open_with_config(&dataset, config)?.with_progress(progress_printer());
            let commit = ds.reindex(column.as_deref())?;
            eprintln!();
            let Some(meta) = commit.segments.first() else {
                return Err(Error::Internal("a rebuild committed no segment".into()));
            };
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
            let n = ds.delete(&filter)?.rows;
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
            bits,
            nprobes,
            m,
            ef_construction,
            efs,
            num_queries,
            export,
            dataset,
            modes,
            cache_bytes,
            passes,
            latency_ms,
            select,
            concurrency,
            window_us,
            plot,
            filter,
            filters,
            adaptive,
            refine_factor,
        } => {
            // What the dataset benchmarks (batch, engine) share: the cache
            // size asked for and the query shape.
            let nprobe = nprobes.first().copied().unwrap_or(16);
            let dataset_bench_setup = || -> Result<(Config, QueryShape)> {
                let mut config = config.clone();
                if let Some(c) = cache_bytes {
                    config.cache.capacity_bytes = shoal::config::CacheCapacity::Bytes(c);
                }
                let shape = QueryShape::new(
                    filter,
                    filters,
                    nprobe,
                    &adaptive,
                    efs.first().copied(),
                    refine_factor,
                )?;
                Ok((config, shape))
            };
            match mode.unwrap_or(if !concurrency.is_empty() {
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
                        kinds: types
                            .iter()
                            .flat_map(|t| match t {
                                IndexTypeArg::IvfRq => bits
                                    .iter()
                                    .map(|&b| t.kind(sub_vectors, b, (m, ef_construction)))
                                    .collect::<Vec<_>>(),
                                _ => vec![t.kind(sub_vectors, 0, (m, ef_construction))],
                            })
                            .collect(),
                        partitions,
                        nprobes,
                        efs: if efs.is_empty() {
                            vec![16, 32, 64, 128]
                        } else {
                            efs.clone()
                        },
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
                    let (config, shape) = dataset_bench_setup()?;
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
                BenchModeArg::Remote => {
                    let (Some(dataset), Some(queries)) = (dataset, queries) else {
                        return Err(Error::InvalidArgument(
                            "--mode remote needs --dataset (a local, indexed dataset) and --queries"
                                .into(),
                        ));
                    };
                    let (config, shape) = dataset_bench_setup()?;
                    let opts = RemoteBenchOptions {
                        dataset,
                        queries,
                        k,
                        shape,
                        batch_sizes,
                        passes,
                        latency: std::time::Duration::from_millis(latency_ms),
                        select,
                    };
                    let rows = run_remote(&opts, &config)?;
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
                    let (config, shape) = dataset_bench_setup()?;
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
            }
        }
    }
}
