//! The `kahuna` command: wires the subcommands to the library.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use kahuna::ingest::discover::{Hints, parse_daemon_flag};
use kahuna::ingest::{IngestOptions, ingest};
use kahuna::shell::{self, Format};
use kahuna::warehouse::Warehouse;
use kahuna::{catalog, report};

#[derive(Parser)]
#[command(name = "kahuna", version, about = "Hadoop cluster history as Delta Lake tables, diagnosed in SQL")]
struct Cli {
    /// The warehouse folder (one Delta table per subfolder).
    #[arg(long, global = true, env = "KAHUNA_WAREHOUSE", default_value = "warehouse")]
    warehouse: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a Hadoop cluster with injected faults: its logs, sadc, job history and truth.
    Simulate(kahuna::simulate::command::Args),
    /// Ingest Hadoop daemon logs (plain, gzip, rotated), sysstat captures (sa files, sadf
    /// exports) and job history (files or folders) into the warehouse.
    Ingest {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        args: IngestArgs,
    },
    /// Run SQL over the warehouse: `-c`, `-f`, or an interactive shell.
    Sql {
        /// Statements to run.
        #[arg(short = 'c', long = "command", conflicts_with = "file")]
        command: Option<String>,
        /// A file of statements to run.
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Compact small files of every table and vacuum files no longer referenced.
    Optimize {
        /// Keep unreferenced files younger than this many hours (readers of old snapshots).
        #[arg(long, default_value_t = 168)]
        retention_hours: u64,
    },
    /// Ingest the samples in `data/` (logs, a sysstat export, job history) and show a first
    /// answer about their states.
    Demo {
        /// Default: `data` in the working folder (the README runs it from the checkout), else
        /// the checkout the binary was built from.
        #[arg(long)]
        data: Option<PathBuf>,
    },
    /// Run a saved diagnosis (a name in the queries folder, a built-in, or a .sql path), print its
    /// verdict and record it in the `diagnoses` table.
    Diagnose(kahuna::commands::DiagnoseArgs),
    /// Score the diagnoses on simulated traces (folders with truth.json): TP, FP, FN, false alarms.
    Eval(kahuna::commands::EvalArgs),
    /// Run the jobs of a kahuna.toml on their cron schedules, catching up missed runs.
    Schedule(kahuna::commands::ScheduleArgs),
    /// Run one query for every date of a range, replacing each date's results.
    Backfill(kahuna::commands::BackfillArgs),
}

#[derive(clap::Args)]
struct IngestArgs {
    /// The cluster the logs come from (a partition of every table).
    #[arg(long, default_value = "default")]
    cluster: String,
    /// Zone the logs' timestamps were written in (IANA name); UTC by default.
    #[arg(long)]
    tz: Option<String>,
    /// Host of every file, where names and folders do not say.
    #[arg(long)]
    host: Option<String>,
    /// Daemon of every file (tasktracker, datanode, jobtracker, namenode, task).
    #[arg(long)]
    daemon: Option<String>,
    /// The network interface of sadc's rx_kb_s/tx_kb_s (default: every one but loopback, summed).
    #[arg(long)]
    iface: Option<String>,
    /// Files read at once (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Read, parse and count everything, and print the summary, but write nothing.
    #[arg(long)]
    dry_run: bool,
}

impl IngestArgs {
    fn options(self, paths: Vec<PathBuf>, warehouse: &std::path::Path) -> Result<IngestOptions> {
        let zone = match self.tz.as_deref() {
            None | Some("UTC") => None,
            Some(name) => Some(name.parse().map_err(|e| anyhow::anyhow!("--tz {name}: {e}"))?),
        };
        let daemon = self.daemon.as_deref().map(parse_daemon_flag).transpose()?;
        Ok(IngestOptions {
            paths,
            cluster: self.cluster,
            warehouse: Warehouse::new(warehouse),
            zone,
            hints: Hints { host: self.host, daemon, iface: self.iface },
            progress: true,
            threads: self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from)),
            dry_run: self.dry_run,
        })
    }
}

const DEMO_QUERY: &str = "SELECT state, host, daemon, count(*) AS states, \
     round(avg(duration_ms)) AS mean_ms, max(duration_ms) AS max_ms, \
     sum(CASE WHEN end_ts IS NULL THEN 1 ELSE 0 END) AS unterminated \
     FROM states GROUP BY state, host, daemon ORDER BY state, host, daemon";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, outermost context first: `queries/x.sql: parameter t: expected …`.
            eprintln!("error: {}", kahuna::error_message(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Simulate(args) => kahuna::simulate::command::run_command(args)?,
        Command::Diagnose(args) => kahuna::commands::diagnose(args, &cli.warehouse).await?,
        Command::Eval(args) => kahuna::commands::eval(args).await?,
        Command::Schedule(args) => kahuna::commands::schedule(args, &cli.warehouse).await?,
        Command::Backfill(args) => kahuna::commands::backfill(args, &cli.warehouse).await?,
        Command::Ingest { paths, args } => {
            let summary = ingest(&args.options(paths, &cli.warehouse)?).await?;
            print!("{}", report::render(&summary));
        }
        Command::Sql { command, file, format } => {
            let ctx = catalog::session(&Warehouse::new(&cli.warehouse)).await?;
            let script = match (command, file) {
                (Some(sql), _) => Some(sql),
                (None, Some(path)) => {
                    Some(std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?)
                }
                (None, None) => None,
            };
            match script {
                Some(sql) => shell::run_script(&ctx, &sql, format, &mut std::io::stdout()).await?,
                None => shell::interactive(&ctx, format).await?,
            }
        }
        Command::Optimize { retention_hours } => {
            let warehouse = Warehouse::new(&cli.warehouse);
            for line in warehouse.optimize(Duration::from_secs(retention_hours * 3600)).await? {
                println!("{line}");
            }
        }
        Command::Demo { data } => {
            let data = data.unwrap_or_else(|| {
                let here = PathBuf::from("data");
                if here.join("logs").is_dir() {
                    here
                } else {
                    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data"))
                }
            });
            let args = IngestArgs {
                cluster: "demo".into(),
                tz: None,
                host: None,
                daemon: None,
                iface: None,
                threads: None,
                dry_run: false,
            };
            let summary = ingest(&args.options(vec![data], &cli.warehouse)?).await?;
            print!("{}", report::render(&summary));
            let ctx = catalog::session(&Warehouse::new(&cli.warehouse)).await?;
            println!("\n{DEMO_QUERY}\n");
            shell::run_script(&ctx, DEMO_QUERY, Format::Table, &mut std::io::stdout()).await?;
            kahuna::commands::demo_diagnosis(&cli.warehouse).await?;
        }
    }
    Ok(())
}
