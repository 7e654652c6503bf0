//! `kahuna schedule` and `kahuna backfill`: saved queries (and ingests of new logs) run on cron
//! schedules, each run recorded in the `schedule_runs` ledger.
//!
//! A run stands for one run date (a local day in the job's zone) and writes its results as the
//! partition of that date, replacing what an earlier run of the same job wrote there, so a rerun
//! or a backfill never doubles rows. On start the ledger says which occurrence each job last
//! dealt with; the ones missed while the scheduler was down are caught up as the job's policy
//! says (`none`, `latest`, `all`). A failed attempt is retried after a doubling backoff.
//!
//! The loop reads time only through [`clock::Clock`], and runs work only through [`Runner`], so
//! the tests drive weeks of schedule with a fake clock and a scripted runner.
//!
//! Why croner for the expressions: it parses five- and six-field cron (with `L`, `W`, `#`,
//! names and `@daily`), and iterates occurrences in any chrono zone with each daylight-saving
//! gap and overlap settled once — the catch-up logic is an iteration between two instants. A
//! scheduler crate such as tokio-cron-scheduler owns the clock and the loop, which would leave
//! catch-up, a ledger and a fake clock for tests outside its reach.

pub mod clock;
pub mod plan;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use datafusion::arrow::array::{Array, cast::AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use futures::StreamExt;

use crate::catalog::Snapshot;
use crate::diagnose::{self, Record, Request};
use crate::ingest::discover::{Hints, parse_daemon_flag};
use crate::ingest::{IngestOptions, ingest};
use crate::queries::{Output, Query};
use crate::warehouse::Warehouse;
use crate::warehouse::results::{self, LedgerEntry, SCHEDULE_RUNS};
use clock::Clock;
use plan::{CatchUp, Schedule};

/// `kahuna.toml`, as written by an operator.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Folder of the query files (names not found there fall back to the built-in queries).
    #[serde(default = "default_queries")]
    pub queries: PathBuf,
    /// IANA zone of cron expressions and run dates, unless a job says otherwise.
    #[serde(default = "default_zone")]
    pub zone: String,
    #[serde(default = "default_catch_up")]
    pub catch_up: CatchUp,
    /// Retries after a failed attempt.
    #[serde(default = "default_retries")]
    pub retries: u32,
    #[serde(default = "default_backoff")]
    pub backoff_seconds: u64,
    #[serde(default = "default_max_backoff")]
    pub max_backoff_seconds: u64,
    /// Queries due together that run side by side.
    #[serde(default = "default_parallel_jobs")]
    pub parallel_jobs: usize,
    #[serde(default)]
    pub jobs: Vec<JobConfig>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// Name in the ledger; the query's name by default (`ingest` for an ingest).
    pub name: Option<String>,
    /// The query to run (a name in the queries folder, or a path). Absent for an ingest job.
    pub query: Option<String>,
    /// Log folders or files to ingest: makes this an ingest job.
    #[serde(default)]
    pub ingest: Vec<PathBuf>,
    /// An ingest's `--tz`: the zone the logs' timestamps were written in (UTC by default), not
    /// the zone of the cron expression.
    pub tz: Option<String>,
    /// An ingest's `--host`, `--daemon` and `--iface`, for files whose names do not say.
    pub host: Option<String>,
    pub daemon: Option<String>,
    pub iface: Option<String>,
    pub cron: String,
    pub cluster: Option<String>,
    pub zone: Option<String>,
    pub catch_up: Option<CatchUp>,
    /// The run date is the occurrence's local date minus this many days.
    #[serde(default = "default_days_back")]
    pub days_back: u32,
    #[serde(default)]
    pub params: HashMap<String, toml::Value>,
}

fn default_queries() -> PathBuf {
    PathBuf::from("queries")
}
fn default_zone() -> String {
    "UTC".into()
}
fn default_catch_up() -> CatchUp {
    CatchUp::Latest
}
fn default_retries() -> u32 {
    2
}
fn default_backoff() -> u64 {
    60
}
fn default_max_backoff() -> u64 {
    3600
}

/// Two: one query leaves a core idle in its single-threaded steps (a final sort, a merge of
/// partial aggregates, a commit), and a second one fills it. The M45 day's nine queries took
/// 1.28 and 1.23 s so against 1.54 and 1.36 s one after another (the nightly bench).
fn default_parallel_jobs() -> usize {
    2
}

fn default_days_back() -> u32 {
    1
}

/// What a job does.
#[derive(Clone, Debug)]
pub enum Work {
    Query { query: Query, params: Vec<(String, String)> },
    Ingest { paths: Vec<PathBuf>, zone: Option<Tz>, hints: Hints },
}

#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    pub work: Work,
    pub schedule: Schedule,
    pub cluster: Option<String>,
    pub catch_up: CatchUp,
    pub days_back: u32,
}

impl Job {
    fn hash(&self) -> String {
        match &self.work {
            Work::Query { query, .. } => query.hash(),
            Work::Ingest { .. } => "ingest".into(),
        }
    }

