//! Thresholds from a cluster's own history, with no labelled runs (`kahuna calibrate`).
//!
//! Faults are rare: most of what a cluster did was healthy. Each verdict query's `@tune`
//! parameter is set by running the query at every value of its grid over windows of the
//! cluster's history, each window diagnosed as `diagnose` would, and counting the host-windows
//! indicted at each value: the *alarm curve*. Healthy hosts' alarms fall away as the threshold
//! grows stricter; a faulty host's persist, so those the strictest value still indicts are left
//! out as faults. The default stays when its share of the rest is at most `max_share`; else the
//! first stricter value whose share is; else the strictest (and the calibration says so). Then
//! two or more queries whose verdict is monotone in their value are stepped stricter together until
//! their alarms, added up, are at most `together` (`combined` indicts on one query's vote).
//!
//! The values go to the `calibrations` table, and `diagnose`, `schedule` and `backfill` use a
//! cluster's newest calibration for a parameter nobody gave; a value given with `--param` or in
//! `kahuna.toml` wins.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use datafusion::arrow::array::{
    Array as _, ArrayRef, AsArray as _, Date32Array, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit, TimestampMicrosecondType};

use crate::catalog::{self, Snapshot};
use crate::diagnose::queries::{Output, Query};
use crate::diagnose::results::{self, DIAGNOSES, Diagnosis};
use crate::diagnose::{self, Record, Request, Window};
use crate::warehouse::Warehouse;

pub const CALIBRATIONS: &str = "calibrations";

/// Alarm share allowed at the chosen value, by default: a healthy host indicted in one window
/// of 20.
pub const MAX_SHARE: f64 = 0.05;

/// Alarm share the monotone calibrated queries together allow, by default: what `combined`'s
/// false alarms may be beside Kahuna-WB's.
pub const MAX_SHARE_TOGETHER: f64 = 0.02;

/// The healthy alarm shares a calibration allows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shares {
    /// Each query's on its own.
    pub each: f64,
    /// The monotone calibrated queries' together: the host-windows any of them indicts (1: no
    /// bound).
    pub together: f64,
}

/// Windows with jobs a calibration needs, by default: a week of days.
pub const MIN_WINDOWS: usize = 7;

/// The built-in queries calibrated, in order: Ganesha's profiles are trained with the outliers
/// the first two find left out. `combined` is not: it weighs the others' calibrated verdicts.
pub const CALIBRATED: [&str; 3] = ["kahuna_wb", "salsa_fingerpoint", "ganesha_bb"];

/// How many host-windows a query indicts at each value of its grid, the outliers left out.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    pub param: String,
    pub values: Vec<String>,
    /// Host-windows (`window cluster/host`) indicted at each value, the outliers left out.
    pub alarmed: Vec<BTreeSet<(usize, String)>>,
    /// Host-windows with a verdict, the outliers left out.
    pub healthy: BTreeSet<(usize, String)>,
    /// Hosts (`cluster/host`) with a verdict in any window.
    pub hosts: usize,
    /// Host-windows (`window cluster/host`) the strictest value still indicts: faults, not
    /// noise to calibrate away. None when they are over a fifth of all: a peer comparison
    /// singles out a minority, so that many is a cluster the grid cannot quiet.
    pub outliers: BTreeSet<(usize, String)>,
}

impl Curve {
    /// The curve of the verdicts at each value (`verdicts[value][window]`).
    pub fn of(param: &str, values: &[String], verdicts: &[Vec<Vec<Diagnosis>>]) -> Curve {
        // Each window's hosts with a verdict, or those indicted, as (window, `cluster/host`).
        let hosts = |windows: &[Vec<Diagnosis>], indicted: bool| -> BTreeSet<(usize, String)> {
            let rows = windows.iter().enumerate().flat_map(|(w, rows)| rows.iter().map(move |d| (w, d)));
            let whole = rows.filter(|(_, d)| d.job_id.is_none() && (d.indicted || !indicted));
            whole.filter_map(|(w, d)| d.host.as_deref().map(|host| (w, format!("{}/{host}", d.cluster)))).collect()
        };
        let seen = hosts(verdicts.first().map(Vec::as_slice).unwrap_or_default(), false);
        let alarmed: Vec<BTreeSet<(usize, String)>> = verdicts.iter().map(|v| hosts(v, true)).collect();
        let mut outliers = alarmed.last().cloned().unwrap_or_default();
        if 5 * outliers.len() > seen.len() {
            outliers.clear();
        }
        let rest = |set: &BTreeSet<(usize, String)>| set.difference(&outliers).cloned().collect();
        Curve {
            param: param.to_string(),
            values: values.to_vec(),
            alarmed: alarmed.iter().map(rest).collect(),
            healthy: rest(&seen),
            hosts: seen.iter().map(|(_, host)| host).collect::<BTreeSet<_>>().len(),
            outliers,
        }
    }

