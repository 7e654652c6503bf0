//! The M45-scale history (`kahuna simulate --history m45`): experiments by 26 users over
//! April–September 2008 on a ~400-node cluster, drawn to match Kahuna Table I — 12854
//! experiments, 3.84 ± 20 jobs and 21.42 ± 24 nodes each, 19.74 ± 82 minutes, the longest 23.32 h.
//!
//! Each experiment is a Hadoop-on-Demand allocation, as on M45: its own JobTracker on nodes no
//! other experiment holds meanwhile, so experiments simulate independently, in parallel.
//!
//! Heavy tails: each quantity is a lognormal shifted to its minimum and cut at its cap, its
//! parameters fitted (offline, numerically) so that the cut distribution has Table I's mean and
//! standard deviation. Draws are stratified — experiment i of N gets the mean of stratum
//! [i/N, (i+1)/N) of the distribution — so that a slice of a thousandth still has the table's
//! means; strata are dealt to experiments in random order, jobs rank-correlated with duration.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::cluster::{Cluster, Conditions};
use super::faults::{Fault, Injected};
use super::jobhistory::Status;
use super::rng::{Rng, Stream};
use super::scheduler::{JobSource, RunSpec};
use super::workload::{JobSpec, research_job};
use super::{Layout, Outcome, Version, execute, fault_json, iso, job_json, progress_bar, write_truth};

pub const EXPERIMENTS_PER_5_MONTHS: f64 = 12854.0;
pub const USERS: usize = 26;
pub const CLUSTER_NODES: usize = 400;
/// 2008-04-01 00:00:00 UTC.
const APRIL_2008_MS: i64 = 1_207_008_000_000;
const MONTH_MS: f64 = 30.44 * 86_400_000.0;
/// Share of jobs the JobTracker fails (a task failing four times) and the user kills.
const FAILED_JOBS: f64 = 0.03;
const KILLED_JOBS: f64 = 0.015;
/// Of the failing jobs with reduces, the share that fails in a reduce, after every map has run:
/// with it the failed jobs' Maps are about as alike as the paper found them (43% of hosts
/// similar; 47% simulated).
const FAILING_IN_REDUCE: f64 = 0.8;
/// Share of experiments with a fault injected at one of their nodes.
const FAULTY_EXPERIMENTS: f64 = 0.1;

/// A shifted, capped lognormal: `min(lo + exp(mu + sigma·z), cap)`.
#[derive(Clone, Copy, Debug)]
pub struct Tail {
    pub lo: f64,
    pub mu: f64,
    pub sigma: f64,
    pub cap: f64,
}

/// Fitted to Table I (mean, sd): 3.84 ± 20 jobs, 21.42 ± 24 nodes, 19.74 ± 82 minutes cut at
/// the longest experiment, 23.32 h.
pub const JOBS: Tail = Tail { lo: 1.0, mu: -1.12856, sigma: 2.08545, cap: 5000.0 };
pub const NODES: Tail = Tail { lo: 1.0, mu: 2.57531, sigma: 0.94023, cap: CLUSTER_NODES as f64 };
pub const MINUTES: Tail = Tail { lo: 0.5, mu: 0.80189, sigma: 2.12832, cap: 23.32 * 60.0 };

/// The inverse of the standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.38357751867269e2,
        -3.066479806614716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] =
        [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

impl Tail {
    fn quantile(&self, p: f64) -> f64 {
        (self.lo + (self.mu + self.sigma * normal_quantile(p)).exp()).min(self.cap)
    }

    /// The mean of each of `n` equal-probability strata, lowest first.
    pub fn strata(&self, n: usize) -> Vec<f64> {
        const POINTS: usize = 16;
        (0..n)
            .map(|i| {
                (0..POINTS)
                    .map(|k| self.quantile((i as f64 + (k as f64 + 0.5) / POINTS as f64) / n as f64))
                    .sum::<f64>()
                    / POINTS as f64
            })
            .collect()
    }
}

/// Deals stratum values to experiments in the order of a latent score.
fn deal(values: &[f64], latent: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..latent.len()).collect();
    order.sort_by(|a, b| latent[*a].total_cmp(&latent[*b]));
    let mut out = vec![0.0; latent.len()];
    for (rank, &i) in order.iter().enumerate() {
        out[i] = values[rank];
    }
    out
}

/// An integer with the expected value of `x`.
fn round_randomly(x: f64, rng: &mut Rng) -> u32 {
    let floor = x.floor();
    (floor + f64::from(u8::from(rng.chance(x - floor)))) as u32
}

