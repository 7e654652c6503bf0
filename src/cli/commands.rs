//! What each subcommand does with its arguments, and what it prints. The work itself is in
//! [`crate::ingest`], [`crate::shell`], [`crate::diagnose`], [`crate::schedule`] and
//! [`crate::simulate`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use chrono::{DateTime, Utc};

use super::{
    BackfillArgs, CalibrateArgs, DiagnoseArgs, EvalArgs, ExecutorArgs, IngestArgs, OptimizeArgs, ReportArgs,
    ScheduleArgs, SchedulerArgs, ServeArgs, SimulateArgs, SqlArgs,
};
use crate::diagnose::queries::{self, Output, Query};
use crate::diagnose::{self, Record, Request};
use crate::ingest::discover::{Hints, layout_of, parse_daemon_flag};
use crate::ingest::{IngestOptions, summary};
use crate::schedule::clock::SystemClock;
use crate::schedule::plan::{CatchUp, Schedule};
use crate::schedule::{self, Config, Job, Ledger, Policy, Scheduler, WarehouseRunner, Work};
use crate::serve::ServeOptions;
use crate::simulate::faults::{FaultSpec, parse_duration};
use crate::simulate::history::{HistoryConfig, run_history};
use crate::simulate::workload::Workload;
use crate::simulate::{self, Suite, Version};
use crate::warehouse::Warehouse;
use crate::{catalog, cores, shell};

impl IngestArgs {
    pub(crate) fn options(&self, warehouse: Warehouse) -> Result<IngestOptions> {
        let zone = match self.tz.as_deref() {
            None | Some("UTC") => None,
            Some(name) => Some(name.parse().map_err(|e| anyhow!("--tz {name}: {e}"))?),
        };
        let daemon = self.daemon.as_deref().map(parse_daemon_flag).transpose()?;
        let layout = self.layout.as_deref().map(layout_of).transpose().map_err(anyhow::Error::msg)?;
        Ok(IngestOptions {
            paths: self.paths.clone(),
            cluster: self.cluster.clone(),
            warehouse,
            zone,
            hints: Hints { host: self.host.clone(), daemon, iface: self.iface.clone(), layout },
            progress: true,
            threads: self.threads.unwrap_or_else(cores),
            dry_run: self.dry_run,
        })
    }
}

pub async fn ingest(args: IngestArgs, warehouse: Warehouse) -> Result<()> {
    let options = args.options(warehouse)?;
    let summary = crate::ingest::ingest(&options).await?;
    print!("{}", summary::render(&summary));
    if !args.dry_run && !args.no_compact {
        for line in options.warehouse.compact_small_files(&options.cluster).await? {
            println!("{line}");
        }
    }
    Ok(())
}

pub async fn sql(args: SqlArgs, warehouse: Warehouse) -> Result<()> {
    let ctx = match &args.engine {
        Some(engine) => {
            let scheduler = crate::cluster::scheduler_address(engine)?;
            catalog::session_on_cluster(&catalog::Snapshot::take_as_files(&warehouse).await?, &scheduler).await?
        }
        None => catalog::session(&warehouse).await?,
    };
    let script = match (args.command, args.file) {
        (Some(sql), _) => Some(sql),
        (None, Some(path)) => {
            Some(std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?)
        }
        (None, None) => None,
    };
    match script {
        Some(sql) => shell::run_script(&ctx, &sql, args.format, &mut std::io::stdout()).await,
        None => shell::interactive(&ctx, args.format).await,
    }
}

pub async fn serve(args: ServeArgs, warehouse: Warehouse) -> Result<()> {
    let token = match (&args.token_file, std::env::var("KAHUNA_SERVE_TOKEN")) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            Some(text.trim().to_string())
        }
        (None, Ok(token)) => Some(token.trim().to_string()),
        (None, Err(_)) => None,
    };
    if token.as_ref().is_some_and(String::is_empty) {
        bail!("the token is empty");
    }
    let options = ServeOptions {
        listen: args.listen,
        token,
        tls: args.tls_cert.zip(args.tls_key),
        max_queries: args.max_queries.max(1),
        memory_per_query: args.query_memory_mib << 20,
    };
    let scheme = if options.tls.is_some() { "grpc+tls" } else { "grpc" };
    let shown = warehouse.to_string();
    crate::serve::serve(warehouse, options, |addr| {
        println!("serving {shown} at {scheme}://{addr}");
        let _ = std::io::Write::flush(&mut std::io::stdout());
    })
    .await
}

/// A scheduler's and an executor's own lines on standard error: warnings unless RUST_LOG says
/// otherwise (`RUST_LOG=info` shows every job and task).
fn log_to_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

pub async fn scheduler(args: SchedulerArgs) -> Result<()> {
    log_to_stderr();
    crate::cluster::scheduler(args.listen, |address| {
        println!("scheduler listening at ballista://{address}");
        let _ = std::io::Write::flush(&mut std::io::stdout());
    })
    .await
}

