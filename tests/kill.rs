//! Crashes in the middle of an ingest: no partial data is visible at any point, and the run
//! after them leaves the tables exactly as one uninterrupted run does. The crash hook exists only
//! in builds with the `fault-injection` feature, which the README's test command enables.
#![cfg(feature = "fault-injection")]

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{owned, rows};

const CONTENT: &str = "SELECT (SELECT count(*) FROM logs) AS logs, (SELECT count(*) FROM states) AS states,
    (SELECT count(*) FROM rejects) AS rejects, (SELECT count(*) FROM ingests) AS ingests,
    (SELECT sum(line) FROM logs) AS lines, (SELECT round(sum(duration_ms), 3) FROM states) AS durations";

const NOTHING: [&str; 6] = ["0", "0", "0", "0", "", ""];

/// Commits in a table's log beyond its creation.
fn commits(warehouse: &Path, table: &str) -> usize {
    std::fs::read_dir(warehouse.join(table).join("_delta_log"))
        .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".json")).count())
        .unwrap_or(0)
        .saturating_sub(1)
}

#[tokio::test]
async fn crashed_ingests_leave_nothing_and_the_rerun_completes_them() {
    let input = tempfile::tempdir().unwrap();
    kahuna::simulate::synthetic::write_cluster_logs(input.path(), 4, 4 << 20, 7).unwrap();
    let ingest = |warehouse: &Path| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kahuna"));
        command.arg("--warehouse").arg(warehouse).arg("ingest").arg(input.path()).arg("--cluster").arg("c1");
        command
    };
    let reference = tempfile::tempdir().unwrap();
    assert!(ingest(reference.path()).status().unwrap().success());
    let expected = rows(reference.path(), CONTENT).await;
    assert_ne!(expected[0][0], "0");

    let crashed = tempfile::tempdir().unwrap();
    // SIGKILL once the process has read half as many bytes as the logs hold (its own reads,
    // from /proc): in the middle of reading them, whatever the machine's speed.
    let input_bytes: u64 = walkdir::WalkDir::new(input.path())
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .sum();
    let mut child = ingest(crashed.path()).spawn().unwrap();
    let io = format!("/proc/{}/io", child.id());
    let read_so_far = || {
        let text = std::fs::read_to_string(&io).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix("rchar: ")).and_then(|n| n.trim().parse::<u64>().ok()).unwrap_or(0)
    };
    while read_so_far() < input_bytes / 2 {
        assert!(child.try_wait().unwrap().is_none(), "the ingest ended before half its input was read");
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the ingest ended before it could be killed");
    assert_eq!(rows(crashed.path(), CONTENT).await, vec![NOTHING.map(String::from).to_vec()]);

    // Killed between commits: `logs` and `states` hold the rows, yet readers see none of them.
    let status = ingest(crashed.path()).env("KAHUNA_CRASH_AFTER_COMMIT", "states").status().unwrap();
    assert!(!status.success());
    assert_eq!((commits(crashed.path(), "logs"), commits(crashed.path(), "ingests")), (1, 0));
    assert_eq!(rows(crashed.path(), CONTENT).await, vec![NOTHING.map(String::from).to_vec()]);

    assert!(ingest(crashed.path()).status().unwrap().success());
    assert_eq!(rows(crashed.path(), CONTENT).await, expected);
}

