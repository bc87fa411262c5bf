//! What the command line prints: progress lines, `shoal info`, and search
//! results as JSON Lines or `.ivecs`.

use shoal::ingest::write_ivecs;
use shoal::{Config, Dataset, Error, Progress, Result};
use std::io::Write;
use std::path::Path;

/// Where stdout errors are reported as coming from.
pub const STDOUT: &str = "<stdout>";

/// Writes one line to stdout: a closed pipe or a full disk is an error
/// (`Error::Io` on `<stdout>`), never a panic as with `println!`.
pub fn stdout_line(line: std::fmt::Arguments<'_>) -> Result<()> {
    writeln!(std::io::stdout().lock(), "{line}").map_err(|e| Error::io(STDOUT, e))
}

/// Writes a write command's report line; when stdout fails, the error says
/// that `version` was committed, so a script that retries on failure does
/// not apply the write twice.
pub fn committed(version: u64, line: std::fmt::Arguments<'_>) -> Result<()> {
    writeln!(std::io::stdout().lock(), "{line}").map_err(|e| {
        Error::io(
            format!("{STDOUT} (version {version} was committed; do not retry the write)"),
            e,
        )
    })
}

/// `println!` that returns stdout's failure as an error (see
/// [`stdout_line`]); use with `?`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::print::stdout_line(format_args!($($arg)*))
    };
}

/// Prints `stage done/total` on one stderr line while long work runs.
pub fn progress_printer() -> Progress {
    let last = std::sync::Mutex::new(std::time::Instant::now() - std::time::Duration::from_secs(1));
    Progress::new(move |stage: &str, done: u64, total: u64| {
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed().as_millis() >= 200 || done == total {
            eprint!("\r{stage}: {done}/{total}        ");
            let _ = std::io::stderr().flush();
            *last = std::time::Instant::now();
        }
    })
}

/// An ingest's progress as a bar of input bytes on stderr (drawn only
/// when stderr is a terminal). The bar is returned to be cleared.
pub fn ingest_bar() -> (Progress, indicatif::ProgressBar) {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "ingest {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let drawn = bar.clone();
    let progress = Progress::new(move |_stage: &str, done: u64, total: u64| {
        drawn.set_length(total);
        drawn.set_position(done);
    });
    (progress, bar)
}

/// `shoal info`: versions, schema, fragments and index segments.
pub fn info(path: &Path, version: Option<u64>, config: &Config) -> Result<()> {
    let mut ds = Dataset::open_with_config(path, config.clone())?;
    if let Some(v) = version {
        ds = ds.checkout(v)?;
    }
    out!(
        "dataset {}  version {}  rows {}",
        path.display(),
        ds.version(),
        ds.count_rows()
    )?;
    out!("schema:")?;
    for c in &ds.schema().columns {
        match &c.ty {
            shoal::ColumnType::Vector { dim, metric } => {
                out!("  {:<16} vector[{dim}] (metric {metric})", c.name)?
            }
            other => out!("  {:<16} {}", c.name, other.describe())?,
        }
    }
    out!("fragments:")?;
    for f in &ds.manifest().fragments {
        out!(
            "  {:>4}  {:>10} rows  {:>8} deleted  {}",
            f.id,
            f.rows,
            f.deleted_rows,
            f.file
        )?;
    }
    out!("index segments:")?;
    if ds.index_segments().is_empty() {
        out!("  none")?;
    }
    for m in ds.index_segments() {
        out!(
            "  {}  column '{}'  {}  metric {}  {}  {} rows  fragments {:?}{}",
            m.id,
            m.column,
            m.params.kind.name(),
            m.metric,
            match m.params.kind {
                shoal::IndexKind::Hnsw { m, ef_construction } => {
                    format!("m {m}, ef_construction {ef_construction}")
                }
                _ => format!("{} partitions", m.params.partitions),
            },
            m.rows,
            m.fragments,
            if m.trained_in == m.id {
                String::new()
            } else {
                format!("  (delta; model of {})", m.trained_in)
            }
        )?;
    }
    out!("versions:")?;
    for v in ds.versions()? {
        out!(
            "  {:>4}  {:<8} {:>10} rows  {:>4} fragments  t={}",
            v.version,
            v.operation,
            v.rows,
            v.fragments,
            v.timestamp_ms
        )?;
    }
    Ok(())
}

/// Writes each query's hits as JSON Lines (stdout or a file) or `.ivecs`.
pub fn write_results(
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
                writeln!(out, "{qi}\t{}", row.join(" ")).map_err(|e| Error::io(STDOUT, e))?;
            }
            out.flush().map_err(|e| Error::io(STDOUT, e))
        }
    }
}
