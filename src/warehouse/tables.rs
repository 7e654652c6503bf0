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
    /// Every figure sadf gave, one row each: the long form behind `sadc`.
    SarMetrics,
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
        Table::SarMetrics,
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
            Table::SarMetrics => "sar_metrics",
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
            Table::SarMetrics => vec![
                text("host", false),
                ts("ts", false),
                text("activity", false),
                text("device", true),
                text("metric", false),
                Field::new("value", DataType::Float64, false),
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

    /// Columns a dictionary would only slow: values nearly all distinct; and `sar_metrics`'
    /// names, so few and so repeated that zstd folds their plain bytes for less than the
    /// dictionary's lookup of every row (a fifth of that table's write time).
    pub fn columns_without_dictionary(self) -> &'static [&'static str] {
        match self {
            Table::Logs => &["message", "ts", "line"],
            Table::States => &["start_ts", "end_ts", "duration_ms", "block_id", "task_id"],
            Table::Rejects => &["raw"],
            Table::Sadc => &["ts", "line"],
            Table::SarMetrics => &["ts", "value", "host", "activity", "device", "metric"],
            Table::Jobs => &["job_id", "submit_ts", "launch_ts", "finish_ts"],
            Table::Attempts => &["task_id", "attempt_id", "start_ts", "finish_ts", "shuffle_finish_ts", "sort_finish_ts"],
            Table::Addresses | Table::Ingests => &[],
        }
    }

    /// Times that climb by a step or stay put from row to row (a capture's seconds): delta
    /// encoding packs them into a few bits each, faster than a dictionary and smaller than plain.
    pub fn delta_encoded_columns(self) -> &'static [&'static str] {
        match self {
            Table::Logs | Table::Sadc => &["ts", "line"],
            Table::SarMetrics => &["ts"],
            _ => &[],
        }
    }

    /// Rows of a Parquet row group. `sar_metrics` rows are a few bytes each once encoded, and
    /// each group starts its pages and compressor afresh: larger groups write faster there.
    pub fn row_group_rows(self) -> usize {
        match self {
            Table::SarMetrics => 8 * ROW_GROUP_ROWS,
            _ => ROW_GROUP_ROWS,
        }
    }

    /// Text whose min/max statistics would skip nothing and cost a comparison of every value as
    /// it is written: free text, and `sar_metrics`' names, which every sample repeats in turn
    /// so that each page and row group spans them all (the host, one a file, keeps its own).
    pub fn columns_without_statistics(self) -> &'static [&'static str] {
        match self {
            Table::Logs => &["message"],
            Table::Rejects => &["raw"],
            Table::SarMetrics => &["activity", "device", "metric"],
            _ => &[],
        }
    }
}

fn text(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn int(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Int64, nullable)
}

fn ts(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), nullable)
}

/// Rows of a Parquet row group, unless [`Table::row_group_rows`] says otherwise.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// A column being built, whatever its type.
pub enum Column {
    Text(StringBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
    Micros(TimestampMicrosecondBuilder),
}

impl Column {
    fn for_type(data_type: &DataType) -> Column {
        match data_type {
            DataType::Utf8 => Column::Text(StringBuilder::new()),
            DataType::Int64 => Column::Int(Int64Builder::new()),
            DataType::Float64 => Column::Float(Float64Builder::new()),
            DataType::Boolean => Column::Bool(BooleanBuilder::new()),
            _ => Column::Micros(TimestampMicrosecondBuilder::new().with_timezone("UTC")),
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
        let columns = schema.fields().iter().map(|f| Column::for_type(f.data_type())).collect();
        Rows { table, date, schema, columns, len: 0, built: None }
    }

    /// Rows whose columns, in schema order, were built whole: `sar_metrics`, dozens of rows per
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
