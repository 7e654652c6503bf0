//! The log files of one slave node, written from the scheduler's records: the TaskTracker log,
//! the DataNode log and one `userlogs/<attempt>/syslog` per reduce attempt, worded as Hadoop
//! 0.18 or 0.20 words them (the messages `crate::ingest` recognises, and the ones around them);
//! from Hadoop 2 the NodeManager's log and containers' syslogs in their place ([`yarn`]).
//!
//! The scheduler decides times and ids; a record is ~40 bytes and names hosts, jobs and blocks
//! by number. Text is made here, by hand on a byte buffer (no `format!` per line): this is the
//! hot path of a 0.45 B-line history.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

use super::Version;
use super::cluster::DataNodeLog;

mod yarn;

pub use yarn::{container_log, push_application, push_container};

/// A task attempt, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskRef {
    pub job: u32,
    pub idx: u32,
    pub attempt: u8,
    pub reduce: bool,
}

impl TaskRef {
    /// One number per attempt, to find an attempt's records again.
    pub fn key(self) -> u64 {
        (u64::from(self.job) << 32)
            | (u64::from(self.idx) << 9)
            | (u64::from(self.attempt) << 1)
            | u64::from(self.reduce)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReducePhase {
    Copy { done: u32, total: u32, mb_s: f32 },
    Sort,
    Reduce,
}

/// Why a copy of a map's output failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFault {
    /// The connection timed out (a lossy link).
    Timeout,
    /// The output was fetched but its rename in the in-memory file system failed (HADOOP-1152).
    Rename,
}

/// One log event, before it is text. Node numbers index the run's [`Names::hosts`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Line {
    // TaskTracker log.
    Launch {
        task: TaskRef,
        free_slots: u8,
    },
    MapProgress {
        task: TaskRef,
        frac: f32,
    },
    ReduceProgress {
        task: TaskRef,
        frac: f32,
        phase: ReducePhase,
    },
    Done {
        task: TaskRef,
    },
    Timeout {
        task: TaskRef,
    },
    ChildError {
        task: TaskRef,
    },
    Kill {
        task: TaskRef,
    },
    /// The map's TaskTracker served its output to a reduce on `to`.
    ShuffleServed {
        map: TaskRef,
        reduce: TaskRef,
        to: u16,
        port: u16,
        bytes: u32,
        dur_ms: u32,
    },
    // A reduce attempt's syslog.
    SyslogOpen {
        task: TaskRef,
        maps: u32,
    },
    CopyStart {
        reduce: TaskRef,
        map: TaskRef,
        from: u16,
        bytes: u32,
    },
    CopyDone {
        reduce: TaskRef,
        map: TaskRef,
        from: u16,
        bytes: u32,
    },
    CopyFailed {
        reduce: TaskRef,
        map: TaskRef,
        from: u16,
        why: CopyFault,
    },
    MergeStart {
        reduce: TaskRef,
        files: u16,
    },
    MergeDone {
        reduce: TaskRef,
        files: u16,
        merge: u16,
        bytes: u32,
    },
    SyslogClose {
        task: TaskRef,
        done: bool,
    },
    // DataNode log.
    Receiving {
        block: i64,
        src: u16,
        port: u16,
    },
    Received {
        block: i64,
        src: u16,
        port: u16,
        size: u32,
        client: TaskRef,
        dur_ms: u32,
        downstream: u8,
    },
    /// A receive whose writer died (its attempt was killed): the DataNode's thread reads an
    /// early end of stream.
    ReceiveFailed {
        block: i64,
    },
    ReadStart,
    Served {
        block: i64,
        to: u16,
        port: u16,
        size: u32,
        client: TaskRef,
        dur_ms: u32,
    },
    ServeFailed {
        block: i64,
        to: u16,
    },
    DiskFull,
}

/// A line due at `ts_ms` (from the run's start), belonging to an attempt (`owner`, 0 for none)
/// so that a killed attempt's future lines can be taken back.
#[derive(Clone, Copy, Debug)]
pub struct Rec {
    pub ts_ms: i64,
    pub owner: u64,
    pub line: Line,
}

/// What a record's numbers stand for.
pub struct Names<'a> {
    pub version: Version,
    /// Milliseconds since 1970 of the run's time 0.
    pub epoch_ms: i64,
    /// (host name, IP address) per node of the run.
    pub hosts: &'a [(String, String)],
    pub jobs: &'a [JobName],
}

/// A job's id and the HDFS path of its input.
#[derive(Clone, Debug)]
pub struct JobName {
    /// `200808250000_0001`: the JobTracker's start stamp and the job's number.
    pub id: String,
    pub input: String,
    pub input_mb: f64,
}

/// A file being written, plain or gzip.
pub enum Out {
    Plain(BufWriter<File>),
    Gzip(Box<GzEncoder<BufWriter<File>>>),
}

impl Out {
    pub fn create(path: &Path, gzip: bool) -> io::Result<Out> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = BufWriter::with_capacity(1 << 15, File::create(path)?);
        Ok(if gzip { Out::Gzip(Box::new(GzEncoder::new(file, Compression::fast()))) } else { Out::Plain(file) })
    }

    pub fn finish(self) -> io::Result<()> {
        match self {
            Out::Plain(mut w) => w.flush(),
            Out::Gzip(w) => w.finish()?.flush(),
        }
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Out::Plain(w) => w.write(buf),
            Out::Gzip(w) => w.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Out::Plain(w) => w.write_all(buf),
            Out::Gzip(w) => w.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::Plain(w) => w.flush(),
            Out::Gzip(w) => w.flush(),
        }
    }
}

