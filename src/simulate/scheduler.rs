//! The discrete-event model of one Hadoop cluster: a JobTracker (FIFO over jobs, maps placed on
//! heartbeats, data-local first, speculative execution) and the slaves' tasks. A task attempt's
//! phases are timed when it is launched, from the rates of its node and peers at that moment (CPU
//! shared with the other tasks and any hog, disk shared likewise, links held to TCP's rate under
//! loss), and its log lines are laid down then, in the future; the run's writers take the lines
//! whose time has come. Progress reports, the bulk of a TaskTracker log, are kept as series and
//! laid down round by round ([`Sim::lay_progress`]), so that a long task does not hold hours of
//! lines in memory.
//!
//! Reduces copy each map's output when the map ends (five copiers, in-memory merges every ten
//! segments), then sort, reduce and write their output through HDFS pipelines.
//!
//! Speculative execution (on by default in 0.18 and 0.20, `mapred.*.tasks.speculative.execution`):
//! once a job has no task of a kind left to start, a running task at least 20% behind the job's
//! average progress (`SPECULATIVE_GAP`), begun at least a minute ago (`SPECULATIVE_LAG`) and with
//! one attempt only, gets a second attempt on a node with a free slot that has not run it. The
//! first attempt to finish wins; the JobTracker kills the other (`KILLED` in the job history,
//! `Received KillTaskAction` in its TaskTracker's log), and the killed attempt's lines still to
//! come are never written.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use super::Version;
use super::cluster::{Cluster, MAP_SLOTS, REDUCE_SLOTS};
use super::faults::{Fault, Injected, TASK_TIMEOUT_MS};
use super::hdfs::{self, BLOCK_MB};
use super::jobhistory::{Hist, HistRec, Status};
use super::rng::{Rng, Stream};
use super::sadc::{Usage, Use};
use super::workload::JobSpec;
use super::writers::{CopyFault, JobName, Line, Rec, ReducePhase, TaskRef};

/// Where a run's jobs come from.
pub trait JobSource {
    /// Jobs at the start: (submit time, stream, job).
    fn start(&mut self) -> Vec<(i64, u32, JobSpec)>;
    /// The next job of a stream whose last job ended at `now`, with its submit time.
    fn next(&mut self, stream: u32, now: i64) -> Option<(i64, JobSpec)>;
}

/// What a run is made of.
pub struct RunSpec<'a> {
    pub seed: u64,
    pub version: Version,
    pub cluster: &'a Cluster,
    pub fault: Option<Injected>,
    /// Lines at or after this time (ms from the start) are not written: the logs were
    /// collected then.
    pub end_ms: i64,
    /// `yyyyMMddHHmm` of the JobTracker's start, the middle of every job id.
    pub jt_stamp: String,
    /// Account per-second resource use for a sadc capture (nothing else reads it).
    pub usage: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    Ok,
    Failed,
    TimedOut,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Submit {
        job: u32,
    },
    Launch {
        job: u32,
    },
    Heartbeat {
        node: u16,
    },
    MapEnd {
        job: u32,
        idx: u32,
        attempt: u8,
        end: End,
    },
    ReduceEnd {
        job: u32,
        idx: u32,
        attempt: u8,
        end: End,
    },
    KillJob {
        job: u32,
    },
    /// The JobTracker's look for stragglers, once a heartbeat interval while the job runs.
    Speculate {
        job: u32,
    },
}

/// How a job ended, or that it has not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Waiting,
    Running,
    Done(Status),
}

/// Failed attempts per task before the job fails (`mapred.map.max.attempts`).
const MAX_ATTEMPTS: u8 = 4;
const COPIERS: usize = 5;
/// In-memory segments that start a merge.
const MERGE_SEGMENTS: u16 = 10;
/// How long a client takes to notice a dead pipeline node and rebuild the pipeline.
const RECOVERY_MS: f64 = 5000.0;
/// A task's child reports progress this often (`Task.PROGRESS_INTERVAL`) when it has made any,
/// and the TaskTracker logs each report.
pub const PROGRESS_MS: f64 = 3000.0;
/// `TaskInProgress.SPECULATIVE_GAP` and `SPECULATIVE_LAG` (0.18, 0.20).
const SPECULATIVE_GAP: f32 = 0.2;
const SPECULATIVE_LAG_MS: i64 = 60_000;
/// The TaskTrackers' heartbeat interval at these cluster sizes.
const HEARTBEAT_MS: i64 = 3000;
/// The 1152 hang's copier retries the map output whose rename failed this many times.
const RENAME_TRIES: u32 = 3;

/// The running tasks (`progress`: index and best attempt's progress) that a backup attempt is
/// for: `eligible` (one attempt, begun long enough ago) and behind the average progress of all
/// `total` tasks (`done` of them finished) by `SPECULATIVE_GAP`; least progressed first.
fn stragglers(progress: Vec<(u32, f32)>, done: u32, total: u32, eligible: impl Fn(u32) -> bool) -> Vec<u32> {
    let average = (done as f32 + progress.iter().map(|p| p.1).sum::<f32>()) / total.max(1) as f32;
    let mut late: Vec<(f32, u32)> = progress
        .into_iter()
        .filter(|&(i, p)| eligible(i) && average - p >= SPECULATIVE_GAP)
        .map(|(i, p)| (p, i))
        .collect();
    late.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    late.into_iter().map(|(_, i)| i).collect()
}

/// A running attempt's progress as planned: linear from (t0, f0) to (t1, f1), f1 after.
#[derive(Clone, Copy, Debug)]
struct Prog {
    t0: i64,
    t1: i64,
    f0: f32,
    f1: f32,
}

impl Prog {
    fn at(&self, t: i64) -> f32 {
        if t <= self.t0 {
            self.f0
        } else if t >= self.t1 {
            self.f1
        } else {
            self.f0 + (self.f1 - self.f0) * ((t - self.t0) as f32 / (self.t1 - self.t0) as f32)
        }
    }
}

struct MapRun {
    attempt: u8,
    node: u16,
    prog: Prog,
    out_mb: f64,
}

struct MapTask {
    /// The number the next attempt gets.
    next_attempt: u8,
    failures: u8,
    runs: Vec<MapRun>,
    /// When, where and by which attempt the output was made.
    done: Option<(i64, u16, u8)>,
    replicas: Option<[u16; 3]>,
    avoid: Option<u16>,
    /// When the task's first attempt started.
    started: Option<i64>,
    out_mb: f64,
}

struct ReduceRun {
    attempt: u8,
    node: u16,
    start: i64,
    lanes: [i64; COPIERS],
    copied: u32,
    copied_mb: f64,
    batch_files: u16,
    batch_mb: f64,
    merges: u16,
    merge_free: i64,
    last_progress: i64,
    port: u16,
    /// Ends of copies not yet counted in `landed`, for the progress the JobTracker sees.
    in_flight: BinaryHeap<Reverse<i64>>,
    landed: u32,
    /// Once every output is in: all merged, sorted, the end of the reduce phase.
    tail: Option<(i64, i64, i64)>,
    /// A hang: since when, and the progress it froze at.
    stall: Option<(i64, f32)>,
}

