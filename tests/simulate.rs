//! `kahuna simulate` end to end: the same seed writes the same bytes, everything it writes
//! ingests without a reject, and the injected faults show in the ingested `states` as the
//! papers saw them. Runs are small (a few nodes, minutes of simulated time) to stay fast.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{diagnose, every_ten_seconds, ingest_into, rows, scalar};
use kahuna::simulate::cluster::STRAGGLER_MAX;
use kahuna::simulate::faults::FaultSpec;
use kahuna::simulate::history::{HistoryConfig, run_history};
use kahuna::simulate::workload::Workload;
use kahuna::simulate::{Conditions, Config, DEFAULT_EPOCH_MS, DataNodeLog, Version, run};

fn config(out: &Path, nodes: usize, workload: Workload, fault: Option<&str>, minutes: f64, version: Version) -> Config {
    Config {
        nodes,
        workload,
        fault: fault.map(|f| f.parse::<FaultSpec>().expect("fault")),
        duration_s: minutes * 60.0,
        seed: 7,
        out: out.to_path_buf(),
        version,
        gzip: false,
        sadc: true,
        threads: 2,
        progress: false,
        epoch_ms: DEFAULT_EPOCH_MS,
        conditions: Conditions::default(),
    }
}

/// Every file under `dir`, by path relative to it, with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| (e.path().strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(e.path()).unwrap()))
        .collect()
}