#[derive(Clone, Debug)]
pub struct Experiment {
    pub id: usize,
    pub user: usize,
    /// Cluster-wide node indices.
    pub nodes: Vec<usize>,
    pub start_ms: i64,
    pub planned_minutes: f64,
    pub jobs: u32,
    /// The fault, the experiment node it strikes and when, from the experiment's start.
    pub fault: Option<(Fault, usize, i64)>,
}

pub fn user_name(user: usize) -> String {
    format!("user{:02}", user + 1)
}

/// The experiments of `months` of history at `scale`, in order of start.
pub fn plan(months: f64, scale: f64, seed: u64) -> Vec<Experiment> {
    let n = (EXPERIMENTS_PER_5_MONTHS * months / 5.0 * scale).round().max(1.0) as usize;
    let mut rng = Rng::derive(seed, Stream::History, &[]);
    let minutes_latent: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    // Jobs follow duration loosely (rank correlation ~0.8): long experiments run more jobs.
    let jobs_latent: Vec<f64> = minutes_latent.iter().map(|z| 0.8 * z + 0.6 * rng.normal()).collect();
    let nodes_latent: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    let minutes = deal(&MINUTES.strata(n), &minutes_latent);
    let jobs = deal(&JOBS.strata(n), &jobs_latent);
    let nodes = deal(&NODES.strata(n), &nodes_latent);
    let span = months * MONTH_MS;
    let mut arrivals: Vec<f64> = (0..n).map(|i| (i as f64 + rng.f64()) / n as f64 * span).collect();
    rng.shuffle(&mut arrivals);
    // Users' activity is Zipf-like: a few users run most experiments.
    let weights: Vec<f64> = (1..=USERS).map(|k| 1.0 / k as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut free_at = vec![0i64; CLUSTER_NODES];
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| arrivals[*a].total_cmp(&arrivals[*b]));
    let mut out = Vec::with_capacity(n);
    for (id, i) in order.into_iter().enumerate() {
        let mut pick = rng.f64() * total;
        let user = weights.iter().position(|w| {
            pick -= w;
            pick < 0.0
        });
        let want = (round_randomly(nodes[i], &mut rng) as usize).clamp(1, CLUSTER_NODES);
        // HOD hands out the nodes that are free soonest (ties at random).
        let mut candidates: Vec<(i64, u64, usize)> =
            (0..CLUSTER_NODES).map(|g| (free_at[g], rng.next_u64(), g)).collect();
        candidates.sort_unstable();
        let mut chosen: Vec<usize> = candidates[..want].iter().map(|c| c.2).collect();
        chosen.sort_unstable();
        let arrival = APRIL_2008_MS + arrivals[i] as i64;
        let start = chosen.iter().map(|&g| free_at[g]).max().unwrap_or(0).max(arrival);
        let planned = minutes[i];
        let limit = limit_ms(planned);
        for &g in &chosen {
            free_at[g] = start + limit + 60_000;
        }
        let fault = rng.chance(FAULTY_EXPERIMENTS).then(|| {
            let f = Fault::ALL[rng.below(Fault::ALL.len() as u64) as usize];
            (f, rng.below(want as u64) as usize, (rng.range(0.0, 0.5) * planned * 60_000.0) as i64)
        });
        out.push(Experiment {
            id,
            user: user.unwrap_or(USERS - 1),
            nodes: chosen,
            start_ms: start,
            planned_minutes: planned,
            jobs: round_randomly(jobs[i], &mut rng).max(1),
            fault,
        });
    }
    out
}

/// HOD's wall-clock limit on an allocation: room past the plan for slow jobs.
fn limit_ms(planned_minutes: f64) -> i64 {
    ((planned_minutes * 1.5 + 5.0) * 60_000.0) as i64
}

/// The jobs of one experiment: `streams` users' sessions side by side, each submitting its
/// next job when one ends, sized so that all of them take about the planned time.
struct ExperimentJobs {
    queue: std::collections::VecDeque<JobSpec>,
    streams: u32,
    deadline_ms: i64,
}

