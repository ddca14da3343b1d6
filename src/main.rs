//! The `memlife` binary: parse arguments, run the command, map the outcome to an exit status
//! (0 done, 1 done but some items failed, 2 error). A closed stdout pipe is not an error.

use std::process::ExitCode;

use clap::Parser;
use memlife::exit::{self, ExitStatus};

fn main() -> ExitCode {
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
