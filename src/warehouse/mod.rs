//! The warehouse: one Delta Lake table per kind of row under one root folder, partitioned by
//! `cluster` and `date`. Appends are single commits carrying an application transaction per
//! source file (`kahuna-ingest/<cluster>/<file key>` at the byte offset read up to), so an
//! ingest killed before its commit leaves nothing visible and a re-run never appends twice.
//!
//! Delta commits are atomic per table, not across tables, so a run commits `logs`, `states` and
//! `rejects` first and `ingests` last, each commit naming the run (`kahuna.ingest_id`). Readers
//! see the rows of runs whose `ingests` commit landed, and nothing of the others, wherever their
//! commits sit ([`Warehouse::open_visible`]): a run killed between its commits, or one still
//! committing, shows nothing anywhere, even after other runs have committed above it. The run
//! that ingests all of a killed run's files again completes it (`kahuna.completes`); one that
//! ingests only some of them removes its rows and reads those files whole (`kahuna.abandons`).

mod spill;
pub use spill::Spilled;
pub mod stores;
pub mod tables;
mod transactions;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::compute::{BatchCoalescer, filter_record_batch, interleave_record_batch};
use datafusion::arrow::datatypes::{Int64Type, SchemaRef, TimestampMicrosecondType};
use datafusion::object_store::local::LocalFileSystem;
use datafusion::object_store::path::Path as ObjectPath;
use datafusion::object_store::prefix::PrefixStore;
use datafusion::object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutPayload, UpdateVersion};
use delta_kernel::expressions::Scalar;
use deltalake::TableProperty;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel as _;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, LogicalFileView, Remove, StructField, Transaction};
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use deltalake::parquet::basic::{Compression, Encoding, ZstdLevel};
use deltalake::parquet::file::properties::{EnabledStatistics, WriterProperties};
use deltalake::parquet::schema::types::ColumnPath;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::{DeltaTable, FilterLiteral, FilterOp, FilterValue};
use futures::{StreamExt as _, TryStreamExt};
use indexmap::IndexMap;
use url::Url;

use tables::{PARTITION_COLUMNS, Rows, Table};
use transactions::AppIds;

/// Parquet files are rolled at this size; `kahuna optimize` compacts to the same target.
const TARGET_FILE_BYTES: u64 = 128 << 20;

/// Commits between Delta checkpoints, for every table. Opening a table reads its last
/// checkpoint and replays each commit after it; at Delta's default of 100, a results table that
/// a nightly batch commits to nine times would replay some 50 commits on each open, most of
/// what a query spends recording its verdict.
const CHECKPOINT_INTERVAL: &str = "10";

/// JSON commits past a table's newest checkpoint that make an ingest run or `kahuna optimize`
/// write a new one. A run commits one transaction per file it read to every table, so a backfill
/// of months leaves a commit of megabytes that every session opening the table would parse
/// again; a checkpoint holds the same actions as columns, of which a reader reads only those it
/// needs.
const LONG_LOG_BYTES: u64 = 1 << 20;

/// Partitions (dates) a part writer keeps open: each holds its file and row group in memory
/// until finished (or, for `states`, rows held to be grouped), so a reader going through many
/// days (a month of daily captures, a year of rotated logs) would otherwise hold every day it
/// has seen. Rows of other dates are spilled to disk until the writer finishes ([`spill`]).
const MAX_OPEN_DATES: usize = 3;

#[derive(Clone, Debug)]
pub struct Warehouse {
    location: Location,
    /// Rooted at the warehouse: keys are `<table>/…`.
    store: Arc<dyn ObjectStore>,
}

#[derive(Clone, Debug)]
enum Location {
    /// A folder of this machine.
    Folder(PathBuf),
    /// A folder of an object store (`s3://bucket/path/`).
    Url(Url),
}

impl Warehouse {
    /// The warehouse in folder `root` of this machine.
    pub fn new(root: impl Into<PathBuf>) -> Warehouse {
        let root = root.into();
        let absolute = std::path::absolute(&root).unwrap_or_else(|_| root.clone());
        // A path object_store cannot name (not UTF-8, which `--warehouse` cannot be) holds nothing.
        let prefix = ObjectPath::from_absolute_path(&absolute)
            .unwrap_or_else(|_| ObjectPath::from(absolute.to_string_lossy().as_ref()));
        Warehouse {
            location: Location::Folder(root),
            store: Arc::new(PrefixStore::new(LocalFileSystem::new(), prefix)),
        }
    }

    /// The warehouse at `location`: a folder of this machine, or a URL of an object store
    /// (`s3://bucket/path`, with credentials and endpoint from the `AWS_*` environment variables
    /// as for the AWS tools). The store is asked for the warehouse's folder once, so that a
    /// bucket that does not exist or denies access is said at once, in a line.
    pub async fn at(location: &str) -> Result<Warehouse> {
        let url = match Url::parse(location) {
            Ok(url) if url.scheme() == "file" => {
                let path =
                    url.to_file_path().map_err(|()| anyhow::anyhow!("{location}: not a path of this machine"))?;
                return Ok(Warehouse::new(path));
            }
            // A Windows drive letter parses as a scheme; a URL's scheme has more than one letter.
            Ok(url) if url.scheme().len() > 1 => url,
            _ => return Ok(Warehouse::new(location)),
        };
        if !stores::is_s3(&url) {
            bail!("{location}: a warehouse is a folder or an s3:// URL (an S3-compatible object store)");
        }
        let bucket = url.host_str().unwrap_or_default().to_string();
        if bucket.is_empty() {
            bail!("{location}: give the bucket, as s3://bucket/path");
        }
        let mut url = url;
        if !url.path().ends_with('/') {
            url.set_path(&format!("{}/", url.path()));
        }
        let store = stores::store_for(&url).with_context(|| format!("{location}: cannot reach the object store"))?;
        let warehouse = Warehouse { location: Location::Url(url), store };
        let asked = tokio::time::timeout(STORE_ANSWER, warehouse.store.list_with_delimiter(None)).await;
        let reason = match asked {
            Ok(Ok(_)) => return Ok(warehouse),
            Err(_) => format!("no answer in {} s (is AWS_ENDPOINT_URL right?)", STORE_ANSWER.as_secs()),
            Ok(Err(e)) => refusal(&bucket, &e),
        };
        bail!("warehouse {location}: {reason}")
    }

    /// The folder of this machine it is in, if it is in one.
    pub fn folder(&self) -> Option<&Path> {
        match &self.location {
            Location::Folder(root) => Some(root),
            Location::Url(_) => None,
        }
    }

    /// Its object store, rooted at the warehouse.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The object store's own URL and the warehouse's folder in it (`s3://bucket`,
    /// `path/to/warehouse`): what a Parquet scan of its files names.
    pub fn store_url_and_folder(&self) -> Result<(String, String)> {
        match &self.location {
            Location::Folder(root) => {
                let absolute = std::path::absolute(root)?;
                Ok(("file:///".to_string(), absolute.display().to_string().trim_matches('/').to_string()))
            }
            Location::Url(url) => {
                Ok((format!("{}://{}", url.scheme(), url.authority()), url.path().trim_matches('/').to_string()))
            }
        }
    }

    pub(crate) fn table_url(&self, table: &str) -> Result<Url> {
        match &self.location {
            Location::Folder(root) => {
                std::fs::create_dir_all(root.join(table))
                    .with_context(|| format!("cannot create {}", root.join(table).display()))?;
                let dir = std::fs::canonicalize(root.join(table))?;
                Url::from_directory_path(&dir).map_err(|()| anyhow::anyhow!("{}: not a usable path", dir.display()))
            }
            Location::Url(url) => Ok(url.join(&format!("{table}/"))?),
        }
    }

    /// The Delta log of table `name`.
    pub fn log_dir(&self, name: &str) -> transactions::LogDir {
        transactions::LogDir::new(self.store.clone(), name, &self.to_string())
    }

    /// The newest commit of each table: what a reader that saw them all has seen of every write.
    pub async fn versions(&self) -> Result<Vec<(String, Option<u64>)>> {
        let mut versions = Vec::new();
        for name in self.table_names().await? {
            let version = transactions::latest_version(&self.log_dir(&name)).await?;
            versions.push((name, version));
        }
        Ok(versions)
    }

    /// Whether table `name` exists.
    pub async fn has_table(&self, name: &str) -> Result<bool> {
        self.log_dir(name).exists().await
    }

