//! Kahuna: Hadoop cluster history as Delta Lake tables, diagnosed in SQL.
//!
//! The data path follows the folders: [`ingest`] (log files → events → SALSA states) →
//! [`warehouse`] (Delta tables) → [`catalog`] (tables for SQL, with `kahuna-udfs`) → [`shell`].

pub mod catalog;
pub mod commands;
pub mod diagnose;
pub mod eval;
pub mod ingest;
pub mod queries;
pub mod report;
pub mod schedule;
pub mod shell;
pub mod simulate;
pub mod synthetic;
pub mod warehouse;

/// jemalloc, for the command and everything built on this library (its tests and benchmarks):
/// glibc hands large buffers back to the kernel and every query then faults their pages in
/// anew. mimalloc, tried too, spent more time in the kernel.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts. `oversize_threshold:0`: allocations over 8 MiB
/// otherwise go to an arena that hands them back to the kernel at once, and the 5-month
/// history's `peer_correlation` spent 8 s in page faults (6.4–7.2 s with this, 8.7–9.5 s
/// without, 7.5–7.6 s with glibc; peak 5.5 GB against 3.7 and 4.6).
#[used]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8] = b"oversize_threshold:0\0";

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
