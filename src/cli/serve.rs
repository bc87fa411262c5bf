//! `shoal serve`: the HTTP service over every dataset of a data directory,
//! with a demo dataset built on first start.

use super::print::progress_printer;
use shoal::demo::{clustered_vectors, demo_batch, demo_schema};
use shoal::{Config, Engine, Error, Metric, Result, Session};
use shoal::{IndexKind, IndexParams};
use std::path::Path;

/// Rows and dimension of the demo dataset `serve` creates in an empty
/// data directory.
const DEMO_ROWS: usize = 100_000;
const DEMO_DIM: usize = 128;

/// Runs the service until SIGINT or SIGTERM.
pub fn run_serve(data_dir: &Path, listen: Option<String>, mut config: Config) -> Result<()> {
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    config.validate()?;
    let session = Session::new(config.clone());
    // A local data directory not made yet is empty: the demo is built
    // there, and the engine makes the directory.
    if shoal::internals::dataset_names_in(&session, data_dir)?.is_empty() {
        match build_demo(&session, &data_dir.join("demo")) {
            // A replica started at the same time is building it.
            Err(Error::DatasetExists(_)) => eprintln!("another process created the demo dataset"),
            other => other?,
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start the tokio runtime: {e}")))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&config.server.listen)
            .await
            .map_err(|e| {
                Error::InvalidArgument(format!("cannot listen on {}: {e}", config.server.listen))
            })?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::Internal(format!("no local address: {e}")))?;
        let engine = Engine::with_session(session, data_dir)?;
        let names = engine.dataset_names().await?;
        let stop = stop_signal()?;
        println!(
            "shoal serving {} ({}) on http://{address}",
            data_dir.display(),
            names.join(", ")
        );
        println!("try:");
        println!("  curl -s http://{address}/v1/datasets");
        if names.iter().any(|n| n == "demo") {
            println!(
                "  curl -s http://{address}/v1/datasets/demo/search -H 'content-type: application/json' \\\n    -d \"{{\\\"vector\\\": $(python3 -c 'print([0.5]*{DEMO_DIM})'), \\\"k\\\": 5, \\\"filter\\\": \\\"len < 20\\\", \\\"select\\\": [\\\"category\\\"]}}\""
            );
        }
        shoal::http::serve(listener, engine, stop).await?;
        println!("shoal stopped");
        Ok(())
    })
}

/// Listens for SIGINT (Ctrl-C) and, on Unix, SIGTERM from the moment it is
/// called; the future resolves on the first of them. Called before the
/// ready line is printed: a signal sent right after that line (a script, a
/// test, a supervisor) is never missed. (A listener registered only when
/// the server first polls it could miss one: tokio observes a signal only
/// once its listener exists.)
fn stop_signal() -> Result<impl std::future::Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| Error::Internal(format!("cannot listen for {name}: {e}")))
        };
        let mut interrupt = listen(SignalKind::interrupt(), "SIGINT")?;
        let mut terminate = listen(SignalKind::terminate(), "SIGTERM")?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            eprintln!("stopping: finishing requests in flight");
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            eprintln!("stopping: finishing requests in flight");
        })
    }
}

/// The demo: 100,000 seeded clustered vectors of 128 floats with
/// `category` and `len` columns, indexed with IVF_FLAT (256 partitions).
fn build_demo(session: &Session, dir: &Path) -> Result<()> {
    eprintln!(
        "no dataset under {}: building the demo dataset ({DEMO_ROWS} × {DEMO_DIM}, ivf_flat)",
        dir.parent().unwrap_or(dir).display()
    );
    let mut ds = session.create(dir, demo_schema("vector", DEMO_DIM, Metric::L2)?)?;
    let vectors = clustered_vectors(DEMO_ROWS, DEMO_DIM, 256, 42);
    let chunk = 10_000;
    let progress = progress_printer();
    let batches = vectors.chunks(chunk * DEMO_DIM).enumerate().map(|(i, c)| {
        progress.report("rows", ((i + 1) * chunk) as u64, DEMO_ROWS as u64);
        demo_batch("vector", DEMO_DIM, c, i * chunk)
    });
    ds.append(batches)?;
    eprintln!();
    let mut ds = ds.with_progress(progress_printer());
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 256))?;
    eprintln!();
    Ok(())
}
