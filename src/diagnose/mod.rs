//! The diagnoses: query files and their parameters ([`queries`]), one run of a query over a
//! window with its verdict recorded (this module), the tables results go to ([`results`]), and
//! the scoring of diagnoses on simulated runs ([`eval`]).
//!
//! A verdict query's last statement returns one row per subject with at least `host`, `score`
//! and `indicted` (and, where it has them, `job_id`, `subject`, `cluster`); its other columns are
//! kept as JSON in `detail`. Those rows go to the `diagnoses` table. A query declared
//! `@output table NAME` instead replaces its cluster's partition of the run date in table NAME.

pub mod calibrate;
pub mod eval;
pub mod queries;
pub mod results;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, NaiveDate, Utc};
use datafusion::arrow::array::{Array, RecordBatch, cast::AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::prelude::SessionContext;
use indexmap::IndexMap;

use crate::catalog::{self, Snapshot};
use crate::warehouse::Warehouse;
use queries::{Output, Query};
use results::{DIAGNOSES, Diagnosis, Replace, RunInfo};

/// One run of a query: its window, cluster and parameter values.
#[derive(Clone, Debug)]
pub struct Request {
    pub query: Query,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub cluster: Option<String>,
    pub params: Vec<(String, String)>,
    /// Those of `params` that are a calibration's, not given.
    pub calibrated: Vec<String>,
    /// The `date` partition the results go to.
    pub run_date: NaiveDate,
    /// Bytes the statements' operators may hold at once, spilling to disk beyond (None: no bound).
    pub memory_limit: Option<usize>,
    /// The Ballista scheduler (`host:port`) the statements run on (None: this process).
    pub engine: Option<String>,
}

/// How verdict rows are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Added to `diagnoses` under a new run id (`kahuna diagnose`).
    Append,
    /// Replacing this query's rows for the cluster and run date (scheduled runs, backfills).
    Replace,
    /// Not written at all (`kahuna eval`, `--dry-run`).
    Nothing,
}

pub struct Outcome {
    pub run_id: String,
    /// Each statement's result, in order; statements that return nothing are left out.
    pub results: Vec<Vec<RecordBatch>>,
    /// The verdict rows of a verdict query (empty for a table query).
    pub verdict: Vec<Diagnosis>,
    /// Rows of the last statement.
    pub rows: usize,
    /// Where the values of the calibrated and tuned parameters came from, a line each.
    pub thresholds: Vec<String>,
}

impl Request {
    pub fn new(query: Query) -> Request {
        Request {
            query,
            from: None,
            to: None,
            cluster: None,
            params: Vec::new(),
            calibrated: Vec::new(),
            run_date: Utc::now().date_naive(),
            memory_limit: None,
            engine: None,
        }
    }

    /// The values of every parameter, the window and cluster given as `from`, `to`, `cluster`.
    fn values(&self) -> Vec<(String, String)> {
        let mut values = Vec::new();
        let fmt = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        if let Some(from) = self.from {
            values.push(("from".to_string(), fmt(from)));
        }
        if let Some(to) = self.to {
            values.push(("to".to_string(), fmt(to)));
        }
        if let Some(cluster) = &self.cluster {
            values.push(("cluster".to_string(), cluster.clone()));
        }
        values.extend(self.params.iter().cloned());
        values
    }
}

static RUNS: AtomicU64 = AtomicU64::new(0);

fn run_id(query: &str) -> String {
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    format!("{}-{query}-{:x}-{n}", Utc::now().format("%Y%m%dT%H%M%S%.3fZ"), std::process::id())
}

/// Runs the request in a fresh session over the warehouse (so views a query creates stay its
/// own) and records the result as `record` says.
pub async fn run(warehouse: &Warehouse, request: &Request, record: Record) -> Result<Outcome> {
    let snapshot = match request.engine {
        Some(_) => Snapshot::take_as_files(warehouse).await?,
        None => Snapshot::take(warehouse).await?,
    };
    run_on(&snapshot, request, record).await
}

