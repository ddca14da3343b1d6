//! The `memlife` binary: parse arguments, run the command, map the outcome to an exit status
//! (0 done, 1 done but some items failed, 2 error). A closed stdout pipe is not an error.

use std::process::ExitCode;

use clap::Parser;
use memlife::exit::{self, ExitStatus};

/// Lance sizes its compute pool as the cores minus two it reserves for IO, and never below
/// one: on a machine of 2 cores every Lance encode, scan and index build ran on one core (a
/// 1M-row import wrote in 6.3 s and built its full-text index with one worker in 5.4 s; with
/// both cores 4.6 s and 3.3 s). memlife's jobs wait on Lance rather than compete with it, so
/// on machines under 8 cores Lance gets every core, unless `LANCE_CPU_THREADS` says otherwise.
#[allow(unsafe_code)]
fn size_lance_pool() {
    if std::env::var_os("LANCE_CPU_THREADS").is_some() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 8 {
        // SAFETY: called first thing in `main`, before any thread exists that could read the
        // environment concurrently.
        unsafe { std::env::set_var("LANCE_CPU_THREADS", cores.to_string()) };
    }
}

fn main() -> ExitCode {
    size_lance_pool();
    let cli = memlife::cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEMLIFE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitStatus::Error.into();
        }
    };
    let mut stdout = std::io::stdout().lock();
    let status = match runtime.block_on(memlife::cli::run(cli, &mut stdout)) {
        Ok(status) => status,
        Err(error) => {
            let status = exit::for_error(&error);
            if status == ExitStatus::Error {
                eprintln!("error: {error:#}");
            }
            status
        }
    };
    status.into()
}
