//! The order of jobs due at one instant: a job that reads what another writes runs after it.

use anyhow::{Context, Result};
use futures::StreamExt;

use super::config::Job;

/// `feeds[a][b]`: job `a` writes what job `b` reads.
fn feeds(jobs: &[Job]) -> Result<Vec<Vec<bool>>> {
    let mut feeds = vec![vec![false; jobs.len()]; jobs.len()];
    for (a, earlier) in jobs.iter().enumerate() {
        for (b, later) in jobs.iter().enumerate() {
            feeds[a][b] = a != b && earlier.feeds(later).with_context(|| later.name.clone())?;
        }
    }
    Ok(feeds)
}

/// Each job's stage: a job comes after every job that [feeds](Job::feeds) it; equal stages
/// keep the configuration's order. A cycle (two queries that each read what the other writes)
/// is broken where it closes.
fn stages_of(feeds: &[Vec<bool>]) -> Vec<usize> {
    fn stage_of(job: usize, feeds: &[Vec<bool>], stages: &mut [Option<usize>], on_path: &mut [bool]) -> usize {
        if let Some(stage) = stages[job] {
            return stage;
        }
        on_path[job] = true;
        let mut stage = 0;
        for earlier in 0..feeds.len() {
            if feeds[earlier][job] && !on_path[earlier] {
                stage = stage.max(stage_of(earlier, feeds, stages, on_path) + 1);
            }
        }
        on_path[job] = false;
        stages[job] = Some(stage);
        stage
    }
    let mut stages = vec![None; feeds.len()];
    let mut on_path = vec![false; feeds.len()];
    (0..feeds.len()).map(|job| stage_of(job, feeds, &mut stages, &mut on_path)).collect()
}

/// The order of jobs due at one instant: their stages, and `waits[b][a]`, job `b` starts only
/// once job `a` has ended: one feeds the other and `a`'s stage is the earlier (where a cycle
/// was broken, the stages say which runs first, and the two never run side by side).
pub struct Order {
    pub stages: Vec<usize>,
    waits: Vec<Vec<bool>>,
}

impl Order {
    pub fn of(jobs: &[Job]) -> Result<Order> {
        let feeds = feeds(jobs)?;
        let stages = stages_of(&feeds);
        let waits = (0..jobs.len())
            .map(|later| {
                (0..jobs.len())
                    .map(|earlier| (feeds[earlier][later] || feeds[later][earlier]) && stages[earlier] < stages[later])
                    .collect()
            })
            .collect();
        Ok(Order { stages, waits })
    }

    /// Runs `due` (job indices, in stage order) with `start`: each as soon as those of `due` it
    /// waits for have ended, at most `parallel` at a time, and a job that must run `alone`
    /// with nothing beside it. Not by stage: a query that reads one other's output (Ganesha's
    /// model) starts when that one ends, beside the rest of the earlier stage, where a stage
    /// barrier kept it waiting for the slowest job. `ended` gets each outcome as its job ends.
    pub async fn run<T, F: Future<Output = T>>(
        &self,
        due: &[usize],
        parallel: usize,
        alone: impl Fn(usize) -> bool,
        mut start: impl FnMut(usize) -> F,
        mut ended: impl FnMut(usize, T),
    ) {
        let mut pending = due.to_vec();
        let mut running = futures::stream::FuturesUnordered::new();
        let mut active: Vec<usize> = Vec::new();
        loop {
            let mut next = 0;
            while next < pending.len() && active.len() < parallel.max(1) && !active.iter().any(|&job| alone(job)) {
                let job = pending[next];
                if pending.iter().chain(&active).any(|&other| self.waits[job][other]) {
                    next += 1;
                    continue;
                }
                // A job that must run alone waits for the running ones to end, and nothing
                // passes it meanwhile: later jobs could otherwise keep it waiting.
                if alone(job) && !active.is_empty() {
                    break;
                }
                pending.remove(next);
                active.push(job);
                let run = start(job);
                running.push(async move { (job, run.await) });
            }
            let Some((job, outcome)) = running.next().await else { break };
            active.retain(|&other| other != job);
            ended(job, outcome);
        }
        debug_assert!(pending.is_empty(), "jobs never started: {pending:?}");
    }
}
