//! Simulator throughput: `cargo bench --bench simulate` (release build).
//!
//! Runs a Sort on 50 nodes for an hour of simulated time (0.18 wording, no sadc) on one writer
//! thread and on two, and a thousandth of the M45 history on one thread, each in a fresh
//! folder; prints log lines written per second of wall clock per core, the median of
//! `KAHUNA_BENCH_RUNS` runs (default 5), and the peak resident memory.

mod common;

use std::time::Instant;

use common::{median, peak_rss_mb, reset_peak};

use kahuna::simulate::history::{HistoryConfig, run_history};
use kahuna::simulate::workload::Workload;
use kahuna::simulate::{Config, DEFAULT_EPOCH_MS, Version, run};


/// (seconds, log lines) of one cluster run.
fn cluster_run(threads: usize, gzip: bool) -> (f64, u64) {
    let out = tempfile::tempdir().expect("temp dir");
    let cfg = Config {
        nodes: 50,
        workload: Workload::Sort,
        fault: None,
        duration_s: 3600.0,
        seed: 1,
        out: out.path().to_path_buf(),
        version: Version::V018,
        gzip,
        sadc: false,
        threads,
        progress: false,
        epoch_ms: DEFAULT_EPOCH_MS,
    };
    let started = Instant::now();
    let outcome = run(&cfg).expect("simulate");
    (started.elapsed().as_secs_f64(), outcome.lines.total())
}

fn history_run() -> (f64, u64) {
    let out = tempfile::tempdir().expect("temp dir");
    let cfg = HistoryConfig { months: 5.0, scale: 0.001, seed: 1, out: out.path().to_path_buf(), version: Version::V018, gzip: false, threads: 1, progress: false };
    let started = Instant::now();
    let summary = run_history(&cfg).expect("history");
    (started.elapsed().as_secs_f64(), summary["log_lines"].as_u64().unwrap_or(0))
}

fn main() {
    let runs: usize = std::env::var("KAHUNA_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    type Case = (&'static str, usize, Box<dyn Fn() -> (f64, u64)>);
    let cases: [Case; 4] = [
        ("sort, 50 nodes, 1 h, 1 writer thread", 1, Box::new(|| cluster_run(1, false))),
        ("sort, 50 nodes, 1 h, 2 writer threads", 2, Box::new(|| cluster_run(2, false))),
        ("sort, 50 nodes, 1 h, gzip, 2 writer threads", 2, Box::new(|| cluster_run(2, true))),
        ("M45 history at 0.001, 1 thread", 1, Box::new(history_run)),
    ];
    for (name, cores, case) in cases {
        reset_peak();
        let mut rates = Vec::new();
        let mut lines = 0;
        for _ in 0..runs {
            let (secs, n) = case();
            lines = n;
            rates.push(n as f64 / secs / cores as f64);
        }
        println!(
            "{name}: {lines} lines, median {:.2} M lines/s per core over {runs} runs, peak RSS {:.0} MB",
            median(rates) / 1e6,
            peak_rss_mb()
        );
    }
}
