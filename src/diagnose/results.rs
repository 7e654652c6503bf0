//! Tables the diagnoses write, as opposed to the ones ingestion fills: `diagnoses` (one row per
//! run, query and subject), `schedule_runs` (the scheduler's ledger, one row per attempt) and
//! the tables a query saves with `@output table NAME` (a Ganesha model, an edge table).
//!
//! Like every table they are partitioned by `cluster` and `date` (here the run date). Each write
//! is one Delta commit. A rerun *replaces* what an earlier run of the same query wrote for the
//! same cluster and date: one commit removes the old rows' files and adds the new ones, so
//! readers see the old partition or the new one, never both or neither. Each run writes files of
//! its own, so a rerun commits just that, its removes and adds, with no query to plan. A file
//! shared with other runs' rows (one compacted by `kahuna optimize`), a new table or new columns
//! go through Delta's own overwrite with a `replaceWhere` predicate, which plans the rewrite
//! with DataFusion and costs more.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, NaiveDate, Utc};
use datafusion::arrow::array::{
    Array as _, ArrayRef, AsArray as _, BooleanArray, Date32Array, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Date32Type, Field, Schema, SchemaRef, TimeUnit};
use datafusion::object_store::ObjectStoreExt as _;
use deltalake::DeltaTable;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Remove};
use deltalake::operations::write::SchemaMode;
use deltalake::parquet::arrow::ProjectionMask;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use deltalake::parquet::file::reader::ChunkReader;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::{DeltaWriter as _, RecordBatchWriter};
use futures::TryStreamExt as _;

use crate::warehouse::tables::{PARTITION_COLUMNS, days};
use crate::warehouse::{Warehouse, writer_properties};

pub const DIAGNOSES: &str = "diagnoses";
pub const SCHEDULE_RUNS: &str = "schedule_runs";

/// The key of a run's `parameters` naming those that came from a calibration.
pub const CALIBRATED_KEY: &str = "calibrated";

/// One row of `diagnoses`: what a verdict query said about one subject.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diagnosis {
    // Shared, not owned: a verdict over months has a million rows but few clusters, hosts and
    // subjects, and a job's rows come together.
    pub cluster: Arc<str>,
    pub job_id: Option<Arc<str>>,
    pub host: Option<Arc<str>>,
    /// The state (Map, ReadBlock…) or metric the verdict is about.
    pub subject: Option<Arc<str>>,
    pub score: Option<f64>,
    pub indicted: bool,
    /// The query's other columns, as a JSON object.
    pub detail: Option<String>,
}

/// What every row of one run shares.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub run_id: String,
    pub query: String,
    pub query_hash: String,
    pub window_from: Option<DateTime<Utc>>,
    pub window_to: Option<DateTime<Utc>>,
    /// Parameter values as a JSON object.
    pub parameters: String,
    pub run_date: NaiveDate,
    pub ran_at: DateTime<Utc>,
}

/// One attempt of a scheduled (or backfilled) run, for the ledger.
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerEntry {
    pub run_id: String,
    pub cluster: String,
    pub job: String,
    pub query_hash: String,
    pub run_date: NaiveDate,
    /// The cron occurrence this run answers; None for a backfill.
    pub scheduled_for: Option<DateTime<Utc>>,
    /// `schedule`, `catch-up` or `backfill`.
    pub trigger: String,
    pub attempt: i64,
    /// `succeeded` or `failed`.
    pub status: String,
    pub rows: i64,
    pub duration_ms: i64,
    pub error: Option<String>,
    pub started: DateTime<Utc>,
}

fn ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

fn with_partitions(mut fields: Vec<Field>) -> SchemaRef {
    fields.push(Field::new("cluster", DataType::Utf8, false));
    fields.push(Field::new("date", DataType::Date32, false));
    Arc::new(Schema::new(fields))
}

pub fn diagnoses_schema() -> SchemaRef {
    let text = |n: &str, null: bool| Field::new(n, DataType::Utf8, null);
    with_partitions(vec![
        text("run_id", false),
        text("query", false),
        text("query_hash", false),
        Field::new("window_from", ts_type(), true),
        Field::new("window_to", ts_type(), true),
        text("parameters", false),
        text("job_id", true),
        text("host", true),
        text("subject", true),
        Field::new("score", DataType::Float64, true),
        Field::new("indicted", DataType::Boolean, false),
        text("detail", true),
        Field::new("ran_at", ts_type(), false),
    ])
}

pub fn ledger_schema() -> SchemaRef {
    let text = |n: &str, null: bool| Field::new(n, DataType::Utf8, null);
    with_partitions(vec![
        text("run_id", false),
        text("job", false),
        text("query_hash", false),
        Field::new("scheduled_for", ts_type(), true),
        text("trigger", false),
        Field::new("attempt", DataType::Int64, false),
        text("status", false),
        Field::new("rows", DataType::Int64, false),
        Field::new("duration_ms", DataType::Int64, false),
        text("error", true),
        Field::new("started", ts_type(), false),
    ])
}

