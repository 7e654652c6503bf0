//! What a node gives a task and what the task is charged with: CPU, disk and network rates at a
//! moment (shared with the node's other tasks, cut by a fault), the per-second use a sadc capture
//! shows, kept per attempt so that a kill can take back the rest, and the node's ports.

use super::{JobSource, Sim};
use crate::simulate::faults::Injected;
use crate::simulate::sadc::Use;

impl<S: JobSource> Sim<'_, S> {
    pub(super) fn port(&mut self, node: usize) -> u16 {
        let s = &mut self.nodes[node];
        s.next_port = if s.next_port >= 60_000 { 40_000 } else { s.next_port + 1 };
        s.next_port
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
