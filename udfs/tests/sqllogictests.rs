//! Runs every `tests/slt/*.slt` file against a DataFusion context with our functions registered,
//! through the `sqllogictest` runner and a small `AsyncDB` of our own. A normal test (not a
//! `harness = false` binary), so `cargo test` and `cargo nextest` both run it.
//!
//! Result formatting, which the `.slt` files are written against: NULL is `NULL`; floats are
//! rounded to 9 decimals and printed in Rust's shortest form (`1`, `0.5`, `NaN`, `inf`); lists
//! are `[a, b]` and structs `{name: value, ...}` with the same rules inside.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::DataFusionError;
use datafusion::prelude::{SessionConfig, SessionContext};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

struct Kahuna {
    ctx: SessionContext,
}

fn format_float(v: f64) -> String {
    if v.is_finite() {
        let rounded = (v * 1e9).round() / 1e9;
        // -0 prints as 0, so that rounding a tiny negative value does not show a sign.
        format!("{}", if rounded == 0.0 { 0.0 } else { rounded })
    } else {
        format!("{v}")
    }
}

fn format_array_items(array: &Arc<dyn Array>) -> Result<String, DataFusionError> {
    let items = (0..array.len())
        .map(|i| format_value(&ScalarValue::try_from_array(array, i)?))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!("[{}]", items.join(", ")))
}

fn format_value(v: &ScalarValue) -> Result<String, DataFusionError> {
    if v.is_null() {
        return Ok("NULL".to_string());
    }
    Ok(match v {
        ScalarValue::Float64(Some(x)) => format_float(*x),
        ScalarValue::Float32(Some(x)) => format_float(f64::from(*x)),
        ScalarValue::List(list) => format_array_items(&list.value(0))?,
        ScalarValue::LargeList(list) => format_array_items(&list.value(0))?,
        ScalarValue::FixedSizeList(list) => format_array_items(&list.value(0))?,
        ScalarValue::Struct(s) => {
            let fields = s
                .fields()
                .iter()
                .zip(s.columns())
                .map(|(f, c)| Ok(format!("{}: {}", f.name(), format_value(&ScalarValue::try_from_array(c, 0)?)?)))
                .collect::<Result<Vec<_>, DataFusionError>>()?;
            format!("{{{}}}", fields.join(", "))
        }
        other => other.to_string(),
    })
}

fn column_type(t: &DataType) -> DefaultColumnType {
    if t.is_integer() {
        DefaultColumnType::Integer
    } else if t.is_floating() {
        DefaultColumnType::FloatingPoint
    } else if matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) {
        DefaultColumnType::Text
    } else {
        DefaultColumnType::Any
    }
}

#[async_trait]
impl AsyncDB for Kahuna {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let df = self.ctx.sql(sql).await?;
        // DDL and other statements have no columns.
        if df.schema().fields().is_empty() {
            df.collect().await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let types = df.schema().fields().iter().map(|f| column_type(f.data_type())).collect();
        let mut rows = Vec::new();
        for batch in df.collect().await? {
            for row in 0..batch.num_rows() {
                let values = batch
                    .columns()
                    .iter()
                    .map(|c| format_value(&ScalarValue::try_from_array(c, row)?))
                    .collect::<Result<Vec<_>, _>>()?;
                rows.push(values);
            }
        }
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "datafusion"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slt_files() {
    // The folder the runner names now, not the one the binary was built in (`env!`): a build
    // shared by several checkouts (CI's cache) can outlive the checkout that made it.
    let package =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from);
    let dir = package.join("tests/slt");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "slt"));
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    let mut failures = Vec::new();
    for file in &files {
        // Each file runs with 1 and with 4 target partitions: results must not depend on it.
        for partitions in [1, 4] {
            let mut runner = sqllogictest::Runner::new(move || async move {
                let config = SessionConfig::new().with_target_partitions(partitions).with_batch_size(16);
                let mut ctx = SessionContext::new_with_config(config);
                kahuna_udfs::register_all(&mut ctx)?;
                Ok::<_, DataFusionError>(Kahuna { ctx })
            });
            if let Err(e) = runner.run_file_async(file).await {
                failures.push(format!("{} ({partitions} partitions): {e}", file.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn floats_print_rounded() {
    assert_eq!(format_float(1.0), "1");
    assert_eq!(format_float(0.1 + 0.2), "0.3");
    assert_eq!(format_float(-1e-12), "0");
    assert_eq!(format_float(f64::NAN), "NaN");
    assert_eq!(format_value(&ScalarValue::Float64(None)).unwrap(), "NULL");
}
