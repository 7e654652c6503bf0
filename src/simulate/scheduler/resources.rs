//! What a node gives a task and what the task is charged with: CPU, disk and network rates at a
//! moment (shared with the node's other tasks, cut by a fault), the per-second use a sadc capture
//! shows, kept per attempt so that a kill can take back the rest, and the node's ports.

use super::{JobSource, Sim};
use crate::simulate::cluster::STRAGGLER_MAX;
use crate::simulate::faults::Injected;
use crate::simulate::rng::Rng;
use crate::simulate::sadc::Use;

impl<S: JobSource> Sim<'_, S> {
    pub(super) fn port(&mut self, node: usize) -> u16 {
        let s = &mut self.nodes[node];
        s.next_port = if s.next_port >= 60_000 { 40_000 } else { s.next_port + 1 };
        s.next_port
    }

    /// How many times its time an attempt's work takes: a straggler's Pareto multiple, else 1.
    /// Drawn only on a cluster with stragglers, so that a run without is the same as before.
    pub(super) fn straggle(&self, rng: &mut Rng) -> f64 {
        let share = self.spec.cluster.stragglers;
        if share <= 0.0 || rng.f64() >= share {
            return 1.0;
        }
        (1.0 - rng.f64()).powf(-0.5).min(STRAGGLER_MAX)
    }

    pub(super) fn cpu_rate(&self, node: usize, t: i64) -> f64 {
        let n = &self.spec.cluster.nodes[node];
        let tasks = f64::from(self.nodes[node].running);
        n.cpu * Injected::cpu_share(self.spec.fault.as_ref(), node, t, tasks, n.cores)
    }

    /// The disk rate a task gets for reads (`write` false) or writes.
    pub(super) fn disk_rate(&self, node: usize, t: i64, write: bool) -> f64 {
        let n = &self.spec.cluster.nodes[node];
        let sharing = 1.0 + 0.35 * f64::from(self.nodes[node].running.saturating_sub(1));
        n.disk_mb_s * Injected::disk_share(self.spec.fault.as_ref(), node, t, write) / sharing
    }

    pub(super) fn net_rate(&self, a: usize, b: usize) -> f64 {
        let nodes = &self.spec.cluster.nodes;
        nodes[a].net_mb_s.min(nodes[b].net_mb_s)
    }

    /// `rate` per second of `what` at `node` over [from, to), on behalf of attempt `owner`.
    pub(super) fn use_rate(&mut self, owner: u64, node: usize, (from, to): (i64, i64), what: Use, rate: f64) {
        if !self.spec.usage || to <= from {
            return;
        }
        self.usage[node].add(from, to, what, rate);
        if owner != 0 {
            self.used.entry(owner).or_default().push((node as u16, from, to, what, rate));
        }
    }

    /// A total spread evenly over [from, to).
    pub(super) fn use_total(&mut self, owner: u64, node: usize, (from, to): (i64, i64), what: Use, total: f64) {
        let to = to.max(from + 1);
        let secs = ((to - from) as f64 / 1000.0).max(0.001);
        self.use_rate(owner, node, (from, to), what, total / secs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::cluster::{Cluster, Conditions};
    use crate::simulate::faults::Fault;
    use crate::simulate::scheduler::testing::{running, spec};

    #[test]
    fn a_node_shares_its_disk_and_cores_among_its_tasks() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![]);
        let (cpu, disk) = (cluster.nodes[1].cpu, cluster.nodes[1].disk_mb_s);
        assert_eq!((sim.cpu_rate(1, 0), sim.disk_rate(1, 0, false)), (cpu, disk));
        sim.nodes[1].running = 3;
        assert_eq!((sim.cpu_rate(1, 0), sim.disk_rate(1, 0, true)), (cpu, disk / (1.0 + 0.35 * 2.0)));
        // Eight tasks on four cores: half a core each.
        sim.nodes[1].running = 8;
        assert_eq!(sim.cpu_rate(1, 0), cpu * 0.5);
        assert_eq!(sim.net_rate(0, 2), cluster.nodes[0].net_mb_s.min(cluster.nodes[2].net_mb_s));
        let hog = Injected::new(Fault::CpuHog, 1, 10_000, 3_600_000, 60.0);
        let mut sim = running(spec(&cluster, Some(hog.clone())), vec![]);
        sim.nodes[1].running = 8;
        assert_eq!(sim.cpu_rate(1, 0), cpu * 0.5);
        assert_eq!(sim.cpu_rate(1, 10_000), cpu * Injected::cpu_share(Some(&hog), 1, 10_000, 8.0, 4.0));
        assert!(sim.cpu_rate(1, 10_000) < cpu * 0.5);
    }

    #[test]
    fn use_is_kept_per_attempt_so_that_a_kill_can_take_back_the_rest() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![]);
        sim.use_total(7, 1, (2_000, 6_000), Use::DiskRead, 100.0);
        sim.use_rate(7, 2, (6_000, 6_000), Use::Cpu, 1.0);
        sim.use_rate(0, 1, (0, 1_000), Use::Cpu, 1.0);
        let kept: Vec<(u16, i64, i64, f64)> = sim.used[&7].iter().map(|u| (u.0, u.1, u.2, u.4)).collect();
        assert_eq!(kept, vec![(1, 2_000, 6_000, 25.0)]);
        assert!(matches!(sim.used[&7][0].3, Use::DiskRead));
        assert_eq!(sim.used.len(), 1, "no owner, nothing kept");
        let mut unaccounted = spec(&cluster, None);
        unaccounted.usage = false;
        let mut sim = running(unaccounted, vec![]);
        sim.use_total(7, 1, (2_000, 6_000), Use::DiskRead, 100.0);
        assert!(sim.used.is_empty());
    }

    #[test]
    fn a_node_hands_out_its_ports_in_turn_from_40000_to_60000() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![]);
        assert_eq!((sim.port(0), sim.port(0), sim.port(1)), (40_001, 40_002, 40_101));
        sim.nodes[2].next_port = 59_999;
        assert_eq!((sim.port(2), sim.port(2), sim.port(2)), (60_000, 40_000, 40_001));
    }
}
