//! A reduce attempt: launched, it copies the outputs of the maps already done (`shuffle`); once
//! every output is in, its last merge, sort, reduce and output write through HDFS are timed.

use std::collections::BinaryHeap;

use super::shuffle::{COPIERS, COPY_PING_MS};
use super::{End, Ev, JobSource, ReduceRun, Sim};
use crate::simulate::hdfs::BLOCK_MB;
use crate::simulate::jobhistory::Hist;
use crate::simulate::rng::{Rng, Stream};
use crate::simulate::sadc::Use;
use crate::simulate::writers::{Line, ReducePhase, TaskRef};

impl<S: JobSource> Sim<'_, S> {
    pub(super) fn launch_reduce(&mut self, job: u32, idx: u32, node: u16) {
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
            unanswered: [false; COPIERS],
            copies_end: start,
            copied: 0,
            copied_mb: 0.0,
            max_map_ms: 0,
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
        self.at(start + COPY_PING_MS, Ev::CopyPing { job, idx, attempt });
        let j = &mut self.jobs[job as usize];
        let done: Vec<u32> = (0..maps).filter(|m| j.maps[*m as usize].done.is_some()).collect();
        for m in done {
            self.copy(job, idx, attempt, m);
        }
        self.maybe_finish_copies(job, idx, attempt);
    }

    /// Once every map's output is in: the last merge, sort, reduce and output write.
    pub(super) fn maybe_finish_copies(&mut self, job: u32, r: u32, attempt: u8) {
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
        let mut t = run.copies_end.max(run.merge_free).max(self.now);
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
        let cpu_ms = total_mb * spec.reduce_cpu_s_per_mb * rng.jitter(0.04) * self.straggle(&mut rng)
            / self.cpu_rate(node, t)
            * 1000.0;
        if spec.poison_reduce == Some(r) {
            // A bad record: the reduce function throws a second or more into its input.
            let failed = t + 1000 + (cpu_ms * rng.range(0.0, 0.5)) as i64;
            self.use_rate(owner, node, (t, failed), Use::Cpu, 1.0);
            self.progress(node, task, (t, failed), (0.6667, 0.7), Some(ReducePhase::Reduce), &mut rng);
            self.push(node, failed, owner, Line::ChildError { task });
            self.push(node, failed, owner, Line::SyslogClose { task, done: false });
            self.use_rate(owner, node, (start, failed), Use::Tasks, 1.0);
            if let Some(run) = self.reduce_run(job, r, attempt) {
                // The tail the JobTracker reads progress from, so that it stands at 0.7 at the
                // failure as the TaskTracker reports, not at 1.
                run.tail = Some((shuffle_done, sort_done, sort_done + (failed - sort_done) * 10));
            }
            self.at(failed, Ev::ReduceEnd { job, idx: r, attempt, end: End::Failed });
            return;
        }
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
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;

    use super::*;
    use crate::simulate::cluster::{Cluster, Conditions};
    use crate::simulate::scheduler::testing::{job, running, spec};

    #[test]
    fn a_reduce_copies_the_maps_done_and_once_all_are_in_sorts_reduces_and_writes_its_output() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(2, 1)]);
        let task = TaskRef { job: 0, idx: 0, attempt: 0, reduce: true };
        sim.jobs[0].maps[0].done = Some((5_000, 1, 0));
        sim.jobs[0].maps[0].out_mb = 50.0;
        sim.now = 10_000;
        sim.launch_reduce(0, 0, 0);
        let run = &sim.jobs[0].reduces[0].runs[0];
        assert_eq!((run.copied, run.tail, run.port), (1, None, 40_001));
        // One copier has fetched the output; the others have been free since the start.
        assert_eq!(run.lanes.iter().filter(|&&free| free == run.start).count(), COPIERS - 1);
        let opened: Vec<i64> =
            sim.bufs[0].iter().filter(|r| r.line == Line::SyslogOpen { task, maps: 2 }).map(|r| r.ts_ms).collect();
        assert_eq!(opened, [run.start]);
        // The second map ends: the reduce has all it needs.
        sim.jobs[0].maps[1].done = Some((20_000, 2, 0));
        sim.jobs[0].maps[1].out_mb = 50.0;
        sim.jobs[0].maps_done = 2;
        sim.now = 20_000;
        sim.copy(0, 0, 0, 1);
        sim.maybe_finish_copies(0, 0, 0);
        let run = &sim.jobs[0].reduces[0].runs[0];
        let Some((shuffled, sorted, end)) = run.tail else { panic!("no tail") };
        assert!(20_000 < shuffled && shuffled < sorted && sorted < end, "{:?}", run.tail);
        let closing: Vec<(i64, Line)> = sim.bufs[0].iter().rev().take(2).map(|r| (r.ts_ms, r.line)).collect();
        assert_eq!(closing, [(end, Line::SyslogClose { task, done: true }), (end, Line::Done { task })]);
        let ok = Ev::ReduceEnd { job: 0, idx: 0, attempt: 0, end: End::Ok };
        assert!(sim.events.iter().any(|Reverse((t, _, ev))| (*t, *ev) == (end, ok)));
        // About 100 MB out: two blocks from the reduce's own DataNode down a pipeline of three.
        let sizes: Vec<u32> = sim.bufs[0]
            .iter()
            .filter_map(|r| match r.line {
                Line::Received { size, client, .. } if client == task => Some(size),
                _ => None,
            })
            .collect();
        assert_eq!(sizes, [64 << 20, ((run.copied_mb - 64.0) * 1048576.0) as u32]);
        let receives = sim.bufs.iter().flatten().filter(|r| matches!(r.line, Line::Receiving { .. })).count();
        assert_eq!(receives, 2 * 3);
        // Once done, it does not finish twice.
        let lines = sim.bufs[0].len();
        sim.maybe_finish_copies(0, 0, 0);
        assert_eq!(sim.bufs[0].len(), lines);
    }
}
