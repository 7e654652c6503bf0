//! The shuffle: a reduce copies each map's output when the map ends (or when the reduce starts,
//! for maps already done) on one of its copiers, the next free one; copies over a lossy link may
//! time out and be fetched again, and every ten segments in memory are merged. The HADOOP-1152
//! and HADOOP-2080 hangs strike here and stall the reduce.

use std::cmp::Reverse;

use super::{End, Ev, JobSource, PROGRESS_MS, ReduceRun, Sim};
use crate::simulate::faults::{Injected, TASK_TIMEOUT_MS};
use crate::simulate::rng::{Rng, Stream};
use crate::simulate::sadc::Use;
use crate::simulate::writers::{CopyFault, Line, ReducePhase, TaskRef};

/// Map outputs a reduce fetches at once (`mapred.reduce.parallel.copies`).
pub(super) const COPIERS: usize = 5;
/// In-memory segments that start a merge.
const MERGE_SEGMENTS: u16 = 10;
/// The 1152 hang's copier retries the map output whose rename failed this many times.
const RENAME_TRIES: u32 = 3;

impl<S: JobSource> Sim<'_, S> {
    pub(super) fn reduce_run(&mut self, job: u32, r: u32, attempt: u8) -> Option<&mut ReduceRun> {
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
    pub(super) fn copy(&mut self, job: u32, r: u32, attempt: u8, map: u32) {
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
}
