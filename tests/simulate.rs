//! `kahuna simulate` end to end: the same seed writes the same bytes, everything it writes
//! ingests without a reject, and the injected faults show in the ingested `states` as the
//! papers saw them. Runs are small (a few nodes, minutes of simulated time) to stay fast.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{ingest_into, rows};
use kahuna::simulate::faults::FaultSpec;
use kahuna::simulate::history::{HistoryConfig, run_history};
use kahuna::simulate::workload::Workload;
use kahuna::simulate::{Config, DEFAULT_EPOCH_MS, Version, run};

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
    for (version, gzip) in [(Version::V018, false), (Version::V020, true)] {
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

#[tokio::test]
async fn every_file_ingests_without_a_reject() {
    for (version, fault) in [(Version::V018, "HANG-1036@r01n01"), (Version::V020, "HANG-1152@r01n02"), (Version::V018, "DiskFull@r01n03")] {
        let out = tempfile::tempdir().unwrap();
        let wh = tempfile::tempdir().unwrap();
        let outcome = run(&config(out.path(), 4, Workload::Sort, Some(fault), 15.0, version)).unwrap();
        let summary = ingest_into(vec![out.path().to_path_buf()], wh.path(), None).await;
        let logs = tree(&out.path().join("logs")).len();
        assert_eq!(summary.total(|r| r.lines_rejected), 0, "{fault}: {:?}", summary.rejects_by_reason());
        assert_eq!(summary.files_with_status("failed"), 0);
        // Log files at least; sadc and job history too where ingestion reads them.
        assert!(summary.files_with_status("ingested") >= logs, "{fault}");
        let lines: u64 = summary.reports.iter().filter(|r| r.display.contains("/logs/")).map(|r| r.lines_read).sum();
        let startup_continuations = 2 * 6 * 4;
        assert_eq!(lines, outcome.lines.total() + startup_continuations, "{fault}");
    }
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
    // Fault-free peers within 6% of each other; the hog's node 20% slower than the slowest.
    assert!(hi / lo < 1.06, "peers {lo}..{hi}");
    assert!(hog / hi > 1.2, "hog {hog} vs peers up to {hi}");
    let peer_count = rows(wh.path(), "SELECT count(*) FROM states WHERE state = 'Map' GROUP BY host ORDER BY 1").await;
    assert!(peer_count.first().unwrap()[0].parse::<u32>().unwrap() < peer_count.last().unwrap()[0].parse::<u32>().unwrap());
}

#[tokio::test]
async fn hang_1036_times_a_map_out_on_the_faulty_node() {
    let out = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    run(&config(out.path(), 5, Workload::Sort, Some("HANG-1036@r01n04:1m"), 20.0, Version::V018)).unwrap();
    ingest_into(vec![out.path().join("logs")], wh.path(), None).await;
    let hung = rows(
        wh.path(),
        "SELECT host, count(*), min(duration_ms) FROM states
         WHERE state = 'Map' AND (outcome = 'FAILED' OR end_ts IS NULL) GROUP BY host",
    )
    .await;
    assert_eq!(hung.len(), 1, "{hung:?}");
    assert_eq!((hung[0][0].as_str(), hung[0][1].as_str()), ("r01n04", "1"));
    // One hang per run: killed 600 s after the child died, 1–4 s into the map.
    let least: f64 = hung[0][2].parse().unwrap();
    assert!((601_000.0..608_000.0).contains(&least), "{least}");
    let reruns = rows(wh.path(), "SELECT host FROM states WHERE state = 'Map' AND ends_with(task_id, '_1') AND outcome = 'SUCCEEDED'").await;
    assert!(!reruns.is_empty() && reruns.iter().all(|r| r[0] != "r01n04"), "{reruns:?}");
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

#[test]
fn m45_history_at_a_thousandth_matches_table_i() {
    let out = tempfile::tempdir().unwrap();
    let cfg = HistoryConfig { months: 5.0, scale: 0.001, seed: 1, out: out.path().to_path_buf(), version: Version::V018, gzip: false, threads: 2, progress: false };
    let summary = run_history(&cfg).unwrap();
    assert_eq!(summary["experiments"], 13);
    for (key, table_i) in [("jobs_per_experiment", 3.84), ("nodes_per_experiment", 21.42), ("minutes_per_experiment", 19.74)] {
        let mean = summary[key]["mean"].as_f64().unwrap();
        assert!((mean / table_i - 1.0).abs() < 0.2, "{key}: {mean} against Table I's {table_i}");
    }
    let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(out.path().join("truth.json")).unwrap()).unwrap();
    let experiments = truth["experiments"].as_array().unwrap();
    assert_eq!(experiments.len(), 13);
    assert!(experiments.iter().all(|e| e["start"].as_str().unwrap().starts_with("2008-0")));
    assert!(out.path().join("e00000/logs").is_dir());
}
