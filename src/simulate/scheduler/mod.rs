//! The discrete-event model of one Hadoop cluster: a JobTracker (FIFO over jobs, maps placed on
//! heartbeats, data-local first, speculative execution) and the slaves' tasks. A task attempt's
//! phases are timed when it is launched, from the rates of its node and peers at that moment (CPU
//! shared with the other tasks and any hog, disk shared likewise, links held to TCP's rate under
//! loss), and its log lines are laid down then, in the future; the run's writers take the lines
//! whose time has come. Progress reports, the bulk of a TaskTracker log, are kept as series and
//! laid down round by round ([`Sim::lay_progress`]), so that a long task does not hold hours of
//! lines in memory.
//!
//! This file holds the event loop, the state it keeps and the progress series. The rest of the
//! model is more methods of [`Sim`], one concern a file:
//!
//! - `placement`: heartbeats and slots, and which pending task a node gets (data-local maps first);
//! - `speculation`: stragglers and their backup attempts;
//! - `maps`: a map attempt's phases (input read, CPU, spill or HDFS write);
//! - `reduces`: a reduce attempt's start and, once its shuffle is in, its sort, reduce and output;
//! - `shuffle`: the copies of map outputs into a reduce, its in-memory merges, the hangs there;
//! - `blocks`: HDFS block reads and write pipelines, with pipeline recovery;
//! - `resources`: the CPU, disk and network rates a task gets, and the use it is charged with;
//! - `lifecycle`: jobs submitted and closed, attempts that end, are retried or are killed.

mod blocks;
mod lifecycle;
mod maps;
mod placement;
mod reduces;
mod resources;
mod shuffle;
mod speculation;
#[cfg(test)]
mod testing;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use super::Version;
use super::cluster::Cluster;
use super::faults::{Fault, Injected};
use super::jobhistory::{Hist, HistRec, Status};
use super::rng::{Rng, Stream};
use super::sadc::{Usage, Use};
use super::workload::JobSpec;
use super::writers::{JobName, Line, Rec, ReducePhase, TaskRef};
use shuffle::COPIERS;

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
    /// A reduce's copier loop reports progress while it waits for map outputs.
    CopyPing {
        job: u32,
        idx: u32,
        attempt: u8,
    },
}

/// How a job ended, or that it has not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Waiting,
    Running,
    Done(Status),
}

/// A task's child reports progress this often (`Task.PROGRESS_INTERVAL`) when it has made any,
/// and the TaskTracker logs each report.
pub const PROGRESS_MS: f64 = 3000.0;
/// The TaskTrackers' heartbeat interval at these cluster sizes.
const HEARTBEAT_MS: i64 = 3000;

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
    /// Whether each copier's latest try is one that gets no answer (it waits out its timeout).
    unanswered: [bool; COPIERS],
    /// When the last copy so far ends (a retried one may end after its copier is free).
    copies_end: i64,
    copied: u32,
    copied_mb: f64,
    /// The longest run time of the maps copied so far (Hadoop's `maxMapRuntime`).
    max_map_ms: i64,
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

