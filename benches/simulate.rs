//! Simulator throughput: `cargo bench --bench simulate` (release build).
//!
//! Runs a Sort on 50 nodes for an hour of simulated time (0.18 wording, no sadc) on one writer
//! thread and on two, and a hundredth of the M45 history on one thread, each in a fresh
//! folder; prints log lines written per second of wall clock per core and per second of CPU
//! time (user + system, all threads: what the runs cost on a machine shared with other work),
//! the median of `KAHUNA_BENCH_RUNS` runs (default 5), and the peak resident memory. A case's
//! folders are removed after all its runs: deleting thousands of files just before a run makes
//! the file system's inode allocation slower for that run. The history, thousands of small
//! files, runs first for that reason, before the cluster cases' deletions.

mod common;

use std::time::Instant;

use common::{median, peak_rss_mb, process_cpu_seconds, reset_peak};

use kahuna::simulate::history::{HistoryConfig, run_history};
use kahuna::simulate::workload::Workload;
use kahuna::simulate::{Config, DEFAULT_EPOCH_MS, Version, run};

/// One run: (wall seconds, CPU seconds, log lines).
type Timed = (f64, f64, u64);

fn timed(f: impl FnOnce() -> u64) -> Timed {
    let (wall, cpu) = (Instant::now(), process_cpu_seconds());
    let lines = f();
    (wall.elapsed().as_secs_f64(), process_cpu_seconds() - cpu, lines)
}

fn cluster_run(dir: &std::path::Path, threads: usize, gzip: bool) -> Timed {
    let cfg = Config {
        nodes: 50,
        workload: Workload::Sort,
        fault: None,
        duration_s: 3600.0,
        seed: 1,
        out: dir.to_path_buf(),
        version: Version::V018,
        gzip,
        sadc: false,
        threads,
        progress: false,
        epoch_ms: DEFAULT_EPOCH_MS,
        conditions: kahuna::simulate::Conditions::default(),
    };
    timed(|| run(&cfg).expect("simulate").lines.total())
}

fn history_run(dir: &std::path::Path) -> Timed {
    let cfg = HistoryConfig {
        months: 5.0,
        scale: 0.01,
        seed: 1,
        out: dir.to_path_buf(),
        version: Version::V018,
        gzip: false,
        logs: true,
        threads: 1,
        progress: false,
        conditions: kahuna::simulate::Conditions::default(),
    };
    timed(|| run_history(&cfg).expect("history")["log_lines"].as_u64().unwrap_or(0))
}

fn main() {
    let runs: usize = std::env::var("KAHUNA_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    type Case = (&'static str, usize, Box<dyn Fn(&std::path::Path) -> Timed>);
    let cases: [Case; 4] = [
        ("M45 history at 0.01, 1 thread", 1, Box::new(history_run)),
        ("sort, 50 nodes, 1 h, 1 writer thread", 1, Box::new(|d| cluster_run(d, 1, false))),
        ("sort, 50 nodes, 1 h, 2 writer threads", 2, Box::new(|d| cluster_run(d, 2, false))),
        ("sort, 50 nodes, 1 h, gzip, 2 writer threads", 2, Box::new(|d| cluster_run(d, 2, true))),
    ];
    for (name, cores, case) in cases {
        reset_peak();
        let dirs: Vec<tempfile::TempDir> = (0..runs).map(|_| tempfile::tempdir().expect("temp dir")).collect();
        let (mut wall, mut cpu) = (Vec::new(), Vec::new());
        let mut lines = 0;
        for dir in &dirs {
            let (secs, cpu_secs, n) = case(dir.path());
            lines = n;
            wall.push(n as f64 / secs / cores as f64);
            cpu.push(n as f64 / cpu_secs.max(0.01));
        }
        println!(
            "{name}: {lines} lines, median {:.2} M lines/s per core (wall), {:.2} M lines per CPU second, over {runs} runs, peak RSS {:.0} MB",
            median(wall) / 1e6,
            median(cpu) / 1e6,
            peak_rss_mb()
        );
        drop(dirs);
    }
}
