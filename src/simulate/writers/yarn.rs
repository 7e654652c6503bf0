//! A Hadoop 2 (YARN) node's task side, worded as 2.8 words it: the NodeManager's container
//! transitions in its own log, and each reduce container's `syslog` with its fetcher threads
//! (`fetcher#k`, of `mapreduce.reduce.shuffle.parallelcopies`) in place of 0.x's copier threads.
//! The attempts' own states are in each job's application master log ([`crate::simulate::appmaster`]).

use std::io;
use std::path::{Path, PathBuf};

use super::{
    CopyFault, Dest, Line, MAX_SINGLE_SHUFFLE, Names, NodeWriter, Out, Syslog, TaskRef, file_name, push_padded,
    push_u64,
};

pub const NODE_MANAGER: &str = "org.apache.hadoop.yarn.server.nodemanager.NodeManager";
const CONTAINER: &str = "org.apache.hadoop.yarn.server.nodemanager.containermanager.container.ContainerImpl";
const MANAGER: &str = "org.apache.hadoop.yarn.server.nodemanager.containermanager.ContainerManagerImpl";
const MONITOR: &str = "org.apache.hadoop.yarn.server.nodemanager.containermanager.monitor.ContainersMonitorImpl";
const EXECUTOR: &str = "org.apache.hadoop.yarn.server.nodemanager.DefaultContainerExecutor";
const REDUCE: &str = "org.apache.hadoop.mapreduce.task.reduce";
const TASK: &str = "org.apache.hadoop.mapred.Task";
const MERGER_THREAD: &str = "InMemoryMerger - Thread to merge in-memory shuffled map-outputs";
/// The ShuffleHandler's port on every NodeManager.
const SHUFFLE_PORT: &str = ":13562";

/// `application_<cluster stamp>_<job>` of a job's id `<cluster stamp>_<job>`.
pub fn push_application(buf: &mut Vec<u8>, job: u32, names: &Names) {
    buf.extend_from_slice(b"application_");
    buf.extend_from_slice(names.jobs[job as usize].id.as_bytes());
}

/// `<host_dir>/userlogs/application_…/container_…/syslog`: the log of an attempt's container,
/// or of the job's application master (`task` None).
pub fn container_log(host_dir: &Path, job: u32, task: Option<TaskRef>, names: &Names, gzip: bool) -> PathBuf {
    let (mut application, mut container) = (Vec::new(), Vec::new());
    push_application(&mut application, job, names);
    push_container(&mut container, job, task, names);
    host_dir
        .join("userlogs")
        .join(String::from_utf8_lossy(&application).as_ref())
        .join(String::from_utf8_lossy(&container).as_ref())
        .join(file_name("syslog", gzip))
}

/// The container an attempt ran in: `container_<stamp>_<job>_01_<n>`, the application master's
/// being `…_000001` (`task` None). Numbers are unique per job; YARN's count up in the order of
/// allocation, which nothing reads.
pub fn push_container(buf: &mut Vec<u8>, job: u32, task: Option<TaskRef>, names: &Names) {
    buf.extend_from_slice(b"container_");
    buf.extend_from_slice(names.jobs[job as usize].id.as_bytes());
    buf.extend_from_slice(b"_01_");
    let n = task.map_or(1, |t| 2 + 2 * (u64::from(t.idx) * 8 + u64::from(t.attempt)) + u64::from(t.reduce));
    push_padded(buf, n, 6);
}

impl NodeWriter {
    /// `head` with the thread, as 2.x containers' log4j layout (`%d %p [%t] %c: %m%n`) has it.
    fn head_thread(&mut self, ms: i64, level: &str, thread: &str, logger: &str) {
        self.clock.push_stamp(&mut self.buf, ms);
        for part in [" ", level, " [", thread, "] ", logger, ": "] {
            self.s(part);
        }
    }

    fn container(&mut self, task: TaskRef, names: &Names) {
        push_container(&mut self.buf, task.job, Some(task), names);
    }

    /// `Container <c> transitioned from <a> to <b>`, one line per move.
    fn transitions(&mut self, ms: i64, task: TaskRef, moves: &[(&str, &str)], names: &Names) -> io::Result<()> {
        for (from, to) in moves {
            self.head(ms, "INFO", CONTAINER);
            self.s("Container ");
            self.container(task, names);
            for part in [" transitioned from ", from, " to ", to, "\n"] {
                self.s(part);
            }
            self.emit(Dest::Tasks)?;
        }
        Ok(())
    }

