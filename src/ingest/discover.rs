//! Finding log files under the paths given and telling, for each, which daemon wrote it, on
//! which host, in which line layout, and what identifies its content across renames.

use std::fmt;
use std::hash::Hasher as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use twox_hash::XxHash3_64;

use super::log4j::{Head, Layout, parse_head};
use super::pattern::Pattern;
use super::source::{LineReader, is_gzip, read_end};
use super::{datanode, ids, tasktracker};

/// The daemons whose logs we read. Lowercase, as Hadoop names its log files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Daemon {
    TaskTracker,
    DataNode,
    JobTracker,
    NameNode,
    SecondaryNameNode,
    /// A task attempt's own log, `userlogs/<attempt>/syslog`.
    Task,
    /// A YARN MapReduce job's application master (its container's `syslog`): the lines that
    /// start and end its attempts name the nodes they run on.
    AppMaster,
    /// YARN's daemons: a node's containers, and the cluster's scheduler and job history.
    NodeManager,
    ResourceManager,
    HistoryServer,
}

impl Daemon {
    pub const ALL: [Daemon; 10] = [
        Daemon::TaskTracker,
        Daemon::DataNode,
        Daemon::JobTracker,
        Daemon::NameNode,
        Daemon::SecondaryNameNode,
        Daemon::Task,
        Daemon::AppMaster,
        Daemon::NodeManager,
        Daemon::ResourceManager,
        Daemon::HistoryServer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Daemon::TaskTracker => "tasktracker",
            Daemon::DataNode => "datanode",
            Daemon::JobTracker => "jobtracker",
            Daemon::NameNode => "namenode",
            Daemon::SecondaryNameNode => "secondarynamenode",
            Daemon::Task => "task",
            Daemon::AppMaster => "mrappmaster",
            Daemon::NodeManager => "nodemanager",
            Daemon::ResourceManager => "resourcemanager",
            Daemon::HistoryServer => "historyserver",
        }
    }

    pub fn parse(name: &str) -> Option<Daemon> {
        Daemon::ALL.into_iter().find(|d| d.name().eq_ignore_ascii_case(name))
    }

    /// The daemon a log4j logger belongs to, for files that do not say and merged files.
    pub fn of_logger(logger: &str) -> Option<Daemon> {
        const RULES: [(&str, Daemon); 18] = [
            // Before "Task": the application master's loggers are `…v2.app.job.impl.TaskImpl` and kin.
            ("mapreduce.v2.app", Daemon::AppMaster),
            ("mapreduce.v2.hs", Daemon::HistoryServer),
            ("yarn.server.nodemanager", Daemon::NodeManager),
            ("yarn.server.resourcemanager", Daemon::ResourceManager),
            ("clienttrace", Daemon::DataNode),
            ("TaskTracker", Daemon::TaskTracker),
            ("TaskRunner", Daemon::TaskTracker),
            ("JvmManager", Daemon::TaskTracker),
            ("DataNode", Daemon::DataNode),
            ("FSDataset", Daemon::DataNode),
            ("DataBlockScanner", Daemon::DataNode),
            ("SecondaryNameNode", Daemon::SecondaryNameNode),
            ("FSNamesystem", Daemon::NameNode),
            ("NameNode", Daemon::NameNode),
            ("StateChange", Daemon::NameNode),
            ("JobTracker", Daemon::JobTracker),
            ("JobInProgress", Daemon::JobTracker),
            ("Task", Daemon::Task),
        ];
        let logger = logger
            .strip_suffix(".clienttrace")
            .map_or(logger, |l| if l.ends_with("TaskTracker") { "TaskTracker" } else { "clienttrace" });
        RULES.iter().find(|(needle, _)| logger.contains(needle)).map(|(_, d)| *d)
    }
}

impl fmt::Display for Daemon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whose lines a file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostOrigin {
    /// One host, named by `--host`, the file name or its folder.
    Known(String),
    /// Many hosts in one file (Loghub's HDFS file): each line names its DataNode, or nobody.
    Merged,
}

