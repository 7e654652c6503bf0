//! The `kahuna` command as an operator uses it: ingest, `sql -c`/`-f`/interactive, optimize.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::{data_dir, scalar};

fn kahuna(warehouse: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kahuna")).arg("--warehouse").arg(warehouse).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn ingest_prints_a_summary_and_sql_answers_in_every_format() {
    let wh = tempfile::tempdir().unwrap();
    let data = data_dir();
    let out = kahuna(wh.path(), &["ingest", data.to_str().unwrap(), "--cluster", "c1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(summary.contains("files: 9 ingested, 0 unchanged, 0 refused, 0 failed"), "{summary}");
    assert!(summary.contains("lines: 52 read = 51 parsed + 0 rejected + 1 skipped"), "{summary}");
    assert!(summary.contains("ReduceCopy                      6"), "{summary}");

    let sql = "SELECT state, count(*) AS n FROM states WHERE cluster = 'c1' AND date = DATE '2008-08-23' AND state LIKE 'Reduce%' GROUP BY state ORDER BY state";
    let csv = kahuna(wh.path(), &["sql", "--format", "csv", "-c", sql]);
    assert_eq!(text(&csv.stdout), "state,n\nReduce,3\nReduceCopy,6\nReduceMergeCopy,1\n");
    let json = kahuna(wh.path(), &["sql", "--format", "json", "-c", sql]);
    assert_eq!(text(&json.stdout).lines().next(), Some(r#"{"state":"Reduce","n":3}"#));
    let parquet = kahuna(wh.path(), &["sql", "--format", "parquet", "-c", sql]);
    assert!(parquet.stdout.starts_with(b"PAR1") && parquet.stdout.ends_with(b"PAR1"));
    assert!(text(&parquet.stderr).contains("3 rows in"), "timed in every format: {}", text(&parquet.stderr));

    // No row: the columns are still said, as a CSV header and a Parquet file of no rows.
    let none = sql.replace("LIKE 'Reduce%'", "= 'NoSuchState'");
    let csv = kahuna(wh.path(), &["sql", "--format", "csv", "-c", &none]);
    assert_eq!(text(&csv.stdout), "state,n\n");
    let parquet = kahuna(wh.path(), &["sql", "--format", "parquet", "-c", &none]);
    let file = wh.path().join("empty.parquet");
    std::fs::write(&file, &parquet.stdout).unwrap();
    let empty =
        datafusion::parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
    let meta = datafusion::parquet::file::reader::FileReader::metadata(&empty).file_metadata().clone();
    assert_eq!((meta.num_rows(), meta.schema_descr().num_columns()), (0, 2));
    // A statement with no result prints nothing, not an empty line or file.
    let viewed =
        kahuna(wh.path(), &["sql", "--format", "csv", "-c", "CREATE VIEW v AS SELECT 1 AS x; SELECT * FROM v"]);
    assert_eq!(text(&viewed.stdout), "x\n1\n", "{}", text(&viewed.stderr));

    // `WHERE date = …` reads the files of that partition only.
    let plan = kahuna(wh.path(), &["sql", "-c", "EXPLAIN SELECT message FROM logs WHERE date = DATE '2008-11-09'"]);
    let plan = text(&plan.stdout);
    assert!(plan.contains("date=2008-11-09/") && !plan.contains("date=2008-08-23/"), "{plan}");

    // A script is read in the sessions' grammar: the generic one would end this list at `cluster`.
    let listed = kahuna(
        wh.path(),
        &["sql", "--format", "csv", "-c", "SELECT DISTINCT host, cluster FROM states WHERE host = 'node1'"],
    );
    assert_eq!(text(&listed.stdout), "host,cluster\nnode1,c1\n", "{}", text(&listed.stderr));

    let missing = kahuna(wh.path(), &["sql", "-c", "SELECT * FROM nosuch"]);
    assert!(!missing.status.success());
    assert!(text(&missing.stderr).contains("nosuch"), "{}", text(&missing.stderr));
}

#[test]
fn the_interactive_shell_lists_tables_and_goes_on_after_errors() {
    let wh = tempfile::tempdir().unwrap();
    kahuna(wh.path(), &["ingest", data_dir().to_str().unwrap()]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_kahuna"))
        .arg("--warehouse")
        .arg(wh.path())
        .arg("sql")
        .env("HOME", wh.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let script = "\\d\nSELECT count(*)\n  AS events FROM logs;\nSELECT nocolumn FROM logs;\nSELECT 40 + 2 AS answer;\n";
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    for table in ["ingests", "logs", "rejects", "states"] {
        assert!(stdout.contains(&format!("| {table}")), "{stdout}");
    }
    assert!(stdout.contains("| 49 "), "the multi-line count: {stdout}");
    assert!(stderr.contains("nocolumn"), "the error names the column: {stderr}");
    assert!(stdout.contains("| 42 "), "the shell went on: {stdout}");
    assert!(stderr.contains("row in"), "statements are timed: {stderr}");
}

#[tokio::test]
async fn optimize_compacts_without_changing_a_row() {
    let wh = tempfile::tempdir().unwrap();
    // Ingest the hosts one folder at a time: several commits, several small files per partition.
    for file in std::fs::read_dir(data_dir()).unwrap().flatten() {
        if file.path().is_file() {
            kahuna(wh.path(), &["ingest", file.path().to_str().unwrap()]);
        }
    }
    let before = scalar(wh.path(), "SELECT count(*) FROM logs").await;
    let out = kahuna(wh.path(), &["optimize", "--retention-hours", "0"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.contains("logs: 6 files compacted into 1"), "{report}");
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM logs").await, before);
    // Events of the six top-level files: 4 + 7 + 2 DataNode lines, and TaskTracker logs of
    // 9 lines with one blank (8), 8 lines with a two-line stack trace (6), and 4.
    assert_eq!(before, "31");
}

/// The README's first command: the simulated CPU hog on r01n04 is indicted in every job, and
/// the whole-window list shows it beside its nine healthy peers.
#[test]
fn the_demo_names_the_hogged_node_beside_its_peers() {
    let wh = tempfile::tempdir().unwrap();
    let out = kahuna(&wh.path().join("warehouse"), &["demo"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("r01n04 (where the hog runs) is indicted in 7 of 7 jobs"), "{stdout}");
    let listed: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("Every host")).skip(1).take(10).collect();
    assert_eq!(listed[0].split_whitespace().collect::<Vec<_>>(), ["r01n04", "score", "1.000", "INDICTED"], "{stdout}");
    assert_eq!(listed.iter().filter(|l| l.ends_with("score 0.000")).count(), 9, "{stdout}");
}

#[test]
fn completions_and_help_cover_every_command() {
    let wh = tempfile::tempdir().unwrap();
    let bash = kahuna(wh.path(), &["completions", "bash"]);
    assert!(bash.status.success(), "{}", text(&bash.stderr));
    let script = text(&bash.stdout);
    assert!(script.contains("complete -F _kahuna"), "{script}");
    for command in
        ["simulate", "ingest", "sql", "optimize", "demo", "diagnose", "eval", "schedule", "backfill", "report"]
    {
        assert!(script.contains(&format!("kahuna,{command})")), "no completion for {command}");
    }
    let help = text(&kahuna(wh.path(), &["simulate", "--help"]).stdout);
    let seed = help.lines().find(|line| line.trim_start().starts_with("--seed <SEED>"));
    assert!(seed.is_some_and(|line| line.contains(" Seed of every random choice")), "{help}");
    let unknown = kahuna(wh.path(), &["completions", "tcsh"]);
    assert!(!unknown.status.success());
}

/// Two ingests of different folders started together into one new warehouse both land whole:
/// the tables then hold what the two run one after the other give.
#[tokio::test]
async fn two_ingests_at_once_both_land_whole() {
    let inputs = tempfile::tempdir().unwrap();
    let (first, second) = (inputs.path().join("first"), inputs.path().join("second"));
    for (dir, seed, host) in [(&first, 21, "node"), (&second, 22, "peer")] {
        std::fs::create_dir(dir).unwrap();
        for path in kahuna::simulate::synthetic::write_cluster_logs(dir, 2, 1 << 20, seed).unwrap() {
            let name = path.file_name().unwrap().to_str().unwrap().replace("-node", &format!("-{host}"));
            std::fs::rename(&path, dir.join(name)).unwrap();
        }
    }
    let content = "SELECT (SELECT count(*) FROM logs) AS logs, (SELECT count(*) FROM states) AS states, \
                   (SELECT count(*) FROM ingests) AS files, (SELECT count(DISTINCT ingest_id) FROM ingests) AS runs";
    let one_after_the_other = tempfile::tempdir().unwrap();
    for dir in [&first, &second] {
        let out = kahuna(one_after_the_other.path(), &["ingest", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let expected = common::rows(one_after_the_other.path(), content).await;
    assert_eq!(expected[0][3], "2");
    for _ in 0..3 {
        let wh = tempfile::tempdir().unwrap();
        let start = |dir: &std::path::Path| {
            Command::new(env!("CARGO_BIN_EXE_kahuna"))
                .arg("--warehouse")
                .arg(wh.path())
                .args(["ingest", dir.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (start(&first), start(&second));
        for child in [a, b] {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
        assert_eq!(common::rows(wh.path(), content).await, expected);
    }
}

/// Runs that each leave a small file (nightly ingests of a few new logs) add up; the ingest
/// that finds a partition with many small files compacts it, every row kept. `--no-compact`
/// leaves them.
#[tokio::test]
async fn an_ingest_compacts_the_small_files_earlier_runs_left() {
    let input = tempfile::tempdir().unwrap();
    let mut logs = Vec::new();
    for host in 0..12 {
        let lines: String = (0..5)
            .map(|i| {
                format!("2008-08-23 17:12:{i:02},000 INFO org.apache.hadoop.mapred.TaskTracker: tick {i} of h{host}\n")
            })
            .collect();
        let log = input.path().join(format!("hadoop-u-tasktracker-h{host}.log"));
        std::fs::write(&log, lines).unwrap();
        logs.push(log.to_str().unwrap().to_string());
    }
    let files = |wh: &std::path::Path| {
        let wh = kahuna::warehouse::Warehouse::new(wh);
        async move { wh.open("logs").await.unwrap().unwrap().get_file_uris().unwrap().count() }
    };
    let (compacted, left) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for log in &logs[..11] {
        for wh in [&compacted, &left] {
            let out = kahuna(wh.path(), &["ingest", log, "--no-compact"]);
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
    }
    assert_eq!(files(left.path()).await, 11, "one small file a run");
    let out = kahuna(left.path(), &["ingest", &logs[11], "--no-compact"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(files(left.path()).await, 12);
    let out = kahuna(compacted.path(), &["ingest", &logs[11]]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("logs: 12 small files compacted into 1"), "{}", text(&out.stdout));
    assert_eq!(files(compacted.path()).await, 1);
    let content = "SELECT count(*), count(DISTINCT host), sum(line), count(DISTINCT ingest_id) FROM logs";
    assert_eq!(common::rows(compacted.path(), content).await, common::rows(left.path(), content).await);
    assert_eq!(common::scalar(compacted.path(), "SELECT count(*) FROM logs").await, "60");
}

/// Logs that each run through the same ten days, read by two threads: each thread writes the
/// first three dates it meets as it goes (a file each), and spills the others; each spilled date
/// is then written once, from both threads' spills. Every line and every state kept.
#[tokio::test]
async fn an_ingest_through_many_days_writes_each_spilled_date_once() {
    let input = tempfile::tempdir().unwrap();
    for host in 0..6 {
        let lines: String = (1..=10)
            .map(|day| {
                let attempt = format!("attempt_200808231712_0001_m_{:06}_0", host * 100 + day);
                let logger = "org.apache.hadoop.mapred.TaskTracker";
                format!(
                    "2008-08-{day:02} 10:00:00,000 INFO {logger}: LaunchTaskAction: {attempt}\n\
                     2008-08-{day:02} 10:00:05,000 INFO {logger}: Task {attempt} is done.\n"
                )
            })
            .collect();
        std::fs::write(input.path().join(format!("hadoop-u-tasktracker-h{host}.log")), lines).unwrap();
    }
    let wh = tempfile::tempdir().unwrap();
    let out = kahuna(wh.path(), &["ingest", input.path().to_str().unwrap(), "--threads", "2", "--no-compact"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for table in ["logs", "states"] {
        let delta = kahuna::warehouse::Warehouse::new(wh.path()).open(table).await.unwrap().unwrap();
        let mut dates: Vec<String> = delta
            .get_file_uris()
            .unwrap()
            .map(|uri| uri.split("date=").nth(1).unwrap().split('/').next().unwrap().to_string())
            .collect();
        dates.sort();
        let files_of = |day: u32| dates.iter().filter(|d| **d == format!("2008-08-{day:02}")).count();
        assert_eq!((1..=3).map(files_of).collect::<Vec<_>>(), [2, 2, 2], "{table}: {dates:?}");
        assert_eq!((4..=10).map(files_of).collect::<Vec<_>>(), [1; 7], "{table}: {dates:?}");
    }
    let content =
        "SELECT (SELECT count(*) FROM logs) AS lines, (SELECT count(*) FROM states WHERE state = 'Map') AS maps,
        (SELECT count(DISTINCT date) FROM states) AS dates,
        (SELECT sum(duration_ms) FROM states WHERE state = 'Map') AS map_ms";
    assert_eq!(common::rows(wh.path(), content).await, [["120", "60", "10", "300000.0"]]);
}