#[test]
fn the_same_seed_writes_the_same_bytes() {
    for (version, gzip) in [(Version::V018, false), (Version::V020, true), (Version::V2, false)] {
        let (a, b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut cfg = config(a.path(), 5, Workload::Gridmix, Some("PacketLoss50@r01n02:1m"), 6.0, version);
        cfg.gzip = gzip;
        run(&cfg).unwrap();
        cfg.out = b.path().to_path_buf();
        cfg.threads = 3;
        run(&cfg).unwrap();
        let (first, second) = (tree(a.path()), tree(b.path()));
        assert!(first.len() > 30, "{} files", first.len());
        assert_eq!(first.keys().collect::<Vec<_>>(), second.keys().collect::<Vec<_>>());
        for (path, bytes) in &first {
            assert!(bytes == &second[path], "{} differs", path.display());
        }
        cfg.out = c.path().to_path_buf();
        cfg.seed = 8;
        run(&cfg).unwrap();
        assert_ne!(tree(c.path()).get(Path::new("truth.json")), first.get(Path::new("truth.json")));
    }
}

/// A 4-node Sort run of `minutes` under the default conditions, and the same run under the
/// conditions `change` makes: their folders, in that order.
fn under_default_and(minutes: f64, change: impl FnOnce(&mut Conditions)) -> (tempfile::TempDir, tempfile::TempDir) {
    let (default, changed) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut cfg = config(default.path(), 4, Workload::Sort, None, minutes, Version::V018);
    run(&cfg).unwrap();
    cfg.out = changed.path().to_path_buf();
    change(&mut cfg.conditions);
    run(&cfg).unwrap();
    (default, changed)
}

/// With clocks off by up to 3 s, each host's log states start its own offset later or earlier
/// than on one clock (the same for all of its states, no two hosts alike), its sadc capture
/// keeps its rows, and the job history, stamped by the master, is the same bytes.
#[tokio::test]
async fn a_skewed_clock_shifts_its_hosts_logs_and_capture_not_the_history() {
    let (alike, skewed) = under_default_and(6.0, |c| c.clock_skew_ms = 3000);
    let (one_clock, four_clocks) = (tree(alike.path()), tree(skewed.path()));
    let history = |tree: &BTreeMap<PathBuf, Vec<u8>>| {
        tree.iter()
            .filter(|(path, _)| path.starts_with("history"))
            .map(|(p, b)| (p.clone(), b.clone()))
            .collect::<Vec<_>>()
    };
    assert!(!history(&one_clock).is_empty());
    assert_eq!(history(&one_clock), history(&four_clocks));

    let mut shifts = Vec::new();
    for (dir, wh) in [(&alike, tempfile::tempdir().unwrap()), (&skewed, tempfile::tempdir().unwrap())] {
        ingest_into(vec![dir.path().to_path_buf()], wh.path(), None).await;
        let sql = "SELECT host, count(*), count(DISTINCT start_ts), \
                          CAST(date_part('epoch', min(start_ts)) * 1000 AS BIGINT), \
                          CAST(date_part('epoch', max(start_ts)) * 1000 AS BIGINT) \
                   FROM states WHERE daemon = 'tasktracker' GROUP BY host ORDER BY host";
        let samples = "SELECT host, count(*) FROM sar_records GROUP BY host ORDER BY host";
        shifts.push((rows(wh.path(), sql).await, rows(wh.path(), samples).await));
    }
    let ((one, samples_one), (four, samples_four)) = (&shifts[0], &shifts[1]);
    assert_eq!(samples_one, samples_four, "a second of capture for every second, whatever the clock");
    let ms = |text: &str| text.parse::<i64>().unwrap();
    let mut offsets = Vec::new();
    for (a, b) in one.iter().zip(four) {
        assert_eq!((&a[0], &a[1], &a[2]), (&b[0], &b[1], &b[2]), "the same host, states and start times");
        let offset = ms(&b[3]) - ms(&a[3]);
        assert_eq!(ms(&b[4]) - ms(&a[4]), offset, "{}: one offset for all of its states", a[0]);
        assert!(offset.abs() <= 3000, "{}: {offset} ms", a[0]);
        offsets.push(offset);
    }
    offsets.sort();
    offsets.dedup();
    assert_eq!(offsets.len(), 4, "{offsets:?}");
}

/// 0.18's DataNodes at INFO write no DEBUG line and everything else as at DEBUG: the block
/// operations are all there, but a read's start, which only the count of open connections
/// shows, is not.
#[tokio::test]
async fn an_info_datanode_shows_its_block_reads_without_their_starts() {
    let (debug, info) = under_default_and(6.0, |c| c.datanode_log = DataNodeLog::Info);
    let (at_debug, at_info) = (tree(debug.path()), tree(info.path()));
    assert_eq!(at_debug.keys().collect::<Vec<_>>(), at_info.keys().collect::<Vec<_>>());
    let mut left_out = 0;
    // truth.json counts the lines written, so it differs by as many.
    for (path, bytes) in at_debug.iter().filter(|(path, _)| !path.ends_with("truth.json")) {
        let text = String::from_utf8_lossy(bytes);
        let kept: String = text.lines().filter(|l| !l.contains(" DEBUG ")).map(|l| format!("{l}\n")).collect();
        assert!(
            kept == String::from_utf8_lossy(&at_info[path]),
            "{}: more than the DEBUG lines left out",
            path.display()
        );
        left_out += text.lines().count() - kept.lines().count();
        if path.to_string_lossy().contains("datanode") {
            assert!(text.contains(" DEBUG "), "{}", path.display());
        }
    }
    let datanode_lines = |tree: &BTreeMap<PathBuf, Vec<u8>>| {
        let truth: serde_json::Value = serde_json::from_slice(&tree[Path::new("truth.json")]).unwrap();
        truth["lines"]["datanode"].as_u64().unwrap() as usize
    };
    assert_eq!(datanode_lines(&at_debug) - datanode_lines(&at_info), left_out);
    let sql = "SELECT count(*), count(start_ts) FROM states WHERE state = 'ReadBlock'";
    let mut counts = Vec::new();
    for dir in [&debug, &info] {
        let wh = tempfile::tempdir().unwrap();
        ingest_into(vec![dir.path().to_path_buf()], wh.path(), None).await;
        counts.push(rows(wh.path(), sql).await);
    }
    let (reads, started) = (&counts[0][0][0], &counts[0][0][1]);
    assert!(reads.parse::<u64>().unwrap() > 0 && started == reads, "{counts:?}");
    assert_eq!(counts[1], vec![vec![reads.clone(), "0".to_string()]]);
}

/// With the noise of what runs beside Hadoop, each node's capture shows more CPU than Hadoop's
/// alone in every second, and during cron's first 30 s of the hour a core more on every node;
/// the logs and the job history are the same bytes.
#[test]
fn sysstat_noise_adds_to_the_capture_and_nothing_else() {
    let (quiet, noisy) = under_default_and(10.0, |c| c.sysstat_noise = true);
    let (without, with) = (tree(quiet.path()), tree(noisy.path()));
    assert_eq!(without.keys().collect::<Vec<_>>(), with.keys().collect::<Vec<_>>());
    for (path, bytes) in without.iter().filter(|(path, _)| !path.starts_with("sadc")) {
        assert!(bytes == &with[path], "{} differs", path.display());
    }
    // Per host, each second's %user of the CPU rows (`…;-1;%user;…`).
    let user = |bytes: &[u8]| -> Vec<f64> {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let rows = text.lines().map(|l| l.split(';').collect::<Vec<_>>());
        rows.filter(|f| f.get(3) == Some(&"-1")).map(|f| f[4].parse().unwrap()).collect()
    };
    let mut more = 0;
    for (path, bytes) in without.iter().filter(|(path, _)| path.starts_with("sadc")) {
        let (alone, beside) = (user(bytes), user(&with[path]));
        assert_eq!(alone.len(), 600, "{}", path.display());
        assert_eq!(alone.len(), beside.len());
        assert!(alone.iter().zip(&beside).all(|(a, b)| b >= a), "{}", path.display());
        // A core of four is 22.5 points of %user (90% of its time is user time).
        assert!(alone[..30].iter().zip(&beside[..30]).all(|(a, b)| b - a > 15.0), "{}: cron", path.display());
        more += alone[30..].iter().zip(&beside[30..]).filter(|(a, b)| b > a).count();
    }
    assert!(more > 0, "the daemons' bursts show after cron");
}

/// A capture every 10 seconds keeps the records of the one-second capture at the seconds
/// ending in 0, their interval 10, and nothing else changes.
#[test]
fn a_sysstat_interval_keeps_every_tenth_record_of_the_same_capture() {
    let (every_second, every_ten) = under_default_and(3.0, |c| c.sysstat_interval_s = 10);
    let (ones, tens) = (tree(every_second.path()), tree(every_ten.path()));
    assert_eq!(ones.keys().collect::<Vec<_>>(), tens.keys().collect::<Vec<_>>());
    let mut kept = 0;
    for (path, bytes) in &ones {
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        if !path.starts_with("sadc") {
            assert!(bytes == &tens[path], "{} differs", path.display());
            continue;
        }
        let expected = every_ten_seconds(&text(bytes));
        let got = text(&tens[path]);
        assert_eq!(got.lines().collect::<Vec<_>>(), expected, "{}", path.display());
        kept += expected.iter().filter(|l| !l.starts_with('#')).count();
    }
    // 4 hosts, 18 records of 3 minutes, 7 rows a record (CPU, task, paging, I/O, queue, eth0, lo).
    assert_eq!(kept, 4 * 18 * 7);
}

#[tokio::test]
async fn every_file_ingests_without_a_reject() {
    for (version, fault) in [
        (Version::V018, "HANG-1036@r01n01"),
        (Version::V020, "HANG-1152@r01n02"),
        (Version::V018, "DiskFull@r01n03"),
        (Version::V2, "HANG-1036@r01n04"),
    ] {
        let out = tempfile::tempdir().unwrap();
        let wh = tempfile::tempdir().unwrap();
        let outcome = run(&config(out.path(), 4, Workload::Sort, Some(fault), 15.0, version)).unwrap();
        let summary = ingest_into(vec![out.path().to_path_buf()], wh.path(), None).await;
        let logs = tree(&out.path().join("logs")).len();
        assert_eq!(summary.total(|r| r.lines_rejected), 0, "{fault}: {:?}", summary.rejects_by_reason());
        assert_eq!(summary.files_with_status("failed"), 0);
        // Log files at least; sadc and job history too where ingestion reads them.
        assert!(summary.files_with_status("ingested") >= logs, "{fault}");
        // Every line written is read, stack traces and start-up banners included.
        let lines: u64 = summary.reports.iter().filter(|r| r.display.contains("/logs/")).map(|r| r.lines_read).sum();
        assert_eq!(lines, outcome.lines.total(), "{fault}");
    }
}

/// The Map, Reduce and ReduceCopy states of a simulated run's logs, job ids as 0.x stamps them.
async fn attempt_states(version: Version, fault: &str) -> Vec<Vec<String>> {
    let out = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    let mut cfg = config(out.path(), 6, Workload::Sort, Some(fault), 10.0, version);
    cfg.sadc = false;
    run(&cfg).unwrap();
    ingest_into(vec![out.path().join("logs")], wh.path(), None).await;
    let sql = "SELECT state, host, task_id, peer_task_id, start_ts, duration_ms, outcome FROM states \
               WHERE state IN ('Map', 'Reduce', 'ReduceCopy') ORDER BY task_id, peer_task_id, state, start_ts";
    let rm_stamp = (DEFAULT_EPOCH_MS - 60_000).to_string();
    let mut states = rows(wh.path(), sql).await;
    for cell in states.iter_mut().flatten() {
        *cell = cell.replace(&rm_stamp, "200808250000");
    }
    if version == Version::V2 {
        // A container runs each attempt, on the attempt's node, from its launch.
        let sql = "SELECT count(*) FROM states c JOIN states a ON c.task_id = \
                   concat('container_', split_part(a.task_id, '_', 2), '_', split_part(a.task_id, '_', 3), '_01_', \
                   lpad(CAST(2 + 2 * (CAST(split_part(a.task_id, '_', 5) AS INT) * 8 + CAST(split_part(a.task_id, '_', 6) AS INT)) \
                   + CASE split_part(a.task_id, '_', 4) WHEN 'r' THEN 1 ELSE 0 END AS VARCHAR), 6, '0')) \
                   AND c.host = a.host AND c.start_ts = a.start_ts \
                   WHERE c.state = 'ContainerRunning' AND a.state IN ('Map', 'Reduce')";
        let attempts = states.iter().filter(|r| r[0] != "ReduceCopy").count();
        assert_eq!(scalar(wh.path(), sql).await, attempts.to_string());
        let containers = "SELECT count(*) FROM states WHERE state = 'ContainerRunning'";
        assert_eq!(scalar(wh.path(), containers).await, attempts.to_string());
    }
    states
}

/// Hadoop 2's logs (application masters' attempt transitions, NodeManagers' containers, reduces'
/// fetcher threads) give, through their own parsers, the very states of the 0.20 run of the
/// same seed (TaskTracker and copier threads): the two releases schedule alike. With a lossy
/// link some fetches fail, and fail alike.
#[tokio::test]
async fn a_hadoop_2_run_gives_the_states_of_the_0_20_run_of_its_seed() {
    let fault = "PacketLoss50@r01n02";
    let (yarn, classic) = (attempt_states(Version::V2, fault).await, attempt_states(Version::V020, fault).await);
    let count = |state: &str, outcome: &str| classic.iter().filter(|r| r[0] == state && r[6] == outcome).count();
    assert!(count("Map", "SUCCEEDED") > 80 && count("Reduce", "SUCCEEDED") > 10, "{}", classic.len());
    assert!(count("ReduceCopy", "FAILED") > 10, "{}", count("ReduceCopy", "FAILED"));
    assert_eq!(yarn.len(), classic.len());
    for (y, c) in yarn.iter().zip(&classic) {
        assert_eq!(y, c);
    }
}

/// A CPU hog on a Hadoop 2 cluster: Kahuna-WB, unchanged, indicts its node, and no other, in
/// the window and in every job it indicts anyone.
#[tokio::test]
async fn kahuna_wb_indicts_the_cpu_hog_of_a_hadoop_2_cluster_and_no_other_node() {
    let out = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    let mut cfg = config(out.path(), 10, Workload::Sort, Some("CPUHog@r01n03"), 10.0, Version::V2);
    cfg.sadc = false;
    run(&cfg).unwrap();
    ingest_into(vec![out.path().join("logs")], wh.path(), None).await;
    let stdout = diagnose(wh.path(), &["kahuna_wb"]);
    assert!(stdout.contains("kahuna_wb: 1 of 10 hosts indicted."), "{stdout}");
    let indicted = rows(wh.path(), "SELECT host, count(*) FROM diagnoses WHERE indicted GROUP BY host").await;
    // The window's verdict and the hog's Maps in each of the 5 jobs that ran them to the end.
    assert_eq!(indicted, vec![vec!["r01n03".to_string(), "6".to_string()]]);
}

/// Mean Map duration (ms) per host.
async fn map_means(wh: &Path) -> BTreeMap<String, f64> {
    let sql = "SELECT host, avg(duration_ms) FROM states WHERE state = 'Map' AND outcome = 'SUCCEEDED' GROUP BY host";
    rows(wh, sql).await.into_iter().map(|r| (r[0].clone(), r[1].parse().unwrap())).collect()
}

#[tokio::test]
async fn a_cpu_hog_slows_its_own_maps_and_only_those() {
    let out = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    run(&config(out.path(), 10, Workload::Sort, Some("CPUHog@r01n03"), 12.0, Version::V018)).unwrap();
    ingest_into(vec![out.path().join("logs")], wh.path(), None).await;
    let mut means = map_means(wh.path()).await;
    let hog = means.remove("r01n03").unwrap();
    assert_eq!(means.len(), 9);
    let (lo, hi) = means.values().fold((f64::MAX, 0f64), |(lo, hi), m| (lo.min(*m), hi.max(*m)));
    // Fault-free peers within 10% of each other (seed 7: 8.6%, from how many reduces each
    // happened to run beside its maps); the hog's node 30% slower than the slowest (seed 7: 57%).
    assert!(hi / lo < 1.10, "peers {lo}..{hi}");
    assert!(hog / hi > 1.3, "hog {hog} vs peers up to {hi}");
    let peer_count = rows(wh.path(), "SELECT count(*) FROM states WHERE state = 'Map' GROUP BY host ORDER BY 1").await;
    assert!(
        peer_count.first().unwrap()[0].parse::<u32>().unwrap() < peer_count.last().unwrap()[0].parse::<u32>().unwrap()
    );
}

/// What truth.json says the injected hang struck: the attempt, and when it stopped.
fn struck(out: &Path) -> (String, i64) {
    let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("truth.json")).unwrap()).unwrap();
    let struck = &truth["faults"][0]["struck"];
    (struck["attempt"].as_str().expect("a struck attempt").to_string(), struck["at_ms"].as_i64().unwrap())
}