/// `name` or `name.gz`.
pub fn file_name(name: &str, gzip: bool) -> String {
    if gzip { format!("{name}.gz") } else { name.to_string() }
}

// Byte-buffer formatting.

pub fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Byte by byte: a call to memcpy costs more than the few digits it would copy.
    buf.reserve(digits.len() - i);
    for &d in &digits[i..] {
        buf.push(d);
    }
}

pub fn push_i64(buf: &mut Vec<u8>, n: i64) {
    if n < 0 {
        buf.push(b'-');
    }
    push_u64(buf, n.unsigned_abs());
}

pub fn push_padded(buf: &mut Vec<u8>, n: u64, width: usize) {
    let digits = n.checked_ilog10().map_or(1, |l| l as usize + 1);
    for _ in digits..width {
        buf.push(b'0');
    }
    push_u64(buf, n);
}

/// Two digits of `n` (0–99).
fn two(n: u32) -> [u8; 2] {
    [b'0' + (n / 10) as u8, b'0' + (n % 10) as u8]
}

/// (year, month, day) of days since 1970-01-01 (Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A progress fraction as Java prints a float (`0.6666667`, `1.0`).
fn push_frac(buf: &mut Vec<u8>, frac: f32) {
    let start = buf.len();
    let _ = write!(buf, "{frac}");
    if !buf[start..].contains(&b'.') {
        buf.extend_from_slice(b".0");
    }
}

/// `yyyy-MM-dd HH:mm:ss` of whole seconds since 1970 (UTC), cached for the second last asked
/// and the day: most lines share their day, many their second.
pub struct Clock {
    second: i64,
    day: i64,
    text: [u8; 19],
}

impl Clock {
    pub fn new() -> Clock {
        Clock { second: i64::MIN, day: i64::MIN, text: *b"1970-01-01 00:00:00" }
    }

    pub fn seconds_text(&mut self, second: i64) -> &[u8; 19] {
        if second != self.second {
            self.second = second;
            let day = second.div_euclid(86_400);
            if day != self.day {
                self.day = day;
                let (year, month, dom) = civil_from_days(day);
                let year = year.clamp(0, 9999) as u32;
                self.text[..2].copy_from_slice(&two(year / 100));
                self.text[2..4].copy_from_slice(&two(year % 100));
                self.text[5..7].copy_from_slice(&two(month));
                self.text[8..10].copy_from_slice(&two(dom));
            }
            let sod = second.rem_euclid(86_400) as u32;
            self.text[11..13].copy_from_slice(&two(sod / 3600));
            self.text[14..16].copy_from_slice(&two(sod / 60 % 60));
            self.text[17..19].copy_from_slice(&two(sod % 60));
        }
        &self.text
    }

    /// `yyyy-MM-dd HH:mm:ss,SSS` as log4j writes it.
    pub fn push_stamp(&mut self, buf: &mut Vec<u8>, ms: i64) {
        buf.extend_from_slice(self.seconds_text(ms.div_euclid(1000)));
        let milli = ms.rem_euclid(1000) as u32;
        buf.extend_from_slice(&[
            b',',
            b'0' + (milli / 100) as u8,
            b'0' + (milli / 10 % 10) as u8,
            b'0' + (milli % 10) as u8,
        ]);
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

const TT: &str = "org.apache.hadoop.mapred.TaskTracker";
const TT_TRACE: &str = "org.apache.hadoop.mapred.TaskTracker.clienttrace";
const RUNNER: &str = "org.apache.hadoop.mapred.TaskRunner";
const REDUCE: &str = "org.apache.hadoop.mapred.ReduceTask";

/// A map output larger than this is fetched to disk, not memory (the `MaxSingleShuffleLimit` the
/// syslog's `ShuffleRamManager` line states).
const MAX_SINGLE_SHUFFLE: u32 = 35_484_468;
const LOCAL_DIR: &str = "/tmp/hadoop-hadoop/mapred/local/taskTracker/jobcache";
/// The NameNode's one block pool (HDFS 2.x federation names every block with its pool).
const BLOCK_POOL: &str = "BP-1357924680-10.1.0.1-1219622340000";

fn dn_logger(v: Version) -> &'static str {
    match v {
        Version::V018 => "org.apache.hadoop.dfs.DataNode",
        Version::V020 | Version::V2 => "org.apache.hadoop.hdfs.server.datanode.DataNode",
    }
}

/// Lines written (continuation lines, such as a stack trace's, counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineCounts {
    pub tasktracker: u64,
    pub nodemanager: u64,
    pub datanode: u64,
    /// Reduce attempts' (or containers') own logs.
    pub syslog: u64,
    /// YARN jobs' application masters' logs.
    pub appmaster: u64,
}

impl LineCounts {
    pub fn total(&self) -> u64 {
        self.tasktracker + self.nodemanager + self.datanode + self.syslog + self.appmaster
    }

    pub fn add(&mut self, other: &LineCounts) {
        self.tasktracker += other.tasktracker;
        self.nodemanager += other.nodemanager;
        self.datanode += other.datanode;
        self.syslog += other.syslog;
        self.appmaster += other.appmaster;
    }
}

