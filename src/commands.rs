//! The diagnosis commands as the `kahuna` binary exposes them: `diagnose`, `eval`, `schedule`
//! and `backfill`, their flags and what each prints. The work is in [`crate::diagnose`],
//! [`crate::eval`] and [`crate::schedule`].

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use chrono::{DateTime, NaiveDate, Utc};

use crate::diagnose::{self, Record, Request};
use crate::queries::{self, Output, Query};
use crate::schedule::clock::SystemClock;
use crate::schedule::plan::{CatchUp, Schedule};
use crate::schedule::{self, Config, Job, Ledger, Policy, WarehouseRunner, Work};
use crate::shell;
use crate::warehouse::Warehouse;

#[derive(clap::Args)]
pub struct DiagnoseArgs {
    /// The query: a name in the queries folder or built in, or a .sql path. `--list` shows them.
    #[arg(required_unless_present = "list")]
    query: Option<String>,
    /// Window start (RFC 3339, or `YYYY-MM-DD[ HH:MM[:SS]]` in UTC); also the run date.
    #[arg(long)]
    from: Option<String>,
    /// Window end (exclusive).
    #[arg(long)]
    to: Option<String>,
    /// The one cluster to diagnose (default: every cluster, each on its own).
    #[arg(long)]
    cluster: Option<String>,
    /// NAME=VALUE, repeatable; overrides the default declared in the query's header.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<String>,
    /// Folder of the query files.
    #[arg(long, env = "KAHUNA_QUERIES", default_value = "queries")]
    queries: PathBuf,
    /// Print the verdict only; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Rows of each result printed (all of them are recorded).
    #[arg(long, default_value_t = 40)]
    rows: usize,
    /// List the built-in queries and their parameters.
    #[arg(long)]
    list: bool,
}

fn time(flag: &str, text: Option<String>) -> Result<Option<DateTime<Utc>>> {
    text.map(|t| {
        queries::parse_timestamp(&t).ok_or_else(|| anyhow!("--{flag} {t}: not a time such as 2008-08-23T17:00:00Z"))
    })
    .transpose()
}

fn assignments(params: &[String]) -> Result<Vec<(String, String)>> {
    params.iter().map(|p| queries::parse_assignment(p)).collect()
}

pub async fn diagnose(args: DiagnoseArgs, warehouse: &Path) -> Result<()> {
    if args.list {
        for (name, _) in queries::BUILT_IN {
            println!("{}", queries::describe(&Query::resolve(name, &args.queries)?));
        }
        return Ok(());
    }
    let spec = args.query.unwrap_or_default();
    let mut request = Request::new(Query::resolve(&spec, &args.queries)?);
    request.from = time("from", args.from)?;
    request.to = time("to", args.to)?;
    request.cluster = args.cluster;
    request.params = assignments(&args.params)?;
    if let Some(from) = request.from {
        request.run_date = from.date_naive();
    }
    let record = if args.dry_run { Record::Nothing } else { Record::Append };
    let outcome = diagnose::run(&Warehouse::new(warehouse), &request, record).await?;
    for batches in &outcome.results {
        shell::print_head(batches, args.rows, &mut std::io::stdout())?;
    }
    if request.query.output == Output::Verdict {
        print!("{}", diagnose::summarize(&request.query, &outcome.verdict));
    }
    let recorded = match &request.query.output {
        _ if args.dry_run => "nothing (dry run)".to_string(),
        Output::Verdict => "diagnoses".to_string(),
        Output::Table(table) => table.clone(),
    };
    eprintln!("run {}: {} rows, recorded in {recorded}", outcome.run_id, outcome.rows);
    Ok(())
}