/// Simulates `fault` on five nodes sorting (no sadc) and ingests logs and job history.
async fn hang_run(fault: &str, minutes: f64) -> (tempfile::TempDir, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    let mut cfg = config(out.path(), 5, Workload::Sort, Some(fault), minutes, Version::V018);
    cfg.sadc = false;
    run(&cfg).unwrap();
    ingest_into(vec![out.path().to_path_buf()], wh.path(), None).await;
    (out, wh)
}

fn one(rows: Vec<Vec<String>>) -> Vec<String> {
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows.into_iter().next().unwrap()
}

#[tokio::test]
async fn hang_1036_stalls_a_map_until_its_speculative_twin_wins() {
    let (out, wh) = hang_run("HANG-1036@r01n04:1m", 20.0).await;
    let (attempt, _) = struck(out.path());
    // Speculative execution is on, as in 0.18 and 0.20: the hung map (progress stopped 1–4 s
    // in) gets a backup elsewhere once it is a minute old and behind, and the JobTracker kills
    // it when the backup wins, before the 600 s task timeout.
    let hung = one(rows(
        wh.path(),
        &format!(
            "SELECT host, outcome, duration_ms FROM states WHERE daemon = 'tasktracker' AND task_id = '{attempt}'"
        ),
    )
    .await);
    assert_eq!((hung[0].as_str(), hung[1].as_str()), ("r01n04", "KILLED"), "{hung:?}");
    let lived: f64 = hung[2].parse().unwrap();
    assert!((60_000.0..600_000.0).contains(&lived), "{lived}");
    let task = attempt.trim_end_matches("_0");
    let twin = one(rows(
        wh.path(),
        &format!("SELECT task_id, host, outcome FROM states WHERE daemon = 'tasktracker' AND task_id = '{task}_1'"),
    )
    .await);
    assert!(twin[1] != "r01n04" && twin[2] == "SUCCEEDED", "{twin:?}");
    // One hang per run: nothing else on the faulty node failed or hung.
    let unfinished = "SELECT count(*) FROM states WHERE daemon = 'tasktracker' AND state = 'Map' AND host = 'r01n04' AND (outcome IS NULL OR outcome <> 'SUCCEEDED')";
    assert_eq!(scalar(wh.path(), unfinished).await, "1");
    // The job history has it as Hadoop writes it: the twin `_1` SUCCESS (read as SUCCEEDED), the loser KILLED.
    let history = rows(
        wh.path(),
        &format!("SELECT attempt_id, host, status FROM attempts WHERE attempt_id LIKE '{task}_%' ORDER BY attempt_id"),
    )
    .await;
    assert_eq!(
        history,
        vec![
            vec![attempt.clone(), "r01n04".into(), "KILLED".into()],
            vec![twin[0].clone(), twin[1].clone(), "SUCCEEDED".into()]
        ]
    );
    let tasktracker =
        std::fs::read_to_string(out.path().join("logs/r01n04/hadoop-hadoop-tasktracker-r01n04.log")).unwrap();
    assert!(tasktracker.contains(&format!("Received KillTaskAction for task: {attempt}\n")));
}