    /// Whether this job must run before `later` when both are due at one instant: an ingest
    /// writes what every query reads, and a query writes its output (`diagnoses` for a verdict),
    /// which a query such as `combined` reads.
    fn feeds(&self, later: &Job) -> Result<bool> {
        let Work::Query { query: reader, params } = &later.work else { return Ok(false) };
        let output = match &self.work {
            Work::Ingest { .. } => return Ok(true),
            Work::Query { query, .. } => match &query.output {
                Output::Verdict => results::DIAGNOSES,
                Output::Table(table) => table.as_str(),
            },
        };
        Ok(reader.bind(params)?.tables()?.contains(output))
    }
}

/// `feeds[a][b]`: job `a` writes what job `b` reads.
fn feeds(jobs: &[Job]) -> Result<Vec<Vec<bool>>> {
    let mut feeds = vec![vec![false; jobs.len()]; jobs.len()];
    for (a, earlier) in jobs.iter().enumerate() {
        for (b, later) in jobs.iter().enumerate() {
            feeds[a][b] = a != b && earlier.feeds(later).with_context(|| later.name.clone())?;
        }
    }
    Ok(feeds)
}

/// Each job's stage: a job comes after every job that [feeds](Job::feeds) it; equal stages
/// keep the configuration's order. A cycle (two queries that each read what the other writes)
/// is broken where it closes.
fn stages_of(feeds: &[Vec<bool>]) -> Vec<usize> {
    fn stage_of(job: usize, feeds: &[Vec<bool>], stages: &mut [Option<usize>], on_path: &mut [bool]) -> usize {
        if let Some(stage) = stages[job] {
            return stage;
        }
        on_path[job] = true;
        let mut stage = 0;
        for earlier in 0..feeds.len() {
            if feeds[earlier][job] && !on_path[earlier] {
                stage = stage.max(stage_of(earlier, feeds, stages, on_path) + 1);
            }
        }
        on_path[job] = false;
        stages[job] = Some(stage);
        stage
    }
    let mut stages = vec![None; feeds.len()];
    let mut on_path = vec![false; feeds.len()];
    (0..feeds.len()).map(|job| stage_of(job, feeds, &mut stages, &mut on_path)).collect()
}

/// The order of jobs due at one instant: their stages, and `waits[b][a]`, job `b` starts only
/// once job `a` has ended: one feeds the other and `a`'s stage is the earlier (where a cycle
/// was broken, the stages say which runs first, and the two never run side by side).
pub struct Order {
    pub stages: Vec<usize>,
    waits: Vec<Vec<bool>>,
}

impl Order {
    pub fn of(jobs: &[Job]) -> Result<Order> {
        let feeds = feeds(jobs)?;
        let stages = stages_of(&feeds);
        let waits = (0..jobs.len())
            .map(|later| {
                (0..jobs.len())
                    .map(|earlier| (feeds[earlier][later] || feeds[later][earlier]) && stages[earlier] < stages[later])
                    .collect()
            })
            .collect();
        Ok(Order { stages, waits })
    }

    /// Runs `due` (job indices, in stage order) with `start`: each as soon as those of `due` it
    /// waits for have ended, at most `parallel` at a time, and a job that must run `alone`
    /// with nothing beside it. Not by stage: a query that reads one other's output (Ganesha's
    /// model) starts when that one ends, beside the rest of the earlier stage, where a stage
    /// barrier kept it waiting for the slowest job. `ended` gets each outcome as its job ends.
    pub async fn run<T, F: Future<Output = T>>(
        &self,
        due: &[usize],
        parallel: usize,
        alone: impl Fn(usize) -> bool,
        mut start: impl FnMut(usize) -> F,
        mut ended: impl FnMut(usize, T),
    ) {
        let mut pending = due.to_vec();
        let mut running = futures::stream::FuturesUnordered::new();
        let mut active: Vec<usize> = Vec::new();
        loop {
            let mut next = 0;
            while next < pending.len() && active.len() < parallel.max(1) && !active.iter().any(|&job| alone(job)) {
                let job = pending[next];
                if pending.iter().chain(&active).any(|&other| self.waits[job][other]) {
                    next += 1;
                    continue;
                }
                // A job that must run alone waits for the running ones to end, and nothing
                // passes it meanwhile: later jobs could otherwise keep it waiting.
                if alone(job) && !active.is_empty() {
                    break;
                }
                pending.remove(next);
                active.push(job);
                let run = start(job);
                running.push(async move { (job, run.await) });
            }
            let Some((job, outcome)) = running.next().await else { break };
            active.retain(|&other| other != job);
            ended(job, outcome);
        }
        debug_assert!(pending.is_empty(), "jobs never started: {pending:?}");
    }
}

pub struct Policy {
    pub retries: u32,
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// Queries due together that run side by side (at least 1).
    pub parallel: usize,
}