/// [`run`] over tables `snapshot` has opened already: runs one after another (a nightly batch,
/// a backfill) open `states` once, not once a query. The table the run writes is forgotten by
/// the snapshot, so the next run over it (`combined` after the verdicts) reads what this wrote.
/// A verdict query takes its cluster's calibrated values for parameters not given.
pub async fn run_on(snapshot: &Snapshot, request: &Request, record: Record) -> Result<Outcome> {
    let mut request = request.clone();
    let thresholds = match request.query.output {
        Output::Verdict => calibrate::apply(snapshot, &mut request).await?,
        Output::Table(_) => Vec::new(),
    };
    let request = &request;
    let ctx = match (&request.engine, request.memory_limit) {
        (Some(scheduler), _) => catalog::session_on_cluster(snapshot, scheduler).await?,
        (None, Some(memory)) => catalog::session_limited(snapshot, memory)?,
        (None, None) => catalog::session_over(snapshot)?,
    };
    let outcome = run_in(&ctx, snapshot.warehouse(), request, record).await.map(|o| Outcome { thresholds, ..o });
    if record != Record::Nothing {
        snapshot.forget(match &request.query.output {
            Output::Verdict => DIAGNOSES,
            Output::Table(table) => table,
        });
    }
    outcome
}

/// A stretch of one cluster's history that a query runs over as one diagnosis.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub cluster: String,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

impl Window {
    /// All of a cluster's history.
    pub fn whole(cluster: &str) -> Window {
        Window { cluster: cluster.to_string(), from: None, to: None }
    }
}

/// The verdict of `query` over each window, nothing recorded. Each window is diagnosed on its
/// own: memory stays that of the largest window, not of all of them, which a suite of many
/// runs or months of days would outgrow. One window's query keeps about one core busy, so as
/// many run at once as there are cores.
pub async fn over_windows(
    snapshot: &Snapshot,
    query: &Query,
    params: &[(String, String)],
    windows: &[Window],
) -> Result<Vec<Vec<Diagnosis>>> {
    use futures::StreamExt as _;
    let runs = windows.iter().map(|window| {
        let (snapshot, mut request) = (snapshot.clone(), Request::new(query.clone()));
        request.cluster = Some(window.cluster.clone());
        (request.from, request.to) = (window.from, window.to);
        request.params = params.to_vec();
        tokio::spawn(async move {
            let ctx = catalog::session_over(&snapshot)?;
            let outcome = run_in(&ctx, snapshot.warehouse(), &request, Record::Nothing).await;
            outcome.map(|o| o.verdict).with_context(|| format!("cluster {}", request.cluster.unwrap_or_default()))
        })
    });
    let mut running = futures::stream::iter(runs).buffered(crate::cores());
    let mut verdicts = Vec::new();
    while let Some(verdict) = running.next().await {
        verdicts.push(verdict??);
    }
    Ok(verdicts)
}

/// What a request's statements returned.
pub struct Executed {
    /// Each statement's result, in order; statements that return nothing are left out.
    pub results: Vec<Vec<RecordBatch>>,
    /// The last statement's rows, and its schema (the plan's: an empty result may come as no
    /// batch at all).
    pub last: Vec<RecordBatch>,
    pub last_schema: Option<SchemaRef>,
    /// Every parameter's value as text, in declaration order.
    pub values: IndexMap<String, String>,
    /// The statements as bound.
    pub sql: String,
}

/// Binds the request's parameters and runs its statements in `ctx`, one after another.
pub async fn execute(ctx: &SessionContext, request: &Request) -> Result<Executed> {
    let query = &request.query;
    let bound = query.bind(&request.values())?;
    let statements = catalog::parse(&bound.sql).with_context(|| format!("{}: cannot parse", query.origin))?;
    let count = statements.len();
    let mut executed =
        Executed { results: Vec::new(), last: Vec::new(), last_schema: None, values: bound.values, sql: bound.sql };
    for (index, statement) in statements.into_iter().enumerate() {
        let at = || format!("{}: statement {} of {count}", query.origin, index + 1);
        let plan = catalog::plan(ctx, statement).await.with_context(at)?;
        let frame = catalog::execute(ctx, plan).await.with_context(at)?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let batches = frame.collect().await.with_context(at)?;
        if index + 1 == count {
            executed.last = batches.clone();
            executed.last_schema = Some(schema);
        }
        if batches.iter().any(|b| b.num_columns() > 0) {
            executed.results.push(batches);
        }
    }
    Ok(executed)
}