impl ReduceRun {
    /// Progress as the JobTracker sees it: copy ⅓, sort ⅓, reduce ⅓.
    fn progress(&mut self, t: i64, maps: u32) -> f32 {
        if let Some((at, frozen)) = self.stall
            && t >= at
        {
            return frozen;
        }
        if let Some((shuffled, sorted, end)) = self.tail
            && t >= shuffled
        {
            let part = |a: i64, b: i64| ((t - a) as f32 / (b - a).max(1) as f32).clamp(0.0, 1.0);
            return if t < sorted { (1.0 + part(shuffled, sorted)) / 3.0 } else { (2.0 + part(sorted, end)) / 3.0 };
        }
        while let Some(&Reverse(e)) = self.in_flight.peek() {
            if e > t {
                break;
            }
            self.in_flight.pop();
            self.landed += 1;
        }
        self.landed as f32 / maps.max(1) as f32 / 3.0
    }
}

struct ReduceTask {
    next_attempt: u8,
    failures: u8,
    runs: Vec<ReduceRun>,
    done: bool,
    avoid: Option<u16>,
    started: Option<i64>,
}

pub struct Job {
    pub spec: JobSpec,
    pub stream: u32,
    pub submit_ms: i64,
    pub finish_ms: Option<i64>,
    pub state: JobState,
    pub history: Vec<HistRec>,
    maps: Vec<MapTask>,
    reduces: Vec<ReduceTask>,
    pending_maps: Vec<u32>,
    pending_reduces: VecDeque<u32>,
    /// Tasks with an attempt running.
    live_maps: Vec<u32>,
    live_reduces: Vec<u32>,
    maps_done: u32,
    reduces_done: u32,
    failed_maps: u32,
    failed_reduces: u32,
}

impl Job {
    fn hist(&mut self, ts_ms: i64, h: Hist) {
        self.history.push(HistRec { ts_ms, h });
    }
}

struct NodeState {
    free_maps: u8,
    free_reduces: u8,
    heartbeat_due: bool,
    running: u32,
    next_port: u16,
}

/// A task's progress reports still to be laid down: one every ~3 s from `next` until `to`,
/// fractions `lo..hi` of the way over [from, to).
struct Series {
    owner: u64,
    task: TaskRef,
    next: i64,
    from: i64,
    to: i64,
    lo: f32,
    hi: f32,
    phase: Option<ReducePhase>,
    rng: Rng,
}

/// One stretch of resource use by an attempt, kept to take back what a killed attempt would
/// have used after it was killed.
type UseRec = (u16, i64, i64, Use, f64);

pub struct Sim<'a, S: JobSource> {
    spec: RunSpec<'a>,
    source: S,
    rng: Rng,
    pub now: i64,
    seq: u64,
    events: BinaryHeap<Reverse<(i64, u64, Ev)>>,
    pub jobs: Vec<Job>,
    pub names: Vec<JobName>,
    active: Vec<u32>,
    nodes: Vec<NodeState>,
    /// Lines per node not yet written, in the order they were made.
    pub bufs: Vec<Vec<Rec>>,
    /// Progress series per node.
    series: Vec<Vec<Series>>,
    pub usage: Vec<Usage>,
    used: HashMap<u64, Vec<UseRec>>,
    /// Attempts killed (owner key, time), sorted by owner: their lines after that time are
    /// not written.
    pub killed: Vec<(u64, i64)>,
    /// Jobs whose history is complete, to be written.
    pub closed: Vec<u32>,
    /// An injected hang strikes once, as Kahuna triggered each bug once per experiment: when,
    /// and the attempt it hung.
    pub struck: Option<(i64, TaskRef)>,
}

