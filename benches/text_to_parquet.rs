//! `kahuna ingest` against DuckDB's text-to-Parquet pipeline on the same daemon logs:
//! `cargo bench --bench text_to_parquet` (release build).
//!
//! Writes synthetic TaskTracker and DataNode logs (`kahuna::simulate::synthetic`) as many small
//! files, then runs, each in its own process on `KAHUNA_BENCH_THREADS` threads (default 2):
//! `kahuna ingest` into a fresh warehouse (all its tables, states included), and
//! `benches/peers/duckdb_text_to_parquet.py` (lines split with a regular expression, times
//! parsed, zstd Parquet by date; logs only). Prints MB of text per CPU-second of each, the
//! median of `KAHUNA_BENCH_RUNS` runs (default 3), and their ratio, measured in one run.
//!
//! DuckDB comes from its Python package in a venv of the bench's own, named by
//! `KAHUNA_BENCH_PYTHON` (`python3 -m venv v && v/bin/pip install duckdb`); without it the
//! bench says so and measures nothing. `KAHUNA_BENCH_MB` sets the input size (default 512) and
//! `KAHUNA_BENCH_FILES` the number of files (default 1,200).

mod common;

use std::path::Path;
use std::process::Command;

use common::{ProcessCost, cli_ingest, median, process_cost};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The bench's Python, if it has DuckDB.
fn python_with_duckdb() -> Result<String, String> {
    let python = std::env::var("KAHUNA_BENCH_PYTHON")
        .map_err(|_| "KAHUNA_BENCH_PYTHON is not set (a venv's python with duckdb installed)".to_string())?;
    let found = Command::new(&python).args(["-c", "import duckdb"]).output();
    match found {
        Ok(out) if out.status.success() => Ok(python),
        Ok(out) => Err(format!("{python} cannot import duckdb: {}", String::from_utf8_lossy(&out.stderr).trim())),
        Err(e) => Err(format!("cannot run {python}: {e}")),
    }
}

fn duckdb_pipeline(python: &str, input: &Path, threads: usize) -> ProcessCost {
    let output = tempfile::tempdir().expect("temp dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/duckdb_text_to_parquet.py");
    process_cost(Command::new(python).arg(script).arg(input).arg(output.path().join("logs")).arg(threads.to_string()))
}

fn main() {
    let python = match python_with_duckdb() {
        Ok(python) => python,
        Err(why) => {
            println!("text_to_parquet: skipped: {why}");
            return;
        }
    };
    let mb = env_number("KAHUNA_BENCH_MB", 512);
    let files = env_number("KAHUNA_BENCH_FILES", 1200).max(2);
    let runs = env_number("KAHUNA_BENCH_RUNS", 3) as usize;
    let threads = env_number("KAHUNA_BENCH_THREADS", 2) as usize;
    let input = tempfile::tempdir().expect("temp dir");
    // Hosts of a TaskTracker and a DataNode log each, named so that the peer's glob finds them.
    let written =
        kahuna::simulate::synthetic::write_cluster_logs(input.path(), files as usize / 2, (mb << 20) / files, 42)
            .expect("write logs");
    let bytes: u64 = written.iter().map(|path| std::fs::metadata(path).expect("a written log").len()).sum();
    let text_mb = bytes as f64 / 1e6;
    println!("{} files, {text_mb:.0} MB of text, {threads} threads, median of {runs} runs", written.len());
    println!("{:>34} {:>10} {:>10} {:>14} {:>12}", "pipeline", "wall s", "CPU s", "MB per CPU-s", "peak RSS MB");
    let mut per_cpu = Vec::new();
    type Run<'a> = Box<dyn Fn() -> ProcessCost + 'a>;
    let pipelines: [(&str, Run); 2] = [
        ("kahuna ingest (all tables)", Box::new(|| cli_ingest(input.path(), threads, false))),
        ("DuckDB text -> Parquet (logs only)", Box::new(|| duckdb_pipeline(&python, input.path(), threads))),
    ];
    for (name, run) in pipelines {
        let costs: Vec<ProcessCost> = (0..runs).map(|_| run()).collect();
        let cpu = median(costs.iter().map(|c| c.cpu_secs).collect());
        println!(
            "{name:>34} {:>10.2} {cpu:>10.2} {:>14.1} {:>12.0}",
            median(costs.iter().map(|c| c.secs).collect()),
            text_mb / cpu,
            costs.iter().map(|c| c.peak_mb).fold(0.0, f64::max)
        );
        per_cpu.push(text_mb / cpu);
    }
    println!("kahuna per CPU-second: {:.2}x DuckDB's (target >= 3x)", per_cpu[0] / per_cpu[1]);
}