fn micros(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(|t| t.timestamp_micros())
}

fn timestamps(values: Vec<Option<i64>>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from(values).with_timezone("UTC"))
}

pub fn diagnoses_batch(run: &RunInfo, rows: &[Diagnosis]) -> Result<RecordBatch> {
    let n = rows.len();
    let same = |v: &str| -> ArrayRef { Arc::new(StringArray::from(vec![v; n])) };
    let each = |f: &dyn Fn(&Diagnosis) -> Option<&str>| -> ArrayRef {
        Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let columns: Vec<ArrayRef> = vec![
        same(&run.run_id),
        same(&run.query),
        same(&run.query_hash),
        timestamps(vec![micros(run.window_from); n]),
        timestamps(vec![micros(run.window_to); n]),
        same(&run.parameters),
        each(&|d| d.job_id.as_deref()),
        each(&|d| d.host.as_deref()),
        each(&|d| d.subject.as_deref()),
        Arc::new(Float64Array::from(rows.iter().map(|d| d.score).collect::<Vec<_>>())),
        Arc::new(BooleanArray::from(rows.iter().map(|d| d.indicted).collect::<Vec<_>>())),
        each(&|d| d.detail.as_deref()),
        timestamps(vec![Some(run.ran_at.timestamp_micros()); n]),
        each(&|d| Some(&d.cluster)),
        Arc::new(Date32Array::from(vec![days(run.run_date); n])),
    ];
    Ok(RecordBatch::try_new(diagnoses_schema(), columns)?)
}

pub fn ledger_batch(entries: &[LedgerEntry]) -> Result<RecordBatch> {
    let text = |f: &dyn Fn(&LedgerEntry) -> Option<&str>| -> ArrayRef {
        Arc::new(StringArray::from(entries.iter().map(f).collect::<Vec<_>>()))
    };
    let int = |f: &dyn Fn(&LedgerEntry) -> i64| -> ArrayRef {
        Arc::new(Int64Array::from(entries.iter().map(f).collect::<Vec<_>>()))
    };
    let columns: Vec<ArrayRef> = vec![
        text(&|e| Some(&e.run_id)),
        text(&|e| Some(&e.job)),
        text(&|e| Some(&e.query_hash)),
        timestamps(entries.iter().map(|e| micros(e.scheduled_for)).collect()),
        text(&|e| Some(&e.trigger)),
        int(&|e| e.attempt),
        text(&|e| Some(&e.status)),
        int(&|e| e.rows),
        int(&|e| e.duration_ms),
        text(&|e| e.error.as_deref()),
        timestamps(entries.iter().map(|e| Some(e.started.timestamp_micros())).collect()),
        text(&|e| Some(&e.cluster)),
        Arc::new(Date32Array::from(entries.iter().map(|e| days(e.run_date)).collect::<Vec<_>>())),
    ];
    Ok(RecordBatch::try_new(ledger_schema(), columns)?)
}

/// A SQL string literal.
pub(crate) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The rows a write replaces: one run date of one cluster (of every cluster when `cluster` is
/// None), and of those, with `run`, only the rows of that query run with those parameters
/// (`diagnoses` holds every query's verdicts side by side).
#[derive(Clone, Debug)]
pub struct Replace {
    pub cluster: Option<String>,
    pub date: NaiveDate,
    /// Query name and parameters (as JSON).
    pub run: Option<(String, String)>,
}

impl Replace {
    /// As the SQL predicate Delta records with the commit; `runs` are the `parameters` of the
    /// rows found to be of the same run (see [`same_run`]), beside the run's own.
    fn predicate(&self, runs: &BTreeSet<String>) -> String {
        let mut terms = Vec::new();
        if let Some((query, parameters)) = &self.run {
            let texts: BTreeSet<&str> = runs.iter().map(String::as_str).chain([parameters.as_str()]).collect();
            let texts: Vec<String> = texts.into_iter().map(quote).collect();
            let parameters = match texts.as_slice() {
                [one] => format!("= {one}"),
                many => format!("IN ({})", many.join(", ")),
            };
            terms.push(format!("query = {} AND parameters {parameters}", quote(query)));
        }
        if let Some(cluster) = &self.cluster {
            terms.push(format!("cluster = {}", quote(cluster)));
        }
        terms.push(format!("date = DATE '{}'", self.date));
        terms.join(" AND ")
    }

    /// Whether a file with these partition values lies in the replaced partitions.
    fn covers_partition(&self, values: &HashMap<String, Option<String>>) -> bool {
        let value = |column: &str| values.get(column).and_then(Option::as_deref);
        value("date") == Some(self.date.to_string().as_str())
            && self.cluster.as_deref().is_none_or(|cluster| value("cluster") == Some(cluster))
    }
}

/// One result commit at a time in this process: queries that run side by side
/// (`kahuna schedule`) would otherwise race for the next version of `diagnoses` or
/// `schedule_runs`, and a replace can lose that race to a concurrent append. It holds, by URL,
/// each table as this process's last commit to it left it: the next write reads only the
/// commits made since (by any process), where opening the table again would re-read its
/// checkpoint, a large part of what recording a small query's result costs.
static COMMITS: tokio::sync::Mutex<BTreeMap<String, DeltaTable>> = tokio::sync::Mutex::const_new(BTreeMap::new());

/// Appends `batch` to table `name` (created on first use, partitioned like every table), or,
/// with `replace`, removes those rows in the same commit.
pub async fn write(warehouse: &Warehouse, name: &str, batch: RecordBatch, replace: Option<Replace>) -> Result<()> {
    let mut written = COMMITS.lock().await;
    let url = warehouse.table_url(name)?;
    // A table whose update fails is opened anew; one removed since is made again.
    let cached = match written.remove(url.as_str()) {
        Some(mut table) if warehouse.has_table(name).await? => {
            table.update_incremental(None).await.ok().map(|()| table)
        }
        _ => None,
    };
    let mut table = match cached {
        Some(table) => table,
        None => match warehouse.open(name).await? {
            Some(table) => Warehouse::with_table_properties(table).await?,
            None => DeltaTable::try_from_url(url.clone()).await?,
        },
    };
    let context = || match &replace {
        Some(replace) => format!("cannot replace {} in table {name}", replace.predicate(&BTreeSet::new())),
        None => format!("cannot append to table {name}"),
    };
    let direct = match table.version() {
        Some(_) => conformed(&batch, &table.snapshot()?.snapshot().arrow_schema())?,
        None => None,
    };
    let (removes, runs) = match (&direct, table.version()) {
        (Some(batch), _) => replaced_files(&table, batch, replace.as_ref()).await.with_context(context)?,
        (None, Some(_)) => (None, replaced_files(&table, &batch, replace.as_ref()).await.with_context(context)?.1),
        (None, None) => (None, BTreeSet::new()),
    };
    let (Some(batch), Some(removes)) = (direct, removes) else {
        let replace = replace.as_ref().map(|r| (r, runs));
        let table = write_through_datafusion(table, name, batch, replace).await.with_context(context)?;
        written.insert(url.into(), table);
        return Ok(());
    };
    let mut writer = RecordBatchWriter::for_table(&table)?.with_writer_properties(writer_properties(None));
    writer.write(batch).await.with_context(context)?;
    let actions = writer.flush().await?.into_iter().map(Action::Add).chain(removes.into_iter().map(Action::Remove));
    let operation = DeltaOperation::Write {
        mode: if replace.is_some() { SaveMode::Overwrite } else { SaveMode::Append },
        partition_by: Some(PARTITION_COLUMNS.map(String::from).to_vec()),
        predicate: replace.as_ref().map(|r| r.predicate(&runs)),
    };
    let committed = CommitBuilder::from(CommitProperties::default())
        .with_actions(actions.collect())
        .build(Some(table.snapshot()?), table.log_store(), operation)
        .await
        .with_context(context)?;
    table.state = Some(committed.snapshot);
    written.insert(url.into(), table);
    Ok(())
}

/// The files a write of `batch` over `replace` removes, when it can be committed as just that:
/// the table is partitioned as every table is, and each file of the replaced partitions holds
/// only replaced rows or none. None sends the write through Delta's own operation, which plans
/// it with DataFusion and rewrites a file whose rows are only partly replaced (as a compacted
/// one may be). A batch with rows outside the replaced partitions is an error. Beside them,
/// the `parameters` of the replaced rows whose text differs from the run's own.
async fn replaced_files(
    table: &DeltaTable,
    batch: &RecordBatch,
    replace: Option<&Replace>,
) -> Result<(Option<Vec<Remove>>, BTreeSet<String>)> {
    let mut runs = BTreeSet::new();
    let Some(replace) = replace else { return Ok((Some(Vec::new()), runs)) };
    let partitioned = table.snapshot()?.metadata().partition_columns().iter().map(String::as_str).eq(PARTITION_COLUMNS);
    if partitioned && !batch_within(batch, replace)? {
        bail!("rows of the result lie outside the run's partition");
    }
    let files: Vec<_> = table.get_active_add_actions_by_partitions(&[]).try_collect().await?;
    let store = table.log_store().object_store(None);
    let mut removes = Some(Vec::new());
    for file in files.iter().filter(|file| !partitioned || replace.covers_partition(&file.partition_values_map())) {
        if let Some((query, parameters)) = &replace.run {
            let bytes = store.get(&file.object_store_path()).await?.bytes().await?;
            let matching = rows_of_run(bytes, query, parameters, &mut runs)?;
            if matching == Some(0) {
                continue;
            }
            if matching.is_none() || matching != file.num_records() {
                removes = None;
            }
        }
        if let Some(removes) = removes.as_mut() {
            removes.push(file.remove_action(true));
        }
    }
    Ok((removes.filter(|_| partitioned), runs))
}

/// `batch` as the table's columns, in the table's order and with its types where the two differ
/// only in how Arrow holds the values (DataFusion hands out text as `Utf8View`, Delta reads it
/// back as `Utf8`). None when the columns differ in names or kinds, or a value does not fit
/// (a NULL inside a struct field the table declares NOT NULL): a column or type for Delta's own
/// operation to merge into the table. By name, not position: a merge puts new columns after the
/// partition columns, where a result has them before.
fn conformed(batch: &RecordBatch, table: &Schema) -> Result<Option<RecordBatch>> {
    let schema = batch.schema();
    if schema.fields().len() != table.fields().len() {
        return Ok(None);
    }
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for target in table.fields() {
        let Some((index, field)) = schema.column_with_name(target.name()) else { return Ok(None) };
        let column = batch.column(index);
        if !same_kind(column.data_type(), target.data_type()) {
            return Ok(None);
        }
        let column = match column.data_type() == target.data_type() {
            true => column.clone(),
            false => match cast(column, target.data_type()) {
                Ok(column) => column,
                Err(_) => return Ok(None),
            },
        };
        fields.push(target.as_ref().clone().with_nullable(field.is_nullable()));
        columns.push(column);
    }
    Ok(Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?))
}

/// Whether values of type `a` can be held as type `b` without a change of value: the same
/// type up to nullability and to the layout of text and bytes.
fn same_kind(a: &DataType, b: &DataType) -> bool {
    use DataType::*;
    let same_fields = |x: &Field, y: &Field| x.name() == y.name() && same_kind(x.data_type(), y.data_type());
    match (a, b) {
        (Utf8 | Utf8View | LargeUtf8, Utf8 | Utf8View | LargeUtf8) => true,
        (Binary | BinaryView | LargeBinary, Binary | BinaryView | LargeBinary) => true,
        (Struct(x), Struct(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_fields(x, y)),
        (List(x) | LargeList(x), List(y) | LargeList(y)) => same_kind(x.data_type(), y.data_type()),
        _ => a == b,
    }
}

/// Whether every row of `batch` has the partition values `replace` covers.
fn batch_within(batch: &RecordBatch, replace: &Replace) -> Result<bool> {
    let column = |name: &str| batch.column_by_name(name).with_context(|| format!("a result without column {name}"));
    let dates = column("date")?.as_primitive_opt::<Date32Type>().context("column date is not a date")?;
    let clusters = column("cluster")?.as_string_opt::<i32>().context("column cluster is not text")?;
    let date = days(replace.date);
    Ok((0..batch.num_rows()).all(|row| {
        dates.is_valid(row)
            && dates.value(row) == date
            && replace.cluster.as_deref().is_none_or(|cluster| clusters.is_valid(row) && clusters.value(row) == cluster)
    }))
}

/// How many rows of a Parquet file are of this query's run with these parameters (see
/// [`same_run`]), adding the other texts of their parameters to `runs`; None for a file without
/// those columns.
fn rows_of_run(
    file: impl ChunkReader + 'static,
    query: &str,
    parameters: &str,
    runs: &mut BTreeSet<String>,
) -> Result<Option<usize>> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)?;
    let wanted = ["query", "parameters"];
    let leaves = builder.parquet_schema().columns();
    if !wanted.iter().all(|name| leaves.iter().any(|leaf| leaf.path().string() == *name)) {
        return Ok(None);
    }
    let mask = ProjectionMask::columns(builder.parquet_schema(), wanted);
    let mut matching = 0;
    for batch in builder.with_projection(mask).build()? {
        let batch = batch?;
        let text = |name: &str| batch.column_by_name(name).and_then(|column| column.as_string_opt::<i32>());
        let (Some(queries), Some(values)) = (text("query"), text("parameters")) else {
            return Ok(None);
        };
        let of_run = |row: usize| {
            queries.is_valid(row)
                && queries.value(row) == query
                && values.is_valid(row)
                && same_run(values.value(row), parameters)
        };
        for row in (0..batch.num_rows()).filter(|&row| of_run(row)) {
            matching += 1;
            if values.value(row) != parameters {
                runs.insert(values.value(row).to_string());
            }
        }
    }
    Ok(Some(matching))
}