    pub fn share(&self, index: usize) -> f64 {
        self.alarmed[index].len() as f64 / self.healthy.len().max(1) as f64
    }

    /// The index of the value chosen, and whether its share is at most `max_share`: the
    /// default's (`start`) when it is, else the most sensitive stricter one that is, else the
    /// strictest. The papers' values are where it starts; a history only moves a threshold
    /// that alarms too often, as ten or a hundred windows are too few to find a better one by
    /// the tail of the shares.
    pub fn choose(&self, start: usize, max_share: f64) -> (usize, bool) {
        match (start..self.values.len()).find(|&i| self.share(i) <= max_share) {
            Some(index) => (index, true),
            None => (self.values.len().saturating_sub(1), false),
        }
    }

    /// `value share, …` for the report.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, value) in self.values.iter().enumerate() {
            let _ = write!(out, "{}{value}: {:.3}", if i > 0 { ", " } else { "" }, self.share(i));
        }
        out
    }
}

/// The share of healthy host-windows any of `curves` indicts at its value of `index` (the
/// outliers of any left out): `combined` indicts on one query's vote, so their alarms add up.
pub fn share_together(curves: &[&Curve], index: &[usize]) -> f64 {
    let outliers: BTreeSet<&(usize, String)> = curves.iter().flat_map(|c| &c.outliers).collect();
    let rest = |sets: &mut dyn Iterator<Item = &(usize, String)>| {
        sets.filter(|hw| !outliers.contains(hw)).collect::<BTreeSet<_>>().len()
    };
    let healthy = rest(&mut curves.iter().flat_map(|c| &c.healthy));
    let alarmed = rest(&mut curves.iter().zip(index).flat_map(|(c, &i)| &c.alarmed[i]));
    alarmed as f64 / healthy.max(1) as f64
}

/// Moves `index`, each curve's chosen value, to the fewest steps stricter at which the curves
/// together alarm at most `max_share` of healthy host-windows (of those, the one that alarms
/// least; every combination is tried, as a step of one curve can quiet alarms another's also
/// quiets, or none). Whether that share was reached (else every value is the strictest).
pub fn hold_together(curves: &[&Curve], index: &mut [usize], max_share: f64) -> bool {
    let start = index.to_vec();
    let mut next = start.clone();
    let mut best: Option<(usize, f64, Vec<usize>)> = None;
    loop {
        let share = share_together(curves, &next);
        let steps = next.iter().zip(&start).map(|(n, s)| n - s).sum::<usize>();
        if share <= max_share && best.as_ref().is_none_or(|(fewest, least, _)| (steps, share) < (*fewest, *least)) {
            best = Some((steps, share, next.clone()));
        }
        // The next combination, as an odometer from the chosen values to the strictest.
        let Some(q) = (0..next.len()).find(|&q| next[q] + 1 < curves[q].values.len()) else { break };
        next[..q].copy_from_slice(&start[..q]);
        next[q] += 1;
    }
    match best {
        Some((_, _, held)) => {
            index.copy_from_slice(&held);
            true
        }
        None => {
            for (index, curve) in index.iter_mut().zip(curves) {
                *index = curve.values.len().saturating_sub(1);
            }
            false
        }
    }
}

/// The alarm curve of `query` over `windows` at each value of its `@tune` grid, the other
/// parameters as `fixed` (None without a grid).
async fn curve(
    snapshot: &Snapshot,
    query: &Query,
    fixed: &[(String, String)],
    windows: &[Window],
) -> Result<Option<Curve>> {
    let Some(tune) = &query.tune else { return Ok(None) };
    let mut verdicts = Vec::new();
    for value in &tune.grid {
        let mut params = fixed.to_vec();
        params.push((tune.param.clone(), value.clone()));
        verdicts.push(diagnose::over_windows(snapshot, query, &params, windows).await?);
    }
    Ok(Some(Curve::of(&tune.param, &tune.grid, &verdicts)))
}

