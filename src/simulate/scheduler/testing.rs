//! Fixtures for the scheduler's unit tests: jobs built field by field, run on a few nodes.

use super::{JobSource, JobState, RunSpec, Sim};
use crate::simulate::Version;
use crate::simulate::cluster::Cluster;
use crate::simulate::faults::Injected;
use crate::simulate::jobhistory::{Hist, Status};
use crate::simulate::workload::JobSpec;
use crate::simulate::writers::TaskRef;

/// Jobs submitted at the start, one stream each, and none after.
pub(super) struct Jobs(Vec<JobSpec>);

impl JobSource for Jobs {
    fn start(&mut self) -> Vec<(i64, u32, JobSpec)> {
        std::mem::take(&mut self.0).into_iter().enumerate().map(|(stream, job)| (0, stream as u32, job)).collect()
    }

    fn next(&mut self, _: u32, _: i64) -> Option<(i64, JobSpec)> {
        None
    }
}

/// A Sort-like job: each map reads a 64 MB block and passes it all on to the reduces.
pub(super) fn job(maps: u32, reduces: u32) -> JobSpec {
    JobSpec {
        name: "sorter".into(),
        user: "hadoop".into(),
        maps,
        reduces,
        input_mb: 64.0,
        map_cpu_s_per_mb: 0.12,
        map_fixed_s: 0.0,
        map_wait_s: 0.0,
        map_out_mb: 1.0,
        map_writes_hdfs: false,
        replication: 3,
        reduce_cpu_s_per_mb: 0.08,
        reduce_out_ratio: 1.0,
        poison_map: None,
        poison_reduce: None,
        kill_after_ms: None,
    }
}

/// An hour of 0.18 with seed 1, resource use accounted.
pub(super) fn spec(cluster: &Cluster, fault: Option<Injected>) -> RunSpec<'_> {
    RunSpec {
        seed: 1,
        version: Version::V018,
        cluster,
        fault,
        end_ms: 3_600_000,
        jt_stamp: "200808250000".into(),
        usage: true,
    }
}

/// The jobs submitted at time 0, their events to come.
pub(super) fn submitted(spec: RunSpec, jobs: Vec<JobSpec>) -> Sim<Jobs> {
    Sim::new(spec, Jobs(jobs))
}

/// The jobs running with nothing scheduled, for a test to drive method by method.
pub(super) fn running(spec: RunSpec, jobs: Vec<JobSpec>) -> Sim<Jobs> {
    let mut sim = submitted(spec, jobs);
    sim.events.clear();
    for job in 0..sim.jobs.len() as u32 {
        sim.jobs[job as usize].state = JobState::Running;
        sim.active.push(job);
    }
    sim
}

/// Runs every event before the run's end.
pub(super) fn finish(sim: &mut Sim<Jobs>) {
    while sim.run_until(sim.now + 60_000) {}
}

/// A job's attempts as its history ends them: attempt, node and status, in the order they ended.
pub(super) fn attempts(sim: &Sim<Jobs>, job: u32) -> Vec<(TaskRef, u16, Status)> {
    let history = &sim.jobs[job as usize].history;
    history
        .iter()
        .filter_map(|h| match h.h {
            Hist::AttemptEnd { task, node, status, .. } => Some((task, node, status)),
            _ => None,
        })
        .collect()
}
