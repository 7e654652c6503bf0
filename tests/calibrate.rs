//! `kahuna calibrate` on a simulated cluster of alike nodes whose sysstat captures carry their
//! daemons' and cron's noise: no diagnosis indicts more than one host of ten, with its defaults
//! or calibrated; a calibration says what it chose and why, `diagnose` says where each value
//! came from, a value given still wins, and too little history keeps the defaults, named.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{every_ten_seconds, rows, scalar};
use kahuna::diagnose::eval::SCORED as VERDICTS;

fn kahuna(warehouse: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kahuna")).arg("--warehouse").arg(warehouse).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(warehouse: &Path, args: &[&str]) -> String {
    let out = kahuna(warehouse, args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Hosts `query` indicted over the whole window in its newest recorded run.
async fn indicted(wh: &Path, query: &str) -> Vec<String> {
    let sql = format!(
        "SELECT DISTINCT host FROM diagnoses WHERE query = '{query}' AND indicted AND job_id IS NULL \
         AND run_id = (SELECT max(run_id) FROM diagnoses WHERE query = '{query}') ORDER BY host"
    );
    rows(wh, &sql).await.into_iter().map(|r| r[0].clone()).collect()
}

#[tokio::test]
async fn alike_nodes_with_noise_are_not_indicted_and_calibration_says_what_it_chose() {
    let run = tempfile::tempdir().unwrap();
    let wh = tempfile::tempdir().unwrap();
    let sim = Command::new(env!("CARGO_BIN_EXE_kahuna"))
        .args(["simulate", "--nodes", "10", "--workload", "sort", "--duration", "12m", "--threads", "2"])
        .args(["--seed", "5", "--sysstat-noise", "--out"])
        .arg(run.path())
        .output()
        .unwrap();
    assert!(sim.status.success(), "{}", text(&sim.stderr));
    let parts = ["logs", "sadc", "history"].map(|p| run.path().join(p));
    let parts: Vec<&str> = parts.iter().map(|p| p.to_str().unwrap()).collect();
    ok(wh.path(), &[&["ingest"], &parts[..], &["--cluster", "alike"]].concat());

    // Defaults, Ganesha's profiles trained on the cluster itself: each verdict at most one host.
    ok(wh.path(), &["diagnose", "ganesha_train", "--cluster", "alike"]);
    for query in VERDICTS {
        let stdout = ok(wh.path(), &["diagnose", query, "--cluster", "alike"]);
        let hosts = indicted(wh.path(), query).await;
        assert!(hosts.len() <= 1, "{query} indicted {hosts:?} of ten alike nodes: {stdout}");
    }
    let stdout = ok(wh.path(), &["diagnose", "kahuna_wb", "--cluster", "alike", "--dry-run"]);
    assert!(
        stdout.contains("threshold = 0.5 (default: cluster alike has no calibration; kahuna calibrate makes one)"),
        "{stdout}"
    );

    // The same cluster captured every 10 seconds, as sadc often runs: Ganesha counts its memory
    // in samples, so it still indicts at most one host; counted in seconds as at one sample a
    // second (`sample_seconds=1`), six vectors a histogram, with the paper's rule (a host near
    // some of its peers is not spared: `near_peers=0`) it indicts nearly every host.
    let every_10s = run.path().join("sadc-10s");
    std::fs::create_dir(&every_10s).unwrap();
    for entry in std::fs::read_dir(run.path().join("sadc")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let kept = every_ten_seconds(&text);
        assert!(kept.len() * 9 < text.lines().count(), "{}: a tenth of the rows", path.display());
        std::fs::write(every_10s.join(path.file_name().unwrap()), kept.join("\n") + "\n").unwrap();
    }
    let tenth = [run.path().join("logs"), every_10s.clone(), run.path().join("history")];
    let tenth: Vec<&str> = tenth.iter().map(|p| p.to_str().unwrap()).collect();
    ok(wh.path(), &[&["ingest"], &tenth[..], &["--cluster", "alike-10s"]].concat());
    ok(wh.path(), &["diagnose", "ganesha_train", "--cluster", "alike-10s"]);
    let ganesha = |extra: &[&str]| {
        let args = [&["diagnose", "ganesha_bb", "--cluster", "alike-10s", "--param", "model_cluster=alike-10s"], extra]
            .concat();
        ok(wh.path(), &args)
    };
    let stdout = ganesha(&[]);
    assert!(indicted(wh.path(), "ganesha_bb").await.len() <= 1, "{stdout}");
    let stdout = ganesha(&["--param", "sample_seconds=1", "--param", "near_peers=0"]);
    assert!(indicted(wh.path(), "ganesha_bb").await.len() >= 8, "{stdout}");

    // Too little history: said, the defaults named, nothing recorded. A window is two minutes
    // of the grid from the first launch that holds the launch of a finished job.
    let slots = "SELECT count(DISTINCT floor((date_part('epoch', launch_ts) - \
                 (SELECT min(date_part('epoch', launch_ts)) FROM jobs WHERE cluster = 'alike')) / 120)) \
                 FROM jobs WHERE finish_ts IS NOT NULL AND cluster = 'alike'";
    let windows = scalar(wh.path(), slots).await;
    let queries = ["--queries", "kahuna_wb,ganesha_bb"];
    let stdout = ok(wh.path(), &[&["calibrate", "--window", "2m", "--min-windows", "50"], &queries[..]].concat());
    assert!(
        stdout.contains(&format!(
            "cluster alike: {windows} windows of 2m hold jobs in the last 30 days; calibration needs 50: too little history; \
             nothing changes (an earlier calibration holds, else the defaults: kahuna_wb threshold = 0.5, ganesha_bb alarm_level = 0.6)"
        )),
        "{stdout}"
    );
    let stdout = ok(wh.path(), &["calibrate", "--cluster", "elsewhere"]);
    assert!(stdout.contains("cluster elsewhere: no finished job in its history: too little to calibrate"), "{stdout}");
    assert!(!wh.path().join("calibrations").exists());
    let out = kahuna(wh.path(), &["calibrate", "--queries", "combined"]);
    assert!(text(&out.stderr).contains("combined: only a verdict query that reads no other verdicts is calibrated"));

    // A calibration over those windows: the values recorded are those it printed,
    // each alarming at most the share allowed, and Ganesha's profiles are the cluster's own.
    let stdout = ok(wh.path(), &[&["calibrate", "--window", "2m", "--min-windows", "4"], &queries[..]].concat());
    assert!(stdout.contains(&format!("cluster alike: {windows} windows of 2m with jobs")), "{stdout}");
    let recorded = rows(
        wh.path(),
        "SELECT query, parameter, value, CAST(windows AS VARCHAR), CAST(alarm_share <= 0.05 AS VARCHAR), cluster \
         FROM calibrations WHERE cluster = 'alike' ORDER BY query, parameter",
    )
    .await;
    let params: Vec<[&str; 2]> = recorded.iter().map(|r| [r[0].as_str(), r[1].as_str()]).collect();
    assert_eq!(params, [["ganesha_bb", "alarm_level"], ["ganesha_bb", "model_cluster"], ["kahuna_wb", "threshold"]]);
    for row in &recorded {
        assert_eq!((&row[3], &row[5][..]), (&windows, "alike"), "{row:?}");
        assert!(stdout.contains(&format!("  {}: {} = {} (", row[0], row[1], row[2])), "{row:?} in {stdout}");
    }
    assert_eq!(recorded[1][2], "alike");
    assert_eq!((&recorded[0][4][..], &recorded[2][4][..]), ("true", "true"), "{stdout}");
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM ganesha_models WHERE cluster = 'alike'").await, "1");

    // Diagnose takes the calibrated values, says so, and records them as such; a value given
    // wins; a run over every cluster has no calibration.
    let threshold = &recorded[2][2];
    let stdout = ok(wh.path(), &["diagnose", "kahuna_wb", "--cluster", "alike"]);
    assert!(stdout.contains(&format!("threshold = {threshold} (calibrated ")), "{stdout}");
    let parameters = rows(wh.path(), "SELECT DISTINCT parameters FROM diagnoses WHERE query = 'kahuna_wb'").await;
    assert!(
        parameters.iter().any(|p| p[0].contains(r#""calibrated":"{\"threshold\":\"0.5\"}""#)
            && p[0].contains(&format!(r#""threshold":"{threshold}""#))),
        "{parameters:?}"
    );
    let stdout =
        ok(wh.path(), &["diagnose", "kahuna_wb", "--cluster", "alike", "--param", "threshold=0.7", "--dry-run"]);
    assert!(stdout.contains("threshold = 0.7 (given)"), "{stdout}");
    let stdout = ok(wh.path(), &["diagnose", "kahuna_wb", "--dry-run"]);
    assert!(stdout.contains("threshold = 0.5 (default: calibrations are per cluster: give --cluster)"), "{stdout}");
    let stdout = ok(wh.path(), &["diagnose", "ganesha_bb", "--cluster", "alike"]);
    assert!(stdout.contains("model_cluster = alike (calibrated "), "{stdout}");

    // Calibrated, still at most one host each.
    for query in VERDICTS {
        let stdout = ok(wh.path(), &["diagnose", query, "--cluster", "alike"]);
        let hosts = indicted(wh.path(), query).await;
        assert!(hosts.len() <= 1, "{query} calibrated indicted {hosts:?} of ten alike nodes: {stdout}");
    }

    // Scheduled runs and backfills replace a date's rows of the same run: after a calibration
    // moved the value (of a copy of Kahuna-WB whose default, 0.3, alarms too often) and after a
    // second calibration, the date keeps one calibrated run, beside the run given a value.
    let mine = run.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    let text = std::fs::read_to_string("queries/kahuna_wb.sql").unwrap();
    let loose = text.replace("@param threshold   number    = 0.5", "@param threshold   number    = 0.3");
    assert_ne!(loose, text);
    // As shipped, Kahuna-WB is never stepped stricter to hold the queries together.
    std::fs::write(mine.join("kahuna_wb_apart.sql"), &loose).unwrap();
    // An operator's copy that says its grid is monotone is.
    let monotone = loose.replace("0.6, 0.7; not monotone", "0.6, 0.7");
    assert_ne!(monotone, loose);
    let query = mine.join("kahuna_wb_loose.sql");
    std::fs::write(&query, &monotone).unwrap();
    // Held together with a twin: one query alone is held by its own share.
    std::fs::write(mine.join("kahuna_wb_twin.sql"), &monotone).unwrap();
    let day = ["--from", "2008-08-25", "--to", "2008-08-25", "--cluster", "alike"];
    let backfill = |extra: &[&str]| ok(wh.path(), &[&["backfill", query.to_str().unwrap()], &day[..], extra].concat());
    let runs =
        "SELECT count(DISTINCT run_id) FROM diagnoses WHERE query = 'kahuna_wb_loose' AND date = DATE '2008-08-25'";
    backfill(&[]);
    backfill(&["--param", "threshold=0.7"]);
    assert_eq!(scalar(wh.path(), runs).await, "2");
    let calibrate = ["calibrate", "--queries", "kahuna_wb_loose", "--queries-dir", mine.to_str().unwrap()];
    let stdout =
        ok(wh.path(), &[&calibrate[..], &["--window", "2m", "--min-windows", "4", "--max-share", "0.01"]].concat());
    assert!(stdout.contains("kahuna_wb_loose: threshold = 0.4 (the default alarms over 0.01"), "{stdout}");
    // Held together to that share (here twins: both a step stricter, as their alarms are the
    // same), where on its own each may alarm more; alone, one is not, nor is a query marked not
    // monotone.
    let together = ["--window", "2m", "--min-windows", "4", "--max-share", "0.5", "--max-share-together", "0.01"];
    let alone = ok(wh.path(), &[&calibrate[..], &together[..]].concat());
    assert!(alone.contains("kahuna_wb_loose: threshold = 0.3 (the default: it alarms at most 0.5"), "{alone}");
    assert!(!alone.contains("  together ("), "{alone}");
    let queries = "kahuna_wb_loose,kahuna_wb_twin,kahuna_wb_apart";
    let twins = ["calibrate", "--queries", queries, "--queries-dir", mine.to_str().unwrap()];
    let stdout = ok(wh.path(), &[&twins[..], &together[..]].concat());
    assert!(stdout.contains("kahuna_wb_loose: threshold = 0.3 (the default: it alarms at most 0.5"), "{stdout}");
    assert!(stdout.contains("  together (kahuna_wb_loose, kahuna_wb_twin): "), "{stdout}");
    for query in ["kahuna_wb_loose", "kahuna_wb_twin"] {
        let stricter =
            format!("{query}: threshold = 0.4 (stricter than 0.3: the calibrated queries together alarm at most 0.01");
        assert!(stdout.contains(&stricter), "{stdout}");
    }
    assert!(stdout.contains("kahuna_wb_apart: threshold = 0.3 (the default: it alarms at most 0.5"), "{stdout}");
    assert!(stdout.contains("kahuna_wb_apart: not held together (threshold is not monotone"), "{stdout}");
    assert!(!stdout.contains("kahuna_wb_apart: threshold = 0.4"), "{stdout}");
    backfill(&[]);
    assert_eq!(scalar(wh.path(), runs).await, "2", "the default run's rows replaced by the calibrated run's");
    ok(wh.path(), &[&calibrate[..], &["--window", "3m", "--min-windows", "4", "--max-share", "0"]].concat());
    backfill(&[]);
    assert_eq!(scalar(wh.path(), runs).await, "2");
    let values = "SELECT DISTINCT parameters FROM diagnoses WHERE query = 'kahuna_wb_loose' ORDER BY parameters";
    let values: Vec<String> = rows(wh.path(), values).await.into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(values.len(), 2, "{values:?}");
    assert!(values.iter().any(|p| p.contains(r#""threshold":"0.7""#) && !p.contains("calibrated")), "{values:?}");
    assert!(values.iter().any(|p| p.contains(r#""calibrated":"{\"threshold\":\"0.3\"}""#)), "{values:?}");
}