/// Whether two runs' `parameters` are those of one run: the same, but for a parameter a
/// calibration set on both, or on one while the other ran with the default the calibration
/// replaced (which its `calibrated` entry names): a scheduled rerun after a new calibration, or
/// the first, replaces the old rows, while a run given a value of its own stays apart.
fn same_run(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let parse = |text: &str| {
        let mut values = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(text).ok()?;
        let defaults: BTreeMap<String, String> = match values.remove(CALIBRATED_KEY) {
            Some(defaults) => serde_json::from_str(defaults.as_str()?).ok()?,
            None => BTreeMap::new(),
        };
        Some((values, defaults))
    };
    let (Some((a, a_defaults)), Some((b, b_defaults))) = (parse(a), parse(b)) else { return false };
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter().all(|key| {
        let is = |values: &BTreeMap<String, serde_json::Value>, default: &String| {
            values.get(key).and_then(|v| v.as_str()) == Some(default.as_str())
        };
        match (a_defaults.get(key), b_defaults.get(key)) {
            (Some(_), Some(_)) => true,
            (Some(default), None) => is(&b, default),
            (None, Some(default)) => is(&a, default),
            (None, None) => a.get(key) == b.get(key),
        }
    })
}

/// The write as Delta's own operation.
async fn write_through_datafusion(
    table: DeltaTable,
    name: &str,
    batch: RecordBatch,
    replace: Option<(&Replace, BTreeSet<String>)>,
) -> Result<DeltaTable> {
    // New columns join the table (an operator's copy of a table query that returns one more,
    // or a table written before the run columns); the rows before have them NULL.
    let builder = table
        .write(vec![batch])
        .with_table_name(name)
        .with_partition_columns(PARTITION_COLUMNS)
        .with_configuration(Warehouse::table_properties())
        .with_schema_mode(SchemaMode::Merge);
    Ok(match replace {
        Some((replace, runs)) => {
            builder.with_save_mode(SaveMode::Overwrite).with_replace_where(replace.predicate(&runs)).await?
        }
        None => builder.with_save_mode(SaveMode::Append).await?,
    })
}

