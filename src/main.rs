use std::process::ExitCode;

use clap::Parser;

use callback_gateway::cli::Cli;
use callback_gateway::{startup, telemetry};

/// mimalloc instead of the system allocator: a quarter of the gateway's CPU per replay was
/// glibc's malloc and free (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init();
    match cli.run(startup::serve).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            error.exit_code()
        }
    }
}
