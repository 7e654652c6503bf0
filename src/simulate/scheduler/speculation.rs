//! Speculative execution (on by default in 0.18 and 0.20, `mapred.*.tasks.speculative.execution`):
//! once a job has no task of a kind left to start, a running task at least 20% behind the job's
//! average progress (`SPECULATIVE_GAP`), begun at least a minute ago (`SPECULATIVE_LAG`) and with
//! one attempt only, gets a second attempt on a node with a free slot that has not run it. The
//! first attempt to finish wins; the JobTracker kills the other (`KILLED` in the job history,
//! `Received KillTaskAction` in its TaskTracker's log), and the killed attempt's lines still to
//! come are never written (see `lifecycle`).

use super::{Ev, HEARTBEAT_MS, JobSource, JobState, Sim};

/// `TaskInProgress.SPECULATIVE_GAP` and `SPECULATIVE_LAG` (0.18, 0.20).
const SPECULATIVE_GAP: f32 = 0.2;
const SPECULATIVE_LAG_MS: i64 = 60_000;

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

impl<S: JobSource> Sim<'_, S> {
    /// Speculative execution: backup attempts for the job's stragglers, on nodes with a free
    /// slot, once it has no task of that kind left to start.
    pub(super) fn speculate(&mut self, job: u32) {
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
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::simulate::cluster::{Cluster, Conditions};
    use crate::simulate::jobhistory::Status;
    use crate::simulate::scheduler::testing::{attempts, job, running, spec};
    use crate::simulate::scheduler::{End, Prog};
    use crate::simulate::writers::{Line, TaskRef};

    #[test]
    fn stragglers_are_the_eligible_tasks_a_fifth_behind_the_average_least_progressed_first() {
        // Eight tasks, two done: the average is (2 + 1.75) / 8 = 0.46875.
        let progress = vec![(3, 0.75), (4, 0.5), (5, 0.25), (6, 0.25), (7, 0.0), (2, 0.0)];
        assert_eq!(stragglers(progress.clone(), 2, 8, |i| i != 6), vec![2, 7, 5]);
        assert_eq!(stragglers(progress.clone(), 2, 8, |_| true), vec![2, 7, 5, 6]);
        // 0.1875 behind is not enough; 0.3125 is.
        let progress = vec![(0, 1.0), (1, 0.5), (2, 0.3125), (3, 0.1875)];
        assert_eq!(stragglers(progress, 0, 4, |_| true), vec![3]);
        // Finished tasks count as done: the same two tasks are stragglers only beside six done.
        let progress = vec![(0, 0.5), (1, 0.75)];
        assert_eq!(stragglers(progress.clone(), 0, 8, |_| true), Vec::<u32>::new());
        assert_eq!(stragglers(progress, 6, 8, |_| true), vec![0]);
        assert_eq!(stragglers(Vec::new(), 0, 0, |_| true), Vec::<u32>::new());
    }

    #[test]
    fn a_backup_goes_to_a_free_node_that_neither_runs_nor_failed_the_task_replica_holders_first() {
        let cluster = Cluster::first(5, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(1, 1)]);
        sim.jobs[0].maps[0].replicas = Some([1, 2, 3]);
        sim.launch_map(0, 0, 1);
        sim.jobs[0].maps[0].avoid = Some(2);
        assert_eq!(sim.backup_node(0, 0, false), Some(3));
        sim.nodes[3].free_maps = 0;
        let picks: BTreeSet<u16> = (0..50).filter_map(|_| sim.backup_node(0, 0, false)).collect();
        assert_eq!(picks, BTreeSet::from([0, 4]));
        sim.nodes[0].free_maps = 0;
        sim.nodes[4].free_maps = 0;
        assert_eq!(sim.backup_node(0, 0, false), None);
        // A reduce's backup needs a free reduce slot.
        sim.launch_reduce(0, 0, 0);
        sim.nodes[4].free_reduces = 0;
        let picks: BTreeSet<u16> = (0..50).filter_map(|_| sim.backup_node(0, 0, true)).collect();
        assert_eq!(picks, BTreeSet::from([1, 2, 3]));
    }

    #[test]
    fn a_straggler_gets_one_backup_and_the_first_to_finish_wins() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(2, 0)]);
        sim.jobs[0].pending_maps.clear();
        sim.launch_map(0, 0, 0);
        sim.launch_map(0, 1, 1);
        // Map 0 crawls, map 1 keeps up.
        sim.jobs[0].maps[0].runs[0].prog = Prog { t0: 0, t1: 1_000_000, f0: 0.0, f1: 1.0 };
        sim.jobs[0].maps[1].runs[0].prog = Prog { t0: 0, t1: 100_000, f0: 0.0, f1: 1.0 };
        sim.now = 59_000;
        sim.speculate(0);
        assert_eq!(sim.jobs[0].maps[0].runs.len(), 1, "not a minute old");
        sim.now = 61_000;
        sim.speculate(0);
        let runs: Vec<(u8, u16)> = sim.jobs[0].maps[0].runs.iter().map(|r| (r.attempt, r.node)).collect();
        assert_eq!((runs.len(), runs[0], runs[1].0), (2, (0, 0), 1));
        assert_ne!(runs[1].1, 0);
        assert_eq!(sim.jobs[0].maps[1].runs.len(), 1);
        sim.now = 64_000;
        sim.speculate(0);
        assert_eq!((sim.jobs[0].maps[0].runs.len(), sim.jobs[0].maps[0].next_attempt), (2, 2), "one backup only");
        // The backup ends first: the original is killed, and its own end changes nothing.
        let (original, backup) = (TaskRef { job: 0, idx: 0, attempt: 0, reduce: false }, runs[1].1);
        sim.now = 80_000;
        sim.map_end(0, 0, 1, End::Ok);
        sim.map_end(0, 0, 0, End::Ok);
        let ends = vec![(TaskRef { attempt: 1, ..original }, backup, Status::Success), (original, 0, Status::Killed)];
        assert_eq!(attempts(&sim, 0), ends);
        assert_eq!((sim.jobs[0].maps[0].done, sim.jobs[0].maps_done), (Some((80_000, backup, 1)), 1));
        assert_eq!(sim.killed, vec![(original.key(), 80_000)]);
        let kills: Vec<(usize, i64)> = (0..3)
            .flat_map(|n| {
                sim.bufs[n].iter().filter(|r| r.line == Line::Kill { task: original }).map(move |r| (n, r.ts_ms))
            })
            .collect();
        assert_eq!(kills, vec![(0, 80_000)]);
        assert_eq!(sim.nodes[0].free_maps, 2, "the killed attempt's slot is free again");
    }
}
