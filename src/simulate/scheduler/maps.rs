//! A map attempt, timed when it is launched: its input block read (local if it can be), its CPU,
//! then its output spilled to local disk or, in a map-only job, written to HDFS; or, for a
//! poisoned map or one the HADOOP-1036 hang strikes, its failure.

use super::{End, Ev, JobSource, MapRun, Prog, Sim};
use crate::simulate::faults::{Injected, TASK_TIMEOUT_MS};
use crate::simulate::hdfs::BLOCK_MB;
use crate::simulate::jobhistory::Hist;
use crate::simulate::rng::{Rng, Stream};
use crate::simulate::sadc::Use;
use crate::simulate::writers::{Line, TaskRef};

impl<S: JobSource> Sim<'_, S> {
    pub(super) fn launch_map(&mut self, job: u32, idx: u32, node: u16) {
        let n = usize::from(node);
        let t0 = self.now;
        let j = &mut self.jobs[job as usize];
        let m = &mut j.maps[idx as usize];
        let attempt = m.next_attempt;
        m.next_attempt = m.next_attempt.saturating_add(1);
        let replicas = m.replicas;
        let first_start = m.started.is_none();
        m.started.get_or_insert(t0);
        if m.runs.is_empty() {
            j.live_maps.push(idx);
        }
        let task = TaskRef { job, idx, attempt, reduce: false };
        let owner = task.key();
        let mut rng = Rng::derive(self.spec.seed, Stream::Map, &[u64::from(job), u64::from(idx), u64::from(attempt)]);
        if first_start {
            j.hist(t0, Hist::TaskStart { idx, reduce: false, splits: replicas });
        }
        j.hist(t0, Hist::AttemptStart { task, node });
        let spec = j.spec.clone();
        self.nodes[n].free_maps -= 1;
        self.nodes[n].running += 1;
        let free = self.nodes[n].free_maps;
        self.push(n, t0, owner, Line::Launch { task, free_slots: free + 1 });
        if self.spec.usage {
            self.usage[n].launch(t0);
        }
        let start = t0 + 700 + rng.below(800) as i64;
        let run = |prog: Prog, out_mb: f64| MapRun { attempt, node, prog, out_mb };

        if spec.poison_map == Some(idx) {
            let t = start + 2000 + rng.below(6000) as i64;
            self.push(n, t, owner, Line::ChildError { task });
            self.use_rate(owner, n, (t0, t), Use::Tasks, 1.0);
            self.jobs[job as usize].maps[idx as usize].runs.push(run(Prog { t0: start, t1: t, f0: 0.0, f1: 0.0 }, 0.0));
            self.at(t, Ev::MapEnd { job, idx, attempt, end: End::Failed });
            return;
        }
        if self.struck.is_none() && Injected::hangs_map(self.spec.fault.as_ref(), n, t0) {
            // The child dies early; the TaskTracker keeps reporting it alive until the timeout.
            let died = start + 1000 + rng.below(3000) as i64;
            self.struck = Some((died, task));
            self.progress(n, task, (start, died), (0.0, 0.02), None, &mut rng);
            let timeout = died + TASK_TIMEOUT_MS + rng.below(3000) as i64;
            self.push(n, timeout, owner, Line::Timeout { task });
            self.use_rate(owner, n, (t0, died), Use::Tasks, 1.0);
            self.jobs[job as usize].maps[idx as usize]
                .runs
                .push(run(Prog { t0: start, t1: died, f0: 0.0, f1: 0.02 }, 0.0));
            self.at(timeout, Ev::MapEnd { job, idx, attempt, end: End::TimedOut });
            return;
        }

        let mut t = start;
        let generated = spec.input_mb <= 0.0;
        if let (false, Some(replicas)) = (generated, replicas) {
            // Local if it can; else a replica whose DataNode answers (the client skips a dead one).
            let fault = self.spec.fault.as_ref();
            let live: Vec<u16> =
                replicas.iter().copied().filter(|&r| !Injected::drops_connections(fault, usize::from(r), t)).collect();
            let pool = if live.is_empty() { &replicas[..] } else { &live[..] };
            let src =
                if replicas.contains(&node) { n } else { usize::from(pool[rng.below(pool.len() as u64) as usize]) };
            t = self.read_block(src, n, t, spec.input_mb * rng.jitter(0.02), task, &mut rng);
        }
        let (in_mb, out_mb) = if generated {
            (spec.map_out_mb, spec.map_out_mb)
        } else {
            (spec.input_mb, spec.input_mb * spec.map_out_mb)
        };
        let out_mb = out_mb * rng.jitter(0.03);
        if spec.map_wait_s > 0.0 {
            // Waiting on the outside world (a fetcher's web servers), through the node's NIC.
            let wait = spec.map_wait_s * rng.jitter(0.2) * Injected::wan_slowdown(self.spec.fault.as_ref(), n, t);
            t += (wait * 1000.0) as i64;
        }
        let cpu_s = (in_mb * spec.map_cpu_s_per_mb + spec.map_fixed_s * rng.jitter(0.2)) * rng.jitter(0.04);
        let cpu_ms = cpu_s / self.cpu_rate(n, t) * 1000.0;
        if spec.map_writes_hdfs {
            let blocks = (out_mb / BLOCK_MB).ceil().max(1.0) as usize;
            for b in 0..blocks {
                let mb = (out_mb - b as f64 * BLOCK_MB).min(BLOCK_MB);
                let slice = (cpu_ms / blocks as f64) as i64;
                self.use_rate(owner, n, (t, t + slice), Use::Cpu, 1.0);
                t += slice;
                t = self.write_block(n, t, mb, spec.replication, task, &mut rng);
            }
        } else {
            self.use_rate(owner, n, (t, t + cpu_ms as i64), Use::Cpu, 1.0);
            t += cpu_ms as i64;
            let spill_ms = (out_mb / self.disk_rate(n, t, true) * 1000.0) as i64;
            self.use_total(owner, n, (t, t + spill_ms), Use::DiskWrite, out_mb);
            t += spill_ms;
        }
        self.progress(n, task, (start, t), (0.0, 1.0), None, &mut rng);
        self.push(n, t, owner, Line::MapProgress { task, frac: 1.0 });
        self.push(n, t, owner, Line::Done { task });
        self.use_rate(owner, n, (t0, t), Use::Tasks, 1.0);
        self.jobs[job as usize].maps[idx as usize].runs.push(run(Prog { t0: start, t1: t, f0: 0.0, f1: 1.0 }, out_mb));
        self.at(t, Ev::MapEnd { job, idx, attempt, end: End::Ok });
    }
}