pub struct Options {
    /// The clusters calibrated (none: every cluster with a job history).
    pub clusters: Vec<String>,
    /// History used, back from the cluster's newest job.
    pub days: f64,
    /// Length of a window: as long as the windows diagnosed (a day for a daily schedule).
    pub window: chrono::Duration,
    pub shares: Shares,
    pub min_windows: usize,
    pub queries_dir: PathBuf,
    pub queries: Vec<String>,
}

/// Each cluster's finished jobs as (launch, finish) in microseconds, from `jobs`.
async fn job_launches(snapshot: &Snapshot, clusters: &[String]) -> Result<BTreeMap<String, Vec<(i64, i64)>>> {
    let ctx = catalog::session_over(snapshot)?;
    if !ctx.table_exist("jobs")? {
        bail!("calibration cuts a cluster's history by its jobs, and the warehouse has no job history (table jobs)");
    }
    let quoted: Vec<String> = clusters.iter().map(|c| results::quote(c)).collect();
    let filter = match quoted.is_empty() {
        true => String::new(),
        false => format!(" AND cluster IN ({})", quoted.join(", ")),
    };
    let sql = format!(
        "SELECT cluster, launch_ts, finish_ts FROM jobs WHERE launch_ts IS NOT NULL AND finish_ts IS NOT NULL{filter}"
    );
    let mut out: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for batch in ctx.sql(&sql).await?.collect().await? {
        let clusters = cast(batch.column(0), &DataType::Utf8)?;
        let clusters = clusters.as_string::<i32>();
        let micros = |i: usize| cast(batch.column(i), &DataType::Timestamp(TimeUnit::Microsecond, None));
        let (launch, finish) = (micros(1)?, micros(2)?);
        let (launch, finish) =
            (launch.as_primitive::<TimestampMicrosecondType>(), finish.as_primitive::<TimestampMicrosecondType>());
        for row in 0..batch.num_rows() {
            if clusters.is_valid(row) {
                out.entry(clusters.value(row).to_string()).or_default().push((launch.value(row), finish.value(row)));
            }
        }
    }
    Ok(out)
}

/// Windows of `length` on a grid from the oldest launch within `days` before the newest
/// finish, each holding a launch.
fn windows_of(cluster: &str, jobs: &[(i64, i64)], days: f64, length: chrono::Duration) -> Vec<Window> {
    let Some(newest) = jobs.iter().map(|&(_, finish)| finish).max() else { return Vec::new() };
    let step = length.num_microseconds().unwrap_or(i64::MAX).max(1);
    let back = (days * 86_400e6) as i64;
    let oldest = jobs.iter().map(|&(launch, _)| launch).min().unwrap_or(newest).max(newest.saturating_sub(back));
    let at = |micros: i64| DateTime::<Utc>::from_timestamp_micros(micros);
    let mut starts: BTreeSet<i64> = BTreeSet::new();
    for &(launch, _) in jobs.iter().filter(|&&(launch, _)| launch >= oldest) {
        starts.insert(oldest + (launch - oldest) / step * step);
    }
    starts
        .into_iter()
        .map(|start| Window { cluster: cluster.to_string(), from: at(start), to: start.checked_add(step).and_then(at) })
        .collect()
}

/// Each query's default value of its `@tune` parameter, as `query param = value, …`.
fn defaults_of(queries: &[Query]) -> String {
    let named = queries.iter().filter_map(|q| {
        let tune = q.tune.as_ref()?;
        Some(format!("{} {} = {}", q.name, tune.param, q.param(&tune.param)?.default))
    });
    named.collect::<Vec<_>>().join(", ")
}

/// One history to calibrate on: its windows, and how Ganesha's profiles are trained on it.
pub struct History<'a> {
    pub windows: &'a [Window],
    /// `ganesha_train` with its window, cluster or clusters set; the outlying hosts are added.
    pub training: Request,
    /// The profiles' cluster a Ganesha query is then given (None: the newest of any).
    pub model_cluster: Option<String>,
    /// What a window is, for the report (`windows of 1d`).
    pub unit: String,
}

