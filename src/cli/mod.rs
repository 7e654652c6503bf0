//! The `kahuna` command line: every subcommand's arguments in this file, what each does in
//! [`commands`], and the demo in [`demo`]. `src/main.rs` only parses and calls [`run`].

pub mod commands;
pub mod demo;

use std::path::PathBuf;

use anyhow::Result;
use chrono::NaiveDate;
use clap::{Parser, Subcommand};

use crate::shell::Format;
use crate::warehouse::Warehouse;

#[derive(Parser)]
#[command(name = "kahuna", version, about = "Hadoop cluster history as Delta Lake tables, diagnosed in SQL")]
pub struct Cli {
    /// The warehouse (one Delta table per subfolder): a folder, or s3://bucket/path (credentials
    /// and endpoint from the AWS_* environment variables).
    #[arg(long, global = true, env = "KAHUNA_WAREHOUSE", default_value = "warehouse")]
    pub warehouse: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Simulate a Hadoop cluster with injected faults: its logs, sadc, job history and truth.
    Simulate(SimulateArgs),
    /// Ingest Hadoop daemon logs (plain, gzip, rotated), sysstat captures (sa files, sadf
    /// exports) and job history (files or folders) into the warehouse.
    Ingest(IngestArgs),
    /// Run SQL over the warehouse: `-c`, `-f`, or an interactive shell.
    Sql(SqlArgs),
    /// Compact small files of every table and vacuum files no longer referenced.
    Optimize(OptimizeArgs),
    /// Ingest the samples in `data/` (logs, a sysstat export, job history), show their states,
    /// then simulate a cluster with a CPU hog and show which node Kahuna-WB indicts.
    Demo(DemoArgs),
    /// Run a saved diagnosis (a name in the queries folder, a built-in, or a .sql path), print its
    /// verdict and record it in the `diagnoses` table.
    Diagnose(DiagnoseArgs),
    /// Each diagnosis's threshold from a cluster's own history, no labels needed; diagnose uses it.
    Calibrate(CalibrateArgs),
    /// Score the diagnoses on simulated traces (folders with truth.json): TP, FP, FN, false alarms.
    Eval(EvalArgs),
    /// Run the jobs of a kahuna.toml on their cron schedules, catching up missed runs.
    Schedule(ScheduleArgs),
    /// Run one query for every date of a range, replacing each date's results.
    Backfill(BackfillArgs),
    /// Serve the warehouse over Arrow Flight SQL (ADBC, JDBC, ODBC clients), read-only.
    Serve(ServeArgs),
    /// Write one HTML page of a cluster's window: the verdicts, the evidence behind each
    /// indicted host, swimlanes, control and data flow, peer correlation.
    Report(ReportArgs),
    /// Run a Ballista scheduler with Kahuna's functions: `--engine ballista://host:port`
    /// runs statements on it and its executors.
    Scheduler(SchedulerArgs),
    /// Run a Ballista executor for a `kahuna scheduler`.
    Executor(ExecutorArgs),
    /// Print a completion script for a shell (`source <(kahuna completions bash)`).
    Completions(CompletionsArgs),
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    let warehouse = || Warehouse::at(&cli.warehouse);
    match cli.command {
        Command::Simulate(args) => commands::simulate(args),
        Command::Ingest(args) => commands::ingest(args, warehouse().await?).await,
        Command::Sql(args) => commands::sql(args, warehouse().await?).await,
        Command::Optimize(args) => commands::optimize(args, warehouse().await?).await,
        Command::Demo(args) => demo::run(args, warehouse().await?).await,
        Command::Diagnose(args) => commands::diagnose(args, warehouse().await?).await,
        Command::Calibrate(args) => commands::calibrate(args, warehouse().await?).await,
        Command::Eval(args) => commands::eval(args).await,
        Command::Schedule(args) => commands::schedule(args, warehouse().await?).await,
        Command::Backfill(args) => commands::backfill(args, warehouse().await?).await,
        Command::Serve(args) => commands::serve(args, warehouse().await?).await,
        Command::Report(args) => commands::report(args, warehouse().await?).await,
        Command::Scheduler(args) => commands::scheduler(args).await,
        Command::Executor(args) => commands::executor(args).await,
        Command::Completions(args) => {
            clap_complete::generate(
                args.shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "kahuna",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
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
    /// Seed of every random choice: the same seed and flags write the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The folder written: logs/<host>/…, history/, sadc/, truth.json.
    #[arg(long)]
    pub out: PathBuf,
    /// The Hadoop release whose logs to write: 0.18, 0.20 or 2 (YARN, as 2.8 words them).
    #[arg(long, default_value = "0.18")]
    pub hadoop: String,
    /// Gzip every file written.
    #[arg(long)]
    pub gzip: bool,
    /// Leave out the sadc capture.
    #[arg(long)]
    pub no_sadc: bool,
    /// The nodes' machines: `uniform` (one model, nodes a few percent apart) or `mixed` (three
    /// generations, 0.8, 1.0 and 1.2 of the base model's CPU and disk speed, a quarter, a half
    /// and a quarter of the nodes).
    #[arg(long, default_value = "uniform", conflicts_with = "suite")]
    pub hardware: String,
    /// How far each host's clock may be off, either way (drawn per host from the seed), like 3s:
    /// its logs and sadc capture are stamped by it, the job history by the master's clock.
    #[arg(long, default_value = "0s", conflicts_with = "suite")]
    pub clock_skew: String,
    /// The level 0.18's DataNodes log at: `debug` (as SALSA ran them: a block read's start shows
    /// in the count of open connections) or `info` (only where a read ends shows).
    #[arg(long, default_value = "debug", conflicts_with = "suite")]
    pub datanode_log: String,
    /// The sysstat capture also shows what each node runs beside Hadoop: its daemons' bursts at
    /// random times and cron's hourly jobs.
    #[arg(long, conflicts_with = "suite")]
    pub sysstat_noise: bool,
    /// Time between two records of the sysstat capture, whole seconds such as 10s (sadc's own
    /// `-I`/interval; Ganesha's captures recorded every second).
    #[arg(long, default_value = "1s", value_name = "INTERVAL", conflicts_with = "suite")]
    pub sysstat_interval: String,
    /// The share of task attempts, on any node, whose work takes a heavy-tailed multiple of its
    /// time (Pareto, α = 2, at most 8×): stragglers on healthy nodes.
    #[arg(long, default_value_t = 0.0, conflicts_with = "suite")]
    pub stragglers: f64,
    /// The share of tries of map-output copies, between any two nodes, that time out and are
    /// tried again: the stray fetch failures of a healthy cluster.
    #[arg(long, default_value_t = 0.0, value_name = "SHARE", conflicts_with = "suite")]
    pub fetch_failures: f64,
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

#[derive(clap::Args)]
pub struct IngestArgs {
    /// Files and folders to read (walked recursively; plain, gzip or rotated).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// The cluster the logs come from (a partition of every table).
    #[arg(long, default_value = "default")]
    pub cluster: String,
    /// Zone the logs' timestamps were written in (IANA name); UTC by default.
    #[arg(long)]
    pub tz: Option<String>,
    /// Host of every file, where names and folders do not say.
    #[arg(long)]
    pub host: Option<String>,
    /// Daemon of every file (tasktracker, datanode, jobtracker, namenode, secondarynamenode, task, mrappmaster, nodemanager, resourcemanager, historyserver).
    #[arg(long)]
    pub daemon: Option<String>,
    /// The network interface of sadc's rx_kb_s/tx_kb_s (default: every one but loopback, summed).
    #[arg(long)]
    pub iface: Option<String>,
    /// The log4j ConversionPattern of every log, where the built-in layouts do not read it
    /// (e.g. '%d %-5p [%t] %c{2} - %m%n').
    #[arg(long)]
    pub layout: Option<String>,
    /// Files read at once (default: the machine's cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Read, parse and count everything, and print the summary, but write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Leave the cluster's small files as they are (by default a partition left with many
    /// small files, by this run or by earlier ones, is compacted after the ingest).
    #[arg(long)]
    pub no_compact: bool,
}

#[derive(clap::Args)]
pub struct SqlArgs {
    /// Statements to run.
    #[arg(short = 'c', long = "command", conflicts_with = "file")]
    pub command: Option<String>,
    /// A file of statements to run.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// How results are printed (parquet writes the Parquet bytes to standard output).
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Where statements run: here, or `ballista://host:port`, a `kahuna scheduler` and its
    /// executors (which must read the warehouse's folder at the same path).
    #[arg(long, env = "KAHUNA_ENGINE")]
    pub engine: Option<String>,
}

#[derive(clap::Args)]
pub struct SchedulerArgs {
    /// The address to listen on; port 0 takes a free one (the address is printed).
    #[arg(long, default_value = "127.0.0.1:50050")]
    pub listen: std::net::SocketAddr,
}

#[derive(clap::Args)]
pub struct ExecutorArgs {
    /// The scheduler, `host:port` (or `ballista://host:port`).
    #[arg(long, default_value = "127.0.0.1:50050")]
    pub scheduler: String,
    /// Where this executor serves results to the client and to other executors.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: std::net::SocketAddr,
    /// Tasks run at once (default: one a core).
    #[arg(long, default_value_t = 0)]
    pub tasks: usize,
    /// Folder of its shuffle files (default: a new one under the system's temporary folder).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// The cluster (default: the warehouse's only one).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Window start (RFC 3339, or `YYYY-MM-DD[ HH:MM[:SS]]` in UTC); by default the window of
    /// the newest recorded diagnosis.
    #[arg(long)]
    pub from: Option<String>,
    /// Window end (exclusive).
    #[arg(long)]
    pub to: Option<String>,
    /// One recorded run of a diagnosis (a run id of `diagnoses`): its cluster, window and verdicts.
    #[arg(long)]
    pub run: Option<String>,
    /// The page to write.
    #[arg(long, default_value = "report.html")]
    pub out: PathBuf,
    /// `kahuna eval`'s CSV file: its TP/FP tables drawn too (alone, without --cluster or
    /// --run, the page is only that).
    #[arg(long)]
    pub eval: Option<PathBuf>,
    /// Print every figure's SQL, as bound, instead of writing the page.
    #[arg(long)]
    pub sql: bool,
    /// Folder of the query files (`report/<name>.sql` there replaces a figure's query).
    #[arg(long, env = "KAHUNA_QUERIES", default_value = "queries")]
    pub queries: PathBuf,
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The address to listen on; port 0 takes a free one (the address is printed).
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: std::net::SocketAddr,
    /// A file holding the bearer token clients must send (`authorization: Bearer …`); or set
    /// KAHUNA_SERVE_TOKEN. Without one the server listens on loopback only.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// A PEM certificate chain, to serve over TLS (with --tls-key).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Queries run at once; more wait their turn.
    #[arg(long, default_value_t = 8)]
    pub max_queries: usize,
    /// Memory one query may hold, in MiB; past it a query spills to disk where it can, and
    /// fails (the server goes on) where it cannot.
    #[arg(long, default_value_t = 2048)]
    pub query_memory_mib: usize,
}

#[derive(clap::Args)]
pub struct OptimizeArgs {
    /// Keep unreferenced files younger than this many hours (readers of old snapshots).
    #[arg(long, default_value_t = 168)]
    pub retention_hours: u64,
}

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Default: `data` in the working folder (the README runs it from the checkout), else
    /// the checkout the binary was built from.
    #[arg(long)]
    pub data: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct DiagnoseArgs {
    /// The query: a name in the queries folder or built in, or a .sql path. `--list` shows them.
    #[arg(required_unless_present = "list")]
    pub query: Option<String>,
    /// Window start (RFC 3339, or `YYYY-MM-DD[ HH:MM[:SS]]` in UTC); also the run date.
    #[arg(long)]
    pub from: Option<String>,
    /// Window end (exclusive).
    #[arg(long)]
    pub to: Option<String>,
    /// The one cluster to diagnose (default: every cluster, each on its own).
    #[arg(long)]
    pub cluster: Option<String>,
    /// NAME=VALUE, repeatable; overrides the default declared in the query's header.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Folder of the query files.
    #[arg(long, env = "KAHUNA_QUERIES", default_value = "queries")]
    pub queries: PathBuf,
    /// Print the verdict only; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Rows of each result printed (all of them are recorded).
    #[arg(long, default_value_t = 40)]
    pub rows: usize,
    /// Memory the query's operators may hold at once (`2G`, `512M`), spilling sorts, joins and
    /// aggregates to disk beyond it; a query that cannot spill fails naming what ran out.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<usize>,
    /// Where the statements run: here, or `ballista://host:port` (see `kahuna sql --help`).
    #[arg(long, env = "KAHUNA_ENGINE", conflicts_with = "memory_limit")]
    pub engine: Option<String>,
    /// List the built-in queries and their parameters.
    #[arg(long)]
    pub list: bool,
}

#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// The one cluster to calibrate (default: every cluster with a job history).
    #[arg(long)]
    pub cluster: Option<String>,
    /// History used, in days back from the cluster's newest job.
    #[arg(long, default_value_t = 30.0)]
    pub days: f64,
    /// Length of a window, as long as the windows diagnosed (`1d` for a daily schedule).
    #[arg(long, default_value = "1d")]
    pub window: String,
    /// Share of host-windows the chosen values may indict.
    #[arg(long, default_value_t = crate::diagnose::calibrate::MAX_SHARE, value_parser = parse_share)]
    pub max_share: f64,
    /// Share of host-windows the calibrated queries whose verdict is monotone in their value
    /// together may indict (`combined` indicts on one query's vote): each is stepped stricter as
    /// needed (1: no such bound).
    #[arg(long, default_value_t = crate::diagnose::calibrate::MAX_SHARE_TOGETHER, value_parser = parse_share)]
    pub max_share_together: f64,
    /// Windows with jobs needed; with fewer the defaults hold.
    #[arg(long, default_value_t = crate::diagnose::calibrate::MIN_WINDOWS)]
    pub min_windows: usize,
    /// Diagnoses to calibrate, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = crate::diagnose::calibrate::CALIBRATED.map(String::from))]
    pub queries: Vec<String>,
    /// Folder of the query files.
    #[arg(long, env = "KAHUNA_QUERIES", default_value = "queries")]
    pub queries_dir: PathBuf,
}

#[derive(clap::Args)]
pub struct EvalArgs {
    /// Simulated runs to score: folders with a truth.json, or folders of them.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Other runs (other seeds), where thresholds are chosen and Ganesha is trained.
    #[arg(long, num_args = 1..)]
    pub tune: Vec<PathBuf>,
    /// Diagnoses to score, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = crate::diagnose::eval::SCORED.map(String::from))]
    pub queries: Vec<String>,
    /// Folder of the query files (an operator's copies of the built-in queries, say).
    #[arg(long, env = "KAHUNA_QUERIES", default_value = "queries")]
    pub queries_dir: PathBuf,
    /// Highest false-alarm rate on fault-free tuning runs that a chosen threshold may have.
    #[arg(long, default_value_t = 0.02)]
    pub max_false_alarm: f64,
    /// Score every query with its defaults: the tuning runs only train Ganesha's profiles. What
    /// an operator without labelled runs of a cluster gets.
    #[arg(long, conflicts_with = "calibrate")]
    pub defaults: bool,
    /// Calibrate every query as `kahuna calibrate` does, on the tuning runs of each size read as
    /// one cluster's history, their labels unread: at most this share of healthy host-runs alarm.
    #[arg(long, num_args = 0..=1, default_missing_value = "0.05", value_name = "SHARE", value_parser = parse_share)]
    pub calibrate: Option<f64>,
    /// With --calibrate: calibrate's --max-share-together, of healthy host-runs (1: no bound).
    #[arg(
        long,
        requires = "calibrate",
        value_name = "SHARE",
        default_value_t = crate::diagnose::calibrate::MAX_SHARE_TOGETHER,
        value_parser = parse_share
    )]
    pub calibrate_together: f64,
    /// Where the tables go as CSV.
    #[arg(long, default_value = "eval.csv")]
    pub csv: PathBuf,
    /// Ingest into this warehouse folder and keep it (default: a scratch folder, removed after).
    /// Runs it already holds, ingested from the same folders, are not read again, so a second
    /// evaluation with other queries starts at once.
    #[arg(long)]
    pub keep: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ScheduleArgs {
    /// The scheduler's configuration: jobs, cron expressions, zone, retries (docs/schedule.md).
    #[arg(long, default_value = "kahuna.toml")]
    pub config: PathBuf,
}

#[derive(clap::Args)]
pub struct BackfillArgs {
    /// The query: a name in the queries folder or built in, or a .sql path.
    pub query: String,
    /// First run date (inclusive).
    #[arg(long)]
    pub from: NaiveDate,
    /// Last run date (inclusive).
    #[arg(long)]
    pub to: NaiveDate,
    /// The one cluster to run for (default: every cluster, each on its own).
    #[arg(long)]
    pub cluster: Option<String>,
    /// NAME=VALUE, repeatable; overrides the default declared in the query's header.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Zone of the run dates (IANA name); the config's, else UTC.
    #[arg(long)]
    pub zone: Option<String>,
    /// Where `queries`, `zone`, retries and backoff are read from, when the file exists.
    #[arg(long, default_value = "kahuna.toml")]
    pub config: PathBuf,
    /// Print each date's window; run nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A share in [0, 1]: of host-windows a calibration lets alarm.
fn parse_share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("{text}: a share in [0, 1], such as 0.05")),
    }
}