/// A reduce attempt's open log.
struct Syslog {
    task: TaskRef,
    out: Out,
    /// YARN's fetcher threads, `fetcher#1` first: the map each is fetching and since when.
    fetchers: Vec<Option<(TaskRef, i64)>>,
}

/// The open log files of one node.
pub struct NodeWriter {
    node: u16,
    version: Version,
    dir: PathBuf,
    gzip: bool,
    /// The log of the daemon that runs the node's tasks: the TaskTracker, or YARN's NodeManager.
    tasks: Out,
    datanode: Out,
    /// Open attempt syslogs (a few: the node's running reduces).
    syslogs: Vec<Syslog>,
    clock: Clock,
    /// How far this node's clock is off the true time.
    clock_offset_ms: i64,
    datanode_log: DataNodeLog,
    buf: Vec<u8>,
    keys: Vec<u64>,
    /// DataNode connections open, for 0.18's DEBUG `Number of active connections is: N`.
    connections: u32,
    pub counts: LineCounts,
}

/// The fields of a DataNode clienttrace line: (node, port) at both ends.
struct Trace {
    src: (u16, u16),
    dest: (u16, u16),
    size: u32,
    op: &'static str,
    client: TaskRef,
    block: i64,
    dur_ms: u32,
}

enum Dest {
    Tasks,
    DataNode,
    Syslog(TaskRef),
}

impl NodeWriter {
    /// Opens the node's daemon logs under `dir/<host>/` and writes their start-up banners; its
    /// lines are stamped by a clock `clock_offset_ms` off the true time.
    pub fn create(
        dir: &Path,
        node: u16,
        user: &str,
        names: &Names,
        gzip: bool,
        clock_offset_ms: i64,
        datanode_log: DataNodeLog,
    ) -> io::Result<NodeWriter> {
        let (host, ip) = &names.hosts[usize::from(node)];
        let dir = dir.join(host);
        let (tasks, tasks_logger) = match names.version {
            Version::V018 | Version::V020 => (format!("hadoop-{user}-tasktracker-{host}.log"), TT),
            Version::V2 => (format!("yarn-{user}-nodemanager-{host}.log"), yarn::NODE_MANAGER),
        };
        let tasks_path = dir.join(file_name(&tasks, gzip));
        let dn_path = dir.join(file_name(&format!("hadoop-{user}-datanode-{host}.log"), gzip));
        let mut w = NodeWriter {
            node,
            version: names.version,
            tasks: Out::create(&tasks_path, gzip)?,
            datanode: Out::create(&dn_path, gzip)?,
            dir,
            gzip,
            syslogs: Vec::new(),
            clock: Clock::new(),
            clock_offset_ms,
            datanode_log,
            buf: Vec::with_capacity(1 << 10),
            keys: Vec::new(),
            connections: 0,
            counts: LineCounts::default(),
        };
        let release = match names.version {
            Version::V018 => "0.18.3",
            Version::V020 => "0.20.1",
            Version::V2 => "2.8.5",
        };
        let daemon = tasks_logger.rsplit('.').next().unwrap_or_default();
        for (daemon, logger) in [(daemon, tasks_logger), ("DataNode", dn_logger(names.version))] {
            w.head(names.epoch_ms + clock_offset_ms - 5000, "INFO", logger);
            let _ = write!(
                w.buf,
                "STARTUP_MSG: \n/************************************************************\nSTARTUP_MSG: Starting {daemon}\nSTARTUP_MSG:   host = {host}/{ip}\nSTARTUP_MSG:   args = []\nSTARTUP_MSG:   version = {release}\n************************************************************/\n"
            );
            let dest = if logger == tasks_logger { Dest::Tasks } else { Dest::DataNode };
            w.emit(dest)?;
        }
        Ok(w)
    }

    fn head(&mut self, ms: i64, level: &str, logger: &str) {
        self.clock.push_stamp(&mut self.buf, ms);
        self.buf.push(b' ');
        self.buf.extend_from_slice(level.as_bytes());
        self.buf.push(b' ');
        self.buf.extend_from_slice(logger.as_bytes());
        self.buf.extend_from_slice(b": ");
    }

