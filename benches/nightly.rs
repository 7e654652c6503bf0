//! The nightly run: `cargo bench --bench nightly` (release build).
//!
//! Simulates one M45-scale day (`kahuna simulate --history m45 --months 0.03285 --seed 7`:
//! millions of log lines from ~400 nodes, job history beside the logs, no sadc), ingests it, then runs
//! every built-in query over it as a scheduled run would: each in a fresh session over tables
//! opened once for the batch (`diagnose::run_on`), its result replacing that run date's
//! (`Record::Replace`). Prints the time to open the warehouse and each query's wall time, the
//! median of `KAHUNA_BENCH_RUNS` rounds (default 5), recorded and, beside it, not recorded (what
//! the query costs without its commit), their sum (the target is 0.5 s
//! after ingest) and the peak resident memory; and, to compare, the sum with each query opening
//! the warehouse itself, as `kahuna diagnose` does, and the batch as `kahuna schedule` runs it:
//! two at a time, each as soon as those whose output it reads have run; then `kahuna report`'s
//! page of the day over the verdicts the batch recorded (the target is 2 s).
//! `KAHUNA_BENCH_WAREHOUSE=DIR` measures an existing warehouse instead of simulating and
//! ingesting one; `KAHUNA_QUERIES=DIR` takes the queries from DIR (as `kahuna diagnose` does),
//! e.g. an older version's, to compare.

mod common;

use std::path::PathBuf;
use std::time::Instant;

use common::{median, peak_rss_mb};

use kahuna::catalog::Snapshot;
use kahuna::diagnose::queries::Query;
use kahuna::diagnose::{self, Record, Request};
use kahuna::report;
use kahuna::schedule::plan::{CatchUp, Schedule};
use kahuna::schedule::{Job, Order, Policy, Work};
use kahuna::simulate::Version;
use kahuna::simulate::history::{HistoryConfig, run_history};
use kahuna::warehouse::Warehouse;

/// In the order a nightly schedule runs them: `combined` reads the verdicts of the others.
const NIGHTLY: [&str; 9] = [
    "controlflow",
    "dataflow",
    "kahuna_wb",
    "salsa_fingerpoint",
    "ganesha_train",
    "ganesha_bb",
    "fetch_failures",
    "peer_correlation",
    "combined",
];

