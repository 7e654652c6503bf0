//! The application transactions a Delta table holds, all read in one pass over its log.
//!
//! delta-rs answers for one app id at a time and replays the whole log for each (the kernel's
//! `SetTransactionScanner::get_all` is crate-private), so planning an ingest of N files against
//! a log of M commits that way costs N × M, too slow for an evaluation suite's many files and
//! commits. The protocol's rule is short: the newest `txn` action per app id wins, read from the
//! newest checkpoint at or below the version and the JSON commits after it. We never set
//! `delta.setTransactionRetentionDuration`, so no transaction expires.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::Int64Type;
use deltalake::parquet::arrow::ProjectionMask;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::Deserialize;

/// The newest transaction version of every app id in the table whose log is `log_dir`, as of
/// table `version`.
pub fn latest_versions(log_dir: &Path, version: u64) -> Result<HashMap<String, i64>> {
    let mut versions = HashMap::new();
    let first_commit = match newest_checkpoint(log_dir, version)? {
        Some((checkpoint_version, parts)) => {
            for part in parts {
                read_checkpoint_part(&part, &mut versions)?;
            }
            checkpoint_version + 1
        }
        None => 0,
    };
    for commit in first_commit..=version {
        read_commit(&log_dir.join(format!("{commit:020}.json")), &mut versions)?;
    }
    Ok(versions)
}

/// The newest complete checkpoint at or below `version`: `<v>.checkpoint.parquet`, or every
/// part of a multi-part one (`<v>.checkpoint.<i>.<n>.parquet`).
fn newest_checkpoint(log_dir: &Path, version: u64) -> Result<Option<(u64, Vec<PathBuf>)>> {
    let entries = std::fs::read_dir(log_dir).with_context(|| format!("cannot list {}", log_dir.display()))?;
    let mut by_version: BTreeMap<u64, (usize, Vec<PathBuf>)> = BTreeMap::new();
    for entry in entries {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let fields: Vec<&str> = name.split('.').collect();
        let (checkpoint_version, parts) = match fields.as_slice() {
            [v, "checkpoint", "parquet"] => (v.parse::<u64>(), Ok(1)),
            [v, "checkpoint", _, n, "parquet"] => (v.parse::<u64>(), n.parse::<usize>()),
            _ => continue,
        };
        let (Ok(checkpoint_version), Ok(parts)) = (checkpoint_version, parts) else {
            continue;
        };
        if checkpoint_version <= version {
            let found = by_version.entry(checkpoint_version).or_insert((parts, Vec::new()));
            found.1.push(path);
        }
    }
    Ok(by_version.into_iter().rev().find(|(_, (parts, paths))| paths.len() == *parts).map(|(v, (_, paths))| (v, paths)))
}