#[tokio::test]
async fn hang_1152_and_hang_2080_hang_reduces_as_their_bugs_did() {
    // HADOOP-1152: the reduce fetches its last map output, fails to rename it in the in-memory
    // file system, retries and fails again, and never leaves its copy phase.
    let (out, wh) = hang_run("HANG-1152@r01n02", 15.0).await;
    let (attempt, at_1152) = struck(out.path());
    assert!(attempt.contains("_r_"), "{attempt}");
    let copies = |outcome: &str| {
        format!(
            "SELECT count(*), count(DISTINCT peer_task_id) FROM states WHERE state = 'ReduceCopy' AND task_id = '{attempt}' AND outcome = '{outcome}'"
        )
    };
    assert_eq!(one(rows(wh.path(), &copies("FAILED")).await), vec!["3", "1"], "three tries of one output, all failed");
    assert_eq!(one(rows(wh.path(), &copies("SUCCEEDED")).await)[0], "39", "every other of the 40 outputs copied");
    let open_merges = format!(
        "SELECT count(*) FROM states WHERE state = 'ReduceMergeCopy' AND task_id = '{attempt}' AND end_ts IS NULL"
    );
    assert_eq!(scalar(wh.path(), &open_merges).await, "0");
    let syslog = std::fs::read_to_string(out.path().join(format!("logs/r01n02/userlogs/{attempt}/syslog"))).unwrap();
    assert!(syslog.contains("no such file after rename"), "{syslog}");
    let ended = |attempt: &str| {
        format!(
            "SELECT host, outcome FROM states WHERE daemon = 'tasktracker' AND state = 'Reduce' AND task_id = '{attempt}'"
        )
    };
    let hung = one(rows(wh.path(), &ended(&attempt)).await);
    assert!(hung[0] == "r01n02" && hung[1] != "SUCCEEDED", "{hung:?}");

    // HADOOP-2080: the reduce's first in-memory merge (its checksum file's size miscomputed)
    // never completes; the reduce stalls mid-shuffle, its copies all clean.
    let (out, wh) = hang_run("HANG-2080@r01n02", 15.0).await;
    let (attempt, at_2080) = struck(out.path());
    assert!(attempt.contains("_r_"), "{attempt}");
    let copies = |outcome: &str| {
        format!(
            "SELECT count(*) FROM states WHERE state = 'ReduceCopy' AND task_id = '{attempt}' AND outcome = '{outcome}'"
        )
    };
    assert_eq!(scalar(wh.path(), &copies("FAILED")).await, "0");
    let copied: u32 = scalar(wh.path(), &copies("SUCCEEDED")).await.parse().unwrap();
    assert!((10..20).contains(&copied), "stalled at its first merge, after 10 of 40 outputs: {copied}");
    let open_merges = format!(
        "SELECT count(*) FROM states WHERE state = 'ReduceMergeCopy' AND task_id = '{attempt}' AND end_ts IS NULL"
    );
    assert_eq!(scalar(wh.path(), &open_merges).await, "1");
    let hung = one(rows(wh.path(), &ended(&attempt)).await);
    assert!(hung[0] == "r01n02" && hung[1] != "SUCCEEDED", "{hung:?}");
    // Mid-shuffle, well before 1152's end of the copy phase.
    assert!(at_2080 + 30_000 < at_1152, "2080 at {at_2080}, 1152 at {at_1152}");
    // Either way the task was done by another attempt, on another node.
    let task = attempt.trim_end_matches("_0");
    let done = rows(
        wh.path(),
        &format!("SELECT host FROM attempts WHERE attempt_id LIKE '{task}_%' AND status = 'SUCCEEDED'"),
    )
    .await;
    assert!(done.len() == 1 && done[0][0] != "r01n02", "{done:?}");
}