/// `2G`, `512M`, `64K` (powers of 1024) or a number of bytes.
fn parse_size(text: &str) -> Result<usize, String> {
    let upper = text.trim().to_ascii_uppercase();
    let number = upper.trim_end_matches("IB").trim_end_matches('B');
    let (digits, shift) = match number.char_indices().last() {
        Some((at, 'K')) => (&number[..at], 10),
        Some((at, 'M')) => (&number[..at], 20),
        Some((at, 'G')) => (&number[..at], 30),
        Some((at, 'T')) => (&number[..at], 40),
        _ => (number, 0),
    };
    let value: f64 = digits.trim().parse().map_err(|_| format!("{text}: not a size such as 2G, 512M or 1048576"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !(bytes >= 1.0 && bytes < usize::MAX as f64) {
        return Err(format!("{text}: a size above 0"));
    }
    Ok(bytes as usize)
}

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::{Cli, parse_size};

    #[test]
    fn sizes_read_in_powers_of_1024() {
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("64KB"), Ok(64 << 10));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        for bad in ["", "G", "-1G", "0", "two", "1X"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    /// `--help` explains every flag and argument of every command.
    #[test]
    fn every_argument_has_help() {
        let cli = Cli::command();
        cli.clone().debug_assert();
        let mut missing = Vec::new();
        for command in std::iter::once(&cli).chain(cli.get_subcommands()) {
            for arg in command.get_arguments() {
                if arg.get_help().is_none() && !["help", "version"].contains(&arg.get_id().as_str()) {
                    missing.push(format!("{} {}", command.get_name(), arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "without help: {missing:?}");
    }
}
