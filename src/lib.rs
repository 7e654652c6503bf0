//! Kahuna: Hadoop cluster history as Delta Lake tables, diagnosed in SQL.
//!
//! The data path follows the folders: [`ingest`] (log files → events → SALSA states) →
//! [`warehouse`] (Delta tables) → [`catalog`] (tables for SQL, with `kahuna-udfs`) →
//! [`diagnose`] (query files, runs and their recorded verdicts, evaluation) → [`schedule`]
//! (nightly runs) → [`shell`], [`serve`] (Arrow Flight SQL), [`report`] (an HTML page of a window) and [`cli`] (the `kahuna`
//! command). [`simulate`] writes the logs of a simulated cluster with injected faults, for
//! tests and evaluation.

pub mod catalog;
pub mod cli;
pub mod cluster;
pub mod diagnose;
pub mod ingest;
pub mod report;
pub mod schedule;
pub mod serve;
pub mod shell;
pub mod simulate;
pub mod warehouse;

/// Sets jemalloc as the global allocator of the program that invokes it: the `kahuna` binary
/// and the benchmarks, which measure what it runs. A library that links this one keeps its own.
/// glibc hands large buffers back to the kernel and every query then faults their pages in anew;
/// jemalloc keeps them a while. `oversize_threshold:0` keeps allocations over 8 MiB in the
/// ordinary arenas too, where jemalloc would otherwise hand them back at once.
#[macro_export]
macro_rules! jemalloc {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::Jemalloc = $crate::Jemalloc;

        #[used]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        static MALLOC_CONF: &[u8] = b"oversize_threshold:0\0";
    };
}

#[doc(hidden)]
pub use tikv_jemallocator::Jemalloc;

/// The machine's cores: how many files an ingest reads, and how many runs an evaluation
/// queries, at once unless told otherwise.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}

/// An error as one message, outermost context first (`queries/x.sql: statement 2 of 4: …`).
/// A cause whose text its wrapper already shows is left out: DataFusion's errors repeat their
/// source in their own message, and `{:#}` printed "Schema error: No field named x: No field
/// named x" for each level.
pub fn error_message(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain().map(ToString::to_string) {
        if message.contains(&cause) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&cause);
    }
    message
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_names_each_cause_once() {
        let inner = datafusion::error::DataFusionError::Plan("No field named nope".into());
        let outer = anyhow::Error::new(inner).context("queries/x.sql: statement 2 of 4");
        assert_eq!(
            super::error_message(&outer),
            "queries/x.sql: statement 2 of 4: Error during planning: No field named nope"
        );
        let repeated = anyhow::anyhow!("cannot read a.log").context("ingest: cannot read a.log");
        assert_eq!(super::error_message(&repeated), "ingest: cannot read a.log");
    }
}