/// `batches` (any schema without `cluster`/`date`, or with a `cluster` column of its own) as one
/// batch with the run's id and parameters, then the partition columns, last: the row's cluster
/// if it has one, else `cluster`.
pub fn table_batch(batches: &[RecordBatch], schema: SchemaRef, run: &RunInfo, cluster: &str) -> Result<RecordBatch> {
    let data = concat_batches(&schema, batches)?;
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    let mut own_cluster = None;
    for (field, column) in schema.fields().iter().zip(data.columns()) {
        match field.name().as_str() {
            "cluster" => own_cluster = Some(cast(column, &DataType::Utf8)?),
            "date" => {}
            _ => {
                // Nullable always: a later run may leave empty what this one filled.
                fields.push(field.as_ref().clone().with_nullable(true));
                columns.push(column.clone());
            }
        }
    }
    let n = data.num_rows();
    for (name, value) in [("run_id", &run.run_id), ("parameters", &run.parameters)] {
        if fields.iter().any(|f| f.name() == name) {
            bail!("the result has a column {name}, which the saved table gives each run's rows itself");
        }
        fields.push(Field::new(name, DataType::Utf8, true));
        columns.push(Arc::new(StringArray::from(vec![value.as_str(); n])));
    }
    let clusters: ArrayRef = match own_cluster {
        Some(values) => {
            let values = datafusion::arrow::array::cast::as_string_array(&values);
            Arc::new(values.iter().map(|v| Some(v.unwrap_or(cluster))).collect::<StringArray>())
        }
        None => Arc::new(StringArray::from(vec![cluster; n])),
    };
    columns.push(clusters);
    columns.push(Arc::new(Date32Array::from(vec![days(run.run_date); n])));
    Ok(RecordBatch::try_new(with_partitions(fields), columns)?)
}

