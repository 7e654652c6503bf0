//! The warehouse tables of the design card: their columns, and builders that turn rows into
//! Arrow record batches. Every table is partitioned by `cluster` and `date`; the builders leave
//! those two out, since the Delta writer takes them as the partition's values.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::error::ArrowError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Logs,
    States,
    Rejects,
    /// One sadc-vector (Ganesha's 14 metrics) per host and sample time, or a restart marker.
    Sadc,
    /// Every figure sadf gave, one row per record of figures (an activity's, of one device or
    /// the whole system, at one second): read as the long form through the view `sar_metrics`.
    SarRecords,
    /// One Hadoop job from its job history.
    Jobs,
    /// One task attempt from job history.
    Attempts,
    /// A host's own address as its DataNode lines name it, per file and day: how peers, which
    /// DataNode logs name by address, map back to hosts.
    Addresses,
    Ingests,
}

pub const PARTITION_COLUMNS: [&str; 2] = ["cluster", "date"];

/// Ganesha's sadc-vector (Table 1), named with sysstat's units, in `sadc` column order.
pub const SADC_METRICS: [&str; 14] = [
    "cpu_user_pct",
    "cpu_system_pct",
    "cpu_iowait_pct",
    "cswch_s",
    "runq_sz",
    "plist_sz",
    "ldavg_1",
    "rx_kb_s",
    "tx_kb_s",
    "pgpgin_s",
    "pgpgout_s",
    "fault_s",
    "bread_s",
    "bwrtn_s",
];

