//! A warehouse in an S3-compatible object store (the moto server `.ci/run` starts on loopback):
//! ingest, re-ingest, SQL, optimize and the ingest lock behave as in a folder, and a bucket that
//! is missing or refuses the credentials is said in one line.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{batch_rows, data_dir, options_for, package_dir, s3_warehouse};
use datafusion::object_store::ObjectStoreExt as _;
use datafusion::object_store::path::Path as ObjectPath;
use kahuna::catalog;
use kahuna::ingest::ingest;
use kahuna::warehouse::Warehouse;

const STATEMENTS: [&str; 3] = [
    "SELECT host, state, count(*) AS states, round(avg(duration_ms)) AS mean_ms FROM states GROUP BY host, state ORDER BY host, state",
    "SELECT host, metric, count(*) AS n FROM sar_metrics GROUP BY host, metric ORDER BY host, metric",
    "SELECT outcome, count(*) AS n FROM jobs GROUP BY outcome ORDER BY outcome",
];

async fn answers(warehouse: &Warehouse) -> Vec<Vec<Vec<String>>> {
    let ctx = catalog::session(warehouse).await.unwrap();
    let mut answers = Vec::new();
    for sql in STATEMENTS {
        answers.push(batch_rows(&ctx.sql(sql).await.unwrap().collect().await.unwrap()));
    }
    answers
}

fn inputs() -> Vec<std::path::PathBuf> {
    let root = package_dir().join("data");
    vec![data_dir(), root.join("sysstat"), root.join("jobhistory")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warehouse_on_s3_takes_and_answers_what_a_folder_does() {
    let Some(on_s3) = s3_warehouse("answers").await else { return };
    let dir = tempfile::tempdir().unwrap();
    let in_folder = Warehouse::new(dir.path().join("warehouse"));
    let first = ingest(&options_for(inputs(), on_s3.clone(), None)).await.unwrap();
    ingest(&options_for(inputs(), in_folder.clone(), None)).await.unwrap();
    assert_eq!(first.total(|r| r.states), 34);
    let expected = answers(&in_folder).await;
    assert_eq!(answers(&on_s3).await, expected);
    assert!(expected[0].len() > 5 && expected[2].len() == 1, "{expected:?}");
    // The lock is gone with its ingest.
    assert!(on_s3.store().head(&ObjectPath::from(".ingest.lock")).await.is_err(), "the ingest lock is left");

    // Read again, nothing is new: the transactions were read back from the bucket's logs.
    let again = ingest(&options_for(inputs(), on_s3.clone(), None)).await.unwrap();
    assert_eq!(again.total(|r| r.states), 0);
    let names: Vec<String> = on_s3.versions().await.unwrap().into_iter().map(|(name, _)| name).collect();
    let in_folder_names: Vec<String> = in_folder.versions().await.unwrap().into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, in_folder_names);
    assert!(names.contains(&"states".to_string()), "{names:?}");

    // Compacted and vacuumed in the bucket, the same rows; and the tables of a cluster session
    // whose client was killed are removed.
    let left = ObjectPath::from(".session-killed/maps-0/part-0.parquet");
    on_s3.store().put(&left, b"rows".to_vec().into()).await.unwrap();
    let report = on_s3.optimize(Duration::ZERO).await.unwrap();
    assert!(report.iter().any(|line| line.starts_with("states: 2 files compacted into 1")), "{report:?}");
    assert!(report.contains(&"1 cluster sessions' tables removed (their clients ended without removing them)".into()));
    assert!(on_s3.store().head(&left).await.is_err(), "the session's table is left");
    assert_eq!(answers(&on_s3).await, expected);
}

/// The commands as an operator runs them, the credentials and endpoint in the environment:
/// ingest, a backfill run twice (its day replaced, the ledger in the bucket), SQL.
#[tokio::test]
async fn the_commands_take_a_warehouse_on_s3() {
    let Some(warehouse) = s3_warehouse("commands").await else { return };
    let location = warehouse.to_string();
    let kahuna = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_kahuna"))
            .args(["--warehouse", &location])
            .args(args)
            .current_dir(package_dir())
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "{args:?}: {said}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let ingested = kahuna(&["ingest", "--cluster", "c1", data_dir().to_str().unwrap()]);
    assert!(ingested.contains("files: 9 ingested, 0 unchanged, 0 refused, 0 failed"), "{ingested}");
    for _ in 0..2 {
        let ran = kahuna(&["backfill", "kahuna_wb", "--from", "2008-08-23", "--to", "2008-08-23", "--cluster", "c1"]);
        assert!(ran.contains("kahuna_wb for 2008-08-23:"), "{ran}");
    }
    let sql = "SELECT CAST(date AS VARCHAR) AS day, count(DISTINCT run_id) AS runs FROM diagnoses GROUP BY day; \
               SELECT count(*) AS attempts FROM schedule_runs WHERE status = 'succeeded'";
    assert_eq!(kahuna(&["sql", "--format", "csv", "-c", sql]), "day,runs\n2008-08-23,1\nattempts\n2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ingest_at_a_time_into_a_bucket() {
    let Some(warehouse) = s3_warehouse("lock").await else { return };
    let held = warehouse.lock_for_ingest().await.unwrap();
    let waiting = tokio::spawn({
        let warehouse = warehouse.clone();
        async move { warehouse.lock_for_ingest().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!waiting.is_finished(), "a second ingest took the lock while the first held it");
    held.release().await.unwrap();
    let second =
        tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("the lock was not let go").unwrap();
    second.release().await.unwrap();
}

#[tokio::test]
async fn a_bucket_missing_or_refusing_the_credentials_is_said_in_one_line() {
    let Some(warehouse) = s3_warehouse("refused").await else { return };
    let location = warehouse.to_string();
    let bucket = location.trim_start_matches("s3://").split('/').next().unwrap().to_string();
    let denied_key = std::env::var("KAHUNA_TEST_S3_DENIED_KEY_ID").unwrap();
    let denied_secret = std::env::var("KAHUNA_TEST_S3_DENIED_SECRET").unwrap();
    let sql = |location: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kahuna"));
        command.args(["--warehouse", location, "sql", "-c", "SELECT count(*) FROM states"]);
        command
    };
    let cases = [
        (sql("s3://kahuna-no-such-bucket/wh"), "bucket kahuna-no-such-bucket does not exist".to_string()),
        (
            {
                let mut command = sql(&location);
                command.env("AWS_ACCESS_KEY_ID", &denied_key).env("AWS_SECRET_ACCESS_KEY", &denied_secret);
                command
            },
            format!("bucket {bucket} denies access to these credentials"),
        ),
        (sql("gs://bucket/wh"), "a warehouse is a folder or an s3:// URL".to_string()),
    ];
    for (mut command, expected) in cases {
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(stderr.contains(&expected), "{expected}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}
