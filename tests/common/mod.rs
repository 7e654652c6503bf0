//! Helpers shared by the integration tests: ingesting into a temporary warehouse and reading
//! query answers back as strings.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use datafusion::arrow::util::display::array_value_to_string;
use kahuna::ingest::discover::Hints;
use kahuna::ingest::{IngestOptions, Summary, ingest};
use kahuna::warehouse::Warehouse;

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

pub fn options(paths: Vec<PathBuf>, warehouse: &Path, host: Option<&str>) -> IngestOptions {
    IngestOptions {
        paths,
        cluster: "test".into(),
        warehouse: Warehouse::new(warehouse),
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

/// Every row of a query's answer, each value as the shell would print it.
pub async fn rows(warehouse: &Path, sql: &str) -> Vec<Vec<String>> {
    let ctx = kahuna::catalog::session(&Warehouse::new(warehouse)).await.expect("session");
    let batches = ctx.sql(sql).await.expect("plan").collect().await.expect("run");
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
