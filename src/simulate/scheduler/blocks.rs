//! A task's HDFS block transfers: a read served by one DataNode, and a write through a pipeline
//! of replicas ([`hdfs::place`]) at the rate of its slowest disk or hop, recovering from a
//! DataNode that stops acknowledging by going on without it.

use super::{JobSource, Sim};
use crate::simulate::faults::Injected;
use crate::simulate::hdfs;
use crate::simulate::rng::Rng;
use crate::simulate::sadc::Use;
use crate::simulate::writers::{Line, TaskRef};

/// How long a client takes to notice a dead pipeline node and rebuild the pipeline.
const RECOVERY_MS: f64 = 5000.0;

impl<S: JobSource> Sim<'_, S> {
    /// A block read by a task on `reader` from the DataNode on `src`; returns when it ends.
    pub(super) fn read_block(
        &mut self,
        src: usize,
        reader: usize,
        t: i64,
        mb: f64,
        client: TaskRef,
        rng: &mut Rng,
    ) -> i64 {
        let block = hdfs::new_block_id(rng);
        let link = Injected::link(self.spec.fault.as_ref(), src, reader, t);
        let mut t = t;
        let port = self.port(reader);
        let owner = client.key();
        if rng.chance(link.fail_p) {
            // The transfer stalls until the DataNode's write timeout gives up on it.
            self.push(src, t, owner, Line::ReadStart);
            t += 60_000;
            self.push(src, t, owner, Line::ServeFailed { block, to: reader as u16 });
        }
        let rate = if src == reader {
            self.disk_rate(src, t, false)
        } else {
            self.disk_rate(src, t, false).min(self.net_rate(src, reader)).min(link.cap_mb_s)
        };
        let dur = (mb / rate * 1000.0 + link.extra_ms + 5.0) as i64;
        self.push(src, t, owner, Line::ReadStart);
        let end = t + dur;
        let size = (mb * 1048576.0) as u32;
        self.push(src, end, owner, Line::Served { block, to: reader as u16, port, size, client, dur_ms: dur as u32 });
        self.use_total(owner, src, (t, end), Use::DiskRead, mb);
        if src != reader {
            self.use_total(owner, src, (t, end), Use::Tx, mb);
            self.use_total(owner, reader, (t, end), Use::Rx, mb);
        }
        end
    }

    /// A block written by a task on `client` through a pipeline of `copies` replicas; returns
    /// when the last acknowledgement is back.
    pub(super) fn write_block(
        &mut self,
        client: usize,
        t: i64,
        mb: f64,
        copies: usize,
        task: TaskRef,
        rng: &mut Rng,
    ) -> i64 {
        let fault = self.spec.fault.clone();
        let mut replicas =
            hdfs::place(client, &self.spec.cluster.nodes, rng, |i| Injected::refuses_writes(fault.as_ref(), i, t));
        replicas.truncate(copies.max(1));
        if replicas.is_empty() {
            return t;
        }
        let owner = task.key();
        let block = hdfs::new_block_id(rng);
        let mut rate = f64::INFINITY;
        let mut extra = 0.0;
        // Pipeline recovery: a DataNode that stops acknowledging (at 50% loss) is dropped and
        // the write goes on with the others; the dropped one never finishes its receive. When
        // the writer's own node is the lossy one, its local DataNode loses every downstream
        // and the block is kept on it alone.
        let dead = |r: usize| Injected::drops_connections(fault.as_ref(), r, t);
        let lost = if dead(client) && replicas.len() > 1 && replicas[0] == client {
            Some(1)
        } else {
            replicas.iter().position(|&r| r != client && dead(r))
        };
        if let Some(lost) = lost {
            let src = if lost == 0 { client } else { replicas[lost - 1] };
            let r = replicas[lost];
            if dead(client) {
                replicas.truncate(1);
            } else {
                replicas.remove(lost);
            }
            let port = self.port(src);
            self.push(r, t + 2 * lost as i64, owner, Line::Receiving { block, src: src as u16, port });
            extra += RECOVERY_MS;
            if replicas.is_empty() {
                return t + RECOVERY_MS as i64;
            }
        }
        let mut prev = client;
        for &r in &replicas {
            rate = rate.min(self.disk_rate(r, t, true));
            if r != prev {
                let link = Injected::link(fault.as_ref(), prev, r, t);
                rate = rate.min(self.net_rate(prev, r)).min(link.cap_mb_s);
                extra += link.extra_ms;
            }
            prev = r;
        }
        let hops = replicas.len() as i64;
        let dur = (mb / rate * 1000.0 * rng.jitter(0.03) + extra) as i64 + 10 * hops;
        let end = t + dur;
        let size = (mb * 1048576.0) as u32;
        let mut src = client;
        for (i, &r) in replicas.iter().enumerate() {
            let port = self.port(src);
            let downstream = (replicas.len() - 1 - i) as u8;
            self.push(r, t + 2 * i as i64, owner, Line::Receiving { block, src: src as u16, port });
            let done = end - i64::from(downstream);
            let line = Line::Received {
                block,
                src: src as u16,
                port,
                size,
                client: task,
                dur_ms: (done - t) as u32,
                downstream,
            };
            self.push(r, done, owner, line);
            self.use_total(owner, r, (t, end), Use::DiskWrite, mb);
            if r != src {
                self.use_total(owner, src, (t, end), Use::Tx, mb);
                self.use_total(owner, r, (t, end), Use::Rx, mb);
            }
            src = r;
        }
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::cluster::{Cluster, Conditions};
    use crate::simulate::faults::Fault;
    use crate::simulate::scheduler::testing::{Jobs, job, running, spec};
    use crate::simulate::writers::Rec;

    const TASK: TaskRef = TaskRef { job: 0, idx: 0, attempt: 0, reduce: false };

    /// A block's receive as a DataNode logs it: when it began and from which node, and when it
    /// ended, from which node, with how many replicas downstream.
    type Receive = (Vec<(i64, u16)>, Vec<(i64, u16, u8)>);

    /// Each node's receives of the 64 MB block of `TASK`.
    fn receives(sim: &Sim<Jobs>) -> Vec<Receive> {
        let node = |buf: &Vec<Rec>| {
            let (mut began, mut ended) = (Vec::new(), Vec::new());
            for r in buf {
                match r.line {
                    Line::Receiving { src, .. } => began.push((r.ts_ms, src)),
                    Line::Received { src, size, client, downstream, .. } => {
                        assert_eq!((size, client), (64 << 20, TASK));
                        ended.push((r.ts_ms, src, downstream));
                    }
                    _ => panic!("{r:?}"),
                }
            }
            (began, ended)
        };
        sim.bufs.iter().map(node).collect()
    }

    #[test]
    fn a_write_goes_through_a_pipeline_from_the_writers_own_datanode_at_its_slowest_disks_rate() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(1, 0)]);
        let end = sim.write_block(0, 1000, 64.0, 3, TASK, &mut Rng::new(1));
        let nodes = receives(&sim);
        assert_eq!(nodes[0], (vec![(1000, 0)], vec![(end - 2, 0, 2)]));
        // The other two in either order, each receiving from the one before it.
        let (second, third) = if nodes[1].0[0].0 == 1002 { (1, 2) } else { (2, 1) };
        assert_eq!(nodes[second], (vec![(1002, 0)], vec![(end - 1, 0, 1)]));
        assert_eq!(nodes[third], (vec![(1004, second as u16)], vec![(end, second as u16, 0)]));
        // 10 ms a hop, and the slowest disk's rate give or take its jitter (at most 9%).
        let slowest = cluster.nodes.iter().map(|n| n.disk_mb_s).fold(f64::INFINITY, f64::min);
        let ratio = (end - 1000 - 30) as f64 / (64.0 / slowest * 1000.0);
        assert!((0.91..=1.09).contains(&ratio), "{ratio}");
        let mut sim = running(spec(&cluster, None), vec![job(1, 0)]);
        let end = sim.write_block(1, 1000, 64.0, 1, TASK, &mut Rng::new(1));
        let one = (vec![(1000, 1)], vec![(end, 1, 0)]);
        assert_eq!(receives(&sim), vec![(vec![], vec![]), one, (vec![], vec![])]);
    }

    #[test]
    fn a_datanode_that_stops_acknowledging_is_dropped_and_the_write_goes_on_without_it() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let lossy = Injected::new(Fault::PacketLoss50, 2, 0, 3_600_000, 60.0);
        let mut sim = running(spec(&cluster, Some(lossy)), vec![job(1, 0)]);
        let end = sim.write_block(0, 1000, 64.0, 3, TASK, &mut Rng::new(1));
        let nodes = receives(&sim);
        assert_eq!((nodes[2].0.len(), nodes[2].1.len()), (1, 0), "node 2 never finishes its receive");
        assert_eq!((&nodes[0].1[..], &nodes[1].1[..]), (&[(end - 1, 0, 1)][..], &[(end, 0, 0)][..]));
        // The same write without the fault: recovery costs the 5 s a client takes to notice, less a hop.
        let mut clean = running(spec(&cluster, None), vec![job(1, 0)]);
        let clean_end = clean.write_block(0, 1000, 64.0, 3, TASK, &mut Rng::new(1));
        assert!((4_900..5_000).contains(&(end - clean_end)), "{end} {clean_end}");
        // The writer's own node lossy: it loses every downstream and keeps the block alone.
        let lossy = Injected::new(Fault::PacketLoss50, 0, 0, 3_600_000, 60.0);
        let mut sim = running(spec(&cluster, Some(lossy)), vec![job(1, 0)]);
        let end = sim.write_block(0, 1000, 64.0, 3, TASK, &mut Rng::new(1));
        let ended: Vec<Vec<(i64, u16, u8)>> = receives(&sim).into_iter().map(|n| n.1).collect();
        assert_eq!(ended, vec![vec![(end, 0, 0)], vec![], vec![]]);
    }

    #[test]
    fn a_read_is_served_by_the_datanode_that_holds_the_block_at_its_disks_rate() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(1, 0)]);
        let end = sim.read_block(1, 0, 1000, 32.0, TASK, &mut Rng::new(1));
        assert_eq!(end - 1000, (32.0 / cluster.nodes[1].disk_mb_s * 1000.0 + 5.0) as i64);
        let lines: Vec<(i64, Line)> = sim.bufs[1].iter().map(|r| (r.ts_ms, r.line)).collect();
        let [(1000, Line::ReadStart), (at, Line::Served { to: 0, port: 40_001, size, client, dur_ms, .. })] = lines[..]
        else {
            panic!("{lines:?}")
        };
        assert_eq!((at, size, client, i64::from(dur_ms)), (end, 32 << 20, TASK, end - 1000));
        assert!(sim.bufs[0].is_empty() && sim.bufs[2].is_empty());
    }
}
