//! The shuffle: a reduce copies each map's output when the map ends (or when the reduce starts,
//! for maps already done) on one of its copiers, the next free one; a try over a lossy link, or a
//! stray failure, times out and is tried again after Hadoop's backoff, and every ten segments in
//! memory are merged. The HADOOP-1152 and HADOOP-2080 hangs strike here and stall the reduce.

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
/// How long a copy that gets no answer takes to fail.
const COPY_TIMEOUT_MS: i64 = 30_000;
/// A bound on one output's failed tries, so that a share of 1 ends: Hadoop's JobTracker would
/// re-run a map once three reduces (from 0.20, and half of those running) reported it, which
/// the simulator leaves out (at 50% loss a copy fails this often once in 130,000).
const MAX_COPY_FAILURES: u32 = 6;

/// Hadoop's `maxFetchRetriesPerMap`: the failed tries of one output after which a reduce reports
/// it to the JobTracker, and past which its backoff stops doubling. At least 2, more for longer
/// maps: the exponent of the power of two closest to `max_map_ms / 4000 + 1` (`ReduceTask`'s
/// `getClosestPowerOf2`).
pub(super) fn fetch_retries_per_map(max_map_ms: i64) -> u32 {
    let value = (max_map_ms / BACKOFF_INIT_MS + 1).max(1);
    let power = 64 - (value - 1).leading_zeros();
    let closer_below = power > 0 && value - (1 << (power - 1)) < (1 << power) - value;
    (power - u32::from(closer_below)).max(2)
}

/// The wait after a reduce's `failures`-th failed try of one output: 4 s doubling while
/// `failures` is at most `retries_per_map`, then half of `mapred.reduce.copy.backoff` (300 s).
fn fetch_backoff_ms(failures: u32, retries_per_map: u32) -> i64 {
    if failures <= retries_per_map { BACKOFF_INIT_MS << (failures - 1).min(20) } else { 150_000 }
}

/// `ReduceTask.BACKOFF_INIT`.
const BACKOFF_INIT_MS: i64 = 4000;

