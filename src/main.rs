//! The `kahuna` command: parses the command line and runs it (see [`kahuna::cli`]).

use clap::Parser as _;

kahuna::jemalloc!();

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match kahuna::cli::run(kahuna::cli::Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, outermost context first: `queries/x.sql: parameter t: expected …`.
            eprintln!("error: {}", kahuna::error_message(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