/// 0.20 reduces log a copy by the map alone (`Shuffling … from <map>`, `Read … for <map>`, then
/// `Rec #1 from <map> … from <host>`); the map's TaskTracker logs the same transfer on its own, as
/// a `MAPRED_SHUFFLE` clienttrace line with the reduce, the bytes and its duration. Each copy
/// read from the reduce's log must agree with the line its source wrote.
#[tokio::test]
async fn a_0_20_reduce_copy_agrees_with_the_shuffle_its_source_logged() {
    let out = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    run(&config(out.path(), 4, Workload::Sort, None, 6.0, Version::V020)).unwrap();
    ingest_into(vec![out.path().join("logs")], wh.path(), None).await;
    let copies = rows(
        wh.path(),
        "SELECT count(*),
                sum(CASE WHEN r.peer_host = m.host AND r.bytes = m.bytes AND r.outcome = 'SUCCEEDED'
                          AND abs(r.duration_ms - m.duration_ms) < 1 THEN 1 ELSE 0 END)
         FROM states r JOIN states m ON m.task_id = r.peer_task_id AND m.peer_task_id = r.task_id
         WHERE r.state = 'ReduceCopy' AND r.daemon = 'task' AND m.state = 'MapCopy'",
    )
    .await;
    let (matched, agreeing) = (&copies[0][0], &copies[0][1]);
    assert!(matched.parse::<u32>().unwrap() > 500, "{copies:?}");
    assert_eq!(agreeing, matched, "source host, bytes and duration (to the millisecond the reduce's log keeps)");
    // Copies with no shuffle line on the other side: only one still running when the run ends.
    let alone = "SELECT count(*) FROM states r WHERE r.state = 'ReduceCopy' AND (r.end_ts IS NOT NULL
                 OR r.peer_host IS NOT NULL OR r.start_ts IS NULL) AND NOT EXISTS (SELECT 1 FROM states m
                 WHERE m.state = 'MapCopy' AND m.task_id = r.peer_task_id AND m.peer_task_id = r.task_id)";
    assert_eq!(scalar(wh.path(), alone).await, "0");

    // Each in-memory merge lasts from its `Initiating` line to the `Merge of the N files` line
    // after it, counted here straight from the reduces' logs: the merge thread's one `Thread
    // started` line is no merge's start.
    let (mut merges, mut merge_ms, mut running) = (0u64, 0i64, 0u64);
    for entry in tree(&out.path().join("logs")).into_iter().filter(|(path, _)| path.ends_with("syslog")) {
        let mut opened = None;
        for line in String::from_utf8(entry.1).unwrap().lines() {
            let Some(stamp) = line.get(..23) else { continue };
            let Ok(at) = chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%d %H:%M:%S,%3f") else { continue };
            let ms = at.and_utc().timestamp_millis();
            if line.contains("Initiating in-memory merge with ") {
                opened = Some(ms);
            } else if line.contains(" files in-memory complete.") {
                merges += 1;
                merge_ms += ms - opened.take().expect("a merge ends after it begins");
            }
        }
        running += u64::from(opened.is_some());
    }
    assert!(merges > 10, "{merges} merges");
    // Merges still running when the run ends are kept, unterminated.
    let states =
        "SELECT count(*), CAST(sum(duration_ms) AS BIGINT), count(end_ts) FROM states WHERE state = 'ReduceMergeCopy'";
    assert_eq!(
        rows(wh.path(), states).await,
        [[(merges + running).to_string(), merge_ms.to_string(), merges.to_string()]]
    );
}

