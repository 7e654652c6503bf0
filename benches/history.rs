//! Whole-history studies against the tools an analyst would use instead: `cargo bench --bench
//! history` (release build).
//!
//! Simulates the M45 history (`kahuna simulate --history m45 --no-logs` at `KAHUNA_BENCH_SCALE`,
//! default 1: five months of job history) and ingests it once, kept under `KAHUNA_BENCH_CACHE`
//! (default `target/bench-history`) for the next runs. Then runs, each in its own process and
//! `KAHUNA_BENCH_RUNS` times (default 3; a study and its peer taking turns), over the whole
//! history:
//! - `kahuna diagnose peer_correlation`, and beside it `benches/peers/pandas_peer_correlation.py`
//!   (the same study in pandas and numpy over the `states` Delta table);
//! - `kahuna diagnose kahuna_wb` on Map states with 32 bins, and beside it
//!   `benches/peers/duckdb_kahuna_wb.py` (the same algorithm in DuckDB SQL over the table's
//!   Parquet files);
//! - `kahuna diagnose salsa_fingerpoint`;
//! - each of our three again under `--memory-limit 2G`, which should complete (spilling) rather
//!   than fail.
//!
//! With `KAHUNA_BENCH_CLUSTER=1`, also `peer_correlation` on a Ballista cluster
//! of this machine (`kahuna scheduler` and `kahuna executor` processes): one executor of 2 tasks,
//! then two of 1 task each, the client's wall time beside the executors' CPU and peak memory.
//!
//! Our runs are `--dry-run` (nothing recorded, so every run reads the same warehouse). Prints
//! wall, CPU and peak memory of each (medians), the ratios of CPU and wall measured in this run,
//! and each peer's answer beside ours. The peers need `KAHUNA_BENCH_PYTHON`, a Python with
//! duckdb, deltalake, pyarrow, pandas and numpy; without it they are skipped with the reason.

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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
    summary(name, (0..runs).map(|_| process_cost(&mut command())).collect())
}

/// [`measure`] of ours and a peer, their runs alternating: this machine's speed drifts by a
/// tenth over minutes, and two medians taken minutes apart would carry that drift into their
/// ratio.
fn measure_side_by_side(
    runs: usize,
    (our_name, mut ours): (&str, impl FnMut() -> Command),
    (their_name, mut theirs): (&str, impl FnMut() -> Command),
) -> (ProcessCost, ProcessCost) {
    let (mut our_costs, mut their_costs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        our_costs.push(process_cost(&mut ours()));
        their_costs.push(process_cost(&mut theirs()));
    }
    (summary(our_name, our_costs), summary(their_name, their_costs))
}

