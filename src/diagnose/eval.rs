//! `kahuna eval`: how well the diagnoses find injected faults in simulated traces.
//!
//! Each trace folder holds the logs, sadc capture and job history of one run and its
//! `truth.json` (the fault, the faulty nodes, the workload). Every run is ingested as its own
//! cluster; each diagnosis runs on every cluster on its own; the hosts it indicts are scored as the
//! papers do (Ganesha §5.1, Kahuna §VIII): TP = faulty nodes indicted / faulty nodes, FP =
//! fault-free nodes indicted / fault-free nodes of the faulty runs, FN = 1 − TP, and the
//! false-alarm rate = nodes indicted / nodes of the fault-free runs.
//!
//! Thresholds (each query's `@tune` parameter) are chosen per workload on *tuning* runs given
//! with `--tune`, never on the runs scored: the value with the best TP − FP on faulty tuning
//! runs whose false-alarm rate on fault-free tuning runs stays within `--max-false-alarm`,
//! the middle one of the values that tie (a few tuning runs leave a plateau of equally good
//! values, and its edges are where the next run starts to miss or to false-alarm). Without
//! tuning runs, or with `--defaults`, the defaults hold.
//! Ganesha's profiles are trained on the fault-free tuning runs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use chrono::Utc;

use crate::catalog::{self, Snapshot};
use crate::diagnose::calibrate;
use crate::diagnose::queries::{Output, Query};
use crate::diagnose::results::{self, DIAGNOSES, Diagnosis, RunInfo};
use crate::diagnose::{self, Record, Request, Window};
use crate::ingest::discover::Hints;
use crate::ingest::{IngestOptions, ingest};
use crate::warehouse::Warehouse;

/// The diagnoses scored, in the order they must run (`combined` reads the others' verdicts).
pub const SCORED: [&str; 6] =
    ["kahuna_wb", "salsa_fingerpoint", "ganesha_bb", "fetch_failures", "hung_tasks", "combined"];

/// One simulated run and what was injected.
#[derive(Clone, Debug)]
pub struct Run {
    pub dir: PathBuf,
    /// The cluster it is ingested as: its folder's name, made unique.
    pub cluster: String,
    /// `none` for a fault-free run.
    pub fault: String,
    pub workload: String,
    pub faulty: BTreeSet<String>,
    /// Slave nodes; the denominator of the rates.
    pub nodes: BTreeSet<String>,
    pub tuning: bool,
}

impl Run {
    pub fn fault_free(&self) -> bool {
        self.fault == "none"
    }
}

/// Reads `truth.json` as `kahuna simulate` writes it: `workload`, `hosts` (the slaves, each
/// `{host, ip}`) and `faults` (each `{fault, host, …}`; empty for a fault-free run).
pub fn read_truth(dir: &Path) -> Result<(String, String, BTreeSet<String>, BTreeSet<String>)> {
    let path = dir.join("truth.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let truth: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let list = |key: &str| truth.get(key).and_then(|v| v.as_array()).cloned().unwrap_or_default();
    let text_of = |item: &serde_json::Value, key: &str| item.get(key).and_then(|v| v.as_str()).map(str::to_string);
    let faults = list("faults");
    let faulty: BTreeSet<String> = faults.iter().filter_map(|f| text_of(f, "host")).collect();
    let fault = faults.first().map_or(Some("none".to_string()), |f| text_of(f, "fault"));
    let Some(fault) = fault.filter(|_| faulty.len() == faults.len()) else {
        bail!("{}: every entry of `faults` needs `fault` and `host`", path.display());
    };
    let workload = text_of(&truth, "workload").unwrap_or_else(|| "unknown".into());
    let nodes = list("hosts").iter().filter_map(|h| text_of(h, "host")).collect();
    Ok((fault, workload, faulty, nodes))
}

/// Every folder holding a `truth.json` under `roots`, sorted.
pub fn find_runs(roots: &[PathBuf], tuning: bool) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for root in roots {
        let mut dirs: Vec<PathBuf> = walkdir::WalkDir::new(root)
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.file_name() == "truth.json")
            .filter_map(|e| e.path().parent().map(Path::to_path_buf))
            .collect();
        dirs.sort();
        if dirs.is_empty() {
            bail!("{}: no truth.json in it or under it", root.display());
        }
        for dir in dirs {
            // Absolute, so that `ingests` names the files alike however the runs were given
            // (a kept warehouse recognises its runs by them).
            let dir = std::fs::canonicalize(&dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
            let (fault, workload, faulty, nodes) = read_truth(&dir)?;
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into());
            let cluster = format!("{}{}-{}", if tuning { "tune-" } else { "" }, name, runs.len());
            runs.push(Run { dir, cluster, fault, workload, faulty, nodes, tuning });
        }
    }
    Ok(runs)
}

