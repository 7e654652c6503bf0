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
