//! The JobTracker's placement of tasks: a TaskTracker with a free slot asks for work on its next
//! heartbeat and gets the oldest running job's pending tasks, a map whose input block it holds
//! before any other, as many as its free map and reduce slots.

use super::{Ev, Job, JobSource, Sim};
use crate::simulate::Version;

impl<S: JobSource> Sim<'_, S> {
    /// The node's next heartbeat after `t`, when it will ask for work.
    pub(super) fn wake(&mut self, node: u16, t: i64) {
        let state = &mut self.nodes[usize::from(node)];
        if state.heartbeat_due || (state.free_maps == 0 && state.free_reduces == 0) {
            return;
        }
        state.heartbeat_due = true;
        let delay = 300 + self.rng.below(2700) as i64;
        self.at(t.max(self.now) + delay, Ev::Heartbeat { node });
    }

    pub(super) fn wake_all(&mut self) {
        for n in 0..self.nodes.len() {
            self.wake(n as u16, self.now);
        }
    }

    pub(super) fn assign(&mut self, node: u16) {
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

    /// Frees an attempt's slot when it ends, whatever the way.
    pub(super) fn free_slot(&mut self, node: u16, reduce: bool) {
        let n = usize::from(node);
        if reduce {
            self.nodes[n].free_reduces += 1;
        } else {
            self.nodes[n].free_maps += 1;
        }
        self.nodes[n].running = self.nodes[n].running.saturating_sub(1);
    }
}