    /// The Delta table of `name` if it exists.
    pub async fn open(&self, name: &str) -> Result<Option<DeltaTable>> {
        if !self.has_table(name).await? {
            return Ok(None);
        }
        let table = deltalake::open_table(self.table_url(name)?)
            .await
            .with_context(|| format!("cannot open table {name} in {self}"))?;
        Ok(Some(table))
    }

    /// Waits until no other ingest writes this warehouse, then holds it until the lock is
    /// released or dropped. In a folder the lock is the operating system's (`flock` on
    /// `.ingest.lock`), so a holder that crashes or is killed lets go of it with its process; in
    /// an object store it is a lease ([`Lease`]), which a holder that stops renewing it loses.
    pub async fn lock_for_ingest(&self) -> Result<IngestLock> {
        let Location::Folder(root) = &self.location else {
            return Ok(IngestLock::Lease(Lease::take(self).await?));
        };
        std::fs::create_dir_all(root).with_context(|| format!("cannot create {}", root.display()))?;
        let path = root.join(LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(IngestLock::File(file)),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if !told {
                        eprintln!("waiting for another ingest into {self} to finish");
                        told = true;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("cannot lock {}", path.display()));
                }
            }
        }
    }

    /// Runs whose `ingests` commit landed, among the latest ones, and the killed runs they
    /// completed or abandoned. Every run commits to every table, so a table's recent commits
    /// can only belong to runs among these or to unfinished ones.
    pub async fn completed_ingests(&self) -> Result<HashSet<String>> {
        // From the log's newest commits alone: opening the table would replay all of its log.
        let Some(latest) = transactions::latest_version(&self.log_dir(Table::Ingests.name())).await? else {
            return Ok(HashSet::new());
        };
        let commits = self.recent_commits(Table::Ingests.name(), latest, AppIds::Skip).await?;
        let settled = |commit: &transactions::Commit| {
            let ids = [COMPLETES_KEY, ABANDONS_KEY].into_iter().filter_map(|key| commit.info.get(key));
            let ids = ids.filter_map(|v| v.as_array()).flatten();
            ids.filter_map(|id| id.as_str().map(str::to_string)).collect::<Vec<_>>()
        };
        Ok(commits.iter().flat_map(|commit| commit.ingest_id.clone().into_iter().chain(settled(commit))).collect())
    }

    /// The table as readers should see it: at its newest commit that is not the work of an
    /// unfinished ingest run, and what older unfinished runs wrote below that commit, which
    /// readers leave out.
    pub async fn open_visible(
        &self,
        name: &str,
        completed: &HashSet<String>,
    ) -> Result<Option<(DeltaTable, Unfinished)>> {
        let Some(mut table) = self.open(name).await? else { return Ok(None) };
        let unfinished = self.unfinished(name, &table, completed).await?;
        if let (Some(latest), true) = (table.version(), unfinished.newest > 0) {
            table.load_version(latest.saturating_sub(unfinished.newest)).await?;
        }
        Ok(Some((table, unfinished)))
    }

    /// The work of unfinished ingest runs among `table`'s recent commits (none for `ingests`
    /// itself, which a run commits last).
    async fn unfinished(&self, name: &str, table: &DeltaTable, completed: &HashSet<String>) -> Result<Unfinished> {
        let mut unfinished = Unfinished::default();
        let Some(latest) = table.version() else { return Ok(unfinished) };
        if name == Table::Ingests.name() {
            return Ok(unfinished);
        }
        let commits = self.recent_commits(name, latest, AppIds::Skip).await?;
        let of_unfinished = |c: &transactions::Commit| c.ingest_id.as_ref().is_some_and(|id| !completed.contains(id));
        unfinished.newest = commits.iter().rev().take_while(|c| of_unfinished(c)).count() as u64;
        for commit in commits.iter().rev().skip(unfinished.newest as usize).filter(|c| of_unfinished(c)) {
            let id = commit.ingest_id.clone().unwrap_or_default();
            if !unfinished.runs.contains(&id) {
                unfinished.runs.push(id);
            }
            unfinished.files.extend(commit.added.iter().cloned());
        }
        Ok(unfinished)
    }

    /// The [`RECENT_COMMITS`] newest commits of table `name`, whose newest is `latest`.
    async fn recent_commits(&self, name: &str, latest: u64, app_ids: AppIds) -> Result<Vec<transactions::Commit>> {
        let from = latest.saturating_sub(RECENT_COMMITS as u64 - 1);
        transactions::commits(&self.log_dir(name), from, latest, INGEST_ID_KEY, app_ids).await
    }

    /// The unfinished runs among the recent commits of every table: what each wrote, and the
    /// source files it read (their application-transaction ids).
    pub async fn killed_runs(&self, completed: &HashSet<String>) -> Result<Vec<KilledRun>> {
        let mut runs: Vec<KilledRun> = Vec::new();
        for table in Table::ALL.into_iter().filter(|t| *t != Table::Ingests) {
            let Some(latest) = transactions::latest_version(&self.log_dir(table.name())).await? else { continue };
            for commit in self.recent_commits(table.name(), latest, AppIds::Read).await? {
                let Some(id) = commit.ingest_id.clone().filter(|id| !completed.contains(id)) else { continue };
                let run = match runs.iter().position(|r| r.id == id) {
                    Some(index) => &mut runs[index],
                    None => {
                        runs.push(KilledRun { id, files: HashSet::new(), commits: Vec::new() });
                        runs.last_mut().expect("just pushed")
                    }
                };
                run.files.extend(commit.app_ids.iter().filter(|a| a.starts_with(FILE_APP_PREFIX)).cloned());
                run.commits.push((table, commit));
            }
        }
        runs.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(runs)
    }

    /// The Delta table of `table`, created empty with its schema on first use.
    pub async fn open_or_create(&self, table: Table) -> Result<DeltaTable> {
        match self.open(table.name()).await? {
            Some(open) => Ok(open),
            None => self.create(table, Vec::new()).await,
        }
    }

    /// Creates `table` with `actions` (files written by [`PartWriter::for_new_table`], their
    /// transactions) in its first commit, so that it is never seen without them. A table that
    /// exists already (another process created it first) is left as it is.
    pub async fn create(&self, table: Table, actions: Vec<Action>) -> Result<DeltaTable> {
        let url = self.table_url(table.name())?;
        let columns = table
            .table_schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().try_into_kernel())
            .collect::<Result<Vec<StructField>, _>>()?;
        let created = DeltaTable::try_from_url(url)
            .await?
            .create()
            .with_table_name(table.name())
            .with_columns(columns)
            .with_partition_columns(PARTITION_COLUMNS)
            .with_configuration(Self::table_properties())
            .with_actions(actions)
            .with_save_mode(SaveMode::Ignore)
            .await
            .with_context(|| format!("cannot create table {} in {self}", table.name()))?;
        Ok(created)
    }

    /// The table properties every table is created with. Checkpoints keep the files' statistics
    /// as columns, not JSON text: a reader would otherwise parse the text of every row of the
    /// checkpoint, including the rows of the ingest runs' transactions.
    pub(crate) fn table_properties() -> HashMap<String, Option<String>> {
        let properties = [
            (TableProperty::CheckpointInterval, CHECKPOINT_INTERVAL),
            (TableProperty::CheckpointWriteStatsAsStruct, "true"),
            (TableProperty::CheckpointWriteStatsAsJson, "false"),
        ];
        properties.into_iter().map(|(key, value)| (key.as_ref().to_string(), Some(value.to_string()))).collect()
    }

    /// `table` with those of [`Warehouse::table_properties`] it lacks, set in a commit of their
    /// own on a table made before they were. A property an operator chose is left as it is.
    pub(crate) async fn with_table_properties(table: DeltaTable) -> Result<DeltaTable> {
        let configuration = table.snapshot()?.metadata().configuration().clone();
        let lacking: HashMap<String, String> = Self::table_properties()
            .into_iter()
            .filter(|(key, _)| !configuration.contains_key(key))
            .filter_map(|(key, value)| Some((key, value?)))
            .collect();
        if lacking.is_empty() {
            return Ok(table);
        }
        Ok(table.set_tbl_properties().with_properties(lacking).await?)
    }

    /// Writes a checkpoint of table `name` at its newest commit when the JSON commits past its
    /// last one hold more than [`LONG_LOG_BYTES`]. Says whether it wrote one.
    pub async fn checkpoint_if_long(&self, name: &str) -> Result<bool> {
        let Some((latest, bytes)) = transactions::uncheckpointed(&self.log_dir(name)).await? else { return Ok(false) };
        if bytes <= LONG_LOG_BYTES {
            return Ok(false);
        }
        deltalake::checkpoints::create_checkpoint_from_table_url_and_cleanup(self.table_url(name)?, latest, None, None)
            .await
            .with_context(|| format!("cannot write a checkpoint of table {name} in {self}"))?;
        Ok(true)
    }

    /// Names of the tables present, sorted.
    pub async fn table_names(&self) -> Result<Vec<String>> {
        let folders = match self.store.list_with_delimiter(None).await {
            Ok(listed) => listed.common_prefixes,
            Err(datafusion::object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot list {self}")),
        };
        let names = folders.iter().filter_map(|folder| folder.filename()).filter(|name| !name.starts_with('.'));
        let present =
            names.map(|name| async move { Ok::<_, anyhow::Error>(self.has_table(name).await?.then_some(name)) });
        let mut names: Vec<String> =
            futures::future::try_join_all(present).await?.into_iter().flatten().map(str::to_string).collect();
        names.sort();
        Ok(names)
    }

    /// Compacts small files of every table and removes files no version still needs after
    /// `retention` (Delta's own default is a week; readers of older snapshots need them).
    /// A table that holds commits of an unfinished ingest run is left as it is: compacting would
    /// merge that run's rows into files of a commit readers cannot tell from it.
    /// A table made by an older version gets the properties new ones are created with.
    /// Tables of cluster sessions whose client ended without removing them go after the same
    /// `retention`.
    pub async fn optimize(&self, retention: Duration) -> Result<Vec<String>> {
        let completed = self.completed_ingests().await?;
        let mut report = self.remove_sessions_left(retention).await?;
        for name in self.table_names().await? {
            let Some(table) = self.open(&name).await? else { continue };
            let unfinished = self.unfinished(&name, &table, &completed).await?;
            if unfinished.newest > 0 || !unfinished.runs.is_empty() {
                report.push(format!(
                    "{name}: left as it is: it holds the commits of an unfinished ingest run (run that ingest again to finish it)"
                ));
                continue;
            }
            let table = Self::with_table_properties(table)
                .await
                .with_context(|| format!("cannot set the properties of {name}"))?;
            let known = Table::ALL.into_iter().find(|t| t.name() == name);
            let (table, metrics) =
                compact(table, known, &[]).await.with_context(|| format!("cannot optimize {name}"))?;
            let retention_chrono = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::days(7));
            let (_, vacuumed) = table
                .vacuum()
                .with_retention_period(retention_chrono)
                .with_enforce_retention_duration(false)
                .await
                .with_context(|| format!("cannot vacuum {name}"))?;
            let checkpoint = match self.checkpoint_if_long(&name).await? {
                true => ", checkpoint written",
                false => "",
            };
            report.push(format!(
                "{name}: {} files compacted into {}, {} unreferenced files removed{checkpoint}",
                metrics.num_files_removed,
                metrics.num_files_added,
                vacuumed.files_deleted.len()
            ));
        }
        Ok(report)
    }
}

