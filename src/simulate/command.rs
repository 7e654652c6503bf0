//! `kahuna simulate`'s command line: one run, a suite of runs, or the M45 history.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use super::faults::{FaultSpec, parse_duration};
use super::history::{HistoryConfig, run_history};
use super::workload::Workload;
use super::{Config, DEFAULT_EPOCH_MS, Suite, Version, run, run_suite};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Slave nodes (each a TaskTracker and a DataNode).
    #[arg(long, default_value_t = 10)]
    pub nodes: usize,
    /// randwriter, sort, nutch, pig or gridmix.
    #[arg(long, default_value = "sort")]
    pub workload: String,
    /// F[@node][:start]: a fault of Kahuna Table III (CPUHog, DiskHog, DiskFull, PacketLoss1,
    /// PacketLoss5, PacketLoss50, HANG-1036, HANG-1152, HANG-2080) at a host name or 0-based
    /// index (drawn from the seed when left out), from a start such as 5m (the start by default).
    #[arg(long)]
    pub fault: Option<String>,
    /// Simulated time, like 30m or 2h.
    #[arg(long, default_value = "30m")]
    pub duration: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The folder written: logs/<host>/…, history/, sadc/, truth.json.
    #[arg(long)]
    pub out: PathBuf,
    /// The Hadoop release whose log wording to write: 0.18 or 0.20.
    #[arg(long, default_value = "0.18")]
    pub hadoop: String,
    /// Gzip every file written.
    #[arg(long)]
    pub gzip: bool,
    /// Leave out the sadc capture.
    #[arg(long)]
    pub no_sadc: bool,
    /// A JSON matrix of runs (workloads × faults × cluster sizes × repetitions).
    #[arg(long, conflicts_with_all = ["history", "fault"])]
    pub suite: Option<PathBuf>,
    /// A cluster's history instead of one run: `m45` (Kahuna Table I).
    #[arg(long)]
    pub history: Option<String>,
    /// Months of history, from April 2008.
    #[arg(long, default_value_t = 5.0)]
    pub months: f64,
    /// The share of the history's experiments to simulate (0.01 for a hundredth).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// With --history: write the job history only, all the M45 study had (no daemon logs).
    #[arg(long, requires = "history")]
    pub no_logs: bool,
    /// Writer threads (default: the machine's cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run_command(args: Args) -> Result<()> {
    let version = Version::parse(&args.hadoop).with_context(|| format!("--hadoop {}: 0.18 or 0.20", args.hadoop))?;
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from)).max(1);
    if let Some(kind) = &args.history {
        if kind != "m45" {
            bail!("--history {kind}: the one history is m45");
        }
        if !(args.scale > 0.0 && args.months > 0.0) {
            bail!("--scale and --months must be above 0");
        }
        let cfg = HistoryConfig {
            months: args.months,
            scale: args.scale,
            seed: args.seed,
            out: args.out,
            version,
            gzip: args.gzip,
            logs: !args.no_logs,
            threads,
            progress: true,
        };
        let summary = run_history(&cfg)?;
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    if let Some(path) = &args.suite {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let suite = Suite::parse(&text).with_context(|| path.display().to_string())?;
        println!("{:<12} {:<13} {:>6} {:>10}", "workload", "fault", "nodes", "slowdown");
        for (w, f, n, s) in run_suite(&suite, &args.out, args.gzip, threads, true)? {
            println!("{:<12} {:<13} {:>6} {:>9.1}%", w.name(), f.name(), n, s * 100.0);
        }
        return Ok(());
    }
    let workload = Workload::parse(&args.workload).with_context(|| {
        format!("--workload {}: one of {}", args.workload, Workload::ALL.map(Workload::name).join(", "))
    })?;
    let fault =
        args.fault.as_deref().map(str::parse::<FaultSpec>).transpose().map_err(|e| anyhow::anyhow!("--fault {e}"))?;
    let cfg = Config {
        nodes: args.nodes,
        workload,
        fault,
        duration_s: parse_duration(&args.duration).map_err(|e| anyhow::anyhow!("--duration {e}"))?,
        seed: args.seed,
        out: args.out,
        version,
        gzip: args.gzip,
        sadc: !args.no_sadc,
        threads,
        progress: true,
        epoch_ms: DEFAULT_EPOCH_MS,
    };
    let outcome = run(&cfg)?;
    let done = outcome.jobs.iter().filter(|j| j.finish_ms.is_some()).count();
    println!(
        "{} jobs ({done} finished), {} log lines, written to {}",
        outcome.jobs.len(),
        outcome.lines.total(),
        cfg.out.display()
    );
    Ok(())
}