/// A value calibrated on a history: the query, parameter and value, the curve and how.
pub struct Chosen {
    pub query: String,
    pub param: String,
    pub value: String,
    /// Healthy alarm share at the value, and of how many host-windows (0 for no curve).
    pub share: f64,
    pub host_windows: usize,
    pub method: String,
}

/// The verdict queries of `names`, refusing those that cannot be calibrated.
pub fn calibrated_queries(names: &[String], dir: &std::path::Path) -> Result<Vec<Query>> {
    let mut queries = Vec::new();
    for name in names {
        let query = Query::resolve(name, dir)?;
        if query.output != Output::Verdict || query.bind(&[])?.tables()?.contains(DIAGNOSES) {
            bail!("{name}: only a verdict query that reads no other verdicts is calibrated");
        }
        queries.push(query);
    }
    Ok(queries)
}

/// Calibrates `queries`, in order, on one history, saying what it chose in `out`. Ganesha's
/// profiles are trained on the history first (saved in the models table as `training` says,
/// replacing that day's model of the same cluster), the outliers the queries before found left
/// out while they are under half of the hosts.
pub async fn calibrate_history(
    warehouse: &Warehouse,
    queries: &[Query],
    history: &History<'_>,
    shares: Shares,
    out: &mut dyn std::io::Write,
) -> Result<Vec<Chosen>> {
    let max_share = shares.each;
    let Output::Table(models) = &history.training.query.output else {
        bail!("{}: saves no table of profiles", history.training.query.origin)
    };
    let snapshot = Snapshot::take(warehouse).await?;
    let mut chosen = Vec::new();
    let mut outlying: BTreeSet<String> = BTreeSet::new();
    // Each calibrated value's place in `chosen`, its curve and its index in the grid.
    let mut curves = Vec::new();
    for query in queries {
        let mut fixed = Vec::new();
        if query.bind(&[])?.tables()?.contains(models) {
            let mut train = history.training.clone();
            if !outlying.is_empty() {
                train.params.push(("exclude".into(), outlying.iter().cloned().collect::<Vec<_>>().join(",")));
            }
            // The write makes the snapshot forget the models table: the curve reads the new one.
            diagnose::run_on(&snapshot, &train, Record::Replace).await.context("cannot train Ganesha's profiles")?;
            let method = format!("profiles trained on the history's sadc, {} outlying hosts left out", outlying.len());
            if let Some(cluster) = &history.model_cluster {
                writeln!(out, "  {}: model_cluster = {cluster} ({method})", query.name)?;
                fixed.push(("model_cluster".to_string(), cluster.clone()));
                let param = "model_cluster".to_string();
                let value = cluster.clone();
                chosen.push(Chosen { query: query.name.clone(), param, value, share: 0.0, host_windows: 0, method });
            }
        }
        let Some(curve) = curve(&snapshot, query, &fixed, history.windows).await? else {
            writeln!(out, "  {}: nothing to calibrate (no @tune parameter)", query.name)?;
            continue;
        };
        let default = query.param(&curve.param).map(|p| p.default.clone()).unwrap_or_default();
        // The default's place in the grid, or the first value past it: never looser.
        let number = |v: &str| v.parse::<f64>().ok();
        let start = curve.values.iter().position(|v| *v == default).or_else(|| {
            let default = number(&default)?;
            curve.values.iter().position(|v| number(v).is_some_and(|v| v >= default))
        });
        let Some(start) = start else {
            writeln!(
                out,
                "  {}: {} = {default} kept: the default is not in its grid, nor below a value of it",
                query.name, curve.param
            )?;
            continue;
        };
        let (index, reached) = curve.choose(start, max_share);
        let unit = &history.unit;
        let method = match (reached, index == start) {
            (true, true) => format!("the default: it alarms at most {max_share} of healthy host-windows ({unit})"),
            (true, false) => format!(
                "the default alarms over {max_share} of healthy host-windows ({unit}): the first stricter value that does not"
            ),
            (false, _) => {
                format!("no value alarms at most {max_share} of healthy host-windows ({unit}): the strictest")
            }
        };
        writeln!(
            out,
            "  {}: {} = {} ({method}; share of {} host-windows, {} outliers left out: {})",
            query.name,
            curve.param,
            curve.values[index],
            curve.healthy.len(),
            curve.outliers.len(),
            curve.describe()
        )?;
        // Ganesha learns from the rest; never from too few (a cluster alarming everywhere has
        // no outliers at all).
        let faulty: BTreeSet<String> = curve.outliers.iter().map(|(_, host)| host.clone()).collect();
        if 2 * (outlying.len() + faulty.len()) <= curve.hosts {
            outlying.extend(faulty);
        }
        chosen.push(Chosen {
            query: query.name.clone(),
            param: curve.param.clone(),
            value: curve.values[index].clone(),
            share: curve.share(index),
            host_windows: curve.healthy.len(),
            method,
        });
        // Held together, a query is stepped stricter: one whose stricter values can indict more
        // (where faults are, unseen in a healthy history) keeps its own value.
        if query.tune.as_ref().is_some_and(|tune| tune.monotone) {
            curves.push((chosen.len() - 1, curve, index));
        } else {
            writeln!(out, "  {}: not held together ({} is not monotone: its own share only)", query.name, curve.param)?;
        }
    }
    // One query alone is held by its own share.
    if curves.len() > 1 {
        let together = shares.together;
        let all: Vec<&Curve> = curves.iter().map(|(_, curve, _)| curve).collect();
        let mut index: Vec<usize> = curves.iter().map(|&(_, _, index)| index).collect();
        let before = share_together(&all, &index);
        let reached = hold_together(&all, &mut index, together);
        let how = if reached { "at most" } else { "over (every value the strictest)" };
        let names: Vec<&str> = curves.iter().map(|&(at, _, _)| chosen[at].query.as_str()).collect();
        writeln!(
            out,
            "  together ({}): {before:.3} of healthy host-windows alarmed, {:.3} now: {how} {together}",
            names.join(", "),
            share_together(&all, &index)
        )?;
        for ((at, curve, was), index) in curves.iter().zip(index).filter(|((_, _, was), index)| was != index) {
            let value = &curve.values[index];
            let said = format!(
                "stricter than {}: the calibrated queries together alarm {how} {together} of healthy host-windows",
                curve.values[*was]
            );
            writeln!(out, "  {}: {} = {value} ({said})", chosen[*at].query, curve.param)?;
            let chosen = &mut chosen[*at];
            (chosen.value, chosen.share) = (value.clone(), curve.share(index));
            chosen.method = format!("{}; {said}", chosen.method);
        }
    }
    Ok(chosen)
}

