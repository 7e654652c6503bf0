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
    /// Ingest Hadoop daemon logs (files or folders; plain, gzip, rotated) into the warehouse.
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
    /// Ingest the sample logs in `data/` and show a first answer about their states.
    Demo {
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/data/logs"))]
        data: PathBuf,
    },
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
            hints: Hints { host: self.host, daemon },
            progress: true,
            threads: self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from)),
            dry_run: self.dry_run,
        })
    }
}

const DEMO_QUERY: &str = "SELECT state, host, count(*) AS states, \
     round(avg(duration_ms)) AS mean_ms, max(duration_ms) AS max_ms, \
     sum(CASE WHEN end_ts IS NULL THEN 1 ELSE 0 END) AS unterminated \
     FROM states GROUP BY state, host ORDER BY state, host";

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
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
            let args = IngestArgs { cluster: "demo".into(), tz: None, host: None, daemon: None, threads: None, dry_run: false };
            let summary = ingest(&args.options(vec![data], &cli.warehouse)?).await?;
            print!("{}", report::render(&summary));
            let ctx = catalog::session(&Warehouse::new(&cli.warehouse)).await?;
            println!("\n{DEMO_QUERY}\n");
            shell::run_script(&ctx, DEMO_QUERY, Format::Table, &mut std::io::stdout()).await?;
        }
    }
    Ok(())
}