/// The policy of a configuration that says nothing.
impl Default for Policy {
    fn default() -> Policy {
        Policy {
            retries: default_retries(),
            backoff: Duration::from_secs(default_backoff()),
            max_backoff: Duration::from_secs(default_max_backoff()),
            parallel: default_parallel_jobs(),
        }
    }
}

pub fn parse_zone(name: &str) -> Result<Tz> {
    name.parse().map_err(|e| anyhow!("zone {name}: {e}"))
}

impl Config {
    pub fn read(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
    }

    pub fn policy(&self) -> Policy {
        Policy {
            retries: self.retries,
            backoff: Duration::from_secs(self.backoff_seconds),
            max_backoff: Duration::from_secs(self.max_backoff_seconds),
            parallel: self.parallel_jobs.max(1),
        }
    }

    /// The jobs, with every query read and every expression, zone and parameter checked now
    /// rather than at 2 a.m. Relative paths are taken from `base` (the config file's folder).
    pub fn jobs(&self, base: &Path) -> Result<Vec<Job>> {
        let mut jobs: Vec<Job> = Vec::new();
        for (index, job) in self.jobs.iter().enumerate() {
            let at = || format!("jobs[{index}]{}", job.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default());
            let zone = parse_zone(job.zone.as_deref().unwrap_or(&self.zone)).with_context(at)?;
            let schedule = Schedule::parse(&job.cron, zone).with_context(at)?;
            let ingest_flags = [("tz", &job.tz), ("host", &job.host), ("daemon", &job.daemon), ("iface", &job.iface)];
            if job.ingest.is_empty()
                && let Some((flag, _)) = ingest_flags.iter().find(|(_, value)| value.is_some())
            {
                bail!("{}: `{flag}` is for ingest jobs; a query job has none", at());
            }
            let (name, work) = match (&job.query, job.ingest.is_empty()) {
                (Some(spec), true) => {
                    let query = Query::resolve(spec, &base.join(&self.queries)).with_context(at)?;
                    let params: Vec<(String, String)> =
                        job.params.iter().map(|(k, v)| (k.clone(), toml_text(v))).collect();
                    // Bind once now, so a misspelt parameter fails at start.
                    query.bind(&params).with_context(at)?;
                    (job.name.clone().unwrap_or_else(|| query.name.clone()), Work::Query { query, params })
                }
                (None, false) => {
                    let paths = job.ingest.iter().map(|p| base.join(p)).collect();
                    let zone = match job.tz.as_deref() {
                        None | Some("UTC") => None,
                        Some(name) => Some(parse_zone(name).with_context(at)?),
                    };
                    let daemon = job.daemon.as_deref().map(parse_daemon_flag).transpose().with_context(at)?;
                    let hints = Hints { host: job.host.clone(), daemon, iface: job.iface.clone() };
                    (job.name.clone().unwrap_or_else(|| "ingest".into()), Work::Ingest { paths, zone, hints })
                }
                _ => bail!("{}: a job has either `query` or `ingest`", at()),
            };
            if jobs.iter().any(|j| j.name == name) {
                bail!("{}: two jobs are named {name}; give one a `name`", at());
            }
            jobs.push(Job {
                name,
                work,
                schedule,
                cluster: job.cluster.clone(),
                catch_up: job.catch_up.unwrap_or(self.catch_up),
                days_back: job.days_back,
            });
        }
        Ok(jobs)
    }
}

fn toml_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Does one run's work; returns the rows it wrote. Not `Send`: an ingest's future holds
/// Parquet writers that are not, and the scheduler runs its work on its own task anyway.
#[async_trait(?Send)]
pub trait Runner {
    async fn run(&self, job: &Job, run_date: NaiveDate) -> Result<usize>;

    /// The runs due together are over: what they shared is not kept for the next ones.
    fn batch_done(&self) {}
}

/// The real work: a query over the run date's local day, replacing that date's partition; or
/// an ingest of the job's paths.
pub struct WarehouseRunner {
    warehouse: Warehouse,
    /// The tables the queries of one batch read, opened once for all of them (see
    /// [`diagnose::run_on`]); an ingest drops it, and so does the batch's end, so that the next
    /// batch reads what was written in between.
    snapshot: RefCell<Option<Snapshot>>,
}

impl WarehouseRunner {
    pub fn new(warehouse: Warehouse) -> WarehouseRunner {
        WarehouseRunner { warehouse, snapshot: RefCell::new(None) }
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let cached = self.snapshot.borrow().clone();
        match cached {
            Some(snapshot) => Ok(snapshot),
            None => {
                let snapshot = Snapshot::take(&self.warehouse).await?;
                *self.snapshot.borrow_mut() = Some(snapshot.clone());
                Ok(snapshot)
            }
        }
    }
}

#[async_trait(?Send)]
impl Runner for WarehouseRunner {
    fn batch_done(&self) {
        self.snapshot.take();
    }