/// Calibrates each cluster on its own history, writes the values to `calibrations` and says
/// what it did in `out`.
pub async fn calibrate(
    warehouse: &Warehouse,
    options: &Options,
    out: &mut dyn std::io::Write,
) -> Result<Vec<Calibration>> {
    let queries = calibrated_queries(&options.queries, &options.queries_dir)?;
    let training = Query::resolve("ganesha_train", &options.queries_dir)?;
    let jobs = job_launches(&Snapshot::take(warehouse).await?, &options.clusters).await?;
    for cluster in options.clusters.iter().filter(|c| !jobs.contains_key(*c)) {
        writeln!(
            out,
            "cluster {cluster}: no finished job in its history: too little to calibrate; nothing changes (an earlier calibration holds, else the defaults: {})",
            defaults_of(&queries)
        )?;
    }
    let now = Utc::now();
    let length = humantime_of(options.window);
    let mut written = Vec::new();
    for (cluster, jobs) in &jobs {
        let windows = windows_of(cluster, jobs, options.days, options.window);
        if windows.len() < options.min_windows {
            writeln!(
                out,
                "cluster {cluster}: {} windows of {length} hold jobs in the last {} days; calibration needs {}: too little history; nothing changes (an earlier calibration holds, else the defaults: {})",
                windows.len(),
                options.days,
                options.min_windows,
                defaults_of(&queries)
            )?;
            continue;
        }
        let (from, to) = (windows.first().and_then(|w| w.from), windows.last().and_then(|w| w.to));
        writeln!(
            out,
            "cluster {cluster}: {} windows of {length} with jobs, {} to {}",
            windows.len(),
            show(from),
            show(to)
        )?;
        let mut training = Request::new(training.clone());
        (training.from, training.to, training.cluster) = (from, to, Some(cluster.clone()));
        training.run_date = now.date_naive();
        let history = History {
            windows: &windows,
            training,
            model_cluster: Some(cluster.clone()),
            unit: format!("windows of {length}"),
        };
        let chosen = calibrate_history(warehouse, &queries, &history, options.shares, out)
            .await
            .with_context(|| format!("cluster {cluster}"))?;
        let rows: Vec<Calibration> = chosen
            .into_iter()
            .map(|c| Calibration {
                cluster: cluster.clone(),
                query: c.query,
                parameter: c.param,
                alarm_share: c.share,
                host_windows: c.host_windows,
                value: c.value,
                window_from: from,
                window_to: to,
                windows: windows.len(),
                method: c.method,
                calibrated_at: now,
            })
            .collect();
        // Appended: `diagnose` takes each parameter's newest value, and the older ones say when
        // what was chosen.
        results::write(warehouse, CALIBRATIONS, batch(&rows)?, None).await?;
        written.extend(rows);
    }
    Ok(written)
}

