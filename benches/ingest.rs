//! Ingest throughput and memory: `cargo bench --bench ingest` (release build).
//!
//! Writes synthetic TaskTracker and DataNode logs (`kahuna::synthetic`), then measures, each
//! run in a fresh warehouse: parsing alone (`--dry-run`: lines → events → states, counted,
//! nothing built) and text → all four tables, on 1 and on 2 threads. Prints MB/s (wall time)
//! and MB/s per core (MB per CPU-second the process used, so that other load on a shared
//! machine does not count), each the median of `KAHUNA_BENCH_RUNS` runs (default 5), and the
//! peak resident memory after each size, to show that memory stays flat as the input grows.
//! `KAHUNA_BENCH_MB` sets the input sizes (default `128,512`).

mod common;

use std::path::Path;

use common::{median, peak_rss_mb, process_cpu_seconds, reset_peak, timed_ingest};

/// Wall seconds, CPU seconds and bytes read of one ingest.
async fn run(input: &Path, threads: usize, dry_run: bool) -> (f64, f64, u64) {
    let cpu_before = process_cpu_seconds();
    let (secs, summary) = timed_ingest(input, threads, dry_run).await;
    (secs, process_cpu_seconds() - cpu_before, summary.bytes_read())
}

#[tokio::main]
async fn main() {
    let sizes: Vec<u64> = std::env::var("KAHUNA_BENCH_MB")
        .unwrap_or_else(|_| "128,512".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runs: usize = std::env::var("KAHUNA_BENCH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    println!("{:>8} {:>28} {:>8} {:>12} {:>14} {:>12}", "input", "phase", "threads", "MB/s", "MB/s per core", "peak RSS MB");
    for mb in sizes {
        let input = tempfile::tempdir().expect("temp dir");
        // 8 hosts, a TaskTracker and a DataNode log each.
        kahuna::synthetic::write_cluster_logs(input.path(), 8, (mb << 20) / 16, 42).expect("write logs");
        for (phase, dry_run) in [("parse only (--dry-run)", true), ("text -> 4 Delta tables", false)] {
            for threads in [1, 2] {
                reset_peak();
                let (mut rates, mut per_core) = (Vec::new(), Vec::new());
                for _ in 0..runs {
                    let (secs, cpu_secs, bytes) = run(input.path(), threads, dry_run).await;
                    rates.push(bytes as f64 / 1e6 / secs);
                    per_core.push(bytes as f64 / 1e6 / cpu_secs);
                }
                println!(
                    "{:>6}MB {phase:>28} {threads:>8} {:>12.1} {:>14.1} {:>12.0}",
                    mb,
                    median(rates),
                    median(per_core),
                    peak_rss_mb()
                );
            }
        }
    }
}
