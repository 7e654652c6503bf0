//! A YARN MapReduce job's application master log, the `syslog` of the job's first container:
//! from Hadoop 2 it, not a JobTracker, assigns the attempts to containers and sees them end, so
//! it is written from the same records as 0.x's job history ([`super::jobhistory`]), worded as
//! 2.8's `JobImpl`, `TaskImpl` and `TaskAttemptImpl` word their transitions.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::jobhistory::{Hist, HistRec, Status, push_task_id};
use super::writers::{Clock, Names, Out, TaskRef, container_log, push_attempt, push_container};

const IMPL: &str = "org.apache.hadoop.mapreduce.v2.app.job.impl";
const DISPATCHER: &str = "AsyncDispatcher event handler";
/// The port every NodeManager's container manager listens on, as the master names a node.
const NM_PORT: u16 = 45454;

/// `<logs>/<host>/userlogs/application_…/container_…_01_000001/syslog`, the master's container
/// on `node`.
pub fn path(logs: &Path, job: u32, node: u16, names: &Names, gzip: bool) -> PathBuf {
    container_log(&logs.join(&names.hosts[usize::from(node)].0), job, None, names, gzip)
}

struct Log<'a> {
    out: Out,
    buf: Vec<u8>,
    clock: Clock,
    names: &'a Names<'a>,
    job: u32,
    lines: u64,
}

impl Log<'_> {
    /// One line: `<stamp> INFO [<thread>] <logger>: ` then what `message` writes.
    fn line(
        &mut self,
        ts_ms: i64,
        thread: &str,
        logger: &str,
        message: impl FnOnce(&mut Vec<u8>, &Names),
    ) -> io::Result<()> {
        self.clock.push_stamp(&mut self.buf, self.names.epoch_ms + ts_ms);
        for part in [" INFO [", thread, "] ", logger, ": "] {
            self.buf.extend_from_slice(part.as_bytes());
        }
        message(&mut self.buf, self.names);
        self.buf.push(b'\n');
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.lines += 1;
        Ok(())
    }

    fn job_moves(&mut self, ts_ms: i64, moves: &[(&str, &str)]) -> io::Result<()> {
        let job = self.job;
        for (from, to) in moves {
            self.line(ts_ms, DISPATCHER, &[IMPL, ".JobImpl"].concat(), |b, names| {
                b.extend_from_slice(b"job_");
                b.extend_from_slice(names.jobs[job as usize].id.as_bytes());
                let _ = write!(b, "Job Transitioned from {from} to {to}");
            })?;
        }
        Ok(())
    }

    fn task_move(&mut self, ts_ms: i64, idx: u32, reduce: bool, from: &str, to: &str) -> io::Result<()> {
        let job = self.job;
        self.line(ts_ms, DISPATCHER, &[IMPL, ".TaskImpl"].concat(), |b, names| {
            push_task_id(b, names, job, idx, reduce);
            let _ = write!(b, " Task Transitioned from {from} to {to}");
        })
    }

    fn attempt_moves(&mut self, ts_ms: i64, task: TaskRef, moves: &[(&str, &str)]) -> io::Result<()> {
        for (from, to) in moves {
            self.line(ts_ms, DISPATCHER, &[IMPL, ".TaskAttemptImpl"].concat(), |b, names| {
                push_attempt(b, task, names);
                let _ = write!(b, " TaskAttempt Transitioned from {from} to {to}");
            })?;
        }
        Ok(())
    }
}

