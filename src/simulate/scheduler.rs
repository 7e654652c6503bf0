//! The discrete-event model of one Hadoop cluster: a JobTracker (FIFO over jobs, maps placed on
//! heartbeats, data-local first) and the slaves' tasks. A task's phases are timed when it is
//! launched, from the rates of its node and peers at that moment (CPU shared with the other
//! tasks and any hog, disk shared likewise, links held to TCP's rate under loss), and its log
//! lines are laid down then, in the future; the run's writers take the lines whose time has come.
//!
//! Reduces copy each map's output when the map ends (five copiers, in-memory merges every ten
//! segments), then sort, reduce and write their output through HDFS pipelines.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::Version;
use super::cluster::{Cluster, MAP_SLOTS, REDUCE_SLOTS};
use super::faults::{Fault, Injected, TASK_TIMEOUT_MS};
use super::hdfs::{self, BLOCK_MB};
use super::jobhistory::{Hist, HistRec, Status};
use super::rng::{Rng, Stream};
use super::sadc::{Usage, Use};
use super::workload::JobSpec;
use super::writers::{JobName, Line, Rec, ReducePhase, TaskRef};

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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    Ok,
    Failed,
    TimedOut,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Submit { job: u32 },
    Launch { job: u32 },
    Heartbeat { node: u16 },
    MapEnd { job: u32, idx: u32, attempt: u8, end: End },
    ReduceEnd { job: u32, idx: u32, attempt: u8, end: End },
    KillJob { job: u32 },
}

/// How a job ended, or that it has not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Waiting,
    Running,
    Done(Status),
}

/// Attempts per task before the job fails (`mapred.map.max.attempts`).
const MAX_ATTEMPTS: u8 = 4;
const COPIERS: usize = 5;
/// In-memory segments that start a merge.
const MERGE_SEGMENTS: u16 = 10;
/// How long a client takes to notice a dead pipeline node and rebuild the pipeline.
const RECOVERY_MS: f64 = 5000.0;
/// A task reports progress about this often, and the TaskTracker logs each report.
const PROGRESS_MS: f64 = 3000.0;

struct MapTask {
    attempt: u8,
    running: Option<u16>,
    done: Option<(i64, u16)>,
    replicas: Option<[u16; 3]>,
    avoid: Option<u16>,
    started: bool,
    out_mb: f64,
}

struct ReduceRun {
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
    shuffle_done: i64,
    sort_done: i64,
}

