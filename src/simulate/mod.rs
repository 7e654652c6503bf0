//! `kahuna simulate`: a deterministic, fault-injecting discrete-event model of a Hadoop 0.18/0.20
//! cluster that writes what a real one would — TaskTracker, DataNode and attempt logs, job
//! history, a one-second sadc capture as `sadf -d` text — and `truth.json`, what really happened.
//! The same model writes a Hadoop 2 (YARN) cluster's logs: NodeManagers', application masters'
//! and containers'.
//!
//! The data path, one file per concern: [`workload`] submits jobs; [`scheduler`] runs the
//! JobTracker and the tasks on the [`cluster`], through [`hdfs`], under [`faults`], and lays down
//! records; [`writers`], [`sadc`] and [`jobhistory`] (or, for YARN, [`appmaster`]) turn them
//! into files; [`history`] plans the
//! M45-scale history of many experiments. [`rng`] makes it all repeat for a seed.
//!
//! The simulation is single-threaded (events must be ordered); writing is parallel across nodes:
//! every simulated stretch, each node's due records are sorted and written by a pool of threads,
//! so memory holds only the lines of tasks in flight. Same seed, same bytes: nothing depends on
//! the thread that writes a node or on the wall clock.

pub mod appmaster;
pub mod cluster;
pub mod faults;
pub mod hdfs;
pub mod history;
pub mod jobhistory;
pub mod rng;
pub mod sadc;
pub mod scheduler;
pub mod synthetic;
pub mod workload;
pub mod writers;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use cluster::Cluster;
pub use cluster::{Conditions, DataNodeLog, Hardware};
use faults::{Fault, FaultSpec, Injected};
use jobhistory::Status;
use rng::{Rng, Stream};
use sadc::SadcWriter;
use scheduler::{JobSource, JobState, RunSpec, Sim};
use workload::{Driver, JobSpec, Workload};
use writers::{LineCounts, Names, NodeWriter, Rec};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    /// 0.18: DataNode `Received block … of size … from …`, `Served block`, DEBUG connection
    /// counts (as SALSA ran it); history without `Meta` and ` .`.
    V018,
    /// 0.20: clienttrace lines for HDFS reads, writes and shuffles; escaped history.
    V020,
    /// 2.8 (YARN): NodeManagers' container transitions, each job's MRAppMaster log in its
    /// container's `syslog`, reduces' fetcher threads, block pools in the DataNode's lines; no
    /// JobTracker history (YARN's `.jhist` is not read by Kahuna, so it is not written).
    V2,
}

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        match s {
            "0.18" | "18" => Some(Version::V018),
            "0.20" | "20" => Some(Version::V020),
            "2" | "2.x" | "2.8" => Some(Version::V2),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Version::V018 => "0.18",
            Version::V020 => "0.20",
            Version::V2 => "2.8",
        }
    }

    /// How job ids are stamped: a JobTracker's start as `yyyyMMddHHmm`, a ResourceManager's
    /// as milliseconds since 1970.
    fn cluster_stamp(self, epoch_ms: i64) -> String {
        match self {
            Version::V018 | Version::V020 => {
                chrono::DateTime::from_timestamp_millis(epoch_ms).unwrap_or_default().format("%Y%m%d%H%M").to_string()
            }
            Version::V2 => (epoch_ms - 60_000).to_string(),
        }
    }
}

/// 2008-08-25 00:00:00 UTC, the start of a run unless it says otherwise.
pub const DEFAULT_EPOCH_MS: i64 = 1_219_622_400_000;

/// One run: a workload on a cluster, with at most one fault.
#[derive(Clone, Debug)]
pub struct Config {
    pub nodes: usize,
    pub workload: Workload,
    pub fault: Option<FaultSpec>,
    pub duration_s: f64,
    pub seed: u64,
    pub out: PathBuf,
    pub version: Version,
    pub gzip: bool,
    /// Write the sadc capture.
    pub sadc: bool,
    pub threads: usize,
    pub progress: bool,
    pub epoch_ms: i64,
    pub conditions: Conditions,
}

