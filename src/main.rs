//! The `kahuna` command: parses the command line and runs it (see [`kahuna::cli`]).

use clap::Parser as _;

kahuna::jemalloc!();

/// A worker thread's stack: the main thread's 8 MiB rather than tokio's 2, as a Ballista
/// scheduler plans and an executor decodes long statements (Ganesha's) by deep recursion.
const WORKER_STACK_BYTES: usize = 8 << 20;

fn main() -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(WORKER_STACK_BYTES)
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(kahuna::cli::run(kahuna::cli::Cli::parse())) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, outermost context first: `queries/x.sql: parameter t: expected …`.
            eprintln!("error: {}", kahuna::error_message(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