/// A run killed between its commits stays invisible after another run of other files lands
/// above it, and the rerun of its files completes it: the tables then read as one
/// uninterrupted ingest of both.
#[tokio::test]
async fn a_killed_run_stays_hidden_below_a_finished_one_until_it_is_run_again() {
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    kahuna::simulate::synthetic::write_cluster_logs(first.path(), 2, 1 << 20, 11).unwrap();
    // The second input's files are other hosts' logs.
    for path in kahuna::simulate::synthetic::write_cluster_logs(second.path(), 2, 1 << 20, 12).unwrap() {
        let name = path.file_name().unwrap().to_str().unwrap().replace("-node", "-peer");
        std::fs::rename(&path, second.path().join(name)).unwrap();
    }
    let ingest = |warehouse: &Path, input: &Path| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kahuna"));
        command.arg("--warehouse").arg(warehouse).arg("ingest").arg(input).arg("--cluster").arg("c1");
        command
    };
    let only_second = tempfile::tempdir().unwrap();
    assert!(ingest(only_second.path(), second.path()).status().unwrap().success());
    let second_alone = rows(only_second.path(), CONTENT).await;
    let both = tempfile::tempdir().unwrap();
    assert!(ingest(both.path(), first.path()).status().unwrap().success());
    assert!(ingest(both.path(), second.path()).status().unwrap().success());
    let expected = rows(both.path(), CONTENT).await;

    let wh = tempfile::tempdir().unwrap();
    let status = ingest(wh.path(), first.path()).env("KAHUNA_CRASH_AFTER_COMMIT", "states").status().unwrap();
    assert!(!status.success());
    assert!(ingest(wh.path(), second.path()).status().unwrap().success());
    assert_eq!((commits(wh.path(), "states"), commits(wh.path(), "ingests")), (2, 1));
    assert_eq!(rows(wh.path(), CONTENT).await, second_alone, "the killed run's rows are hidden");
    assert!(ingest(wh.path(), first.path()).status().unwrap().success());
    assert_eq!(rows(wh.path(), CONTENT).await, expected, "the rerun completes the killed run");
}

/// A run that reads again only some files of a killed run cannot make that run's rows visible
/// (the others' would be half there): it removes them, reads its own files whole, and the
/// killed run's other files are read by the run that looks at them next.
#[tokio::test]
async fn a_rerun_of_some_of_a_killed_runs_files_reads_them_and_drops_the_rest() {
    let input = tempfile::tempdir().unwrap();
    let files = kahuna::simulate::synthetic::write_cluster_logs(input.path(), 2, 1 << 20, 13).unwrap();
    let ingest = |warehouse: &Path, inputs: &[&Path]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kahuna"));
        command.arg("--warehouse").arg(warehouse).arg("ingest").args(inputs).arg("--cluster").arg("c1");
        command
    };
    let (one, other) = (files[0].as_path(), files[2].as_path());
    let only_one = tempfile::tempdir().unwrap();
    assert!(ingest(only_one.path(), &[one]).status().unwrap().success());
    let one_alone = rows(only_one.path(), CONTENT).await;
    assert!(ingest(only_one.path(), &[input.path()]).status().unwrap().success());
    let all = rows(only_one.path(), CONTENT).await;

    let wh = tempfile::tempdir().unwrap();
    let status = ingest(wh.path(), &[input.path()]).env("KAHUNA_CRASH_AFTER_COMMIT", "states").status().unwrap();
    assert!(!status.success());
    let rerun = ingest(wh.path(), &[one]).output().unwrap();
    assert!(rerun.status.success());
    assert!(String::from_utf8_lossy(&rerun.stderr).contains("was killed having read 4 files; this run reads 1"));
    assert_eq!(rows(wh.path(), CONTENT).await, one_alone, "the file read again, whole, and nothing of the others");
    // Killed once more, after its first commit: the run of every file completes it.
    let status = ingest(wh.path(), &[other]).env("KAHUNA_CRASH_AFTER_COMMIT", "logs").status().unwrap();
    assert!(!status.success());
    assert_eq!(rows(wh.path(), CONTENT).await, one_alone);
    assert!(ingest(wh.path(), &[input.path()]).status().unwrap().success());
    assert_eq!(rows(wh.path(), CONTENT).await, all, "every file once");
}

/// The same for `sar_records`, whose rows carry no run: the killed run's files are left out.
#[tokio::test]
async fn a_killed_runs_sysstat_files_stay_hidden_below_a_finished_run() {
    let sysstat = common::package_dir().join("data/sysstat");
    let ingest = |warehouse: &Path, file: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kahuna"));
        command.arg("--warehouse").arg(warehouse).arg("ingest").arg(sysstat.join(file)).arg("--cluster").arg("c1");
        command
    };
    let records = "SELECT host, count(*) FROM sar_records GROUP BY host ORDER BY host";
    let wh = tempfile::tempdir().unwrap();
    let status =
        ingest(wh.path(), "node1.sadf-d.csv").env("KAHUNA_CRASH_AFTER_COMMIT", "sar_records").status().unwrap();
    assert!(!status.success());
    assert!(ingest(wh.path(), "node2.sadf-d.csv").status().unwrap().success());
    let hosts: Vec<String> = rows(wh.path(), records).await.into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(hosts, ["node2"], "node1's records are the killed run's");
    assert!(ingest(wh.path(), "node1.sadf-d.csv").status().unwrap().success());
    let hosts: Vec<String> = rows(wh.path(), records).await.into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(hosts, ["node1", "node2"]);
}

