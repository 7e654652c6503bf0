//! Helpers shared by the integration tests: ingesting into a temporary warehouse and reading
//! query answers back as strings.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use kahuna::ingest::discover::Hints;
use kahuna::ingest::{IngestOptions, Summary, ingest};
use kahuna::warehouse::Warehouse;

/// Runs `kahuna --warehouse WAREHOUSE diagnose ARGS`, which must succeed; its standard output.
pub fn diagnose(warehouse: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kahuna"))
        .arg("--warehouse")
        .arg(warehouse)
        .arg("diagnose")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The package's folder as the test runner names it when the test runs: `env!` would keep the
/// folder the binary was built in, and a build shared by several checkouts (CI's cache) can be
/// reused by a checkout elsewhere after that one is gone.
pub fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

pub fn data_dir() -> PathBuf {
    package_dir().join("data/logs")
}

/// `../shared/samples/<rel>`, or None (with the reason printed) where that folder is absent.
pub fn sample(rel: &str) -> Option<PathBuf> {
    let path = package_dir().join("../shared/samples").join(rel);
    if path.exists() {
        Some(path)
    } else {
        println!("skipped: {} is absent (the shared samples live beside the checkout)", path.display());
        None
    }
}

/// Dates `path` an hour back: a log nobody writes any more, whose last line is whole even
/// without a `\n`.
pub fn written_an_hour_ago(path: &Path) {
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(path).unwrap().set_modified(an_hour_ago).unwrap();
}

pub fn options(paths: Vec<PathBuf>, warehouse: &Path, host: Option<&str>) -> IngestOptions {
    options_for(paths, Warehouse::new(warehouse), host)
}

pub fn options_for(paths: Vec<PathBuf>, warehouse: Warehouse, host: Option<&str>) -> IngestOptions {
    IngestOptions {
        paths,
        cluster: "test".into(),
        warehouse,
        zone: None,
        hints: Hints { host: host.map(str::to_string), ..Hints::default() },
        progress: false,
        threads: 2,
        dry_run: false,
    }
}

pub async fn ingest_into(paths: Vec<PathBuf>, warehouse: &Path, host: Option<&str>) -> Summary {
    ingest(&options(paths, warehouse, host)).await.expect("ingest")
}

/// A warehouse of its own in the S3-compatible server `.ci/run` starts (`KAHUNA_TEST_S3`, a
/// bucket URL), or None (with the reason printed) where there is none.
pub async fn s3_warehouse(test: &str) -> Option<Warehouse> {
    let Ok(bucket) = std::env::var("KAHUNA_TEST_S3") else {
        println!("skipped: KAHUNA_TEST_S3 is not set (.ci/run starts an S3-compatible server and sets it)");
        return None;
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let location = format!("{}/{test}-{nanos:x}", bucket.trim_end_matches('/'));
    Some(Warehouse::at(&location).await.unwrap_or_else(|e| panic!("{location}: {e:#}")))
}

/// Every row of a query's answer, each value as the shell would print it.
pub async fn rows(warehouse: &Path, sql: &str) -> Vec<Vec<String>> {
    let ctx = kahuna::catalog::session(&Warehouse::new(warehouse)).await.expect("session");
    batch_rows(&ctx.sql(sql).await.expect("plan").collect().await.expect("run"))
}

/// Every row of `batches`, each value as the shell would print it.
pub fn batch_rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            out.push(batch.columns().iter().map(|c| array_value_to_string(c, row).expect("display")).collect());
        }
    }
    out
}

/// The single value of a one-row, one-column answer.
pub async fn scalar(warehouse: &Path, sql: &str) -> String {
    let all = rows(warehouse, sql).await;
    assert_eq!(all.len(), 1, "{sql}: {all:?}");
    all[0][0].clone()
}

/// Expected rows written as string literals, in the shape [`rows`] returns.
pub fn owned<const N: usize>(expect: &[[&str; N]]) -> Vec<Vec<String>> {
    expect.iter().map(|r| r.map(String::from).to_vec()).collect()
}

/// TaskTracker logs of `hosts` (one file each in `dir`) for one job after the other: ten Maps
/// per host and job, one after the other, of 9, 9.5, 10, 10.5 and 11 s (twice); in job `j`, the
/// hosts of `slow[j]` take three times as long.
pub fn write_jobs(dir: &Path, hosts: &[&str], slow: &[&[&str]]) {
    let start = chrono::NaiveDate::from_ymd_opt(2008, 8, 23).unwrap().and_hms_opt(17, 0, 0).unwrap();
    let stamp = |ms: i64| (start + chrono::Duration::milliseconds(ms)).format("%Y-%m-%d %H:%M:%S,%3f").to_string();
    let logger = "org.apache.hadoop.mapred.TaskTracker";
    for (h, host) in hosts.iter().enumerate() {
        let mut log = String::new();
        for (j, slow) in slow.iter().enumerate() {
            for i in 0..10i64 {
                let attempt = format!("attempt_200808231712_{:04}_m_{:06}_0", j + 1, h as i64 * 100 + i);
                let mut ms = 9_000 + 500 * (i % 5);
                if slow.contains(host) {
                    ms *= 3;
                }
                let begin = (j as i64 * 10 + i) * 40_000;
                log.push_str(&format!("{} INFO {logger}: LaunchTaskAction: {attempt}\n", stamp(begin)));
                log.push_str(&format!("{} INFO {logger}: Task {attempt} is done.\n", stamp(begin + ms)));
            }
        }
        std::fs::write(dir.join(format!("hadoop-hadoop-tasktracker-{host}.log")), log).unwrap();
    }
}

/// Where a test keeps what it leaves for a person to look at (screenshots).
pub fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The page as Chromium leaves it once its scripts ran, and a screenshot of it at `png`. Fails
/// on any console message or script error (the page keeps those on its root element too).
pub fn render(page: &Path, png: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let chromium = |args: &[&str]| {
        let out = std::process::Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(args)
            .arg(format!("file://{}", page.display()))
            .output()
            .expect("chromium (Debian's package; .ci/run installs it)");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE")).collect();
        assert!(console.is_empty(), "the page wrote to the console: {console:#?}");
        out.stdout
    };
    let dom = String::from_utf8(chromium(&["--dump-dom"])).unwrap();
    let root = dom.split_once("<head").map_or("", |(root, _)| root);
    assert!(!root.contains("data-errors"), "script errors: {root}");
    chromium(&["--window-size=1280,4000", &format!("--screenshot={}", png.display())]);
    assert!(std::fs::metadata(png).unwrap().len() > 20_000, "{} is all but empty", png.display());
    dom
}

pub fn section<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom.find(&format!(r#"<section id="{id}">"#)).unwrap_or_else(|| panic!("no section {id}"));
    let end = dom[start..].find("</section>").unwrap();
    &dom[start..start + end]
}

/// The records of a one-second sadf `-d` capture as a capture every 10 s would keep them: the
/// header lines, and the records of the seconds ending in 0 with their interval 10.
pub fn every_ten_seconds(capture: &str) -> Vec<String> {
    capture
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(';').collect();
            match fields.as_slice() {
                _ if line.starts_with('#') => Some(line.to_string()),
                [host, "1", ts, rest @ ..] if ts.get(18..19) == Some("0") => {
                    Some([&[*host, "10", *ts][..], rest].concat().join(";"))
                }
                _ => None,
            }
        })
        .collect()
}