/// A log file ready to read.
#[derive(Clone, Debug)]
pub struct LogFile {
    pub path: PathBuf,
    /// The path as the user gave it, for messages and the `file` column.
    pub display: String,
    pub size: u64,
    pub gzip: bool,
    pub daemon: Daemon,
    pub host: HostOrigin,
    pub layout: Layout,
    /// Identifies the content whatever the file is called now: a hash of the host, the daemon and
    /// the first line, so a log renamed by rotation is still the log ingested before.
    pub key: String,
    /// The key of a task attempt's log before its attempt was part of it, so that a warehouse
    /// which holds the file under that key does not read it again.
    pub legacy_key: Option<String>,
    /// The attempt whose own log this is (`userlogs/…/<attempt>/syslog`), from its folder.
    pub attempt: Option<String>,
    /// UTC-agnostic wall-clock time of the first event, to order the files of one stream.
    pub first_local_ms: i64,
    /// Where reading stops: the last complete line of a plain file, None for gzip (read to end).
    pub end: Option<u64>,
}

/// A file that cannot be read as a Hadoop log, and why.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub display: String,
    pub size: u64,
    pub reason: String,
    /// Not a log at all, and known for what it is: listed as skipped, not refused.
    pub skipped: bool,
}

/// Files a Hadoop log folder holds beside the logs, told by their first lines where no line is
/// a log4j line: the kind is what the ingest lists them under, skipped rather than refused.
fn not_a_log(name: &str, lines: &[&str]) -> Option<&'static str> {
    let first = lines.iter().map(|l| l.trim()).find(|l| !l.is_empty())?;
    if name.ends_with(".xml") || first.starts_with("<?xml") || first.starts_with("<configuration") {
        return Some("XML (a configuration or a job's conf), not a log");
    }
    if first.starts_with('{') || first.starts_with('[') {
        return Some("JSON (a Rumen trace or another export), not a log");
    }
    if lines.iter().any(|l| l.starts_with("ulimit -a") || l.starts_with("core file size")) {
        return Some("the ulimit report hadoop-daemon.sh writes to its .out file, not a log");
    }
    if matches!(name, "stdout" | "stderr") {
        return Some("a task container's standard output, with no log4j line");
    }
    None
}

/// What the command line says about every file.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    pub host: Option<String>,
    pub daemon: Option<Daemon>,
    /// The layout of every log (`--layout`), where the built-in ones do not read it.
    pub layout: Option<Layout>,
    /// The one network interface whose traffic is sadc's rx/tx (all but loopback, summed, if None).
    pub iface: Option<String>,
}

/// Every regular file under `paths`, in a stable order, each once: a file named twice (itself
/// and a folder that holds it, or two spellings of one path) is kept where it first appears.
pub fn walk(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut keep = |path: PathBuf| {
        if seen.insert(std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone())) {
            files.push(path);
        }
    };
    for path in paths {
        let meta = std::fs::metadata(path).with_context(|| format!("{}: cannot read", path.display()))?;
        if meta.is_file() {
            keep(path.clone());
            continue;
        }
        for entry in walkdir::WalkDir::new(path).sort_by_file_name() {
            let entry = entry.with_context(|| format!("{}: cannot walk", path.display()))?;
            let name = entry.file_name().to_string_lossy();
            if entry.file_type().is_file() && !name.starts_with('.') {
                keep(entry.into_path());
            }
        }
    }
    Ok(files)
}

/// `hadoop-<user>-<daemon>-<host>.log[.<suffix>][.gz]` → (daemon, host).
pub fn daemon_and_host_of_name(name: &str) -> (Option<Daemon>, Option<String>) {
    let Some(log_at) = name.find(".log") else {
        return (None, None);
    };
    let stem = &name[..log_at];
    let parts: Vec<&str> = stem.split('-').collect();
    for (i, part) in parts.iter().enumerate().skip(1) {
        if let Some(daemon) = Daemon::parse(part) {
            let host = parts[i + 1..].join("-");
            return (Some(daemon), (!host.is_empty()).then_some(host));
        }
    }
    (None, None)
}