pub async fn run_in(ctx: &SessionContext, warehouse: &Warehouse, request: &Request, record: Record) -> Result<Outcome> {
    let query = &request.query;
    let Executed { results, last, last_schema, values, .. } = execute(ctx, request).await?;
    let rows = last.iter().map(RecordBatch::num_rows).sum();
    let run_id = run_id(&query.name);
    // Keys sorted, whatever serde_json's features: a scheduled run replaces the rows of the runs
    // with the same parameters, found by this text.
    let mut parameters: std::collections::BTreeMap<&str, &str> =
        values.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // Each calibrated parameter with the default it replaced: a rerun after a new calibration,
    // or the first, still replaces this run's rows, and a run given a value does not.
    let replaced: std::collections::BTreeMap<&str, &str> = request
        .calibrated
        .iter()
        .filter_map(|name| query.param(name).map(|p| (name.as_str(), p.default.as_str())))
        .collect();
    let calibrated = serde_json::to_string(&replaced)?;
    if !replaced.is_empty() {
        parameters.insert(results::CALIBRATED_KEY, &calibrated);
    }
    let parameters = serde_json::to_string(&parameters)?;
    let info = RunInfo {
        run_id: run_id.clone(),
        query: query.name.clone(),
        query_hash: query.hash(),
        window_from: request.from,
        window_to: request.to,
        parameters,
        run_date: request.run_date,
        ran_at: Utc::now(),
    };
    let default_cluster = request.cluster.clone().unwrap_or_else(|| "default".into());
    let mut verdict = Vec::new();
    match &query.output {
        Output::Verdict => {
            let every_detail = record != Record::Nothing;
            verdict = verdict_rows(&last, &default_cluster, every_detail).with_context(|| query.origin.clone())?;
            match record {
                Record::Nothing => {}
                Record::Append => {
                    results::write(warehouse, DIAGNOSES, results::diagnoses_batch(&info, &verdict)?, None).await?
                }
                Record::Replace => {
                    // What an earlier run of the same query with the same parameters wrote: two
                    // scheduled jobs of one query (say Map and ReduceCopy) keep each other's rows.
                    let replace = Replace {
                        cluster: request.cluster.clone(),
                        date: request.run_date,
                        run: Some((query.name.clone(), info.parameters.clone())),
                    };
                    results::write(warehouse, DIAGNOSES, results::diagnoses_batch(&info, &verdict)?, Some(replace))
                        .await?;
                }
            }
        }
        Output::Table(table) if record != Record::Nothing => {
            let Some(schema) = last_schema.filter(|schema| !schema.fields().is_empty()) else {
                bail!("{}: the last statement returned no result to save in {table}", query.origin);
            };
            let batch = results::table_batch(&last, schema, &info, &default_cluster)?;
            let replace = Replace { cluster: request.cluster.clone(), date: request.run_date, run: None };
            results::write(warehouse, table, batch, Some(replace)).await?;
        }
        Output::Table(_) => {}
    }
    Ok(Outcome { run_id, results, verdict, rows, thresholds: Vec::new() })
}