pub async fn executor(args: ExecutorArgs) -> Result<()> {
    log_to_stderr();
    let scheduler = match args.scheduler.contains("://") {
        true => crate::cluster::scheduler_address(&args.scheduler)?,
        false => args.scheduler,
    };
    println!("executor at {} of the scheduler at {scheduler}", args.listen);
    let options =
        crate::cluster::ExecutorOptions { scheduler, listen: args.listen, tasks: args.tasks, work_dir: args.work_dir };
    crate::cluster::executor(options).await
}

pub async fn optimize(args: OptimizeArgs, warehouse: Warehouse) -> Result<()> {
    for line in warehouse.optimize(Duration::from_secs(args.retention_hours * 3600)).await? {
        println!("{line}");
    }
    Ok(())
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

pub async fn diagnose(args: DiagnoseArgs, warehouse: Warehouse) -> Result<()> {
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
    request.memory_limit = args.memory_limit;
    request.engine = args.engine.as_deref().map(crate::cluster::scheduler_address).transpose()?;
    if let Some(from) = request.from {
        request.run_date = from.date_naive();
    }
    let record = if args.dry_run { Record::Nothing } else { Record::Append };
    let outcome = diagnose::run(&warehouse, &request, record).await?;
    for batches in &outcome.results {
        shell::print_head(batches, args.rows, &mut std::io::stdout())?;
    }
    if request.query.output == Output::Verdict {
        print!("{}", diagnose::summarize(&request.query, &outcome.verdict));
    }
    for line in &outcome.thresholds {
        println!("  {line}");
    }
    let recorded = match &request.query.output {
        _ if args.dry_run => "nothing (dry run)".to_string(),
        Output::Verdict => "diagnoses".to_string(),
        Output::Table(table) => table.clone(),
    };
    eprintln!("run {}: {} rows, recorded in {recorded}", outcome.run_id, outcome.rows);
    Ok(())
}

pub async fn report(args: ReportArgs, warehouse: Warehouse) -> Result<()> {
    let options = crate::report::Options {
        cluster: args.cluster,
        from: time("from", args.from)?,
        to: time("to", args.to)?,
        run: args.run,
        queries: args.queries,
        eval: args.eval,
    };
    let report = crate::report::build(&warehouse, &options).await?;
    if args.sql {
        print!("{}", report.sql());
        return Ok(());
    }
    let page = report.html();
    std::fs::write(&args.out, &page).with_context(|| format!("cannot write {}", args.out.display()))?;
    let indicted = if report.indicted.is_empty() {
        "nobody indicted".to_string()
    } else {
        format!("indicted: {}", report.indicted.join(", "))
    };
    match report.cluster.as_str() {
        "" => eprintln!("wrote {} ({} KB): kahuna eval's scores", args.out.display(), page.len() / 1024),
        cluster => eprintln!("wrote {} ({} KB): cluster {cluster}, {indicted}", args.out.display(), page.len() / 1024),
    }
    Ok(())
}

pub async fn calibrate(args: CalibrateArgs, warehouse: Warehouse) -> Result<()> {
    let window = parse_duration(&args.window).map_err(|e| anyhow!("--window {e}"))?;
    if window < 1.0 || !args.days.is_finite() || args.days <= 0.0 {
        bail!("--window must be at least 1s and --days above 0");
    }
    let options = crate::diagnose::calibrate::Options {
        clusters: args.cluster.into_iter().collect(),
        days: args.days,
        window: chrono::Duration::milliseconds((window * 1000.0).round() as i64),
        shares: crate::diagnose::calibrate::Shares { each: args.max_share, together: args.max_share_together },
        min_windows: args.min_windows.max(1),
        queries_dir: args.queries_dir,
        queries: args.queries,
    };
    let calibrations = crate::diagnose::calibrate::calibrate(&warehouse, &options, &mut std::io::stdout()).await?;
    eprintln!("{} values recorded in calibrations", calibrations.len());
    Ok(())
}

pub async fn eval(args: EvalArgs) -> Result<()> {
    // The runs become clusters of a warehouse apart from the operator's.
    let scratch = std::env::temp_dir().join(format!("kahuna-eval-{}", std::process::id()));
    let folder = args.keep.clone().unwrap_or_else(|| scratch.clone());
    let options = crate::diagnose::eval::Options {
        runs: args.runs,
        tune: args.tune,
        queries_dir: args.queries_dir,
        queries: args.queries,
        warehouse: Warehouse::new(folder),
        max_false_alarm: args.max_false_alarm,
        thresholds: match (args.defaults, args.calibrate) {
            (true, _) => crate::diagnose::eval::Thresholds::Defaults,
            (false, Some(each)) => crate::diagnose::eval::Thresholds::Calibrated(crate::diagnose::calibrate::Shares {
                each,
                together: args.calibrate_together,
            }),
            (false, None) => crate::diagnose::eval::Thresholds::Tuned,
        },
        csv: args.csv,
    };
    let result = crate::diagnose::eval::eval(&options, &mut std::io::stdout()).await;
    if args.keep.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    result
}

pub async fn schedule(args: ScheduleArgs, warehouse: Warehouse) -> Result<()> {
    let config = Config::read(&args.config)?;
    let base = args.config.parent().map(PathBuf::from).unwrap_or_default();
    let jobs = config.jobs(&base)?;
    let runner = WarehouseRunner::new(warehouse.clone());
    let ledger = Ledger::new(warehouse);
    Scheduler::new(&runner, &ledger, &SystemClock, &config.policy()).run(&jobs, None).await
}

pub async fn backfill(args: BackfillArgs, warehouse: Warehouse) -> Result<()> {
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
    let runner = WarehouseRunner::new(warehouse.clone());
    let ledger = Ledger::new(warehouse);
    let out = &mut std::io::stdout();
    Scheduler::new(&runner, &ledger, &SystemClock, &policy).backfill(&job, args.from, args.to, args.dry_run, out).await
}

/// `kahuna simulate`: one run, a suite of runs, or the M45 history.
pub fn simulate(args: SimulateArgs) -> Result<()> {
    let version = Version::parse(&args.hadoop).with_context(|| format!("--hadoop {}: 0.18, 0.20 or 2", args.hadoop))?;
    let threads = args.threads.unwrap_or_else(cores).max(1);
    let hardware = simulate::Hardware::parse(&args.hardware)
        .with_context(|| format!("--hardware {}: uniform or mixed", args.hardware))?;
    let clock_skew_s = parse_duration(&args.clock_skew).map_err(|e| anyhow!("--clock-skew {e}"))?;
    let datanode_log = simulate::DataNodeLog::parse(&args.datanode_log)
        .with_context(|| format!("--datanode-log {}: debug or info", args.datanode_log))?;
    let clock_skew_ms = (clock_skew_s * 1000.0).round() as i64;
    let sysstat_interval_s = parse_duration(&args.sysstat_interval)
        .ok()
        .filter(|s| *s >= 1.0 && s.fract() == 0.0 && *s <= 3600.0)
        .with_context(|| format!("--sysstat-interval {}: whole seconds from 1s to 1h", args.sysstat_interval))?
        as u32;
    for (flag, share, of_what) in [
        ("--stragglers", args.stragglers, "task attempts"),
        ("--fetch-failures", args.fetch_failures, "map-output copies"),
    ] {
        if !(0.0..=1.0).contains(&share) {
            bail!("{flag} {share}: a share of {of_what} from 0 to 1");
        }
    }
    let conditions = simulate::Conditions {
        hardware,
        clock_skew_ms,
        datanode_log,
        sysstat_noise: args.sysstat_noise,
        sysstat_interval_s,
        stragglers: args.stragglers,
        fetch_failures: args.fetch_failures,
    };
    if let Some(kind) = &args.history {
        if kind != "m45" {
            bail!("--history {kind}: the one history is m45");
        }
        if version == Version::V2 {
            bail!("--history is a JobTracker's job history: --hadoop 0.18 or 0.20");
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
            conditions,
        };
        let summary = run_history(&cfg)?;
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    if let Some(path) = &args.suite {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let suite = Suite::parse(&text).with_context(|| path.display().to_string())?;
        println!("{:<12} {:<13} {:>6} {:>10}", "workload", "fault", "nodes", "slowdown");
        for (w, f, n, s) in simulate::run_suite(&suite, &args.out, args.gzip, threads, true)? {
            println!("{:<12} {:<13} {:>6} {:>9.1}%", w.name(), f.name(), n, s * 100.0);
        }
        return Ok(());
    }
    let workload = Workload::parse(&args.workload).with_context(|| {
        format!("--workload {}: one of {}", args.workload, Workload::ALL.map(Workload::name).join(", "))
    })?;
    let fault = args.fault.as_deref().map(str::parse::<FaultSpec>).transpose().map_err(|e| anyhow!("--fault {e}"))?;
    let cfg = simulate::Config {
        nodes: args.nodes,
        workload,
        fault,
        duration_s: parse_duration(&args.duration).map_err(|e| anyhow!("--duration {e}"))?,
        seed: args.seed,
        out: args.out,
        version,
        gzip: args.gzip,
        sadc: !args.no_sadc,
        threads,
        progress: true,
        epoch_ms: simulate::DEFAULT_EPOCH_MS,
        conditions,
    };
    let outcome = simulate::run(&cfg)?;
    let done = outcome.jobs.iter().filter(|j| j.finish_ms.is_some()).count();
    println!(
        "{} jobs ({done} finished), {} log lines, written to {}",
        outcome.jobs.len(),
        outcome.lines.total(),
        cfg.out.display()
    );
    Ok(())
}