/// A folder named like a host: `node1`, `r12n03`, `10.0.0.5`, `fp30.pdl.cmu.local`; not `logs`,
/// `hadoop` or a date.
fn hostlike(name: &str) -> bool {
    let chars_ok = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
    let has_digit_or_dot = name.bytes().any(|b| b.is_ascii_digit() || b == b'.');
    let date = name.len() == 10 && name.as_bytes()[4] == b'-' && name.as_bytes()[7] == b'-';
    chars_ok
        && has_digit_or_dot
        && !date
        && !name.starts_with('.')
        && !name.starts_with("attempt_")
        && !name.starts_with("job_")
}

/// For `…/<host>/userlogs/<job>/<attempt>/syslog` or `…/<host>/hadoop-….log`: the host folder.
fn host_of_folder(path: &Path) -> Option<String> {
    let parts: Vec<String> =
        path.parent()?.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let candidate = match parts.iter().position(|p| p == "userlogs") {
        Some(at) => parts.get(at.checked_sub(1)?)?,
        None => parts.last()?,
    };
    hostlike(candidate).then(|| candidate.clone())
}

fn is_attempt_log(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "syslog") && path.components().any(|c| c.as_os_str() == "userlogs")
}

const PROBE_LINES: usize = 200;

/// Reads a file's first lines and decides how to ingest it.
pub fn classify(path: &Path, hints: &Hints) -> Result<LogFile, Refusal> {
    let display = path.display().to_string();
    let refuse = |size: u64, reason: String| Refusal { display: display.clone(), size, reason, skipped: false };
    let meta = std::fs::metadata(path).map_err(|e| refuse(0, format!("cannot read: {e}")))?;
    let size = meta.len();
    if size == 0 {
        return Err(Refusal { skipped: true, ..refuse(0, "empty file".into()) });
    }
    let gzip = is_gzip(path).map_err(|e| refuse(size, format!("cannot read: {e}")))?;
    let end = match gzip {
        true => None,
        false => Some(read_end(path, size, meta.modified()).map_err(|e| refuse(size, format!("cannot read: {e}")))?),
    };
    let head = probe(path, gzip).map_err(|e| refuse(size, e))?;
    if let Some(at) = head.binary_at {
        return Err(refuse(size, format!("binary file (NUL byte at offset {at}), not a log")));
    }
    let lines: Vec<&str> = head.lines.iter().map(String::as_str).collect();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if let Some(layout) = hints.layout
        && !lines.iter().any(|line| matches!(parse_head(layout, line), Head::Event(_)))
        && not_a_log(&name, &lines).is_none()
    {
        return Err(refuse(
            size,
            format!("no line in the first {PROBE_LINES} reads with --layout {:?}", layout.name()),
        ));
    }
    let Some(layout) = hints.layout.or_else(|| Layout::detect(lines.iter().copied())) else {
        if let Some(kind) = not_a_log(&name, &lines) {
            return Err(Refusal { skipped: true, ..refuse(size, kind.into()) });
        }
        return Err(refuse(
            size,
            "no line in the first 200 starts like a Hadoop log4j line (`yyyy-MM-dd HH:mm:ss,SSS LEVEL logger: message`, `yyMMdd HHmmss thread LEVEL logger: message` or `yy/MM/dd HH:mm:ss LEVEL logger: message`)".into(),
        ));
    };
    let events: Vec<_> = lines
        .iter()
        .filter_map(|l| match parse_head(layout, l) {
            Head::Event(e) => Some(e),
            _ => None,
        })
        .collect();
    let (named_daemon, named_host) = daemon_and_host_of_name(&name);
    let by_loggers = majority_daemon(events.iter().map(|e| e.logger));
    let daemon = hints
        .daemon
        .or(named_daemon)
        // A YARN container's `syslog` is a task's, or its job's application master's.
        .or(by_loggers.filter(|d| *d == Daemon::AppMaster))
        .or_else(|| is_attempt_log(path).then_some(Daemon::Task))
        .or(by_loggers);
    let Some(daemon) = daemon else {
        return Err(refuse(
            size,
            "cannot tell which daemon wrote it: name it hadoop-<user>-<daemon>-<host>.log or pass --daemon".into(),
        ));
    };
    let host = match hints.host.clone().or(named_host).or_else(|| host_of_folder(path)) {
        Some(host) => HostOrigin::Known(host),
        None if daemon == Daemon::AppMaster || events.iter().any(|e| datanode::own_host(e.message).is_some()) => {
            HostOrigin::Merged
        }
        None => {
            return Err(refuse(
                size,
                "cannot tell which host wrote it: name it hadoop-<user>-<daemon>-<host>.log, put it in a folder named after the host, or pass --host".into(),
            ));
        }
    };
    let host_tag = match &host {
        HostOrigin::Known(h) => h.as_str(),
        HostOrigin::Merged => "*",
    };
    let mut hasher = XxHash3_64::with_seed(0);
    hasher.write(host_tag.as_bytes());
    hasher.write(daemon.name().as_bytes());
    hasher.write(head.lines.first().map_or(&[][..], |l| l.as_bytes()));
    // Attempts' logs open alike (`Initializing JVM Metrics with processName=MAP…`), to the
    // millisecond where slots start together; each has its own folder, never renamed.
    let attempt_log = is_attempt_log(path);
    let legacy_key = attempt_log.then(|| format!("{:016x}", hasher.finish()));
    let mut attempt = None;
    if attempt_log {
        let folder = path.parent().and_then(Path::file_name).unwrap_or_default();
        hasher.write(folder.as_encoded_bytes());
        attempt = folder
            .to_str()
            .filter(|f| ids::is_attempt(f))
            .or_else(|| events.iter().find_map(|e| tasktracker::reduce_of_event_fetcher(e.message)))
            .map(str::to_string);
    }
    Ok(LogFile {
        path: path.to_path_buf(),
        display,
        size,
        gzip,
        daemon,
        host,
        layout,
        key: format!("{:016x}", hasher.finish()),
        legacy_key,
        attempt,
        first_local_ms: events.first().map_or(i64::MAX, |e| e.local_ms),
        end,
    })
}