fn show(t: Option<DateTime<Utc>>) -> String {
    t.map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M").to_string())
}

/// `1d`, `6h`, `15m` or `90s`.
fn humantime_of(length: chrono::Duration) -> String {
    let s = length.num_seconds();
    match s {
        s if s > 0 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A cluster's newest calibration of each parameter of `query`: (parameter, value, how).
pub async fn newest(snapshot: &Snapshot, cluster: &str, query: &str) -> Result<Vec<(String, String, String)>> {
    let ctx = catalog::session_over(snapshot)?;
    if !ctx.table_exist(CALIBRATIONS)? {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT parameter, value, windows, host_windows, round(alarm_share, 3), method, CAST(calibrated_at AS VARCHAR) AS calibrated \
         FROM {CALIBRATIONS} WHERE cluster = {} AND query = {} ORDER BY calibrated_at DESC",
        results::quote(cluster),
        results::quote(query)
    );
    let mut seen = BTreeMap::new();
    for batch in ctx.sql(&sql).await?.collect().await? {
        let columns: Vec<ArrayRef> =
            batch.columns().iter().map(|c| cast(c, &DataType::Utf8)).collect::<Result<_, _>>()?;
        let text = |i: usize, row: usize| columns[i].as_string::<i32>().value(row).to_string();
        for row in 0..batch.num_rows() {
            let date = text(6, row).chars().take(10).collect::<String>();
            let share = match text(3, row).as_str() {
                "0" => String::new(),
                windows => format!("; {} of {windows} healthy host-windows alarmed", text(4, row)),
            };
            let how =
                format!("calibrated {date} on {} windows of cluster {cluster}: {}{share}", text(2, row), text(5, row));
            seen.entry(text(0, row)).or_insert((text(1, row), how));
        }
    }
    Ok(seen.into_iter().map(|(parameter, (value, how))| (parameter, value, how)).collect())
}

/// One row of `calibrations`.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub cluster: String,
    pub query: String,
    pub parameter: String,
    pub value: String,
    pub window_from: Option<DateTime<Utc>>,
    pub window_to: Option<DateTime<Utc>>,
    pub windows: usize,
    pub host_windows: usize,
    pub alarm_share: f64,
    pub method: String,
    pub calibrated_at: DateTime<Utc>,
}

/// The rows as a batch of `calibrations` (partitioned by cluster and calibration date).
pub fn batch(rows: &[Calibration]) -> Result<RecordBatch> {
    let ts = || DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let schema = Schema::new(vec![
        Field::new("query", DataType::Utf8, false),
        Field::new("parameter", DataType::Utf8, false),
        Field::new("value", DataType::Utf8, false),
        Field::new("window_from", ts(), true),
        Field::new("window_to", ts(), true),
        Field::new("windows", DataType::Int64, false),
        Field::new("host_windows", DataType::Int64, false),
        Field::new("alarm_share", DataType::Float64, false),
        Field::new("method", DataType::Utf8, false),
        Field::new("calibrated_at", ts(), false),
        Field::new("cluster", DataType::Utf8, false),
        Field::new("date", DataType::Date32, false),
    ]);
    let text = |f: fn(&Calibration) -> &str| Arc::new(StringArray::from_iter_values(rows.iter().map(f))) as ArrayRef;
    let micros = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_micros());
    let times = |f: fn(&Calibration) -> Option<DateTime<Utc>>| {
        Arc::new(TimestampMicrosecondArray::from_iter(rows.iter().map(|r| micros(f(r)))).with_timezone("UTC"))
            as ArrayRef
    };
    let count = |f: fn(&Calibration) -> usize| {
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| f(r) as i64))) as ArrayRef
    };
    let columns = vec![
        text(|r| &r.query),
        text(|r| &r.parameter),
        text(|r| &r.value),
        times(|r| r.window_from),
        times(|r| r.window_to),
        count(|r| r.windows),
        count(|r| r.host_windows),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.alarm_share))) as ArrayRef,
        text(|r| &r.method),
        times(|r| Some(r.calibrated_at)),
        text(|r| &r.cluster),
        Arc::new(Date32Array::from_iter_values(
            rows.iter().map(|r| crate::warehouse::tables::days(r.calibrated_at.date_naive())),
        )) as ArrayRef,
    ];
    RecordBatch::try_new(Arc::new(schema), columns).context("cannot make the calibrations batch")
}

