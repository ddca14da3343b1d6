//! The `memlife` binary: parse arguments, run the command, map the outcome to an exit code
//! (0 done, 1 done but some items failed, 2 error). A closed stdout pipe is not an error.

use std::process::ExitCode;

use clap::Parser;

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
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(memlife::cli::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            let broken_pipe = error.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
