//! Jobs and attempts coming and going: a job submitted, an attempt that ends (the first of a
//! task's attempts to succeed wins and the JobTracker kills the others; a failed one is retried
//! elsewhere, up to `MAX_ATTEMPTS`), an attempt killed, a job closed or given up.

use std::collections::VecDeque;

use super::{End, Ev, Job, JobSource, JobState, MapTask, ReduceTask, Sim};
use crate::simulate::hdfs;
use crate::simulate::jobhistory::{Hist, Status};
use crate::simulate::rng::{Rng, Stream};
use crate::simulate::workload::JobSpec;
use crate::simulate::writers::{JobName, Line, Rec, TaskRef};

/// Failed attempts per task before the job fails (`mapred.map.max.attempts`).
const MAX_ATTEMPTS: u8 = 4;

impl<S: JobSource> Sim<'_, S> {
    pub(super) fn submit(&mut self, at: i64, stream: u32, spec: JobSpec) {
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

    pub(super) fn map_end(&mut self, job: u32, idx: u32, attempt: u8, end: End) {
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

    pub(super) fn reduce_end(&mut self, job: u32, idx: u32, attempt: u8, end: End) {
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
        // Its blocks half written: each DataNode that began to receive one (its `Receiving`
        // is not among the lines the kill takes back) reads an early end of stream.
        for buf in &mut self.bufs {
            let unbegun = |block: i64| {
                buf.iter().any(|r| {
                    r.owner == key && r.ts_ms > now && matches!(r.line, Line::Receiving { block: b, .. } if b == block)
                })
            };
            let cut: Vec<i64> = buf
                .iter()
                .filter_map(|r| match r.line {
                    Line::Received { block, dur_ms, .. }
                        if r.owner == key && r.ts_ms > now && r.ts_ms - i64::from(dur_ms) <= now =>
                    {
                        Some(block)
                    }
                    _ => None,
                })
                .filter(|&block| !unbegun(block))
                .collect();
            buf.extend(cut.into_iter().map(|block| Rec { ts_ms: now, owner: 0, line: Line::ReceiveFailed { block } }));
        }
        // The reports it made until now were made: lay them before dropping the rest.
        let buf = &mut self.bufs[n];
        self.series[n].retain_mut(|s| {
            if s.owner != key {
                return true;
            }
            s.lay(now, buf);
            false
        });
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
    pub(super) fn abort(&mut self, job: u32, status: Status) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::cluster::{Cluster, Conditions, MAP_SLOTS, REDUCE_SLOTS};
    use crate::simulate::scheduler::testing::{attempts, finish, job, running, spec, submitted};

    /// A killed attempt's progress series is laid round by round; the reports it made before
    /// the kill are written all the same, so that it is not silent before it was killed.
    #[test]
    fn a_killed_attempts_reports_until_the_kill_are_written() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(1, 0)]);
        let task = TaskRef { job: 0, idx: 0, attempt: 0, reduce: false };
        sim.progress(1, task, (10_000, 40_000), (0.0, 1.0), None, &mut Rng::new(1));
        sim.now = 30_000;
        sim.kill(task, 1);
        let reports: Vec<i64> =
            sim.bufs[1].iter().filter(|r| matches!(r.line, Line::MapProgress { .. })).map(|r| r.ts_ms).collect();
        assert!(reports.len() >= 6 && reports.iter().all(|&t| t < 30_000), "{reports:?}");
        assert!(reports.last().is_some_and(|&t| t > 30_000 - 3600), "{reports:?}");
        assert!(sim.series[1].is_empty());
    }

    /// Killed while its block went down the pipeline, an attempt's writes fail on every
    /// DataNode that began to receive them, as Hadoop's read an early end of stream.
    #[test]
    fn a_killed_attempts_half_written_block_fails_on_its_datanodes() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(2, 0)]);
        // Not the job's first map, whose key (0) is that of lines no attempt owns.
        let task = TaskRef { job: 0, idx: 1, attempt: 0, reduce: false };
        let end = sim.write_block(0, 1000, 64.0, 3, task, &mut Rng::new(1));
        let written = sim.write_block(0, end + 1, 64.0, 1, task, &mut Rng::new(2));
        sim.now = (end + 1 + written) / 2;
        sim.kill(task, 0);
        let failed = |node: usize| {
            let recs = sim.bufs[node].iter().filter(|r| matches!(r.line, Line::ReceiveFailed { .. }));
            recs.map(|r| r.ts_ms).collect::<Vec<_>>()
        };
        // The first block was written before the kill; the second, to node 0 alone, was not.
        assert_eq!((failed(0), failed(1), failed(2)), (vec![sim.now], vec![], vec![]));
        // Killed within the 2 ms before a pipeline's second DataNode began to receive: only
        // the first fails.
        let mut sim = running(spec(&cluster, None), vec![job(2, 0)]);
        sim.write_block(0, 1000, 64.0, 3, task, &mut Rng::new(1));
        sim.now = 1001;
        sim.kill(task, 0);
        let failed: Vec<usize> =
            (0..3).filter(|&n| sim.bufs[n].iter().any(|r| matches!(r.line, Line::ReceiveFailed { .. }))).collect();
        assert_eq!(failed, vec![0]);
    }

    #[test]
    fn a_map_that_always_fails_fails_its_job_at_the_fourth_failure_each_try_on_another_node() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut poisoned = job(3, 1);
        poisoned.poison_map = Some(1);
        let mut sim = submitted(spec(&cluster, None), vec![poisoned]);
        finish(&mut sim);
        let j = &sim.jobs[0];
        assert_eq!(j.state, JobState::Done(Status::Failed));
        let ends = attempts(&sim, 0);
        let tries: Vec<(u8, u16, Status)> =
            ends.iter().filter(|e| e.0.idx == 1 && !e.0.reduce).map(|&(t, node, s)| (t.attempt, node, s)).collect();
        assert_eq!(
            tries.iter().map(|t| (t.0, t.2)).collect::<Vec<_>>(),
            (0..4).map(|a| (a, Status::Failed)).collect::<Vec<_>>()
        );
        assert!(tries.windows(2).all(|w| w[0].1 != w[1].1), "{tries:?}");
        // The reduce, waiting for the poisoned map's output, is killed with the job.
        assert_eq!(ends.last().map(|e| (e.0.reduce, e.2)), Some((true, Status::Killed)));
        let Some(Hist::JobEnd { status, maps, failed_maps, failed_reduces, .. }) = j.history.last().map(|h| h.h) else {
            panic!("no end")
        };
        assert_eq!((status, maps, failed_maps, failed_reduces), (Status::Failed, 2, 4, 0));
        let errors = sim.bufs.iter().flatten().filter(|r| matches!(r.line, Line::ChildError { .. })).count();
        assert_eq!(errors, 4);
    }

    /// On M45's nodes (6 map slots each), a reduce with a bad record: every map runs, once each,
    /// and all six of a node's slots are used at once; each reduce attempt fails after its
    /// shuffle, each on another node, and the fourth fails the job.
    #[test]
    fn a_reduce_that_always_fails_fails_its_job_after_every_map_has_run() {
        let cluster = Cluster::first(3, 1, Conditions::default()).m45();
        let mut poisoned = job(18, 2);
        poisoned.poison_reduce = Some(0);
        let mut first = running(spec(&cluster, None), vec![poisoned.clone()]);
        first.assign(0);
        assert_eq!((first.nodes[0].free_maps, first.nodes[0].running), (0, 8), "six maps and two reduces at once");
        let mut sim = submitted(spec(&cluster, None), vec![poisoned]);
        finish(&mut sim);
        let j = &sim.jobs[0];
        assert_eq!(j.state, JobState::Done(Status::Failed));
        let ends = attempts(&sim, 0);
        let maps: Vec<Status> = ends.iter().filter(|e| !e.0.reduce).map(|e| e.2).collect();
        assert_eq!(maps, vec![Status::Success; 18]);
        let last_map = j.maps.iter().filter_map(|m| m.done.map(|d| d.0)).max();
        let tries: Vec<(u8, u16, Status)> =
            ends.iter().filter(|e| e.0.reduce && e.0.idx == 0).map(|&(t, node, s)| (t.attempt, node, s)).collect();
        assert_eq!(
            tries.iter().map(|t| (t.0, t.2)).collect::<Vec<_>>(),
            (0..4).map(|a| (a, Status::Failed)).collect::<Vec<_>>()
        );
        assert!(tries.windows(2).all(|w| w[0].1 != w[1].1), "{tries:?}");
        let errors: Vec<i64> = sim
            .bufs
            .iter()
            .flatten()
            .filter(|r| matches!(r.line, Line::ChildError { task } if task.reduce))
            .map(|r| r.ts_ms)
            .collect();
        assert_eq!(errors.len(), 4);
        assert!(errors.iter().all(|&t| Some(t) > last_map), "{errors:?} after {last_map:?}");
        let reduce0 = |l: &Line| match l {
            Line::Done { task } | Line::SyslogClose { task, done: true } => task.reduce && task.idx == 0,
            _ => false,
        };
        assert!(!sim.bufs.iter().flatten().any(|r| reduce0(&r.line)), "the poisoned reduce never finishes");
        let Some(Hist::JobEnd { status, failed_maps, failed_reduces, .. }) = j.history.last().map(|h| h.h) else {
            panic!("no end")
        };
        assert_eq!((status, failed_maps, failed_reduces), (Status::Failed, 0, 4));
        for node in &sim.nodes {
            assert_eq!((node.free_maps, node.free_reduces, node.running), (6, 2, 0));
        }
    }

    #[test]
    fn a_job_its_user_kills_kills_every_running_attempt_and_frees_their_slots() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut long = job(8, 1);
        long.map_fixed_s = 120.0;
        long.kill_after_ms = Some(30_000);
        let mut sim = submitted(spec(&cluster, None), vec![long]);
        finish(&mut sim);
        let j = &sim.jobs[0];
        assert_eq!((j.state, j.finish_ms), (JobState::Done(Status::Killed), Some(30_000)));
        // Two maps on each node and the reduce were running; the other two maps never started.
        let ends = attempts(&sim, 0);
        assert_eq!(ends.len(), 7);
        assert!(ends.iter().all(|e| e.2 == Status::Killed), "{ends:?}");
        assert_eq!(ends.iter().filter(|e| e.0.reduce).count(), 1);
        let end = Hist::JobEnd { status: Status::Killed, maps: 0, reduces: 0, failed_maps: 0, failed_reduces: 0 };
        assert_eq!(j.history.last().map(|h| h.h), Some(end));
        let mut killed: Vec<(u64, i64)> = ends.iter().map(|e| (e.0.key(), 30_000)).collect();
        killed.sort();
        assert_eq!(sim.killed, killed);
        let kills: Vec<i64> =
            sim.bufs.iter().flatten().filter(|r| matches!(r.line, Line::Kill { .. })).map(|r| r.ts_ms).collect();
        assert_eq!(kills, vec![30_000; 7]);
        // Nothing of theirs is left to lay down or to charge.
        assert!(sim.series.iter().all(Vec::is_empty) && sim.used.is_empty());
        for node in &sim.nodes {
            assert_eq!((node.free_maps, node.free_reduces, node.running), (MAP_SLOTS, REDUCE_SLOTS, 0));
        }
    }
}
