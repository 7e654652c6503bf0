//! The diagnoses end to end: TaskTracker logs of five hosts, one of them three times slower,
//! ingested, diagnosed by `kahuna diagnose` and `kahuna backfill`, and recorded; and every
//! diagnosis on small simulated clusters (logs, sadc and job history), fault-free and with a
//! CPU hog, each query once.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{diagnose, owned, rows, scalar, write_jobs};

fn kahuna(warehouse: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kahuna")).arg("--warehouse").arg(warehouse).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const HOSTS: [&str; 5] = ["node1", "node2", "node3", "node4", "node5"];
const SLOW: &str = "node3";

/// Ten Maps per host, one after the other, of 9, 9.5, 10, 10.5 and 11 s (twice), on every
/// host alike, except on the slow host, where each takes three times as long.
fn write_logs(dir: &Path) {
    write_jobs(dir, &HOSTS, &[&[SLOW]]);
}

/// Under `--memory-limit` a diagnosis gives the verdict it gives without one; under a limit too
/// small for an operator that cannot spill it fails and says which ran out, recording nothing.
#[tokio::test]
async fn a_memory_limit_keeps_the_verdict_or_fails_saying_what_ran_out() {
    let logs = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    write_logs(logs.path());
    let out = kahuna(wh.path(), &["ingest", logs.path().to_str().unwrap(), "--cluster", "c1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let verdict = |limit: &[&str]| {
        let out =
            kahuna(wh.path(), &[&["diagnose", "kahuna_wb", "--dry-run", "--param", "states=Map"], limit].concat());
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let (ok, unbounded, stderr) = verdict(&[]);
    assert!(ok && unbounded.contains("kahuna_wb: 1 of 5 hosts indicted."), "{unbounded}{stderr}");
    let (ok, bounded, stderr) = verdict(&["--memory-limit", "8M"]);
    assert!(ok, "{stderr}");
    assert_eq!(bounded, unbounded);
    let (ok, _, stderr) = verdict(&["--memory-limit", "1K"]);
    assert!(!ok);
    assert!(stderr.contains("Resources exhausted") && stderr.contains("pool_size: 1024.0 B"), "{stderr}");
    let (ok, _, stderr) = verdict(&["--memory-limit", "lots"]);
    assert!(!ok && stderr.contains("lots: not a size such as 2G, 512M or 1048576"), "{stderr}");
    assert!(!wh.path().join("diagnoses").exists());
}

/// A session's table made by a whole-partition window (which DataFusion computes as one batch
/// per partition) is kept in batches of the session's size: a sort that reads it under a
/// memory limit then sets aside a batch at a time, not a whole partition, and can spill.
#[tokio::test]
async fn a_window_table_is_kept_in_batches_of_the_sessions_size() {
    use datafusion::arrow::array::AsArray as _;
    use datafusion::arrow::datatypes::Int64Type;
    use kahuna::catalog::{Snapshot, execute, parse, plan, session_limited};
    use kahuna::warehouse::Warehouse;

    let wh = tempfile::tempdir().unwrap();
    let snapshot = Snapshot::take(&Warehouse::new(wh.path())).await.unwrap();
    let ctx = session_limited(&snapshot, 256 << 20).unwrap();
    let script = "CREATE TABLE w AS SELECT value AS v, repeat('x', 40) || CAST(value AS VARCHAR) AS s, \
                  count(*) OVER (PARTITION BY value % 7) AS peers FROM range(300000)";
    for statement in parse(script).unwrap() {
        let planned = plan(&ctx, statement).await.unwrap();
        execute(&ctx, planned).await.unwrap().collect().await.unwrap();
    }
    let table = ctx.table_provider("w").await.unwrap();
    let table = table.downcast_ref::<datafusion::catalog::MemTable>().unwrap();
    let mut rows = 0;
    let mut peers = std::collections::BTreeMap::new();
    for partition in &table.batches {
        for batch in partition.read().await.iter() {
            assert!(batch.num_rows() <= 8192, "a batch of {} rows", batch.num_rows());
            rows += batch.num_rows();
            let (v, n) = (batch.column(0).as_primitive::<Int64Type>(), batch.column(2).as_primitive::<Int64Type>());
            for row in 0..batch.num_rows() {
                peers.insert(v.value(row) % 7, n.value(row));
            }
        }
    }
    assert_eq!(rows, 300_000);
    // 300,000 = 7 × 42,857 + 1: residue 0 has one value more.
    let expected: std::collections::BTreeMap<i64, i64> =
        (0..7).map(|r| (r, if r == 0 { 42_858 } else { 42_857 })).collect();
    assert_eq!(peers, expected);
}

/// Kahuna-WB's per-host verdict shares each job's blame among the hosts it indicts: node1,
/// alone in the first job, holds half of the window's blame; the three slow hosts of the second
/// job a sixth each (indicted in as many jobs as node1, they were not what stood out).
#[tokio::test]
async fn a_host_indicted_alone_outweighs_hosts_indicted_together() {
    let logs = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    let hosts = ["node1", "node2", "node3", "node4", "node5", "node6", "node7", "node8"];
    write_jobs(logs.path(), &hosts, &[&["node1"], &["node2", "node3", "node4"]]);
    let out = kahuna(wh.path(), &["ingest", logs.path().to_str().unwrap(), "--cluster", "c1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    diagnose(wh.path(), &["kahuna_wb", "--cluster", "c1", "--param", "states=Map"]);
    let per_host = rows(
        wh.path(),
        "SELECT host, round(score, 4), indicted FROM diagnoses WHERE subject = 'host' AND score > 0 ORDER BY host",
    )
    .await;
    let expected = [
        ["node1", "0.5", "true"],
        ["node2", "0.1667", "false"],
        ["node3", "0.1667", "false"],
        ["node4", "0.1667", "false"],
    ];
    assert_eq!(per_host, expected.map(|r| r.map(String::from).to_vec()).to_vec());
}

/// `hung_tasks` on TaskTracker logs written here, five hosts and three jobs of one Map each,
/// reporting progress every 3 s. Job 1: node2's attempt reports at 3, 6 and 9 s, then nothing
/// until it is killed at 60 s (silent 51 s); node4's reports leave a 29 s gap. Job 2: three of
/// the four go silent alike, the job's code, not a node. Job 3: node3's attempt is still running,
/// silent since 203 s, when the others end at 260 s; a window ending at 205 s cuts it short.
/// node5's TaskTracker logs no reports at all: its silences say nothing, it is not judged. In
/// job 1 node1 also runs a reduce whose reports pause for 40 s while a copy is in flight.
#[tokio::test]
async fn hung_tasks_indicts_the_attempt_that_went_silent_not_a_job_slow_to_report() {
    let logs = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    let start = chrono::NaiveDate::from_ymd_opt(2008, 8, 23).unwrap().and_hms_opt(17, 0, 0).unwrap();
    let stamp = |s: i64| (start + chrono::Duration::seconds(s)).format("%Y-%m-%d %H:%M:%S,000").to_string();
    let line = |s: i64, msg: &str| format!("{} INFO org.apache.hadoop.mapred.TaskTracker: {msg}\n", stamp(s));
    for (h, host) in ["node1", "node2", "node3", "node4", "node5"].iter().enumerate() {
        let mut log = String::new();
        for job in 1..=3 {
            let attempt = format!("attempt_200808231700_000{job}_m_00000{h}_0");
            let begin = (job - 1) * 100;
            let reports: Vec<i64> = match (job, *host) {
                (1, "node2") | (2, "node1" | "node2" | "node3") => vec![3, 6, 9],
                (1, "node4") => vec![3, 32, 57],
                (3, "node3") => vec![3],
                (_, "node5") => vec![],
                _ => (1..20).map(|i| i * 3).collect(),
            };
            log.push_str(&line(begin, &format!("LaunchTaskAction: {attempt}")));
            for r in &reports {
                let progress =
                    format!("{attempt} {:.2}% hdfs://master:9000/in/part-0000{h}:0+67108864", *r as f64 / 60.0);
                log.push_str(&line(begin + r, &progress));
            }
            match (job, *host) {
                (3, "node3") => {}
                (1, "node2") => {
                    log.push_str(&line(begin + 60, &format!("Received KillTaskAction for task: {attempt}")))
                }
                _ => log.push_str(&line(begin + 60, &format!("Task {attempt} is done."))),
            }
        }
        if *host == "node1" {
            // A reduce whose reports pause for 40 s while a copy is in flight: waiting on it.
            let reduce = "attempt_200808231700_0001_r_000000_0";
            log.push_str(&line(0, &format!("LaunchTaskAction: {reduce}")));
            for r in [3, 6, 51, 54, 57] {
                log.push_str(&line(r, &format!("{reduce} 0.1% reduce > copy (1 of 5 at 0.10 MB/s) >")));
            }
            log.push_str(&line(60, &format!("Task {reduce} is done.")));
            let child = logs.path().join(host).join("userlogs").join(reduce);
            std::fs::create_dir_all(&child).unwrap();
            let copy = |s: i64, what: &str| {
                format!(
                    "{} INFO org.apache.hadoop.mapred.ReduceTask: {reduce} {what} attempt_200808231700_0001_m_000001_0 output from node2.\n",
                    stamp(s)
                )
            };
            std::fs::write(child.join("syslog"), copy(8, "Copying") + &copy(48, "done copying")).unwrap();
        }
        std::fs::write(logs.path().join(format!("hadoop-hadoop-tasktracker-{host}.log")), log).unwrap();
    }
    let out = kahuna(wh.path(), &["ingest", logs.path().to_str().unwrap(), "--cluster", "c1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let copies = "SELECT host, task_id, CAST(duration_ms AS BIGINT) FROM states WHERE state = 'ReduceCopy'";
    assert_eq!(rows(wh.path(), copies).await, owned(&[["node1", "attempt_200808231700_0001_r_000000_0", "40000"]]));
    let verdict = |window: &str| {
        format!(
            "SELECT coalesce(job_id, '-'), host, subject, round(score, 4), CAST(indicted AS VARCHAR), detail \
             FROM diagnoses WHERE query = 'hung_tasks' AND {window} AND (indicted OR subject = 'hang') \
             ORDER BY job_id NULLS FIRST, host"
        )
    };
    diagnose(wh.path(), &["hung_tasks", "--cluster", "c1"]);
    let all = rows(wh.path(), &verdict("window_to IS NULL")).await;
    let brief: Vec<[&str; 5]> = all.iter().map(|r| [&*r[0], &*r[1], &*r[2], &*r[3], &*r[4]]).collect();
    assert_eq!(
        brief,
        [
            ["-", "node2", "host", "1.7", "true"],
            ["-", "node3", "host", "1.9", "true"],
            ["job_200808231700_0001", "node2", "hang", "1.7", "true"],
            ["job_200808231700_0002", "node1", "hang", "1.7", "false"],
            ["job_200808231700_0002", "node2", "hang", "1.7", "false"],
            ["job_200808231700_0002", "node3", "hang", "1.7", "false"],
            ["job_200808231700_0003", "node3", "hang", "1.9", "true"],
        ],
        "{all:?}"
    );
    let detail: serde_json::Value = serde_json::from_str(&all[2][5]).unwrap();
    assert_eq!(
        (detail["silence_s"].as_f64(), detail["reports"].as_f64(), detail["hosts"].as_f64()),
        (Some(51.0), Some(3.0), Some(4.0))
    );
    let detail: serde_json::Value = serde_json::from_str(&all[3][5]).unwrap();
    assert_eq!(detail["silent_hosts"].as_f64(), Some(3.0));
    let node5 = "SELECT count(*) FROM diagnoses WHERE query = 'hung_tasks' AND host = 'node5'";
    assert_eq!(scalar(wh.path(), node5).await, "0");
    // A window past the data: the running attempt is silent until the logs end, not the window.
    diagnose(wh.path(), &["hung_tasks", "--cluster", "c1", "--to", "2008-08-24"]);
    let past = rows(wh.path(), &verdict("window_to = TIMESTAMP '2008-08-24 00:00:00'")).await;
    assert_eq!(past.iter().map(|r| &r[..5]).collect::<Vec<_>>(), all.iter().map(|r| &r[..5]).collect::<Vec<_>>());
    diagnose(wh.path(), &["hung_tasks", "--cluster", "c1", "--to", "2008-08-23 17:03:25"]);
    let cut = rows(wh.path(), &verdict("window_to = TIMESTAMP '2008-08-23 17:03:25'")).await;
    let indicted: Vec<&str> = cut.iter().filter(|r| r[4] == "true").map(|r| &*r[1]).collect();
    assert_eq!(indicted, ["node2", "node2"], "{cut:?}");
}

#[tokio::test]
async fn kahuna_wb_indicts_the_slow_host_and_reruns_replace_their_partition() {
    let logs = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    write_logs(logs.path());
    let out = kahuna(wh.path(), &["ingest", logs.path().to_str().unwrap(), "--cluster", "c1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = kahuna(wh.path(), &["diagnose", "kahuna_wb", "--cluster", "c1", "--param", "states=Map"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("kahuna_wb: 1 of 5 hosts indicted."), "{stdout}");
    assert!(stdout.contains("INDICTED node3 (c1, host): score 1.000"), "{stdout}");
    assert!(stdout.contains("INDICTED node3 (c1, job job_200808231712_0001, Map): score 1.000"), "{stdout}");
    assert!(stderr.contains("10 rows, recorded in diagnoses"), "{stderr}");

    // The slow host differs from all four peers; each healthy host only from the slow one. Per
    // host, node3 is indicted in the one job that indicts anyone.
    let verdict = rows(wh.path(), "SELECT host, subject, score, indicted FROM diagnoses ORDER BY subject, host").await;
    let verdict: Vec<String> = verdict.iter().map(|r| r.join(" ")).collect();
    assert_eq!(
        verdict,
        vec![
            "node1 Map 0.25 false",
            "node2 Map 0.25 false",
            "node3 Map 1.0 true",
            "node4 Map 0.25 false",
            "node5 Map 0.25 false",
            "node1 host 0.0 false",
            "node2 host 0.0 false",
            "node3 host 1.0 true",
            "node4 host 0.0 false",
            "node5 host 0.0 false",
        ]
    );
    let params = scalar(wh.path(), "SELECT DISTINCT parameters FROM diagnoses").await;
    assert!(params.contains(r#""states":"Map""#) && params.contains(r#""threshold":"0.5""#), "{params}");

    // A backfill of the day, twice: the day's partition is replaced, not doubled, and the
    // ledger has both runs.
    for _ in 0..2 {
        let out = kahuna(
            wh.path(),
            &[
                "backfill",
                "kahuna_wb",
                "--from",
                "2008-08-23",
                "--to",
                "2008-08-23",
                "--cluster",
                "c1",
                "--param",
                "states=Map",
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("kahuna_wb for 2008-08-23: 10 rows"), "{}", text(&out.stdout));
    }
    let per_date = rows(
        wh.path(),
        "SELECT CAST(date AS VARCHAR) AS day, count(*), count(DISTINCT run_id), sum(CASE WHEN indicted THEN 1 ELSE 0 END) \
         FROM diagnoses GROUP BY day ORDER BY day",
    )
    .await;
    let today = chrono::Utc::now().date_naive().to_string();
    assert_eq!(
        per_date,
        vec![
            vec!["2008-08-23".to_string(), "10".into(), "1".into(), "2".into()],
            vec![today, "10".into(), "1".into(), "2".into()]
        ]
    );
    // The same query with other parameters (another scheduled job) keeps the first one's rows.
    let out = kahuna(
        wh.path(),
        &[
            "backfill",
            "kahuna_wb",
            "--from",
            "2008-08-23",
            "--to",
            "2008-08-23",
            "--cluster",
            "c1",
            "--param",
            "states=Map",
            "--param",
            "threshold=0.6",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let day = "SELECT count(*), count(DISTINCT run_id), count(DISTINCT parameters) FROM diagnoses WHERE date = DATE '2008-08-23'";
    assert_eq!(rows(wh.path(), day).await, vec![vec!["20", "2", "2"]]);
    let ledger =
        rows(wh.path(), "SELECT job, CAST(date AS VARCHAR), trigger, attempt, status, rows FROM schedule_runs").await;
    assert_eq!(ledger.len(), 3);
    assert_eq!(ledger[0], vec!["kahuna_wb", "2008-08-23", "backfill", "1", "succeeded", "10"]);

    // A bad parameter is refused with its name, and nothing is written.
    let out = kahuna(wh.path(), &["diagnose", "kahuna_wb", "--param", "threshold=high"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("parameter threshold: expected a number, got `high`"), "{}", text(&out.stderr));
}

/// Runs of one batch share the tables they opened (`diagnose::run_on`), and each reads what the
/// ones before it wrote: the table a run writes is opened again by the next session.
#[tokio::test]
async fn a_batch_of_runs_reads_what_its_earlier_runs_wrote() {
    use kahuna::catalog::{Snapshot, session_over};
    use kahuna::diagnose::queries::Query;
    use kahuna::diagnose::{Record, Request, run, run_on};
    use kahuna::warehouse::Warehouse;

    let logs = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    write_logs(logs.path());
    common::ingest_into(vec![logs.path().to_path_buf()], wh.path(), None).await;
    let warehouse = Warehouse::new(wh.path());
    let mut request = Request::new(Query::resolve("kahuna_wb", Path::new("queries")).unwrap());
    request.params = vec![("states".into(), "Map".into())];
    // Five hosts' Map verdicts and their per-host verdicts (the test above).
    let verdict_rows = 10;
    run(&warehouse, &request, Record::Append).await.unwrap();
    let snapshot = Snapshot::take(&warehouse).await.unwrap();
    let count = || async {
        let ctx = session_over(&snapshot).unwrap();
        let batches = ctx.sql("SELECT count(*) FROM diagnoses").await.unwrap().collect().await.unwrap();
        datafusion::arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string()
    };
    assert!(count().await.contains(&format!("| {verdict_rows} ")), "{}", count().await);
    run_on(&snapshot, &request, Record::Append).await.unwrap();
    assert!(count().await.contains(&format!("| {} ", 2 * verdict_rows)), "{}", count().await);
}

#[tokio::test]
async fn edge_tables_are_saved_per_run_date() {
    let wh = tempfile::tempdir().unwrap();
    let out = kahuna(wh.path(), &["ingest", common::data_dir().to_str().unwrap(), "--cluster", "c1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for _ in 0..2 {
        let out = kahuna(wh.path(), &["diagnose", "controlflow", "--cluster", "c1", "--from", "2008-08-23"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let edges = rows(wh.path(), "SELECT src, dst, copies FROM controlflow_edges ORDER BY copies DESC, src, dst").await;
    let total: i64 = edges.iter().map(|r| r[2].parse::<i64>().unwrap()).sum();
    assert_eq!(total, 6, "the six ReduceCopy states of data/, once although run twice: {edges:?}");
    // Each row says which run wrote it, with what parameters: the second run's.
    let provenance = "SELECT count(DISTINCT run_id), min(run_id), min(parameters) FROM controlflow_edges";
    let provenance = rows(wh.path(), provenance).await;
    assert_eq!(provenance[0][0], "1");
    assert!(provenance[0][1].contains("-controlflow-"), "{provenance:?}");
    assert!(
        provenance[0][2].contains(r#""cluster":"c1""#) && provenance[0][2].contains(r#""from":"2008-08-23T00:00:00"#),
        "{provenance:?}"
    );

    // The block-operation graph: its three statements (DataNode addresses, the named block
    // operations, the edges) each run, and data/'s nine block operations (all dates) are each
    // one edge's block, also when run twice.
    for _ in 0..2 {
        let out = kahuna(wh.path(), &["diagnose", "dataflow", "--cluster", "c1"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let states = "SELECT count(*) FROM states WHERE daemon = 'datanode' AND state IN ('ReadBlock', 'WriteBlock', 'WriteBlock_Replicated')";
    assert_eq!(scalar(wh.path(), states).await, "9");
    assert_eq!(
        scalar(wh.path(), "SELECT CAST(sum(blocks) AS VARCHAR) FROM dataflow_edges WHERE op <> 'mirror'").await,
        "9"
    );
    // Every node of data/ by name, node2 too, which only served blocks (its address comes
    // from `10.0.0.2:50010 Served block`), read by hand from data/logs/*datanode*: node1 read
    // and wrote a block locally, node2 served one to itself and one to node3 (10.0.0.3),
    // node3 served one locally (clienttrace), node1 wrote to node3 (clienttrace) and node2 to
    // node1. The merged Loghub-style file names its hosts by address.
    let edges =
        rows(wh.path(), "SELECT src, dst, op, CAST(blocks AS VARCHAR) FROM dataflow_edges ORDER BY op, src, dst").await;
    let edges: Vec<String> = edges.iter().map(|r| r.join(" ")).collect();
    assert_eq!(
        edges,
        [
            "node1 node1 read 1",
            "node2 node2 read 1",
            "node2 node3 read 1",
            "node3 node3 read 1",
            "10.250.10.6 10.250.10.6 write 1",
            "10.250.19.102 10.250.19.102 write 1",
            "node1 node1 write 1",
            "node1 node3 write 1",
            "node2 node1 write 1",
        ]
    );

    // An empty window of the same run date: no edges, which replace that date's edges
    // (DataFusion gives an empty sorted result as no batch at all; the plan's schema still says
    // what to write).
    let out = kahuna(
        wh.path(),
        &["diagnose", "controlflow", "--cluster", "c1", "--from", "2008-08-23", "--to", "2008-08-23"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM controlflow_edges").await, "0");
}

/// `kahuna simulate` of Sort on 8 nodes for 12 minutes, with sadc and job history.
fn simulate(out: &Path, fault: Option<&str>, seed: u64) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kahuna"));
    cmd.args(["simulate", "--nodes", "8", "--workload", "sort", "--duration", "12m", "--threads", "2"]);
    cmd.arg("--seed").arg(seed.to_string()).arg("--out").arg(out);
    if let Some(fault) = fault {
        cmd.args(["--fault", fault]);
    }
    let sim = cmd.output().unwrap();
    assert!(sim.status.success(), "{}", text(&sim.stderr));
}

fn ingest(wh: &Path, cluster: &str, paths: &[PathBuf]) {
    let out = kahuna(
        wh,
        &[
            &["ingest"],
            paths.iter().map(|p| p.to_str().unwrap()).collect::<Vec<_>>().as_slice(),
            &["--cluster", cluster],
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_folder(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// Hosts a query indicted over the whole window (rows without a job) in its newest run.
async fn indicted(wh: &Path, query: &str, cluster: &str) -> Vec<String> {
    let sql = format!(
        "SELECT DISTINCT host FROM diagnoses WHERE query = '{query}' AND cluster = '{cluster}' AND indicted AND job_id IS NULL \
         AND run_id = (SELECT max(run_id) FROM diagnoses WHERE query = '{query}' AND cluster = '{cluster}') ORDER BY host"
    );
    rows(wh, &sql).await.into_iter().map(|r| r[0].clone()).collect()
}

/// Every diagnosis on simulated runs: a fault-free one (Ganesha's training window) and one with
/// a CPU hog on r01n03, ingested with their job history (Maps twice: TaskTracker and history),
/// without it, and the history alone.
#[tokio::test]
async fn every_diagnosis_finds_a_simulated_cpu_hog_and_counts_each_map_once() {
    let runs = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    let (clean, hog) = (runs.path().join("clean"), runs.path().join("hog"));
    simulate(&clean, None, 2);
    simulate(&hog, Some("CPUHog@r01n03"), 1);
    let parts = |run: &Path, names: &[&str]| names.iter().map(|n| run.join(n)).collect::<Vec<_>>();
    ingest(wh.path(), "clean", &parts(&clean, &["logs", "sadc", "history"]));
    ingest(wh.path(), "hog", &parts(&hog, &["logs", "sadc", "history"]));
    ingest(wh.path(), "hog-logs", &parts(&hog, &["logs", "sadc"]));
    ingest(wh.path(), "hog-history", &parts(&hog, &["history"]));
    // The job history twice: Hadoop also writes it to the job's output folder (`_logs/history`).
    let output_copy = runs.path().join("hog-output").join("_logs").join("history");
    copy_folder(&hog.join("history"), &output_copy);
    ingest(wh.path(), "hog-history-twice", &[hog.join("history"), output_copy]);
    let maps = rows(
        wh.path(),
        "SELECT daemon, count(*) FROM states WHERE cluster = 'hog' AND state = 'Map' GROUP BY daemon ORDER BY daemon",
    )
    .await;
    assert_eq!(maps.len(), 2, "the hog's Maps are there twice, from the TaskTrackers and the history: {maps:?}");
    assert_eq!(maps[0][1], maps[1][1]);

    // Ganesha: profiles of the fault-free run, then the hog's vectors against them.
    diagnose(wh.path(), &["ganesha_train", "--cluster", "clean"]);
    let model = rows(wh.path(), "SELECT k, samples, hosts FROM ganesha_models WHERE cluster = 'clean'").await;
    assert_eq!(model, vec![vec!["7".to_string(), (8 * 12 * 60).to_string(), "8".into()]]);
    // With `train_clusters`, `cluster` only names the model (`eval --calibrate` keeps one a size).
    diagnose(wh.path(), &["ganesha_train", "--cluster", "profiles", "--param", "train_clusters=clean"]);
    let named = rows(wh.path(), "SELECT k, samples, hosts FROM ganesha_models WHERE cluster = 'profiles'").await;
    assert_eq!(named, model);
    diagnose(wh.path(), &["ganesha_bb", "--cluster", "hog", "--param", "model_cluster=clean"]);
    assert_eq!(indicted(wh.path(), "ganesha_bb", "hog").await, ["r01n03"]);
    diagnose(wh.path(), &["ganesha_bb", "--cluster", "clean", "--param", "model_cluster=clean"]);
    assert!(indicted(wh.path(), "ganesha_bb", "clean").await.is_empty());

    // Kahuna-WB: the hog is the per-host verdict; with the history beside the logs the rows
    // are those of the logs alone, and the history alone gives the same Map comparisons.
    let stdout = diagnose(wh.path(), &["kahuna_wb", "--cluster", "hog"]);
    assert_eq!(indicted(wh.path(), "kahuna_wb", "hog").await, ["r01n03"], "{stdout}");
    diagnose(wh.path(), &["kahuna_wb", "--cluster", "hog-logs"]);
    diagnose(wh.path(), &["kahuna_wb", "--cluster", "hog-history", "--param", "states=Map,Reduce"]);
    diagnose(wh.path(), &["kahuna_wb", "--cluster", "clean"]);
    assert!(indicted(wh.path(), "kahuna_wb", "clean").await.is_empty());
    // (Medians are t-digest estimates, which depend on the order rows arrive in: compare the
    // verdicts and the number of states, not the last digits.)
    let states_of = |rows: Vec<Vec<String>>| -> Vec<(String, String, String, String, i64)> {
        rows.into_iter()
            .map(|r| {
                let detail: serde_json::Value = serde_json::from_str(&r[4]).unwrap();
                (r[0].clone(), r[1].clone(), r[2].clone(), r[3].clone(), detail["states"].as_f64().unwrap() as i64)
            })
            .collect()
    };
    let per_job = |cluster: &str, states: &str| {
        format!(
            "SELECT job_id, host, subject, CAST(indicted AS VARCHAR), detail FROM diagnoses \
             WHERE query = 'kahuna_wb' AND cluster = '{cluster}' AND job_id IS NOT NULL AND subject IN ({states}) \
             ORDER BY job_id, host, subject"
        )
    };
    let all = "'Map','Reduce','ReduceCopy','ReduceMergeCopy','ReadBlock','WriteBlock'";
    let both = states_of(rows(wh.path(), &per_job("hog", all)).await);
    let logs = states_of(rows(wh.path(), &per_job("hog-logs", all)).await);
    assert!(both.len() > 50 && both == logs, "{} rows with the history, {} without", both.len(), logs.len());
    // (The history's times are its own, a few milliseconds off the logs': compare the states.)
    let counts = |rows: Vec<(String, String, String, String, i64)>| {
        rows.into_iter().map(|(j, h, s, _, n)| (j, h, s, n)).collect::<Vec<_>>()
    };
    let from_logs = counts(states_of(rows(wh.path(), &per_job("hog", "'Map','Reduce'")).await));
    let from_history = counts(states_of(rows(wh.path(), &per_job("hog-history", "'Map','Reduce'")).await));
    assert!(!from_logs.is_empty() && from_logs == from_history, "{from_logs:?}\n{from_history:?}");

    // The Pearson study: each Map once, whichever sources were ingested.
    for cluster in ["hog", "hog-logs", "hog-history", "hog-history-twice"] {
        diagnose(wh.path(), &["peer_correlation", "--cluster", cluster]);
    }
    let study = |cluster: &str| {
        format!(
            "SELECT job_id, outcome, hosts, similar_hosts, round(mean_abs_r, 6) FROM peer_correlation_jobs WHERE cluster = '{cluster}' ORDER BY job_id"
        )
    };
    let (both, logs) = (rows(wh.path(), &study("hog")).await, rows(wh.path(), &study("hog-logs")).await);
    assert!(!both.is_empty(), "a row per job");
    let without_outcome = |rows: &[Vec<String>]| rows.iter().map(|r| [&r[..1], &r[2..]].concat()).collect::<Vec<_>>();
    assert_eq!(without_outcome(&both), without_outcome(&logs));
    assert!(both.iter().all(|r| r[2] == "8"), "every job ran Maps on all 8 hosts: {both:?}");
    let history = rows(wh.path(), &study("hog-history")).await;
    assert_eq!(
        history.iter().map(|r| r[2].clone()).collect::<Vec<_>>(),
        both.iter().map(|r| r[2].clone()).collect::<Vec<_>>()
    );
    // Each job once, with its one outcome; each Map attempt once.
    assert_eq!(rows(wh.path(), &study("hog-history-twice")).await, history);

    // A hog slows its tasks; it does not silence them, nor does a fault-free run.
    for cluster in ["clean", "hog"] {
        let stdout = diagnose(wh.path(), &["hung_tasks", "--cluster", cluster]);
        assert!(stdout.contains("hung_tasks: no host indicted among 8 compared"), "{stdout}");
    }
    // SALSA, then the combined verdict from the newest runs of all of them.
    diagnose(wh.path(), &["salsa_fingerpoint", "--cluster", "hog"]);
    assert_eq!(indicted(wh.path(), "salsa_fingerpoint", "hog").await, ["r01n03"]);
    let stdout = diagnose(wh.path(), &["combined", "--cluster", "hog"]);
    assert!(stdout.contains("combined: 1 of 8 hosts indicted."), "{stdout}");
    assert_eq!(indicted(wh.path(), "combined", "hog").await, ["r01n03"]);
    // A run over every cluster (one run id for all four) is read for the one cluster asked.
    diagnose(wh.path(), &["kahuna_wb"]);
    let stdout = diagnose(wh.path(), &["combined", "--cluster", "hog"]);
    assert!(stdout.contains("combined: 1 of 8 hosts indicted."), "{stdout}");
}

/// SALSA's data-flow augmentation (§8.3) on 50% packet loss at r01n02: every DataNode that
/// reads or writes a block through r01n02 waits on it, so with a sensitive peer comparison
/// (distance 0.3, 10 alarms) some of its partners' ReadBlock durations stand out for longer than
/// 10 ticks too. r01n02 takes part in every outlier block operation, so the data flow names it
/// and the peer comparison of those states indicts no one else; with the data flow silenced
/// (`min_outliers` beyond any count) the partners are indicted beside it.
#[tokio::test]
async fn salsa_data_flow_points_at_the_lossy_node_not_its_partners() {
    let run = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    simulate(run.path(), Some("PacketLoss50@r01n02"), 1);
    ingest(wh.path(), "loss", &[run.path().join("logs")]);
    let sensitive = ["salsa_fingerpoint", "--cluster", "loss", "--param", "threshold_p=0.3", "--param", "alarms=10"];
    diagnose(wh.path(), &sensitive);
    assert_eq!(indicted(wh.path(), "salsa_fingerpoint", "loss").await, ["r01n02"]);
    let flow = "SELECT host, subject FROM diagnoses WHERE query = 'salsa_fingerpoint' AND indicted AND subject LIKE '%/dataflow' ORDER BY subject";
    assert_eq!(
        rows(wh.path(), flow).await,
        owned(&[["r01n02", "ReadBlock/dataflow"], ["r01n02", "WriteBlock/dataflow"]])
    );
    let alarmed = "SELECT count(*) FROM diagnoses WHERE query = 'salsa_fingerpoint' AND subject = 'ReadBlock' AND host <> 'r01n02' AND score >= 1";
    let partners: u32 = scalar(wh.path(), alarmed).await.parse().unwrap();
    assert!(partners >= 2, "{partners} partners whose own comparison alone would indict them");

    diagnose(wh.path(), &[&sensitive[..], &["--param", "min_outliers=1000000"]].concat());
    let without_flow = indicted(wh.path(), "salsa_fingerpoint", "loss").await;
    assert!(without_flow.len() >= 3 && without_flow.contains(&"r01n02".to_string()), "{without_flow:?}");
}

/// `fetch_failures` on simulated runs (8 nodes, logs only). HADOOP-1152 leaves a reduce that
/// failed three times to fetch one map output every other reduce fetched; 50% packet loss fails
/// transfers between the lossy node and each of its peers, which fail with it alone, some of
/// them twice: those a reduce reports.
#[tokio::test]
async fn failed_fetches_indict_the_stuck_reduce_and_the_lossy_node() {
    let runs = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    for (cluster, fault) in [("hang", "HANG-1152@r01n05"), ("loss", "PacketLoss50@r01n02"), ("clean", "")] {
        let run = runs.path().join(cluster);
        simulate(&run, Some(fault).filter(|f| !f.is_empty()), 3);
        ingest(wh.path(), cluster, &[run.join("logs")]);
        diagnose(wh.path(), &["fetch_failures", "--cluster", cluster]);
        diagnose(wh.path(), &["hung_tasks", "--cluster", cluster]);
    }
    // The stuck reduce is silent too; the lossy node's partners wait on it, reporting as they do.
    assert_eq!(indicted(wh.path(), "hung_tasks", "hang").await, ["r01n05"]);
    assert!(indicted(wh.path(), "hung_tasks", "loss").await.is_empty());
    assert!(indicted(wh.path(), "hung_tasks", "clean").await.is_empty());
    let verdict = |cluster: &str| {
        format!(
            "SELECT host, CAST(indicted AS VARCHAR), round(score, 4), detail FROM diagnoses \
             WHERE query = 'fetch_failures' AND cluster = '{cluster}' AND (indicted OR detail NOT LIKE '%\"failed\":0.0%') ORDER BY host"
        )
    };
    // The hang: its three failed tries of one output from one map node, the only failed copies.
    // Both ends failed with one partner of seven; the map node served that output to the others.
    let hang = rows(wh.path(), &verdict("hang")).await;
    assert_eq!(hang.len(), 2, "{hang:?}");
    let stuck = hang.iter().find(|r| r[0] == "r01n05").expect("the stuck reduce's node");
    assert_eq!((stuck[1].as_str(), stuck[2].as_str()), ("true", "0.1429"), "{hang:?}");
    let detail: serde_json::Value = serde_json::from_str(&stuck[3]).unwrap();
    assert_eq!(
        (detail["stuck"].as_f64(), detail["failed"].as_f64(), detail["partners"].as_f64()),
        (Some(1.0), Some(3.0), Some(1.0))
    );
    let server = hang.iter().find(|r| r[0] != "r01n05").unwrap();
    assert_eq!(server[1], "false", "{hang:?}");
    // Stuck at its own end, not the failing end of transfers with its peers: `combined` asks
    // the other hosts for no more votes.
    let subjects =
        "SELECT DISTINCT subject FROM diagnoses WHERE query = 'fetch_failures' AND cluster = 'hang' AND indicted";
    assert_eq!(rows(wh.path(), subjects).await, [["shuffle"]]);
    // The loss: in one job the lossy node's reported outputs join it to more than half of its 7
    // peers, and each of its partners to the lossy node alone.
    let loss = rows(wh.path(), &verdict("loss")).await;
    assert!(loss.len() >= 5, "{loss:?}");
    for row in &loss {
        let score: f64 = row[2].parse().unwrap();
        if row[0] == "r01n02" {
            assert!(row[1] == "true" && score > 0.5, "{loss:?}");
        } else {
            assert_eq!((row[1].as_str(), row[2].as_str()), ("false", "0.1429"), "{loss:?}");
        }
    }
    assert!(rows(wh.path(), &verdict("clean")).await.is_empty());
    // Either rule names the failing end alone: a share of the job's peers (what a small cluster
    // shows), or a share of the job's reported outputs (what a large one shows, where a lossy
    // node meets only some of its peers in a job). Neither: no failing end.
    for (partner_share, output_share, lossy) in
        [("1", "0.5", vec!["r01n02"]), ("0.5", "1", vec!["r01n02"]), ("1", "1", vec![])]
    {
        let (partners, outputs) = (format!("partner_share={partner_share}"), format!("output_share={output_share}"));
        diagnose(wh.path(), &["fetch_failures", "--cluster", "loss", "--param", &partners, "--param", &outputs]);
        let sql = format!(
            "SELECT host FROM diagnoses WHERE query = 'fetch_failures' AND cluster = 'loss' AND indicted \
             AND subject = 'shuffle/lossy' AND parameters LIKE '%\"output_share\":\"{output_share}\",\"partner_share\":\"{partner_share}\"%'"
        );
        let named: Vec<String> = rows(wh.path(), &sql).await.into_iter().map(|r| r[0].clone()).collect();
        assert_eq!(named, lossy, "partner_share {partner_share}, output_share {output_share}");
    }
}

/// `combined` on verdicts written by hand: block-operation indictments (Kahuna-WB's window rows,
/// SALSA's ReadBlock and WriteBlock) vote only beside Ganesha; the jobs, Maps, failed fetches
/// and silent attempts vote alone. In cluster `l` failed fetches name h6 the failing end of the
/// transfers: the others' block operations are then no vote, and they need a vote more, but for
/// a host whose own attempt went silent.
#[tokio::test]
async fn block_operations_alone_do_not_indict_in_the_combined_verdict() {
    use kahuna::diagnose::results::{self, DIAGNOSES, Diagnosis, RunInfo};
    use kahuna::warehouse::Warehouse;
    let wh = tempfile::tempdir().unwrap();
    let warehouse = Warehouse::new(wh.path());
    let row = |cluster: &str, host: &str, subject: &str, score: f64, indicted: bool| Diagnosis {
        cluster: cluster.into(),
        host: Some(host.into()),
        subject: Some(subject.into()),
        score: Some(score),
        indicted,
        ..Diagnosis::default()
    };
    let verdicts = |c: &str, h6: &str| {
        [
            // h1: indicted in most of its jobs; h2: only over the window's WriteBlock states.
            (
                "kahuna_wb",
                vec![
                    row(c, "h1", "host", 1.0, true),
                    row(c, "h2", "WriteBlock", 1.0, true),
                    row(c, "h2", "host", 0.0, true),
                ],
            ),
            ("salsa_fingerpoint", vec![row(c, "h3", "ReadBlock", 1.0, true), row(c, "h4", "Map", 1.0, true)]),
            ("ganesha_bb", vec![row(c, "h3", "cpu_user_pct", 1.0, true), row(c, "h5", "cpu_user_pct", 0.0, false)]),
            ("fetch_failures", vec![row(c, "h6", h6, 0.1, true), row(c, "h5", "shuffle", 0.1, false)]),
            ("hung_tasks", vec![row(c, "h7", "host", 1.5, true)]),
        ]
    };
    let runs = verdicts("c", "shuffle").into_iter().zip(verdicts("l", "shuffle/lossy"));
    for (query, rows) in runs.map(|((query, c), (_, l))| (query, [c, l].concat())) {
        let info = RunInfo {
            run_id: format!("run-{query}"),
            query: query.into(),
            query_hash: String::new(),
            window_from: None,
            window_to: None,
            parameters: "{}".into(),
            run_date: chrono::NaiveDate::from_ymd_opt(2008, 8, 23).unwrap(),
            ran_at: chrono::Utc::now(),
        };
        results::write(&warehouse, DIAGNOSES, results::diagnoses_batch(&info, &rows).unwrap(), None).await.unwrap();
    }
    // h3: Ganesha (1) and its ReadBlock comparison beside it (1); h2's WriteBlock alone is
    // nothing; h6's failed fetches and h7's silent attempt vote alone. With h6 the failing end,
    // h3 has Ganesha's vote alone, one short of the two it then needs; h7's own silence needs no
    // more.
    for (cluster, min_votes, expected) in [
        ("c", "1", vec![("h1", "1"), ("h3", "2"), ("h4", "1"), ("h6", "1"), ("h7", "1")]),
        ("c", "2", vec![("h3", "2")]),
        ("l", "1", vec![("h6", "1"), ("h7", "1")]),
    ] {
        diagnose(wh.path(), &["combined", "--cluster", cluster, "--param", &format!("min_votes={min_votes}")]);
        let sql = format!(
            "SELECT host, CAST(score AS BIGINT) FROM diagnoses WHERE query = 'combined' AND indicted \
             AND cluster = '{cluster}' AND parameters LIKE '%\"min_votes\":\"{min_votes}\"%' ORDER BY host"
        );
        let expected: Vec<Vec<String>> = expected.iter().map(|(h, s)| vec![h.to_string(), s.to_string()]).collect();
        assert_eq!(rows(wh.path(), &sql).await, expected, "{cluster}, min_votes = {min_votes}");
    }
}