    /// The fetcher thread fetching `map` for `reduce`, or the first idle one for a fetch that
    /// starts (`start_ms`).
    fn fetcher(&mut self, reduce: TaskRef, map: TaskRef, start_ms: Option<i64>) -> Option<(usize, i64)> {
        let syslog = self.syslogs.iter_mut().find(|s| s.task == reduce)?;
        let Some(start) = start_ms else {
            let k = syslog.fetchers.iter().position(|f| f.is_some_and(|(m, _)| m == map))?;
            let (_, since) = syslog.fetchers[k].take()?;
            return Some((k + 1, since));
        };
        let k = match syslog.fetchers.iter().position(Option::is_none) {
            Some(k) => k,
            None => {
                syslog.fetchers.push(None);
                syslog.fetchers.len() - 1
            }
        };
        syslog.fetchers[k] = Some((map, start));
        Some((k + 1, start))
    }

    pub(super) fn yarn_line(&mut self, ms: i64, line: Line, names: &Names) -> io::Result<()> {
        match line {
            Line::Launch { task, .. } => {
                self.head(ms, "INFO", MANAGER);
                self.s("Start request for ");
                self.container(task, names);
                self.s(" by user hadoop\n");
                self.emit(Dest::Tasks)?;
                let moves = [("NEW", "LOCALIZING"), ("LOCALIZING", "LOCALIZED"), ("LOCALIZED", "RUNNING")];
                self.transitions(ms, task, &moves, names)
            }
            // The NodeManager hears of no progress (the application master does); its monitor
            // reports each container's memory every few seconds instead.
            Line::MapProgress { task, frac } | Line::ReduceProgress { task, frac, .. } => {
                self.head(ms, "INFO", MONITOR);
                self.s("Memory usage of ProcessTree ");
                self.n(10_000 + (task.key() % 50_000));
                self.s(" for container-id ");
                self.container(task, names);
                self.s(": ");
                self.n(180 + (f64::from(frac) * 300.0) as u64);
                self.s(" MB of 1 GB physical memory used; 1.9 GB of 2.1 GB virtual memory used\n");
                self.emit(Dest::Tasks)
            }
            Line::Done { task } => self.transitions(
                ms,
                task,
                &[("RUNNING", "EXITED_WITH_SUCCESS"), ("EXITED_WITH_SUCCESS", "DONE")],
                names,
            ),
            Line::ChildError { task } => {
                self.head(ms, "WARN", EXECUTOR);
                self.s("Exit code from container ");
                self.container(task, names);
                self.s(" is : 1\n");
                self.emit(Dest::Tasks)?;
                self.transitions(
                    ms,
                    task,
                    &[("RUNNING", "EXITED_WITH_FAILURE"), ("EXITED_WITH_FAILURE", "DONE")],
                    names,
                )
            }
            // The application master kills a hung or unwanted attempt's container.
            Line::Timeout { task } | Line::Kill { task } => {
                self.head(ms, "INFO", MANAGER);
                self.s("Stopping container with container Id: ");
                self.container(task, names);
                self.s("\n");
                self.emit(Dest::Tasks)?;
                let moves = [
                    ("RUNNING", "KILLING"),
                    ("KILLING", "CONTAINER_CLEANEDUP_AFTER_KILL"),
                    ("CONTAINER_CLEANEDUP_AFTER_KILL", "DONE"),
                ];
                self.transitions(ms, task, &moves, names)
            }
            // The ShuffleHandler logs a served map output only at DEBUG.
            Line::ShuffleServed { .. } => Ok(()),
            Line::SyslogOpen { task, .. } => {
                let out = Out::create(&container_log(&self.dir, task.job, Some(task), names, self.gzip), self.gzip)?;
                self.syslogs.push(Syslog { task, out, fetchers: Vec::new() });
                self.head_thread(ms, "INFO", "main", &[REDUCE, ".MergeManagerImpl"].concat());
                self.s("MergerManager: memoryLimit=141937872, maxSingleShuffleLimit=");
                self.n(u64::from(MAX_SINGLE_SHUFFLE));
                self.s(", mergeThreshold=93678992, ioSortFactor=10, memToMemMergeOutputsThreshold=10\n");
                self.emit(Dest::Syslog(task))?;
                let thread = "EventFetcher for fetching Map Completion Events";
                self.head_thread(ms, "INFO", thread, &[REDUCE, ".EventFetcher"].concat());
                self.attempt(task, names);
                self.s(" Thread started: ");
                self.s(thread);
                self.s("\n");
                self.emit(Dest::Syslog(task))
            }
            Line::CopyStart { reduce, map, from, bytes } => {
                let Some((k, _)) = self.fetcher(reduce, map, Some(ms)) else { return Ok(()) };
                let fetcher = format!("fetcher#{k}");
                self.head_thread(ms, "INFO", &fetcher, &[REDUCE, ".ShuffleSchedulerImpl"].concat());
                self.s("Assigning ");
                self.s(&names.hosts[usize::from(from)].0);
                self.s(SHUFFLE_PORT);
                self.s(" with 1 to ");
                self.s(&fetcher);
                self.s("\n");
                self.emit(Dest::Syslog(reduce))?;
                self.head_thread(ms, "INFO", &fetcher, &[REDUCE, ".Fetcher"].concat());
                self.s(&fetcher);
                self.s(" about to shuffle output of map ");
                self.attempt(map, names);
                self.s(" decomp: ");
                self.n(u64::from(bytes));
                self.s(" len: ");
                self.n(u64::from(bytes));
                self.s(if bytes > MAX_SINGLE_SHUFFLE { " to DISK\n" } else { " to MEMORY\n" });
                self.emit(Dest::Syslog(reduce))
            }
            Line::CopyDone { reduce, map, from, bytes } => {
                let Some((k, since)) = self.fetcher(reduce, map, None) else { return Ok(()) };
                let fetcher = format!("fetcher#{k}");
                let output = if bytes > MAX_SINGLE_SHUFFLE { ".OnDiskMapOutput" } else { ".InMemoryMapOutput" };
                self.head_thread(ms, "INFO", &fetcher, &[REDUCE, output].concat());
                self.s("Read ");
                self.n(u64::from(bytes));
                self.s(" bytes from map-output for ");
                self.attempt(map, names);
                self.s("\n");
                self.emit(Dest::Syslog(reduce))?;
                self.freed(ms, reduce, from, &fetcher, ms - since, names)
            }
            Line::CopyFailed { reduce, map, from, why } => {
                let Some((k, since)) = self.fetcher(reduce, map, None) else { return Ok(()) };
                let fetcher = format!("fetcher#{k}");
                self.head_thread(ms, "WARN", &fetcher, &[REDUCE, ".Fetcher"].concat());
                self.s("Failed to shuffle output of ");
                self.attempt(map, names);
                self.s(" from ");
                self.s(&names.hosts[usize::from(from)].0);
                self.s(match why {
                    CopyFault::Timeout => "\njava.net.SocketTimeoutException: Read timed out\n",
                    CopyFault::Rename => "\njava.io.IOException: Premature EOF from inputStream\n",
                });
                self.emit(Dest::Syslog(reduce))?;
                self.freed(ms, reduce, from, &fetcher, ms - since, names)
            }
            Line::MergeStart { reduce, files } => {
                self.head_thread(ms, "INFO", MERGER_THREAD, &[REDUCE, ".MergeManagerImpl"].concat());
                self.s("Initiating in-memory merge with ");
                self.n(u64::from(files));
                self.s(" segments...\n");
                self.emit(Dest::Syslog(reduce))
            }
            Line::MergeDone { reduce, files, merge, bytes } => {
                self.head_thread(ms, "INFO", MERGER_THREAD, &[REDUCE, ".MergeManagerImpl"].concat());
                self.attempt(reduce, names);
                self.s(" Merge of the ");
                self.n(u64::from(files));
                self.s(
                    " files in-memory complete. Local file is /tmp/hadoop-yarn/nm-local-dir/usercache/hadoop/appcache/",
                );
                push_application(&mut self.buf, reduce.job, names);
                self.s("/output/");
                self.attempt(reduce, names);
                self.s("/map_");
                self.n(u64::from(merge));
                self.s(".out.merged of size ");
                self.n(u64::from(bytes));
                self.s("\n");
                self.emit(Dest::Syslog(reduce))
            }
            Line::SyslogClose { task, done } => {
                if done {
                    self.head_thread(ms, "INFO", "main", TASK);
                    self.s("Task:");
                    self.attempt(task, names);
                    self.s(" is done. And is in the process of committing\n");
                    self.emit(Dest::Syslog(task))?;
                    self.head_thread(ms, "INFO", "main", TASK);
                    self.s("Task '");
                    self.attempt(task, names);
                    self.s("' done.\n");
                    self.emit(Dest::Syslog(task))?;
                }
                self.close_syslog(task)
            }
            // The DataNode's, block pools aside, are worded as 0.20 words them.
            Line::Receiving { .. }
            | Line::Received { .. }
            | Line::ReceiveFailed { .. }
            | Line::ReadStart
            | Line::Served { .. }
            | Line::ServeFailed { .. }
            | Line::DiskFull => self.classic_line(ms, line, names),
        }
    }

    /// The shuffle scheduler's note that a fetcher is done with a host.
    fn freed(
        &mut self,
        ms: i64,
        reduce: TaskRef,
        from: u16,
        fetcher: &str,
        took: i64,
        names: &Names,
    ) -> io::Result<()> {
        self.head_thread(ms, "INFO", fetcher, &[REDUCE, ".ShuffleSchedulerImpl"].concat());
        self.s(&names.hosts[usize::from(from)].0);
        self.s(SHUFFLE_PORT);
        self.s(" freed by ");
        self.s(fetcher);
        self.s(" in ");
        push_u64(&mut self.buf, took.max(0) as u64);
        self.s("ms\n");
        self.emit(Dest::Syslog(reduce))
    }
}
