//! `GET /metrics`: the engine's stats in the Prometheus text format, via
//! `prometheus-client`. Each scrape reads one [`EngineStats`] snapshot and
//! encodes it through a collector, so the engine keeps its own lock-free
//! counters and nothing is registered twice.

use crate::serve::{Engine, EngineStats, HistogramSnapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Encodes `engine`'s stats as Prometheus text.
pub fn render(engine: &Engine) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("shoal");
    registry.register_collector(Box::new(Snapshot(engine.stats())));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

#[derive(Debug)]
struct Snapshot(EngineStats);

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let counters: [(&str, &str, u64); 13] = [
            ("requests", "Coalesced searches submitted", s.requests),
            (
                "batches",
                "Batches scanned (coalesced and explicit)",
                s.batches,
            ),
            (
                "explicit_batches",
                "Explicit batches scanned",
                s.explicit_batches,
            ),
            (
                "skipped_batches",
                "Batches skipped because every caller had gone",
                s.skipped_batches,
            ),
            (
                "failed_batches",
                "Batches that failed as a whole",
                s.failed_batches,
            ),
            (
                "rejected_overloaded",
                "Searches rejected: queue or memory budget full",
                s.rejected_overloaded,
            ),
            (
                "deadline_exceeded",
                "Searches whose deadline passed before their scan",
                s.deadline_exceeded,
            ),
            ("cancelled", "Searches whose caller went away", s.cancelled),
            (
                "write_conflicts",
                "Writes redone because another process committed first",
                s.write_conflicts,
            ),
            ("cache_hits", "Partition-cache hits", s.cache_hits),
            ("cache_misses", "Partition-cache misses", s.cache_misses),
            (
                "storage_get_requests",
                "GET requests sent to object storage (partitions, fragment pages, files)",
                s.storage_gets,
            ),
            (
                "storage_get_bytes",
                "Bytes brought by GET requests to object storage",
                s.storage_bytes,
            ),
        ];
        for (name, help, value) in counters {
            encoder
                .encode_descriptor(name, help, None, MetricType::Counter)?
                .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&value, None)?;
        }
        let gauges: [(&str, &str, f64); 4] = [
            (
                "pending",
                "Searches waiting in the coalescer",
                s.pending as f64,
            ),
            (
                "budget_in_use_bytes",
                "Memory budget held by running batches",
                s.budget_in_use as f64,
            ),
            (
                "budget_limit_bytes",
                "Memory budget size",
                s.budget_limit as f64,
            ),
            (
                "cache_hit_ratio",
                "Partition-cache hits over lookups",
                s.cache_hit_ratio(),
            ),
        ];
        for (name, help, value) in gauges {
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&value)?;
        }
        let histograms: [(&str, &str, &HistogramSnapshot, f64); 4] = [
            (
                "batch_size",
                "Queries per scanned batch",
                &s.batch_size,
                1.0,
            ),
            (
                "batch_distinct_filters",
                "Distinct filters among the queries of a scanned batch",
                &s.batch_filters,
                1.0,
            ),
            (
                "queue_wait_seconds",
                "Time from submission to scan start per search",
                &s.queue_wait_us,
                1e-6,
            ),
            ("scan_seconds", "Scan time per batch", &s.scan_us, 1e-6),
        ];
        for (name, help, h, scale) in histograms {
            let buckets: Vec<(f64, u64)> = h
                .counts
                .iter()
                .enumerate()
                .map(|(i, &n)| (h.bounds.get(i).map_or(f64::MAX, |&b| b as f64 * scale), n))
                .collect();
            encoder
                .encode_descriptor(name, help, None, MetricType::Histogram)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    h.sum as f64 * scale,
                    h.count(),
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }
}