impl Warehouse {
    /// Removes the `.session-*` folders (a cluster session's own tables) none of whose files
    /// was written within `retention`: a client killed mid-session leaves its folder behind.
    async fn remove_sessions_left(&self, retention: Duration) -> Result<Vec<String>> {
        let listed = match self.store.list_with_delimiter(None).await {
            Ok(listed) => listed.common_prefixes,
            Err(datafusion::object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot list {self}")),
        };
        let before = chrono::Utc::now() - chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
        let mut removed = 0;
        for folder in listed.iter().filter(|f| f.filename().is_some_and(|name| name.starts_with(".session-"))) {
            let files: Vec<_> = self.store.list(Some(folder)).try_collect().await?;
            if files.iter().any(|file| file.last_modified >= before) {
                continue;
            }
            self.remove(folder).await?;
            removed += 1;
        }
        Ok(match removed {
            0 => Vec::new(),
            n => vec![format!("{n} cluster sessions' tables removed (their clients ended without removing them)")],
        })
    }

    /// Removes `folder` of the warehouse and everything in it.
    pub async fn remove(&self, folder: &ObjectPath) -> Result<()> {
        let listed = self.store.list(Some(folder)).map_ok(|file| file.location).boxed();
        self.store
            .delete_stream(listed)
            .try_collect::<Vec<_>>()
            .await
            .with_context(|| format!("cannot remove {self}/{folder}"))?;
        if let Some(root) = self.folder() {
            // A folder of this machine keeps its emptied subfolders.
            let _ = std::fs::remove_dir_all(root.join(folder.as_ref()));
        }
        Ok(())
    }

    /// Compacts `cluster`'s partitions of the ingest tables where one holds more than
    /// [`SMALL_FILES`] small files: what an ingest of many small files, or many nightly runs,
    /// leave. A table that holds an unfinished run is left alone, as by [`Warehouse::optimize`].
    /// Replaced files stay for readers of older snapshots until `kahuna optimize` vacuums them.
    pub async fn compact_small_files(&self, cluster: &str) -> Result<Vec<String>> {
        // An ingest's commits and a compaction's would conflict.
        let lock = self.lock_for_ingest().await?;
        let completed = self.completed_ingests().await?;
        let filters = [("cluster", FilterOp::Eq, FilterValue::Scalar(cluster))];
        let mut report = Vec::new();
        for table in Table::ALL {
            let name = table.name();
            let Some(delta) = self.open(name).await? else { continue };
            let files: Vec<_> = delta.get_active_add_actions_by_partitions(&filters).try_collect().await?;
            let mut small_by_date: HashMap<Option<String>, usize> = HashMap::new();
            for file in files.iter().filter(|f| (f.size() as u64) < TARGET_FILE_BYTES / 4) {
                *small_by_date.entry(file.partition_values_map().get("date").cloned().flatten()).or_default() += 1;
            }
            if small_by_date.values().all(|&n| n <= SMALL_FILES) {
                continue;
            }
            let unfinished = self.unfinished(name, &delta, &completed).await?;
            if unfinished.newest > 0 || !unfinished.runs.is_empty() {
                continue;
            }
            let (_, metrics) =
                compact(delta, Some(table), &filters).await.with_context(|| format!("cannot compact {name}"))?;
            report.push(format!(
                "{name}: {} small files compacted into {}",
                metrics.num_files_removed, metrics.num_files_added
            ));
        }
        lock.release().await?;
        Ok(report)
    }
}

/// Small files (under a quarter of the target size) a partition may hold before an ingest
/// compacts it.
const SMALL_FILES: usize = 8;

/// Delta OPTIMIZE of the partitions `filters` select, to files of the target size written
/// with the table's own settings.
async fn compact(
    table: DeltaTable,
    known: Option<Table>,
    filters: &[FilterLiteral<'_>],
) -> Result<(DeltaTable, deltalake::operations::optimize::Metrics)> {
    Ok(table
        .optimize()
        .with_filters(filters)
        .with_target_size(NonZeroU64::new(TARGET_FILE_BYTES).unwrap_or(NonZeroU64::MIN))
        .with_writer_properties(writer_properties(known))
        .await?)
}

/// One ingest's hold on a warehouse ([`Warehouse::lock_for_ingest`]), let go when released
/// or dropped.
pub enum IngestLock {
    File(std::fs::File),
    Lease(Lease),
}

impl IngestLock {
    /// Lets go of the warehouse; a lease is removed from the store before this returns.
    pub async fn release(self) -> Result<()> {
        match self {
            IngestLock::File(_) => Ok(()),
            IngestLock::Lease(lease) => lease.release().await,
        }
    }
}

/// The file of the ingest lock, in the warehouse's folder.
const LOCK: &str = ".ingest.lock";

/// An object store has no lock that ends with its holder's process: the holder writes
/// [`LOCK`] where none is (a conditional put) and rewrites it every quarter of [`LEASE`];
/// one left unrewritten for longer (its holder was killed) is taken over, again conditionally,
/// so that of two takers one wins.
pub struct Lease {
    store: Arc<dyn ObjectStore>,
    renewing: tokio::task::JoinHandle<()>,
}

/// How long a lease lasts unrenewed. Against the store's clock, so a clock ahead of it by this
/// much would take a live lease.
const LEASE: Duration = Duration::from_secs(60);

/// How long the object store has to answer a warehouse's first request.
const STORE_ANSWER: Duration = Duration::from_secs(20);

impl Lease {
    async fn take(warehouse: &Warehouse) -> Result<Lease> {
        let store = warehouse.store.clone();
        let path = ObjectPath::from(LOCK);
        let holder = || PutPayload::from(format!("ingest of process {}\n", std::process::id()));
        let cannot = |e: datafusion::object_store::Error| anyhow::anyhow!("cannot lock {warehouse} for ingest: {e}");
        let mut told = false;
        loop {
            let taken = match store.put_opts(&path, holder(), PutMode::Create.into()).await {
                Ok(put) => Some(put),
                Err(datafusion::object_store::Error::AlreadyExists { .. }) => match store.head(&path).await {
                    Ok(held) if chrono::Utc::now() - held.last_modified > chrono::Duration::from_std(LEASE)? => {
                        let version = UpdateVersion { e_tag: held.e_tag, version: held.version };
                        match store.put_opts(&path, holder(), PutMode::Update(version).into()).await {
                            Ok(put) => Some(put),
                            Err(datafusion::object_store::Error::Precondition { .. }) => None,
                            Err(e) => return Err(cannot(e)),
                        }
                    }
                    Ok(_) | Err(datafusion::object_store::Error::NotFound { .. }) => None,
                    Err(e) => return Err(cannot(e)),
                },
                Err(e) => return Err(cannot(e)),
            };
            if let Some(put) = taken {
                let renewing = tokio::spawn(Self::renew(store.clone(), path, put, warehouse.to_string()));
                return Ok(Lease { store, renewing });
            }
            if !told {
                eprintln!("waiting for another ingest into {warehouse} to finish");
                told = true;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn renew(
        store: Arc<dyn ObjectStore>,
        path: ObjectPath,
        mut put: datafusion::object_store::PutResult,
        warehouse: String,
    ) {
        loop {
            tokio::time::sleep(LEASE / 4).await;
            let version = UpdateVersion { e_tag: put.e_tag.clone(), version: put.version.clone() };
            let payload = PutPayload::from(format!("ingest of process {}\n", std::process::id()));
            match store.put_opts(&path, payload, PutMode::Update(version).into()).await {
                Ok(renewed) => put = renewed,
                Err(e) => {
                    eprintln!("warning: the ingest lock of {warehouse} could not be renewed: {e}");
                    return;
                }
            }
        }
    }

    async fn release(self) -> Result<()> {
        self.renewing.abort();
        self.store.delete(&ObjectPath::from(LOCK)).await.context("cannot remove the ingest lock")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewing.abort();
    }
}

/// Why an object store refused a request, in a line. A list request's error is a generic
/// one carrying the HTTP answer (status, then the whole XML body), so it is read for the status.
fn refusal(bucket: &str, error: &datafusion::object_store::Error) -> String {
    use datafusion::object_store::Error;
    let text = error.to_string();
    let missing =
        matches!(error, Error::NotFound { .. }) || text.contains("404 Not Found") || text.contains("NoSuchBucket");
    let denied = matches!(error, Error::PermissionDenied { .. } | Error::Unauthenticated { .. })
        || text.contains("403 Forbidden")
        || text.contains("401 Unauthorized");
    if missing {
        format!("bucket {bucket} does not exist")
    } else if denied {
        format!("bucket {bucket} denies access to these credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE, …)")
    } else {
        text.lines().next().unwrap_or_default().to_string()
    }
}

impl std::fmt::Display for Warehouse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Location::Folder(root) => write!(f, "{}", root.display()),
            Location::Url(url) => write!(f, "{}", url.as_str().trim_end_matches('/')),
        }
    }
}

/// What readers leave out of a table: the work of ingest runs whose `ingests` commit has not
/// landed (a run killed between its commits, or one still committing).
#[derive(Debug, Default)]
pub struct Unfinished {
    /// How many of the table's newest commits are such work: readers open it before them.
    pub newest: u64,
    /// The runs of such commits below a finished one, and the files they added.
    pub runs: Vec<String>,
    pub files: HashSet<String>,
}

/// What a run does with the killed runs before it: it completes those whose every file it
/// reads again (their rows become visible with its own), and abandons those of whose files it
/// reads only some (it removes their rows and reads those files again).
#[derive(Debug, Default)]
pub struct KilledRuns {
    pub completes: Vec<String>,
    pub abandons: Vec<String>,
}

impl KilledRuns {
    fn is_empty(&self) -> bool {
        self.completes.is_empty() && self.abandons.is_empty()
    }
}

/// An ingest run killed before its `ingests` commit, as its commits to the other tables show it.
#[derive(Debug)]
pub struct KilledRun {
    pub id: String,
    /// The application-transaction ids of the source files it read.
    pub files: HashSet<String>,
    commits: Vec<(Table, transactions::Commit)>,
}

/// Zstd at a low level, no dictionaries where they would not pay, delta-encoded times and no
/// statistics on free text: the settings that keep encoding fast enough to follow the parser.
/// The writer keeps one open row group per partition in memory (and a part writer of `states`
/// up to a row group of rows per open date, to group them).
pub fn writer_properties(table: Option<Table>) -> WriterProperties {
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap_or_default()))
        .set_max_row_group_row_count(Some(tables::ROW_GROUP_ROWS));
    // A nested column's leaf is named by its dotted path (`metric_values.list.element`).
    let path = |column: &str| ColumnPath::new(column.split('.').map(str::to_string).collect());
    if let Some(table) = table {
        for column in table.columns_without_dictionary() {
            builder = builder.set_column_dictionary_enabled(path(column), false);
        }
        for column in table.delta_encoded_columns() {
            builder = builder.set_column_encoding(path(column), Encoding::DELTA_BINARY_PACKED);
        }
        for column in table.columns_without_statistics() {
            builder = builder.set_column_statistics_enabled(path(column), EnabledStatistics::None);
        }
    }
    builder.build()
}

