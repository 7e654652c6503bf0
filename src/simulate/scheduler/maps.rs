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
        let cpu_s = cpu_s * self.straggle(&mut rng);
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

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;

    use super::*;
    use crate::simulate::cluster::{Cluster, Conditions};
    use crate::simulate::faults::Fault;
    use crate::simulate::scheduler::testing::{Jobs, job, running, spec};

    const MAP0: TaskRef = TaskRef { job: 0, idx: 0, attempt: 0, reduce: false };

    /// The times of a node's lines that `pick` picks.
    fn times(sim: &Sim<Jobs>, node: usize, pick: impl Fn(&Line) -> bool) -> Vec<i64> {
        sim.bufs[node].iter().filter(|r| pick(&r.line)).map(|r| r.ts_ms).collect()
    }

    /// When the attempt's end is due and how.
    fn map_end(sim: &Sim<Jobs>, task: TaskRef) -> Vec<(i64, End)> {
        sim.events
            .iter()
            .filter_map(|Reverse((t, _, ev))| match *ev {
                Ev::MapEnd { job, idx, attempt, end } if (job, idx, attempt) == (task.job, task.idx, task.attempt) => {
                    Some((*t, end))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_map_reads_its_block_where_it_runs_if_it_can_then_computes_and_spills() {
        let cluster = Cluster::first(4, 1, Conditions::default());
        let mut sim = running(spec(&cluster, None), vec![job(2, 1)]);
        sim.jobs[0].maps[0].replicas = Some([0, 1, 2]);
        sim.jobs[0].maps[1].replicas = Some([1, 2, 3]);
        sim.launch_map(0, 0, 0);
        sim.launch_map(0, 1, 0);
        let served_by = |idx: u32| -> Vec<usize> {
            (0..4)
                .filter(|&n| {
                    !times(&sim, n, |l| matches!(l, Line::Served { to: 0, client, .. } if client.idx == idx)).is_empty()
                })
                .collect()
        };
        assert_eq!(served_by(0), vec![0]);
        assert!(matches!(served_by(1)[..], [1..=3]), "{:?}", served_by(1));
        let launches: Vec<Line> =
            sim.bufs[0].iter().map(|r| r.line).filter(|l| matches!(l, Line::Launch { .. })).collect();
        assert_eq!(
            launches,
            [
                Line::Launch { task: MAP0, free_slots: 2 },
                Line::Launch { task: TaskRef { idx: 1, ..MAP0 }, free_slots: 1 }
            ]
        );
        // The plan, the log and the event agree on when it ends.
        let run = &sim.jobs[0].maps[0].runs[0];
        let done = times(&sim, 0, |l| *l == Line::Done { task: MAP0 });
        assert_eq!((done, map_end(&sim, MAP0)), (vec![run.prog.t1], vec![(run.prog.t1, End::Ok)]));
        assert!((0.91 * 64.0..=1.09 * 64.0).contains(&run.out_mb), "{}", run.out_mb);
        let history: Vec<Hist> = sim.jobs[0].history.iter().map(|h| h.h).take(2).collect();
        let start = Hist::TaskStart { idx: 0, reduce: false, splits: Some([0, 1, 2]) };
        assert_eq!(history, [start, Hist::AttemptStart { task: MAP0, node: 0 }]);
    }

    #[test]
    fn a_map_only_job_writes_its_output_to_hdfs_a_block_at_a_time() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut writer = job(1, 0);
        (writer.input_mb, writer.map_out_mb, writer.map_writes_hdfs) = (0.0, 100.0, true);
        let mut sim = running(spec(&cluster, None), vec![writer]);
        sim.launch_map(0, 0, 0);
        let out_mb = sim.jobs[0].maps[0].runs[0].out_mb;
        let sizes: Vec<u32> = sim.bufs[0]
            .iter()
            .filter_map(|r| match r.line {
                Line::Received { size, .. } => Some(size),
                _ => None,
            })
            .collect();
        assert_eq!(sizes, [64 << 20, ((out_mb - 64.0) * 1048576.0) as u32]);
        let receives = sim.bufs.iter().flatten().filter(|r| matches!(r.line, Line::Receiving { .. })).count();
        assert_eq!(receives, 2 * 3, "two blocks, three replicas each");
        assert!(sim.bufs.iter().flatten().all(|r| !matches!(r.line, Line::Served { .. })), "its input is generated");
    }

    #[test]
    fn a_poisoned_map_fails_seconds_in() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let mut poisoned = job(1, 0);
        poisoned.poison_map = Some(0);
        let mut sim = running(spec(&cluster, None), vec![poisoned]);
        sim.launch_map(0, 0, 0);
        let prog = sim.jobs[0].maps[0].runs[0].prog;
        assert!((2000..8000).contains(&(prog.t1 - prog.t0)) && prog.f1 == 0.0, "{prog:?}");
        let errors = times(&sim, 0, |l| *l == Line::ChildError { task: MAP0 });
        assert_eq!((errors, map_end(&sim, MAP0)), (vec![prog.t1], vec![(prog.t1, End::Failed)]));
        assert!(times(&sim, 0, |l| matches!(l, Line::Done { .. } | Line::Served { .. })).is_empty());
    }

    #[test]
    fn hadoop_1036_the_first_map_on_the_node_dies_silently_and_times_out() {
        let cluster = Cluster::first(3, 1, Conditions::default());
        let hang = Injected::new(Fault::Hang1036, 0, 0, 3_600_000, 60.0);
        let mut sim = running(spec(&cluster, Some(hang)), vec![job(2, 0)]);
        sim.launch_map(0, 0, 0);
        sim.launch_map(0, 1, 0);
        let Some((died, MAP0)) = sim.struck else { panic!("{:?}", sim.struck) };
        let prog = sim.jobs[0].maps[0].runs[0].prog;
        assert_eq!((prog.t1, prog.f1), (died, 0.02));
        let timeouts = times(&sim, 0, |l| *l == Line::Timeout { task: MAP0 });
        assert!(timeouts.len() == 1 && (died + TASK_TIMEOUT_MS..died + TASK_TIMEOUT_MS + 3000).contains(&timeouts[0]));
        assert_eq!(map_end(&sim, MAP0), vec![(timeouts[0], End::TimedOut)]);
        // It strikes once: the next map there runs.
        let map1 = TaskRef { idx: 1, ..MAP0 };
        assert_eq!(map_end(&sim, map1).iter().map(|e| e.1).collect::<Vec<_>>(), [End::Ok]);
        assert!(times(&sim, 0, |l| *l == Line::Done { task: MAP0 }).is_empty());
    }
}