fn read_checkpoint_part(path: &Path, versions: &mut HashMap<String, i64>) -> Result<()> {
    let context = || format!("cannot read checkpoint {}", path.display());
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(File::open(path).with_context(context)?).with_context(context)?;
    let Some(txn_root) = builder.parquet_schema().root_schema().get_fields().iter().position(|f| f.name() == "txn")
    else {
        return Ok(());
    };
    let projection = ProjectionMask::roots(builder.parquet_schema(), [txn_root]);
    for batch in builder.with_projection(projection).build().with_context(context)? {
        let batch = batch.with_context(context)?;
        let txn = batch.column(0).as_struct_opt().ok_or_else(|| anyhow!("{}: txn is not a struct", path.display()))?;
        let (Some(app_ids), Some(txn_versions)) = (txn.column_by_name("appId"), txn.column_by_name("version")) else {
            return Err(anyhow!("{}: txn lacks appId or version", path.display()));
        };
        let app_ids =
            app_ids.as_string_opt::<i32>().ok_or_else(|| anyhow!("{}: appId is not a string", path.display()))?;
        let txn_versions = txn_versions
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| anyhow!("{}: txn version is not a long", path.display()))?;
        for row in (0..txn.len()).filter(|&row| txn.is_valid(row) && app_ids.is_valid(row)) {
            versions.insert(app_ids.value(row).to_string(), txn_versions.value(row));
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct Action {
    txn: Option<Txn>,
    add: Option<AddPath>,
    #[serde(rename = "commitInfo")]
    commit_info: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Deserialize)]
struct AddPath {
    path: String,
}

#[derive(Deserialize)]
struct Txn {
    #[serde(rename = "appId")]
    app_id: String,
    version: i64,
}

fn read_commit(path: &Path, versions: &mut HashMap<String, i64>) -> Result<()> {
    let file = File::open(path).with_context(|| format!("cannot read commit {}", path.display()))?;
    for (number, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read commit {}", path.display()))?;
        let action: Action = serde_json::from_str(&line)
            .with_context(|| format!("{}:{}: not a Delta action", path.display(), number + 1))?;
        if let Some(txn) = action.txn {
            versions.insert(txn.app_id, txn.version);
        }
    }
    Ok(())
}

/// The newest commit of the log in `log_dir`, if it has one.
pub fn latest_version(log_dir: &Path) -> Result<Option<u64>> {
    let entries = std::fs::read_dir(log_dir).with_context(|| format!("cannot list {}", log_dir.display()))?;
    let mut latest = None;
    for entry in entries {
        let name = entry?.file_name();
        let version = name.to_str().and_then(|n| n.strip_suffix(".json")).and_then(|v| v.parse::<u64>().ok());
        latest = latest.max(version);
    }
    Ok(latest)
}

/// One commit of a table, as far as ingest runs are concerned.
#[derive(Debug, Default)]
pub struct Commit {
    /// Its version in the table's log.
    pub version: u64,
    /// The run that made it (`kahuna.ingest_id` of its commit info).
    pub ingest_id: Option<String>,
    /// The names of the files it added.
    pub added: Vec<String>,
    /// The application transactions it set.
    pub app_ids: Vec<String>,
}

/// The commits `from..=to` of the log in `log_dir`, oldest first; a commit whose file the log's
/// clean-up removed is left out.
pub fn commits(log_dir: &Path, from: u64, to: u64, ingest_id_key: &str) -> Result<Vec<Commit>> {
    let mut out = Vec::new();
    for version in from..=to {
        let path = log_dir.join(format!("{version:020}.json"));
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read commit {}", path.display())),
        };
        let mut commit = Commit { version, ..Commit::default() };
        for (number, line) in BufReader::new(file).lines().enumerate() {
            let line = line.with_context(|| format!("cannot read commit {}", path.display()))?;
            let action: Action = serde_json::from_str(&line)
                .with_context(|| format!("{}:{}: not a Delta action", path.display(), number + 1))?;
            if let Some(txn) = action.txn {
                commit.app_ids.push(txn.app_id);
            }
            if let Some(add) = action.add {
                commit.added.push(file_name(&add.path).to_string());
            }
            if let Some(info) = action.commit_info {
                commit.ingest_id = info.get(ingest_id_key).and_then(|v| v.as_str()).map(str::to_string);
            }
        }
        out.push(commit);
    }
    Ok(out)
}

/// The last segment of a file's path in the table: unique (each writer names its files by a
/// UUID), and the same whether the path is percent-encoded or not.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warehouse::tables::Table;
    use crate::warehouse::{TableAppender, Warehouse};
    use deltalake::kernel::Transaction;

    /// Our one-pass reading must agree with delta-rs's own answer for every app id, before and
    /// after a checkpoint, with app ids moved forward by later commits and one known only from the
    /// checkpoint.
    #[tokio::test]
    async fn agrees_with_delta_rs_across_a_checkpoint() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let warehouse = Warehouse::new(dir.path());
        let txn = |id: &str, v: i64| Transaction::new(id, v);
        let commits = [
            vec![txn("a", 10), txn("b", 20), txn("d", 7)],
            vec![txn("a", 15)],
            vec![txn("c", 5), txn("b", 25)],
            vec![txn("a", 40)],
        ];
        let ids = ["a", "b", "c", "d", "never"];
        for (n, transactions) in commits.into_iter().enumerate() {
            let appender = TableAppender::open(&warehouse, Table::Ingests, "c1").await?;
            appender.commit(Vec::new(), Vec::new(), transactions, &format!("run{n}")).await?;
            if n == 1 {
                let table = warehouse.open(Table::Ingests.name()).await?.ok_or_else(|| anyhow!("no table"))?;
                deltalake::checkpoints::create_checkpoint(&table, None).await?;
            }
        }
        let table = warehouse.open(Table::Ingests.name()).await?.ok_or_else(|| anyhow!("no table"))?;
        let version = table.version().ok_or_else(|| anyhow!("no version"))? as u64;
        let log_dir = dir.path().join(Table::Ingests.name()).join("_delta_log");
        assert!(log_dir.join(format!("{:020}.checkpoint.parquet", 2)).exists(), "the test needs a checkpoint");
        let ours = latest_versions(&log_dir, version)?;
        assert_eq!(ours, HashMap::from([("a".into(), 40), ("b".into(), 25), ("c".into(), 5), ("d".into(), 7)]));
        for id in ids {
            let theirs = table.snapshot()?.transaction_version(table.log_store().as_ref(), id).await?;
            assert_eq!(ours.get(id).copied(), theirs, "app id {id}");
        }
        // As of the checkpoint's own version, nothing after it counts.
        assert_eq!(latest_versions(&log_dir, 2)?, HashMap::from([("a".into(), 15), ("b".into(), 20), ("d".into(), 7)]));
        Ok(())
    }
}