impl Table {
    /// In commit order: `ingests` last, so a file counts as ingested only once its rows are in.
    pub const ALL: [Table; 9] = [
        Table::Logs,
        Table::States,
        Table::Rejects,
        Table::Sadc,
        Table::SarRecords,
        Table::Jobs,
        Table::Attempts,
        Table::Addresses,
        Table::Ingests,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Table::Logs => "logs",
            Table::States => "states",
            Table::Rejects => "rejects",
            Table::Sadc => "sadc",
            Table::SarRecords => "sar_records",
            Table::Jobs => "jobs",
            Table::Attempts => "attempts",
            Table::Addresses => "addresses",
            Table::Ingests => "ingests",
        }
    }

    /// Columns stored in the Parquet files.
    pub fn data_schema(self) -> SchemaRef {
        let fields = match self {
            Table::Logs => vec![
                text("host", true),
                text("daemon", false),
                ts("ts", false),
                text("level", false),
                text("logger", false),
                text("thread", true),
                text("message", false),
                text("job_id", true),
                text("task_id", true),
                text("block_id", true),
                text("file", false),
                int("line", false),
                text("ingest_id", false),
            ],
            Table::States => vec![
                text("host", true),
                text("daemon", false),
                text("state", false),
                text("job_id", true),
                text("task_id", true),
                text("peer_task_id", true),
                text("block_id", true),
                text("peer_host", true),
                text("mirror_host", true),
                ts("start_ts", true),
                ts("end_ts", true),
                Field::new("duration_ms", DataType::Float64, true),
                int("bytes", true),
                text("outcome", true),
                text("source", false),
                text("file", false),
                int("start_line", true),
                int("end_line", true),
                text("ingest_id", false),
            ],
            Table::Rejects => vec![
                text("ingest_id", false),
                text("file", false),
                int("line", false),
                int("offset", false),
                text("reason", false),
                text("raw", false),
            ],
            Table::Sadc => {
                let mut fields = vec![
                    text("host", false),
                    ts("ts", false),
                    Field::new("restart", DataType::Boolean, false),
                    int("interval_s", true),
                ];
                fields.extend(SADC_METRICS.iter().map(|m| Field::new(*m, DataType::Float64, true)));
                fields.extend([text("file", false), int("line", false), text("ingest_id", false)]);
                fields
            }
            Table::SarRecords => vec![
                text("host", false),
                ts("ts", false),
                text("activity", false),
                text("device", true),
                text("metric_names", false),
                Field::new("metric_values", DataType::List(Arc::new(list_element(DataType::Float64))), false),
            ],
            Table::Jobs => vec![
                text("job_id", false),
                text("user", true),
                text("name", true),
                text("queue", true),
                ts("submit_ts", true),
                ts("launch_ts", true),
                ts("finish_ts", true),
                text("outcome", true),
                int("total_maps", true),
                int("total_reduces", true),
                int("finished_maps", true),
                int("finished_reduces", true),
                int("failed_maps", true),
                int("failed_reduces", true),
                text("file", false),
                int("line", false),
                text("ingest_id", false),
            ],
            Table::Attempts => vec![
                text("job_id", true),
                text("task_id", true),
                text("attempt_id", false),
                text("type", true),
                text("host", true),
                text("rack", true),
                ts("start_ts", true),
                ts("finish_ts", true),
                ts("shuffle_finish_ts", true),
                ts("sort_finish_ts", true),
                text("status", true),
                text("error", true),
                text("file", false),
                int("line", false),
                text("ingest_id", false),
            ],
            Table::Addresses => vec![
                text("host", false),
                text("daemon", false),
                text("address", false),
                ts("first_ts", false),
                ts("last_ts", false),
                int("lines", false),
                text("file", false),
                text("ingest_id", false),
            ],
            Table::Ingests => vec![
                text("ingest_id", false),
                text("file", false),
                text("file_key", true),
                text("host", true),
                text("daemon", true),
                text("layout", true),
                Field::new("merged", DataType::Boolean, false),
                text("status", false),
                text("error", true),
                int("size", false),
                text("hash", true),
                int("offset_start", false),
                int("offset_end", false),
                int("lines_read", false),
                int("lines_parsed", false),
                int("lines_rejected", false),
                int("lines_skipped", false),
                int("events", false),
                int("states", false),
                int("unterminated", false),
                int("unmatched_ends", false),
                int("out_of_order", false),
                ts("started", false),
                ts("finished", false),
            ],
        };
        Arc::new(Schema::new(fields))
    }

    /// Every column, partition columns last, as the Delta table declares them.
    pub fn table_schema(self) -> SchemaRef {
        let mut fields: Vec<Field> = self.data_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(text("cluster", false));
        fields.push(Field::new("date", DataType::Date32, false));
        Arc::new(Schema::new(fields))
    }

    /// Columns a dictionary would only slow: values nearly all distinct, or ids each on a few
    /// lines of a log (a block's, a task's, a 2.x thread named after its block); and sysstat's, whose
    /// dictionary lookups (a hash of every figure and name) cost much of their write time and
    /// save next to nothing of their size, which zstd gets anyway. Names are dotted Parquet paths
    /// (`metric_values.list.element`, a list's values).
    pub fn columns_without_dictionary(self) -> &'static [&'static str] {
        match self {
            Table::Logs => &["message", "ts", "line", "block_id", "task_id", "job_id", "thread"],
            Table::States => &["start_ts", "end_ts", "duration_ms", "block_id", "task_id"],
            Table::Rejects => &["raw"],
            Table::Sadc => &SADC_WITHOUT_DICTIONARY,
            Table::SarRecords => &["ts", "host", "activity", "device", "metric_names", SAR_VALUES_LEAF],
            Table::Jobs => &["job_id", "submit_ts", "launch_ts", "finish_ts"],
            Table::Attempts => {
                &["task_id", "attempt_id", "start_ts", "finish_ts", "shuffle_finish_ts", "sort_finish_ts"]
            }
            Table::Addresses | Table::Ingests => &[],
        }
    }

    /// Times that climb by a step or stay put from row to row (a capture's seconds): delta
    /// encoding packs them into a few bits each, faster than a dictionary and smaller than plain.
    pub fn delta_encoded_columns(self) -> &'static [&'static str] {
        match self {
            Table::Logs | Table::Sadc => &["ts", "line"],
            Table::SarRecords => &["ts"],
            _ => &[],
        }
    }

    /// Text columns each row group is grouped by, in this order: queries read a few kinds of
    /// state at a time (SALSA's three, the copies alone, …), and with each kind's rows together
    /// the page index skips the others' pages.
    pub fn row_group_order(self) -> &'static [&'static str] {
        match self {
            Table::States => &["state", "daemon"],
            _ => &[],
        }
    }

    /// Columns whose min/max statistics would skip nothing and cost a comparison of every value
    /// as it is written: free text, and the figures of `sar_records`, all kinds of units mixed.
    pub fn columns_without_statistics(self) -> &'static [&'static str] {
        match self {
            Table::Logs => &["message"],
            Table::Rejects => &["raw"],
            Table::SarRecords => &["metric_names", SAR_VALUES_LEAF],
            _ => &[],
        }
    }
}