/// A run that ends a task begun before it rewrites the `states` file holding the task's
/// unterminated row, with the other rows of that file. Killed after that commit and abandoned
/// by a run of its other file, the file it removed comes back: the earlier run's rows stay.
#[tokio::test]
async fn an_abandoned_run_gives_back_the_states_files_it_rewrote() {
    let input = tempfile::tempdir().unwrap();
    let (h1, h2) = (input.path().join("hadoop-u-tasktracker-h1.log"), input.path().join("hadoop-u-tasktracker-h2.log"));
    let task = |i: u32| format!("attempt_200808231712_0001_m_00000{i}_0");
    let launch =
        |at: &str, i: u32| format!("2008-08-23 17:12:{at},000 INFO a.TaskTracker: LaunchTaskAction: {}\n", task(i));
    let done = |at: &str, i: u32| format!("2008-08-23 17:12:{at},000 INFO a.TaskTracker: Task {} is done.\n", task(i));
    std::fs::write(&h1, [launch("01", 1), launch("02", 2), done("05", 2)].concat()).unwrap();
    std::fs::write(&h2, [launch("01", 5), done("04", 5)].concat()).unwrap();
    let ingest = |warehouse: &Path, input: &Path| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kahuna"));
        command.arg("--warehouse").arg(warehouse).arg("ingest").arg(input).arg("--cluster").arg("c1");
        command
    };
    let [reference, wh, wh2] = [(); 3].map(|_| tempfile::tempdir().unwrap());
    for warehouse in [reference.path(), wh.path(), wh2.path()] {
        assert!(ingest(warehouse, &h1).status().unwrap().success());
    }
    std::fs::OpenOptions::new().append(true).open(&h1).unwrap().write_all(done("09", 1).as_bytes()).unwrap();
    assert!(ingest(reference.path(), input.path()).status().unwrap().success());
    let states = "SELECT substr(task_id, 34, 1), start_line, end_line, duration_ms FROM states ORDER BY task_id";
    let expected = owned(&[["1", "1", "4", "8000.0"], ["2", "2", "3", "3000.0"], ["5", "1", "2", "3000.0"]]);
    assert_eq!(rows(reference.path(), states).await, expected);

    let status = ingest(wh.path(), input.path()).env("KAHUNA_CRASH_AFTER_COMMIT", "states").status().unwrap();
    assert!(!status.success());
    assert!(ingest(wh.path(), &h2).status().unwrap().success());
    let before_h1_again = owned(&[["1", "1", "", ""], ["2", "2", "3", "3000.0"], ["5", "1", "2", "3000.0"]]);
    assert_eq!(rows(wh.path(), states).await, before_h1_again, "task 2's row, in the file the killed run rewrote");
    assert!(ingest(wh.path(), input.path()).status().unwrap().success());
    assert_eq!(rows(wh.path(), states).await, expected);
    assert_eq!(rows(wh.path(), CONTENT).await, rows(reference.path(), CONTENT).await);

    // Abandoned by a run of the rewritten file's own log: the file given back is rewritten in
    // that same commit, so it is neither given back nor removed, and task 1 is one row.
    let status = ingest(wh2.path(), input.path()).env("KAHUNA_CRASH_AFTER_COMMIT", "states").status().unwrap();
    assert!(!status.success());
    assert!(ingest(wh2.path(), &h1).status().unwrap().success());
    assert_eq!(rows(wh2.path(), states).await, expected[..2]);
    assert!(ingest(wh2.path(), input.path()).status().unwrap().success());
    assert_eq!(rows(wh2.path(), CONTENT).await, rows(reference.path(), CONTENT).await);
}
