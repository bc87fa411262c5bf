//! The engine benchmark's chart: request latency against throughput, one
//! line per client count through the coalescing windows measured, and the
//! direct (uncoalesced) engine as a reference point.
//!
//! Drawn with `plotters` into a PNG. Text needs a TrueType font: the first
//! of `SHOAL_PLOT_FONT` and a few usual system paths that exists.

use super::engine::EngineRow;
use plotters::prelude::*;
use shoal::{Error, Result};
use std::path::Path;

/// Where a sans-serif TrueType font usually is.
const FONT_PATHS: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Line colours, one per client count: distinct and readable on white.
const SERIES_COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// Registers a font for plotters once per process.
fn register_font() -> Result<()> {
    static REGISTERED: std::sync::OnceLock<std::result::Result<(), String>> =
        std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let candidates = std::env::var("SHOAL_PLOT_FONT")
                .ok()
                .into_iter()
                .chain(FONT_PATHS.iter().map(|s| s.to_string()));
            for path in candidates {
                if let Ok(bytes) = std::fs::read(&path) {
                    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                        .map_err(|_| format!("{path} is not a TrueType font"));
                }
            }
            Err(format!(
                "no TrueType font found for the plot: set SHOAL_PLOT_FONT (tried {})",
                FONT_PATHS.join(", ")
            ))
        })
        .clone()
        .map_err(Error::InvalidArgument)
}

fn plot_error(e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("cannot draw the plot: {e}"))
}

/// Draws p50 (dashed) and p99 latency against QPS for every row.
pub fn latency_throughput(path: &Path, rows: &[EngineRow]) -> Result<()> {
    register_font()?;
    let x_max = rows.iter().map(|r| r.qps).fold(1.0, f64::max) * 1.15;
    let y_max = rows.iter().map(|r| r.p99_ms).fold(0.01, f64::max) * 1.2;
    let root = BitMapBackend::new(path, (1100, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "shoal engine: request latency against throughput (closed-loop clients)",
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("searches per second")
        .y_desc("latency, ms (solid p99, dashed p50)")
        .label_style(("sans-serif", 15))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()
        .map_err(plot_error)?;
    let mut concurrencies: Vec<usize> = rows.iter().map(|r| r.concurrency).collect();
    concurrencies.sort_unstable();
    concurrencies.dedup();
    for (i, &clients) in concurrencies.iter().enumerate() {
        let color = SERIES_COLORS[i % SERIES_COLORS.len()].to_rgba();
        let mut coalesced: Vec<&EngineRow> = rows
            .iter()
            .filter(|r| r.concurrency == clients && r.mode == "coalesced")
            .collect();
        coalesced.sort_by_key(|r| r.window_us);
        let p99: Vec<(f64, f64)> = coalesced.iter().map(|r| (r.qps, r.p99_ms)).collect();
        let p50: Vec<(f64, f64)> = coalesced.iter().map(|r| (r.qps, r.p50_ms)).collect();
        chart
            .draw_series(LineSeries::new(p99.clone(), color.stroke_width(2)))
            .map_err(plot_error)?
            .label(format!("{clients} clients, coalesced"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(DashedLineSeries::new(p50.clone(), 6, 4, color.into()))
            .map_err(plot_error)?;
        chart
            .draw_series(
                p99.iter()
                    .chain(&p50)
                    .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
            )
            .map_err(plot_error)?;
        chart
            .draw_series(coalesced.iter().map(|r| {
                Text::new(
                    format!("{} µs", r.window_us),
                    (r.qps, r.p99_ms),
                    ("sans-serif", 13).into_font().color(&BLACK),
                )
            }))
            .map_err(plot_error)?;
        if let Some(direct) = rows
            .iter()
            .find(|r| r.concurrency == clients && r.mode == "direct")
        {
            chart
                .draw_series(
                    [(direct.qps, direct.p99_ms), (direct.qps, direct.p50_ms)]
                        .into_iter()
                        .map(|(x, y)| Cross::new((x, y), 6, color.stroke_width(2))),
                )
                .map_err(plot_error)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("direct, {clients} clients"),
                    (direct.qps, direct.p99_ms),
                    ("sans-serif", 13).into_font().color(&BLACK),
                )))
                .map_err(plot_error)?;
        }
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)?;
    Ok(())
}