/// How far back to look for commits of unfinished runs.
const RECENT_COMMITS: usize = 16;

const INGEST_ID_KEY: &str = "kahuna.ingest_id";
/// The killed runs an ingest run completed, in its `ingests` commit.
const COMPLETES_KEY: &str = "kahuna.completes";
/// The killed runs whose rows an ingest run removed, in its `ingests` commit.
const ABANDONS_KEY: &str = "kahuna.abandons";
const FILE_APP_PREFIX: &str = "kahuna-ingest/";

/// The application-transaction id of one source file in one cluster.
pub fn file_app_id(cluster: &str, file_key: &str) -> String {
    format!("{FILE_APP_PREFIX}{cluster}/{file_key}")
}

/// How far each table holds the file `app_id` ([`TableAppender::ingested_up_to`]).
pub fn held_by_tables(appenders: &[TableAppender], app_id: &str) -> Vec<Option<u64>> {
    appenders.iter().map(|appender| appender.ingested_up_to(app_id)).collect()
}

/// Appends to one table during an ingest; nothing is visible until [`TableAppender::commit`].
/// Rows go through [`PartWriter`]s, one per thread, so that Parquet encoding runs on every core.
pub struct TableAppender {
    table: Table,
    delta: DeltaTable,
    cluster: String,
    /// Bytes held of each source file, by app id, as of the version opened.
    held: HashMap<String, i64>,
    log_dir: transactions::LogDir,
    /// What the next commit undoes of killed runs this one abandons: their files, the files
    /// they rewrote (back as they were), and the transactions they moved, back to where they
    /// stood before them (-1: not held).
    abandoned_files: Vec<Remove>,
    restored_files: Vec<LogicalFileView>,
    abandoned_transactions: HashMap<String, i64>,
}

impl TableAppender {
    pub async fn open(warehouse: &Warehouse, table: Table, cluster: &str) -> Result<TableAppender> {
        let delta = warehouse.open_or_create(table).await?;
        let log_dir = warehouse.log_dir(table.name());
        let version = delta.version().unwrap_or(0);
        let held = transactions::latest_versions(&log_dir, version)
            .await
            .with_context(|| format!("cannot read the ingest transactions of table {}", table.name()))?;
        Ok(TableAppender {
            table,
            delta,
            cluster: cluster.to_string(),
            held,
            log_dir,
            abandoned_files: Vec::new(),
            restored_files: Vec::new(),
            abandoned_transactions: HashMap::new(),
        })
    }

