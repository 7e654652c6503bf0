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
        // 0.20 and YARN hold reduces back until 5% of the maps are done; 0.18 starts them at once.
        self.spec.version != Version::V018 && j.maps_done * 20 < j.spec.maps
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

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;

    use super::*;
    use crate::simulate::cluster::{Cluster, Conditions};
    use crate::simulate::scheduler::testing::{job, running, spec};
    use crate::simulate::writers::Line;

    #[test]
    fn a_node_gets_a_map_whose_input_it_holds_first_and_never_one_it_failed() {
        let cluster = Cluster::first(4, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(4, 0)]);
        for (m, replicas) in sim.jobs[0].maps.iter_mut().zip([[1, 2, 3], [0, 2, 3], [1, 2, 3], [0, 1, 2]]) {
            m.replicas = Some(replicas);
        }
        assert_eq!(sim.pick_map(0), Some((0, 1)));
        assert_eq!(sim.pick_map(0), Some((0, 3)));
        // Nothing left with its input there: the first pending map.
        assert_eq!(sim.pick_map(0), Some((0, 0)));
        sim.jobs[0].maps[2].avoid = Some(3);
        assert_eq!(sim.pick_map(3), None);
        assert_eq!(sim.pick_map(2), Some((0, 2)));
        assert_eq!(sim.pick_map(2), None);
    }

    #[test]
    fn the_oldest_job_comes_before_data_locality() {
        let cluster = Cluster::first(4, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(1, 0), job(1, 0)]);
        sim.jobs[0].maps[0].replicas = Some([1, 2, 3]);
        sim.jobs[1].maps[0].replicas = Some([0, 1, 2]);
        assert_eq!(sim.pick_map(0), Some((0, 0)));
        assert_eq!(sim.pick_map(0), Some((1, 0)));
    }

    #[test]
    fn a_heartbeat_fills_the_free_slots_and_no_more() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(5, 3)]);
        sim.assign(0);
        let (node, j) = (&sim.nodes[0], &sim.jobs[0]);
        assert_eq!((node.free_maps, node.free_reduces, node.running), (0, 0, 4));
        assert_eq!((&j.live_maps[..], &j.pending_maps[..]), (&[0, 1][..], &[2, 3, 4][..]));
        assert_eq!(
            (&j.live_reduces[..], j.pending_reduces.iter().copied().collect::<Vec<_>>()),
            (&[0, 1][..], vec![2])
        );
        // The TaskTracker logs the slots of the kind free before each launch.
        let free: Vec<u8> = sim.bufs[0]
            .iter()
            .filter_map(|r| match r.line {
                Line::Launch { free_slots, .. } => Some(free_slots),
                _ => None,
            })
            .collect();
        assert_eq!(free, vec![2, 1, 2, 1]);
        sim.assign(0);
        assert_eq!(sim.jobs[0].pending_maps, vec![2, 3, 4]);
        sim.free_slot(0, false);
        assert_eq!((sim.nodes[0].free_maps, sim.nodes[0].running), (1, 3));
        sim.assign(0);
        assert_eq!((&sim.jobs[0].live_maps[..], sim.nodes[0].free_maps), (&[0, 1, 2][..], 0));
    }

    #[test]
    fn in_0_20_reduces_wait_for_a_twentieth_of_the_maps() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut v020 = spec(&cluster, None);
        v020.version = Version::V020;
        let mut sim = running(v020, vec![job(40, 1)]);
        sim.jobs[0].maps_done = 1;
        assert_eq!(sim.pick_reduce(0), None);
        sim.jobs[0].maps_done = 2;
        sim.jobs[0].reduces[0].avoid = Some(0);
        assert_eq!(sim.pick_reduce(0), None);
        assert_eq!(sim.pick_reduce(1), Some((0, 0)));
        let mut sim = running(spec(&cluster, None), vec![job(40, 1)]);
        assert_eq!(sim.pick_reduce(0), Some((0, 0)));
    }

    #[test]
    fn a_node_with_a_free_slot_asks_for_work_once_and_a_full_one_not_at_all() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(1, 0)]);
        sim.now = 10_000;
        sim.wake(0, 10_000);
        sim.wake(0, 10_000);
        sim.nodes[1].free_maps = 0;
        sim.nodes[1].free_reduces = 0;
        sim.wake(1, 10_000);
        let beats: Vec<(i64, u16)> = sim
            .events
            .iter()
            .filter_map(|Reverse((t, _, ev))| match ev {
                Ev::Heartbeat { node } => Some((*t, *node)),
                _ => None,
            })
            .collect();
        assert_eq!(beats.len(), 1);
        assert!(beats[0].1 == 0 && (10_300..13_000).contains(&beats[0].0), "{beats:?}");
        // The heartbeat takes the map; the node may ask again.
        sim.handle(Ev::Heartbeat { node: 0 });
        assert_eq!(sim.jobs[0].maps[0].runs[0].node, 0);
        assert!(!sim.nodes[0].heartbeat_due);
    }
}