impl ExperimentJobs {
    fn new(e: &Experiment, map_slots: u8, seed: u64) -> ExperimentJobs {
        let mut rng = Rng::derive(seed, Stream::Experiment, &[e.id as u64]);
        let planned_s = e.planned_minutes * 60.0;
        // Sessions of short jobs run side by side: a job takes at least ~40 s.
        let streams = ((f64::from(e.jobs) * 40.0 / planned_s).ceil() as u32).clamp(1, e.jobs);
        let per_stream = f64::from(e.jobs) / f64::from(streams);
        let budget_s = (planned_s / per_stream - 8.0).max(10.0);
        let user = user_name(e.user);
        let queue = (0..e.jobs)
            .map(|_| {
                let mut spec = research_job(&mut rng, &user, e.nodes.len(), map_slots, budget_s);
                if rng.chance(FAILED_JOBS) {
                    if spec.reduces > 0 && rng.chance(FAILING_IN_REDUCE) {
                        spec.poison_reduce = Some(rng.below(u64::from(spec.reduces)) as u32);
                    } else {
                        spec.poison_map = Some(rng.below(u64::from(spec.maps)) as u32);
                    }
                } else if rng.chance(KILLED_JOBS / (1.0 - FAILED_JOBS)) {
                    spec.kill_after_ms = Some((budget_s * rng.range(0.2, 0.8) * 1000.0) as i64);
                }
                spec
            })
            .collect();
        ExperimentJobs { queue, streams, deadline_ms: limit_ms(e.planned_minutes) }
    }
}

impl JobSource for ExperimentJobs {
    fn start(&mut self) -> Vec<(i64, u32, JobSpec)> {
        (0..self.streams).filter_map(|s| self.queue.pop_front().map(|j| (2000 + 3000 * i64::from(s), s, j))).collect()
    }

    fn next(&mut self, _stream: u32, now: i64) -> Option<(i64, JobSpec)> {
        let at = now + 3000 + now % 5000;
        if at >= self.deadline_ms {
            return None;
        }
        self.queue.pop_front().map(|j| (at, j))
    }
}

pub struct HistoryConfig {
    pub months: f64,
    pub scale: f64,
    pub seed: u64,
    pub out: PathBuf,
    pub version: Version,
    pub gzip: bool,
    /// Daemon logs beside the job history (the M45 study had the history only).
    pub logs: bool,
    pub threads: usize,
    pub progress: bool,
    pub conditions: Conditions,
}

/// What an experiment turned out to be.
pub(crate) struct Ran {
    pub(crate) outcome: Outcome,
    hosts: Vec<String>,
    cluster: Cluster,
    first_submit_ms: i64,
    last_end_ms: i64,
}

pub(crate) fn run_one(e: &Experiment, cfg: &HistoryConfig) -> Result<Ran> {
    let cluster = Cluster::of(&e.nodes, cfg.seed, cfg.conditions).m45();
    let end_ms = limit_ms(e.planned_minutes);
    let fault = e.fault.map(|(f, node, at)| Injected::new(f, node, at, end_ms, cluster.nodes[node].disk_mb_s));
    let dir = cfg.out.join(format!("e{:05}", e.id));
    let layout = Layout {
        logs: cfg.logs.then(|| dir.join("logs")),
        history: dir.join("history"),
        sadc: None,
        user: user_name(e.user),
        gzip: cfg.gzip,
        threads: 1,
        epoch_ms: e.start_ms,
        datanode_log: cfg.conditions.datanode_log,
        sysstat_noise: cfg.conditions.sysstat_noise,
        sysstat_interval_s: cfg.conditions.sysstat_interval_s,
    };
    let spec = RunSpec {
        seed: cfg.seed ^ (e.id as u64) << 20,
        version: cfg.version,
        cluster: &cluster,
        fault,
        end_ms,
        jt_stamp: cfg.version.cluster_stamp(e.start_ms),
        usage: false,
    };
    let outcome = execute(spec, ExperimentJobs::new(e, cluster.map_slots, cfg.seed), &layout, &ProgressBar::hidden())
        .with_context(|| format!("experiment e{:05}", e.id))?;
    let first_submit_ms = outcome.jobs.iter().map(|j| j.submit_ms).min().unwrap_or(0);
    let last_end_ms = outcome.jobs.iter().map(|j| j.finish_ms.unwrap_or(end_ms)).max().unwrap_or(first_submit_ms);
    Ok(Ran {
        hosts: cluster.nodes.iter().map(|n| n.name.clone()).collect(),
        cluster,
        outcome,
        first_submit_ms,
        last_end_ms,
    })
}

fn mean_sd(xs: &[f64]) -> Value {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    json!({ "mean": (mean * 100.0).round() / 100.0, "sd": (sd * 100.0).round() / 100.0 })
}