struct Probe {
    lines: Vec<String>,
    /// The first NUL byte's offset, where most lines probed hold one: a binary file. A log
    /// with a stray NUL (what a crash leaves in its last blocks) is read, and the lines with
    /// the NUL are rejected one by one.
    binary_at: Option<u64>,
}

/// The first lines, the last of them possibly unfinished: a binary file may have no `\n` at all.
fn probe(path: &Path, gzip: bool) -> Result<Probe, String> {
    let mut reader = LineReader::open(path, gzip, 0, None, 1).map_err(|e| format!("cannot read: {e}"))?;
    let mut lines = Vec::new();
    let (mut first_nul, mut with_nul) = (None, 0);
    while lines.len() < PROBE_LINES {
        match reader.next_line() {
            Ok(Some(line)) => {
                if let Some(at) = memchr::memchr(0, line.bytes()) {
                    first_nul.get_or_insert(line.offset + at as u64);
                    with_nul += 1;
                }
                // `from_utf8` first: its check is several times faster than the lossy decoder's,
                // and for a folder of small attempt logs this reads most lines of every file.
                lines.push(match std::str::from_utf8(line.bytes()) {
                    Ok(text) => text.to_string(),
                    Err(_) => String::from_utf8_lossy(line.bytes()).into_owned(),
                });
            }
            Ok(None) => break,
            // A damaged gzip header shows here; a stream cut later is the ingest's to report.
            Err(e) if lines.is_empty() => return Err(format!("cannot read: {e}")),
            Err(_) => break,
        }
    }
    let binary_at = first_nul.filter(|_| with_nul * 2 > lines.len());
    Ok(Probe { lines, binary_at })
}

fn majority_daemon<'a>(loggers: impl Iterator<Item = &'a str>) -> Option<Daemon> {
    let mut counts = std::collections::BTreeMap::new();
    for daemon in loggers.filter_map(Daemon::of_logger) {
        *counts.entry(daemon).or_insert(0usize) += 1;
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(d, _)| d)
}

/// The layout of a `--layout` pattern, or why Kahuna cannot read it.
pub fn layout_of(pattern: &str) -> Result<Layout, String> {
    Pattern::intern(pattern).map(Layout::Pattern)
}