    /// Undoes in this table what the killed `runs` wrote: the next commit removes their files
    /// and moves each transaction they set back to where it stood before the oldest of them;
    /// until then this appender already plans from there.
    pub async fn abandon(&mut self, runs: &[KilledRun]) -> Result<()> {
        let mut commits: Vec<&transactions::Commit> =
            runs.iter().flat_map(|run| &run.commits).filter(|(t, _)| *t == self.table).map(|(_, c)| c).collect();
        commits.sort_by_key(|commit| commit.version);
        let mut added = HashSet::new();
        for commit in &commits {
            let before = match commit.version.checked_sub(1) {
                Some(version) => transactions::latest_versions(&self.log_dir, version).await?,
                None => HashMap::new(),
            };
            for app_id in &commit.app_ids {
                if !self.abandoned_transactions.contains_key(app_id) {
                    let held = before.get(app_id).copied().unwrap_or(-1);
                    self.abandoned_transactions.insert(app_id.clone(), held);
                    self.held.insert(app_id.clone(), held);
                }
            }
            added.extend(commit.added.iter().map(String::as_str));
        }
        // The files they removed (rewritten without rows they superseded) and no killed run
        // added: each as it stood before the commit that removed it.
        for commit in &commits {
            let removed: HashSet<&str> =
                commit.removed.iter().map(String::as_str).filter(|name| !added.contains(name)).collect();
            let Some(before) = commit.version.checked_sub(1).filter(|_| !removed.is_empty()) else { continue };
            let mut earlier = self.delta.clone();
            earlier.load_version(before).await?;
            let files: Vec<_> = earlier.get_active_add_actions_by_partitions(&[]).try_collect().await?;
            let name = |f: &LogicalFileView| transactions::file_name(f.path().as_ref()).to_string();
            self.restored_files.extend(files.into_iter().filter(|f| removed.contains(name(f).as_str())));
        }
        if added.is_empty() {
            return Ok(());
        }
        let files: Vec<_> = self.delta.get_active_add_actions_by_partitions(&[]).try_collect().await?;
        for file in files.iter().filter(|f| added.contains(transactions::file_name(f.path().as_ref()))) {
            self.abandoned_files.push(file.remove_action(true));
        }
        Ok(())
    }

    /// How far this table holds each source file, as the transactions that say so.
    pub fn transactions(&self) -> Vec<Transaction> {
        self.held.iter().map(|(app_id, &offset)| Transaction::new(app_id, offset)).collect()
    }

    /// How far this table already holds the file with `app_id`, in bytes of the file.
    pub fn ingested_up_to(&self, app_id: &str) -> Option<u64> {
        self.held.get(app_id).and_then(|&v| u64::try_from(v).ok())
    }

    /// A writer of new Parquet files for this table; its files count once committed.
    pub fn part_writer(&self) -> Result<PartWriter> {
        Ok(PartWriter::new(self.table, RecordBatchWriter::for_table(&self.delta)?, &self.cluster))
    }

    pub fn table(&self) -> Table {
        self.table
    }

    /// One commit: every file the part writers wrote plus one transaction per source file, so
    /// this table says exactly how far it holds each; and the files it replaces, if any.
    pub async fn commit(
        &self,
        adds: Vec<Add>,
        removes: Vec<Remove>,
        transactions: Vec<Transaction>,
        ingest_id: &str,
    ) -> Result<Option<i64>> {
        self.commit_completing(adds, removes, transactions, ingest_id, &KilledRuns::default()).await
    }

    /// [`commit`](Self::commit), naming the killed runs this one completes and those it
    /// abandons: the last commit of a run, to `ingests`. What [`abandon`](Self::abandon)
    /// undoes goes in every commit.
    pub async fn commit_completing(
        &self,
        adds: Vec<Add>,
        mut removes: Vec<Remove>,
        mut transactions: Vec<Transaction>,
        ingest_id: &str,
        killed: &KilledRuns,
    ) -> Result<Option<i64>> {
        removes.extend(self.abandoned_files.iter().cloned());
        // A file given back and rewritten in this same commit is neither given back nor removed.
        let removed: HashSet<String> = removes.iter().map(|r| transactions::file_name(&r.path).to_string()).collect();
        let (rewritten, restored): (Vec<_>, Vec<_>) =
            (self.restored_files.iter()).partition(|f| removed.contains(transactions::file_name(f.path().as_ref())));
        let rewritten: HashSet<String> =
            rewritten.iter().map(|f| transactions::file_name(f.path().as_ref()).to_string()).collect();
        removes.retain(|r| !rewritten.contains(transactions::file_name(&r.path)));
        // delta-rs 1.1 has no other public way from a file of an earlier version to its action.
        #[allow(deprecated)]
        let restored = restored.into_iter().map(|f| Action::Add(f.add_action()));
        let set: HashSet<&str> = transactions.iter().map(|t| t.app_id.as_str()).collect();
        let undone: Vec<Transaction> = (self.abandoned_transactions.iter())
            .filter(|(app_id, _)| !set.contains(app_id.as_str()))
            .map(|(app_id, &held)| Transaction::new(app_id, held))
            .collect();
        transactions.extend(undone);
        if adds.is_empty()
            && removes.is_empty()
            && transactions.is_empty()
            && killed.is_empty()
            && self.restored_files.is_empty()
        {
            return Ok(None);
        }
        let actions: Vec<Action> =
            adds.into_iter().map(Action::Add).chain(restored).chain(removes.into_iter().map(Action::Remove)).collect();
        let mut metadata = HashMap::from([(INGEST_ID_KEY.to_string(), serde_json::json!(ingest_id))]);
        for (key, ids) in [(COMPLETES_KEY, &killed.completes), (ABANDONS_KEY, &killed.abandons)] {
            if !ids.is_empty() {
                metadata.insert(key.to_string(), serde_json::json!(ids));
            }
        }
        let properties =
            CommitProperties::default().with_application_transactions(transactions).with_metadata(metadata);
        let operation = DeltaOperation::Write {
            mode: SaveMode::Append,
            partition_by: Some(PARTITION_COLUMNS.map(String::from).to_vec()),
            predicate: None,
        };
        let snapshot = self.delta.snapshot()?;
        let committed = CommitBuilder::from(properties)
            .with_actions(actions)
            .build(Some(snapshot), self.delta.log_store(), operation)
            .await
            .with_context(|| format!("cannot commit to table {}", self.table.name()))?;
        Ok(Some(committed.version() as i64))
    }

    /// The `states` files of this cluster holding the unterminated rows named in `rows` (by
    /// date, then [`StartKey`], with how many), rewritten without them: the removes and adds of
    /// the commit whose rows replace them. Files without such a row are left alone.
    pub async fn without_unterminated(
        &self,
        rows: &BTreeMap<i32, HashMap<StartKey, usize>>,
    ) -> Result<(Vec<Remove>, Vec<Add>)> {
        let (mut removes, mut writer) = (Vec::new(), self.part_writer()?);
        if rows.is_empty() || self.delta.version().is_none() {
            return Ok((removes, writer.finish().await?));
        }
        // The files as the next commit leaves them: without those it abandons, with those it
        // gives back.
        let abandoned: HashSet<&str> = self.abandoned_files.iter().map(|r| transactions::file_name(&r.path)).collect();
        let active: Vec<_> = self.delta.get_active_add_actions_by_partitions(&[]).try_collect().await?;
        let active = active.into_iter().filter(|f| !abandoned.contains(transactions::file_name(f.path().as_ref())));
        let files: Vec<LogicalFileView> = active.chain(self.restored_files.iter().cloned()).collect();
        let store = self.delta.log_store().object_store(None);
        let mut left = rows.clone();
        for file in files {
            let partition = file.partition_values_map();
            let value = |column: &str| partition.get(column).cloned().flatten();
            if value("cluster").as_deref() != Some(self.cluster.as_str()) {
                continue;
            }
            let Some(date) = value("date").and_then(|d| parse_date_days(&d)) else { continue };
            let Some(left) = left.get_mut(&date).filter(|rows| rows.values().any(|n| *n > 0)) else { continue };
            let bytes = store.get(&file.object_store_path()).await?.bytes().await?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()?;
            let mut kept = Vec::new();
            let mut dropped = 0;
            for batch in reader {
                let batch = batch?;
                let keep = unterminated_rows_kept(&batch, left)?;
                dropped += keep.false_count();
                kept.push(filter_record_batch(&batch, &keep)?);
            }
            if dropped == 0 {
                continue;
            }
            for batch in kept.into_iter().filter(|b| b.num_rows() > 0) {
                writer.write_batch(batch, date).await?;
            }
            removes.push(file.remove_action(true));
        }
        Ok((removes, writer.finish().await?))
    }
}

/// A `states` row's start: host (NULL in a merged file's line that names none), daemon, start
/// time (ms) and start line. Not its file, whose name rotation changes.
pub type StartKey = (Option<String>, String, i64, i64);