#[derive(clap::Args)]
pub struct EvalArgs {
    /// Simulated runs to score: folders with a truth.json, or folders of them.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Other runs (other seeds), where thresholds are chosen and Ganesha is trained.
    #[arg(long, num_args = 1..)]
    tune: Vec<PathBuf>,
    /// Diagnoses to score, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = crate::eval::SCORED.map(String::from))]
    queries: Vec<String>,
    #[arg(long, env = "KAHUNA_QUERIES", default_value = "queries")]
    queries_dir: PathBuf,
    /// Highest false-alarm rate on fault-free tuning runs that a chosen threshold may have.
    #[arg(long, default_value_t = 0.02)]
    max_false_alarm: f64,
    /// Where the tables go as CSV.
    #[arg(long, default_value = "eval.csv")]
    csv: PathBuf,
    /// Ingest into this warehouse folder and keep it (default: a scratch folder, removed after).
    /// Runs it already holds, ingested from the same folders, are not read again, so a second
    /// evaluation with other queries starts at once.
    #[arg(long)]
    keep: Option<PathBuf>,
}

pub async fn eval(args: EvalArgs) -> Result<()> {
    // The runs become clusters of a warehouse apart from the operator's.
    let scratch = std::env::temp_dir().join(format!("kahuna-eval-{}", std::process::id()));
    let folder = args.keep.clone().unwrap_or_else(|| scratch.clone());
    let options = crate::eval::Options {
        runs: args.runs,
        tune: args.tune,
        queries_dir: args.queries_dir,
        queries: args.queries,
        warehouse: Warehouse::new(folder),
        max_false_alarm: args.max_false_alarm,
        csv: args.csv,
    };
    let result = crate::eval::eval(&options, &mut std::io::stdout()).await;
    if args.keep.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    result
}

#[derive(clap::Args)]
pub struct ScheduleArgs {
    #[arg(long, default_value = "kahuna.toml")]
    config: PathBuf,
}

pub async fn schedule(args: ScheduleArgs, warehouse: &Path) -> Result<()> {
    let config = Config::read(&args.config)?;
    let base = args.config.parent().map(PathBuf::from).unwrap_or_default();
    let jobs = config.jobs(&base)?;
    let warehouse = Warehouse::new(warehouse);
    let runner = WarehouseRunner::new(warehouse.clone());
    schedule::run_scheduler(&jobs, &runner, &Ledger::new(warehouse), &SystemClock, &config.policy(), None).await
}

#[derive(clap::Args)]
pub struct BackfillArgs {
    query: String,
    /// First run date (inclusive).
    #[arg(long)]
    from: NaiveDate,
    /// Last run date (inclusive).
    #[arg(long)]
    to: NaiveDate,
    /// The one cluster to run for (default: every cluster, each on its own).
    #[arg(long)]
    cluster: Option<String>,
    /// NAME=VALUE, repeatable.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<String>,
    /// Zone of the run dates (IANA name); the config's, else UTC.
    #[arg(long)]
    zone: Option<String>,
    /// Where `queries`, `zone`, retries and backoff are read from, when the file exists.
    #[arg(long, default_value = "kahuna.toml")]
    config: PathBuf,
    /// Print each date's window; run nothing.
    #[arg(long)]
    dry_run: bool,
}

pub async fn backfill(args: BackfillArgs, warehouse: &Path) -> Result<()> {
    let config = if args.config.exists() { Some(Config::read(&args.config)?) } else { None };
    let queries_dir = config.as_ref().map_or_else(|| PathBuf::from("queries"), |c| c.queries.clone());
    let zone = args.zone.or_else(|| config.as_ref().map(|c| c.zone.clone())).unwrap_or_else(|| "UTC".into());
    let query = Query::resolve(&args.query, &queries_dir)?;
    let params = assignments(&args.params)?;
    query.bind(&params)?;
    let job = Job {
        name: query.name.clone(),
        work: Work::Query { query, params },
        // A backfill has run dates, not occurrences: the schedule only carries the zone.
        schedule: Schedule::parse("@daily", schedule::parse_zone(&zone)?)?,
        cluster: args.cluster,
        catch_up: CatchUp::None,
        days_back: 0,
    };
    let policy = config.as_ref().map_or_else(Policy::default, Config::policy);
    let warehouse = Warehouse::new(warehouse);
    let runner = WarehouseRunner::new(warehouse.clone());
    let ledger = Ledger::new(warehouse);
    let out = &mut std::io::stdout();
    schedule::backfill(&job, args.from, args.to, args.dry_run, &runner, &ledger, &SystemClock, &policy, out).await
}