/// Fails on a `--daemon` value that is not a daemon, naming the ones that are.
pub fn parse_daemon_flag(name: &str) -> Result<Daemon> {
    match Daemon::parse(name) {
        Some(d) => Ok(d),
        None => bail!("--daemon {name}: not a daemon; one of {}", Daemon::ALL.map(Daemon::name).join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_daemon_and_host() {
        assert_eq!(
            daemon_and_host_of_name("hadoop-hadoop-tasktracker-r12-n3.example.com.log.2008-08-23.gz"),
            (Some(Daemon::TaskTracker), Some("r12-n3.example.com".into()))
        );
        assert_eq!(
            daemon_and_host_of_name("hadoop-joe-datanode-node1.log"),
            (Some(Daemon::DataNode), Some("node1".into()))
        );
        assert_eq!(
            daemon_and_host_of_name("yarn-hadoop-nodemanager-worker1.log.1"),
            (Some(Daemon::NodeManager), Some("worker1".into()))
        );
        assert_eq!(daemon_and_host_of_name("HDFS_2k.log"), (None, None));
        assert_eq!(daemon_and_host_of_name("syslog"), (None, None));
    }

    #[test]
    fn folders_give_hosts_when_they_look_like_hosts() {
        assert_eq!(host_of_folder(Path::new("logs/node3/hadoop.log")), Some("node3".into()));
        assert_eq!(
            host_of_folder(Path::new("x/10.0.0.5/userlogs/attempt_200808231712_0001_m_000001_0/syslog")),
            Some("10.0.0.5".into())
        );
        assert_eq!(host_of_folder(Path::new("var/log/hadoop/x.log")), None);
        assert_eq!(host_of_folder(Path::new("logs/2008-08-23/x.log")), None);
    }

    /// Two attempts whose logs open with the same line are two files; either is still known
    /// by the key it had before.
    #[test]
    fn attempts_logs_that_open_alike_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let line = "2008-08-23 17:12:30,000 INFO org.apache.hadoop.metrics.jvm.JvmMetrics: Initializing JVM Metrics with processName=MAP, sessionId=\n";
        let files: Vec<LogFile> = ["attempt_200808231712_0001_m_000001_0", "attempt_200808231712_0001_m_000002_0"]
            .iter()
            .map(|attempt| {
                let folder = dir.path().join("node1/userlogs").join(attempt);
                std::fs::create_dir_all(&folder).unwrap();
                std::fs::write(folder.join("syslog"), line).unwrap();
                classify(&folder.join("syslog"), &Hints::default()).unwrap()
            })
            .collect();
        assert_ne!(files[0].key, files[1].key);
        assert!(files[0].legacy_key.is_some());
        assert_eq!(files[0].legacy_key, files[1].legacy_key);
    }

    #[test]
    fn loggers_give_daemons() {
        assert_eq!(Daemon::of_logger("org.apache.hadoop.mapred.TaskTracker"), Some(Daemon::TaskTracker));
        assert_eq!(Daemon::of_logger("org.apache.hadoop.mapred.TaskTracker.clienttrace"), Some(Daemon::TaskTracker));
        assert_eq!(
            Daemon::of_logger("org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace"),
            Some(Daemon::DataNode)
        );
        assert_eq!(Daemon::of_logger("dfs.DataNode$PacketResponder"), Some(Daemon::DataNode));
        assert_eq!(Daemon::of_logger("dfs.FSNamesystem"), Some(Daemon::NameNode));
        assert_eq!(Daemon::of_logger("org.apache.hadoop.mapred.ReduceTask"), Some(Daemon::Task));
        assert_eq!(
            Daemon::of_logger("org.apache.hadoop.mapreduce.v2.app.job.impl.TaskAttemptImpl"),
            Some(Daemon::AppMaster)
        );
        assert_eq!(
            Daemon::of_logger("org.apache.hadoop.yarn.server.nodemanager.containermanager.container.ContainerImpl"),
            Some(Daemon::NodeManager)
        );
        assert_eq!(Daemon::of_logger("org.mortbay.log"), None);
    }
}
