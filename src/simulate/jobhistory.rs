//! The JobTracker's job history, one file per job as Hadoop keeps it: `Job`, `Task`,
//! `MapAttempt` and `ReduceAttempt` records of `KEY="value"` pairs. 0.20 opens with
//! `Meta VERSION="1" .`, ends each record with ` .` and escapes `.`, `"` and `=` in values with
//! a backslash; 0.18 does none of that.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::Version;
use super::workload::JobSpec;
use super::writers::{Names, Out, TaskRef, file_name, push_attempt, push_i64, push_padded};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Success,
    Failed,
    Killed,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Success => "SUCCESS",
            Status::Failed => "FAILED",
            Status::Killed => "KILLED",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Hist {
    Submit,
    Launch,
    TaskStart { idx: u32, reduce: bool, splits: Option<[u16; 3]> },
    AttemptStart { task: TaskRef, node: u16 },
    AttemptEnd { task: TaskRef, node: u16, status: Status, shuffle_ms: i64, sort_ms: i64 },
    TaskEnd { idx: u32, reduce: bool },
    JobEnd { status: Status, maps: u32, reduces: u32, failed_maps: u32, failed_reduces: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistRec {
    pub ts_ms: i64,
    pub h: Hist,
}

struct Record<'a> {
    buf: Vec<u8>,
    scratch: Vec<u8>,
    version: Version,
    epoch_ms: i64,
    names: &'a Names<'a>,
}

impl Record<'_> {
    fn start(&mut self, kind: &str) {
        self.buf.extend_from_slice(kind.as_bytes());
    }

    fn kv(&mut self, key: &str, value: &str) {
        self.kv_bytes(key, value.as_bytes());
    }

    /// ` KEY="value"`, 0.20 escaping `.`, `"` and `=` (ASCII, so byte by byte is exact).
    fn kv_bytes(&mut self, key: &str, value: &[u8]) {
        self.buf.push(b' ');
        self.buf.extend_from_slice(key.as_bytes());
        self.buf.extend_from_slice(b"=\"");
        for &b in value {
            if self.version == Version::V020 && matches!(b, b'.' | b'"' | b'=') {
                self.buf.push(b'\\');
            }
            self.buf.push(b);
        }
        self.buf.push(b'"');
    }

    /// A value made by `f`, without a String per value.
    fn kv_with(&mut self, key: &str, f: impl FnOnce(&mut Vec<u8>, &Names)) {
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        f(&mut value, self.names);
        self.kv_bytes(key, &value);
        self.scratch = value;
    }

    fn time(&mut self, key: &str, ts_ms: i64) {
        let ms = self.epoch_ms + ts_ms;
        self.kv_with(key, |v, _| push_i64(v, ms));
    }

    fn task(&mut self, job: u32, idx: u32, reduce: bool) {
        self.kv_with("TASKID", |v, names| push_task_id(v, names, job, idx, reduce));
    }

    fn host(&mut self, key: &str, node: u16) {
        self.kv_with(key, |v, names| push_host(v, names, node));
    }

    fn end(&mut self, out: &mut Out) -> io::Result<()> {
        if self.version == Version::V020 {
            self.buf.extend_from_slice(b" .");
        }
        self.buf.push(b'\n');
        out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

fn push_host(v: &mut Vec<u8>, names: &Names, node: u16) {
    v.extend_from_slice(b"/default-rack/");
    v.extend_from_slice(names.hosts[usize::from(node)].0.as_bytes());
}

/// `task_<jt>_<job>_m_000003`.
pub(super) fn push_task_id(v: &mut Vec<u8>, names: &Names, job: u32, idx: u32, reduce: bool) {
    v.extend_from_slice(b"task_");
    v.extend_from_slice(names.jobs[job as usize].id.as_bytes());
    v.extend_from_slice(if reduce { b"_r_" } else { b"_m_" });
    push_padded(v, u64::from(idx), 6);
}

/// `history/<master>_<jt start>_job_<id>_<user>_<name>`, as the JobTracker names the file.
pub fn path(dir: &Path, master: &str, jt_start_ms: i64, job_id: &str, spec: &JobSpec, gzip: bool) -> PathBuf {
    let name: String = spec.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    dir.join(file_name(&format!("{master}_{jt_start_ms}_job_{job_id}_{}_{name}", spec.user), gzip))
}

/// Writes one job's history, its records already in time order.
pub fn write(path: &Path, job: u32, spec: &JobSpec, recs: &[HistRec], names: &Names, gzip: bool) -> io::Result<()> {
    let mut out = Out::create(path, gzip)?;
    let job_name = &names.jobs[job as usize];
    let job_id = format!("job_{}", job_name.id);
    let mut r = Record {
        buf: Vec::with_capacity(512),
        scratch: Vec::with_capacity(128),
        version: names.version,
        epoch_ms: names.epoch_ms,
        names,
    };
    if names.version == Version::V020 {
        r.start("Meta");
        r.kv("VERSION", "1");
        r.end(&mut out)?;
    }
    for rec in recs {
        match rec.h {
            Hist::Submit => {
                r.start("Job");
                r.kv("JOBID", &job_id);
                r.kv("JOBNAME", &spec.name);
                r.kv("USER", &spec.user);
                r.time("SUBMIT_TIME", rec.ts_ms);
                r.kv("JOBCONF", &format!("hdfs://master:9000/mapred/system/{job_id}/job.xml"));
                r.end(&mut out)?;
                if names.version == Version::V020 {
                    r.start("Job");
                    r.kv("JOBID", &job_id);
                    r.kv("JOB_PRIORITY", "NORMAL");
                    r.end(&mut out)?;
                }
            }
            Hist::Launch => {
                r.start("Job");
                r.kv("JOBID", &job_id);
                r.time("LAUNCH_TIME", rec.ts_ms);
                r.kv("TOTAL_MAPS", &spec.maps.to_string());
                r.kv("TOTAL_REDUCES", &spec.reduces.to_string());
                if names.version == Version::V020 {
                    r.kv("JOB_STATUS", "PREP");
                    r.end(&mut out)?;
                    r.start("Job");
                    r.kv("JOBID", &job_id);
                    r.kv("JOB_STATUS", "RUNNING");
                }
                r.end(&mut out)?;
            }
            Hist::TaskStart { idx, reduce, splits } => {
                r.start("Task");
                r.task(job, idx, reduce);
                r.kv("TASK_TYPE", if reduce { "REDUCE" } else { "MAP" });
                r.time("START_TIME", rec.ts_ms);
                r.kv_with("SPLITS", |v, names| {
                    for (i, &n) in splits.iter().flatten().enumerate() {
                        if i > 0 {
                            v.push(b',');
                        }
                        push_host(v, names, n);
                    }
                });
                r.end(&mut out)?;
            }
            Hist::AttemptStart { task, node } => {
                attempt_head(&mut r, task);
                r.time("START_TIME", rec.ts_ms);
                match names.version {
                    Version::V018 => r.host("HOSTNAME", node),
                    Version::V020 | Version::V2 => {
                        let (host, ip) = &names.hosts[usize::from(node)];
                        r.kv("TRACKER_NAME", &format!("tracker_{host}:localhost/{ip}:50050"));
                        r.kv("HTTP_PORT", "50060");
                    }
                }
                r.end(&mut out)?;
            }
            Hist::AttemptEnd { task, node, status, shuffle_ms, sort_ms } => {
                attempt_head(&mut r, task);
                r.kv("TASK_STATUS", status.name());
                if task.reduce && status == Status::Success {
                    r.time("SHUFFLE_FINISHED", shuffle_ms);
                    r.time("SORT_FINISHED", sort_ms);
                }
                r.time("FINISH_TIME", rec.ts_ms);
                r.host("HOSTNAME", node);
                match status {
                    Status::Success if task.reduce => r.kv("STATE_STRING", "reduce > reduce"),
                    Status::Success => r.kv_with("STATE_STRING", |v, _| {
                        v.extend_from_slice(b"hdfs://master:9000");
                        v.extend_from_slice(job_name.input.as_bytes());
                    }),
                    Status::Failed => r.kv("ERROR", "java.io.IOException: Task process exit with nonzero status of 1."),
                    Status::Killed => r.kv("ERROR", ""),
                }
                r.end(&mut out)?;
            }
            Hist::TaskEnd { idx, reduce } => {
                r.start("Task");
                r.task(job, idx, reduce);
                r.kv("TASK_TYPE", if reduce { "REDUCE" } else { "MAP" });
                r.kv("TASK_STATUS", "SUCCESS");
                r.time("FINISH_TIME", rec.ts_ms);
                r.end(&mut out)?;
            }
            Hist::JobEnd { status, maps, reduces, failed_maps, failed_reduces } => {
                r.start("Job");
                r.kv("JOBID", &job_id);
                r.time("FINISH_TIME", rec.ts_ms);
                r.kv("JOB_STATUS", status.name());
                r.kv("FINISHED_MAPS", &maps.to_string());
                r.kv("FINISHED_REDUCES", &reduces.to_string());
                if status == Status::Success || names.version == Version::V018 {
                    r.kv("FAILED_MAPS", &failed_maps.to_string());
                    r.kv("FAILED_REDUCES", &failed_reduces.to_string());
                }
                r.end(&mut out)?;
            }
        }
    }
    out.finish()
}

fn attempt_head(r: &mut Record, task: TaskRef) {
    r.start(if task.reduce { "ReduceAttempt" } else { "MapAttempt" });
    r.kv("TASK_TYPE", if task.reduce { "REDUCE" } else { "MAP" });
    r.task(task.job, task.idx, task.reduce);
    r.kv_with("TASK_ATTEMPT_ID", |v, names| push_attempt(v, task, names));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::writers::JobName;

    #[test]
    fn records_as_020_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = vec![("r01n01".to_string(), "10.1.1.10".to_string())];
        let jobs = vec![JobName { id: "200808250000_0001".into(), input: "/user/hadoop/in".into(), input_mb: 64.0 }];
        let names = Names { version: Version::V020, epoch_ms: 1_000_000, hosts: &hosts, jobs: &jobs };
        let mut spec =
            crate::simulate::workload::Driver::new(crate::simulate::workload::Workload::Sort, 1, 1).next(0).1;
        spec.maps = 1;
        spec.reduces = 0;
        let m = TaskRef { job: 0, idx: 0, attempt: 0, reduce: false };
        let recs = [
            HistRec { ts_ms: 0, h: Hist::Submit },
            HistRec { ts_ms: 10, h: Hist::Launch },
            HistRec { ts_ms: 20, h: Hist::AttemptStart { task: m, node: 0 } },
            HistRec {
                ts_ms: 90,
                h: Hist::AttemptEnd { task: m, node: 0, status: Status::Success, shuffle_ms: 0, sort_ms: 0 },
            },
            HistRec {
                ts_ms: 99,
                h: Hist::JobEnd { status: Status::Success, maps: 1, reduces: 0, failed_maps: 0, failed_reduces: 0 },
            },
        ];
        let p = path(dir.path(), "master", 5, "200808250000_0001", &spec, false);
        assert!(p.ends_with("master_5_job_200808250000_0001_hadoop_sorter"));
        write(&p, 0, &spec, &recs, &names, false).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Meta VERSION=\"1\" .");
        assert_eq!(
            lines[1],
            "Job JOBID=\"job_200808250000_0001\" JOBNAME=\"sorter\" USER=\"hadoop\" SUBMIT_TIME=\"1000000\" JOBCONF=\"hdfs://master:9000/mapred/system/job_200808250000_0001/job\\.xml\" ."
        );
        assert_eq!(
            lines[3],
            "Job JOBID=\"job_200808250000_0001\" LAUNCH_TIME=\"1000010\" TOTAL_MAPS=\"1\" TOTAL_REDUCES=\"0\" JOB_STATUS=\"PREP\" ."
        );
        assert!(lines[5].contains("TRACKER_NAME=\"tracker_r01n01:localhost/10\\.1\\.1\\.10:50050\""), "{}", lines[5]);
        assert_eq!(
            lines[7],
            "Job JOBID=\"job_200808250000_0001\" FINISH_TIME=\"1000099\" JOB_STATUS=\"SUCCESS\" FINISHED_MAPS=\"1\" FINISHED_REDUCES=\"0\" FAILED_MAPS=\"0\" FAILED_REDUCES=\"0\" ."
        );
    }
}
