//! `shoal bench`: the benchmarks (`exact`: kernel and exact search; `ivf`:
//! recall and QPS per index type; `batch`: the shared scan against the
//! per-query path on a dataset; `engine`: coalesced against direct under
//! closed-loop clients, with `plot`; `remote`: a dataset on object storage
//! against local disk), and what they share: temporary
//! datasets, recall, query shapes, peak memory and JSON output.
//!
//! Everything is measured in one run on the same data, and reported as
//! rates and ratios; nothing here is asserted on.

pub mod batch;
pub mod engine;
pub mod exact;
mod fma_peak;
pub mod ivf;
mod plot;
mod read_bandwidth;
pub mod remote;

use serde::Serialize;
use shoal::demo::{demo_batch, demo_schema};
use shoal::{Config, Dataset, Error, Metric, Result};

/// A throwaway dataset of `rows` (row-major, `dim` wide) in the temp
/// directory, removed when the returned guard drops.
fn temp_dataset(
    prefix: &str,
    dim: usize,
    metric: Metric,
    rows: &[f32],
    config: &Config,
) -> Result<(Dataset, TempDir)> {
    const CHUNK: usize = 65536;
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{:x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let guard = TempDir(dir.clone());
    let mut ds = Dataset::create(&dir, demo_schema("vector", dim, metric)?, config.clone())?;
    ds.append(
        rows.chunks(CHUNK * dim)
            .enumerate()
            .map(|(i, c)| demo_batch("vector", dim, c, i * CHUNK)),
    )?;
    Ok((ds, guard))
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a report as JSON.
pub fn write_json<T: Serialize>(path: &std::path::Path, report: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(report).map_err(|e| Error::Internal(e.to_string()))?;
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// Recall@k of `found` ids against `truth` (best first).
pub fn recall_at_k(found: &[Vec<i64>], truth: &[Vec<i32>], k: usize) -> f64 {
    let mut hit = 0usize;
    let mut total = 0usize;
    for (f, t) in found.iter().zip(truth) {
        let t: std::collections::HashSet<i64> = t.iter().take(k).map(|x| *x as i64).collect();
        hit += f.iter().take(k).filter(|x| t.contains(x)).count();
        total += k.min(t.len());
    }
    hit as f64 / total.max(1) as f64
}

/// Each benchmark query's own filter, probing and refine factor.
#[derive(Clone, Debug)]
pub struct QueryShape {
    /// Distinct filters (empty: none); query i takes filter i mod N.
    pub filters: Vec<String>,
    /// Partitions probed.
    pub nprobes: shoal::Nprobes,
    /// A graph walk's candidates (an hnsw dataset); then `nprobes` is not
    /// sent.
    pub ef: Option<usize>,
    /// Refine factor.
    pub refine_factor: Option<usize>,
}

impl QueryShape {
    /// `filters` distinct filters from `template` (`{i}` replaced by the
    /// filter number; without it, `(template) AND id <> -(i+1)`, distinct
    /// filters admitting the same rows); fixed `nprobes`, or `adaptive`
    /// `[min, max]` when given.
    pub fn new(
        template: Option<String>,
        filters: usize,
        nprobes: usize,
        adaptive: &[usize],
        ef: Option<usize>,
        refine_factor: Option<usize>,
    ) -> Result<QueryShape> {
        if filters == 0 {
            return Err(shoal::Error::InvalidArgument(
                "--filters must be at least 1".into(),
            ));
        }
        let filters = match template {
            None if filters > 1 => {
                return Err(shoal::Error::InvalidArgument(
                    "--filters N needs --filter (the template of the N filters)".into(),
                ))
            }
            None => Vec::new(),
            Some(t) if filters == 1 => vec![t.replace("{i}", "0")],
            Some(t) if t.contains("{i}") => (0..filters)
                .map(|i| t.replace("{i}", &i.to_string()))
                .collect(),
            Some(t) => (0..filters)
                .map(|i| format!("({t}) AND id <> -{}", i + 1))
                .collect(),
        };
        let nprobes = match adaptive {
            [] => shoal::Nprobes::Fixed(nprobes),
            [min, max] => shoal::Nprobes::Adaptive {
                min: *min,
                max: *max,
            },
            _ => {
                return Err(shoal::Error::InvalidArgument(
                    "--adaptive takes MIN,MAX".into(),
                ))
            }
        };
        Ok(QueryShape {
            filters,
            nprobes,
            ef,
            refine_factor,
        })
    }

    /// Query number `i`'s own parameters.
    pub fn own(&self, i: usize) -> shoal::PerQueryParams {
        shoal::PerQueryParams {
            filter: (!self.filters.is_empty())
                .then(|| self.filters[i % self.filters.len()].clone()),
            nprobes: self.ef.is_none().then_some(self.nprobes),
            ef: self.ef,
            refine_factor: self.refine_factor,
            ..shoal::PerQueryParams::default()
        }
    }

    /// One line saying what the queries ask for.
    pub fn describe(&self) -> String {
        let probes = match (self.ef, self.nprobes) {
            (Some(ef), _) => format!("ef = {ef}"),
            (None, shoal::Nprobes::Fixed(n)) => format!("nprobes = {n}"),
            (None, shoal::Nprobes::Adaptive { min, max }) => {
                format!("adaptive nprobes {min}..{max}")
            }
        };
        let filters = match self.filters.len() {
            0 => "no filter".to_string(),
            1 => format!("filter {}", self.filters[0]),
            n => format!("{n} distinct filters like {}", self.filters[0]),
        };
        let refine = self
            .refine_factor
            .map_or(String::new(), |r| format!(", refine factor {r}"));
        format!("{probes}, {filters}{refine}")
    }
}

/// Peak resident set size (VmHWM) in MiB, where the OS reports it.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}
