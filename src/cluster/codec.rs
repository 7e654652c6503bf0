//! How a plan's tables cross from the client to Ballista's scheduler: a warehouse table, or a
//! session's own, as the Parquet files it reads ([`FilesTable`]); `generate_series(…)` and
//! `range(…)` as their arguments ([`Series`]). Everything else goes as Ballista's own codec
//! sends it. The client, `kahuna scheduler` and `kahuna executor` all use this codec.

use std::sync::Arc;

use datafusion::arrow::datatypes::IntervalMonthDayNano;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result, TableReference};
use datafusion::datasource::file_format::FileFormatFactory;
use datafusion::execution::TaskContext;
use datafusion::functions_table::generate_series::{
    Empty, GenSeriesArgs, GenerateSeriesTable, GenericSeriesState, TimestampValue,
};
use datafusion::logical_expr::{AggregateUDF, Extension, LogicalPlan, ScalarUDF, WindowUDF};
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use serde::{Deserialize, Serialize};

use super::files::{FilesTable, SnapshotFiles};

const FILES: u8 = b'F';
const SERIES: u8 = b'S';

/// The arguments of a `generate_series(…)` or `range(…)` table (DataFusion's protobuf has its
/// scan, not its table), read back from the generator the table makes.
#[derive(Debug, Serialize, Deserialize)]
enum Series {
    /// An argument was NULL: no rows.
    Null {
        range: bool,
    },
    Integers {
        start: i64,
        end: i64,
        step: i64,
        include_end: bool,
        range: bool,
    },
    Timestamps {
        start: i64,
        end: i64,
        step: (i32, i32, i64),
        tz: Option<String>,
        include_end: bool,
        range: bool,
    },
}

impl Series {
    fn of(table: &GenerateSeriesTable) -> Result<Series> {
        let generator = table.as_generator(1)?;
        let generator = generator.read();
        let any = generator.as_any();
        if let Some(empty) = any.downcast_ref::<Empty>() {
            return Ok(Series::Null { range: empty.name() == "range" });
        }
        if let Some(series) = any.downcast_ref::<GenericSeriesState<i64>>() {
            return Ok(Series::Integers {
                start: *series.start(),
                end: *series.end(),
                step: *series.step(),
                include_end: series.include_end(),
                range: series.name() == "range",
            });
        }
        if let Some(series) = any.downcast_ref::<GenericSeriesState<TimestampValue>>() {
            let step = series.step();
            return Ok(Series::Timestamps {
                start: series.start().value(),
                end: series.end().value(),
                step: (step.months, step.days, step.nanoseconds),
                tz: series.start().tz_str().map(|tz| tz.to_string()),
                include_end: series.include_end(),
                range: series.name() == "range",
            });
        }
        Err(DataFusionError::NotImplemented(format!("a Ballista cluster cannot run this series: {generator}")))
    }

    fn table(self, schema: SchemaRef) -> GenerateSeriesTable {
        let name = |range: bool| if range { "range" } else { "generate_series" };
        let args = match self {
            Series::Null { range } => GenSeriesArgs::ContainsNull { name: name(range) },
            Series::Integers { start, end, step, include_end, range } => {
                GenSeriesArgs::Int64Args { start, end, step, include_end, name: name(range) }
            }
            Series::Timestamps { start, end, step: (months, days, nanoseconds), tz, include_end, range } => {
                GenSeriesArgs::TimestampArgs {
                    start,
                    end,
                    step: IntervalMonthDayNano { months, days, nanoseconds },
                    tz: tz.map(Arc::from),
                    include_end,
                    name: name(range),
                }
            }
        };
        GenerateSeriesTable::new(schema, args)
    }
}

#[derive(Debug, Default)]
pub struct KahunaCodec {
    ballista: ballista_core::serde::BallistaLogicalExtensionCodec,
}

impl LogicalExtensionCodec for KahunaCodec {
    fn try_decode(&self, buf: &[u8], inputs: &[LogicalPlan], ctx: &TaskContext) -> Result<Extension> {
        self.ballista.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> Result<()> {
        self.ballista.try_encode(node, buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: SchemaRef,
        ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        match buf.split_first() {
            Some((&FILES, json)) => {
                let files: SnapshotFiles = serde_json::from_slice(json)
                    .map_err(|e| DataFusionError::Plan(format!("{table_ref}: the files of its snapshot: {e}")))?;
                Ok(Arc::new(FilesTable::new(files, schema)?))
            }
            Some((&SERIES, json)) => {
                let series: Series = serde_json::from_slice(json)
                    .map_err(|e| DataFusionError::Plan(format!("{table_ref}: a series' arguments: {e}")))?;
                Ok(Arc::new(series.table(schema)))
            }
            _ => self.ballista.try_decode_table_provider(buf, table_ref, schema, ctx),
        }
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        if let Some(files) = node.downcast_ref::<FilesTable>() {
            buf.push(FILES);
            serde_json::to_writer(&mut *buf, &files.files).map_err(|e| DataFusionError::External(Box::new(e)))?;
            return Ok(());
        }
        if let Some(series) = node.downcast_ref::<GenerateSeriesTable>() {
            buf.push(SERIES);
            serde_json::to_writer(&mut *buf, &Series::of(series)?)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            return Ok(());
        }
        self.ballista.try_encode_table_provider(table_ref, node, buf)
    }

    fn try_decode_file_format(&self, buf: &[u8], ctx: &TaskContext) -> Result<Arc<dyn FileFormatFactory>> {
        self.ballista.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(&self, buf: &mut Vec<u8>, node: Arc<dyn FileFormatFactory>) -> Result<()> {
        self.ballista.try_encode_file_format(buf, node)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        self.ballista.try_decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.ballista.try_encode_udf(node, buf)
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        self.ballista.try_decode_udaf(name, buf)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.ballista.try_encode_udaf(node, buf)
    }

    fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> Result<Arc<WindowUDF>> {
        self.ballista.try_decode_udwf(name, buf)
    }

    fn try_encode_udwf(&self, node: &WindowUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.ballista.try_encode_udwf(node, buf)
    }
}