/// The medians of `costs`, reported under `name`, and the last one's output.
fn summary(name: &str, costs: Vec<ProcessCost>) -> ProcessCost {
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

/// A scheduler and its executors, stopped when dropped.
struct Cluster {
    engine: String,
    scheduler: Child,
    executors: Vec<Child>,
    _work: tempfile::TempDir,
}

impl Cluster {
    fn start(executors: usize, tasks: usize) -> Cluster {
        let mut scheduler = kahuna()
            .args(["scheduler", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a scheduler");
        let mut said = String::new();
        BufReader::new(scheduler.stdout.take().expect("piped")).read_line(&mut said).expect("its address");
        let engine = said.trim().strip_prefix("scheduler listening at ").expect("its address").to_string();
        // Killed at the end, the executors cannot remove their shuffle files (gigabytes): the
        // bench does.
        let work = tempfile::tempdir().expect("a work folder");
        let executors = (0..executors)
            .map(|i| {
                let own = work.path().join(format!("executor-{i}"));
                std::fs::create_dir(&own).expect("an executor's work folder");
                let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
                let listen = format!("127.0.0.1:{port}");
                kahuna()
                    .args(["executor", "--scheduler", &engine, "--listen", &listen, "--tasks", &tasks.to_string()])
                    .arg("--work-dir")
                    .arg(&own)
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("start an executor")
            })
            .collect();
        Cluster { engine, scheduler, executors, _work: work }
    }

    /// The executors' CPU seconds so far and their largest peak resident MB, from /proc.
    fn executors_cost(&self) -> (f64, f64) {
        // SAFETY: sysconf reads a constant of the system.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let (mut cpu, mut peak) = (0.0, 0.0f64);
        for executor in &self.executors {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", executor.id())).unwrap_or_default();
            let fields: Vec<&str> =
                stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
            let field = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
            cpu += (field(11) + field(12)) / ticks;
            let status = std::fs::read_to_string(format!("/proc/{}/status", executor.id())).unwrap_or_default();
            let hwm = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap_or("0");
            peak = peak.max(hwm.trim().trim_end_matches(" kB").parse::<f64>().unwrap_or(0.0) / 1024.0);
        }
        (cpu, peak)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.executors.iter_mut().chain([&mut self.scheduler]) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `query` on a cluster of `executors` executors of `tasks` tasks, started afresh: the client's
/// wall seconds (median), and the executors' CPU seconds per run and peak memory.
fn on_cluster(warehouse: &Path, query: &str, params: &[&str], executors: usize, tasks: usize, runs: usize) {
    let cluster = Cluster::start(executors, tasks);
    let command = || {
        let mut command = diagnose(warehouse, query, params, None);
        command.args(["--engine", &cluster.engine]);
        command
    };
    // The first run waits for the executors to register: not measured.
    process_cost(&mut command());
    let (cpu_before, _) = cluster.executors_cost();
    let wall = median((0..runs).map(|_| process_cost(&mut command()).secs).collect());
    let (cpu_after, peak) = cluster.executors_cost();
    let name = format!("{query}, {executors} executor(s) x {tasks} task(s)");
    report(
        &name,
        &ProcessCost {
            secs: wall,
            cpu_secs: (cpu_after - cpu_before) / runs as f64,
            peak_mb: peak,
            output: String::new(),
        },
    );
}

/// The bench's Python, if it has what the peers import.
fn python() -> Result<String, String> {
    let python = std::env::var("KAHUNA_BENCH_PYTHON").map_err(|_| {
        "KAHUNA_BENCH_PYTHON is not set (a venv's python with duckdb, deltalake, pyarrow, pandas and numpy)".to_string()
    })?;
    match Command::new(&python).args(["-c", "import duckdb, deltalake, pyarrow, pandas, numpy"]).output() {
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
    let python = python();
    let threads = Path::new("2");
    let (mut costs, mut peer_costs) = (Vec::new(), Vec::new());
    for (query, params) in ours {
        let label = if params.is_empty() { query.to_string() } else { format!("{query} ({})", params.join(", ")) };
        let command = || diagnose(&warehouse, query, params, None);
        let (cost, peer_cost) = match (&python, query) {
            (Ok(python), "peer_correlation") => {
                let pandas = || peer(python, "pandas_peer_correlation.py", &[&warehouse]);
                let (cost, pandas) =
                    measure_side_by_side(runs, (&label, command), ("pandas/numpy peer correlation", pandas));
                (cost, Some(("peer_correlation vs pandas", pandas)))
            }
            (Ok(python), "kahuna_wb") => {
                let duckdb = || peer(python, "duckdb_kahuna_wb.py", &[&warehouse, threads]);
                let (cost, duckdb) =
                    measure_side_by_side(runs, (&label, command), ("DuckDB Kahuna-WB (Map, 32 bins)", duckdb));
                (cost, Some(("kahuna_wb vs DuckDB", duckdb)))
            }
            _ => (measure(&label, runs, command), None),
        };
        costs.push(cost);
        peer_costs.push(peer_cost);
    }
    for (query, params) in ours {
        let name = format!("{query}, --memory-limit 2G");
        match process_outcome(&mut diagnose(&warehouse, query, params, Some("2G"))) {
            (cost, true) => report(&name, &cost),
            (_, false) => println!("{name:>44} did not complete (its error above)"),
        }
    }
    if std::env::var_os("KAHUNA_BENCH_CLUSTER").is_some() {
        println!("on a Ballista cluster of this machine (CPU and memory: the executors')");
        for (query, params) in &ours[..1] {
            for (executors, tasks) in [(1, 2), (2, 1)] {
                on_cluster(&warehouse, query, params, executors, tasks, runs);
            }
        }
    }
    if let Err(why) = &python {
        println!("peers: skipped: {why}");
        return;
    }
    println!();
    for (ours, (name, theirs)) in costs.iter().zip(peer_costs).filter_map(|(ours, peer)| Some((ours, peer?))) {
        println!(
            "{name}: {:.1}x per CPU-second, {:.1}x wall, {:.2}x the memory",
            theirs.cpu_secs / ours.cpu_secs,
            theirs.secs / ours.secs,
            ours.peak_mb / theirs.peak_mb
        );
        println!("  ours:   {}\n  theirs: {}", answer(&ours.output), answer(&theirs.output));
    }
}