/// The end of `kahuna demo`: a 10-node cluster running Sort with a CPU hog on one node,
/// simulated, ingested and diagnosed with Kahuna-WB, and the verdict explained.
pub async fn demo_diagnosis(warehouse: &Path) -> Result<()> {
    use crate::simulate::{self, faults::FaultSpec, workload::Workload};
    let culprit = "r01n04";
    let out = std::env::temp_dir().join(format!("kahuna-demo-{}", std::process::id()));
    let config = simulate::Config {
        nodes: 10,
        workload: Workload::parse("sort").ok_or_else(|| anyhow!("the simulator has no sort workload"))?,
        fault: Some(format!("CPUHog@{culprit}").parse::<FaultSpec>().map_err(|e| anyhow!("demo fault: {e}"))?),
        duration_s: 15.0 * 60.0,
        seed: 1,
        out: out.clone(),
        version: simulate::Version::V018,
        gzip: false,
        sadc: true,
        threads: std::thread::available_parallelism().map_or(2, usize::from),
        progress: false,
        epoch_ms: simulate::DEFAULT_EPOCH_MS,
    };
    println!("\nNow a diagnosis. Simulating 15 minutes of a 10-node Hadoop cluster sorting, with a");
    println!("CPU hog (70% of the cores, Kahuna's CPUHog) injected on {culprit}…");
    simulate::run(&config)?;
    let options = crate::ingest::IngestOptions {
        paths: vec![out.clone()],
        cluster: "demo-cpuhog".into(),
        warehouse: Warehouse::new(warehouse),
        zone: None,
        hints: crate::ingest::discover::Hints::default(),
        progress: false,
        threads: config.threads,
        dry_run: false,
    };
    let summary = crate::ingest::ingest(&options).await;
    let _ = std::fs::remove_dir_all(&out);
    let summary = summary?;
    println!("ingested {} states as cluster demo-cpuhog.", summary.total(|r| r.states));

    let mut request = Request::new(Query::resolve("kahuna_wb", Path::new("queries"))?);
    request.cluster = Some("demo-cpuhog".into());
    request.params = vec![("states".into(), "Map".into())];
    let outcome = diagnose::run(&Warehouse::new(warehouse), &request, Record::Append).await?;
    println!("\nkahuna diagnose kahuna_wb --cluster demo-cpuhog --param states=Map");
    println!("compares, job by job, each node's histogram of Map durations with every other node's");
    println!("(square-root Jensen-Shannon distance); a node farther than the threshold from more than");
    println!("half of its peers is indicted. Score: in a job, the share of peers it differs from; for");
    println!("the host as a whole (subject `host`), the share of the jobs indicting anyone that indict it.\n");
    print!("{}", diagnose::summarize(&request.query, &outcome.verdict));
    // Every host's whole-window score, so the culprit stands beside its healthy peers.
    let mut hosts: Vec<_> =
        outcome.verdict.iter().filter(|d| d.job_id.is_none() && d.subject.as_deref() == Some("host")).collect();
    hosts.sort_by(|a, b| b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0)).then_with(|| a.host.cmp(&b.host)));
    println!("\nEvery host, over all jobs:");
    for d in hosts {
        let score = d.score.map_or("-".to_string(), |s| format!("{s:.3}"));
        println!(
            "  {:<8} score {score}{}",
            d.host.as_deref().unwrap_or("?"),
            if d.indicted { "  INDICTED" } else { "" }
        );
    }
    let jobs: std::collections::BTreeSet<_> = outcome.verdict.iter().filter_map(|d| d.job_id.clone()).collect();
    let indicted_jobs: std::collections::BTreeSet<_> = outcome
        .verdict
        .iter()
        .filter(|d| d.indicted && d.host.as_deref() == Some(culprit))
        .filter_map(|d| d.job_id.clone())
        .collect();
    println!(
        "\n{culprit} (where the hog runs) is indicted in {} of {} jobs; every verdict is in the `diagnoses` table:",
        indicted_jobs.len(),
        jobs.len()
    );
    println!("  kahuna sql -c \"SELECT job_id, host, score, indicted, detail FROM diagnoses WHERE indicted\"");
    Ok(())
}
