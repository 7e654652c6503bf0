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