#[tokio::test]
async fn packet_loss_50_slows_the_peers_transfers_too() {
    let out = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    run(&config(out.path(), 6, Workload::Sort, Some("PacketLoss50@r01n02"), 15.0, Version::V018)).unwrap();
    ingest_into(vec![out.path().join("logs")], wh.path(), None).await;
    let copies = rows(
        wh.path(),
        "SELECT peer_host = 'r01n02', avg(duration_ms), count(*) FROM states
         WHERE state = 'ReduceCopy' AND host <> 'r01n02' AND host <> peer_host AND outcome = 'SUCCEEDED'
         GROUP BY 1 ORDER BY 1",
    )
    .await;
    assert_eq!(copies.len(), 2, "{copies:?}");
    let clean: f64 = copies[0][1].parse().unwrap();
    let lossy: f64 = copies[1][1].parse().unwrap();
    // Healthy copies from peers take ~0.1 s; from the lossy node, seconds (0.6 MB/s, RTOs).
    assert!(lossy > 10.0 * clean, "from the lossy node {lossy} ms, from the others {clean} ms");
    let failed = rows(wh.path(), "SELECT count(*) FROM states WHERE state = 'ReduceCopy' AND outcome = 'FAILED' AND peer_host <> 'r01n02' AND host <> 'r01n02'").await;
    assert_eq!(failed[0][0], "0", "only transfers touching the lossy node time out");
}

