use std::process::ExitCode;

use clap::Parser;

use callback_gateway::cli::Cli;
use callback_gateway::telemetry;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init();
    match cli.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            error.exit_code()
        }
    }
}