struct ReduceTask {
    attempt: u8,
    run: Option<ReduceRun>,
    done: bool,
    avoid: Option<u16>,
    started: bool,
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
    pub usage: Vec<Usage>,
    /// Jobs whose history is complete, to be written.
    pub closed: Vec<u32>,
    /// An injected hang strikes once, as Kahuna triggered each bug once per experiment.
    hang_struck: bool,
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
            usage: (0..n).map(|_| Usage::default()).collect(),
            closed: Vec::new(),
            hang_struck: false,
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
            let local = j.pending_maps.iter().position(|i| {
                allowed(i) && j.maps[*i as usize].replicas.is_some_and(|r| r.contains(&node))
            });
            let at = local.or_else(|| j.pending_maps.iter().position(allowed));
            if let Some(at) = at {
                let idx = self.jobs[job as usize].pending_maps.remove(at);
                return Some((job, idx));
            }
        }
        None
    }

    fn pick_reduce(&mut self, node: u16) -> Option<(u32, u32)> {
        for &job in &self.active {
            let j = &self.jobs[job as usize];
            // 0.20 holds reduces back until 5% of the maps are done; 0.18 starts them at once.
            let slowstart = self.spec.version == Version::V020 && j.maps_done * 20 < j.spec.maps;
            if slowstart {
                continue;
            }
            if let Some(at) = j.pending_reduces.iter().position(|i| j.reduces[*i as usize].avoid != Some(node)) {
                let idx = self.jobs[job as usize].pending_reduces.remove(at)?;
                return Some((job, idx));
            }
        }
        None
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

    fn disk_rate(&self, node: usize, t: i64) -> f64 {
        let n = &self.spec.cluster.nodes[node];
        let sharing = 1.0 + 0.35 * f64::from(self.nodes[node].running.saturating_sub(1));
        n.disk_mb_s * Injected::disk_share(self.spec.fault.as_ref(), node, t) / sharing
    }

    fn net_rate(&self, a: usize, b: usize) -> f64 {
        let nodes = &self.spec.cluster.nodes;
        nodes[a].net_mb_s.min(nodes[b].net_mb_s)
    }

    /// Progress reports of a task over [from, to), fractions `lo..hi` of the way.
    fn progress(&mut self, node: usize, task: TaskRef, (from, to): (i64, i64), (lo, hi): (f32, f32), phase: Option<ReducePhase>, rng: &mut Rng) {
        let span = (to - from).max(1) as f64;
        let mut t = from as f64 + rng.range(0.3, 1.0) * PROGRESS_MS;
        while t < to as f64 {
            let frac = lo + (hi - lo) * ((t - from as f64) / span) as f32;
            let line = match phase {
                None => Line::MapProgress { task, frac },
                Some(phase) => Line::ReduceProgress { task, frac, phase },
            };
            self.push(node, t as i64, task.key(), line);
            t += PROGRESS_MS * rng.range(0.8, 1.2);
        }
    }

    fn launch_map(&mut self, job: u32, idx: u32, node: u16) {
        let n = usize::from(node);
        let t0 = self.now;
        let (attempt, replicas) = {
            let m = &mut self.jobs[job as usize].maps[idx as usize];
            m.running = Some(node);
            (m.attempt, m.replicas)
        };
        let task = TaskRef { job, idx, attempt, reduce: false };
        let owner = task.key();
        let mut rng = Rng::derive(self.spec.seed, Stream::Map, &[u64::from(job), u64::from(idx), u64::from(attempt)]);
        self.nodes[n].free_maps -= 1;
        self.nodes[n].running += 1;
        let free = self.nodes[n].free_maps;
        self.push(n, t0, owner, Line::Launch { task, free_slots: free + 1 });
        self.usage[n].launch(t0);
        let first_start = !self.jobs[job as usize].maps[idx as usize].started;
        let j = &mut self.jobs[job as usize];
        if first_start {
            j.maps[idx as usize].started = true;
            j.hist(t0, Hist::TaskStart { idx, reduce: false, splits: replicas });
        }
        j.hist(t0, Hist::AttemptStart { task, node });
        let spec = j.spec.clone();
        let start = t0 + 700 + rng.below(800) as i64;

        if spec.poison_map == Some(idx) {
            let t = start + 2000 + rng.below(6000) as i64;
            self.push(n, t, owner, Line::ChildError { task });
            self.usage[n].add(t0, t, Use::Tasks, 1.0);
            self.at(t, Ev::MapEnd { job, idx, attempt, end: End::Failed });
            return;
        }
        if !self.hang_struck && Injected::hangs_map(self.spec.fault.as_ref(), n, t0) {
            // The child dies early; the TaskTracker keeps reporting it alive until the timeout.
            self.hang_struck = true;
            let died = start + 1000 + rng.below(3000) as i64;
            self.progress(n, task, (start, died), (0.0, 0.02), None, &mut rng);
            let timeout = died + TASK_TIMEOUT_MS + rng.below(3000) as i64;
            self.push(n, timeout, owner, Line::Timeout { task });
            self.usage[n].add(t0, died, Use::Tasks, 1.0);
            self.at(timeout, Ev::MapEnd { job, idx, attempt, end: End::TimedOut });
            return;
        }

        let mut t = start;
        let generated = spec.input_mb <= 0.0;
        if let (false, Some(replicas)) = (generated, replicas) {
            // Local if it can; else a replica whose DataNode answers (the client skips a dead one).
            let fault = self.spec.fault.as_ref();
            let live: Vec<u16> = replicas.iter().copied().filter(|&r| !Injected::drops_connections(fault, usize::from(r), t)).collect();
            let pool = if live.is_empty() { &replicas[..] } else { &live[..] };
            let src = if replicas.contains(&node) { n } else { usize::from(pool[rng.below(pool.len() as u64) as usize]) };
            t = self.read_block(src, n, t, spec.input_mb * rng.jitter(0.02), task, &mut rng);
        }
        let (in_mb, out_mb) = if generated { (spec.map_out_mb, spec.map_out_mb) } else { (spec.input_mb, spec.input_mb * spec.map_out_mb) };
        let out_mb = out_mb * rng.jitter(0.03);
        let cpu_s = (in_mb * spec.map_cpu_s_per_mb + spec.map_fixed_s * rng.jitter(0.2)) * rng.jitter(0.04);
        let cpu_ms = cpu_s / self.cpu_rate(n, t) * 1000.0;
        if spec.map_writes_hdfs {
            let blocks = (out_mb / BLOCK_MB).ceil().max(1.0) as usize;
            for b in 0..blocks {
                let mb = (out_mb - b as f64 * BLOCK_MB).min(BLOCK_MB);
                let slice = (cpu_ms / blocks as f64) as i64;
                self.usage[n].add(t, t + slice, Use::Cpu, 1.0);
                t += slice;
                t = self.write_block(n, t, mb, task, &mut rng);
            }
        } else {
            self.usage[n].add(t, t + cpu_ms as i64, Use::Cpu, 1.0);
            t += cpu_ms as i64;
            let spill_ms = (out_mb / self.disk_rate(n, t) * 1000.0) as i64;
            self.usage[n].add_total(t, t + spill_ms, Use::DiskWrite, out_mb);
            t += spill_ms;
        }
        self.progress(n, task, (start, t), (0.0, 1.0), None, &mut rng);
        self.push(n, t, owner, Line::MapProgress { task, frac: 1.0 });
        self.push(n, t, owner, Line::Done { task });
        self.usage[n].add(t0, t, Use::Tasks, 1.0);
        self.jobs[job as usize].maps[idx as usize].out_mb = out_mb;
        self.at(t, Ev::MapEnd { job, idx, attempt, end: End::Ok });
    }

    /// A block read by a task on `reader` from the DataNode on `src`; returns when it ends.
    fn read_block(&mut self, src: usize, reader: usize, t: i64, mb: f64, client: TaskRef, rng: &mut Rng) -> i64 {
        let block = hdfs::new_block_id(rng);
        let link = Injected::link(self.spec.fault.as_ref(), src, reader, t);
        let mut t = t;
        let port = self.port(reader);
        if rng.chance(link.fail_p) {
            // The transfer stalls until the DataNode's write timeout gives up on it.
            self.push(src, t, client.key(), Line::ReadStart);
            t += 60_000;
            self.push(src, t, client.key(), Line::ServeFailed { block, to: reader as u16 });
        }
        let rate = if src == reader {
            self.disk_rate(src, t)
        } else {
            self.disk_rate(src, t).min(self.net_rate(src, reader)).min(link.cap_mb_s)
        };
        let dur = (mb / rate * 1000.0 + link.extra_ms + 5.0) as i64;
        self.push(src, t, client.key(), Line::ReadStart);
        let end = t + dur;
        let size = (mb * 1048576.0) as u32;
        self.push(src, end, client.key(), Line::Served { block, to: reader as u16, port, size, client, dur_ms: dur as u32 });
        self.usage[src].add_total(t, end, Use::DiskRead, mb);
        if src != reader {
            self.usage[src].add_total(t, end, Use::Tx, mb);
            self.usage[reader].add_total(t, end, Use::Rx, mb);
        }
        end
    }

    /// A block written by a task on `client` through a pipeline of replicas; returns when the
    /// last acknowledgement is back.
    fn write_block(&mut self, client: usize, t: i64, mb: f64, task: TaskRef, rng: &mut Rng) -> i64 {
        let fault = self.spec.fault.clone();
        let mut replicas = hdfs::place(client, &self.spec.cluster.nodes, rng, |i| Injected::refuses_writes(fault.as_ref(), i, t));
        if replicas.is_empty() {
            return t;
        }
        let block = hdfs::new_block_id(rng);
        let mut rate = f64::INFINITY;
        let mut extra = 0.0;
        // Pipeline recovery: the client drops a DataNode that stops acknowledging (at 50% loss)
        // and goes on with the others; the dropped one never finishes its receive.
        if let Some(lost) = replicas.iter().position(|&r| r != client && Injected::drops_connections(fault.as_ref(), r, t)) {
            let r = replicas.remove(lost);
            let src = if lost == 0 { client } else { replicas[lost - 1] };
            let port = self.port(src);
            self.push(r, t + 2 * lost as i64, task.key(), Line::Receiving { block, src: src as u16, port });
            extra += RECOVERY_MS;
            if replicas.is_empty() {
                return t + RECOVERY_MS as i64;
            }
        }
        let mut prev = client;
        for &r in &replicas {
            rate = rate.min(self.disk_rate(r, t));
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
            self.push(r, t + 2 * i as i64, task.key(), Line::Receiving { block, src: src as u16, port });
            let done = end - i64::from(downstream);
            let line = Line::Received { block, src: src as u16, port, size, client: task, dur_ms: (done - t) as u32, downstream };
            self.push(r, done, task.key(), line);
            self.usage[r].add_total(t, end, Use::DiskWrite, mb);
            if r != src {
                self.usage[src].add_total(t, end, Use::Tx, mb);
                self.usage[r].add_total(t, end, Use::Rx, mb);
            }
            src = r;
        }
        end
    }

    fn map_end(&mut self, job: u32, idx: u32, attempt: u8, end: End) {
        let now = self.now;
        let j = &mut self.jobs[job as usize];
        let running = j.state == JobState::Running && j.maps[idx as usize].attempt == attempt;
        let Some(node) = j.maps[idx as usize].running.take().filter(|_| running) else {
            return;
        };
        let n = usize::from(node);
        self.nodes[n].free_maps += 1;
        self.nodes[n].running = self.nodes[n].running.saturating_sub(1);
        let task = TaskRef { job, idx, attempt, reduce: false };
        if end == End::Ok {
            j.maps[idx as usize].done = Some((now, node));
            j.maps_done += 1;
            j.hist(now, Hist::AttemptEnd { task, node, status: Status::Success, shuffle_ms: 0, sort_ms: 0 });
            j.hist(now, Hist::TaskEnd { idx, reduce: false });
            let running: Vec<u32> = (0..j.reduces.len() as u32).filter(|r| j.reduces[*r as usize].run.is_some()).collect();
            for r in running {
                self.copy(job, r, idx);
                self.maybe_finish_copies(job, r);
            }
            self.job_progress(job);
        } else {
            j.failed_maps += 1;
            let m = &mut j.maps[idx as usize];
            m.attempt += 1;
            m.avoid = Some(node);
            self.retry(task, node);
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
        let attempt = self.jobs[job as usize].reduces[idx as usize].attempt;
        let task = TaskRef { job, idx, attempt, reduce: true };
        let mut rng = Rng::derive(self.spec.seed, Stream::Reduce, &[u64::from(job), u64::from(idx), u64::from(attempt)]);
        self.nodes[n].free_reduces -= 1;
        self.nodes[n].running += 1;
        let free = self.nodes[n].free_reduces;
        self.push(n, t0, task.key(), Line::Launch { task, free_slots: free + 1 });
        self.usage[n].launch(t0);
        let start = t0 + 700 + rng.below(800) as i64;
        let maps = self.jobs[job as usize].spec.maps;
        self.push(n, start, task.key(), Line::SyslogOpen { task, maps });
        let port = self.port(n);
        let j = &mut self.jobs[job as usize];
        if !j.reduces[idx as usize].started {
            j.reduces[idx as usize].started = true;
            j.hist(t0, Hist::TaskStart { idx, reduce: true, splits: None });
        }
        j.hist(t0, Hist::AttemptStart { task, node });
        j.reduces[idx as usize].run = Some(ReduceRun {
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
            shuffle_done: 0,
            sort_done: 0,
        });
        let done: Vec<u32> = (0..maps).filter(|m| j.maps[*m as usize].done.is_some()).collect();
        for m in done {
            self.copy(job, idx, m);
        }
        self.maybe_finish_copies(job, idx);
    }

    /// The reduce fetches one map's output from the map's TaskTracker.
    fn copy(&mut self, job: u32, r: u32, map: u32) {
        let reduces = self.jobs[job as usize].spec.reduces.max(1);
        let Some((map_end, from)) = self.jobs[job as usize].maps[map as usize].done else { return };
        let out_mb = self.jobs[job as usize].maps[map as usize].out_mb;
        let attempt = self.jobs[job as usize].reduces[r as usize].attempt;
        let map_task = TaskRef { job, idx: map, attempt: self.jobs[job as usize].maps[map as usize].attempt, reduce: false };
        let task = TaskRef { job, idx: r, attempt, reduce: true };
        let mut rng = Rng::derive(self.spec.seed, Stream::Copy, &[u64::from(job), u64::from(r), u64::from(attempt), u64::from(map)]);
        let Some(run) = self.jobs[job as usize].reduces[r as usize].run.as_ref() else { return };
        let (node, lanes, port) = (usize::from(run.node), run.lanes, run.port);
        let lane = (0..COPIERS).min_by_key(|&l| lanes[l]).unwrap_or(0);
        let mut start = lanes[lane].max(map_end + 500 + rng.below(1500) as i64).max(self.now);
        let from_n = usize::from(from);
        let mb = out_mb / f64::from(reduces) * rng.jitter(0.05);
        let link = Injected::link(self.spec.fault.as_ref(), from_n, node, start);
        let owner = task.key();
        if rng.chance(link.fail_p) {
            self.push(node, start, owner, Line::CopyStart { reduce: task, map: map_task, from });
            start += 30_000;
            self.push(node, start, owner, Line::CopyFailed { reduce: task, map: map_task, from });
            start += 1000;
        }
        let rate = if from_n == node {
            self.disk_rate(node, start)
        } else {
            (self.net_rate(from_n, node) / 2.0).min(link.cap_mb_s)
        };
        let dur = (mb / rate * 1000.0 + 40.0 + link.extra_ms) as i64;
        let end = start + dur;
        self.push(node, start, owner, Line::CopyStart { reduce: task, map: map_task, from });
        self.push(node, end, owner, Line::CopyDone { reduce: task, map: map_task, from });
        let bytes = (mb * 1048576.0) as u32;
        self.push(from_n, end, owner, Line::ShuffleServed { map: map_task, reduce: task, to: node as u16, port, bytes, dur_ms: dur as u32 });
        self.usage[from_n].add_total(start, end, Use::DiskRead, mb);
        if from_n != node {
            self.usage[from_n].add_total(start, end, Use::Tx, mb);
            self.usage[node].add_total(start, end, Use::Rx, mb);
        }
        let maps = self.jobs[job as usize].spec.maps;
        let disk = self.disk_rate(node, end);
        let Some(run) = self.jobs[job as usize].reduces[r as usize].run.as_mut() else { return };
        run.lanes[lane] = end;
        run.copied += 1;
        run.copied_mb += mb;
        run.batch_files += 1;
        run.batch_mb += mb;
        let mut lines = Vec::new();
        if run.batch_files >= MERGE_SEGMENTS {
            let m_start = end.max(run.merge_free);
            let m_end = m_start + (run.batch_mb / disk * 1000.0) as i64 + 100;
            run.merges += 1;
            lines.push((m_start, Line::MergeStart { reduce: task }));
            let merged = Line::MergeDone { reduce: task, files: run.batch_files, merge: run.merges, bytes: (run.batch_mb * 1048576.0) as u32 };
            lines.push((m_end, merged));
            run.merge_free = m_end;
            run.batch_files = 0;
            run.batch_mb = 0.0;
        }
        if end - run.last_progress >= PROGRESS_MS as i64 {
            run.last_progress = end;
            let secs = ((end - run.start) as f64 / 1000.0).max(0.001);
            let phase = ReducePhase::Copy { done: run.copied, total: maps, mb_s: (run.copied_mb / secs) as f32 };
            lines.push((end, Line::ReduceProgress { task, frac: run.copied as f32 / maps as f32 / 3.0, phase }));
        }
        for (t, line) in lines {
            self.push(node, t, owner, line);
        }
    }

    /// Once every map's output is in: the last merge, sort, reduce and output write.
    fn maybe_finish_copies(&mut self, job: u32, r: u32) {
        let j = &self.jobs[job as usize];
        let Some(run) = j.reduces[r as usize].run.as_ref() else { return };
        if j.maps_done < j.spec.maps || run.copied < j.spec.maps {
            return;
        }
        let spec = j.spec.clone();
        let attempt = j.reduces[r as usize].attempt;
        let task = TaskRef { job, idx: r, attempt, reduce: true };
        let owner = task.key();
        let node = usize::from(run.node);
        let mut rng = Rng::derive(self.spec.seed, Stream::ReduceEnd, &[u64::from(job), u64::from(r), u64::from(attempt)]);
        let total_mb = run.copied_mb;
        let mut t = run.lanes.iter().copied().max().unwrap_or(run.start).max(run.merge_free).max(self.now);
        let (batch_files, batch_mb, merges, start) = (run.batch_files, run.batch_mb, run.merges, run.start);
        if batch_files > 0 {
            let m_end = t + (batch_mb / self.disk_rate(node, t) * 1000.0) as i64 + 100;
            self.push(node, t, owner, Line::MergeStart { reduce: task });
            let merged = Line::MergeDone { reduce: task, files: batch_files, merge: merges + 1, bytes: (batch_mb * 1048576.0) as u32 };
            self.push(node, m_end, owner, merged);
            self.usage[node].add_total(t, m_end, Use::DiskWrite, batch_mb);
            t = m_end;
        }
        let shuffle_done = t;
        let sort_ms = (total_mb / self.disk_rate(node, t) * 500.0) as i64 + 200;
        self.usage[node].add_total(t, t + sort_ms, Use::DiskRead, total_mb);
        self.progress(node, task, (t, t + sort_ms), (0.6667, 0.6667), Some(ReducePhase::Sort), &mut rng);
        t += sort_ms;
        let sort_done = t;
        let hang = !self.hang_struck && Injected::hangs_reduce(self.spec.fault.as_ref(), node, t);
        self.hang_struck |= hang;
        let cpu_ms = total_mb * spec.reduce_cpu_s_per_mb * rng.jitter(0.04) / self.cpu_rate(node, t) * 1000.0;
        let out_mb = total_mb * spec.reduce_out_ratio;
        let blocks = (out_mb / BLOCK_MB).ceil().max(1.0) as usize;
        // A hang strikes near the end of the reduce phase (HADOOP-1152, -2080).
        let hang_at = hang.then(|| rng.range(0.9, 0.99));
        let mut end = None;
        for b in 0..blocks {
            let slice = (cpu_ms / blocks as f64) as i64;
            let frac_after = (b + 1) as f64 / blocks as f64;
            if let Some(h) = hang_at
                && frac_after > h
            {
                let stop = t + (slice as f64 * 0.5) as i64;
                self.progress(node, task, (t, stop), (0.6667, 0.6667 + 0.3333 * h as f32), Some(ReducePhase::Reduce), &mut rng);
                end = Some(stop);
                break;
            }
            let from = t;
            self.usage[node].add(t, t + slice, Use::Cpu, 1.0);
            t += slice;
            let mb = (out_mb - b as f64 * BLOCK_MB).clamp(0.1, BLOCK_MB);
            t = self.write_block(node, t, mb, task, &mut rng);
            let lo = 0.6667 + 0.3333 * (b as f32 / blocks as f32);
            self.progress(node, task, (from, t), (lo, 0.6667 + 0.3333 * frac_after as f32), Some(ReducePhase::Reduce), &mut rng);
        }
        if let Some(stopped) = end {
            let timeout = stopped + TASK_TIMEOUT_MS + rng.below(3000) as i64;
            self.push(node, timeout, owner, Line::Timeout { task });
            self.push(node, timeout, owner, Line::SyslogClose { task, done: false });
            self.usage[node].add(start, stopped, Use::Tasks, 1.0);
            self.at(timeout, Ev::ReduceEnd { job, idx: r, attempt, end: End::TimedOut });
        } else {
            self.push(node, t, owner, Line::Done { task });
            self.push(node, t, owner, Line::SyslogClose { task, done: true });
            self.usage[node].add(start, t, Use::Tasks, 1.0);
            if let Some(run) = self.jobs[job as usize].reduces[r as usize].run.as_mut() {
                run.shuffle_done = shuffle_done;
                run.sort_done = sort_done;
            }
            self.at(t, Ev::ReduceEnd { job, idx: r, attempt, end: End::Ok });
        }
    }

    fn reduce_end(&mut self, job: u32, idx: u32, attempt: u8, end: End) {
        let now = self.now;
        let j = &mut self.jobs[job as usize];
        if j.reduces[idx as usize].attempt != attempt || j.state != JobState::Running {
            return;
        }
        let Some(run) = j.reduces[idx as usize].run.take() else { return };
        let node = run.node;
        let n = usize::from(node);
        self.nodes[n].free_reduces += 1;
        self.nodes[n].running = self.nodes[n].running.saturating_sub(1);
        let task = TaskRef { job, idx, attempt, reduce: true };
        if end == End::Ok {
            j.reduces[idx as usize].done = true;
            j.reduces_done += 1;
            let (shuffle_ms, sort_ms) = (run.shuffle_done, run.sort_done);
            j.hist(now, Hist::AttemptEnd { task, node, status: Status::Success, shuffle_ms, sort_ms });
            j.hist(now, Hist::TaskEnd { idx, reduce: true });
            self.job_progress(job);
        } else {
            j.failed_reduces += 1;
            let red = &mut j.reduces[idx as usize];
            red.attempt += 1;
            red.avoid = Some(node);
            self.retry(task, node);
        }
        self.wake(node, now);
    }

    /// A failed attempt: the task runs again elsewhere, first in line, unless it has failed
    /// too often, which fails the job.
    fn retry(&mut self, task: TaskRef, node: u16) {
        let now = self.now;
        let j = &mut self.jobs[task.job as usize];
        j.hist(now, Hist::AttemptEnd { task, node, status: Status::Failed, shuffle_ms: 0, sort_ms: 0 });
        if task.attempt + 1 >= MAX_ATTEMPTS {
            self.abort(task.job, Status::Failed);
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
        self.active.retain(|&a| a != job);
        self.closed.push(job);
        if let Some((at, spec)) = self.source.next(stream, now) {
            self.submit(at, stream, spec);
        }
    }

    /// The JobTracker gives up on a job (a task failed too often) or the user kills it: every
    /// running attempt is killed, and lines it had yet to write are taken back.
    fn abort(&mut self, job: u32, status: Status) {
        if self.jobs[job as usize].state != JobState::Running {
            return;
        }
        let now = self.now;
        let mut killed = Vec::new();
        let j = &mut self.jobs[job as usize];
        for (idx, m) in j.maps.iter_mut().enumerate() {
            if let Some(node) = m.running.take() {
                killed.push((TaskRef { job, idx: idx as u32, attempt: m.attempt, reduce: false }, node));
            }
        }
        for (idx, r) in j.reduces.iter_mut().enumerate() {
            if let Some(run) = r.run.take() {
                killed.push((TaskRef { job, idx: idx as u32, attempt: r.attempt, reduce: true }, run.node));
            }
        }
        for &(task, node) in &killed {
            j.hist(now, Hist::AttemptEnd { task, node, status: Status::Killed, shuffle_ms: 0, sort_ms: 0 });
        }
        let keys: Vec<u64> = killed.iter().map(|(t, _)| t.key()).collect();
        for buf in &mut self.bufs {
            buf.retain(|r| r.ts_ms <= now || !keys.contains(&r.owner));
        }
        for (task, node) in killed {
            let n = usize::from(node);
            self.push(n, now, 0, Line::Kill { task });
            if task.reduce {
                self.push(n, now, 0, Line::SyslogClose { task, done: false });
                self.nodes[n].free_reduces += 1;
            } else {
                self.nodes[n].free_maps += 1;
            }
            self.nodes[n].running = self.nodes[n].running.saturating_sub(1);
            self.wake(node, now);
        }
        self.close(job, status);
    }

    fn submit(&mut self, at: i64, stream: u32, spec: JobSpec) {
        let job = self.jobs.len() as u32;
        let mut rng = Rng::derive(self.spec.seed, Stream::Input, &[u64::from(job)]);
        let nodes = &self.spec.cluster.nodes;
        let maps = (0..spec.maps)
            .map(|_| MapTask {
                attempt: 0,
                running: None,
                done: None,
                replicas: (spec.input_mb > 0.0).then(|| hdfs::existing_replicas(nodes, &mut rng)),
                avoid: None,
                started: false,
                out_mb: 0.0,
            })
            .collect();
        let reduces = (0..spec.reduces).map(|_| ReduceTask { attempt: 0, run: None, done: false, avoid: None, started: false }).collect();
        self.names.push(JobName {
            id: format!("{}_{:04}", self.spec.jt_stamp, job + 1),
            input: format!("/user/{}/{}/in-{:04}", spec.user, spec.name.split([' ', ':']).next().unwrap_or("job"), job + 1),
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
            maps_done: 0,
            reduces_done: 0,
            failed_maps: 0,
            failed_reduces: 0,
            spec,
        });
        self.at(at.max(self.now), Ev::Submit { job });
    }
}