/// Writes one job's application master log, its records already in time order; returns the
/// lines written.
pub fn write(path: &Path, job: u32, recs: &[HistRec], names: &Names, gzip: bool) -> io::Result<u64> {
    let mut log =
        Log { out: Out::create(path, gzip)?, buf: Vec::with_capacity(256), clock: Clock::new(), names, job, lines: 0 };
    let mut completed = 0;
    for rec in recs {
        let ts = rec.ts_ms;
        match rec.h {
            Hist::Submit => {}
            Hist::Launch => {
                log.line(ts, "main", "org.apache.hadoop.mapreduce.v2.app.MRAppMaster", |b, names| {
                    b.extend_from_slice(b"Created MRAppMaster for application appattempt_");
                    b.extend_from_slice(names.jobs[job as usize].id.as_bytes());
                    b.extend_from_slice(b"_000001");
                })?;
                log.job_moves(ts, &[("NEW", "INITED"), ("INITED", "SETUP"), ("SETUP", "RUNNING")])?;
            }
            Hist::TaskStart { idx, reduce, .. } => log.task_move(ts, idx, reduce, "NEW", "SCHEDULED")?,
            Hist::AttemptStart { task, node } => {
                log.attempt_moves(ts, task, &[("NEW", "UNASSIGNED")])?;
                log.line(
                    ts,
                    "RMCommunicator Allocator",
                    "org.apache.hadoop.mapreduce.v2.app.rm.RMContainerAllocator",
                    |b, names| {
                        b.extend_from_slice(b"Assigned container ");
                        push_container(b, job, Some(task), names);
                        b.extend_from_slice(b" to ");
                        push_attempt(b, task, names);
                    },
                )?;
                log.attempt_moves(ts, task, &[("UNASSIGNED", "ASSIGNED")])?;
                log.line(ts, DISPATCHER, &[IMPL, ".TaskAttemptImpl"].concat(), |b, names| {
                    b.extend_from_slice(b"TaskAttempt: [");
                    push_attempt(b, task, names);
                    b.extend_from_slice(b"] using containerId: [");
                    push_container(b, job, Some(task), names);
                    let _ = write!(b, " on NM: [{}:{NM_PORT}]", names.hosts[usize::from(node)].0);
                })?;
                log.attempt_moves(ts, task, &[("ASSIGNED", "RUNNING")])?;
                if task.attempt == 0 {
                    log.task_move(ts, task.idx, task.reduce, "SCHEDULED", "RUNNING")?;
                }
            }
            Hist::AttemptEnd { task, status, .. } => {
                let moves: &[(&str, &str)] = match status {
                    Status::Success => {
                        &[("RUNNING", "SUCCESS_FINISHING_CONTAINER"), ("SUCCESS_FINISHING_CONTAINER", "SUCCEEDED")]
                    }
                    Status::Failed => &[
                        ("RUNNING", "FAIL_CONTAINER_CLEANUP"),
                        ("FAIL_CONTAINER_CLEANUP", "FAIL_TASK_CLEANUP"),
                        ("FAIL_TASK_CLEANUP", "FAILED"),
                    ],
                    Status::Killed => &[
                        ("RUNNING", "KILL_CONTAINER_CLEANUP"),
                        ("KILL_CONTAINER_CLEANUP", "KILL_TASK_CLEANUP"),
                        ("KILL_TASK_CLEANUP", "KILLED"),
                    ],
                };
                if status == Status::Success {
                    log.line(
                        ts,
                        "IPC Server handler 3 on 43637",
                        "org.apache.hadoop.mapred.TaskAttemptListenerImpl",
                        |b, names| {
                            b.extend_from_slice(b"Done acknowledgement from ");
                            push_attempt(b, task, names);
                        },
                    )?;
                }
                log.attempt_moves(ts, task, moves)?;
            }
            Hist::TaskEnd { idx, reduce } => {
                log.task_move(ts, idx, reduce, "RUNNING", "SUCCEEDED")?;
                completed += 1;
                log.line(ts, DISPATCHER, &[IMPL, ".JobImpl"].concat(), |b, _| {
                    let _ = write!(b, "Num completed Tasks: {completed}");
                })?;
            }
            Hist::JobEnd { status, .. } => {
                let end = match status {
                    Status::Success => [("RUNNING", "COMMITTING"), ("COMMITTING", "SUCCEEDED")],
                    Status::Failed => [("RUNNING", "FAIL_ABORT"), ("FAIL_ABORT", "FAILED")],
                    Status::Killed => [("RUNNING", "KILL_ABORT"), ("KILL_ABORT", "KILLED")],
                };
                log.job_moves(ts, &end)?;
            }
        }
    }
    log.out.finish()?;
    Ok(log.lines)
}