    async fn run(&self, job: &Job, run_date: NaiveDate) -> Result<usize> {
        match &job.work {
            Work::Query { query, params } => {
                let (from, to) = plan::day_window(run_date, job.schedule.zone)?;
                let mut request = Request::new(query.clone());
                request.from = Some(from);
                request.to = Some(to);
                request.cluster = job.cluster.clone();
                request.params = params.clone();
                request.run_date = run_date;
                let snapshot = self.snapshot().await?;
                // On a task of its own: queries side by side then use both cores in the steps
                // DataFusion runs on the caller's task too (a final merge, the commit).
                let run = tokio::spawn(async move { diagnose::run_on(&snapshot, &request, Record::Replace).await });
                let outcome = run.await.unwrap_or_else(|e| Err(anyhow!("{}: {e}", job.name)));
                // A retry opens the tables again: what failed may have been reading one.
                if outcome.is_err() {
                    self.snapshot.take();
                }
                Ok(outcome?.rows)
            }
            Work::Ingest { paths, zone, hints } => {
                self.snapshot.take();
                let options = IngestOptions {
                    paths: paths.clone(),
                    cluster: job.cluster.clone().unwrap_or_else(|| "default".into()),
                    warehouse: self.warehouse.clone(),
                    zone: *zone,
                    hints: hints.clone(),
                    progress: false,
                    threads: std::thread::available_parallelism().map_or(2, usize::from),
                    dry_run: false,
                };
                let summary = ingest(&options).await?;
                Ok(summary.total(|r| r.events) as usize)
            }
        }
    }
}

/// The ledger: one row per attempt in `schedule_runs`.
pub struct Ledger {
    warehouse: Warehouse,
}

impl Ledger {
    pub fn new(warehouse: Warehouse) -> Ledger {
        Ledger { warehouse }
    }

    pub async fn record(&self, entry: &LedgerEntry) -> Result<()> {
        let batch = results::ledger_batch(std::slice::from_ref(entry))?;
        results::write(&self.warehouse, SCHEDULE_RUNS, batch, None).await
    }

    /// The newest occurrence of each job that was dealt with: succeeded, or failed for good.
    pub async fn handled(&self) -> Result<HashMap<String, DateTime<Utc>>> {
        let mut out = HashMap::new();
        if self.warehouse.open(SCHEDULE_RUNS).await?.is_none() {
            return Ok(out);
        }
        let ctx = crate::catalog::session(&self.warehouse).await?;
        let sql = "SELECT job, max(scheduled_for) FROM schedule_runs \
                   WHERE status IN ('succeeded', 'failed') AND scheduled_for IS NOT NULL GROUP BY job";
        for batch in ctx.sql(sql).await?.collect().await? {
            // Strings may come back as views, depending on the reader: cast to what is read here.
            let jobs = cast(batch.column(0), &DataType::Utf8)?;
            let jobs = jobs.as_string::<i32>();
            let times = cast(batch.column(1), &DataType::Timestamp(TimeUnit::Microsecond, None))?;
            let times = times.as_primitive::<TimestampMicrosecondType>();
            for row in 0..batch.num_rows() {
                if times.is_valid(row)
                    && let Some(t) = DateTime::from_timestamp_micros(times.value(row))
                {
                    out.insert(jobs.value(row).to_string(), t);
                }
            }
        }
        Ok(out)
    }
}

/// Runs `job` for `run_date` with retries, recording every attempt; the last error if all fail.
pub async fn run_with_retries(
    job: &Job,
    run_date: NaiveDate,
    scheduled_for: Option<DateTime<Utc>>,
    trigger: &str,
    runner: &dyn Runner,
    ledger: &Ledger,
    clock: &dyn Clock,
    policy: &Policy,
) -> Result<usize> {
    let run_id = format!("{}-{}-{run_date}", job.name, clock.now().format("%Y%m%dT%H%M%S%.3fZ"));
    let mut attempt = 1;
    loop {
        let started = clock.now();
        let timer = Instant::now();
        let outcome = runner.run(job, run_date).await;
        let last = attempt > policy.retries;
        let entry = LedgerEntry {
            run_id: run_id.clone(),
            cluster: job.cluster.clone().unwrap_or_else(|| "default".into()),
            job: job.name.clone(),
            query_hash: job.hash(),
            run_date,
            scheduled_for,
            trigger: trigger.to_string(),
            attempt: i64::from(attempt),
            status: match (&outcome, last) {
                (Ok(_), _) => "succeeded",
                (Err(_), true) => "failed",
                (Err(_), false) => "retrying",
            }
            .to_string(),
            rows: outcome.as_ref().map_or(0, |rows| *rows as i64),
            duration_ms: timer.elapsed().as_millis() as i64,
            error: outcome.as_ref().err().map(crate::error_message),
            started,
        };
        ledger.record(&entry).await?;
        match outcome {
            Ok(rows) => return Ok(rows),
            Err(e) if last => return Err(e.context(format!("{} for {run_date}: attempt {attempt}", job.name))),
            Err(e) => {
                let wait = plan::backoff(policy.backoff, attempt, policy.max_backoff);
                eprintln!(
                    "{} for {run_date}: attempt {attempt} failed ({e:#}); retrying in {} s",
                    job.name,
                    wait.as_secs()
                );
                clock.sleep_until(clock.now() + chrono::Duration::from_std(wait).unwrap_or_default()).await;
                attempt += 1;
            }
        }
    }
}