/// A copying reduce with no copy in flight reports progress and sleeps this long, "as we don't
/// want TT to think we're stuck and kill us" (`ReduceCopier.fetchOutputs`), and its copiers
/// report as bytes arrive: a live reduce is silent only while its copies get no answer, a hung
/// one is silent.
pub(super) const COPY_PING_MS: i64 = 5000;

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

    /// The copier loop's report while the reduce waits for map outputs, until its copy phase
    /// ends, it hangs or it is gone.
    pub(super) fn copy_ping(&mut self, job: u32, r: u32, attempt: u8) {
        let now = self.now;
        let j = &mut self.jobs[job as usize];
        let maps = j.spec.maps;
        let task = TaskRef { job, idx: r, attempt, reduce: true };
        // A finished job's tasks are gone.
        let Some(run) =
            j.reduces.get_mut(r as usize).and_then(|red| red.runs.iter_mut().find(|x| x.attempt == attempt))
        else {
            return;
        };
        let copying =
            run.stall.is_none_or(|(at, _)| now < at) && run.tail.is_none_or(|(shuffled, _, _)| now < shuffled);
        if !copying {
            return;
        }
        // Silent while its only copies in flight are tries that get no answer: Hadoop's loop
        // then waits on its copiers, and a copier reports progress only as bytes arrive.
        let mut busy = (0..COPIERS).filter(|&l| run.lanes[l] > now).peekable();
        if busy.peek().is_some() && busy.all(|l| run.unanswered[l]) {
            self.at(now + COPY_PING_MS, Ev::CopyPing { job, idx: r, attempt });
            return;
        }
        // Beside the reports of its copies, which it plans ahead: whether one falls in the last
        // seconds is not known here, and a report too many is harmless.
        let node = usize::from(run.node);
        let landed = run.copied - run.in_flight.iter().filter(|Reverse(end)| *end > now).count() as u32;
        let secs = ((now - run.start) as f64 / 1000.0).max(0.001);
        let phase = ReducePhase::Copy { done: landed, total: maps, mb_s: (run.copied_mb / secs) as f32 };
        let line = Line::ReduceProgress { task, frac: landed as f32 / maps as f32 / 3.0, phase };
        self.push(node, now, task.key(), line);
        self.at(now + COPY_PING_MS, Ev::CopyPing { job, idx: r, attempt });
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
        let map_ms = map_end - j.maps[map as usize].started.unwrap_or(map_end);
        let max_map_ms = run.max_map_ms.max(map_ms);
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
        // A try that fails (a lossy link, or a stray failure on a healthy one) times out and the
        // output is tried again after Hadoop's backoff (`ReduceTask`'s penalty box).
        let stray = if from_n == node { 0.0 } else { self.spec.cluster.fetch_failures };
        let retries_per_map = fetch_retries_per_map(max_map_ms);
        let mut failures = 0;
        // The copier moves on after a failed try; the output waits in Hadoop's penalty box and
        // the try after the backoff runs beside the copier's next copies.
        let mut copier_free = None;
        while failures < MAX_COPY_FAILURES {
            let lossy_p = Injected::link(self.spec.fault.as_ref(), from_n, node, start).fail_p;
            let fail_p = if stray > 0.0 { 1.0 - (1.0 - lossy_p) * (1.0 - stray) } else { lossy_p };
            if !rng.chance(fail_p) {
                break;
            }
            failures += 1;
            self.push(node, start, owner, Line::CopyStart { reduce: task, map: map_task, from, bytes });
            start += COPY_TIMEOUT_MS;
            copier_free.get_or_insert(start);
            self.push(
                node,
                start,
                owner,
                Line::CopyFailed { reduce: task, map: map_task, from, why: CopyFault::Timeout },
            );
            start += fetch_backoff_ms(failures, retries_per_map);
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
        run.lanes[lane] = copier_free.unwrap_or(end);
        run.unanswered[lane] = copier_free.is_some();
        run.copies_end = run.copies_end.max(end);
        run.max_map_ms = max_map_ms;
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::simulate::cluster::{Cluster, Conditions};
    use crate::simulate::faults::Fault;
    use crate::simulate::scheduler::testing::{Jobs, job, running, spec};

    /// A reduce launched on node 0 at 10 s, when the first `done` of the job's maps have ended
    /// on nodes 1 and 2 in turn, each with `out_mb` of output.
    fn reduce_after_maps(
        cluster: &Cluster,
        fault: Option<Injected>,
        maps: u32,
        done: u32,
        out_mb: f64,
    ) -> Sim<'_, Jobs> {
        let mut sim = running(spec(cluster, fault), vec![job(maps, 1)]);
        for (i, m) in sim.jobs[0].maps.iter_mut().take(done as usize).enumerate() {
            m.done = Some((10_000, 1 + (i % 2) as u16, 0));
            m.out_mb = out_mb;
        }
        sim.now = 10_000;
        sim.launch_reduce(0, 0, 0);
        sim
    }

    /// The reduce's copy lines, per map: when each copy started, failed and ended.
    fn copies(sim: &Sim<Jobs>) -> BTreeMap<u32, Vec<(i64, &'static str)>> {
        let mut per_map: BTreeMap<u32, Vec<(i64, &'static str)>> = BTreeMap::new();
        for r in &sim.bufs[0] {
            let (map, what) = match r.line {
                Line::CopyStart { map, .. } => (map, "start"),
                Line::CopyFailed { map, why: CopyFault::Timeout, .. } => (map, "timeout"),
                Line::CopyFailed { map, why: CopyFault::Rename, .. } => (map, "rename"),
                Line::CopyDone { map, .. } => (map, "done"),
                _ => continue,
            };
            per_map.entry(map.idx).or_default().push((r.ts_ms, what));
        }
        per_map
    }

    /// The files of the merges begun, and (files, merge number) of those done.
    fn merges(sim: &Sim<Jobs>) -> (Vec<u16>, Vec<(u16, u16)>) {
        let started = sim.bufs[0]
            .iter()
            .filter_map(|r| match r.line {
                Line::MergeStart { files, .. } => Some(files),
                _ => None,
            })
            .collect();
        let done = sim.bufs[0]
            .iter()
            .filter_map(|r| match r.line {
                Line::MergeDone { files, merge, .. } => Some((files, merge)),
                _ => None,
            })
            .collect();
        (started, done)
    }

    #[test]
    fn at_most_five_copies_run_at_once_the_next_on_the_first_copier_free() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let sim = reduce_after_maps(&cluster, None, 12, 12, 200.0);
        let spans: Vec<(i64, i64)> = copies(&sim)
            .values()
            .map(|lines| match lines[..] {
                [(start, "start"), (end, "done")] => (start, end),
                _ => panic!("{lines:?}"),
            })
            .collect();
        assert_eq!(spans.len(), 12);
        let mut edges: Vec<(i64, i32)> = spans.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
        edges.sort();
        let (mut at_once, mut most) = (0, 0);
        for (_, step) in edges {
            at_once += step;
            most = most.max(at_once);
        }
        assert_eq!(most, COPIERS as i32);
        // Past the first five, each copy starts the moment another ends.
        let ends: Vec<i64> = spans.iter().map(|s| s.1).collect();
        assert_eq!(spans.iter().filter(|s| ends.contains(&s.0)).count(), 12 - COPIERS);
        let served = sim.bufs[1..].iter().flatten().filter(|r| matches!(r.line, Line::ShuffleServed { .. })).count();
        assert_eq!((sim.jobs[0].reduces[0].runs[0].copied, served), (12, 12));
    }

    #[test]
    fn every_ten_segments_in_memory_are_merged_and_the_rest_once_the_shuffle_is_complete() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = reduce_after_maps(&cluster, None, 25, 23, 1.0);
        assert_eq!(merges(&sim), (vec![10, 10], vec![(10, 1), (10, 2)]));
        let run = &sim.jobs[0].reduces[0].runs[0];
        assert_eq!((run.copied, run.batch_files, run.merges, run.tail), (23, 3, 2, None));
        for m in 23..25 {
            sim.jobs[0].maps[m as usize].done = Some((20_000, 1, 0));
            sim.copy(0, 0, 0, m);
        }
        sim.jobs[0].maps_done = 25;
        sim.maybe_finish_copies(0, 0, 0);
        assert_eq!(merges(&sim), (vec![10, 10, 5], vec![(10, 1), (10, 2), (5, 3)]));
        let Some((_, _, end)) = sim.jobs[0].reduces[0].runs[0].tail else { panic!("no tail") };
        let ok = Ev::ReduceEnd { job: 0, idx: 0, attempt: 0, end: End::Ok };
        assert!(sim.events.iter().any(|Reverse((t, _, ev))| (*t, *ev) == (end, ok)));
    }

    #[test]
    fn a_copy_that_times_out_on_a_lossy_link_is_tried_again_after_hadoops_backoff() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let lossy = Injected::new(Fault::PacketLoss50, 1, 0, 3_600_000, 60.0);
        let mut sim = reduce_after_maps(&cluster, Some(lossy), 200, 200, 1.0);
        sim.jobs[0].maps_done = 200;
        sim.maybe_finish_copies(0, 0, 0);
        let per_map = copies(&sim);
        assert_eq!(per_map.len(), 200);
        // A copier moves on while a failed output waits, but the shuffle ends with the last copy.
        let last_copy = per_map.values().filter_map(|lines| lines.last()).map(|l| l.0).max().unwrap();
        let Some((shuffled, _, _)) = sim.jobs[0].reduces[0].runs[0].tail else { panic!("no tail") };
        assert!(shuffled >= last_copy, "shuffle done at {shuffled}, a copy at {last_copy}");
        let mut failed_tries = BTreeMap::new();
        for (map, lines) in per_map {
            let (tries, last) = lines.split_at(lines.len() - 2);
            assert!(matches!(last, [(_, "start"), (_, "done")]), "map {map}: {lines:?}");
            let failures = tries.len() / 2;
            for (k, pair) in tries.chunks(2).enumerate() {
                let [(start, "start"), (timeout, "timeout")] = pair else { panic!("map {map}: {lines:?}") };
                // The maps took no time, so Hadoop reports after 2 failures and waits 4 s, 8 s,
                // then 150 s.
                let next = lines[2 * k + 2].0;
                assert_eq!((timeout - start, next - timeout), (30_000, [4000, 8000, 150_000][k.min(2)]), "map {map}");
            }
            if failures > 0 {
                assert_eq!(map % 2, 0, "map {map} ran on node 2, not the lossy node");
            }
            *failed_tries.entry(failures).or_insert(0) += 1;
        }
        // One try in seven fails: of the 100 maps on the lossy node about 12 once, 1 or 2 twice.
        assert!(failed_tries[&0] >= 160 && failed_tries.get(&1).is_some_and(|&n| n >= 8), "{failed_tries:?}");
        assert!(failed_tries.keys().any(|&k| k >= 2), "{failed_tries:?}");
    }

    #[test]
    fn hadoop_reports_a_map_output_after_two_to_four_failed_tries_by_the_maps_run_time() {
        let reported_after = |secs: i64| fetch_retries_per_map(secs * 1000);
        assert_eq!([0, 19, 20, 43, 44, 91, 92, 200].map(reported_after), [2, 2, 3, 3, 4, 4, 5, 6]);
        assert_eq!((1..=4).map(|k| fetch_backoff_ms(k, 3)).collect::<Vec<_>>(), [4000, 8000, 16_000, 150_000]);
    }

    #[test]
    fn hadoop_1152_fails_the_last_copy_three_times_and_stalls_the_reduce() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let hang = Injected::new(Fault::Hang1152, 0, 0, 3_600_000, 60.0);
        let mut sim = reduce_after_maps(&cluster, Some(hang), 4, 4, 1.0);
        let per_map = copies(&sim);
        assert!((0..3).all(|m| per_map[&m].iter().map(|l| l.1).eq(["start", "done"])), "{per_map:?}");
        let last: Vec<&str> = per_map[&3].iter().map(|l| l.1).collect();
        assert_eq!(last, ["start", "rename", "start", "rename", "start", "rename"]);
        let hung_at = per_map[&3][0].0;
        let task = TaskRef { job: 0, idx: 0, attempt: 0, reduce: true };
        assert_eq!(sim.struck, Some((hung_at, task)));
        assert_eq!(sim.jobs[0].reduces[0].runs[0].stall, Some((hung_at, 3.0 / 4.0 / 3.0)));
        let timeouts: Vec<i64> =
            sim.bufs[0].iter().filter(|r| r.line == Line::Timeout { task }).map(|r| r.ts_ms).collect();
        assert!(timeouts.len() == 1 && timeouts[0] >= hung_at + TASK_TIMEOUT_MS, "{timeouts:?}");
        let timed_out = Ev::ReduceEnd { job: 0, idx: 0, attempt: 0, end: End::TimedOut };
        assert!(sim.events.iter().any(|Reverse((t, _, ev))| (*t, *ev) == (timeouts[0], timed_out)));
        // A hung reduce copies nothing more.
        let lines = sim.bufs[0].len();
        sim.copy(0, 0, 0, 0);
        assert_eq!(sim.bufs[0].len(), lines);
    }

    /// The reduce's progress reports up to `until`, its copier loop's included.
    fn reports_until(sim: &mut Sim<Jobs>, until: i64) -> Vec<i64> {
        while let Some(Reverse((t, _, ev))) = sim.events.pop() {
            if t >= until {
                break;
            }
            if matches!(ev, Ev::CopyPing { .. }) {
                sim.now = t;
                sim.handle(ev);
            }
        }
        let mut reports: Vec<i64> =
            sim.bufs[0].iter().filter(|r| matches!(r.line, Line::ReduceProgress { .. })).map(|r| r.ts_ms).collect();
        reports.sort_unstable();
        reports
    }

    /// A reduce waiting for map outputs says it is alive every 5 s, as Hadoop's copier loop
    /// does, but not while its copies get no answer; once hung (HADOOP-1152) it says no more.
    #[test]
    fn a_waiting_reduce_reports_every_five_seconds_until_it_hangs() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut waiting = reduce_after_maps(&cluster, None, 4, 2, 1.0);
        let start = waiting.jobs[0].reduces[0].runs[0].start;
        let reports = reports_until(&mut waiting, 60_000);
        assert!(reports[0] <= start + COPY_PING_MS, "{reports:?}");
        assert!(reports.windows(2).all(|w| w[1] - w[0] <= COPY_PING_MS), "{reports:?}");
        assert!(reports.last().is_some_and(|&t| t > 60_000 - COPY_PING_MS), "{reports:?}");

        // A try waiting out its timeout until 40 s, no other copy in flight: no report
        // meanwhile. A slow transfer instead reports as its bytes arrive.
        for (unanswered, silent) in [(true, true), (false, false)] {
            let mut stalled = reduce_after_maps(&cluster, None, 4, 2, 1.0);
            let run = &mut stalled.jobs[0].reduces[0].runs[0];
            (run.lanes[0], run.unanswered[0]) = (40_000, unanswered);
            let lands = run.copies_end;
            let reports = reports_until(&mut stalled, 60_000);
            let meanwhile = reports.iter().filter(|&&t| t > lands && t < 40_000).count();
            assert_eq!(meanwhile == 0, silent, "{reports:?}");
            assert!(reports.iter().any(|&t| t >= 40_000), "{reports:?}");
        }

        let hang = Injected::new(Fault::Hang1152, 0, 0, 3_600_000, 60.0);
        let mut hung = reduce_after_maps(&cluster, Some(hang), 4, 4, 1.0);
        let hung_at = hung.struck.map(|(at, _)| at).unwrap();
        let reports = reports_until(&mut hung, 60_000);
        // It hangs on its last copy, a second or so in: before its loop would first report.
        assert!(reports.iter().all(|&t| t <= hung_at), "{reports:?} hung at {hung_at}");
    }

    #[test]
    fn hadoop_2080_leaves_the_first_in_memory_merge_open_and_the_copies_stop() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let hang = Injected::new(Fault::Hang2080, 0, 0, 3_600_000, 60.0);
        let sim = reduce_after_maps(&cluster, Some(hang), 15, 15, 1.0);
        assert_eq!(merges(&sim), (vec![MERGE_SEGMENTS], vec![]));
        assert_eq!(copies(&sim).len(), 10);
        let merge_at = sim.bufs[0].iter().find(|r| matches!(r.line, Line::MergeStart { .. })).unwrap().ts_ms;
        let run = &sim.jobs[0].reduces[0].runs[0];
        assert_eq!((run.copied, run.stall), (10, Some((merge_at, 9.0 / 15.0 / 3.0))));
        assert_eq!(sim.struck, Some((merge_at, TaskRef { job: 0, idx: 0, attempt: 0, reduce: true })));
    }
}