/// A tuning run that is also a scored run (the same `truth.json`) would let the scored runs
/// choose their own thresholds: a suite's runs have the seeds `seed`, `seed + 1`, …, so two
/// suites alike but for seeds closer than their repetitions share runs.
fn refuse_shared_runs(runs: &[Run]) -> Result<()> {
    let truth = |run: &Run| {
        let path = run.dir.join("truth.json");
        std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let mut scored = HashMap::new();
    for run in runs.iter().filter(|r| !r.tuning) {
        scored.insert(truth(run)?, &run.dir);
    }
    for run in runs.iter().filter(|r| r.tuning) {
        if let Some(dir) = scored.get(&truth(run)?) {
            bail!(
                "{} and {} have the same truth.json (seed, workload, cluster and faults): a tuning run must not be scored; give the tuning suite seeds that none of the scored suite's repetitions use",
                run.dir.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

/// What of a run folder is ingested: everything but `truth.json`, which is not a log (ingest
/// would list it as refused).
fn run_inputs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.file_name().is_some_and(|n| n != "truth.json") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// TP/FP/FN counts of one group of runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Score {
    pub runs: usize,
    pub faulty: usize,
    pub faulty_indicted: usize,
    pub healthy: usize,
    pub healthy_indicted: usize,
}

impl Score {
    pub fn add(&mut self, run: &Run, indicted: &BTreeSet<String>) {
        self.runs += 1;
        for node in &run.nodes {
            let hit = indicted.contains(node);
            if run.faulty.contains(node) {
                self.faulty += 1;
                self.faulty_indicted += usize::from(hit);
            } else {
                self.healthy += 1;
                self.healthy_indicted += usize::from(hit);
            }
        }
    }

    fn rate(n: usize, d: usize) -> Option<f64> {
        (d > 0).then(|| n as f64 / d as f64)
    }

    pub fn tp(&self) -> Option<f64> {
        Score::rate(self.faulty_indicted, self.faulty)
    }

    /// On fault-free runs this is the false-alarm rate.
    pub fn fp(&self) -> Option<f64> {
        Score::rate(self.healthy_indicted, self.healthy)
    }
}

/// Where each query's `@tune` value comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Thresholds {
    /// Chosen on the labelled tuning runs.
    Tuned,
    /// Each query's default; the tuning runs only train Ganesha's profiles.
    Defaults,
    /// Calibrated as `kahuna calibrate` does, on the tuning runs of each size read as one
    /// cluster's history, a window each, their labels unread (Ganesha's profiles included).
    Calibrated(calibrate::Shares),
}

pub struct Options {
    pub runs: Vec<PathBuf>,
    pub tune: Vec<PathBuf>,
    pub queries_dir: PathBuf,
    pub queries: Vec<String>,
    pub warehouse: Warehouse,
    pub max_false_alarm: f64,
    pub thresholds: Thresholds,
    pub csv: PathBuf,
}

/// Hosts each run's cluster had indicted, from verdict rows of every cluster. Only rows about
/// the host over the whole window count: a row of one job (`job_id` set, Kahuna-WB's per-job
/// rows) is evidence for its query's per-host roll-up, not a verdict on the host.
fn indicted_by_cluster(verdict: &[Diagnosis]) -> HashMap<&str, BTreeSet<String>> {
    let mut out: HashMap<&str, BTreeSet<String>> = HashMap::new();
    for d in verdict.iter().filter(|d| d.indicted && d.job_id.is_none()) {
        if let Some(host) = &d.host {
            out.entry(&*d.cluster).or_default().insert(host.to_string());
        }
    }
    out
}

/// The rows of a two-column query, both columns as text.
async fn text_pairs(ctx: &datafusion::prelude::SessionContext, sql: &str) -> Result<Vec<(String, String)>> {
    use datafusion::arrow::array::cast::AsArray;
    use datafusion::arrow::{compute::cast, datatypes::DataType};
    let mut pairs = Vec::new();
    for batch in ctx.sql(sql).await?.collect().await? {
        let (a, b) = (cast(batch.column(0), &DataType::Utf8)?, cast(batch.column(1), &DataType::Utf8)?);
        let (a, b) = (a.as_string::<i32>(), b.as_string::<i32>());
        pairs.extend((0..batch.num_rows()).map(|row| (a.value(row).to_string(), b.value(row).to_string())));
    }
    Ok(pairs)
}

/// The files each cluster's completed ingests read, from `ingests` (none in a new warehouse).
async fn ingested_files(warehouse: &Warehouse) -> Result<HashMap<String, Vec<String>>> {
    let mut files: HashMap<String, Vec<String>> = HashMap::new();
    // One session for the check and the query: opening one registers every table.
    let ctx = catalog::session(warehouse).await?;
    if !ctx.table_exist("ingests")? {
        return Ok(files);
    }
    let sql = "SELECT DISTINCT cluster, file FROM ingests WHERE status = 'ingested'";
    for (cluster, file) in text_pairs(&ctx, sql).await? {
        files.entry(cluster).or_default().push(file);
    }
    Ok(files)
}

/// The slave nodes of each cluster where the truth does not list them: hosts with TaskTracker
/// or DataNode states.
async fn fill_nodes(warehouse: &Warehouse, runs: &mut [Run]) -> Result<()> {
    let sql =
        "SELECT DISTINCT cluster, host FROM states WHERE host IS NOT NULL AND daemon IN ('tasktracker', 'datanode')";
    let mut hosts: HashMap<String, BTreeSet<String>> = HashMap::new();
    for (cluster, host) in text_pairs(&catalog::session(warehouse).await?, sql).await? {
        hosts.entry(cluster).or_default().insert(host);
    }
    for run in runs.iter_mut().filter(|r| r.nodes.is_empty()) {
        run.nodes = hosts.remove(&run.cluster).unwrap_or_default();
    }
    Ok(())
}

pub async fn eval(options: &Options, out: &mut dyn std::io::Write) -> Result<()> {
    let mut runs = find_runs(&options.runs, false)?;
    runs.extend(find_runs(&options.tune, true)?);
    refuse_shared_runs(&runs)?;
    // A kept warehouse may hold runs from an earlier evaluation: those are not read again.
    let kept = ingested_files(&options.warehouse).await?;
    let mut reused = 0;
    for run in &runs {
        if kept.get(&run.cluster).is_some_and(|files| files.iter().any(|f| Path::new(f).starts_with(&run.dir))) {
            reused += 1;
            continue;
        }
        let ingest_options = IngestOptions {
            paths: run_inputs(&run.dir)?,
            cluster: run.cluster.clone(),
            warehouse: options.warehouse.clone(),
            zone: None,
            hints: Hints::default(),
            progress: false,
            threads: crate::cores(),
            dry_run: false,
        };
        ingest(&ingest_options).await.with_context(|| format!("cannot ingest {}", run.dir.display()))?;
    }
    fill_nodes(&options.warehouse, &mut runs).await?;
    writeln!(
        out,
        "{} runs scored, {} tuning runs",
        runs.iter().filter(|r| !r.tuning).count(),
        runs.iter().filter(|r| r.tuning).count()
    )?;
    match options.thresholds {
        Thresholds::Tuned => {}
        Thresholds::Defaults => writeln!(
            out,
            "thresholds: each query's default (--defaults); the tuning runs only train Ganesha's profiles"
        )?,
        Thresholds::Calibrated(shares) => writeln!(
            out,
            "thresholds: calibrated on the tuning runs without their labels (--calibrate), healthy alarm share at most {} each and {} together",
            shares.each, shares.together
        )?,
    }
    if reused > 0 {
        writeln!(
            out,
            "{reused} runs were in the warehouse already (ingested from the same folders as the same clusters) and were not read again"
        )?;
    }

    let fault_free_tuning: Vec<&str> =
        runs.iter().filter(|r| r.tuning && r.fault_free()).map(|r| r.cluster.as_str()).collect();
    // The tuning runs' verdicts are read only where they choose a value (tuned): else only the
    // scored runs are diagnosed.
    let tuned = options.thresholds == Thresholds::Tuned;
    let windows: Vec<Window> = runs.iter().filter(|r| tuned || !r.tuning).map(|r| Window::whole(&r.cluster)).collect();
    let mut lines = vec!["query,fault,workload,nodes,runs,param,value,tp,fp,fn,false_alarm".to_string()];
    let mut report = String::new();
    // Any verdict query, the shipped ones or an operator's copy saved under a new name; one that
    // reads the others' verdicts (`combined`) after them.
    let mut queries = Vec::new();
    for name in &options.queries {
        let query = Query::resolve(name, &options.queries_dir)?;
        if query.output != Output::Verdict {
            bail!("{name}: not a verdict query (eval scores the hosts a query indicts)");
        }
        let reads = query.bind(&[])?.tables()?;
        queries.push((query, reads));
    }
    queries.sort_by_key(|(_, reads)| reads.contains(DIAGNOSES));
    // Calibrated: the values `kahuna calibrate` would choose on a cluster's history, a window a
    // run, the labels unread. A cluster's history is of its own nodes: the tuning runs of one
    // size are one cluster's history, and the runs of that size (or the nearest) take its
    // values, Ganesha's profiles included.
    let sizes: BTreeSet<usize> = runs.iter().filter(|r| r.tuning).map(|r| r.nodes.len()).collect();
    let history_of = |run: &Run| nearest_size(&sizes, run.nodes.len());
    let mut calibrated: BTreeMap<usize, BTreeMap<String, Vec<(String, String)>>> = BTreeMap::new();
    if let Thresholds::Calibrated(shares) = options.thresholds {
        if sizes.is_empty() {
            bail!(
                "--calibrate calibrates on the tuning runs, read as a cluster's history without their labels: give --tune"
            );
        }
        let names: Vec<String> = queries
            .iter()
            .filter(|(q, reads)| q.tune.is_some() && !reads.contains(DIAGNOSES))
            .map(|(q, _)| q.name.clone())
            .collect();
        let queries = calibrate::calibrated_queries(&names, &options.queries_dir)?;
        let training = Query::resolve("ganesha_train", &options.queries_dir)?;
        let _ = write!(report, "\ncalibration on the tuning runs:\n");
        for &size in &sizes {
            let tuning: Vec<Window> =
                runs.iter().filter(|r| r.tuning && r.nodes.len() == size).map(|r| Window::whole(&r.cluster)).collect();
            let clusters: Vec<&str> = tuning.iter().map(|w| w.cluster.as_str()).collect();
            // The profiles are saved under a name of their own, one model per size.
            let model = format!("tuning-{size}-nodes");
            let mut train = Request::new(training.clone());
            train.cluster = Some(model.clone());
            train.params = vec![("train_clusters".into(), clusters.join(","))];
            let history = calibrate::History {
                windows: &tuning,
                training: train,
                model_cluster: Some(model),
                unit: format!("{} tuning runs of {size} nodes", tuning.len()),
            };
            let mut said = Vec::new();
            let chosen = calibrate::calibrate_history(&options.warehouse, &queries, &history, shares, &mut said);
            let by_query = calibrated.entry(size).or_default();
            for chosen in chosen.await? {
                by_query.entry(chosen.query).or_default().push((chosen.param, chosen.value));
            }
            let _ = write!(report, "{size} nodes:\n{}", String::from_utf8_lossy(&said));
        }
    }
    let calibrating = matches!(options.thresholds, Thresholds::Calibrated(_));
    let training = Query::resolve("ganesha_train", &options.queries_dir)?;
    let Output::Table(models) = &training.output else { bail!("{}: saves no table of profiles", training.origin) };
    let mut trained = false;
    for (query, reads) in &queries {
        let name = &query.name;
        // A Ganesha query (one that reads the profiles) needs them trained on the fault-free
        // tuning runs first, once.
        if reads.contains(models) && !trained && !calibrating {
            if fault_free_tuning.is_empty() {
                let _ = writeln!(
                    report,
                    "\n{name}: skipped (its profiles are trained on fault-free tuning runs: give --tune)"
                );
                continue;
            }
            let mut train = Request::new(training.clone());
            train.params = vec![("train_clusters".into(), fault_free_tuning.join(","))];
            diagnose::run(&options.warehouse, &train, Record::Replace).await?;
            trained = true;
        }
        let param = query.tune.as_ref().map(|t| t.param.clone()).unwrap_or_default();
        let default = query.params.iter().find(|p| p.name == param).map(|p| p.default.clone()).unwrap_or_default();
        // Taken after training and after the verdicts `combined` reads were written.
        let snapshot = Snapshot::take(&options.warehouse).await?;
        let mut chosen_rows = Vec::new();
        // The value each (workload, nodes) was scored with ("" for the default).
        let mut chosen_value: BTreeMap<(String, usize), String> = BTreeMap::new();
        if calibrating && calibrated.values().any(|by_query| by_query.contains_key(name)) {
            // The runs of each history's size, with the values calibrated on it.
            for (size, by_query) in &calibrated {
                let params = by_query.get(name).cloned().unwrap_or_default();
                let ours: Vec<&Run> = runs.iter().filter(|r| !r.tuning && history_of(r) == Some(*size)).collect();
                let windows: Vec<Window> = ours.iter().map(|r| Window::whole(&r.cluster)).collect();
                chosen_rows.extend(diagnose::over_windows(&snapshot, query, &params, &windows).await?.concat());
                let value = params.iter().find(|(p, _)| *p == param).map(|(_, v)| v.clone()).unwrap_or_default();
                for run in ours {
                    chosen_value.insert((run.workload.clone(), run.nodes.len()), value.clone());
                }
            }
        } else {
            // Each grid value runs once over every cluster; per workload, the tuning runs choose.
            let grid = match &query.tune {
                Some(tune) if options.thresholds == Thresholds::Tuned && runs.iter().any(|r| r.tuning) => {
                    tune.grid.clone()
                }
                _ => vec![String::new()],
            };
            let mut by_value = Vec::new();
            for value in &grid {
                let params = if value.is_empty() { Vec::new() } else { vec![(param.clone(), value.clone())] };
                by_value.push(diagnose::over_windows(&snapshot, query, &params, &windows).await?.concat());
            }
            let workloads: BTreeSet<&str> = runs.iter().map(|r| r.workload.as_str()).collect();
            for workload in workloads {
                let tuning: Vec<&Run> = runs.iter().filter(|r| r.tuning && r.workload == workload).collect();
                let best = choose(&tuning, &by_value, options.max_false_alarm);
                let ours: Vec<&Run> = runs.iter().filter(|r| r.workload == workload).collect();
                for run in &ours {
                    chosen_value.insert((run.workload.clone(), run.nodes.len()), grid[best].clone());
                }
                let clusters: BTreeSet<&str> = ours.iter().map(|r| r.cluster.as_str()).collect();
                chosen_rows.extend(by_value[best].iter().filter(|d| clusters.contains(&*d.cluster)).cloned());
            }
        }
        let parameters: BTreeMap<String, &String> =
            chosen_value.iter().map(|((workload, nodes), value)| (format!("{workload}/{nodes}"), value)).collect();
        // `combined` reads the chosen verdicts from `diagnoses`, as it would in production.
        let info = RunInfo {
            run_id: format!("eval-{name}-{}", Utc::now().format("%Y%m%dT%H%M%S%.6f")),
            query: name.clone(),
            query_hash: query.hash(),
            window_from: None,
            window_to: None,
            parameters: serde_json::to_string(&parameters)?,
            run_date: Utc::now().date_naive(),
            ran_at: Utc::now(),
        };
        results::write(&options.warehouse, DIAGNOSES, results::diagnoses_batch(&info, &chosen_rows)?, None).await?;

        let indicted = indicted_by_cluster(&chosen_rows);
        let mut groups: BTreeMap<(String, String, usize), Score> = BTreeMap::new();
        for run in runs.iter().filter(|r| !r.tuning) {
            let hosts = indicted.get(run.cluster.as_str()).cloned().unwrap_or_default();
            groups.entry((run.fault.clone(), run.workload.clone(), run.nodes.len())).or_default().add(run, &hosts);
        }
        let how = match options.thresholds {
            Thresholds::Tuned => "tuned",
            Thresholds::Defaults => "default",
            Thresholds::Calibrated(_) => "calibrated",
        };
        let _ =
            writeln!(report, "\n{name}{}", if param.is_empty() { String::new() } else { format!(" ({how}: {param})") });
        let _ = writeln!(
            report,
            "{:<14} {:<10} {:>5} {:>4} {:>7} {:>6} {:>6} {:>6} {:>11}",
            "fault",
            "workload",
            "nodes",
            "runs",
            param_label(&param),
            "TP",
            "FP",
            "FN",
            "false-alarm"
        );
        for ((fault, workload, nodes), score) in &groups {
            let chosen = chosen_value.get(&(workload.clone(), *nodes)).filter(|value| !value.is_empty());
            let value = chosen.cloned().unwrap_or_else(|| default.clone());
            let shown = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
            let (tp, fp, fn_, alarm) = if fault == "none" {
                (None, None, None, score.fp())
            } else {
                (score.tp(), score.fp(), score.tp().map(|t| 1.0 - t), None)
            };
            let _ = writeln!(
                report,
                "{fault:<14} {workload:<10} {nodes:>5} {:>4} {:>7} {:>6} {:>6} {:>6} {:>11}",
                score.runs,
                if value.is_empty() { "default" } else { &value },
                shown(tp),
                shown(fp),
                shown(fn_),
                shown(alarm)
            );
            let csv = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
            lines.push(format!(
                "{name},{fault},{workload},{nodes},{},{param},{value},{},{},{},{}",
                score.runs,
                csv(tp),
                csv(fp),
                csv(fn_),
                csv(alarm)
            ));
        }
    }
    write!(out, "{report}")?;
    std::fs::write(&options.csv, lines.join("\n") + "\n")
        .with_context(|| format!("cannot write {}", options.csv.display()))?;
    writeln!(out, "\nwritten: {}", options.csv.display())?;
    Ok(())
}

/// The size of `sizes` nearest to `nodes`, the smaller of two as near.
fn nearest_size(sizes: &BTreeSet<usize>, nodes: usize) -> Option<usize> {
    sizes.iter().copied().min_by_key(|&size| (size.abs_diff(nodes), size))
}

fn param_label(param: &str) -> &str {
    if param.is_empty() { "param" } else { param }
}

/// The grid index the tuning runs choose (0, the first, when there are none).
fn choose(tuning: &[&Run], by_value: &[Vec<Diagnosis>], max_false_alarm: f64) -> usize {
    if tuning.is_empty() {
        return 0;
    }
    let mut admissible = Vec::new();
    for (index, verdict) in by_value.iter().enumerate() {
        let indicted = indicted_by_cluster(verdict);
        let (mut faulty, mut clean) = (Score::default(), Score::default());
        for run in tuning {
            let hosts = indicted.get(run.cluster.as_str()).cloned().unwrap_or_default();
            if run.fault_free() { clean.add(run, &hosts) } else { faulty.add(run, &hosts) }
        }
        if clean.fp().is_some_and(|alarm| alarm > max_false_alarm) {
            continue;
        }
        admissible.push((index, faulty.tp().unwrap_or(0.0) - faulty.fp().unwrap_or(0.0)));
    }
    let best = admissible.iter().map(|&(_, merit)| merit).fold(f64::NEG_INFINITY, f64::max);
    let tied: Vec<usize> =
        admissible.iter().filter(|&&(_, merit)| merit >= best - 1e-9).map(|&(index, _)| index).collect();
    // No value keeps false alarms low enough: the strictest (last) one.
    tied.get(tied.len() / 2).copied().unwrap_or(by_value.len().saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cluster: &str, fault: &str, faulty: &[&str], tuning: bool) -> Run {
        Run {
            dir: PathBuf::new(),
            cluster: cluster.into(),
            fault: fault.into(),
            workload: "sort".into(),
            faulty: faulty.iter().map(|s| s.to_string()).collect(),
            nodes: ["n1", "n2", "n3", "n4", "n5"].iter().map(|s| s.to_string()).collect(),
            tuning,
        }
    }

    fn indict(cluster: &str, hosts: &[&str]) -> Vec<Diagnosis> {
        hosts
            .iter()
            .map(|h| Diagnosis {
                cluster: cluster.into(),
                host: Some((*h).into()),
                indicted: true,
                ..Diagnosis::default()
            })
            .collect()
    }

    #[test]
    fn rates_follow_ganesha_definitions() {
        let mut score = Score::default();
        score.add(&run("a", "CPUHog", &["n1"], false), &["n1", "n2"].iter().map(|s| s.to_string()).collect());
        score.add(&run("b", "CPUHog", &["n3"], false), &BTreeSet::new());
        assert_eq!((score.tp(), score.fp()), (Some(0.5), Some(1.0 / 8.0)));
    }

    #[test]
    fn thresholds_are_chosen_on_tuning_runs_only() {
        let clean = run("t-clean", "none", &[], true);
        let faulty = run("t-hog", "CPUHog", &["n1"], true);
        let scored = run("s-hog", "CPUHog", &["n2"], false);
        // Value 0 is sensitive (a false alarm on the clean tuning run), value 1 finds the hog
        // cleanly, value 2 finds nothing. What the scored run says must not matter.
        let by_value = vec![
            [indict("t-clean", &["n4"]), indict("t-hog", &["n1"]), indict("s-hog", &["n2"])].concat(),
            [indict("t-hog", &["n1"]), indict("s-hog", &["n5"])].concat(),
            indict("s-hog", &["n2"]),
        ];
        assert_eq!(choose(&[&clean, &faulty], &by_value, 0.02), 1);
        assert_eq!(choose(&[&clean, &faulty], &by_value, 0.5), 1, "of two that tie, the stricter");
        let plateau = vec![indict("t-hog", &["n1"]); 3];
        assert_eq!(choose(&[&clean, &faulty], &plateau, 0.02), 1, "of three that tie, the middle one");
        let _ = scored;
        assert_eq!(choose(&[], &by_value, 0.02), 0, "no tuning runs: the first value");
    }

    #[test]
    fn a_run_takes_the_history_of_its_size_or_the_nearest() {
        let sizes = BTreeSet::from([10, 50]);
        let nearest: Vec<Option<usize>> = [10, 12, 30, 31, 50, 200].map(|n| nearest_size(&sizes, n)).to_vec();
        assert_eq!(nearest, [Some(10), Some(10), Some(10), Some(50), Some(50), Some(50)]);
        assert_eq!(nearest_size(&BTreeSet::new(), 10), None);
    }

    #[test]
    fn truth_files_name_fault_workload_and_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = r#""hosts": [{"host": "r01n01", "ip": "10.1.1.10"}, {"host": "r01n02", "ip": "10.1.1.11"}]"#;
        let write = |faults: &str| {
            let text = format!(r#"{{"seed": 7, "workload": "sort", "nodes": 2, {hosts}, "faults": [{faults}]}}"#);
            std::fs::write(dir.path().join("truth.json"), text).unwrap();
        };
        write(r#"{"fault": "CPUHog", "host": "r01n02", "ip": "10.1.1.11", "start": "2008-08-23T17:00:00Z"}"#);
        let (fault, workload, faulty, nodes) = read_truth(dir.path()).unwrap();
        assert_eq!((fault.as_str(), workload.as_str()), ("CPUHog", "sort"));
        assert_eq!((faulty.into_iter().collect::<Vec<_>>(), nodes.len()), (vec!["r01n02".to_string()], 2));
        write("");
        assert_eq!(read_truth(dir.path()).unwrap().0, "none");
        write(r#"{"fault": "DiskHog"}"#);
        assert!(format!("{:#}", read_truth(dir.path()).unwrap_err()).contains("needs `fault` and `host`"));
    }

    #[test]
    fn a_tuning_run_that_is_a_scored_run_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let run = |suite: &str, rep: &str, seed: u32| {
            let dir = root.path().join(suite).join(rep);
            std::fs::create_dir_all(&dir).unwrap();
            let text = format!(r#"{{"seed": {seed}, "workload": "sort", "hosts": [], "faults": []}}"#);
            std::fs::write(dir.join("truth.json"), text).unwrap();
        };
        // Seeds 411, 412 against 412, 413: the scored r1 is the tuning r0.
        for (suite, first) in [("scored", 411), ("tuning", 412)] {
            run(suite, "r0", first);
            run(suite, "r1", first + 1);
        }
        let mut runs = find_runs(&[root.path().join("scored")], false).unwrap();
        runs.extend(find_runs(&[root.path().join("tuning")], true).unwrap());
        let error = format!("{:#}", refuse_shared_runs(&runs).unwrap_err());
        assert!(error.contains("tuning/r0 and ") && error.contains("scored/r1 have the same truth.json"), "{error}");
        run("tuning", "r0", 421);
        run("tuning", "r1", 422);
        let mut runs = find_runs(&[root.path().join("scored")], false).unwrap();
        runs.extend(find_runs(&[root.path().join("tuning")], true).unwrap());
        refuse_shared_runs(&runs).unwrap();
    }
}