/// The scheduler's loop: runs what is due, sleeps until the next occurrence; returns when the
/// next occurrence is after `until` (never, for the real command).
pub async fn run_scheduler(
    jobs: &[Job],
    runner: &dyn Runner,
    ledger: &Ledger,
    clock: &dyn Clock,
    policy: &Policy,
    until: Option<DateTime<Utc>>,
) -> Result<()> {
    let started = clock.now();
    let mut handled = ledger.handled().await?;
    let order = Order::of(jobs)?;
    for job in jobs {
        let next = job.schedule.next_after(started).map_or("never".into(), |t| t.to_rfc3339());
        eprintln!("{}: `{}` in {}, next at {next}", job.name, job.schedule.expression, job.schedule.zone);
    }
    loop {
        let now = clock.now();
        let mut due = Vec::new();
        for (index, job) in jobs.iter().enumerate() {
            let last = handled.get(&job.name).copied();
            let occurrences = plan::due(&job.schedule, last, started, now, job.catch_up);
            due.extend(
                occurrences
                    .into_iter()
                    .map(|(occurrence, caught_up)| (occurrence, order.stages[index], index, caught_up)),
            );
        }
        // Oldest first; at one instant, a job after those that write what it reads.
        due.sort_by_key(|&(occurrence, stage, index, _)| (occurrence, stage, index));
        for together in due.chunk_by(|a, b| a.0 == b.0) {
            // Jobs of one instant: each after those that write what it reads; the others side
            // by side (their commits one at a time, see `results::write`). An ingest runs alone.
            let occurrence = together[0].0;
            let caught_up: HashMap<usize, bool> =
                together.iter().map(|&(_, _, index, caught_up)| (index, caught_up)).collect();
            let indices: Vec<usize> = together.iter().map(|&(_, _, index, _)| index).collect();
            let alone = |index: usize| matches!(jobs[index].work, Work::Ingest { .. });
            let run = |index: usize| {
                let job = &jobs[index];
                let run_date = job.schedule.run_date(occurrence, job.days_back);
                let trigger = if caught_up[&index] { "catch-up" } else { "schedule" };
                async move {
                    let outcome =
                        run_with_retries(job, run_date, Some(occurrence), trigger, runner, ledger, clock, policy).await;
                    (run_date, trigger, outcome)
                }
            };
            let ended = |index: usize, (run_date, trigger, outcome): (NaiveDate, &str, Result<usize>)| {
                let job = &jobs[index];
                match outcome {
                    Ok(rows) => eprintln!("{} for {run_date} ({trigger}): {rows} rows", job.name),
                    // One job failing for good does not stop the others; the ledger has it.
                    Err(e) => eprintln!("error: {e:#}"),
                }
                handled.insert(job.name.clone(), occurrence);
            };
            order.run(&indices, policy.parallel, alone, run, ended).await;
        }
        runner.batch_done();
        // Each job's next occurrence after the last it dealt with, not after now: one that fell
        // due while others ran (a long ingest, retries) runs at once, not a day late.
        let next_of = |job: &Job| job.schedule.next_after(plan::live_after(handled.get(&job.name).copied(), started));
        let Some(next) = jobs.iter().filter_map(next_of).min() else {
            bail!("no job has a next occurrence");
        };
        if until.is_some_and(|u| next > u) {
            return Ok(());
        }
        clock.sleep_until(next).await;
    }
}

