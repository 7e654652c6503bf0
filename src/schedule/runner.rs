//! What runs a job: [`WarehouseRunner`] for the real work, a scripted runner in the tests.

use std::cell::RefCell;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use async_trait::async_trait;
use chrono::NaiveDate;

use super::config::{Job, Work};
use super::plan;
use crate::catalog::Snapshot;
use crate::diagnose::{self, Record, Request};
use crate::ingest::{IngestOptions, ingest};
use crate::report;
use crate::warehouse::Warehouse;

/// Does one run's work; returns the rows it wrote. Not `Send`: an ingest's future holds
/// Parquet writers that are not, and the scheduler runs its work on its own task anyway.
#[async_trait(?Send)]
pub trait Runner {
    async fn run(&self, job: &Job, run_date: NaiveDate) -> Result<usize>;

    /// The runs due together are over: what they shared is not kept for the next ones.
    fn batch_done(&self) {}
}

/// The real work: a query over the run date's local day, replacing that date's partition; or
/// an ingest of the job's paths.
pub struct WarehouseRunner {
    warehouse: Warehouse,
    /// The tables the queries of one batch read, opened once for all of them (see
    /// [`diagnose::run_on`]); an ingest drops it, and so does the batch's end, so that the next
    /// batch reads what was written in between.
    snapshot: RefCell<Option<Snapshot>>,
}

impl WarehouseRunner {
    pub fn new(warehouse: Warehouse) -> WarehouseRunner {
        WarehouseRunner { warehouse, snapshot: RefCell::new(None) }
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let cached = self.snapshot.borrow().clone();
        match cached {
            Some(snapshot) => Ok(snapshot),
            None => {
                let snapshot = Snapshot::take(&self.warehouse).await?;
                *self.snapshot.borrow_mut() = Some(snapshot.clone());
                Ok(snapshot)
            }
        }
    }
}

#[async_trait(?Send)]
impl Runner for WarehouseRunner {
    fn batch_done(&self) {
        self.snapshot.take();
    }

    async fn run(&self, job: &Job, run_date: NaiveDate) -> Result<usize> {
        match &job.work {
            Work::Query { query, params } => {
                let (from, to) = plan::day_window(run_date, job.schedule.zone)?;
                let mut request = Request::new(query.clone());
                request.from = Some(from);
                request.to = Some(to);
                request.cluster = job.cluster.clone();
                request.params = params.clone();
                request.run_date = run_date;
                let snapshot = self.snapshot().await?;
                // On a task of its own: queries side by side then use both cores in the steps
                // DataFusion runs on the caller's task too (a final merge, the commit).
                let run = tokio::spawn(async move { diagnose::run_on(&snapshot, &request, Record::Replace).await });
                let outcome = run.await.unwrap_or_else(|e| Err(anyhow!("{}: {e}", job.name)));
                // A retry opens the tables again: what failed may have been reading one.
                if outcome.is_err() {
                    self.snapshot.take();
                }
                Ok(outcome?.rows)
            }
            Work::Ingest { paths, zone, hints } => {
                self.snapshot.take();
                let options = IngestOptions {
                    paths: paths.clone(),
                    cluster: job.cluster.clone().unwrap_or_else(|| "default".into()),
                    warehouse: self.warehouse.clone(),
                    zone: *zone,
                    hints: hints.clone(),
                    progress: false,
                    threads: crate::cores(),
                    dry_run: false,
                };
                let summary = ingest(&options).await?;
                // A night's files, and the nights before, leave small files: compacted here.
                options.warehouse.compact_small_files(&options.cluster).await?;
                Ok(summary.total(|r| r.events) as usize)
            }
            Work::Report { out, queries } => {
                let (from, to) = plan::day_window(run_date, job.schedule.zone)?;
                let options = report::Options {
                    cluster: job.cluster.clone(),
                    from: Some(from),
                    to: Some(to),
                    run: None,
                    queries: queries.clone(),
                    eval: None,
                };
                let report = report::build(&self.warehouse, &options).await?;
                let path = PathBuf::from(out.replace("{date}", &run_date.to_string()));
                if let Some(folder) = path.parent() {
                    std::fs::create_dir_all(folder).with_context(|| format!("cannot make {}", folder.display()))?;
                }
                std::fs::write(&path, report.html()).with_context(|| format!("cannot write {}", path.display()))?;
                Ok(report.indicted.len())
            }
        }
    }
}