/// Five months of the M45 history at `scale`, seed 1, with or without the daemon logs.
fn m45(out: &Path, scale: f64, logs: bool) -> HistoryConfig {
    HistoryConfig {
        months: 5.0,
        scale,
        seed: 1,
        out: out.to_path_buf(),
        version: Version::V018,
        gzip: false,
        logs,
        threads: 2,
        progress: false,
        conditions: Conditions::default(),
    }
}

#[test]
fn m45_history_at_a_thousandth_matches_table_i() {
    let out = tempfile::tempdir().unwrap();
    let cfg = m45(out.path(), 0.001, true);
    let summary = run_history(&cfg).unwrap();
    assert_eq!(summary["experiments"], 13);
    for (key, table_i) in
        [("jobs_per_experiment", 3.84), ("nodes_per_experiment", 21.42), ("minutes_per_experiment", 19.74)]
    {
        let mean = summary[key]["mean"].as_f64().unwrap();
        assert!((mean / table_i - 1.0).abs() < 0.2, "{key}: {mean} against Table I's {table_i}");
    }
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("truth.json")).unwrap()).unwrap();
    let experiments = truth["experiments"].as_array().unwrap();
    assert_eq!(experiments.len(), 13);
    assert!(experiments.iter().all(|e| e["start"].as_str().unwrap().starts_with("2008-0")));
    assert!(out.path().join("e00000/logs").is_dir());

    // Without the daemon logs, the same history, byte for byte, and the same experiments in
    // the truth (whose count of log lines is then 0).
    let bare = tempfile::tempdir().unwrap();
    run_history(&HistoryConfig { out: bare.path().to_path_buf(), logs: false, ..cfg }).unwrap();
    assert!(!bare.path().join("e00000/logs").exists());
    let files = |root: &std::path::Path| -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut found: Vec<_> = walkdir::WalkDir::new(root)
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().is_file() && e.file_name() != "truth.json")
            .filter(|e| !e.path().components().any(|c| c.as_os_str() == "logs"))
            .map(|e| (e.path().strip_prefix(root).unwrap().to_path_buf(), std::fs::read(e.path()).unwrap()))
            .collect();
        found.sort();
        found
    };
    let (with_logs, without) = (files(out.path()), files(bare.path()));
    assert!(with_logs.len() > 13, "{} files", with_logs.len());
    assert!(with_logs == without, "the history differs without the logs");
    let bare_truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bare.path().join("truth.json")).unwrap()).unwrap();
    assert_eq!(bare_truth["experiments"], truth["experiments"]);
    assert_eq!(bare_truth["summary"]["log_lines"], 0);
}

/// With a fifth of the attempts stragglers, some Maps take over twice the median Map's time,
/// on more than one host and at most 8× the median's work; on alike nodes without them, none.
#[tokio::test]
async fn stragglers_lengthen_some_maps_on_any_node() {
    let (alike, straggling) = under_default_and(10.0, |c| c.stragglers = 0.2);
    let sql = "WITH m AS (SELECT host, duration_ms FROM states WHERE daemon = 'tasktracker' AND state = 'Map'), \
               med AS (SELECT median(duration_ms) AS d FROM m) \
               SELECT count(*) AS slow, count(DISTINCT host) AS hosts, coalesce(max(CAST(duration_ms AS DOUBLE) / d), 0) AS most \
               FROM m, med WHERE duration_ms > 2 * d";
    let mut slow = Vec::new();
    for dir in [&alike, &straggling] {
        let wh = tempfile::tempdir().unwrap();
        ingest_into(vec![dir.path().to_path_buf()], wh.path(), None).await;
        let row = rows(wh.path(), sql).await.remove(0);
        slow.push((row[0].parse::<u64>().unwrap(), row[1].parse::<u64>().unwrap(), row[2].parse::<f64>().unwrap()));
    }
    assert_eq!(slow[0], (0, 0, 0.0), "no straggler among alike nodes");
    let (maps, hosts, most) = slow[1];
    assert!(maps >= 3 && hosts >= 2, "{maps} slow Maps on {hosts} hosts");
    assert!(most <= STRAGGLER_MAX + 1.0, "the slowest took {most}× the median");
}

