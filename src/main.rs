//! The `shoal` command line: demo, ingest, info, index, search, delete,
//! bench. Arguments are `cli::args`, commands `cli::commands`, output
//! `cli::print`.

use clap::Parser;

mod cli;

/// mimalloc instead of the system allocator: glibc keeps freed partition
/// buffers in its per-thread arenas, so a search over a small cache held
/// several times the cache bound in memory; mimalloc returns freed pages.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = cli::args::Cli::parse();
    if let Err(e) = cli::commands::run(cli) {
        // A reader that stopped reading (`shoal info | head -1`) is not a
        // failure of the command: exit quietly, as other tools do.
        if let shoal::Error::Io { path, source } = &e {
            if path.starts_with(cli::print::STDOUT)
                && source.kind() == std::io::ErrorKind::BrokenPipe
            {
                std::process::exit(0);
            }
        }
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