/// A job as it ran.
#[derive(Clone, Debug, PartialEq)]
pub struct JobOutcome {
    pub job_id: String,
    /// The stream that submitted it and its place there: a faulty run and its control submit
    /// the same jobs per stream, though streams may interleave differently.
    pub stream: u32,
    pub seq: u32,
    pub name: String,
    pub user: String,
    pub maps: u32,
    pub reduces: u32,
    pub submit_ms: i64,
    pub finish_ms: Option<i64>,
    pub status: Option<Status>,
}

impl JobOutcome {
    /// Seconds from submission to the end, or to `end_ms` for a job still running then.
    pub fn seconds(&self, end_ms: i64) -> f64 {
        (self.finish_ms.unwrap_or(end_ms) - self.submit_ms) as f64 / 1000.0
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub jobs: Vec<JobOutcome>,
    pub lines: LineCounts,
    pub fault: Option<Injected>,
    /// When an injected hang struck, and the attempt it hung.
    pub struck: Option<(i64, String)>,
    pub end_ms: i64,
}

/// Where a run's files go.
struct Layout {
    /// None: the daemons' lines are simulated and dropped (a history-only cluster).
    logs: Option<PathBuf>,
    history: PathBuf,
    sadc: Option<PathBuf>,
    /// The user the daemons run as: `hadoop-<user>-tasktracker-<host>.log`.
    user: String,
    gzip: bool,
    threads: usize,
    epoch_ms: i64,
    datanode_log: DataNodeLog,
    sysstat_noise: bool,
    sysstat_interval_s: u32,
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Writing rounds: at most this much simulated time, at least this much, and fewer lines
/// than this held between them where the shorter rounds can help.
const MAX_STEP_MS: i64 = 120_000;
const MIN_STEP_MS: i64 = 5_000;
const MAX_BUFFERED: usize = 200_000;

/// Runs one simulated cluster to its end and writes all its files.
fn execute<S: JobSource>(spec: RunSpec, source: S, layout: &Layout, bar: &ProgressBar) -> Result<Outcome> {
    let cluster = spec.cluster;
    let version = spec.version;
    let end_ms = spec.end_ms;
    let fault = spec.fault.clone();
    let seed = spec.seed;
    let hosts: Vec<(String, String)> = cluster.nodes.iter().map(|n| (n.name.clone(), n.ip.clone())).collect();
    let mut sim = Sim::new(spec, source);
    let names = Names { version, epoch_ms: layout.epoch_ms, hosts: &hosts, jobs: &[] };
    let mut logs = Vec::with_capacity(hosts.len());
    for (node, (host, _)) in hosts.iter().enumerate() {
        let Some(dir) = &layout.logs else { break };
        let offset = cluster.nodes[node].clock_offset_ms;
        let w = NodeWriter::create(dir, node as u16, &layout.user, &names, layout.gzip, offset, layout.datanode_log)
            .with_context(|| format!("cannot create the logs of {host} under {}", dir.display()))?;
        logs.push(w);
    }
    let mut sadcs = Vec::new();
    if let Some(dir) = &layout.sadc {
        for (i, n) in cluster.nodes.iter().enumerate() {
            let w = SadcWriter::create(dir, i, &n.name, n.cores, n.disk_mb_s, seed, layout.gzip)
                .with_context(|| format!("cannot create {}", dir.display()))?
                .with_clock_offset(n.clock_offset_ms);
            let w = w.with_interval(layout.sysstat_interval_s);
            sadcs.push(if layout.sysstat_noise { w.with_noise(seed) } else { w });
        }
    }
    // Simulated time per writing round: short enough that buffered lines stay few, shorter
    // while a large cluster shuffles (millions of copy lines a simulated minute).
    let mut step = MAX_STEP_MS;
    let mut appmaster_lines = 0;
    loop {
        let until = (sim.now + step).min(end_ms);
        let more = sim.run_until(until);
        sim.lay_progress(until);
        let buffered: usize = sim.bufs.iter().map(Vec::len).sum();
        step = if buffered > MAX_BUFFERED {
            (step / 2).max(MIN_STEP_MS)
        } else if buffered < MAX_BUFFERED / 4 {
            (step * 2).min(MAX_STEP_MS)
        } else {
            step
        };
        let names = Names { version, epoch_ms: layout.epoch_ms, hosts: &hosts, jobs: &sim.names };
        let due = Due { until, names: &names, fault: fault.as_ref(), killed: &sim.killed, threads: layout.threads };
        if layout.logs.is_some() {
            write_due(&mut sim.bufs, &mut sim.usage, &mut logs, &mut sadcs, &due)?;
        } else {
            sim.bufs.iter_mut().for_each(Vec::clear);
        }
        appmaster_lines += write_histories(&mut sim, layout, &hosts, version, cluster)?;
        bar.set_position((until / 1000) as u64);
        if !more {
            break;
        }
    }
    // The end: lines after it were never written; jobs still running keep what they have.
    let still: Vec<u32> = (0..sim.jobs.len() as u32)
        .filter(|&j| sim.jobs[j as usize].state != JobState::Waiting && sim.jobs[j as usize].finish_ms.is_none())
        .collect();
    sim.closed.extend(still);
    appmaster_lines += write_histories(&mut sim, layout, &hosts, version, cluster)?;
    for buf in &mut sim.bufs {
        buf.clear();
    }
    let mut lines = LineCounts { appmaster: appmaster_lines, ..LineCounts::default() };
    for w in logs {
        lines.add(&w.finish()?);
    }
    for (w, usage) in sadcs.into_iter().zip(sim.usage.iter_mut()) {
        w.finish(usage, end_ms / 1000, layout.epoch_ms, fault.as_ref())?;
    }
    let mut per_stream = std::collections::HashMap::new();
    let jobs = sim
        .jobs
        .iter()
        .zip(&sim.names)
        .filter(|(j, _)| j.submit_ms < end_ms)
        .map(|(j, n)| {
            let seq = per_stream.entry(j.stream).or_insert(0u32);
            *seq += 1;
            JobOutcome {
                job_id: format!("job_{}", n.id),
                stream: j.stream,
                seq: *seq - 1,
                name: j.spec.name.clone(),
                user: j.spec.user.clone(),
                maps: j.spec.maps,
                reduces: j.spec.reduces,
                submit_ms: j.submit_ms,
                finish_ms: j.finish_ms,
                status: match j.state {
                    JobState::Done(s) => Some(s),
                    _ => None,
                },
            }
        })
        .collect();
    let names = Names { version, epoch_ms: layout.epoch_ms, hosts: &hosts, jobs: &sim.names };
    let struck = sim.struck.map(|(at, task)| (at, writers::attempt_text(task, &names)));
    Ok(Outcome { jobs, lines, fault, struck, end_ms })
}

/// What a writing round needs besides the buffers and files.
struct Due<'a> {
    until: i64,
    names: &'a Names<'a>,
    fault: Option<&'a Injected>,
    killed: &'a [(u64, i64)],
    threads: usize,
}

/// Writes one node's records due before `until` and its sadc rows.
fn write_node(
    buf: &mut Vec<Rec>,
    usage: &mut sadc::Usage,
    w: &mut NodeWriter,
    sadc: Option<&mut SadcWriter>,
    due: &Due,
) -> std::io::Result<()> {
    w.write_due(buf, due.until, due.names, due.killed)?;
    if let Some(s) = sadc {
        s.advance(usage, due.until / 1000, due.names.epoch_ms, due.fault)?;
    }
    Ok(())
}

/// Writes each node's records due before `until`, in parallel across nodes.
fn write_due(
    bufs: &mut [Vec<Rec>],
    usage: &mut [sadc::Usage],
    logs: &mut [NodeWriter],
    sadcs: &mut [SadcWriter],
    due: &Due,
) -> Result<()> {
    if due.threads <= 1 {
        let mut sadcs = sadcs.iter_mut();
        for ((buf, usage), w) in bufs.iter_mut().zip(usage.iter_mut()).zip(logs.iter_mut()) {
            write_node(buf, usage, w, sadcs.next(), due).context("cannot write the logs")?;
        }
        return Ok(());
    }
    let chunk = bufs.len().div_ceil(due.threads).max(1);
    let results: Vec<std::io::Result<()>> = std::thread::scope(|scope| {
        let mut sadc_chunks = sadcs.chunks_mut(chunk);
        let handles: Vec<_> = bufs
            .chunks_mut(chunk)
            .zip(usage.chunks_mut(chunk))
            .zip(logs.chunks_mut(chunk))
            .map(|((bufs, usage), logs)| {
                let mut sadcs = sadc_chunks.next().unwrap_or_default().iter_mut();
                scope.spawn(move || -> std::io::Result<()> {
                    for ((buf, usage), w) in bufs.iter_mut().zip(usage.iter_mut()).zip(logs.iter_mut()) {
                        write_node(buf, usage, w, sadcs.next(), due)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(std::io::Error::other("a writer thread panicked"))))
            .collect()
    });
    for r in results {
        r.context("cannot write the logs")?;
    }
    Ok(())
}

/// Writes the job history of every job closed since the last call: the JobTracker's, or from
/// Hadoop 2 the application master's log (on node `job mod nodes`). Returns the log lines written.
fn write_histories<S: JobSource>(
    sim: &mut Sim<S>,
    layout: &Layout,
    hosts: &[(String, String)],
    version: Version,
    cluster: &Cluster,
) -> Result<u64> {
    let closed = std::mem::take(&mut sim.closed);
    let names = Names { version, epoch_ms: layout.epoch_ms, hosts, jobs: &sim.names };
    let mut lines = 0;
    for job in closed {
        let j = &mut sim.jobs[job as usize];
        j.history.sort_by_key(|h| h.ts_ms);
        match (version, &layout.logs) {
            (Version::V018 | Version::V020, _) => {
                let id = &sim.names[job as usize].id;
                let path =
                    jobhistory::path(&layout.history, &cluster.master, layout.epoch_ms, id, &j.spec, layout.gzip);
                jobhistory::write(&path, job, &j.spec, &j.history, &names, layout.gzip)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            (Version::V2, Some(logs)) => {
                let node = (job as usize % hosts.len()) as u16;
                let path = appmaster::path(logs, job, node, &names, layout.gzip);
                // The master's container is stamped by its node's clock.
                let offset = cluster.nodes[usize::from(node)].clock_offset_ms;
                let on_its_node = Names { epoch_ms: layout.epoch_ms + offset, ..names };
                lines += appmaster::write(&path, job, &j.history, &on_its_node, layout.gzip)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            (Version::V2, None) => {}
        }
        j.history = Vec::new();
    }
    Ok(lines)
}

fn progress_bar(enabled: bool, total: u64, unit: &str) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let template = format!("{{spinner}} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit} {{msg}}");
    bar.set_style(ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()));
    bar
}

/// A workload's streams as a job source.
struct WorkloadSource {
    driver: Driver,
    end_ms: i64,
}

impl JobSource for WorkloadSource {
    fn start(&mut self) -> Vec<(i64, u32, JobSpec)> {
        (0..self.driver.streams()).map(|s| (2000 + 1000 * i64::from(s), s, self.driver.next(s).1)).collect()
    }

    fn next(&mut self, stream: u32, now: i64) -> Option<(i64, JobSpec)> {
        let (think, spec) = self.driver.next(stream);
        (now + think < self.end_ms).then_some((now + think, spec))
    }
}

/// Runs one configuration and writes `truth.json`; returns what happened.
pub fn run(cfg: &Config) -> Result<Outcome> {
    if cfg.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let cluster = Cluster::first(cfg.nodes, cfg.seed, cfg.conditions);
    let end_ms = (cfg.duration_s * 1000.0) as i64;
    let fault = match &cfg.fault {
        None => None,
        Some(f) => {
            let node = match &f.node {
                Some(name) => cluster.find(name).with_context(|| {
                    format!("--fault {}@{name}: no such node in a {}-node cluster", f.fault, cfg.nodes)
                })?,
                None => Rng::derive(cfg.seed, Stream::FaultNode, &[]).below(cfg.nodes as u64) as usize,
            };
            let disk = cluster.nodes[node].disk_mb_s;
            Some(Injected::new(f.fault, node, (f.start_s * 1000.0) as i64, end_ms, disk))
        }
    };
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("cannot create {}", cfg.out.display()))?;
    let layout = Layout {
        logs: Some(cfg.out.join("logs")),
        history: cfg.out.join("history"),
        sadc: cfg.sadc.then(|| cfg.out.join("sadc")),
        user: "hadoop".into(),
        gzip: cfg.gzip,
        threads: cfg.threads,
        epoch_ms: cfg.epoch_ms,
        datanode_log: cfg.conditions.datanode_log,
        sysstat_noise: cfg.conditions.sysstat_noise,
        sysstat_interval_s: cfg.conditions.sysstat_interval_s,
    };
    let spec = RunSpec {
        seed: cfg.seed,
        version: cfg.version,
        cluster: &cluster,
        fault,
        end_ms,
        jt_stamp: cfg.version.cluster_stamp(cfg.epoch_ms),
        usage: cfg.sadc,
    };
    let source = WorkloadSource { driver: Driver::new(cfg.workload, cfg.seed, cfg.nodes), end_ms };
    let bar = progress_bar(cfg.progress, (end_ms / 1000) as u64, "simulated s");
    let outcome = execute(spec, source, &layout, &bar)?;
    bar.finish_and_clear();
    let truth = json!({
        "seed": cfg.seed,
        "workload": cfg.workload.name(),
        "hadoop": cfg.version.name(),
        "nodes": cfg.nodes,
        "start": iso(cfg.epoch_ms),
        "end": iso(cfg.epoch_ms + end_ms),
        "start_ms": cfg.epoch_ms,
        "end_ms": cfg.epoch_ms + end_ms,
        "hosts": cluster.nodes.iter().map(|n| json!({"host": n.name, "ip": n.ip})).collect::<Vec<_>>(),
        "faults": outcome.fault.iter().map(|f| fault_json(f, outcome.struck.as_ref(), &cluster, cfg.epoch_ms)).collect::<Vec<_>>(),
        "jobs": outcome.jobs.iter().map(|j| job_json(j, cfg.epoch_ms, end_ms)).collect::<Vec<_>>(),
        "lines": {
            "tasktracker": outcome.lines.tasktracker,
            "nodemanager": outcome.lines.nodemanager,
            "datanode": outcome.lines.datanode,
            "syslog": outcome.lines.syslog,
            "appmaster": outcome.lines.appmaster,
        },
    });
    write_truth(&cfg.out.join("truth.json"), &truth)?;
    Ok(outcome)
}

fn fault_json(f: &Injected, struck: Option<&(i64, String)>, cluster: &Cluster, epoch_ms: i64) -> Value {
    let node = &cluster.nodes[f.node];
    let mut v = json!({
        "fault": f.fault.name(),
        "host": node.name,
        "ip": node.ip,
        "start": iso(epoch_ms + f.start_ms),
        "end": iso(epoch_ms + f.end_ms),
        "start_ms": epoch_ms + f.start_ms,
        "end_ms": epoch_ms + f.end_ms,
    });
    // A hang strikes one attempt, once: which, and when it stopped making progress.
    if let Some((at, attempt)) = struck {
        v["struck"] = json!({ "attempt": attempt, "at": iso(epoch_ms + at), "at_ms": epoch_ms + at });
    }
    v
}

fn job_json(j: &JobOutcome, epoch_ms: i64, end_ms: i64) -> Value {
    json!({
        "job_id": j.job_id,
        "stream": j.stream,
        "name": j.name,
        "user": j.user,
        "maps": j.maps,
        "reduces": j.reduces,
        "submit_ms": epoch_ms + j.submit_ms,
        "finish_ms": j.finish_ms.map(|f| epoch_ms + f),
        "status": j.status.map_or("RUNNING", Status::name),
        "seconds": (j.seconds(end_ms) * 1000.0).round() / 1000.0,
    })
}

/// Truth holds nothing of the wall clock, so that a seed gives the same bytes.
fn write_truth(path: &Path, truth: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(truth)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// A matrix of runs, as the papers ran them: every fault (and the control) on every workload
/// and cluster size, `repetitions` times with seeds `seed`, `seed + 1`, …
#[derive(Clone, Debug)]
pub struct Suite {
    pub workloads: Vec<Workload>,
    /// None is the control run.
    pub faults: Vec<Option<Fault>>,
    pub nodes: Vec<usize>,
    pub repetitions: u64,
    pub duration_s: f64,
    pub seed: u64,
    pub version: Version,
    pub sadc: bool,
    pub conditions: Conditions,
}

/// The keys a suite may have.
const SUITE_KEYS: [&str; 16] = [
    "about",
    "workloads",
    "faults",
    "nodes",
    "repetitions",
    "duration",
    "seed",
    "hadoop",
    "sadc",
    "hardware",
    "clock_skew",
    "datanode_log",
    "sysstat_noise",
    "sysstat_interval",
    "stragglers",
    "fetch_failures",
];

impl Suite {
    /// `{"workloads": ["sort"], "faults": ["none", "CPUHog"], "nodes": [10, 25],
    /// "repetitions": 10, "duration": "30m", "seed": 1, "hadoop": "0.18", "sadc": true,
    /// "hardware": "uniform", "clock_skew": "0s", "datanode_log": "debug", "sysstat_noise": false,
    /// "sysstat_interval": "1s", "stragglers": 0, "fetch_failures": 0}`;
    /// every key but `workloads` may be left out, and `about` holds what the suite is for.
    pub fn parse(text: &str) -> Result<Suite> {
        let v: Value = serde_json::from_str(text).context("a suite is a JSON object")?;
        let Some(object) = v.as_object() else { bail!("a suite is a JSON object") };
        if let Some(key) = object.keys().find(|k| !SUITE_KEYS.contains(&k.as_str())) {
            bail!("suite: unknown key {key} (known: {})", SUITE_KEYS.join(", "));
        }
        let strings = |key: &str| -> Vec<String> {
            v.get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        let workloads = strings("workloads")
            .iter()
            .map(|w| Workload::parse(w).with_context(|| format!("suite: {w} is not a workload")))
            .collect::<Result<Vec<_>>>()?;
        if workloads.is_empty() {
            bail!("suite: \"workloads\" lists none");
        }
        let mut faults = vec![None];
        for f in strings("faults") {
            if f.eq_ignore_ascii_case("none") || f.eq_ignore_ascii_case("control") {
                continue;
            }
            faults.push(Some(Fault::parse(&f).with_context(|| format!("suite: {f} is not a fault"))?));
        }
        if !v.get("faults").is_some_and(Value::is_array) {
            faults.extend(Fault::ALL.map(Some));
        }
        let nodes = match v.get("nodes").and_then(Value::as_array) {
            Some(a) => a.iter().filter_map(Value::as_u64).map(|n| n as usize).filter(|n| *n > 0).collect(),
            None => vec![10, 25, 50, 100],
        };
        let duration_s = match v.get("duration").and_then(Value::as_str) {
            Some(d) => faults::parse_duration(d).map_err(anyhow::Error::msg)?,
            None => 1800.0,
        };
        let version = match v.get("hadoop").and_then(Value::as_str) {
            Some(h) => Version::parse(h).with_context(|| format!("suite: hadoop {h} is not 0.18, 0.20 or 2"))?,
            None => Version::V018,
        };
        let hardware = match v.get("hardware").and_then(Value::as_str) {
            Some(h) => Hardware::parse(h).with_context(|| format!("suite: hardware {h} is not uniform or mixed"))?,
            None => Hardware::Uniform,
        };
        let datanode_log = match v.get("datanode_log").and_then(Value::as_str) {
            Some(l) => {
                DataNodeLog::parse(l).with_context(|| format!("suite: datanode_log {l} is not debug or info"))?
            }
            None => DataNodeLog::Debug,
        };
        let share = |key: &str, of_what: &str| -> Result<f64> {
            match v.get(key) {
                None => Ok(0.0),
                Some(s) => s
                    .as_f64()
                    .filter(|s| (0.0..=1.0).contains(s))
                    .with_context(|| format!("suite: {key} {s} is not a share of {of_what} from 0 to 1")),
            }
        };
        let stragglers = share("stragglers", "task attempts")?;
        let fetch_failures = share("fetch_failures", "copies")?;
        let sysstat_interval_s = match v.get("sysstat_interval").and_then(Value::as_str) {
            Some(d) => faults::parse_duration(d)
                .ok()
                .filter(|s| *s >= 1.0 && s.fract() == 0.0 && *s <= 3600.0)
                .with_context(|| format!("suite: sysstat_interval {d} is not whole seconds from 1s to 1h"))?
                as u32,
            None => 0,
        };
        let clock_skew_s = match v.get("clock_skew").and_then(Value::as_str) {
            Some(d) => faults::parse_duration(d).map_err(|e| anyhow::anyhow!("suite: clock_skew {e}"))?,
            None => 0.0,
        };
        Ok(Suite {
            workloads,
            faults,
            nodes,
            repetitions: v.get("repetitions").and_then(Value::as_u64).unwrap_or(10),
            duration_s,
            seed: v.get("seed").and_then(Value::as_u64).unwrap_or(1),
            version,
            sadc: v.get("sadc").and_then(Value::as_bool).unwrap_or(true),
            conditions: Conditions {
                hardware,
                clock_skew_ms: (clock_skew_s * 1000.0).round() as i64,
                datanode_log,
                sysstat_noise: v.get("sysstat_noise").and_then(Value::as_bool).unwrap_or(false),
                sysstat_interval_s,
                stragglers,
                fetch_failures,
            },
        })
    }
}

/// The slowdown of a faulty run against its control, over the jobs the fault acted on, as
/// Kahuna Table IV measured it: for a resource fault, the jobs submitted while it was active (a
/// DiskHog stops once it has written its 20 GB; the jobs after it are the control's again); for
/// a hang, which strikes once, the jobs running when it struck. Total time to finish those jobs
/// against the same jobs of the control (matched by stream and place in it, as both runs draw
/// them from the same seed), a job the faulty run had not finished counting until the run's
/// end; jobs the control had not finished are left out.
pub fn slowdown(control: &Outcome, faulty: &Outcome) -> Option<f64> {
    let fault = faulty.fault.as_ref()?;
    let hang = matches!(fault.fault, Fault::Hang1036 | Fault::Hang1152 | Fault::Hang2080);
    let acted = |j: &JobOutcome| match (&faulty.struck, hang) {
        (Some((at, _)), true) => j.submit_ms <= *at && j.finish_ms.is_none_or(|f| f > *at),
        (None, true) => false,
        _ => j.submit_ms < fault.end_ms && j.finish_ms.is_none_or(|f| f > fault.start_ms),
    };
    let mut base = 0.0;
    let mut slow = 0.0;
    let mut matched = 0;
    for f in faulty.jobs.iter().filter(|j| acted(j)) {
        let Some(c) = control.jobs.iter().find(|c| (c.stream, c.seq) == (f.stream, f.seq)) else { continue };
        if c.finish_ms.is_none() {
            continue;
        }
        base += c.seconds(control.end_ms);
        slow += f.seconds(faulty.end_ms);
        matched += 1;
    }
    if hang && matched == 0 && faulty.struck.is_none() {
        // The hang found nothing to strike: no slowdown.
        return Some(0.0);
    }
    (base > 0.0).then(|| slow / base - 1.0)
}

/// Runs a suite under `out/<workload>/<fault>/n<nodes>/r<rep>/` and writes `suite.json` with
/// each pair's mean slowdown; returns the rows (workload, fault, nodes, mean slowdown).
pub fn run_suite(
    suite: &Suite,
    out: &Path,
    gzip: bool,
    threads: usize,
    progress: bool,
) -> Result<Vec<(Workload, Fault, usize, f64)>> {
    let total = suite.workloads.len() * suite.faults.len() * suite.nodes.len() * suite.repetitions as usize;
    let bar = progress_bar(progress, total as u64, "runs");
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    for &workload in &suite.workloads {
        for &nodes in &suite.nodes {
            let mut controls = Vec::new();
            for &fault in &suite.faults {
                let mut slowdowns = Vec::new();
                for rep in 0..suite.repetitions {
                    let fault_name = fault.map_or("control", Fault::name);
                    let cfg = Config {
                        nodes,
                        workload,
                        fault: fault.map(|f| FaultSpec { fault: f, node: None, start_s: 0.0 }),
                        duration_s: suite.duration_s,
                        seed: suite.seed + rep,
                        out: out
                            .join(workload.name())
                            .join(fault_name)
                            .join(format!("n{nodes}"))
                            .join(format!("r{rep}")),
                        version: suite.version,
                        gzip,
                        sadc: suite.sadc,
                        threads,
                        progress: false,
                        epoch_ms: DEFAULT_EPOCH_MS,
                        conditions: suite.conditions,
                    };
                    let outcome = run(&cfg)?;
                    bar.inc(1);
                    match fault {
                        None => controls.push(outcome),
                        Some(_) => slowdowns.extend(controls.get(rep as usize).and_then(|c| slowdown(c, &outcome))),
                    }
                }
                if let (Some(f), false) = (fault, slowdowns.is_empty()) {
                    let mean = slowdowns.iter().sum::<f64>() / slowdowns.len() as f64;
                    rows.push((workload, f, nodes, mean));
                    summary.push(json!({
                        "workload": workload.name(), "fault": f.name(), "nodes": nodes,
                        "slowdown_pct": (mean * 1000.0).round() / 10.0, "runs": slowdowns.len(),
                    }));
                }
            }
        }
    }
    bar.finish_and_clear();
    write_truth(&out.join("suite.json"), &json!({ "slowdowns": summary }))?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_committed_suite_parses() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/eval");
        let mut parsed = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            Suite::parse(&text).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            parsed += 1;
        }
        assert!(parsed >= 17, "{parsed} suites");
    }

    #[test]
    fn suites_parse_with_defaults() {
        let s = Suite::parse(
            r#"{"workloads": ["sort", "pig"], "faults": ["none", "CPUHog"], "nodes": [10], "duration": "10m"}"#,
        )
        .unwrap();
        assert_eq!(s.workloads, vec![Workload::Sort, Workload::Pig]);
        assert_eq!(s.faults, vec![None, Some(Fault::CpuHog)]);
        assert_eq!((s.nodes.clone(), s.repetitions, s.duration_s, s.version), (vec![10], 10, 600.0, Version::V018));
        let all = Suite::parse(r#"{"workloads": ["nutch"]}"#).unwrap();
        assert_eq!((all.faults.len(), all.nodes.len()), (10, 4));
        assert!(Suite::parse(r#"{"workloads": ["hive"]}"#).is_err());
        assert_eq!((s.conditions, all.conditions), (Conditions::default(), Conditions::default()));
    }

    #[test]
    fn a_suite_names_its_conditions() {
        let harder = r#"{"workloads": ["sort"], "hardware": "mixed", "clock_skew": "3s", "datanode_log": "info", "sysstat_noise": true, "sysstat_interval": "10s", "stragglers": 0.1, "fetch_failures": 0.01}"#;
        let expected = Conditions {
            hardware: Hardware::Mixed,
            clock_skew_ms: 3000,
            datanode_log: DataNodeLog::Info,
            sysstat_noise: true,
            sysstat_interval_s: 10,
            stragglers: 0.1,
            fetch_failures: 0.01,
        };
        assert_eq!(Suite::parse(harder).unwrap().conditions, expected);
        for (bad, says) in [
            (r#""hardware": "exotic""#, "hardware exotic is not uniform or mixed"),
            (r#""datanode_log": "trace""#, "datanode_log trace is not debug or info"),
            (r#""clock_skew": "soon""#, "clock_skew"),
            (r#""sysstat_interval": "1.5s""#, "sysstat_interval 1.5s is not whole seconds"),
            (r#""stragglers": 2"#, "stragglers 2 is not a share of task attempts from 0 to 1"),
            (r#""stragglers": "many""#, "stragglers \"many\" is not a share"),
            (r#""fetch_failures": -0.1"#, "fetch_failures -0.1 is not a share of copies from 0 to 1"),
            (r#""straglers": 0.1"#, "unknown key straglers (known: about, workloads,"),
        ] {
            let error = Suite::parse(&format!(r#"{{"workloads": ["sort"], {bad}}}"#)).unwrap_err();
            assert!(format!("{error:#}").contains(says), "{error:#}");
        }
    }
}