/// Gives the request its cluster's newest calibrated values for the parameters it was not
/// given, and says where the value of each calibrated or tuned parameter comes from.
pub async fn apply(snapshot: &Snapshot, request: &mut Request) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let given = |request: &Request, name: &str| request.params.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    if let Some(cluster) = request.cluster.clone() {
        for (param, value, how) in newest(snapshot, &cluster, &request.query.name).await? {
            // A parameter given wins; one the query no longer declares is passed over.
            if given(request, &param).is_some() || request.query.param(&param).is_none() {
                continue;
            }
            notes.push(format!("{param} = {value} ({how})"));
            request.params.push((param.clone(), value));
            request.calibrated.push(param);
        }
    }
    if let Some(tune) = &request.query.tune {
        let param = &tune.param;
        match (given(request, param), &request.cluster) {
            _ if request.calibrated.contains(param) => {}
            (Some(value), _) => notes.push(format!("{param} = {value} (given)")),
            (None, cluster) => {
                let default = request.query.param(param).map(|p| p.default.clone()).unwrap_or_default();
                let why = match cluster {
                    Some(cluster) => format!("cluster {cluster} has no calibration; kahuna calibrate makes one"),
                    None => "calibrations are per cluster: give --cluster".to_string(),
                };
                notes.push(format!("{param} = {default} (default: {why})"));
            }
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verdict rows of one window: each host of `hosts`, those of `indicted` indicted.
    fn window(cluster: &str, hosts: usize, indicted: &[usize]) -> Vec<Diagnosis> {
        (0..hosts)
            .map(|h| Diagnosis {
                cluster: cluster.into(),
                host: Some(format!("n{h}").into()),
                indicted: indicted.contains(&h),
                ..Diagnosis::default()
            })
            .collect()
    }

    fn values(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("v{i}")).collect()
    }

    #[test]
    fn the_strictest_values_alarms_are_left_out_as_faults() {
        // Ten windows of ten hosts. Host 3 of window 0 is indicted at every value: a fault.
        // Healthy hosts alarm in 8, 4 and 0 windows at the three values.
        let at = |healthy: usize| -> Vec<Vec<Diagnosis>> {
            (0..10)
                .map(|w| {
                    window(
                        "c",
                        10,
                        if w < healthy {
                            &[3, 7]
                        } else if w == 0 {
                            &[3]
                        } else {
                            &[]
                        },
                    )
                })
                .collect()
        };
        let verdicts = vec![at(8), at(4), at(0)];
        let curve = Curve::of("threshold", &values(3), &verdicts);
        assert_eq!(curve.outliers, BTreeSet::from([(0, "c/n3".to_string())]));
        assert_eq!((curve.healthy.len(), curve.hosts), (99, 10));
        // Window 0 has both hosts at the first two values; host 7 counts, host 3 does not.
        assert_eq!(curve.alarmed.iter().map(BTreeSet::len).collect::<Vec<_>>(), [8 + 7, 4 + 3, 0]);
        assert_eq!(curve.choose(0, 0.05), (2, true), "15 and 7 of 99 are over 0.05");
        assert_eq!(curve.choose(0, 0.08), (1, true));
        assert_eq!(curve.choose(0, 0.2), (0, true), "the default when it alarms little");
        assert_eq!(curve.choose(1, 0.2), (1, true), "never looser than the default");
        // Rows of one job are evidence, not verdicts on hosts.
        let mut with_job = verdicts.clone();
        let of_job = Diagnosis { job_id: Some("job_1".into()), indicted: true, ..with_job[0][5][0].clone() };
        with_job[0][5].push(of_job);
        assert_eq!(Curve::of("threshold", &values(3), &with_job), curve);
    }

    #[test]
    fn a_cluster_alarming_everywhere_keeps_no_outliers_and_takes_the_strictest() {
        // Every host indicted at every value: no value quiets it, and nothing is a fault.
        let all: Vec<usize> = (0..5).collect();
        let verdicts = vec![vec![window("c", 5, &all); 4]; 3];
        let curve = Curve::of("alarm_level", &values(3), &verdicts);
        assert!(curve.outliers.is_empty());
        let alarmed: Vec<usize> = curve.alarmed.iter().map(BTreeSet::len).collect();
        assert_eq!((alarmed.as_slice(), curve.healthy.len()), ([20, 20, 20].as_slice(), 20));
        assert_eq!(curve.choose(1, 0.05), (2, false));
        assert_eq!(curve.describe(), "v0: 1.000, v1: 1.000, v2: 1.000");
    }

    #[test]
    fn queries_held_together_take_the_fewest_steps_stricter() {
        // 100 healthy host-windows (window w, host n0) and one outlier of the second query.
        let hw = |w: usize| (w, "c/n0".to_string());
        let set = |ws: &[usize]| ws.iter().map(|&w| hw(w)).collect::<BTreeSet<_>>();
        let curve = |alarmed: Vec<BTreeSet<(usize, String)>>, outliers: &[usize]| Curve {
            param: "threshold".into(),
            values: values(alarmed.len()),
            alarmed,
            healthy: set(&(0..100).collect::<Vec<_>>()),
            hosts: 1,
            outliers: set(outliers),
        };
        let a = curve(vec![set(&[0, 1, 2, 3, 4]), set(&[0, 1, 2]), set(&[])], &[]);
        let b = curve(vec![set(&[3, 4, 5, 6, 7, 99]), set(&[5, 99]), set(&[99])], &[99]);
        let both = [&a, &b];
        // Window 99 is b's outlier: left out of both, so 8 of 99 alarm at the first values.
        assert_eq!(share_together(&both, &[0, 0]), 8.0 / 99.0);
        // The fewest steps that hold them: one each leaves 4 of 99 (a's or b's two leave 5).
        let mut index = [0, 0];
        assert!(hold_together(&both, &mut index, 0.05));
        assert_eq!(index, [1, 1]);
        assert!(hold_together(&both, &mut index, 0.05), "held already: no step");
        assert_eq!(index, [1, 1]);
        let mut index = [0, 0];
        assert!(hold_together(&both, &mut index, 0.0));
        assert_eq!(index, [2, 2], "nothing alarms at the strictest values");
        let mut index = [0, 0];
        let loud = curve(vec![set(&[10]); 2], &[]);
        assert!(!hold_together(&[&a, &loud], &mut index, 0.0), "window 10 alarms at every value");
        assert_eq!(index, [2, 1]);
    }

    #[test]
    fn windows_hold_a_launch_each_on_a_grid_from_the_oldest_launch() {
        let minute = 60_000_000;
        let jobs = [(0, 3 * minute), (10 * minute, 12 * minute), (11 * minute, 40 * minute)];
        let windows = windows_of("c", &jobs, 1.0, chrono::Duration::minutes(5));
        let starts: Vec<i64> = windows.iter().map(|w| w.from.unwrap().timestamp_micros() / minute).collect();
        assert_eq!(starts, [0, 10]);
        assert!(windows.iter().all(|w| w.to.unwrap() - w.from.unwrap() == chrono::Duration::minutes(5)));
        // Only the last 20 minutes: the oldest launch within them starts the grid.
        let recent = windows_of("c", &jobs, 20.0 / 1440.0, chrono::Duration::minutes(5));
        assert!(recent.is_empty(), "no launch in the last 20 minutes: {recent:?}");
        assert!(windows_of("c", &[], 1.0, chrono::Duration::minutes(5)).is_empty());
        assert_eq!(humantime_of(chrono::Duration::days(1)), "1d");
        assert_eq!(humantime_of(chrono::Duration::seconds(150)), "150s");
    }
}