/// Which rows of a `states` batch stay: all but the unterminated ones `left` names, each as many
/// times as it says.
fn unterminated_rows_kept(batch: &RecordBatch, left: &mut HashMap<StartKey, usize>) -> Result<BooleanArray> {
    let column =
        |name: &str| batch.column_by_name(name).with_context(|| format!("a states file without column {name}"));
    let hosts = column("host")?.as_string_opt::<i32>().context("states.host is not text")?;
    let daemons = column("daemon")?.as_string_opt::<i32>().context("states.daemon is not text")?;
    let starts = column("start_ts")?
        .as_primitive_opt::<TimestampMicrosecondType>()
        .context("states.start_ts is not a timestamp")?;
    let lines = column("start_line")?.as_primitive_opt::<Int64Type>().context("states.start_line is not an integer")?;
    let ends = column("end_ts")?;
    Ok((0..batch.num_rows())
        .map(|row| {
            if ends.is_valid(row) || daemons.is_null(row) || starts.is_null(row) || lines.is_null(row) {
                return Some(true);
            }
            let host = hosts.is_valid(row).then(|| hosts.value(row).to_string());
            let key = (host, daemons.value(row).to_string(), starts.value(row) / 1000, lines.value(row));
            match left.get_mut(&key) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    Some(false)
                }
                _ => Some(true),
            }
        })
        .collect())
}

/// Days since 1970-01-01 of a `date` partition value (`2008-08-23`).
fn parse_date_days(text: &str) -> Option<i32> {
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().map(tables::days)
}

/// Writes rows of one table to new Parquet files, partition by partition.
pub struct PartWriter {
    table: Table,
    writer: RecordBatchWriter,
    cluster: Scalar,
    /// The dates written to since the files were last finished.
    open_dates: Vec<i32>,
    /// For a table with a [`Table::row_group_order`], the rows of each open date not written
    /// yet: each row group is written grouped once it is full.
    ungrouped: HashMap<i32, HeldRows>,
    /// Rows of dates beyond the open ones, written when the writer finishes.
    spill: spill::Spill,
    adds: Vec<Add>,
}

impl PartWriter {
    /// A writer of the first files of `table`, before it exists ([`Warehouse::create`]).
    pub fn for_new_table(warehouse: &Warehouse, table: Table, cluster: &str) -> Result<PartWriter> {
        let partitions = Some(PARTITION_COLUMNS.map(String::from).to_vec());
        let writer =
            RecordBatchWriter::try_new(warehouse.table_url(table.name())?, table.table_schema(), partitions, None)?;
        Ok(PartWriter::new(table, writer, cluster))
    }

    fn new(table: Table, writer: RecordBatchWriter, cluster: &str) -> PartWriter {
        let writer =
            writer.with_writer_properties(writer_properties(Some(table))).with_target_file_size(TARGET_FILE_BYTES);
        PartWriter {
            table,
            writer,
            cluster: Scalar::String(cluster.to_string()),
            open_dates: Vec::new(),
            ungrouped: HashMap::new(),
            spill: spill::Spill::default(),
            adds: Vec::new(),
        }
    }

    pub async fn write(&mut self, mut rows: Rows) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let date = rows.date;
        self.write_batch(rows.finish()?, date).await
    }

    /// Rows of the table's columns (without the partition columns) for the partition of `date`.
    pub async fn write_batch(&mut self, batch: RecordBatch, date: i32) -> Result<()> {
        if !self.open_dates.contains(&date) {
            if self.open_dates.len() >= MAX_OPEN_DATES {
                return self.spill.push(batch, date);
            }
            self.open_dates.push(date);
        }
        if self.table.row_group_order().is_empty() {
            return self.write_partition(batch, date).await;
        }
        let schema = batch.schema();
        self.ungrouped.entry(date).or_insert_with(|| HeldRows::new(schema)).push(batch)?;
        loop {
            let Some(held) = self.ungrouped.get_mut(&date).filter(|held| held.rows >= tables::ROW_GROUP_ROWS) else {
                return Ok(());
            };
            // Exactly a row group, so that each of the file's row groups is grouped on its own.
            let grouped = held.take_grouped(self.table, Some(tables::ROW_GROUP_ROWS))?;
            self.write_partition(grouped, date).await?;
        }
    }

    async fn write_partition(&mut self, batch: RecordBatch, date: i32) -> Result<()> {
        let partition: IndexMap<String, Scalar> =
            IndexMap::from([("cluster".to_string(), self.cluster.clone()), ("date".to_string(), Scalar::Date(date))]);
        self.writer
            .write_partition(batch, &partition, deltalake::writer::WriteMode::Default)
            .await
            .with_context(|| format!("cannot write to table {}", self.table.name()))?;
        // Files are finished as they fill; keep their adds so memory stays flat.
        if self.writer.buffer_len() as u64 >= TARGET_FILE_BYTES {
            self.adds.extend(self.writer.flush().await?);
            self.open_dates.retain(|date| self.ungrouped.get(date).is_some_and(|held| held.rows > 0));
        }
        Ok(())
    }

    /// Writes the rows still held and finishes every open file, keeping its add for the commit.
    async fn roll(&mut self) -> Result<()> {
        let mut held: Vec<(i32, HeldRows)> = self.ungrouped.drain().filter(|(_, held)| held.rows > 0).collect();
        held.sort_by_key(|(date, _)| *date);
        for (date, mut rows) in held {
            let grouped = rows.take_grouped(self.table, None)?;
            self.write_partition(grouped, date).await?;
        }
        self.adds.extend(self.writer.flush().await?);
        self.open_dates.clear();
        Ok(())
    }

    /// Finishes the open files, then writes each spilled date's rows to a file of its own;
    /// their adds are for [`TableAppender::commit`].
    pub async fn finish(mut self) -> Result<Vec<Add>> {
        self.roll().await?;
        if let Some(spilled) = std::mem::take(&mut self.spill).finish()? {
            let dates: Vec<i32> = spilled.dates().collect();
            self.write_dates(std::slice::from_ref(&spilled), &dates).await?;
        }
        Ok(self.adds)
    }

    /// Finishes the open files, and gives back what it spilled, for
    /// [`write_spilled`](Self::write_spilled) to write together with other writers' spills.
    pub async fn finish_open(mut self) -> Result<(Vec<Add>, Option<Spilled>)> {
        self.roll().await?;
        let spilled = std::mem::take(&mut self.spill).finish()?;
        Ok((self.adds, spilled))
    }

    /// Writes the rows of `dates` found in any of `spills`, each date to files of its own.
    pub async fn write_spilled(mut self, spills: &[Spilled], dates: &[i32]) -> Result<Vec<Add>> {
        self.write_dates(spills, dates).await?;
        self.finish().await
    }

    async fn write_dates(&mut self, spills: &[Spilled], dates: &[i32]) -> Result<()> {
        let mut readers = spills.iter().map(Spilled::reader).collect::<Result<Vec<_>>>()?;
        for &date in dates {
            for reader in &mut readers {
                for batch in reader.batches(date) {
                    self.write_batch(batch?, date).await?;
                }
            }
            self.roll().await?;
        }
        Ok(())
    }
}

/// Rows of one date held to be grouped. Small batches (a job history file's few states) are
/// copied together as they come: a batch keeps its builders' spare room, and thousands of them
/// held would cost that room thousands of times. Large ones are held as they are.
struct HeldRows {
    batches: BatchCoalescer,
    rows: usize,
}

/// The batches small ones are copied into.
const HELD_BATCH_ROWS: usize = 8 * 1024;

impl HeldRows {
    fn new(schema: SchemaRef) -> HeldRows {
        let batches =
            BatchCoalescer::new(schema, HELD_BATCH_ROWS).with_biggest_coalesce_batch_size(Some(HELD_BATCH_ROWS / 2));
        HeldRows { batches, rows: 0 }
    }

    fn push(&mut self, batch: RecordBatch) -> Result<()> {
        self.rows += batch.num_rows();
        Ok(self.batches.push_batch(batch)?)
    }