/// `kahuna backfill`: the job for every date in [from, to], oldest first; or, dry, the plan.
pub async fn backfill(
    job: &Job,
    from: NaiveDate,
    to: NaiveDate,
    dry_run: bool,
    runner: &dyn Runner,
    ledger: &Ledger,
    clock: &dyn Clock,
    policy: &Policy,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    if to < from {
        bail!("--to {to} is before --from {from}");
    }
    let mut failed = 0;
    for date in from.iter_days().take_while(|d| *d <= to) {
        let (start, end) = plan::day_window(date, job.schedule.zone)?;
        if dry_run {
            writeln!(
                out,
                "{} for {date}: window [{}, {}), would replace its partition",
                job.name,
                start.to_rfc3339(),
                end.to_rfc3339()
            )?;
            continue;
        }
        match run_with_retries(job, date, None, "backfill", runner, ledger, clock, policy).await {
            Ok(rows) => writeln!(out, "{} for {date}: {rows} rows", job.name)?,
            Err(e) => {
                failed += 1;
                writeln!(out, "{} for {date}: failed: {e:#}", job.name)?;
            }
        }
    }
    runner.batch_done();
    if failed > 0 {
        bail!("{failed} of the dates failed (see schedule_runs)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use clock::FakeClock;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    /// Records what it was asked to run; fails the first `failures` attempts of each date.
    struct Script {
        calls: Mutex<Vec<(String, NaiveDate)>>,
        failures: usize,
    }

    #[async_trait(?Send)]
    impl Runner for Script {
        async fn run(&self, job: &Job, run_date: NaiveDate) -> Result<usize> {
            let mut calls = self.calls.lock().unwrap();
            calls.push((job.name.clone(), run_date));
            let tries = calls.iter().filter(|c| c.1 == run_date).count();
            if tries <= self.failures { bail!("disk full") } else { Ok(7) }
        }
    }

    fn nightly(name: &str, catch_up: CatchUp) -> Job {
        Job {
            name: name.into(),
            work: Work::Ingest { paths: Vec::new(), zone: None, hints: Hints::default() },
            schedule: Schedule::parse("0 2 * * *", Tz::UTC).unwrap(),
            cluster: Some("c1".into()),
            catch_up,
            days_back: 1,
        }
    }

    fn policy() -> Policy {
        Policy { retries: 2, backoff: Duration::from_secs(60), max_backoff: Duration::from_secs(3600), parallel: 2 }
    }

    async fn ledger_rows(wh: &Warehouse) -> Vec<String> {
        let sql = "SELECT job, CAST(date AS VARCHAR), trigger, attempt, status, CAST(scheduled_for AS VARCHAR) AS at \
                   FROM schedule_runs ORDER BY started, scheduled_for, job, attempt";
        crate::warehouse::results::query_rows(wh, sql).await
    }

    #[tokio::test]
    async fn downtime_is_caught_up_then_nights_run_on_time_with_retries() {
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let ledger = Ledger::new(wh.clone());
        let script = Script { calls: Mutex::new(Vec::new()), failures: 0 };

        // First life: started on the 1st at noon, runs the night of the 2nd, stops.
        let clock = FakeClock::new(utc("2024-01-01T12:00:00Z"));
        let jobs = [nightly("wb", CatchUp::All), nightly("bb", CatchUp::Latest)];
        run_scheduler(&jobs, &script, &ledger, &clock, &policy(), Some(utc("2024-01-02T12:00:00Z"))).await.unwrap();
        assert_eq!(clock.sleeps(), vec![utc("2024-01-02T02:00:00Z")], "one wake-up, exactly at 02:00");

        // Down for three nights; restarted on the 5th at 09:00, runs until the 6th at noon.
        clock.set(utc("2024-01-05T09:00:00Z"));
        run_scheduler(&jobs, &script, &ledger, &clock, &policy(), Some(utc("2024-01-06T12:00:00Z"))).await.unwrap();
        let calls = script.calls.lock().unwrap().clone();
        let day = |d: u32| NaiveDate::from_ymd_opt(2024, 1, d).unwrap();
        assert_eq!(
            calls,
            vec![
                ("wb".into(), day(1)),
                ("bb".into(), day(1)),
                // `all` catches up the 3rd, 4th and 5th (run dates 2nd, 3rd, 4th); `latest` the 5th only.
                ("wb".into(), day(2)),
                ("wb".into(), day(3)),
                ("wb".into(), day(4)),
                ("bb".into(), day(4)),
                ("wb".into(), day(5)),
                ("bb".into(), day(5)),
            ]
        );
        let ledger = ledger_rows(&wh).await;
        assert_eq!(ledger.len(), 8, "{ledger:#?}");
        assert_eq!(ledger[2], "wb 2024-01-02 catch-up 1 succeeded 2024-01-03T02:00:00Z");
        assert_eq!(ledger[7], "wb 2024-01-05 schedule 1 succeeded 2024-01-06T02:00:00Z");
    }

    /// `load` at 02:00 fails twice and its retries last until 02:03; `wb` at 02:01 fell due
    /// meanwhile and runs then, not the next night.
    #[tokio::test]
    async fn a_job_due_while_another_retries_runs_when_that_one_ends() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(Warehouse::new(dir.path()));
        let clock = FakeClock::new(utc("2024-01-01T12:00:00Z"));
        let wb = Job { schedule: Schedule::parse("1 2 * * *", Tz::UTC).unwrap(), ..nightly("wb", CatchUp::None) };
        let jobs = [nightly("load", CatchUp::None), wb];
        let flaky = Script { calls: Mutex::new(Vec::new()), failures: 2 };
        run_scheduler(&jobs, &flaky, &ledger, &clock, &policy(), Some(utc("2024-01-02T12:00:00Z"))).await.unwrap();
        let calls: Vec<String> = flaky.calls.lock().unwrap().iter().map(|c| c.0.clone()).collect();
        assert_eq!(calls, ["load", "load", "load", "wb"]);
        assert_eq!(clock.now(), utc("2024-01-02T02:03:00Z"), "wb ran at 02:03, with no sleep to another night");
    }

    #[tokio::test]
    async fn failed_attempts_are_retried_with_doubling_backoff_and_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let ledger = Ledger::new(wh.clone());
        let clock = FakeClock::new(utc("2024-01-01T12:00:00Z"));
        let job = nightly("wb", CatchUp::None);

        let flaky = Script { calls: Mutex::new(Vec::new()), failures: 2 };
        run_scheduler(
            std::slice::from_ref(&job),
            &flaky,
            &ledger,
            &clock,
            &policy(),
            Some(utc("2024-01-02T12:00:00Z")),
        )
        .await
        .unwrap();
        assert_eq!(
            clock.sleeps(),
            vec![utc("2024-01-02T02:00:00Z"), utc("2024-01-02T02:01:00Z"), utc("2024-01-02T02:03:00Z")],
            "retries after 60 s, then 120 s"
        );
        let rows = ledger_rows(&wh).await;
        let statuses: Vec<&str> = rows.iter().map(|r| r.split(' ').nth(4).unwrap()).collect();
        assert_eq!(statuses, vec!["retrying", "retrying", "succeeded"], "{rows:#?}");

        // A date that never succeeds is failed for good after the retries, and is not retried
        // by a restart (it was dealt with; `kahuna backfill` reruns it).
        let broken = Script { calls: Mutex::new(Vec::new()), failures: usize::MAX };
        let out = &mut Vec::new();
        let err = backfill(&job, day(10), day(10), false, &broken, &ledger, &clock, &policy(), out).await.unwrap_err();
        assert!(format!("{err:#}").contains("1 of the dates failed"), "{err:#}");
        assert_eq!(broken.calls.lock().unwrap().len(), 3);
        let rows = ledger_rows(&wh).await;
        assert!(rows.last().unwrap().starts_with("wb 2024-01-10 backfill 3 failed"), "{rows:#?}");

        let out = &mut Vec::new();
        backfill(&job, day(7), day(9), true, &broken, &ledger, &clock, &policy(), out).await.unwrap();
        let plan = String::from_utf8_lossy(out).into_owned();
        assert_eq!(plan.lines().count(), 3, "{plan}");
        assert!(
            plan.starts_with("wb for 2024-01-07: window [2024-01-07T00:00:00+00:00, 2024-01-08T00:00:00+00:00)"),
            "{plan}"
        );
        assert_eq!(broken.calls.lock().unwrap().len(), 3, "a dry run runs nothing");
    }

    /// `combined` reads the verdicts the others write, and every query reads what the ingest
    /// writes: at 02:00 they run in that order, however the configuration lists them.
    #[tokio::test]
    async fn jobs_due_together_run_after_those_that_write_what_they_read() {
        let config = "[[jobs]]\nquery = 'combined'\ncron = '0 2 * * *'\n\
                      [[jobs]]\nquery = 'controlflow'\ncron = '0 2 * * *'\n\
                      [[jobs]]\nquery = 'kahuna_wb'\ncron = '0 2 * * *'\n\
                      [[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\n";
        let jobs = toml::from_str::<Config>(config).unwrap().jobs(Path::new(".")).unwrap();
        assert_eq!(Order::of(&jobs).unwrap().stages, vec![2, 1, 1, 0]);
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(Warehouse::new(dir.path()));
        let clock = FakeClock::new(utc("2024-01-01T12:00:00Z"));
        let script = Script { calls: Mutex::new(Vec::new()), failures: 0 };
        run_scheduler(&jobs, &script, &ledger, &clock, &policy(), Some(utc("2024-01-02T12:00:00Z"))).await.unwrap();
        let calls: Vec<String> = script.calls.lock().unwrap().iter().map(|c| c.0.clone()).collect();
        assert_eq!(calls, ["ingest", "controlflow", "kahuna_wb", "combined"]);
    }

    /// Notes when each run starts and ends, and lets the others run in between.
    struct Overlap {
        events: Mutex<Vec<String>>,
    }

    #[async_trait(?Send)]
    impl Runner for Overlap {
        async fn run(&self, job: &Job, _: NaiveDate) -> Result<usize> {
            self.events.lock().unwrap().push(format!("start {}", job.name));
            tokio::task::yield_now().await;
            // controlflow is the long job: it runs until combined, which does not read its
            // table, has ended (or, should that never happen beside it, for a few seconds).
            let waiting = std::time::Instant::now();
            while job.name == "controlflow"
                && waiting.elapsed() < std::time::Duration::from_secs(5)
                && !self.events.lock().unwrap().iter().any(|e| e == "end combined")
            {
                tokio::task::yield_now().await;
            }
            self.events.lock().unwrap().push(format!("end {}", job.name));
            Ok(1)
        }
    }

    /// The three queries after the ingest run two at a time, the ingest alone; `combined`
    /// starts once the two verdicts it reads (kahuna_wb, fetch_failures) are written, beside
    /// controlflow, whose table it does not read. A job starts as soon as either of the two
    /// running ends, not only when the first started does; the ledger rows are all there.
    #[tokio::test]
    async fn queries_due_together_run_two_at_a_time_each_after_what_it_reads() {
        let config = "[[jobs]]\nquery = 'combined'\ncron = '0 2 * * *'\n\
                      [[jobs]]\nquery = 'controlflow'\ncron = '0 2 * * *'\n\
                      [[jobs]]\nquery = 'kahuna_wb'\ncron = '0 2 * * *'\n\
                      [[jobs]]\nquery = 'fetch_failures'\ncron = '0 2 * * *'\n\
                      [[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\n";
        let config = toml::from_str::<Config>(config).unwrap();
        assert_eq!(config.policy().parallel, 2);
        let jobs = config.jobs(Path::new(".")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let ledger = Ledger::new(wh.clone());
        let clock = FakeClock::new(utc("2024-01-01T12:00:00Z"));
        let overlap = Overlap { events: Mutex::new(Vec::new()) };
        run_scheduler(&jobs, &overlap, &ledger, &clock, &config.policy(), Some(utc("2024-01-02T12:00:00Z")))
            .await
            .unwrap();
        let events = overlap.events.lock().unwrap().clone();
        let at = |event: &str| events.iter().position(|e| e == event).unwrap_or_else(|| panic!("{event}: {events:?}"));
        assert_eq!(&events[..4], ["start ingest", "end ingest", "start controlflow", "start kahuna_wb"], "{events:?}");
        assert!(at("start fetch_failures") > at("end kahuna_wb"), "never three at once: {events:?}");
        assert!(at("start fetch_failures") < at("end controlflow"), "beside the long one: {events:?}");
        assert!(at("start combined") > at("end fetch_failures"), "after the verdicts it reads: {events:?}");
        assert!(at("end combined") < at("end controlflow"), "beside what it does not read: {events:?}");
        assert_eq!(events.len(), 10, "{events:?}");
        assert_eq!(ledger_rows(&wh).await.len(), 5);
    }

    fn day(d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(2024, 1, d).unwrap()
    }

    #[test]
    fn config_errors_name_the_job_and_field() {
        let base = Path::new(".");
        let read = |text: &str| toml::from_str::<Config>(text).map_err(anyhow::Error::from).and_then(|c| c.jobs(base));
        let jobs = read("zone = 'Europe/Paris'\n[[jobs]]\nquery = 'kahuna_wb'\ncron = '0 30 2 * * *'\nparams = { threshold = 0.45 }\n")
            .unwrap();
        assert_eq!(jobs[0].name, "kahuna_wb");
        assert_eq!(jobs[0].schedule.zone, chrono_tz::Europe::Paris);
        assert_eq!(jobs[0].catch_up, CatchUp::Latest);
        let Work::Query { params, .. } = &jobs[0].work else { panic!("a query job") };
        assert_eq!(params, &vec![("threshold".to_string(), "0.45".to_string())]);

        for (text, expected) in [
            ("[[jobs]]\nquery = 'kahuna_wb'\ncron = '0 2 * *'\n", "jobs[0]: cron expression `0 2 * *`"),
            ("[[jobs]]\nquery = 'kahuna_wb'\ncron = '0 2 * * *'\nzone = 'Mars/Base'\n", "jobs[0]: zone Mars/Base"),
            (
                "[[jobs]]\nname = 'x'\nquery = 'kahuna_wb'\ncron = '0 2 * * *'\nparams = { treshold = 1 }\n",
                "jobs[0] (x)",
            ),
            ("[[jobs]]\ncron = '0 2 * * *'\n", "a job has either `query` or `ingest`"),
            (
                "[[jobs]]\nquery = 'kahuna_wb'\ncron = '0 2 * * *'\ntz = 'Asia/Tokyo'\n",
                "jobs[0]: `tz` is for ingest jobs",
            ),
            (
                "[[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\ndaemon = 'jobtrack'\n",
                "jobs[0]: --daemon jobtrack: not a daemon",
            ),
            ("[[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\ntz = 'Mars/Base'\n", "jobs[0]: zone Mars/Base"),
        ] {
            let err = format!("{:#}", read(text).unwrap_err());
            assert!(err.contains(expected), "{text}: {err}");
        }
        // An ingest of logs written in local time, by one host whose files are not named after it.
        let jobs = read("[[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\ntz = 'America/Los_Angeles'\nhost = 'r01n07'\ndaemon = 'datanode'\n")
            .unwrap();
        let Work::Ingest { zone, hints, .. } = &jobs[0].work else { panic!("an ingest job") };
        assert_eq!(*zone, Some(chrono_tz::America::Los_Angeles));
        assert_eq!(
            (hints.host.as_deref(), hints.daemon),
            (Some("r01n07"), Some(crate::ingest::discover::Daemon::DataNode))
        );
        let err = format!("{:#}", read("catch_up = 'sometimes'\n").unwrap_err());
        assert!(err.contains("sometimes"), "{err}");
    }
}