impl Series {
    /// Lays down its reports due before `until`; false once none is left.
    fn lay(&mut self, until: i64, buf: &mut Vec<Rec>) -> bool {
        let span = (self.to - self.from).max(1) as f64;
        while self.next < until && self.next < self.to {
            let frac = self.lo + (self.hi - self.lo) * ((self.next - self.from) as f64 / span) as f32;
            let line = match self.phase {
                None => Line::MapProgress { task: self.task, frac },
                Some(phase) => Line::ReduceProgress { task: self.task, frac, phase },
            };
            buf.push(Rec { ts_ms: self.next, owner: self.owner, line });
            self.next += (PROGRESS_MS * self.rng.range(0.8, 1.2)) as i64;
        }
        self.next < self.to
    }
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
        let (map_slots, reduce_slots) = (spec.cluster.map_slots, spec.cluster.reduce_slots);
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
                    free_maps: map_slots,
                    free_reduces: reduce_slots,
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
            series.retain_mut(|s| s.lay(until, buf));
        }
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
            Ev::CopyPing { job, idx, attempt } => self.copy_ping(job, idx, attempt),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{attempts, finish, job, running, spec, submitted};
    use super::*;
    use crate::simulate::cluster::{Conditions, MAP_SLOTS, REDUCE_SLOTS};

    #[test]
    fn a_planned_progress_is_linear_between_its_ends() {
        let p = Prog { t0: 1000, t1: 3000, f0: 0.0, f1: 1.0 };
        assert_eq!(
            [p.at(0), p.at(1000), p.at(1500), p.at(2000), p.at(3000), p.at(9000)],
            [0.0, 0.0, 0.25, 0.5, 1.0, 1.0]
        );
    }

    #[test]
    fn a_reduce_shows_a_third_for_its_copies_a_third_for_its_sort_a_third_for_its_reduce() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(4, 1)]);
        sim.launch_reduce(0, 0, 0);
        let run = &mut sim.jobs[0].reduces[0].runs[0];
        run.in_flight.extend([Reverse(10_000), Reverse(20_000)]);
        assert_eq!(run.progress(9_999, 4), 0.0);
        assert_eq!(run.progress(10_000, 4), 1.0 / 4.0 / 3.0);
        assert_eq!(run.progress(25_000, 4), 2.0 / 4.0 / 3.0);
        run.tail = Some((30_000, 40_000, 60_000));
        assert_eq!(run.progress(35_000, 4), 1.5 / 3.0);
        assert_eq!(run.progress(45_000, 4), 2.25 / 3.0);
        assert_eq!(run.progress(70_000, 4), 1.0);
        // A hung reduce reports what it had when it hung, whatever its plan said.
        run.stall = Some((50_000, 0.1));
        assert_eq!(run.progress(45_000, 4), 2.25 / 3.0);
        assert_eq!(run.progress(55_000, 4), 0.1);
    }

    #[test]
    fn progress_reports_come_every_three_seconds_or_so_round_by_round() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(1, 0)]);
        let task = TaskRef { job: 0, idx: 0, attempt: 0, reduce: false };
        sim.progress(1, task, (10_000, 40_000), (0.5, 1.0), None, &mut Rng::new(1));
        let reports = |sim: &Sim<_>| -> Vec<(i64, f32)> {
            sim.bufs[1]
                .iter()
                .map(|r| match r.line {
                    Line::MapProgress { task: t, frac } if t == task && r.owner == task.key() => (r.ts_ms, frac),
                    _ => panic!("{r:?}"),
                })
                .collect()
        };
        sim.lay_progress(25_000);
        let first = reports(&sim);
        assert!(!first.is_empty() && first.iter().all(|r| r.0 < 25_000), "{first:?}");
        assert_eq!(sim.series[1].len(), 1);
        sim.lay_progress(100_000);
        let all = reports(&sim);
        assert!(all.len() > first.len() && all.last().unwrap().0 < 40_000, "{all:?}");
        assert!(sim.series[1].is_empty());
        assert!((10_900..13_000).contains(&all[0].0), "the first report 0.3 to 1 interval in: {}", all[0].0);
        for pair in all.windows(2) {
            assert!((2400..3600).contains(&(pair[1].0 - pair[0].0)), "{pair:?}");
        }
        for (t, frac) in all {
            assert!((frac - (0.5 + 0.5 * (t - 10_000) as f32 / 30_000.0)).abs() < 1e-6, "{t} {frac}");
        }
    }

    #[test]
    fn a_small_job_runs_each_task_once_and_succeeds() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = submitted(spec(&cluster, None), vec![job(4, 1)]);
        finish(&mut sim);
        let j = &sim.jobs[0];
        assert_eq!(j.state, JobState::Done(Status::Success));
        assert_eq!(sim.closed, vec![0]);
        let ends: Vec<(u32, bool, u8, Status)> =
            attempts(&sim, 0).into_iter().map(|(t, _, status)| (t.idx, t.reduce, t.attempt, status)).collect();
        let mut maps: Vec<_> = ends.iter().filter(|e| !e.1).copied().collect();
        maps.sort_by_key(|e| e.0);
        assert_eq!(maps, (0..4).map(|i| (i, false, 0, Status::Success)).collect::<Vec<_>>());
        // The reduce ends last, once it has every map's output.
        assert_eq!(ends.last(), Some(&(0, true, 0, Status::Success)));
        let end = Hist::JobEnd { status: Status::Success, maps: 4, reduces: 1, failed_maps: 0, failed_reduces: 0 };
        assert_eq!(j.history.last().map(|h| h.h), Some(end));
        assert_eq!(j.finish_ms, j.history.last().map(|h| h.ts_ms));
        let lines: Vec<Line> = sim.bufs.iter().flatten().map(|r| r.line).collect();
        let count = |f: fn(&Line) -> bool| lines.iter().filter(|l| f(l)).count();
        assert_eq!(count(|l| matches!(l, Line::CopyDone { .. })), 4);
        assert_eq!(count(|l| matches!(l, Line::Done { .. })), 5);
        assert_eq!(count(|l| matches!(l, Line::Kill { .. } | Line::Timeout { .. })), 0);
        assert!(sim.killed.is_empty() && sim.struck.is_none());
        for node in &sim.nodes {
            assert_eq!((node.free_maps, node.free_reduces, node.running), (MAP_SLOTS, REDUCE_SLOTS, 0));
        }
    }
}