/// Simulates every experiment of the history, in parallel, and writes `truth.json`.
pub fn run_history(cfg: &HistoryConfig) -> Result<Value> {
    let experiments = plan(cfg.months, cfg.scale, cfg.seed);
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("cannot create {}", cfg.out.display()))?;
    let bar = progress_bar(cfg.progress, experiments.len() as u64, "experiments");
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Ran>>>> = Mutex::new((0..experiments.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..cfg.threads.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(e) = experiments.get(i) else { break };
                    let ran = run_one(e, cfg);
                    let failed = ran.is_err();
                    if let Ok(mut r) = results.lock() {
                        r[i] = Some(ran);
                    }
                    bar.inc(1);
                    if failed {
                        next.store(experiments.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    let results = results.into_inner().map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?;
    let mut rows = Vec::with_capacity(experiments.len());
    let (mut jobs, mut nodes, mut minutes) = (Vec::new(), Vec::new(), Vec::new());
    let (mut lines, mut failed, mut killed, mut total_jobs) = (0u64, 0usize, 0usize, 0usize);
    let mut users = std::collections::BTreeSet::new();
    for (e, ran) in experiments.iter().zip(results) {
        let ran = ran.context("an experiment was not simulated")??;
        let o = &ran.outcome;
        let realised = (ran.last_end_ms - ran.first_submit_ms) as f64 / 60_000.0;
        jobs.push(o.jobs.len() as f64);
        nodes.push(e.nodes.len() as f64);
        minutes.push(realised);
        users.insert(e.user);
        lines += o.lines.total();
        total_jobs += o.jobs.len();
        failed += o.jobs.iter().filter(|j| j.status == Some(Status::Failed)).count();
        killed += o.jobs.iter().filter(|j| j.status == Some(Status::Killed)).count();
        rows.push(json!({
            "id": format!("e{:05}", e.id),
            "user": user_name(e.user),
            "hosts": ran.hosts,
            "start": iso(e.start_ms + ran.first_submit_ms),
            "end": iso(e.start_ms + ran.last_end_ms),
            "start_ms": e.start_ms + ran.first_submit_ms,
            "end_ms": e.start_ms + ran.last_end_ms,
            "minutes": (realised * 100.0).round() / 100.0,
            "planned_minutes": (e.planned_minutes * 100.0).round() / 100.0,
            "jobs": o.jobs.iter().map(|j| job_json(j, e.start_ms, o.end_ms)).collect::<Vec<_>>(),
            "fault": o.fault.as_ref().map(|f| fault_json(f, o.struck.as_ref(), &ran.cluster, e.start_ms)),
        }));
    }
    let longest = minutes.iter().copied().fold(0.0, f64::max) / 60.0;
    let summary = json!({
        "experiments": experiments.len(),
        "users": users.len(),
        "jobs_per_experiment": mean_sd(&jobs),
        "nodes_per_experiment": mean_sd(&nodes),
        "minutes_per_experiment": mean_sd(&minutes),
        "longest_hours": (longest * 100.0).round() / 100.0,
        "jobs": total_jobs,
        "jobs_failed": failed,
        "jobs_killed": killed,
        "log_lines": lines,
    });
    let truth = json!({
        "mode": "m45",
        "seed": cfg.seed,
        "months": cfg.months,
        "scale": cfg.scale,
        "hadoop": cfg.version.name(),
        "cluster_nodes": CLUSTER_NODES,
        "summary": summary,
        "experiments": rows,
    });
    write_truth(&cfg.out.join("truth.json"), &truth)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_strata() {
        assert!(normal_quantile(0.5).abs() < 1e-9);
        assert!((normal_quantile(0.975) - 1.959964).abs() < 1e-6);
        assert!((normal_quantile(0.001) + 3.090232).abs() < 1e-6);
        // At full scale the strata have Table I's moments and the longest experiment.
        let n = EXPERIMENTS_PER_5_MONTHS as usize;
        for (tail, mean, sd) in [(JOBS, 3.84, 20.0), (NODES, 21.42, 24.0), (MINUTES, 19.74, 82.0)] {
            let v = tail.strata(n);
            let m = v.iter().sum::<f64>() / n as f64;
            let s = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n as f64).sqrt();
            assert!((m - mean).abs() / mean < 0.01 && (s - sd).abs() / sd < 0.01, "{m} {s}");
        }
        assert!((MINUTES.strata(n)[n - 1] - 1399.2).abs() < 1.0);
    }

    #[test]
    fn plans_share_no_node_at_a_time() {
        let plan = plan(5.0, 0.01, 3);
        assert_eq!(plan.len(), 129);
        for (i, a) in plan.iter().enumerate() {
            for b in &plan[i + 1..] {
                let overlap = a.start_ms < b.start_ms + limit_ms(b.planned_minutes)
                    && b.start_ms < a.start_ms + limit_ms(a.planned_minutes);
                assert!(!overlap || a.nodes.iter().all(|n| !b.nodes.contains(n)), "{} and {}", a.id, b.id);
            }
        }
        assert!(plan.windows(2).all(|w| w[0].id < w[1].id));
    }
}