/// `sadc`'s times, lines and 14 metrics.
const SADC_WITHOUT_DICTIONARY: [&str; 16] = {
    let mut columns = ["ts"; 16];
    columns[1] = "line";
    let mut at = 0;
    while at < SADC_METRICS.len() {
        columns[at + 2] = SADC_METRICS[at];
        at += 1;
    }
    columns
};

/// Where Parquet keeps `sar_records`' figures: the list's elements, named as Delta names them.
const SAR_VALUES_LEAF: &str = "metric_values.list.element";

/// A list's elements as a Delta table's schema names them (`element`), never null.
pub fn list_element(data_type: DataType) -> Field {
    Field::new("element", data_type, false)
}

/// Views over the warehouse's tables, by name: the table each reads, and its definition.
/// `sar_metrics` is the long form of `sar_records` — one row per figure (host, ts, activity,
/// device, metric, value) — kept as a view so that ingest writes a record's names once and
/// its figures as one list, not forty-odd rows of repeated names per sample second.
pub const VIEWS: [(&str, Table, &str); 1] = [(
    "sar_metrics",
    Table::SarRecords,
    "SELECT host, ts, activity, device, unnest(string_to_array(metric_names, ';')) AS metric, \
     unnest(metric_values) AS \"value\", \"cluster\", \"date\" FROM sar_records",
)];

/// The separator of `sar_records.metric_names`: sadf's own, so no name it exports holds one.
pub const METRIC_NAME_SEPARATOR: char = ';';

fn text(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn int(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Int64, nullable)
}

fn ts(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), nullable)
}

/// Rows of a Parquet row group.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// Room a builder starts with when nothing says how many rows will come (Arrow's own default).
const DEFAULT_ROWS: usize = 1024;

/// A column being built, whatever its type.
pub enum Column {
    Text(StringBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
    Micros(TimestampMicrosecondBuilder),
}

impl Column {
    /// A builder with room for `rows` values and, for text, `bytes` bytes of them.
    fn for_type(data_type: &DataType, rows: usize, bytes: usize) -> Column {
        match data_type {
            DataType::Utf8 => Column::Text(StringBuilder::with_capacity(rows, bytes)),
            DataType::Int64 => Column::Int(Int64Builder::with_capacity(rows)),
            DataType::Float64 => Column::Float(Float64Builder::with_capacity(rows)),
            DataType::Boolean => Column::Bool(BooleanBuilder::with_capacity(rows)),
            _ => Column::Micros(TimestampMicrosecondBuilder::with_capacity(rows).with_timezone("UTC")),
        }
    }

    /// Bytes of text held (none for other types).
    fn text_bytes(&self) -> usize {
        match self {
            Column::Text(b) => b.values_slice().len(),
            _ => 0,
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Column::Text(b) => Arc::new(b.finish()),
            Column::Int(b) => Arc::new(b.finish()),
            Column::Float(b) => Arc::new(b.finish()),
            Column::Bool(b) => Arc::new(b.finish()),
            Column::Micros(b) => Arc::new(b.finish()),
        }
    }
}

/// Rows of one table and one partition date, column by column in schema order.
pub struct Rows {
    pub table: Table,
    pub date: i32,
    schema: SchemaRef,
    columns: Vec<Column>,
    len: usize,
    /// Columns built whole by their producer ([`Rows::from_arrays`]), not row by row.
    built: Option<Vec<ArrayRef>>,
}

/// Days since 1970 of a UTC millisecond time: the `date` partition.
pub fn date_of_ms(ms: i64) -> i32 {
    ms.div_euclid(86_400_000) as i32
}

impl Rows {
    pub fn new(table: Table, date: i32) -> Rows {
        let schema = table.data_schema();
        let columns = schema.fields().iter().map(|f| Column::for_type(f.data_type(), DEFAULT_ROWS, 0)).collect();
        Rows { table, date, schema, columns, len: 0, built: None }
    }