    fn emit(&mut self, dest: Dest) -> io::Result<()> {
        // Lines as a reader counts them: an event with a stack trace is several.
        let body = &self.buf[..self.buf.len().saturating_sub(1)];
        let lines =
            if memchr::memchr(b'\n', body).is_none() { 1 } else { 1 + memchr::memchr_iter(b'\n', body).count() as u64 };
        let out = match dest {
            Dest::Tasks => {
                match self.version {
                    Version::V018 | Version::V020 => self.counts.tasktracker += lines,
                    Version::V2 => self.counts.nodemanager += lines,
                }
                &mut self.tasks
            }
            Dest::DataNode => {
                self.counts.datanode += lines;
                &mut self.datanode
            }
            Dest::Syslog(task) => match self.syslogs.iter_mut().find(|s| s.task == task) {
                Some(syslog) => {
                    self.counts.syslog += lines;
                    &mut syslog.out
                }
                None => {
                    self.buf.clear();
                    return Ok(());
                }
            },
        };
        out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes the records due before `until` in time order (records of one instant in the
    /// order they were made), but none of an attempt after it was killed (`killed`: owner keys
    /// with the kill's time, sorted by key), and keeps the others in `buf`.
    pub fn write_due(
        &mut self,
        buf: &mut Vec<Rec>,
        until: i64,
        names: &Names,
        killed: &[(u64, i64)],
    ) -> io::Result<()> {
        // Sort keys rather than records: (time from the earliest due, index) in one u64.
        let base = buf.iter().map(|r| r.ts_ms).filter(|&t| t < until).min().unwrap_or(until);
        self.keys.clear();
        self.keys.extend(
            buf.iter()
                .enumerate()
                .filter(|(_, r)| r.ts_ms < until)
                .map(|(i, r)| ((r.ts_ms - base) as u64) << 32 | i as u64),
        );
        self.keys.sort_unstable();
        let keys = std::mem::take(&mut self.keys);
        for &k in &keys {
            let rec = &buf[(k & 0xffff_ffff) as usize];
            if !killed.is_empty()
                && rec.owner != 0
                && let Ok(at) = killed.binary_search_by_key(&rec.owner, |k| k.0)
                && rec.ts_ms > killed[at].1
            {
                continue;
            }
            self.line(rec, names)?;
        }
        self.keys = keys;
        buf.retain(|r| r.ts_ms >= until);
        Ok(())
    }

    fn attempt(&mut self, t: TaskRef, names: &Names) {
        push_attempt(&mut self.buf, t, names);
    }

    fn ip(&mut self, node: u16, names: &Names) {
        self.buf.extend_from_slice(names.hosts[usize::from(node)].1.as_bytes());
    }

    /// A block as the release names it: `blk_<id>`, from 0.20 with its generation stamp, from
    /// 2.x in its block pool.
    fn block(&mut self, block: i64, names: &Names) {
        if names.version == Version::V2 {
            self.buf.extend_from_slice(BLOCK_POOL.as_bytes());
            self.buf.push(b':');
        }
        self.buf.extend_from_slice(b"blk_");
        push_i64(&mut self.buf, block);
        if names.version != Version::V018 {
            self.buf.push(b'_');
            push_u64(&mut self.buf, 1000 + (block.unsigned_abs() % 9000));
        }
    }

    fn s(&mut self, text: &str) {
        self.buf.extend_from_slice(text.as_bytes());
    }

    fn n(&mut self, n: u64) {
        push_u64(&mut self.buf, n);
    }

    fn line(&mut self, rec: &Rec, names: &Names) -> io::Result<()> {
        let ms = names.epoch_ms + rec.ts_ms + self.clock_offset_ms;
        match names.version {
            Version::V018 | Version::V020 => self.classic_line(ms, rec.line, names),
            Version::V2 => self.yarn_line(ms, rec.line, names),
        }
    }

    /// A line as Hadoop 0.18 or 0.20 words it; the DataNode's of every release. YARN's come here
    /// for the DataNode's only: the task-side arms name `V2` beside `V020` because a match on the
    /// version must be whole, not because YARN writes a TaskTracker's lines.
    fn classic_line(&mut self, ms: i64, line: Line, names: &Names) -> io::Result<()> {
        let v = names.version;
        match line {
            Line::Launch { task, free_slots } => {
                self.head(ms, "INFO", TT);
                match v {
                    Version::V018 => {
                        self.s("LaunchTaskAction: ");
                        self.attempt(task, names);
                        self.s("\n");
                    }
                    Version::V020 | Version::V2 => {
                        self.s("LaunchTaskAction (registerTask): ");
                        self.attempt(task, names);
                        self.s(" task's state:UNASSIGNED\n");
                        self.emit(Dest::Tasks)?;
                        self.head(ms, "INFO", TT);
                        self.s("Trying to launch : ");
                        self.attempt(task, names);
                        self.s("\n");
                        self.emit(Dest::Tasks)?;
                        self.head(ms, "INFO", TT);
                        self.s("In TaskLauncher, current free slots : ");
                        self.n(u64::from(free_slots));
                        self.s(" and trying to launch ");
                        self.attempt(task, names);
                        self.s("\n");
                    }
                }
                self.emit(Dest::Tasks)
            }
            Line::MapProgress { task, frac } => {
                self.head(ms, "INFO", TT);
                self.attempt(task, names);
                self.s(" ");
                push_frac(&mut self.buf, frac);
                let job = &names.jobs[task.job as usize];
                if job.input_mb > 0.0 {
                    self.s("% hdfs://master:9000");
                    self.s(&job.input);
                    self.s("/part-");
                    push_padded(&mut self.buf, u64::from(task.idx), 5);
                    self.s(":0+");
                    self.n((job.input_mb * 1048576.0) as u64);
                } else {
                    // RandomWriter's status: records written and bytes left.
                    let left = (f64::from(1.0 - frac) * 640.0 * 1048576.0) as u64;
                    self.s("% wrote record ");
                    self.n((f64::from(frac) * 65536.0) as u64);
                    self.s(". ");
                    self.n(left);
                    self.s(" bytes left.");
                }
                self.s("\n");
                self.emit(Dest::Tasks)
            }
            Line::ReduceProgress { task, frac, phase } => {
                self.head(ms, "INFO", TT);
                self.attempt(task, names);
                self.s(" ");
                push_frac(&mut self.buf, frac);
                match phase {
                    ReducePhase::Copy { done, total, mb_s } => {
                        self.s("% reduce > copy (");
                        self.n(u64::from(done));
                        self.s(" of ");
                        self.n(u64::from(total));
                        let _ = writeln!(self.buf, " at {mb_s:.2} MB/s) > ");
                    }
                    ReducePhase::Sort => self.s("% reduce > sort\n"),
                    ReducePhase::Reduce => self.s("% reduce > reduce\n"),
                }
                self.emit(Dest::Tasks)
            }
            Line::Done { task } => {
                self.head(ms, "INFO", TT);
                self.s("Task ");
                self.attempt(task, names);
                self.s(" is done.\n");
                self.emit(Dest::Tasks)
            }
            Line::Timeout { task } => {
                self.head(ms, "INFO", TT);
                self.attempt(task, names);
                self.s(": Task ");
                self.attempt(task, names);
                self.s(" failed to report status for 600 seconds. Killing!\n");
                self.emit(Dest::Tasks)
            }
            Line::ChildError { task } => {
                self.head(ms, "WARN", RUNNER);
                self.attempt(task, names);
                self.s(" Child Error\njava.io.IOException: Task process exit with nonzero status of 1.\n\tat org.apache.hadoop.mapred.TaskRunner.run(TaskRunner.java:418)\n");
                self.emit(Dest::Tasks)
            }
            Line::Kill { task } => {
                self.head(ms, "INFO", TT);
                self.s("Received KillTaskAction for task: ");
                self.attempt(task, names);
                self.s("\n");
                self.emit(Dest::Tasks)
            }
            Line::ShuffleServed { map, reduce, to, port, bytes, dur_ms } => {
                match v {
                    Version::V018 => {
                        self.head(ms, "INFO", TT);
                        self.s("Sent out ");
                        self.n(u64::from(bytes));
                        self.s(" bytes for reduce: ");
                        self.n(u64::from(reduce.idx));
                        self.s(" from map: ");
                        self.attempt(map, names);
                        self.s(" given ");
                        self.n(u64::from(bytes));
                        self.s("/");
                        self.n(u64::from(bytes) + u64::from(bytes) / 50);
                    }
                    Version::V020 | Version::V2 => {
                        self.head(ms, "INFO", TT_TRACE);
                        self.s("src: ");
                        self.ip(self.node, names);
                        self.s(":50060, dest: ");
                        self.ip(to, names);
                        self.s(":");
                        self.n(u64::from(port));
                        self.s(", bytes: ");
                        self.n(u64::from(bytes));
                        self.s(", op: MAPRED_SHUFFLE, cliID: ");
                        self.attempt(map, names);
                        self.s(", reduceID: ");
                        self.attempt(reduce, names);
                        self.s(", duration: ");
                        self.n(u64::from(dur_ms) * 1_000_000 + 123_456);
                    }
                }
                self.s("\n");
                self.emit(Dest::Tasks)
            }
            Line::SyslogOpen { task, maps } => {
                let path =
                    self.dir.join("userlogs").join(attempt_text(task, names)).join(file_name("syslog", self.gzip));
                let out = Out::create(&path, self.gzip)?;
                self.syslogs.push(Syslog { task, out, fetchers: Vec::new() });
                self.head(ms, "INFO", "org.apache.hadoop.metrics.jvm.JvmMetrics");
                self.s("Initializing JVM Metrics with processName=SHUFFLE, sessionId=\n");
                self.emit(Dest::Syslog(task))?;
                self.head(ms, "INFO", REDUCE);
                self.s("ShuffleRamManager: MemoryLimit=141937872, MaxSingleShuffleLimit=");
                self.n(u64::from(MAX_SINGLE_SHUFFLE));
                self.s("\n");
                self.emit(Dest::Syslog(task))?;
                self.head(ms, "INFO", REDUCE);
                self.attempt(task, names);
                self.s(" Thread started: Thread for merging on-disk files\n");
                self.emit(Dest::Syslog(task))?;
                // From 0.19 the in-memory merge thread too runs for the whole shuffle.
                if v == Version::V020 {
                    self.head(ms, "INFO", REDUCE);
                    self.attempt(task, names);
                    self.s(" Thread started: Thread for merging in memory files\n");
                    self.emit(Dest::Syslog(task))?;
                }
                self.head(ms, "INFO", REDUCE);
                self.attempt(task, names);
                self.s(" Need another ");
                self.n(u64::from(maps));
                self.s(" map output(s) where 0 is already in progress\n");
                self.emit(Dest::Syslog(task))
            }
            Line::CopyStart { reduce, map, bytes, .. } if v == Version::V020 => {
                self.head(ms, "INFO", REDUCE);
                self.s("header: ");
                self.attempt(map, names);
                self.s(", compressed len: ");
                self.n(u64::from(bytes));
                self.s(", decompressed len: ");
                self.n(u64::from(bytes));
                self.s("\n");
                self.emit(Dest::Syslog(reduce))?;
                self.head(ms, "INFO", REDUCE);
                self.s("Shuffling ");
                self.n(u64::from(bytes));
                self.s(" bytes (");
                self.n(u64::from(bytes));
                self.s(if bytes > MAX_SINGLE_SHUFFLE {
                    " raw bytes) into Local-FS from "
                } else {
                    " raw bytes) into RAM from "
                });
                self.attempt(map, names);
                self.s("\n");
                self.emit(Dest::Syslog(reduce))
            }
            Line::CopyDone { reduce, map, from, bytes } if v == Version::V020 => {
                self.head(ms, "INFO", REDUCE);
                self.s("Read ");
                self.n(u64::from(bytes));
                self.s(" bytes from map-output for ");
                self.attempt(map, names);
                self.s("\n");
                self.emit(Dest::Syslog(reduce))?;
                // Only a fetch into memory looks at its first record, naming the map's host.
                if bytes > MAX_SINGLE_SHUFFLE {
                    return Ok(());
                }
                self.head(ms, "INFO", REDUCE);
                self.s("Rec #1 from ");
                self.attempt(map, names);
                self.s(" -> (12, 40) from ");
                self.s(&names.hosts[usize::from(from)].0);
                self.s("\n");
                self.emit(Dest::Syslog(reduce))
            }
            Line::CopyStart { reduce, map, from, .. } | Line::CopyDone { reduce, map, from, .. } => {
                self.head(ms, "INFO", REDUCE);
                self.attempt(reduce, names);
                self.s(if matches!(line, Line::CopyStart { .. }) { " Copying " } else { " done copying " });
                self.attempt(map, names);
                self.s(" output from ");
                self.s(&names.hosts[usize::from(from)].0);
                self.s(".\n");
                self.emit(Dest::Syslog(reduce))
            }
            Line::CopyFailed { reduce, map, from, why } => {
                self.head(ms, "WARN", REDUCE);
                self.attempt(reduce, names);
                self.s(" copy failed: ");
                self.attempt(map, names);
                self.s(" from ");
                self.s(&names.hosts[usize::from(from)].0);
                match why {
                    CopyFault::Timeout => self.s("\njava.net.SocketTimeoutException: Read timed out\n"),
                    CopyFault::Rename => {
                        self.s("\njava.io.FileNotFoundException: ramfs://mapoutput/");
                        self.attempt(map, names);
                        self.s(".out: no such file after rename\n");
                    }
                }
                self.emit(Dest::Syslog(reduce))
            }
            Line::MergeStart { reduce, files } => {
                self.head(ms, "INFO", REDUCE);
                match v {
                    // A merge thread per merge.
                    Version::V018 => {
                        self.attempt(reduce, names);
                        self.s(" Thread started: Thread for merging in memory files\n");
                    }
                    Version::V020 | Version::V2 => {
                        self.s("Initiating in-memory merge with ");
                        self.n(u64::from(files));
                        self.s(" segments...\n");
                    }
                }
                self.emit(Dest::Syslog(reduce))
            }
            Line::MergeDone { reduce, files, merge, bytes } => {
                self.head(ms, "INFO", REDUCE);
                self.attempt(reduce, names);
                self.s(" Merge of the ");
                self.n(u64::from(files));
                self.s(match v {
                    Version::V018 => " files in InMemoryFileSystem complete. Local file is ",
                    Version::V020 | Version::V2 => " files in-memory complete. Local file is ",
                });
                self.s(LOCAL_DIR);
                self.s("/job_");
                self.s(&names.jobs[reduce.job as usize].id);
                self.s("/");
                self.attempt(reduce, names);
                self.s("/output/map_");
                self.n(u64::from(merge));
                self.s(".out");
                if v == Version::V020 {
                    self.s(" of size ");
                    self.n(u64::from(bytes));
                }
                self.s("\n");
                self.emit(Dest::Syslog(reduce))
            }
            Line::SyslogClose { task, done } => {
                if done {
                    self.head(ms, "INFO", RUNNER);
                    self.s("Task:");
                    self.attempt(task, names);
                    self.s(" is done. And is in the process of commiting\n");
                    self.emit(Dest::Syslog(task))?;
                    self.head(ms, "INFO", RUNNER);
                    self.s("Task '");
                    self.attempt(task, names);
                    self.s("' done.\n");
                    self.emit(Dest::Syslog(task))?;
                }
                self.close_syslog(task)
            }
            Line::Receiving { block, src, port } => {
                self.connection(ms, 1, names)?;
                self.head(ms, "INFO", dn_logger(v));
                self.s(if v == Version::V2 { "Receiving " } else { "Receiving block " });
                self.block(block, names);
                self.s(" src: /");
                self.ip(src, names);
                self.s(":");
                self.n(u64::from(port));
                self.s(" dest: /");
                self.ip(self.node, names);
                self.s(":50010\n");
                self.emit(Dest::DataNode)
            }
            Line::Received { block, src, port, size, client, dur_ms, downstream } => {
                match v {
                    Version::V018 => {
                        self.head(ms, "INFO", dn_logger(v));
                        self.s("Received block ");
                        self.block(block, names);
                        self.s(" of size ");
                        self.n(u64::from(size));
                        self.s(" from /");
                        self.ip(src, names);
                        self.s("\n");
                    }
                    Version::V020 | Version::V2 => {
                        let trace = Trace {
                            src: (src, port),
                            dest: (self.node, 50010),
                            size,
                            op: "HDFS_WRITE",
                            client,
                            block,
                            dur_ms,
                        };
                        self.datanode_trace(ms, &trace, names);
                    }
                }
                self.emit(Dest::DataNode)?;
                self.head(ms, "INFO", dn_logger(v));
                if v == Version::V2 {
                    self.s("PacketResponder: ");
                    self.block(block, names);
                    self.s(if downstream == 0 {
                        ", type=LAST_IN_PIPELINE terminating\n"
                    } else {
                        ", type=HAS_DOWNSTREAM_IN_PIPELINE terminating\n"
                    });
                } else {
                    self.s("PacketResponder ");
                    self.n(u64::from(downstream));
                    self.s(" for block ");
                    self.block(block, names);
                    self.s(" terminating\n");
                }
                self.emit(Dest::DataNode)?;
                self.connection(ms, -1, names)
            }
            Line::ReceiveFailed { block } => {
                self.head(ms, "INFO", dn_logger(v));
                if v == Version::V2 {
                    self.s("opWriteBlock ");
                    self.block(block, names);
                    self.s(" received exception java.io.IOException: Premature EOF from inputStream\n");
                } else {
                    self.s("writeBlock ");
                    self.block(block, names);
                    self.s(" received exception java.io.EOFException: while trying to read 65557 bytes\n");
                }
                self.emit(Dest::DataNode)?;
                self.connection(ms, -1, names)
            }
            Line::ReadStart => self.connection(ms, 1, names),
            Line::Served { block, to, port, size, client, dur_ms } => {
                match v {
                    Version::V018 => {
                        self.head(ms, "INFO", dn_logger(v));
                        self.ip(self.node, names);
                        self.s(":50010 Served block ");
                        self.block(block, names);
                        self.s(" to /");
                        self.ip(to, names);
                        self.s("\n");
                    }
                    Version::V020 | Version::V2 => {
                        let trace = Trace {
                            src: (self.node, 50010),
                            dest: (to, port),
                            size,
                            op: "HDFS_READ",
                            client,
                            block,
                            dur_ms,
                        };
                        self.datanode_trace(ms, &trace, names);
                    }
                }
                self.emit(Dest::DataNode)?;
                self.connection(ms, -1, names)
            }
            Line::ServeFailed { block, to } => {
                self.head(ms, "WARN", dn_logger(v));
                self.ip(self.node, names);
                self.s(":50010:Got exception while serving ");
                self.block(block, names);
                self.s(" to /");
                self.ip(to, names);
                self.s(":\njava.net.SocketTimeoutException: 480000 millis timeout while waiting for channel to be ready for write.\n");
                self.emit(Dest::DataNode)?;
                self.connection(ms, -1, names)
            }
            Line::DiskFull => {
                self.head(ms, "WARN", dn_logger(v));
                self.s("org.apache.hadoop.util.DiskChecker$DiskOutOfSpaceException: Insufficient space for an additional block\n");
                self.emit(Dest::DataNode)
            }
        }
    }

    /// Closes an attempt's syslog (one killed before it opened has none).
    fn close_syslog(&mut self, task: TaskRef) -> io::Result<()> {
        match self.syslogs.iter().position(|s| s.task == task) {
            Some(at) => self.syslogs.swap_remove(at).out.finish(),
            None => Ok(()),
        }
    }

    /// 0.20's DataNode clienttrace line of a finished block transfer.
    fn datanode_trace(&mut self, ms: i64, t: &Trace, names: &Names) {
        self.head(ms, "INFO", "org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace");
        for (key, (node, port)) in [("src: /", t.src), (", dest: /", t.dest)] {
            self.s(key);
            self.ip(node, names);
            self.s(":");
            self.n(u64::from(port));
        }
        self.s(", bytes: ");
        self.n(u64::from(t.size));
        self.s(", op: ");
        self.s(t.op);
        self.s(", cliID: DFSClient_");
        self.attempt(t.client, names);
        if names.version == Version::V2 {
            self.s("_1_1, offset: 0");
        }
        self.s(", srvID: DS-");
        self.n(1_000_000 + u64::from(self.node) * 7919);
        self.s("-");
        self.ip(self.node, names);
        self.s("-50010-1219000000000, blockid: ");
        self.block(t.block, names);
        self.s(", duration: ");
        self.n(u64::from(t.dur_ms) * 1_000_000 + 345_678);
        self.s("\n");
    }

    /// 0.18 at DEBUG, as SALSA ran it: every DataXceiver start and end logs the count of open
    /// connections, which is how a read's start shows.
    fn connection(&mut self, ms: i64, delta: i32, names: &Names) -> io::Result<()> {
        self.connections = self.connections.saturating_add_signed(delta);
        if names.version != Version::V018 || self.datanode_log == DataNodeLog::Info {
            return Ok(());
        }
        self.head(ms, "DEBUG", dn_logger(names.version));
        self.s("Number of active connections is: ");
        self.n(u64::from(self.connections));
        self.s("\n");
        self.emit(Dest::DataNode)
    }

    /// Closes every file; syslogs of attempts still running at the end stop where they are.
    pub fn finish(self) -> io::Result<LineCounts> {
        self.tasks.finish()?;
        self.datanode.finish()?;
        let mut open = self.syslogs;
        open.sort_by_key(|s| s.task);
        for syslog in open {
            syslog.out.finish()?;
        }
        Ok(self.counts)
    }
}

/// `attempt_200808250000_0001_m_000003_0`.
pub fn push_attempt(buf: &mut Vec<u8>, t: TaskRef, names: &Names) {
    buf.extend_from_slice(b"attempt_");
    buf.extend_from_slice(names.jobs[t.job as usize].id.as_bytes());
    buf.extend_from_slice(if t.reduce { b"_r_" } else { b"_m_" });
    push_padded(buf, u64::from(t.idx), 6);
    buf.push(b'_');
    push_u64(buf, u64::from(t.attempt));
}

pub fn attempt_text(t: TaskRef, names: &Names) -> String {
    let mut buf = Vec::with_capacity(40);
    push_attempt(&mut buf, t, names);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_stamps() {
        let mut b = Vec::new();
        push_padded(&mut b, 42, 6);
        push_i64(&mut b, -17);
        push_frac(&mut b, 1.0);
        b.push(b' ');
        push_frac(&mut b, 2.0 / 3.0);
        assert_eq!(String::from_utf8(b).unwrap(), "000042-171.0 0.6666667");
        let mut c = Clock::new();
        let mut b = Vec::new();
        c.push_stamp(&mut b, 1_219_511_552_466);
        assert_eq!(String::from_utf8(b).unwrap(), "2008-08-23 17:12:32,466");
        // Every day over four centuries (leap years and their exceptions) reads as chrono has it.
        for second in (-86_400 * 365 * 70..86_400 * 365 * 330).step_by(86_400 - 7) {
            let want = chrono::DateTime::from_timestamp(second, 0).unwrap().format("%Y-%m-%d %H:%M:%S").to_string();
            assert_eq!(c.seconds_text(second), want.as_bytes(), "{second}");
        }
    }

    #[test]
    fn lines_read_as_hadoop_wrote_them() {
        let dir = tempfile::tempdir().unwrap();
        let hosts =
            vec![("r01n01".to_string(), "10.1.1.10".to_string()), ("r01n02".to_string(), "10.1.1.11".to_string())];
        let jobs = vec![JobName { id: "200808250000_0001".into(), input: "/user/hadoop/in".into(), input_mb: 64.0 }];
        let names = Names { version: Version::V018, epoch_ms: 1_219_622_400_000, hosts: &hosts, jobs: &jobs };
        let mut w = NodeWriter::create(dir.path(), 0, "hadoop", &names, false, 0, DataNodeLog::Debug).unwrap();
        let m = TaskRef { job: 0, idx: 3, attempt: 0, reduce: false };
        let r = TaskRef { job: 0, idx: 0, attempt: 1, reduce: true };
        let recs = [
            Line::Launch { task: m, free_slots: 1 },
            Line::MapProgress { task: m, frac: 0.5 },
            Line::Done { task: m },
            Line::SyslogOpen { task: r, maps: 4 },
            Line::CopyStart { reduce: r, map: m, from: 1, bytes: 1000 },
            Line::SyslogClose { task: r, done: true },
            Line::Receiving { block: -42, src: 1, port: 40001 },
            Line::Received { block: -42, src: 1, port: 40001, size: 100, client: m, dur_ms: 5, downstream: 0 },
            Line::Receiving { block: -43, src: 1, port: 40002 },
            Line::ReceiveFailed { block: -43 },
        ];
        let mut recs: Vec<Rec> =
            recs.iter().enumerate().map(|(i, &line)| Rec { ts_ms: i as i64 * 10, owner: 0, line }).collect();
        w.write_due(&mut recs, i64::MAX, &names, &[]).unwrap();
        assert!(recs.is_empty());
        assert_eq!(
            w.finish().unwrap(),
            LineCounts { tasktracker: 7 + 3, datanode: 7 + 9, syslog: 7, ..LineCounts::default() }
        );
        let tt = std::fs::read_to_string(dir.path().join("r01n01/hadoop-hadoop-tasktracker-r01n01.log")).unwrap();
        let tt: Vec<&str> = tt.lines().filter(|l| l.starts_with("2008")).collect();
        assert_eq!(
            tt[1],
            "2008-08-25 00:00:00,000 INFO org.apache.hadoop.mapred.TaskTracker: LaunchTaskAction: attempt_200808250000_0001_m_000003_0"
        );
        assert_eq!(
            tt[2],
            "2008-08-25 00:00:00,010 INFO org.apache.hadoop.mapred.TaskTracker: attempt_200808250000_0001_m_000003_0 0.5% hdfs://master:9000/user/hadoop/in/part-00003:0+67108864"
        );
        let syslog = dir.path().join("r01n01/userlogs/attempt_200808250000_0001_r_000000_1/syslog");
        let syslog = std::fs::read_to_string(syslog).unwrap();
        assert!(syslog.contains(
            "attempt_200808250000_0001_r_000000_1 Copying attempt_200808250000_0001_m_000003_0 output from r01n02.\n"
        ));
        let dn = std::fs::read_to_string(dir.path().join("r01n01/hadoop-hadoop-datanode-r01n01.log")).unwrap();
        assert!(dn.contains("DataNode: Receiving block blk_-42 src: /10.1.1.11:40001 dest: /10.1.1.10:50010\n"));
        assert!(dn.contains("DataNode: Received block blk_-42 of size 100 from /10.1.1.11\n"));
        assert!(dn.contains(
            "DataNode: writeBlock blk_-43 received exception java.io.EOFException: while trying to read 65557 bytes\n"
        ));
        assert!(dn.contains("DEBUG org.apache.hadoop.dfs.DataNode: Number of active connections is: 1\n"));
    }
}