async fn ingest_m45_day(scratch: &std::path::Path) -> PathBuf {
    let logs = scratch.join("m45day");
    let cfg = HistoryConfig {
        months: 0.03285,
        scale: 1.0,
        seed: 7,
        out: logs.clone(),
        version: Version::V018,
        gzip: false,
        logs: true,
        threads: 2,
        progress: false,
        conditions: kahuna::simulate::Conditions::default(),
    };
    run_history(&cfg).expect("simulate one M45 day");
    let warehouse = scratch.join("warehouse");
    let options = kahuna::ingest::IngestOptions {
        paths: vec![logs],
        cluster: "m45".into(),
        warehouse: Warehouse::new(&warehouse),
        zone: None,
        hints: kahuna::ingest::discover::Hints::default(),
        progress: false,
        threads: 2,
        dry_run: false,
    };
    let started = Instant::now();
    let summary = kahuna::ingest::ingest(&options).await.expect("ingest the day");
    let lines: u64 = summary.reports.iter().map(|r| r.lines_read).sum();
    println!("ingested {lines} lines in {:.1} s", started.elapsed().as_secs_f64());
    warehouse
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("KAHUNA_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let scratch = tempfile::tempdir().expect("temp dir");
    let warehouse = match std::env::var_os("KAHUNA_BENCH_WAREHOUSE") {
        Some(dir) => PathBuf::from(dir),
        None => ingest_m45_day(scratch.path()).await,
    };
    let warehouse = Warehouse::new(&warehouse);
    let dir = PathBuf::from(std::env::var_os("KAHUNA_QUERIES").unwrap_or_else(|| "queries".into()));
    let queries: Vec<Query> = NIGHTLY.iter().map(|name| Query::resolve(name, &dir).expect("query")).collect();
    // The batch as `kahuna schedule` runs jobs due together: each after those whose output it
    // reads, `Policy::default().parallel` at a time, each on a task of its own.
    let jobs: Vec<Job> = queries
        .iter()
        .map(|query| Job {
            name: query.name.clone(),
            work: Work::Query { query: query.clone(), params: Vec::new() },
            schedule: Schedule::parse("0 2 * * *", chrono_tz::Tz::UTC).expect("cron"),
            cluster: None,
            catch_up: CatchUp::None,
            days_back: 1,
        })
        .collect();
    let order = Order::of(&jobs).expect("order");
    let mut due: Vec<usize> = (0..jobs.len()).collect();
    due.sort_by_key(|&index| (order.stages[index], index));
    let parallel = Policy::default().parallel;
    let (mut opening, mut seconds, mut unrecorded, mut alone, mut side_by_side) =
        (Vec::new(), vec![Vec::new(); queries.len()], vec![Vec::new(); queries.len()], Vec::new(), Vec::new());
    let (mut reporting, mut page_bytes) = (Vec::new(), 0);
    let page_of_the_day =
        report::Options { cluster: None, from: None, to: None, run: None, queries: dir.clone(), eval: None };
    for _ in 0..rounds {
        let started = Instant::now();
        let snapshot = Snapshot::take(&warehouse).await.expect("open the warehouse");
        opening.push(started.elapsed().as_secs_f64());
        for (record, per_query) in [(Record::Replace, &mut seconds), (Record::Nothing, &mut unrecorded)] {
            for (query, times) in queries.iter().zip(per_query.iter_mut()) {
                let started = Instant::now();
                diagnose::run_on(&snapshot, &Request::new(query.clone()), record).await.expect("query");
                times.push(started.elapsed().as_secs_f64());
            }
        }
        let started = Instant::now();
        for query in &queries {
            diagnose::run(&warehouse, &Request::new(query.clone()), Record::Replace).await.expect("query");
        }
        alone.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let snapshot = Snapshot::take(&warehouse).await.expect("open the warehouse");
        let start = |index: usize| {
            let request = Request::new(queries[index].clone());
            let snapshot = snapshot.clone();
            tokio::spawn(async move { diagnose::run_on(&snapshot, &request, Record::Replace).await })
        };
        order.run(&due, parallel, |_| false, start, |_, outcome| drop(outcome.expect("task").expect("query"))).await;
        side_by_side.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        page_bytes = report::build(&warehouse, &page_of_the_day).await.expect("report").html().len();
        reporting.push(started.elapsed().as_secs_f64());
    }
    println!("{:<20} {:>10} {:>14}", "query", "median s", "not recorded");
    let mut total = median(opening);
    let mut total_unrecorded = total;
    println!("{:<20} {total:>10.3}", "(open the warehouse)");
    for ((name, times), times_unrecorded) in NIGHTLY.iter().zip(seconds).zip(unrecorded) {
        let (m, u) = (median(times), median(times_unrecorded));
        total += m;
        total_unrecorded += u;
        println!("{name:<20} {m:>10.3} {u:>14.3}");
    }
    println!("{:<20} {total:>10.3} {total_unrecorded:>14.3}   (target 0.5)", "all");
    println!("{:<20} {:>10.3}   (each query opening the warehouse itself)", "all, one by one", median(alone));
    println!(
        "{:<20} {:>10.3}   ({parallel} at a time, as `kahuna schedule` runs them)",
        "all, side by side",
        median(side_by_side)
    );
    println!("{:<20} {:>10.3}   (target 2; a page of {} KB)", "report", median(reporting), page_bytes / 1024);
    println!("peak RSS {:.0} MB", peak_rss_mb());
}
