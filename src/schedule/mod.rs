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

mod backfill;
pub mod clock;
mod config;
mod ledger;
mod order;
pub mod plan;
mod runner;

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{Result, bail};
use chrono::{DateTime, NaiveDate, Utc};

pub use config::{Config, Job, JobConfig, Policy, Work, parse_zone};
pub use ledger::Ledger;
pub use order::Order;
pub use runner::{Runner, WarehouseRunner};

use crate::diagnose::results::LedgerEntry;
use clock::Clock;
/// What every run of one scheduler shares: what runs the jobs, where attempts are recorded, the
/// clock, and the retry policy.
#[derive(Clone, Copy)]
pub struct Scheduler<'a> {
    pub runner: &'a dyn Runner,
    pub ledger: &'a Ledger,
    pub clock: &'a dyn Clock,
    pub policy: &'a Policy,
}

impl<'a> Scheduler<'a> {
    pub fn new(runner: &'a dyn Runner, ledger: &'a Ledger, clock: &'a dyn Clock, policy: &'a Policy) -> Self {
        Scheduler { runner, ledger, clock, policy }
    }

    /// Runs `job` for `run_date` with retries, recording every attempt; the last error if all fail.
    pub async fn run_with_retries(
        &self,
        job: &Job,
        run_date: NaiveDate,
        scheduled_for: Option<DateTime<Utc>>,
        trigger: &str,
    ) -> Result<usize> {
        let Scheduler { runner, ledger, clock, policy } = *self;
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
    pub async fn run(&self, jobs: &[Job], until: Option<DateTime<Utc>>) -> Result<()> {
        let Scheduler { runner, ledger, clock, .. } = *self;
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
                        let outcome = self.run_with_retries(job, run_date, Some(occurrence), trigger).await;
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
                order.run(&indices, self.policy.parallel, alone, run, ended).await;
            }
            runner.batch_done();
            // Each job's next occurrence after the last it dealt with, not after now: one that fell
            // due while others ran (a long ingest, retries) runs at once, not a day late.
            let next_of =
                |job: &Job| job.schedule.next_after(plan::live_after(handled.get(&job.name).copied(), started));
            let Some(next) = jobs.iter().filter_map(next_of).min() else {
                bail!("no job has a next occurrence");
            };
            if until.is_some_and(|u| next > u) {
                return Ok(());
            }
            clock.sleep_until(next).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Mutex;
    use std::time::Duration;

    use anyhow::bail;
    use async_trait::async_trait;
    use chrono_tz::Tz;

    use super::*;
    use crate::ingest::discover::Hints;
    use crate::warehouse::Warehouse;
    use clock::FakeClock;
    use plan::{CatchUp, Schedule};

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
        crate::diagnose::results::query_rows(wh, sql).await
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
        Scheduler::new(&script, &ledger, &clock, &policy())
            .run(&jobs, Some(utc("2024-01-02T12:00:00Z")))
            .await
            .unwrap();
        assert_eq!(clock.sleeps(), vec![utc("2024-01-02T02:00:00Z")], "one wake-up, exactly at 02:00");

        // Down for three nights; restarted on the 5th at 09:00, runs until the 6th at noon.
        clock.set(utc("2024-01-05T09:00:00Z"));
        Scheduler::new(&script, &ledger, &clock, &policy())
            .run(&jobs, Some(utc("2024-01-06T12:00:00Z")))
            .await
            .unwrap();
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
        Scheduler::new(&flaky, &ledger, &clock, &policy()).run(&jobs, Some(utc("2024-01-02T12:00:00Z"))).await.unwrap();
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
        Scheduler::new(&flaky, &ledger, &clock, &policy())
            .run(std::slice::from_ref(&job), Some(utc("2024-01-02T12:00:00Z")))
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
        let err = Scheduler::new(&broken, &ledger, &clock, &policy())
            .backfill(&job, day(10), day(10), false, out)
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("1 of the dates failed"), "{err:#}");
        assert_eq!(broken.calls.lock().unwrap().len(), 3);
        let rows = ledger_rows(&wh).await;
        assert!(rows.last().unwrap().starts_with("wb 2024-01-10 backfill 3 failed"), "{rows:#?}");

        let out = &mut Vec::new();
        Scheduler::new(&broken, &ledger, &clock, &policy()).backfill(&job, day(7), day(9), true, out).await.unwrap();
        let plan = String::from_utf8_lossy(out).into_owned();
        assert_eq!(plan.lines().count(), 3, "{plan}");
        assert!(
            plan.starts_with("wb for 2024-01-07: window [2024-01-07T00:00:00+00:00, 2024-01-08T00:00:00+00:00)"),
            "{plan}"
        );
        assert_eq!(broken.calls.lock().unwrap().len(), 3, "a dry run runs nothing");
    }

    /// `combined` reads the verdicts the others write, every query reads what the ingest
    /// writes, and the report draws from all of them: at 02:00 they run in that order, however
    /// the configuration lists them.
    #[tokio::test]
    async fn jobs_due_together_run_after_those_that_write_what_they_read() {
        let config = "[[jobs]]\nreport = 'reports/{date}.html'\ncron = '0 2 * * *'\n\
                      [[jobs]]\nquery = 'combined'\ncron = '0 2 * * *'\n\
                      [[jobs]]\nquery = 'controlflow'\ncron = '0 2 * * *'\n\
                      [[jobs]]\nquery = 'kahuna_wb'\ncron = '0 2 * * *'\n\
                      [[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\n";
        let jobs = toml::from_str::<Config>(config).unwrap().jobs(Path::new(".")).unwrap();
        assert_eq!(Order::of(&jobs).unwrap().stages, vec![3, 2, 1, 1, 0]);
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(Warehouse::new(dir.path()));
        let clock = FakeClock::new(utc("2024-01-01T12:00:00Z"));
        let script = Script { calls: Mutex::new(Vec::new()), failures: 0 };
        Scheduler::new(&script, &ledger, &clock, &policy())
            .run(&jobs, Some(utc("2024-01-02T12:00:00Z")))
            .await
            .unwrap();
        let calls: Vec<String> = script.calls.lock().unwrap().iter().map(|c| c.0.clone()).collect();
        assert_eq!(calls, ["ingest", "controlflow", "kahuna_wb", "combined", "report"]);
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
        Scheduler::new(&overlap, &ledger, &clock, &config.policy())
            .run(&jobs, Some(utc("2024-01-02T12:00:00Z")))
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
}