    /// Empty rows for `date` with room for as many rows and bytes as these hold, and an eighth
    /// more: a producer's next batch is much like its last, so its builders need not grow by
    /// doubling, copying what they hold into ever larger buffers.
    pub fn empty_like(&self, date: i32) -> Rows {
        let room = |n: usize| n + n / 8;
        let rows = room(self.len).max(DEFAULT_ROWS);
        let columns = (self.schema.fields().iter().enumerate())
            .map(|(at, field)| {
                Column::for_type(field.data_type(), rows, room(self.columns.get(at).map_or(0, Column::text_bytes)))
            })
            .collect();
        Rows { table: self.table, date, schema: self.schema.clone(), columns, len: 0, built: None }
    }

    /// Rows whose columns, in schema order, were built whole: `sar_records`, dozens of figures per
    /// sysstat sample, is built from coded text without a builder call per value. Checked
    /// against the schema by [`Rows::finish`]; no row is to be appended to them.
    pub fn from_arrays(table: Table, date: i32, arrays: Vec<ArrayRef>) -> Rows {
        let len = arrays.first().map_or(0, |a| a.len());
        Rows { table, date, schema: table.data_schema(), columns: Vec::new(), len, built: Some(arrays) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Starts a row; its values follow in schema order through the returned appender.
    pub fn row(&mut self) -> RowAppender<'_> {
        self.len += 1;
        RowAppender { columns: &mut self.columns, next: 0 }
    }

    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let arrays = match self.built.take() {
            Some(arrays) => arrays,
            None => self.columns.iter_mut().map(Column::finish).collect(),
        };
        self.len = 0;
        RecordBatch::try_new(self.schema.clone(), arrays)
    }
}

/// Appends one row's values in schema order. A value of the wrong kind for its column is a
/// programming error in this crate, caught by the batch's schema check and by the tests.
pub struct RowAppender<'a> {
    columns: &'a mut [Column],
    next: usize,
}

impl RowAppender<'_> {
    fn column(&mut self) -> &mut Column {
        let at = self.next;
        self.next += 1;
        &mut self.columns[at]
    }

    pub fn text(mut self, value: Option<&str>) -> Self {
        if let Column::Text(b) = self.column() {
            b.append_option(value);
        }
        self
    }

    pub fn int(mut self, value: Option<i64>) -> Self {
        if let Column::Int(b) = self.column() {
            b.append_option(value);
        }
        self
    }

    pub fn float(mut self, value: Option<f64>) -> Self {
        if let Column::Float(b) = self.column() {
            b.append_option(value);
        }
        self
    }

    pub fn bool(mut self, value: bool) -> Self {
        if let Column::Bool(b) = self.column() {
            b.append_value(value);
        }
        self
    }

    /// A UTC time given in milliseconds.
    pub fn ms(mut self, value: Option<i64>) -> Self {
        if let Column::Micros(b) = self.column() {
            b.append_option(value.map(|ms| ms * 1000));
        }
        self
    }
}

/// Days since 1970-01-01: a `date` partition value.
pub(crate) fn days(date: chrono::NaiveDate) -> i32 {
    (date - chrono::NaiveDate::default()).num_days() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_build_batches_of_the_table_schema() {
        let mut rows = Rows::new(Table::Rejects, 14_000);
        rows.row().text(Some("i1")).text(Some("f.log")).int(Some(3)).int(Some(120)).text(Some("why")).text(Some("raw"));
        let batch = rows.finish().unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.schema(), Table::Rejects.data_schema());
        assert!(rows.is_empty());
        assert_eq!(Table::Logs.table_schema().fields().len(), Table::Logs.data_schema().fields().len() + 2);
        assert_eq!(date_of_ms(1_219_511_552_466), 14_114);
        assert_eq!(date_of_ms(-1), -1);
    }
}