/// With a twentieth of the tries of copies failing, failed copies join most pairs of the 4
/// nodes, each output then fetched by the same reduce attempt (unless the attempt or the run
/// ends first); on a healthy cluster without, none fails. `fetch_failures` indicts no one for them, as it counts
/// only outputs a reduce failed to fetch twice; counting every failed try, it would. Nor does
/// `hung_tasks`.
#[tokio::test]
async fn stray_fetch_failures_are_fetched_again_and_indict_no_one() {
    let (alike, stray) = under_default_and(10.0, |c| c.fetch_failures = 0.05);
    // `never`: outputs not fetched in the end by an attempt whose log went on for a minute after
    // the failed try began (time for a try and its backoff).
    let sql = "WITH f AS (SELECT task_id, peer_task_id, host, peer_host, end_ts FROM states \
               WHERE state = 'ReduceCopy' AND outcome = 'FAILED') \
               SELECT count(*) AS failed, count(DISTINCT host || peer_host) AS pairs, \
               (SELECT count(DISTINCT task_id || peer_task_id) FROM f WHERE NOT EXISTS (SELECT 1 FROM states s \
               WHERE s.state = 'ReduceCopy' AND s.outcome = 'SUCCEEDED' AND s.task_id = f.task_id \
               AND s.peer_task_id = f.peer_task_id) AND (SELECT max(end_ts) FROM states s WHERE s.task_id = f.task_id) \
               > f.end_ts + INTERVAL '30 seconds') AS never FROM f";
    let (mut failed, mut indicted) = (Vec::new(), Vec::new());
    for dir in [&alike, &stray] {
        let wh = tempfile::tempdir().unwrap();
        ingest_into(vec![dir.path().to_path_buf()], wh.path(), None).await;
        failed.push(rows(wh.path(), sql).await.remove(0));
        for retries in ["retries=2", "retries=1"] {
            indicted.push(fetch_failures_indicted(wh.path(), retries).await);
        }
        // A reduce waiting on a try that gets no answer is not silent: its copy is in flight.
        let hung = diagnose(wh.path(), &["hung_tasks"]);
        assert!(hung.contains("hung_tasks: no host indicted among 4 compared"), "{hung}");
    }
    assert_eq!(failed[0], ["0", "0", "0"], "no failed copy on a healthy cluster");
    let count = |i: usize| failed[1][i].parse::<u32>().unwrap();
    assert!(count(0) >= 10 && count(1) >= 8, "{failed:?}: failures between most of the 12 ordered pairs");
    assert_eq!(count(2), 0, "every failed copy fetched again by an attempt that lived on: {failed:?}");
    assert_eq!(indicted, [0, 0, 0, 4], "healthy (twice, once), strays (twice, once)");
}

/// Runs `kahuna diagnose fetch_failures --param PARAM`: how many hosts it indicts.
async fn fetch_failures_indicted(wh: &Path, param: &str) -> usize {
    diagnose(wh, &["fetch_failures", "--param", param]);
    let newest = "SELECT count(*) FROM diagnoses WHERE query = 'fetch_failures' AND indicted \
                  AND run_id = (SELECT max(run_id) FROM diagnoses WHERE query = 'fetch_failures')";
    scalar(wh, newest).await.parse().unwrap()
}

/// The M45 history's Maps are as alike as Kahuna §IV found M45's: of the hosts of successful
/// jobs 89% had |r| ≥ 0.6 with every peer, of failed ones 43%. A twentieth of the history, within
/// 10 points of each. (Failed jobs are few and their shares vary from job to job: a twentieth of
/// the history holds some 60 of them, enough to tell.)
#[tokio::test]
async fn m45_history_maps_are_as_alike_as_the_papers() {
    let out = tempfile::tempdir().unwrap();
    run_history(&m45(out.path(), 0.05, false)).unwrap();
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![out.path().to_path_buf()], wh.path(), None).await;
    diagnose(wh.path(), &["peer_correlation"]);
    let shares = rows(
        wh.path(),
        "SELECT outcome, count(*), CAST(sum(similar_hosts) AS DOUBLE) / sum(hosts) FROM peer_correlation_jobs \
         WHERE outcome IN ('SUCCEEDED', 'FAILED') GROUP BY outcome ORDER BY outcome",
    )
    .await;
    let share = |row: &Vec<String>| row[2].parse::<f64>().unwrap();
    assert_eq!((shares[0][0].as_str(), shares[1][0].as_str()), ("FAILED", "SUCCEEDED"), "{shares:?}");
    assert!(shares[0][1].parse::<u32>().unwrap() >= 50, "{shares:?}");
    assert!((share(&shares[1]) - 0.89).abs() <= 0.10, "successful jobs: {shares:?}");
    assert!((share(&shares[0]) - 0.43).abs() <= 0.10, "failed jobs: {shares:?}");
}
