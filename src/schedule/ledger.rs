//! The scheduler's ledger, `schedule_runs`: one row per attempt, read back on start to know
//! which occurrences were dealt with.

use std::collections::HashMap;

use anyhow::Result;
use chrono::{DateTime, Utc};
use datafusion::arrow::array::{Array, cast::AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};

use crate::diagnose::results::{self, LedgerEntry, SCHEDULE_RUNS};
use crate::warehouse::Warehouse;

/// The ledger: one row per attempt in `schedule_runs`.
pub struct Ledger {
    warehouse: Warehouse,
}

impl Ledger {
    pub fn new(warehouse: Warehouse) -> Ledger {
        Ledger { warehouse }
    }

    pub async fn record(&self, entry: &LedgerEntry) -> Result<()> {
        let batch = results::ledger_batch(std::slice::from_ref(entry))?;
        results::write(&self.warehouse, SCHEDULE_RUNS, batch, None).await
    }

    /// The newest occurrence of each job that was dealt with: succeeded, or failed for good.
    pub async fn handled(&self) -> Result<HashMap<String, DateTime<Utc>>> {
        let mut out = HashMap::new();
        if self.warehouse.open(SCHEDULE_RUNS).await?.is_none() {
            return Ok(out);
        }
        let ctx = crate::catalog::session(&self.warehouse).await?;
        let sql = "SELECT job, max(scheduled_for) FROM schedule_runs \
                   WHERE status IN ('succeeded', 'failed') AND scheduled_for IS NOT NULL GROUP BY job";
        for batch in ctx.sql(sql).await?.collect().await? {
            // Strings may come back as views, depending on the reader: cast to what is read here.
            let jobs = cast(batch.column(0), &DataType::Utf8)?;
            let jobs = jobs.as_string::<i32>();
            let times = cast(batch.column(1), &DataType::Timestamp(TimeUnit::Microsecond, None))?;
            let times = times.as_primitive::<TimestampMicrosecondType>();
            for row in 0..batch.num_rows() {
                if times.is_valid(row)
                    && let Some(t) = DateTime::from_timestamp_micros(times.value(row))
                {
                    out.insert(jobs.value(row).to_string(), t);
                }
            }
        }
        Ok(out)
    }
}
