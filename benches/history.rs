//! Whole-history studies against the tools an analyst would use instead: `cargo bench --bench
//! history` (release build).
//!
//! Simulates the M45 history (`kahuna simulate --history m45 --no-logs` at `KAHUNA_BENCH_SCALE`,
//! default 1: five months of job history) and ingests it once, kept under `KAHUNA_BENCH_CACHE`
//! (default `target/bench-history`) for the next runs. Then runs, each in its own process and
//! `KAHUNA_BENCH_RUNS` times (default 3), over the whole history:
//! - `kahuna diagnose peer_correlation`, and beside it `benches/peers/pandas_peer_correlation.py`
//!   (the same study in pandas and numpy over the `states` Delta table);
//! - `kahuna diagnose kahuna_wb` on Map states with 32 bins, and beside it
//!   `benches/peers/duckdb_kahuna_wb.py` (the same algorithm in DuckDB SQL over the table's
//!   Parquet files);
//! - `kahuna diagnose salsa_fingerpoint`;
//! - each of our three again under `--memory-limit 2G`, which should complete (spilling) rather
//!   than fail.
//!
//! Our runs are `--dry-run` (nothing recorded, so every run reads the same warehouse). Prints
//! wall, CPU and peak memory of each (medians), the ratios of CPU and wall measured in this run,
//! and each peer's answer beside ours. The peers need `KAHUNA_BENCH_PYTHON`, a Python with
//! duckdb, deltalake, pandas and numpy; without it they are skipped with the reason.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ProcessCost, median, process_cost, process_outcome};

fn env_number(name: &str, default: f64) -> f64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn kahuna() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kahuna"))
}

/// The simulated history's warehouse, made on the first run.
fn warehouse(scale: f64) -> PathBuf {
    let cache = std::env::var_os("KAHUNA_BENCH_CACHE")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-history"), PathBuf::from)
        .join(format!("m45-{scale}"));
    let (sim, warehouse, ready) = (cache.join("sim"), cache.join("warehouse"), cache.join("ready"));
    if ready.exists() {
        return warehouse;
    }
    let _ = std::fs::remove_dir_all(&cache);
    let mut simulate = kahuna();
    simulate.args(["simulate", "--history", "m45", "--no-logs", "--scale", &scale.to_string(), "--out"]).arg(&sim);
    report("simulate the M45 history (once)", &process_cost(&mut simulate));
    let mut ingest = kahuna();
    ingest.arg("ingest").arg(&sim).args(["--cluster", "m45", "--warehouse"]).arg(&warehouse);
    report("ingest it (once)", &process_cost(&mut ingest));
    std::fs::write(&ready, "").expect("mark the cache ready");
    warehouse
}

fn report(name: &str, cost: &ProcessCost) {
    println!("{name:>44} {:>9.2} {:>9.2} {:>12.0}", cost.secs, cost.cpu_secs, cost.peak_mb);
}

/// The medians of `runs` runs of `command`, and the last run's output.
fn measure(name: &str, runs: usize, mut command: impl FnMut() -> Command) -> ProcessCost {
    let costs: Vec<ProcessCost> = (0..runs).map(|_| process_cost(&mut command())).collect();
    let cost = ProcessCost {
        secs: median(costs.iter().map(|c| c.secs).collect()),
        cpu_secs: median(costs.iter().map(|c| c.cpu_secs).collect()),
        peak_mb: costs.iter().map(|c| c.peak_mb).fold(0.0, f64::max),
        output: costs.last().map(|c| c.output.clone()).unwrap_or_default(),
    };
    report(name, &cost);
    cost
}

fn diagnose(warehouse: &Path, query: &str, params: &[&str], memory_limit: Option<&str>) -> Command {
    let mut command = kahuna();
    command.args(["diagnose", query, "--dry-run", "--rows", "5", "--warehouse"]).arg(warehouse);
    for param in params {
        command.args(["--param", param]);
    }
    if let Some(limit) = memory_limit {
        command.args(["--memory-limit", limit]);
    }
    command
}

/// The bench's Python, if it has what the peers import.
fn python() -> Result<String, String> {
    let python = std::env::var("KAHUNA_BENCH_PYTHON").map_err(|_| {
        "KAHUNA_BENCH_PYTHON is not set (a venv's python with duckdb, deltalake, pandas and numpy)".to_string()
    })?;
    match Command::new(&python).args(["-c", "import duckdb, deltalake, pandas, numpy"]).output() {
        Ok(out) if out.status.success() => Ok(python),
        Ok(out) => {
            Err(format!("{python} cannot import the peers' packages: {}", String::from_utf8_lossy(&out.stderr).trim()))
        }
        Err(e) => Err(format!("cannot run {python}: {e}")),
    }
}

fn peer(python: &str, script: &str, args: &[&Path]) -> Command {
    let mut command = Command::new(python);
    command.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers").join(script)).args(args);
    command
}

/// The lines of a run's output that say its answer.
fn answer(output: &str) -> String {
    let keep = |line: &&str| {
        line.contains("hosts indicted")
            || line.starts_with("| SUCCEEDED")
            || line.starts_with("| FAILED")
            || line.starts_with("| UNKNOWN")
            || line.starts_with("jobs ")
            || line.starts_with("compared ")
    };
    output.lines().filter(keep).collect::<Vec<_>>().join("; ")
}

fn main() {
    let scale = env_number("KAHUNA_BENCH_SCALE", 1.0);
    let runs = env_number("KAHUNA_BENCH_RUNS", 3.0) as usize;
    println!(
        "{:>44} {:>9} {:>9} {:>12}",
        "M45 history at scale ".to_string() + &scale.to_string(),
        "wall s",
        "CPU s",
        "peak RSS MB"
    );
    let warehouse = warehouse(scale);
    let wb = ["states=Map", "bins=32"];
    let ours = [("peer_correlation", &[][..]), ("kahuna_wb", &wb[..]), ("salsa_fingerpoint", &[][..])];
    let mut costs = Vec::new();
    for (query, params) in ours {
        let label = if params.is_empty() { query.to_string() } else { format!("{query} ({})", params.join(", ")) };
        costs.push(measure(&label, runs, || diagnose(&warehouse, query, params, None)));
    }
    for (query, params) in ours {
        let name = format!("{query}, --memory-limit 2G");
        match process_outcome(&mut diagnose(&warehouse, query, params, Some("2G"))) {
            (cost, true) => report(&name, &cost),
            (_, false) => println!("{name:>44} did not complete (its error above)"),
        }
    }
    let python = match python() {
        Ok(python) => python,
        Err(why) => {
            println!("peers: skipped: {why}");
            return;
        }
    };
    let threads = Path::new("2");
    let pandas =
        measure("pandas/numpy peer correlation", runs, || peer(&python, "pandas_peer_correlation.py", &[&warehouse]));
    let duckdb = measure("DuckDB Kahuna-WB (Map, 32 bins)", runs, || {
        peer(&python, "duckdb_kahuna_wb.py", &[&warehouse, threads])
    });
    println!();
    for (name, ours, theirs) in
        [("peer_correlation vs pandas", &costs[0], &pandas), ("kahuna_wb vs DuckDB", &costs[1], &duckdb)]
    {
        println!(
            "{name}: {:.1}x per CPU-second, {:.1}x wall, {:.2}x the memory",
            theirs.cpu_secs / ours.cpu_secs,
            theirs.secs / ours.secs,
            ours.peak_mb / theirs.peak_mb
        );
        println!("  ours:   {}\n  theirs: {}", answer(&ours.output), answer(&theirs.output));
    }
}