/// Each row of a query's answer, its values joined by spaces: what the tests compare.
#[cfg(test)]
pub(crate) async fn query_rows(warehouse: &Warehouse, sql: &str) -> Vec<String> {
    let ctx = crate::catalog::session(warehouse).await.unwrap();
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut out = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            let cells: Vec<String> = (0..b.num_columns())
                .map(|c| datafusion::arrow::util::display::array_value_to_string(b.column(c), r).unwrap())
                .collect();
            out.push(cells.join(" "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use deltalake::table::config::TablePropertiesExt as _;

    use super::*;

    #[test]
    fn a_run_is_the_same_whatever_its_calibrated_values() {
        // A calibrated run names each calibrated parameter with the default it replaced.
        let default = r#"{"cluster":"c","threshold":"0.5","weight":"time"}"#;
        let calibrated = r#"{"calibrated":"{\"threshold\":\"0.5\"}","cluster":"c","threshold":"0.55","weight":"time"}"#;
        let again = r#"{"calibrated":"{\"threshold\":\"0.5\"}","cluster":"c","threshold":"0.7","weight":"time"}"#;
        assert!(same_run(default, default));
        assert!(same_run(calibrated, again), "a new calibration replaces the old rows");
        assert!(same_run(default, calibrated) && same_run(calibrated, default), "so does the first, of a default run");
        let given = r#"{"cluster":"c","threshold":"0.7","weight":"time"}"#;
        assert!(!same_run(given, again) && !same_run(again, given), "a value given stays apart from a calibrated one");
        let other = r#"{"calibrated":"{\"threshold\":\"0.5\"}","cluster":"c","threshold":"0.55","weight":"count"}"#;
        assert!(!same_run(calibrated, other), "a given parameter still tells runs apart");
        assert!(!same_run(default, r#"{"cluster":"c","threshold":"0.6","weight":"time"}"#));
        assert!(!same_run("not json", calibrated));
    }

    fn run(id: &str, date: NaiveDate) -> RunInfo {
        RunInfo {
            run_id: id.into(),
            query: "q".into(),
            query_hash: "h".into(),
            window_from: None,
            window_to: None,
            parameters: "{}".into(),
            run_date: date,
            ran_at: Utc::now(),
        }
    }

    fn verdict(cluster: &str, hosts: &[&str]) -> Vec<Diagnosis> {
        hosts
            .iter()
            .map(|h| Diagnosis { cluster: cluster.into(), host: Some((*h).into()), ..Diagnosis::default() })
            .collect()
    }

    /// The actions of `table`'s latest commit, its JSON lines.
    async fn last_commit(wh: &Warehouse, table: &str) -> String {
        let version = wh.open(table).await.unwrap().unwrap().version().unwrap();
        let folder = wh.folder().expect("a folder");
        std::fs::read_to_string(folder.join(table).join(format!("_delta_log/{version:020}.json"))).unwrap()
    }

    #[tokio::test]
    async fn a_rerun_replaces_its_own_partition_only() {
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let d1 = NaiveDate::from_ymd_opt(2008, 8, 23).unwrap();
        let d2 = d1.succ_opt().unwrap();
        let replace =
            |c: &str, d| Some(Replace { cluster: Some(c.into()), date: d, run: Some(("q".into(), "{}".into())) });
        write(&wh, DIAGNOSES, diagnoses_batch(&run("r1", d1), &verdict("c1", &["a", "b"])).unwrap(), replace("c1", d1))
            .await
            .unwrap();
        write(&wh, DIAGNOSES, diagnoses_batch(&run("r2", d2), &verdict("c1", &["a"])).unwrap(), replace("c1", d2))
            .await
            .unwrap();
        write(&wh, DIAGNOSES, diagnoses_batch(&run("r3", d1), &verdict("c2", &["x"])).unwrap(), replace("c2", d1))
            .await
            .unwrap();
        // The rerun of c1 on the 23rd: its three rows replace the two, nothing else moves.
        write(
            &wh,
            DIAGNOSES,
            diagnoses_batch(&run("r4", d1), &verdict("c1", &["a", "b", "c"])).unwrap(),
            replace("c1", d1),
        )
        .await
        .unwrap();
        let sql = "SELECT cluster, CAST(date AS VARCHAR) AS d, run_id, count(*) FROM diagnoses GROUP BY 1, 2, 3 ORDER BY 1, 2";
        assert_eq!(query_rows(&wh, sql).await, vec!["c1 2008-08-23 r4 3", "c1 2008-08-24 r2 1", "c2 2008-08-23 r3 1"]);
        // Appends add.
        write(&wh, DIAGNOSES, diagnoses_batch(&run("r5", d2), &verdict("c1", &["z"])).unwrap(), None).await.unwrap();
        assert_eq!(query_rows(&wh, "SELECT count(*) FROM diagnoses").await, vec!["6"]);
    }

    /// A rerun removes the files of its own run (query and parameters) and no others: another
    /// run's file stays whole, and a file holding rows of two runs (as one compacted by
    /// `optimize`) is rewritten with the other run's rows only.
    #[tokio::test]
    async fn a_rerun_removes_its_own_rows_only() {
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let d1 = NaiveDate::from_ymd_opt(2008, 8, 23).unwrap();
        let of_run = |id: &str, query: &str, parameters: &str| RunInfo {
            query: query.into(),
            parameters: parameters.into(),
            ..run(id, d1)
        };
        let replace = |query: &str, parameters: &str| {
            Some(Replace { cluster: Some("c1".into()), date: d1, run: Some((query.into(), parameters.into())) })
        };
        let (q, k1) = ("q", r#"{"k":"1"}"#);
        write(
            &wh,
            DIAGNOSES,
            diagnoses_batch(&of_run("r1", q, "{}"), &verdict("c1", &["a", "b"])).unwrap(),
            replace(q, "{}"),
        )
        .await
        .unwrap();
        write(&wh, DIAGNOSES, diagnoses_batch(&of_run("r1", q, k1), &verdict("c1", &["y"])).unwrap(), replace(q, k1))
            .await
            .unwrap();
        write(
            &wh,
            DIAGNOSES,
            diagnoses_batch(&of_run("r2", q, "{}"), &verdict("c1", &["c"])).unwrap(),
            replace(q, "{}"),
        )
        .await
        .unwrap();
        let sql = "SELECT query, parameters, run_id, host FROM diagnoses ORDER BY 1, 2, 3, 4";
        assert_eq!(query_rows(&wh, sql).await, vec![r#"q {"k":"1"} r1 y"#, "q {} r2 c"]);
        // The rerun removed one file and added one, in a commit of its own making: not Delta's
        // DataFusion-planned operation, whose commits carry its metrics.
        let log = last_commit(&wh, DIAGNOSES).await;
        let count = |action: &str| log.lines().filter(|line| line.starts_with(&format!("{{\"{action}\""))).count();
        assert_eq!((count("add"), count("remove")), (1, 1), "{log}");
        assert!(!log.contains("operationMetrics"), "{log}");
        // One file with rows of two runs.
        let shared = concat_batches(
            &diagnoses_schema(),
            &[
                diagnoses_batch(&of_run("r3", "other", "{}"), &verdict("c1", &["x"])).unwrap(),
                diagnoses_batch(&of_run("r3", q, "{}"), &verdict("c1", &["z"])).unwrap(),
            ],
        )
        .unwrap();
        write(&wh, DIAGNOSES, shared, None).await.unwrap();
        write(
            &wh,
            DIAGNOSES,
            diagnoses_batch(&of_run("r4", q, "{}"), &verdict("c1", &["d"])).unwrap(),
            replace(q, "{}"),
        )
        .await
        .unwrap();
        assert_eq!(query_rows(&wh, sql).await, vec!["other {} r3 x", r#"q {"k":"1"} r1 y"#, "q {} r4 d"]);
    }

    /// A result whose rows name another cluster than the run's is refused, not half-replaced.
    #[tokio::test]
    async fn rows_outside_the_replaced_partition_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let d1 = NaiveDate::from_ymd_opt(2008, 8, 23).unwrap();
        let replace = || Some(Replace { cluster: Some("c1".into()), date: d1, run: Some(("q".into(), "{}".into())) });
        write(&wh, DIAGNOSES, diagnoses_batch(&run("r1", d1), &verdict("c1", &["a"])).unwrap(), replace())
            .await
            .unwrap();
        let error = write(&wh, DIAGNOSES, diagnoses_batch(&run("r2", d1), &verdict("c2", &["b"])).unwrap(), replace())
            .await
            .unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "cannot replace query = 'q' AND parameters = '{}' AND cluster = 'c1' AND date = DATE '2008-08-23' in table \
             diagnoses: rows of the result lie outside the run's partition"
        );
        assert_eq!(query_rows(&wh, "SELECT run_id, host FROM diagnoses").await, vec!["r1 a"]);
    }

    /// This process keeps each results table as its last write left it; a commit another
    /// writer made since must be seen, or a replace would keep the rows that commit added.
    #[tokio::test]
    async fn a_write_sees_the_commits_of_other_writers() {
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let d1 = NaiveDate::from_ymd_opt(2008, 8, 23).unwrap();
        let replace = Some(Replace { cluster: Some("c1".into()), date: d1, run: Some(("q".into(), "{}".into())) });
        write(&wh, DIAGNOSES, diagnoses_batch(&run("r1", d1), &verdict("c1", &["a"])).unwrap(), replace.clone())
            .await
            .unwrap();
        // Another process appends, through a table of its own.
        let other = wh.open(DIAGNOSES).await.unwrap().unwrap();
        other.write(vec![diagnoses_batch(&run("r2", d1), &verdict("c1", &["b", "c"])).unwrap()]).await.unwrap();
        write(&wh, DIAGNOSES, diagnoses_batch(&run("r3", d1), &verdict("c1", &["d"])).unwrap(), replace).await.unwrap();
        let sql = "SELECT run_id, host FROM diagnoses ORDER BY 1, 2";
        assert_eq!(query_rows(&wh, sql).await, vec!["r3 d"]);
    }

    /// Opening a table replays the commits after its last checkpoint: a results table gets one
    /// every ten commits, also one made by an older version (Delta's default is 100), unless
    /// its interval was chosen.
    #[tokio::test]
    async fn results_tables_are_checkpointed_every_ten_commits() {
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let d1 = NaiveDate::from_ymd_opt(2008, 8, 23).unwrap();
        let batch = || diagnoses_batch(&run("r", d1), &verdict("c1", &["a"])).unwrap();
        // As an older version made it: Delta's defaults.
        DeltaTable::try_from_url(wh.table_url(DIAGNOSES).unwrap())
            .await
            .unwrap()
            .write(vec![batch()])
            .with_partition_columns(PARTITION_COLUMNS)
            .await
            .unwrap();
        let last_checkpoint =
            || std::fs::read_to_string(dir.path().join(DIAGNOSES).join("_delta_log/_last_checkpoint")).ok();
        for _ in 0..7 {
            write(&wh, DIAGNOSES, batch(), None).await.unwrap();
        }
        // Versions 0 (creation), 1 (the property), 2..=8 (appends): nine commits, no checkpoint.
        assert_eq!(last_checkpoint(), None);
        write(&wh, DIAGNOSES, batch(), None).await.unwrap();
        let checkpoint = last_checkpoint().expect("a checkpoint with the tenth commit");
        assert!(checkpoint.starts_with(r#"{"version":9,"#), "{checkpoint}");
        let table = wh.open(DIAGNOSES).await.unwrap().unwrap();
        assert_eq!(table.snapshot().unwrap().table_config().checkpoint_interval().get(), 10);
        assert_eq!(query_rows(&wh, "SELECT count(*) FROM diagnoses").await, vec!["9"]);
        // A table it creates has the property from its first commit.
        write(&wh, "edges", batch(), None).await.unwrap();
        let edges = wh.open("edges").await.unwrap().unwrap();
        assert_eq!(
            (edges.version(), edges.snapshot().unwrap().table_config().checkpoint_interval().get()),
            (Some(0), 10)
        );
        // An interval an operator chose stays; the properties the table lacks come in a commit
        // of their own.
        DeltaTable::try_from_url(wh.table_url("chosen").unwrap())
            .await
            .unwrap()
            .write(vec![batch()])
            .with_partition_columns(PARTITION_COLUMNS)
            .with_configuration([("delta.checkpointInterval", Some("5"))])
            .await
            .unwrap();
        write(&wh, "chosen", batch(), None).await.unwrap();
        let chosen = wh.open("chosen").await.unwrap().unwrap();
        assert_eq!(
            (chosen.version(), chosen.snapshot().unwrap().table_config().checkpoint_interval().get()),
            (Some(2), 5)
        );
    }

    /// A table query's text comes from DataFusion as `Utf8View`, which Delta reads back as
    /// `Utf8`: a rerun's rows are cast to the table's types and committed directly, not sent
    /// through Delta's own operation as if they brought new column types.
    #[tokio::test]
    async fn a_saved_tables_rerun_is_committed_directly() {
        use datafusion::arrow::array::StringViewArray;
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let d1 = NaiveDate::from_ymd_opt(2008, 8, 23).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("src", DataType::Utf8View, true)]));
        let result = |hosts: Vec<&str>| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(StringViewArray::from(hosts))]).unwrap()
        };
        let replace = || Some(Replace { cluster: Some("c1".into()), date: d1, run: None });
        for (id, hosts) in [("r1", vec!["a", "b"]), ("r2", vec!["c"])] {
            write(&wh, "edges", table_batch(&[result(hosts)], schema.clone(), &run(id, d1), "c1").unwrap(), replace())
                .await
                .unwrap();
        }
        assert_eq!(query_rows(&wh, "SELECT run_id, src FROM edges").await, ["r2 c"]);
        let log = last_commit(&wh, "edges").await;
        assert!(!log.contains("operationMetrics"), "{log}");
    }

    /// A table query's rows carry their run; a column a later version of the query adds joins
    /// the table, NULL in the rows written before it.
    #[tokio::test]
    async fn a_saved_table_takes_the_columns_a_later_run_adds() {
        let dir = tempfile::tempdir().unwrap();
        let wh = Warehouse::new(dir.path());
        let d1 = NaiveDate::from_ymd_opt(2008, 8, 23).unwrap();
        let d2 = NaiveDate::from_ymd_opt(2008, 8, 24).unwrap();
        let result = |columns: &[(&str, i64)]| {
            let fields: Vec<Field> =
                columns.iter().map(|(name, _)| Field::new(*name, DataType::Int64, false)).collect();
            let arrays: Vec<ArrayRef> =
                columns.iter().map(|(_, v)| Arc::new(Int64Array::from(vec![*v])) as ArrayRef).collect();
            let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap();
            (batch.schema(), vec![batch])
        };
        let (schema, batches) = result(&[("edges", 3)]);
        let replace = |date| Some(Replace { cluster: Some("c1".into()), date, run: None });
        write(&wh, "edges", table_batch(&batches, schema, &run("r1", d1), "c1").unwrap(), replace(d1)).await.unwrap();
        let (schema, batches) = result(&[("edges", 4), ("blocks", 9)]);
        write(&wh, "edges", table_batch(&batches, schema, &run("r2", d2), "c1").unwrap(), replace(d2)).await.unwrap();
        let sql = "SELECT run_id, parameters, edges, blocks, CAST(date AS VARCHAR) AS day FROM edges ORDER BY day";
        assert_eq!(query_rows(&wh, sql).await, ["r1 {} 3  2008-08-23", "r2 {} 4 9 2008-08-24"]);
        // The merge put `blocks` after the partition columns; a rerun with the same columns is
        // still committed directly (no deltalake operation metrics), its columns taken by name.
        let (schema, batches) = result(&[("edges", 5), ("blocks", 10)]);
        write(&wh, "edges", table_batch(&batches, schema, &run("r3", d2), "c1").unwrap(), replace(d2)).await.unwrap();
        assert_eq!(query_rows(&wh, sql).await, ["r1 {} 3  2008-08-23", "r3 {} 5 10 2008-08-24"]);
        let log = last_commit(&wh, "edges").await;
        assert!(!log.contains("operationMetrics"), "{log}");
        // A result with a column of the run's own name is refused, not overwritten.
        let (schema, batches) = result(&[("run_id", 1)]);
        let refused = table_batch(&batches, schema, &run("r3", d2), "c1").unwrap_err().to_string();
        assert!(refused.contains("the result has a column run_id"), "{refused}");
    }
}