    /// The first `limit` rows held (all when None) in `table`'s row group order, no longer
    /// held. Rows past the limit stay, copied out rather than sliced, so that the batches held
    /// until now can go.
    fn take_grouped(&mut self, table: Table, limit: Option<usize>) -> Result<RecordBatch> {
        self.batches.finish_buffered_batch()?;
        self.rows = 0;
        let batches: Vec<RecordBatch> = std::iter::from_fn(|| self.batches.next_completed_batch()).collect();
        let batches: Vec<&RecordBatch> = batches.iter().collect();
        let order = grouped_order(table, &batches)?;
        let (taken, rest) = order.split_at(limit.unwrap_or(order.len()).min(order.len()));
        if !rest.is_empty() {
            self.push(interleave_record_batch(&batches, rest)?)?;
        }
        Ok(interleave_record_batch(&batches, taken)?)
    }
}

/// Rows of several batches, as (batch, row) pairs (arrow's `interleave` takes them so).
type RowsOf = Vec<(usize, usize)>;

/// The rows of `batches` (of one table) as (batch, row) pairs, grouped by the table's
/// [`Table::row_group_order`] in ascending order of its values (NULL first) and otherwise in
/// the order they came. There are few distinct groups (kinds of state), so each row's is found
/// by comparing it with the last row's, then with the groups seen.
fn grouped_order(table: Table, batches: &[&RecordBatch]) -> Result<RowsOf> {
    let columns = batches
        .iter()
        .map(|batch| {
            (table.row_group_order().iter())
                .map(|&name| {
                    batch.column_by_name(name).and_then(|column| column.as_string_opt::<i32>()).with_context(|| {
                        format!("table {} has no text column {name} to order its rows by", table.name())
                    })
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let value = |batch: usize, column: usize, row: usize| {
        let column = columns[batch][column];
        column.is_valid(row).then(|| column.value(row))
    };
    let is_key_of = |key: &[Option<&str>], batch: usize, row: usize| {
        key.iter().enumerate().all(|(column, v)| value(batch, column, row) == *v)
    };
    // Each group's key (a value per column) and its rows.
    let mut groups: Vec<(Vec<Option<&str>>, RowsOf)> = Vec::new();
    let mut last = 0;
    for (batch, rows) in batches.iter().enumerate() {
        for row in 0..rows.num_rows() {
            if !groups.get(last).is_some_and(|(key, _)| is_key_of(key, batch, row)) {
                last = match groups.iter().position(|(key, _)| is_key_of(key, batch, row)) {
                    Some(at) => at,
                    None => {
                        let key = (0..columns[batch].len()).map(|column| value(batch, column, row)).collect();
                        groups.push((key, Vec::new()));
                        groups.len() - 1
                    }
                };
            }
            groups[last].1.push((batch, row));
        }
    }
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(groups.into_iter().flat_map(|(_, rows)| rows).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One `rejects` row of run `ingest_id` on day `date`.
    fn one_reject(date: i32, ingest_id: &str) -> Rows {
        let mut rows = Rows::new(Table::Rejects, date);
        rows.row()
            .text(Some(ingest_id))
            .text(Some("f.log"))
            .int(Some(1))
            .int(Some(0))
            .text(Some("why"))
            .text(Some("raw"));
        rows
    }

    /// A writer that goes through more dates than it keeps open writes each date once: days
    /// 1–3 stay open, 4 and 5 are spilled, and the rows that come back to days 1 and 4 join
    /// theirs; five files, one per date, seven rows.
    #[tokio::test]
    async fn a_writer_writes_each_date_once_however_its_rows_come() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let warehouse = Warehouse::new(dir.path());
        let appender = TableAppender::open(&warehouse, Table::Rejects, "c1").await?;
        let mut writer = appender.part_writer()?;
        for date in [1, 2, 3, 4, 1, 5, 4] {
            writer.write(one_reject(date, "i1")).await?;
        }
        let adds = writer.finish().await?;
        let mut dates: Vec<String> =
            adds.iter().filter_map(|add| add.partition_values.get("date").cloned().flatten()).collect();
        dates.sort();
        assert_eq!(dates, ["1970-01-02", "1970-01-03", "1970-01-04", "1970-01-05", "1970-01-06"]);
        assert_eq!(adds.iter().filter_map(|add| add.get_stats().ok().flatten()).map(|s| s.num_records).sum::<i64>(), 7);
        Ok(())
    }

    /// `states` rows are written grouped by state, then daemon, each row group on its own and,
    /// within a group, in the order they came; none lost, none twice. Kinds cycle row by row.
    /// Day 1 has a full row group and 20 rows more, which are held; days 2 and 3 a few rows,
    /// held too; day 4's are spilled. All are written when it finishes.
    #[tokio::test]
    async fn states_are_written_grouped_by_kind() -> Result<()> {
        let kinds = [("ReadBlock", "datanode"), ("Map", "tasktracker"), ("WriteBlock", "datanode"), ("Map", "history")];
        let dir = tempfile::tempdir()?;
        let warehouse = Warehouse::new(dir.path());
        let appender = TableAppender::open(&warehouse, Table::States, "c1").await?;
        let mut writer = appender.part_writer()?;
        let day_1 = tables::ROW_GROUP_ROWS + 20;
        let counts = [(1, day_1), (2, 6), (3, 5), (4, 7)];
        for (date, count) in counts {
            // Day 1 in batches of 5,000 rows and 3 (a job history file's few states, copied
            // together while held), the others in one batch each.
            let mut sizes = [5_000, 3].into_iter().cycle();
            let mut first = 0;
            while first < count {
                let mut rows = Rows::new(Table::States, date);
                let end = count.min(first + sizes.next().unwrap_or(1));
                for line in std::mem::replace(&mut first, end)..end {
                    let (state, daemon) = kinds[line % kinds.len()];
                    let line = Some(line as i64);
                    rows.row()
                        .text(Some("h1"))
                        .text(Some(daemon))
                        .text(Some(state))
                        .text(None)
                        .text(None)
                        .text(None)
                        .text(None)
                        .text(None)
                        .text(None)
                        .ms(Some(0))
                        .ms(None)
                        .float(None)
                        .int(None)
                        .text(None)
                        .text(Some("log"))
                        .text(Some("f.log"))
                        .int(line)
                        .int(None)
                        .text(Some("i1"));
                }
                writer.write(rows).await?;
            }
        }
        let adds = writer.finish().await?;
        // Per date, each row group's (state, daemon, start line) in file order.
        type Keys = Vec<(String, String, i64)>;
        let mut groups_by_date: BTreeMap<String, Vec<Keys>> = BTreeMap::new();
        for add in &adds {
            let date = add.partition_values.get("date").cloned().flatten().unwrap_or_default();
            let file = std::fs::File::open(dir.path().join("states").join(&add.path))?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(file)?;
            for group in 0..builder.metadata().num_row_groups() {
                let file = std::fs::File::open(dir.path().join("states").join(&add.path))?;
                let reader = ParquetRecordBatchReaderBuilder::try_new(file)?.with_row_groups(vec![group]).build()?;
                let mut rows = Vec::new();
                for batch in reader {
                    let batch = batch?;
                    let text = |name: &str| batch.column_by_name(name).and_then(|c| c.as_string_opt::<i32>().cloned());
                    let (states, daemons) = (text("state").context("state")?, text("daemon").context("daemon")?);
                    let lines =
                        batch.column_by_name("start_line").context("start_line")?.as_primitive::<Int64Type>().clone();
                    for row in 0..batch.num_rows() {
                        rows.push((states.value(row).to_string(), daemons.value(row).to_string(), lines.value(row)));
                    }
                }
                groups_by_date.entry(date.clone()).or_default().push(rows);
            }
        }
        let sizes: Vec<(&str, Vec<usize>)> = groups_by_date
            .iter()
            .map(|(date, groups)| (date.as_str(), groups.iter().map(Vec::len).collect()))
            .collect();
        assert_eq!(
            sizes,
            [
                ("1970-01-02", vec![tables::ROW_GROUP_ROWS, 20]),
                ("1970-01-03", vec![6]),
                ("1970-01-04", vec![5]),
                ("1970-01-05", vec![7])
            ]
        );
        for ((_, count), groups) in counts.iter().zip(groups_by_date.values()) {
            for rows in groups {
                assert!(rows.windows(2).all(|pair| pair[0] < pair[1]), "a row group out of order: {rows:?}");
            }
            let mut lines: Vec<i64> = groups.iter().flatten().map(|(_, _, line)| *line).collect();
            lines.sort_unstable();
            assert!(lines.iter().copied().eq(0..*count as i64), "rows lost or written twice");
        }
        // The first row group's first kind in order is Map from the history, lines 3, 7, …
        assert_eq!(
            groups_by_date["1970-01-02"][0][..2],
            [("Map".into(), "history".into(), 3), ("Map".into(), "history".into(), 7)]
        );
        Ok(())
    }

    /// The settings reach the columns they name, a list's values too: `sar_records` is
    /// written with delta-encoded times and its figures without a dictionary.
    #[test]
    fn sar_records_settings_reach_their_columns() -> Result<()> {
        use datafusion::arrow::array::{ArrayRef, Float64Array, ListArray, StringArray, TimestampMicrosecondArray};
        use datafusion::arrow::buffer::OffsetBuffer;
        use datafusion::arrow::datatypes::DataType;
        use datafusion::arrow::record_batch::RecordBatch;
        use deltalake::parquet::arrow::ArrowWriter;
        use deltalake::parquet::file::reader::{FileReader, SerializedFileReader};
        use std::sync::Arc;
        let figures = Float64Array::from(vec![1.5, 2.5, 3.5]);
        let lists = ListArray::new(
            Arc::new(tables::list_element(DataType::Float64)),
            OffsetBuffer::from_lengths([2, 1]),
            Arc::new(figures),
            None,
        );
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["h1", "h1"])),
            Arc::new(TimestampMicrosecondArray::from(vec![1_000_000, 2_000_000]).with_timezone("UTC")),
            Arc::new(StringArray::from(vec!["queue", "io"])),
            Arc::new(StringArray::from(vec![None::<&str>, None])),
            Arc::new(StringArray::from(vec!["runq-sz;plist-sz", "tps"])),
            Arc::new(lists),
        ];
        let batch = RecordBatch::try_new(Table::SarRecords.data_schema(), columns)?;
        let file = tempfile::tempfile()?;
        let mut writer =
            ArrowWriter::try_new(file.try_clone()?, batch.schema(), Some(writer_properties(Some(Table::SarRecords))))?;
        writer.write(&batch)?;
        writer.close()?;
        let reader = SerializedFileReader::new(file)?;
        let group = reader.metadata().row_group(0);
        let encodings = |path: &str| -> Vec<Encoding> {
            group
                .columns()
                .iter()
                .find(|c| c.column_path().string() == path)
                .map(|c| c.encodings().collect())
                .unwrap_or_default()
        };
        assert!(encodings("ts").contains(&Encoding::DELTA_BINARY_PACKED), "{:?}", encodings("ts"));
        let values = encodings("metric_values.list.element");
        assert!(!values.is_empty() && !values.contains(&Encoding::RLE_DICTIONARY), "{values:?}");
        Ok(())
    }

    /// A run that commits more than [`LONG_LOG_BYTES`] to a table leaves it a checkpoint, with
    /// the files' statistics as columns; a short log gets none. Readers and planning read the
    /// same through it, and readers of commits skip the transactions' lines.
    #[tokio::test]
    async fn a_long_log_gets_a_checkpoint_with_statistics_as_columns() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let warehouse = Warehouse::new(dir.path());
        let rejects = TableAppender::open(&warehouse, Table::Rejects, "c1").await?;
        let mut writer = rejects.part_writer()?;
        writer.write(one_reject(1, "r1")).await?;
        let files: Vec<Transaction> =
            (0..20_000).map(|n| Transaction::new(file_app_id("c1", &format!("{n}")), n)).collect();
        rejects.commit(writer.finish().await?, Vec::new(), files, "r1").await?;
        let ingests = TableAppender::open(&warehouse, Table::Ingests, "c1").await?;
        ingests.commit(Vec::new(), Vec::new(), vec![Transaction::new(file_app_id("c1", "0"), 0)], "r1").await?;
        let log = warehouse.log_dir(Table::Rejects.name());
        let (latest, bytes) = transactions::uncheckpointed(&log).await?.context("rejects has commits")?;
        assert!(bytes > LONG_LOG_BYTES, "{bytes} bytes: the test needs a long log");

        assert!(warehouse.checkpoint_if_long(Table::Rejects.name()).await?);
        assert!(!warehouse.checkpoint_if_long(Table::Ingests.name()).await?);
        assert_eq!(transactions::uncheckpointed(&log).await?, Some((latest, 0)));
        assert!(!warehouse.checkpoint_if_long(Table::Rejects.name()).await?, "one checkpoint is enough");
        let checkpoint = dir.path().join(format!("rejects/_delta_log/{latest:020}.checkpoint.parquet"));
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(checkpoint)?)?;
        let add = reader.schema().field_with_name("add")?.clone();
        let datafusion::arrow::datatypes::DataType::Struct(fields) = add.data_type() else { bail!("add: {add:?}") };
        let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
        assert!(names.contains(&"stats_parsed") && !names.contains(&"stats"), "{names:?}");

        let completed = warehouse.completed_ingests().await?;
        assert_eq!(completed, HashSet::from(["r1".to_string()]));
        let (visible, _) = warehouse.open_visible(Table::Rejects.name(), &completed).await?.context("rejects")?;
        assert_eq!(visible.get_file_uris()?.count(), 1);
        let reopened = TableAppender::open(&warehouse, Table::Rejects, "c1").await?;
        assert_eq!(reopened.ingested_up_to(&file_app_id("c1", "19999")), Some(19_999));
        let read = transactions::commits(&log, latest, latest, INGEST_ID_KEY, AppIds::Read).await?;
        let skipped = transactions::commits(&log, latest, latest, INGEST_ID_KEY, AppIds::Skip).await?;
        for (commits, app_ids) in [(read, 20_000), (skipped, 0)] {
            let [commit] = commits.as_slice() else { bail!("one commit, not {}", commits.len()) };
            assert_eq!(
                (commit.ingest_id.as_deref(), commit.added.len(), commit.app_ids.len()),
                (Some("r1"), 1, app_ids)
            );
        }
        Ok(())
    }

    /// A table made before a property was gets it from `kahuna optimize` (and a results table
    /// from recording); a value an operator chose stays.
    #[tokio::test]
    async fn a_table_gets_the_properties_it_lacks() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let warehouse = Warehouse::new(dir.path());
        let column = StructField::new("x", delta_kernel::schema::DataType::LONG, true);
        let table = DeltaTable::try_from_url(warehouse.table_url("old")?)
            .await?
            .create()
            .with_columns([column])
            .with_configuration_property(TableProperty::CheckpointInterval, Some("25"))
            .await?;
        let table = Warehouse::with_table_properties(table).await?;
        let configuration = table.snapshot()?.metadata().configuration().clone();
        let value = |property: TableProperty| configuration.get(property.as_ref()).cloned();
        assert_eq!(value(TableProperty::CheckpointInterval).as_deref(), Some("25"));
        assert_eq!(value(TableProperty::CheckpointWriteStatsAsStruct).as_deref(), Some("true"));
        assert_eq!(value(TableProperty::CheckpointWriteStatsAsJson).as_deref(), Some("false"));
        let version = table.version();
        let table = Warehouse::with_table_properties(table).await?;
        assert_eq!(table.version(), version, "nothing lacking, nothing committed");
        Ok(())
    }

    /// Run `done` committed `rejects` and `ingests`; run `killed` only `rejects`. Readers see
    /// `rejects` without the killed run's commit, and `optimize` leaves the table alone rather
    /// than fold that commit into files readers could not tell from it.
    #[tokio::test]
    async fn optimize_leaves_a_table_with_an_unfinished_run_alone() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let warehouse = Warehouse::new(dir.path());
        let rejects = TableAppender::open(&warehouse, Table::Rejects, "c1").await?;
        for run in ["done", "killed"] {
            let mut writer = rejects.part_writer()?;
            writer.write(one_reject(1, run)).await?;
            rejects.commit(writer.finish().await?, Vec::new(), Vec::new(), run).await?;
        }
        let ingests = TableAppender::open(&warehouse, Table::Ingests, "c1").await?;
        ingests.commit(Vec::new(), Vec::new(), vec![Transaction::new(file_app_id("c1", "f"), 10)], "done").await?;
        let completed = warehouse.completed_ingests().await?;
        let (visible, _) = warehouse.open_visible(Table::Rejects.name(), &completed).await?.context("rejects")?;
        assert_eq!((visible.version(), visible.get_file_uris()?.count()), (Some(1), 1));
        let report = warehouse.optimize(Duration::ZERO).await?;
        assert!(report.iter().any(|line| line.starts_with("rejects: left as it is")), "{report:?}");
        let rejects = warehouse.open(Table::Rejects.name()).await?.context("rejects")?;
        assert_eq!(rejects.version(), Some(2), "no optimize commit on top of the unfinished run");
        Ok(())
    }
}