impl<'a, S: JobSource> Sim<'a, S> {
    pub fn new(spec: RunSpec<'a>, source: S) -> Sim<'a, S> {
        let n = spec.cluster.len();
        let mut sim = Sim {
            rng: Rng::derive(spec.seed, Stream::Schedule, &[]),
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            jobs: Vec::new(),
            names: Vec::new(),
            active: Vec::new(),
            nodes: (0..n)
                .map(|i| NodeState {
                    free_maps: MAP_SLOTS,
                    free_reduces: REDUCE_SLOTS,
                    heartbeat_due: false,
                    running: 0,
                    next_port: 40_000 + (i as u16 % 97) * 100,
                })
                .collect(),
            bufs: vec![Vec::new(); n],
            series: (0..n).map(|_| Vec::new()).collect(),
            usage: (0..n).map(|_| Usage::default()).collect(),
            used: HashMap::new(),
            killed: Vec::new(),
            closed: Vec::new(),
            struck: None,
            source,
            spec,
        };
        for (at, stream, job) in sim.source.start() {
            sim.submit(at, stream, job);
        }
        // A full DataNode says so every five minutes.
        if let Some(f) = sim.spec.fault.clone().filter(|f| f.fault == Fault::DiskFull) {
            let mut t = f.start_ms;
            while t < f.end_ms.min(sim.spec.end_ms) {
                sim.push(f.node, t, 0, Line::DiskFull);
                t += 300_000;
            }
        }
        sim
    }

    fn push(&mut self, node: usize, ts_ms: i64, owner: u64, line: Line) {
        self.bufs[node].push(Rec { ts_ms, owner, line });
    }

    fn at(&mut self, t: i64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }

    /// Runs the events before `until`; false once nothing is left to happen before the end.
    pub fn run_until(&mut self, until: i64) -> bool {
        while let Some(Reverse((t, _, _))) = self.events.peek() {
            if *t >= until || *t >= self.spec.end_ms {
                break;
            }
            let Some(Reverse((t, _, ev))) = self.events.pop() else { break };
            self.now = t;
            self.handle(ev);
        }
        self.now = self.now.max(until.min(self.spec.end_ms));
        self.events.peek().is_some_and(|Reverse((t, _, _))| *t < self.spec.end_ms) && until < self.spec.end_ms
    }

    /// Lays down the progress reports due before `until`.
    pub fn lay_progress(&mut self, until: i64) {
        for (node, series) in self.series.iter_mut().enumerate() {
            let buf = &mut self.bufs[node];
            series.retain_mut(|s| {
                let span = (s.to - s.from).max(1) as f64;
                while s.next < until && s.next < s.to {
                    let frac = s.lo + (s.hi - s.lo) * ((s.next - s.from) as f64 / span) as f32;
                    let line = match s.phase {
                        None => Line::MapProgress { task: s.task, frac },
                        Some(phase) => Line::ReduceProgress { task: s.task, frac, phase },
                    };
                    buf.push(Rec { ts_ms: s.next, owner: s.owner, line });
                    s.next += (PROGRESS_MS * s.rng.range(0.8, 1.2)) as i64;
                }
                s.next < s.to
            });
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Submit { job } => {
                let launch = self.now + 1000 + self.rng.below(1500) as i64;
                self.jobs[job as usize].hist(self.now, Hist::Submit);
                self.at(launch, Ev::Launch { job });
                if let Some(after) = self.jobs[job as usize].spec.kill_after_ms {
                    self.at(self.now + after, Ev::KillJob { job });
                }
            }
            Ev::Launch { job } => {
                let j = &mut self.jobs[job as usize];
                j.state = JobState::Running;
                j.hist(self.now, Hist::Launch);
                self.active.push(job);
                self.at(self.now + HEARTBEAT_MS, Ev::Speculate { job });
                self.wake_all();
            }
            Ev::Heartbeat { node } => {
                self.nodes[usize::from(node)].heartbeat_due = false;
                self.assign(node);
            }
            Ev::MapEnd { job, idx, attempt, end } => self.map_end(job, idx, attempt, end),
            Ev::ReduceEnd { job, idx, attempt, end } => self.reduce_end(job, idx, attempt, end),
            Ev::KillJob { job } => {
                if self.jobs[job as usize].state != JobState::Done(Status::Success) {
                    self.abort(job, Status::Killed);
                }
            }
            Ev::Speculate { job } => self.speculate(job),
        }
    }

    /// The node's next heartbeat after `t`, when it will ask for work.
    fn wake(&mut self, node: u16, t: i64) {
        let state = &mut self.nodes[usize::from(node)];
        if state.heartbeat_due || (state.free_maps == 0 && state.free_reduces == 0) {
            return;
        }
        state.heartbeat_due = true;
        let delay = 300 + self.rng.below(2700) as i64;
        self.at(t.max(self.now) + delay, Ev::Heartbeat { node });
    }

    fn assign(&mut self, node: u16) {
        let n = usize::from(node);
        while self.nodes[n].free_maps > 0 {
            let Some((job, idx)) = self.pick_map(node) else { break };
            self.launch_map(job, idx, node);
        }
        while self.nodes[n].free_reduces > 0 {
            let Some((job, idx)) = self.pick_reduce(node) else { break };
            self.launch_reduce(job, idx, node);
        }
    }

    /// The oldest running job's pending map, one whose input is on this node if there is any.
    fn pick_map(&mut self, node: u16) -> Option<(u32, u32)> {
        for &job in &self.active {
            let j = &self.jobs[job as usize];
            let allowed = |i: &u32| j.maps[*i as usize].avoid != Some(node);
            let local = j
                .pending_maps
                .iter()
                .position(|i| allowed(i) && j.maps[*i as usize].replicas.is_some_and(|r| r.contains(&node)));
            let at = local.or_else(|| j.pending_maps.iter().position(allowed));
            if let Some(at) = at {
                let idx = self.jobs[job as usize].pending_maps.remove(at);
                return Some((job, idx));
            }
        }
        None
    }

    fn slowstart(&self, j: &Job) -> bool {
        // 0.20 holds reduces back until 5% of the maps are done; 0.18 starts them at once.
        self.spec.version == Version::V020 && j.maps_done * 20 < j.spec.maps
    }

    fn pick_reduce(&mut self, node: u16) -> Option<(u32, u32)> {
        for &job in &self.active {
            let j = &self.jobs[job as usize];
            if self.slowstart(j) {
                continue;
            }
            if let Some(at) = j.pending_reduces.iter().position(|i| j.reduces[*i as usize].avoid != Some(node)) {
                let idx = self.jobs[job as usize].pending_reduces.remove(at)?;
                return Some((job, idx));
            }
        }
        None
    }

    /// Speculative execution: backup attempts for the job's stragglers, on nodes with a free
    /// slot, once it has no task of that kind left to start.
    fn speculate(&mut self, job: u32) {
        if self.jobs[job as usize].state != JobState::Running {
            return;
        }
        let now = self.now;
        self.at(now + HEARTBEAT_MS, Ev::Speculate { job });
        let j = &mut self.jobs[job as usize];
        let mut backups: Vec<(bool, u32)> = Vec::new();
        if j.pending_maps.is_empty() && !j.live_maps.is_empty() {
            let progress: Vec<(u32, f32)> = j
                .live_maps
                .iter()
                .map(|&i| (i, j.maps[i as usize].runs.iter().map(|r| r.prog.at(now)).fold(0.0, f32::max)))
                .collect();
            let alone = |i: u32| {
                let m = &j.maps[i as usize];
                m.runs.len() == 1 && m.started.is_some_and(|s| now - s >= SPECULATIVE_LAG_MS)
            };
            backups.extend(stragglers(progress, j.maps_done, j.spec.maps, alone).into_iter().map(|i| (false, i)));
        }
        let maps = j.spec.maps;
        if j.pending_reduces.is_empty() && !j.live_reduces.is_empty() {
            let live = j.live_reduces.clone();
            let mut progress = Vec::with_capacity(live.len());
            for i in live {
                let best = j.reduces[i as usize].runs.iter_mut().map(|r| r.progress(now, maps)).fold(0.0, f32::max);
                progress.push((i, best));
            }
            let alone = |i: u32| {
                let r = &j.reduces[i as usize];
                r.runs.len() == 1 && r.started.is_some_and(|s| now - s >= SPECULATIVE_LAG_MS)
            };
            backups.extend(stragglers(progress, j.reduces_done, j.spec.reduces, alone).into_iter().map(|i| (true, i)));
        }
        for (reduce, idx) in backups {
            let Some(node) = self.backup_node(job, idx, reduce) else { continue };
            if reduce {
                self.launch_reduce(job, idx, node);
            } else {
                self.launch_map(job, idx, node);
            }
        }
    }

    /// A node with a free slot for a backup of the task, not one that runs it or failed it
    /// (a map's replica holders first), as the next free TaskTracker to heartbeat would be.
    fn backup_node(&mut self, job: u32, idx: u32, reduce: bool) -> Option<u16> {
        let j = &self.jobs[job as usize];
        let (running, avoid, replicas): (Vec<u16>, Option<u16>, Option<[u16; 3]>) = if reduce {
            let r = &j.reduces[idx as usize];
            (r.runs.iter().map(|x| x.node).collect(), r.avoid, None)
        } else {
            let m = &j.maps[idx as usize];
            (m.runs.iter().map(|x| x.node).collect(), m.avoid, m.replicas)
        };
        let free = |n: usize| if reduce { self.nodes[n].free_reduces > 0 } else { self.nodes[n].free_maps > 0 };
        let fits: Vec<u16> = (0..self.nodes.len())
            .filter(|&n| free(n) && !running.contains(&(n as u16)) && avoid != Some(n as u16))
            .map(|n| n as u16)
            .collect();
        if fits.is_empty() {
            return None;
        }
        let local: Vec<u16> = fits.iter().copied().filter(|n| replicas.is_some_and(|r| r.contains(n))).collect();
        let pool = if local.is_empty() { fits } else { local };
        Some(pool[self.rng.below(pool.len() as u64) as usize])
    }

    fn port(&mut self, node: usize) -> u16 {
        let s = &mut self.nodes[node];
        s.next_port = if s.next_port >= 60_000 { 40_000 } else { s.next_port + 1 };
        s.next_port
    }

    fn cpu_rate(&self, node: usize, t: i64) -> f64 {
        let n = &self.spec.cluster.nodes[node];
        let tasks = f64::from(self.nodes[node].running);
        n.cpu * Injected::cpu_share(self.spec.fault.as_ref(), node, t, tasks, n.cores)
    }

    /// The disk rate a task gets for reads (`write` false) or writes.
    fn disk_rate(&self, node: usize, t: i64, write: bool) -> f64 {
        let n = &self.spec.cluster.nodes[node];
        let sharing = 1.0 + 0.35 * f64::from(self.nodes[node].running.saturating_sub(1));
        n.disk_mb_s * Injected::disk_share(self.spec.fault.as_ref(), node, t, write) / sharing
    }

    fn net_rate(&self, a: usize, b: usize) -> f64 {
        let nodes = &self.spec.cluster.nodes;
        nodes[a].net_mb_s.min(nodes[b].net_mb_s)
    }

    /// `rate` per second of `what` at `node` over [from, to), on behalf of attempt `owner`.
    fn use_rate(&mut self, owner: u64, node: usize, (from, to): (i64, i64), what: Use, rate: f64) {
        if !self.spec.usage || to <= from {
            return;
        }
        self.usage[node].add(from, to, what, rate);
        if owner != 0 {
            self.used.entry(owner).or_default().push((node as u16, from, to, what, rate));
        }
    }

    /// A total spread evenly over [from, to).
    fn use_total(&mut self, owner: u64, node: usize, (from, to): (i64, i64), what: Use, total: f64) {
        let to = to.max(from + 1);
        let secs = ((to - from) as f64 / 1000.0).max(0.001);
        self.use_rate(owner, node, (from, to), what, total / secs);
    }

    /// Progress reports of a task over [from, to), fractions `lo..hi` of the way.
    fn progress(
        &mut self,
        node: usize,
        task: TaskRef,
        (from, to): (i64, i64),
        (lo, hi): (f32, f32),
        phase: Option<ReducePhase>,
        rng: &mut Rng,
    ) {
        let mut rng = Rng::new(rng.next_u64());
        let next = from + (rng.range(0.3, 1.0) * PROGRESS_MS) as i64;
        if next < to {
            self.series[node].push(Series { owner: task.key(), task, next, from, to, lo, hi, phase, rng });
        }
    }

    fn launch_map(&mut self, job: u32, idx: u32, node: u16) {
        let n = usize::from(node);
        let t0 = self.now;
        let j = &mut self.jobs[job as usize];
        let m = &mut j.maps[idx as usize];
        let attempt = m.next_attempt;
        m.next_attempt = m.next_attempt.saturating_add(1);
        let replicas = m.replicas;
        let first_start = m.started.is_none();
        m.started.get_or_insert(t0);
        if m.runs.is_empty() {
            j.live_maps.push(idx);
        }
        let task = TaskRef { job, idx, attempt, reduce: false };
        let owner = task.key();
        let mut rng = Rng::derive(self.spec.seed, Stream::Map, &[u64::from(job), u64::from(idx), u64::from(attempt)]);
        if first_start {
            j.hist(t0, Hist::TaskStart { idx, reduce: false, splits: replicas });
        }
        j.hist(t0, Hist::AttemptStart { task, node });
        let spec = j.spec.clone();
        self.nodes[n].free_maps -= 1;
        self.nodes[n].running += 1;
        let free = self.nodes[n].free_maps;
        self.push(n, t0, owner, Line::Launch { task, free_slots: free + 1 });
        if self.spec.usage {
            self.usage[n].launch(t0);
        }
        let start = t0 + 700 + rng.below(800) as i64;
        let run = |prog: Prog, out_mb: f64| MapRun { attempt, node, prog, out_mb };

        if spec.poison_map == Some(idx) {
            let t = start + 2000 + rng.below(6000) as i64;
            self.push(n, t, owner, Line::ChildError { task });
            self.use_rate(owner, n, (t0, t), Use::Tasks, 1.0);
            self.jobs[job as usize].maps[idx as usize].runs.push(run(Prog { t0: start, t1: t, f0: 0.0, f1: 0.0 }, 0.0));
            self.at(t, Ev::MapEnd { job, idx, attempt, end: End::Failed });
            return;
        }
        if self.struck.is_none() && Injected::hangs_map(self.spec.fault.as_ref(), n, t0) {
            // The child dies early; the TaskTracker keeps reporting it alive until the timeout.
            let died = start + 1000 + rng.below(3000) as i64;
            self.struck = Some((died, task));
            self.progress(n, task, (start, died), (0.0, 0.02), None, &mut rng);
            let timeout = died + TASK_TIMEOUT_MS + rng.below(3000) as i64;
            self.push(n, timeout, owner, Line::Timeout { task });
            self.use_rate(owner, n, (t0, died), Use::Tasks, 1.0);
            self.jobs[job as usize].maps[idx as usize]
                .runs
                .push(run(Prog { t0: start, t1: died, f0: 0.0, f1: 0.02 }, 0.0));
            self.at(timeout, Ev::MapEnd { job, idx, attempt, end: End::TimedOut });
            return;
        }

        let mut t = start;
        let generated = spec.input_mb <= 0.0;
        if let (false, Some(replicas)) = (generated, replicas) {
            // Local if it can; else a replica whose DataNode answers (the client skips a dead one).
            let fault = self.spec.fault.as_ref();
            let live: Vec<u16> =
                replicas.iter().copied().filter(|&r| !Injected::drops_connections(fault, usize::from(r), t)).collect();
            let pool = if live.is_empty() { &replicas[..] } else { &live[..] };
            let src =
                if replicas.contains(&node) { n } else { usize::from(pool[rng.below(pool.len() as u64) as usize]) };
            t = self.read_block(src, n, t, spec.input_mb * rng.jitter(0.02), task, &mut rng);
        }
        let (in_mb, out_mb) = if generated {
            (spec.map_out_mb, spec.map_out_mb)
        } else {
            (spec.input_mb, spec.input_mb * spec.map_out_mb)
        };
        let out_mb = out_mb * rng.jitter(0.03);
        if spec.map_wait_s > 0.0 {
            // Waiting on the outside world (a fetcher's web servers), through the node's NIC.
            let wait = spec.map_wait_s * rng.jitter(0.2) * Injected::wan_slowdown(self.spec.fault.as_ref(), n, t);
            t += (wait * 1000.0) as i64;
        }
        let cpu_s = (in_mb * spec.map_cpu_s_per_mb + spec.map_fixed_s * rng.jitter(0.2)) * rng.jitter(0.04);
        let cpu_ms = cpu_s / self.cpu_rate(n, t) * 1000.0;
        if spec.map_writes_hdfs {
            let blocks = (out_mb / BLOCK_MB).ceil().max(1.0) as usize;
            for b in 0..blocks {
                let mb = (out_mb - b as f64 * BLOCK_MB).min(BLOCK_MB);
                let slice = (cpu_ms / blocks as f64) as i64;
                self.use_rate(owner, n, (t, t + slice), Use::Cpu, 1.0);
                t += slice;
                t = self.write_block(n, t, mb, spec.replication, task, &mut rng);
            }
        } else {
            self.use_rate(owner, n, (t, t + cpu_ms as i64), Use::Cpu, 1.0);
            t += cpu_ms as i64;
            let spill_ms = (out_mb / self.disk_rate(n, t, true) * 1000.0) as i64;
            self.use_total(owner, n, (t, t + spill_ms), Use::DiskWrite, out_mb);
            t += spill_ms;
        }
        self.progress(n, task, (start, t), (0.0, 1.0), None, &mut rng);
        self.push(n, t, owner, Line::MapProgress { task, frac: 1.0 });
        self.push(n, t, owner, Line::Done { task });
        self.use_rate(owner, n, (t0, t), Use::Tasks, 1.0);
        self.jobs[job as usize].maps[idx as usize].runs.push(run(Prog { t0: start, t1: t, f0: 0.0, f1: 1.0 }, out_mb));
        self.at(t, Ev::MapEnd { job, idx, attempt, end: End::Ok });
    }

    /// A block read by a task on `reader` from the DataNode on `src`; returns when it ends.
    fn read_block(&mut self, src: usize, reader: usize, t: i64, mb: f64, client: TaskRef, rng: &mut Rng) -> i64 {
        let block = hdfs::new_block_id(rng);
        let link = Injected::link(self.spec.fault.as_ref(), src, reader, t);
        let mut t = t;
        let port = self.port(reader);
        let owner = client.key();
        if rng.chance(link.fail_p) {
            // The transfer stalls until the DataNode's write timeout gives up on it.
            self.push(src, t, owner, Line::ReadStart);
            t += 60_000;
            self.push(src, t, owner, Line::ServeFailed { block, to: reader as u16 });
        }
        let rate = if src == reader {
            self.disk_rate(src, t, false)
        } else {
            self.disk_rate(src, t, false).min(self.net_rate(src, reader)).min(link.cap_mb_s)
        };
        let dur = (mb / rate * 1000.0 + link.extra_ms + 5.0) as i64;
        self.push(src, t, owner, Line::ReadStart);
        let end = t + dur;
        let size = (mb * 1048576.0) as u32;
        self.push(src, end, owner, Line::Served { block, to: reader as u16, port, size, client, dur_ms: dur as u32 });
        self.use_total(owner, src, (t, end), Use::DiskRead, mb);
        if src != reader {
            self.use_total(owner, src, (t, end), Use::Tx, mb);
            self.use_total(owner, reader, (t, end), Use::Rx, mb);
        }
        end
    }

    /// A block written by a task on `client` through a pipeline of `copies` replicas; returns
    /// when the last acknowledgement is back.
    fn write_block(&mut self, client: usize, t: i64, mb: f64, copies: usize, task: TaskRef, rng: &mut Rng) -> i64 {
        let fault = self.spec.fault.clone();
        let mut replicas =
            hdfs::place(client, &self.spec.cluster.nodes, rng, |i| Injected::refuses_writes(fault.as_ref(), i, t));
        replicas.truncate(copies.max(1));
        if replicas.is_empty() {
            return t;
        }
        let owner = task.key();
        let block = hdfs::new_block_id(rng);
        let mut rate = f64::INFINITY;
        let mut extra = 0.0;
        // Pipeline recovery: a DataNode that stops acknowledging (at 50% loss) is dropped and
        // the write goes on with the others; the dropped one never finishes its receive. When
        // the writer's own node is the lossy one, its local DataNode loses every downstream
        // and the block is kept on it alone.
        let dead = |r: usize| Injected::drops_connections(fault.as_ref(), r, t);
        let lost = if dead(client) && replicas.len() > 1 && replicas[0] == client {
            Some(1)
        } else {
            replicas.iter().position(|&r| r != client && dead(r))
        };
        if let Some(lost) = lost {
            let src = if lost == 0 { client } else { replicas[lost - 1] };
            let r = replicas[lost];
            if dead(client) {
                replicas.truncate(1);
            } else {
                replicas.remove(lost);
            }
            let port = self.port(src);
            self.push(r, t + 2 * lost as i64, owner, Line::Receiving { block, src: src as u16, port });
            extra += RECOVERY_MS;
            if replicas.is_empty() {
                return t + RECOVERY_MS as i64;
            }
        }
        let mut prev = client;
        for &r in &replicas {
            rate = rate.min(self.disk_rate(r, t, true));
            if r != prev {
                let link = Injected::link(fault.as_ref(), prev, r, t);
                rate = rate.min(self.net_rate(prev, r)).min(link.cap_mb_s);
                extra += link.extra_ms;
            }
            prev = r;
        }
        let hops = replicas.len() as i64;
        let dur = (mb / rate * 1000.0 * rng.jitter(0.03) + extra) as i64 + 10 * hops;
        let end = t + dur;
        let size = (mb * 1048576.0) as u32;
        let mut src = client;
        for (i, &r) in replicas.iter().enumerate() {
            let port = self.port(src);
            let downstream = (replicas.len() - 1 - i) as u8;
            self.push(r, t + 2 * i as i64, owner, Line::Receiving { block, src: src as u16, port });
            let done = end - i64::from(downstream);
            let line = Line::Received {
                block,
                src: src as u16,
                port,
                size,
                client: task,
                dur_ms: (done - t) as u32,
                downstream,
            };
            self.push(r, done, owner, line);
            self.use_total(owner, r, (t, end), Use::DiskWrite, mb);
            if r != src {
                self.use_total(owner, src, (t, end), Use::Tx, mb);
                self.use_total(owner, r, (t, end), Use::Rx, mb);
            }
            src = r;
        }
        end
    }

    /// Frees an attempt's slot when it ends, whatever the way.
    fn free_slot(&mut self, node: u16, reduce: bool) {
        let n = usize::from(node);
        if reduce {
            self.nodes[n].free_reduces += 1;
        } else {
            self.nodes[n].free_maps += 1;
        }
        self.nodes[n].running = self.nodes[n].running.saturating_sub(1);
    }

    /// The JobTracker kills a running attempt (its twin won, or the job is given up): the
    /// TaskTracker logs the kill, and nothing the attempt had yet to do happens.
    fn kill(&mut self, task: TaskRef, node: u16) {
        let now = self.now;
        let n = usize::from(node);
        let key = task.key();
        self.push(n, now, 0, Line::Kill { task });
        if task.reduce {
            self.push(n, now, 0, Line::SyslogClose { task, done: false });
        }
        let at = self.killed.partition_point(|&(k, _)| k < key);
        self.killed.insert(at, (key, now));
        self.series[n].retain(|s| s.owner != key);
        if let Some(used) = self.used.remove(&key) {
            for (node, from, to, what, rate) in used {
                if to > now {
                    self.usage[usize::from(node)].add(from.max(now), to, what, -rate);
                }
            }
        }
        self.free_slot(node, task.reduce);
        self.jobs[task.job as usize]
            .hist(now, Hist::AttemptEnd { task, node, status: Status::Killed, shuffle_ms: 0, sort_ms: 0 });
        self.wake(node, now);
    }

    fn map_end(&mut self, job: u32, idx: u32, attempt: u8, end: End) {
        let now = self.now;
        let j = &mut self.jobs[job as usize];
        if j.state != JobState::Running {
            return;
        }
        let m = &mut j.maps[idx as usize];
        let Some(at) = m.runs.iter().position(|r| r.attempt == attempt) else { return };
        let run = m.runs.remove(at);
        let node = run.node;
        let task = TaskRef { job, idx, attempt, reduce: false };
        self.used.remove(&task.key());
        self.free_slot(node, false);
        let j = &mut self.jobs[job as usize];
        if end == End::Ok {
            let m = &mut j.maps[idx as usize];
            m.done = Some((now, node, attempt));
            m.out_mb = run.out_mb;
            let others: Vec<(u8, u16)> = m.runs.drain(..).map(|r| (r.attempt, r.node)).collect();
            j.live_maps.retain(|&i| i != idx);
            j.maps_done += 1;
            j.hist(now, Hist::AttemptEnd { task, node, status: Status::Success, shuffle_ms: 0, sort_ms: 0 });
            j.hist(now, Hist::TaskEnd { idx, reduce: false });
            for (a, n) in others {
                self.kill(TaskRef { job, idx, attempt: a, reduce: false }, n);
            }
            let j = &self.jobs[job as usize];
            let running: Vec<(u32, u8)> = j
                .live_reduces
                .iter()
                .flat_map(|&r| j.reduces[r as usize].runs.iter().map(move |x| (r, x.attempt)))
                .collect();
            for (r, a) in running {
                self.copy(job, r, a, idx);
                self.maybe_finish_copies(job, r, a);
            }
            self.job_progress(job);
        } else {
            j.failed_maps += 1;
            let m = &mut j.maps[idx as usize];
            m.failures += 1;
            m.avoid = Some(node);
            // A twin still running carries on alone.
            let alone = m.runs.is_empty();
            if alone {
                j.live_maps.retain(|&i| i != idx);
            }
            self.retry(task, node, alone);
        }
        self.wake(node, now);
    }

    fn wake_all(&mut self) {
        for n in 0..self.nodes.len() {
            self.wake(n as u16, self.now);
        }
    }

    fn launch_reduce(&mut self, job: u32, idx: u32, node: u16) {
        let n = usize::from(node);
        let t0 = self.now;
        let j = &mut self.jobs[job as usize];
        let red = &mut j.reduces[idx as usize];
        let attempt = red.next_attempt;
        red.next_attempt = red.next_attempt.saturating_add(1);
        let first_start = red.started.is_none();
        red.started.get_or_insert(t0);
        if red.runs.is_empty() {
            j.live_reduces.push(idx);
        }
        let task = TaskRef { job, idx, attempt, reduce: true };
        let mut rng =
            Rng::derive(self.spec.seed, Stream::Reduce, &[u64::from(job), u64::from(idx), u64::from(attempt)]);
        if first_start {
            j.hist(t0, Hist::TaskStart { idx, reduce: true, splits: None });
        }
        j.hist(t0, Hist::AttemptStart { task, node });
        let maps = j.spec.maps;
        self.nodes[n].free_reduces -= 1;
        self.nodes[n].running += 1;
        let free = self.nodes[n].free_reduces;
        self.push(n, t0, task.key(), Line::Launch { task, free_slots: free + 1 });
        if self.spec.usage {
            self.usage[n].launch(t0);
        }
        let start = t0 + 700 + rng.below(800) as i64;
        self.push(n, start, task.key(), Line::SyslogOpen { task, maps });
        let port = self.port(n);
        let j = &mut self.jobs[job as usize];
        j.reduces[idx as usize].runs.push(ReduceRun {
            attempt,
            node,
            start,
            lanes: [start; COPIERS],
            copied: 0,
            copied_mb: 0.0,
            batch_files: 0,
            batch_mb: 0.0,
            merges: 0,
            merge_free: start,
            last_progress: start,
            port,
            in_flight: BinaryHeap::new(),
            landed: 0,
            tail: None,
            stall: None,
        });
        let done: Vec<u32> = (0..maps).filter(|m| j.maps[*m as usize].done.is_some()).collect();
        for m in done {
            self.copy(job, idx, attempt, m);
        }
        self.maybe_finish_copies(job, idx, attempt);
    }

    fn reduce_run(&mut self, job: u32, r: u32, attempt: u8) -> Option<&mut ReduceRun> {
        self.jobs[job as usize].reduces[r as usize].runs.iter_mut().find(|x| x.attempt == attempt)
    }

    /// A hung reduce: no progress from `at` on, so the TaskTracker kills it
    /// `mapred.task.timeout` after its last report, unless a backup attempt wins first.
    fn hang_reduce(&mut self, job: u32, r: u32, attempt: u8, at: i64, rng: &mut Rng) {
        let maps = self.jobs[job as usize].spec.maps;
        let task = TaskRef { job, idx: r, attempt, reduce: true };
        let Some(run) = self.reduce_run(job, r, attempt) else { return };
        let frozen = run.copied.saturating_sub(1) as f32 / maps.max(1) as f32 / 3.0;
        run.stall = Some((at, frozen));
        let (node, start) = (usize::from(run.node), run.start);
        let last_report = at.max(run.last_progress);
        let timeout = last_report + TASK_TIMEOUT_MS + rng.below(3000) as i64;
        self.struck = Some((at, task));
        self.push(node, timeout, task.key(), Line::Timeout { task });
        self.push(node, timeout, task.key(), Line::SyslogClose { task, done: false });
        self.use_rate(task.key(), node, (start, at), Use::Tasks, 1.0);
        self.at(timeout, Ev::ReduceEnd { job, idx: r, attempt, end: End::TimedOut });
    }

    /// The reduce attempt fetches one map's output from the map's TaskTracker.
    fn copy(&mut self, job: u32, r: u32, attempt: u8, map: u32) {
        let j = &self.jobs[job as usize];
        let reduces = j.spec.reduces.max(1);
        let maps = j.spec.maps;
        let Some((map_end, from, map_attempt)) = j.maps[map as usize].done else { return };
        let out_mb = j.maps[map as usize].out_mb;
        let map_task = TaskRef { job, idx: map, attempt: map_attempt, reduce: false };
        let task = TaskRef { job, idx: r, attempt, reduce: true };
        let mut rng = Rng::derive(
            self.spec.seed,
            Stream::Copy,
            &[u64::from(job), u64::from(r), u64::from(attempt), u64::from(map)],
        );
        let Some(run) = j.reduces[r as usize].runs.iter().find(|x| x.attempt == attempt) else { return };
        if run.stall.is_some() {
            return;
        }
        let (node, lanes, port, copied) = (usize::from(run.node), run.lanes, run.port, run.copied);
        let lane = (0..COPIERS).min_by_key(|&l| lanes[l]).unwrap_or(0);
        let mut start = lanes[lane].max(map_end + 500 + rng.below(1500) as i64).max(self.now);
        let from_n = usize::from(from);
        let mb = out_mb / f64::from(reduces) * rng.jitter(0.05);
        let fault = self.spec.fault.as_ref();
        let link = Injected::link(fault, from_n, node, start);
        let owner = task.key();
        let rate = if from_n == node {
            self.disk_rate(node, start, false)
        } else {
            (self.net_rate(from_n, node) / 2.0).min(link.cap_mb_s).min(self.disk_rate(from_n, start, false))
        };
        let dur = (mb / rate * 1000.0 + 40.0 + link.extra_ms) as i64;
        let bytes = (mb * 1048576.0) as u32;
        // HADOOP-1152: the last output is fetched, but renaming it in the in-memory file
        // system fails (the file is flagged as being flushed to disk); the copier tries again
        // and again, and the reduce never leaves its copy phase.
        if copied + 1 == maps && self.struck.is_none() && Injected::hangs_copy(fault, node, start) {
            let stall = start;
            for _ in 0..RENAME_TRIES {
                self.push(node, start, owner, Line::CopyStart { reduce: task, map: map_task, from, bytes });
                let failed = start + dur;
                self.push(
                    node,
                    failed,
                    owner,
                    Line::CopyFailed { reduce: task, map: map_task, from, why: CopyFault::Rename },
                );
                self.use_total(owner, from_n, (start, failed), Use::DiskRead, mb);
                start = failed + 4000 + rng.below(8000) as i64;
            }
            if let Some(run) = self.reduce_run(job, r, attempt) {
                run.copied += 1;
            }
            self.hang_reduce(job, r, attempt, stall, &mut rng);
            return;
        }
        if rng.chance(link.fail_p) {
            self.push(node, start, owner, Line::CopyStart { reduce: task, map: map_task, from, bytes });
            start += 30_000;
            self.push(
                node,
                start,
                owner,
                Line::CopyFailed { reduce: task, map: map_task, from, why: CopyFault::Timeout },
            );
            start += 1000;
        }
        let end = start + dur;
        self.push(node, start, owner, Line::CopyStart { reduce: task, map: map_task, from, bytes });
        self.push(node, end, owner, Line::CopyDone { reduce: task, map: map_task, from, bytes });
        self.push(
            from_n,
            end,
            owner,
            Line::ShuffleServed { map: map_task, reduce: task, to: node as u16, port, bytes, dur_ms: dur as u32 },
        );
        self.use_total(owner, from_n, (start, end), Use::DiskRead, mb);
        if from_n != node {
            self.use_total(owner, from_n, (start, end), Use::Tx, mb);
            self.use_total(owner, node, (start, end), Use::Rx, mb);
        }
        let disk = self.disk_rate(node, end, true);
        let strike = self.struck.is_none() && Injected::hangs_merge(self.spec.fault.as_ref(), node, end);
        let Some(run) = self.reduce_run(job, r, attempt) else { return };
        run.lanes[lane] = end;
        run.copied += 1;
        run.copied_mb += mb;
        run.batch_files += 1;
        run.batch_mb += mb;
        run.in_flight.push(Reverse(end));
        let mut lines = Vec::new();
        let mut hang_at = None;
        if run.batch_files >= MERGE_SEGMENTS {
            let m_start = end.max(run.merge_free);
            lines.push((m_start, Line::MergeStart { reduce: task, files: run.batch_files }));
            if strike {
                hang_at = Some(m_start);
            } else {
                let m_end = m_start + (run.batch_mb / disk * 1000.0) as i64 + 100;
                run.merges += 1;
                let merged = Line::MergeDone {
                    reduce: task,
                    files: run.batch_files,
                    merge: run.merges,
                    bytes: (run.batch_mb * 1048576.0) as u32,
                };
                lines.push((m_end, merged));
                run.merge_free = m_end;
                run.batch_files = 0;
                run.batch_mb = 0.0;
            }
        }
        if hang_at.is_none() && end - run.last_progress >= PROGRESS_MS as i64 {
            run.last_progress = end;
            let secs = ((end - run.start) as f64 / 1000.0).max(0.001);
            let phase = ReducePhase::Copy { done: run.copied, total: maps, mb_s: (run.copied_mb / secs) as f32 };
            lines.push((end, Line::ReduceProgress { task, frac: run.copied as f32 / maps as f32 / 3.0, phase }));
        }
        for (t, line) in lines {
            self.push(node, t, owner, line);
        }
        if let Some(at) = hang_at {
            // HADOOP-2080: the merge of the in-memory outputs miscomputes the size of its
            // checksum file and never completes; the copiers wait for memory it never frees.
            self.hang_reduce(job, r, attempt, at, &mut rng);
        }
    }

    /// Once every map's output is in: the last merge, sort, reduce and output write.
    fn maybe_finish_copies(&mut self, job: u32, r: u32, attempt: u8) {
        let j = &self.jobs[job as usize];
        let Some(run) = j.reduces[r as usize].runs.iter().find(|x| x.attempt == attempt) else { return };
        if j.maps_done < j.spec.maps || run.copied < j.spec.maps || run.stall.is_some() || run.tail.is_some() {
            return;
        }
        let spec = j.spec.clone();
        let task = TaskRef { job, idx: r, attempt, reduce: true };
        let owner = task.key();
        let node = usize::from(run.node);
        let mut rng =
            Rng::derive(self.spec.seed, Stream::ReduceEnd, &[u64::from(job), u64::from(r), u64::from(attempt)]);
        let total_mb = run.copied_mb;
        let mut t = run.lanes.iter().copied().max().unwrap_or(run.start).max(run.merge_free).max(self.now);
        let (batch_files, batch_mb, merges, start) = (run.batch_files, run.batch_mb, run.merges, run.start);
        if batch_files > 0 {
            self.push(node, t, owner, Line::MergeStart { reduce: task, files: batch_files });
            let m_end = t + (batch_mb / self.disk_rate(node, t, true) * 1000.0) as i64 + 100;
            let merged = Line::MergeDone {
                reduce: task,
                files: batch_files,
                merge: merges + 1,
                bytes: (batch_mb * 1048576.0) as u32,
            };
            self.push(node, m_end, owner, merged);
            self.use_total(owner, node, (t, m_end), Use::DiskWrite, batch_mb);
            t = m_end;
        }
        let shuffle_done = t;
        let sort_ms = (total_mb / self.disk_rate(node, t, false) * 500.0) as i64 + 200;
        self.use_total(owner, node, (t, t + sort_ms), Use::DiskRead, total_mb);
        self.progress(node, task, (t, t + sort_ms), (0.6667, 0.6667), Some(ReducePhase::Sort), &mut rng);
        t += sort_ms;
        let sort_done = t;
        let cpu_ms = total_mb * spec.reduce_cpu_s_per_mb * rng.jitter(0.04) / self.cpu_rate(node, t) * 1000.0;
        let out_mb = total_mb * spec.reduce_out_ratio;
        let blocks = (out_mb / BLOCK_MB).ceil().max(1.0) as usize;
        for b in 0..blocks {
            let slice = (cpu_ms / blocks as f64) as i64;
            let from = t;
            self.use_rate(owner, node, (t, t + slice), Use::Cpu, 1.0);
            t += slice;
            let mb = (out_mb - b as f64 * BLOCK_MB).clamp(0.1, BLOCK_MB);
            t = self.write_block(node, t, mb, spec.replication, task, &mut rng);
            let lo = 0.6667 + 0.3333 * (b as f32 / blocks as f32);
            let hi = 0.6667 + 0.3333 * ((b + 1) as f32 / blocks as f32);
            self.progress(node, task, (from, t), (lo, hi), Some(ReducePhase::Reduce), &mut rng);
        }
        self.push(node, t, owner, Line::Done { task });
        self.push(node, t, owner, Line::SyslogClose { task, done: true });
        self.use_rate(owner, node, (start, t), Use::Tasks, 1.0);
        if let Some(run) = self.reduce_run(job, r, attempt) {
            run.tail = Some((shuffle_done, sort_done, t));
        }
        self.at(t, Ev::ReduceEnd { job, idx: r, attempt, end: End::Ok });
    }

    fn reduce_end(&mut self, job: u32, idx: u32, attempt: u8, end: End) {
        let now = self.now;
        let j = &mut self.jobs[job as usize];
        if j.state != JobState::Running {
            return;
        }
        let red = &mut j.reduces[idx as usize];
        let Some(at) = red.runs.iter().position(|x| x.attempt == attempt) else { return };
        let run = red.runs.remove(at);
        let node = run.node;
        let task = TaskRef { job, idx, attempt, reduce: true };
        self.used.remove(&task.key());
        self.free_slot(node, true);
        let j = &mut self.jobs[job as usize];
        if end == End::Ok {
            let red = &mut j.reduces[idx as usize];
            red.done = true;
            let others: Vec<(u8, u16)> = red.runs.drain(..).map(|x| (x.attempt, x.node)).collect();
            j.live_reduces.retain(|&i| i != idx);
            j.reduces_done += 1;
            let (shuffle_ms, sort_ms) = run.tail.map_or((now, now), |(s, o, _)| (s, o));
            j.hist(now, Hist::AttemptEnd { task, node, status: Status::Success, shuffle_ms, sort_ms });
            j.hist(now, Hist::TaskEnd { idx, reduce: true });
            for (a, n) in others {
                self.kill(TaskRef { job, idx, attempt: a, reduce: true }, n);
            }
            self.job_progress(job);
        } else {
            j.failed_reduces += 1;
            let red = &mut j.reduces[idx as usize];
            red.failures += 1;
            red.avoid = Some(node);
            let alone = red.runs.is_empty();
            if alone {
                j.live_reduces.retain(|&i| i != idx);
            }
            self.retry(task, node, alone);
        }
        self.wake(node, now);
    }

    /// A failed attempt: unless a twin still runs, the task runs again elsewhere, first in
    /// line; a task that has failed too often fails the job.
    fn retry(&mut self, task: TaskRef, node: u16, requeue: bool) {
        let now = self.now;
        let j = &mut self.jobs[task.job as usize];
        j.hist(now, Hist::AttemptEnd { task, node, status: Status::Failed, shuffle_ms: 0, sort_ms: 0 });
        let failures =
            if task.reduce { j.reduces[task.idx as usize].failures } else { j.maps[task.idx as usize].failures };
        if failures >= MAX_ATTEMPTS {
            self.abort(task.job, Status::Failed);
            return;
        }
        if !requeue {
            return;
        }
        if task.reduce {
            j.pending_reduces.push_front(task.idx);
        } else {
            j.pending_maps.insert(0, task.idx);
        }
        self.wake_all();
    }

    fn job_progress(&mut self, job: u32) {
        let j = &self.jobs[job as usize];
        if j.maps_done == j.spec.maps && j.reduces_done == j.spec.reduces {
            self.close(job, Status::Success);
        }
    }

    /// The job ends: its history is complete and its stream submits the next job.
    fn close(&mut self, job: u32, status: Status) {
        let now = self.now;
        let j = &mut self.jobs[job as usize];
        j.state = JobState::Done(status);
        j.finish_ms = Some(now);
        let end = Hist::JobEnd {
            status,
            maps: j.maps_done,
            reduces: j.reduces_done,
            failed_maps: j.failed_maps,
            failed_reduces: j.failed_reduces,
        };
        j.hist(now, end);
        let stream = j.stream;
        // Its tasks are done with: a long experiment keeps only the jobs' outcomes.
        j.maps = Vec::new();
        j.reduces = Vec::new();
        j.pending_maps = Vec::new();
        j.pending_reduces = VecDeque::new();
        j.live_maps = Vec::new();
        j.live_reduces = Vec::new();
        self.active.retain(|&a| a != job);
        self.closed.push(job);
        if let Some((at, spec)) = self.source.next(stream, now) {
            self.submit(at, stream, spec);
        }
    }

    /// The JobTracker gives up on a job (a task failed too often) or the user kills it: every
    /// running attempt is killed.
    fn abort(&mut self, job: u32, status: Status) {
        if self.jobs[job as usize].state != JobState::Running {
            return;
        }
        let mut running = Vec::new();
        let j = &mut self.jobs[job as usize];
        for (idx, m) in j.maps.iter_mut().enumerate() {
            running.extend(
                m.runs.drain(..).map(|x| (TaskRef { job, idx: idx as u32, attempt: x.attempt, reduce: false }, x.node)),
            );
        }
        for (idx, r) in j.reduces.iter_mut().enumerate() {
            running.extend(
                r.runs.drain(..).map(|x| (TaskRef { job, idx: idx as u32, attempt: x.attempt, reduce: true }, x.node)),
            );
        }
        j.live_maps.clear();
        j.live_reduces.clear();
        for (task, node) in running {
            self.kill(task, node);
        }
        self.close(job, status);
    }

    fn submit(&mut self, at: i64, stream: u32, spec: JobSpec) {
        let job = self.jobs.len() as u32;
        let mut rng = Rng::derive(self.spec.seed, Stream::Input, &[u64::from(job)]);
        let nodes = &self.spec.cluster.nodes;
        let maps = (0..spec.maps)
            .map(|_| MapTask {
                next_attempt: 0,
                failures: 0,
                runs: Vec::new(),
                done: None,
                replicas: (spec.input_mb > 0.0).then(|| hdfs::existing_replicas(nodes, &mut rng)),
                avoid: None,
                started: None,
                out_mb: 0.0,
            })
            .collect();
        let reduces = (0..spec.reduces)
            .map(|_| ReduceTask {
                next_attempt: 0,
                failures: 0,
                runs: Vec::new(),
                done: false,
                avoid: None,
                started: None,
            })
            .collect();
        self.names.push(JobName {
            id: format!("{}_{:04}", self.spec.jt_stamp, job + 1),
            input: format!(
                "/user/{}/{}/in-{:04}",
                spec.user,
                spec.name.split([' ', ':']).next().unwrap_or("job"),
                job + 1
            ),
            input_mb: spec.input_mb,
        });
        self.jobs.push(Job {
            stream,
            submit_ms: at,
            finish_ms: None,
            state: JobState::Waiting,
            history: Vec::new(),
            maps,
            reduces,
            pending_maps: (0..spec.maps).collect(),
            pending_reduces: (0..spec.reduces).collect(),
            live_maps: Vec::new(),
            live_reduces: Vec::new(),
            maps_done: 0,
            reduces_done: 0,
            failed_maps: 0,
            failed_reduces: 0,
            spec,
        });
        self.at(at.max(self.now), Ev::Submit { job });
    }
}