/// The verdict columns of the last statement's rows; other columns become `detail`: on every
/// row when the rows are recorded, else on the indicted rows only, which are all a dry run shows
/// (over months, formatting the others' numbers took a CPU-second).
fn verdict_rows(batches: &[RecordBatch], default_cluster: &str, every_detail: bool) -> Result<Vec<Diagnosis>> {
    // Room for every row at once: grown by doubling, a million rows' vector would be copied
    // into fresh memory, page by page, at each step.
    let mut out = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    let default_cluster: Arc<str> = default_cluster.into();
    let (mut clusters, mut jobs, mut hosts, mut subjects) =
        (SharedText::default(), SharedText::default(), SharedText::default(), SharedText::default());
    for batch in batches {
        let schema = batch.schema();
        let named = |name: &str| schema.index_of(name).ok().map(|i| batch.column(i).clone());
        let text = |name: &str| -> Result<Option<datafusion::arrow::array::ArrayRef>> {
            named(name).map(|c| cast(&c, &DataType::Utf8View)).transpose().map_err(Into::into)
        };
        let (host @ Some(_), Some(score), Some(indicted)) = (text("host")?, named("score"), named("indicted")) else {
            let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            bail!(
                "a verdict query's last statement must return the columns host, score and indicted; it returned {}",
                columns.join(", ")
            );
        };
        let score = cast(&score, &DataType::Float64).context("column score must be a number")?;
        let score = score.as_primitive::<Float64Type>();
        let indicted = cast(&indicted, &DataType::Boolean).context("column indicted must be a boolean")?;
        let indicted = indicted.as_boolean();
        let (job, subject, cluster) = (text("job_id")?, text("subject")?, text("cluster")?);
        let known = ["host", "score", "indicted", "job_id", "subject", "cluster"];
        // Keys in name order: `detail` reads alike whatever order the query's columns come in.
        let mut extra: Vec<usize> =
            (0..schema.fields().len()).filter(|&i| !known.contains(&schema.field(i).name().as_str())).collect();
        extra.sort_by_key(|&i| schema.field(i).name());
        // `detail` is written as JSON text directly, with keys, formatters and number casts made
        // once per column, not once per cell: a verdict over months has a million rows.
        let keys: Vec<String> =
            extra.iter().map(|&i| serde_json::Value::from(schema.field(i).name().as_str()).to_string()).collect();
        let formatters = extra
            .iter()
            .map(|&i| ArrayFormatter::try_new(batch.column(i).as_ref(), &FormatOptions::default()))
            .collect::<Result<Vec<_>, _>>()?;
        let numbers = extra
            .iter()
            .map(|&i| {
                let column = batch.column(i);
                let number = column.data_type().is_numeric().then(|| cast(column, &DataType::Float64)).transpose()?;
                Ok::<_, datafusion::arrow::error::ArrowError>(number.map(|n| n.as_primitive::<Float64Type>().clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let detail_of = |row: usize| {
            let mut detail = String::with_capacity(keys.iter().map(|k| k.len() + 24).sum());
            for (((&i, key), formatter), number) in extra.iter().zip(&keys).zip(&formatters).zip(&numbers) {
                detail.push(if detail.is_empty() { '{' } else { ',' });
                detail.push_str(key);
                detail.push(':');
                if batch.column(i).is_null(row) {
                    detail.push_str("null");
                    continue;
                }
                let _ = match number.as_ref().and_then(|n| serde_json::Number::from_f64(n.value(row))) {
                    Some(number) => write!(detail, "{number}"),
                    None => write!(detail, "{}", serde_json::Value::from(formatter.value(row).to_string())),
                };
            }
            if detail.is_empty() {
                return None;
            }
            detail.push('}');
            Some(detail)
        };
        for row in 0..batch.num_rows() {
            let is_indicted = indicted.is_valid(row) && indicted.value(row);
            out.push(Diagnosis {
                cluster: clusters.value(&cluster, row).unwrap_or_else(|| default_cluster.clone()),
                job_id: jobs.value(&job, row),
                host: hosts.value(&host, row),
                subject: subjects.value(&subject, row),
                score: score.is_valid(row).then(|| score.value(row)),
                indicted: is_indicted,
                detail: if every_detail || is_indicted { detail_of(row) } else { None },
            });
        }
    }
    Ok(out)
}

/// A text column's values, each made once and shared by every row that has it.
#[derive(Default)]
struct SharedText {
    last: Option<Arc<str>>,
    seen: foldhash::HashSet<Arc<str>>,
}

impl SharedText {
    fn value(&mut self, column: &Option<datafusion::arrow::array::ArrayRef>, row: usize) -> Option<Arc<str>> {
        let text = column.as_ref().filter(|c| c.is_valid(row))?.as_string_view().value(row);
        // Rows ordered by job share their job and cluster with the row before.
        if let Some(last) = self.last.as_ref().filter(|last| ***last == *text) {
            return Some(last.clone());
        }
        let shared = match self.seen.get(text) {
            Some(shared) => shared.clone(),
            None => {
                let shared: Arc<str> = text.into();
                self.seen.insert(shared.clone());
                shared
            }
        };
        self.last = Some(shared.clone());
        Some(shared)
    }
}

/// The verdict in words: each indicted host with the evidence, or that nobody was indicted.
pub fn summarize(query: &Query, verdict: &[Diagnosis]) -> String {
    let mut out = String::new();
    let indicted: Vec<&Diagnosis> = verdict.iter().filter(|d| d.indicted).collect();
    // Counted only, over a verdict of up to a million rows.
    let hosts: foldhash::HashSet<(&str, &str)> =
        verdict.iter().map(|d| (&*d.cluster, d.host.as_deref().unwrap_or("?"))).collect();
    if indicted.is_empty() {
        let _ = writeln!(
            out,
            "{}: no host indicted among {} compared ({} verdict rows).",
            query.name,
            hosts.len(),
            verdict.len()
        );
        return out;
    }
    let culprits: BTreeSet<(&str, &str)> =
        indicted.iter().map(|d| (&*d.cluster, d.host.as_deref().unwrap_or("?"))).collect();
    let _ = writeln!(out, "{}: {} of {} hosts indicted.", query.name, culprits.len(), hosts.len());
    for d in indicted.iter().take(20) {
        let mut about = Vec::new();
        if let Some(job) = &d.job_id {
            about.push(format!("job {job}"));
        }
        if let Some(subject) = &d.subject {
            about.push(subject.to_string());
        }
        let score = d.score.map_or("-".to_string(), |s| format!("{s:.3}"));
        let _ = writeln!(
            out,
            "  INDICTED {} ({}{}): score {score}{}",
            d.host.as_deref().unwrap_or("?"),
            d.cluster,
            if about.is_empty() { String::new() } else { format!(", {}", about.join(", ")) },
            d.detail.as_deref().map(|j| format!("  {j}")).unwrap_or_default()
        );
    }
    if indicted.len() > 20 {
        let _ = writeln!(out, "  … and {} more indicted rows (SELECT * FROM diagnoses)", indicted.len() - 20);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{BooleanArray, Float64Array, Int64Array, StringArray, StringViewArray};

    use super::*;

    #[test]
    fn verdict_columns_beyond_the_known_ones_become_json_detail() {
        let batch = RecordBatch::try_from_iter([
            ("host", Arc::new(StringArray::from(vec![Some("r01n01"), None])) as _),
            ("score", Arc::new(Float64Array::from(vec![0.75, 0.0])) as _),
            ("indicted", Arc::new(BooleanArray::from(vec![true, false])) as _),
            ("states", Arc::new(Int64Array::from(vec![Some(3), None])) as _),
            ("note", Arc::new(StringArray::from(vec![Some("said \"slow\""), Some("ok")])) as _),
            ("ratio", Arc::new(Float64Array::from(vec![f64::NAN, 1.5])) as _),
        ])
        .unwrap();
        let rows = verdict_rows(std::slice::from_ref(&batch), "c1", true).unwrap();
        // Keys in name order; a number that JSON cannot hold (NaN) is kept as its text.
        assert_eq!(rows[0].detail.as_deref(), Some(r#"{"note":"said \"slow\"","ratio":"NaN","states":3.0}"#));
        assert_eq!(rows[1].detail.as_deref(), Some(r#"{"note":"ok","ratio":1.5,"states":null}"#));
        assert_eq!((rows[0].host.as_deref(), &*rows[0].cluster, rows[0].indicted), (Some("r01n01"), "c1", true));
        assert_eq!((rows[1].host.as_deref(), rows[1].score, rows[1].indicted), (None, Some(0.0), false));
        // Unrecorded, only the indicted row's detail is made.
        let shown = verdict_rows(&[batch], "c1", false).unwrap();
        assert_eq!((shown[0].detail.as_ref(), shown[1].detail.as_ref()), (rows[0].detail.as_ref(), None));
    }

    #[test]
    fn rows_with_the_same_text_share_it() {
        let text = |values: Vec<Option<&str>>| Arc::new(StringViewArray::from(values)) as _;
        let batch = RecordBatch::try_from_iter([
            ("host", text(vec![Some("r01n01"), Some("r01n02"), Some("r01n01")])),
            ("job_id", text(vec![Some("job_1"), Some("job_1"), None])),
            ("score", Arc::new(Float64Array::from(vec![0.5, 0.25, 0.0])) as _),
            ("indicted", Arc::new(BooleanArray::from(vec![true, false, false])) as _),
        ])
        .unwrap();
        let rows = verdict_rows(&[batch], "c1", false).unwrap();
        let hosts: Vec<_> = rows.iter().map(|d| d.host.as_deref()).collect();
        let jobs: Vec<_> = rows.iter().map(|d| d.job_id.as_deref()).collect();
        assert_eq!(hosts, [Some("r01n01"), Some("r01n02"), Some("r01n01")]);
        assert_eq!(jobs, [Some("job_1"), Some("job_1"), None]);
        let (first, third) = (rows[0].host.as_ref().unwrap(), rows[2].host.as_ref().unwrap());
        assert!(Arc::ptr_eq(first, third), "a host met again is the text made the first time");
        assert!(Arc::ptr_eq(rows[0].job_id.as_ref().unwrap(), rows[1].job_id.as_ref().unwrap()));
        assert!(Arc::ptr_eq(&rows[0].cluster, &rows[2].cluster));
    }
}
