//! sysstat captures: `sadf -d` text (rows grouped by activity, each group under its own
//! `# hostname;interval;timestamp;…` header), `sadf -dh` text (one row per sample), `sadf -j`
//! JSON, and binary sa files, which the machine's `sadf` turns into `-dh` text first.
//!
//! Every figure becomes a `sar_metrics` row (host, ts, activity, device, metric, value), named
//! as sar prints it (`%user`, `cswch/s`, `rxkB/s`) whichever export it came from, and each
//! sample second becomes one `sadc` row: Ganesha's 14 metrics (`tables::SADC_METRICS`).
//! `LINUX-RESTART` records become `sadc` rows with `restart` set and no metrics.
//!
//! Speed and memory. A figure costs no allocation: a text header is compiled once into codes
//! (each name of `sar_metrics`' text columns coded once per file, [`Names`]) and into the slot
//! of the 14 metrics each column feeds, so a row is split, its numbers parsed, and its
//! figures appended as integers and floats; `sar_metrics` batches are built column by column
//! ([`SarRows`]). Under `-d` headers a sample's figures are spread over the groups of one
//! export, so its 14 metrics wait, compactly ([`Sample`], about 190 bytes), until the export
//! ends: at the file's end, or where a header seen already in this export opens the next one
//! (sadf repeats the headers after a restart, and concatenated exports repeat them too).
//! Memory is therefore bounded by one export — a day of one-second samples is ~16 MB — not by
//! the file. A minified `sadf -j` document, one line of any length, is read as a stream of
//! records ([`read_document`]); pretty-printed ones line by line ([`JsonParser`]).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono_tz::Tz;
use datafusion::arrow::array::{ArrayRef, Float64Array, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::discover::Hints;
use super::log4j::ZoneConverter;
use super::records::{LineParser, Sink};
use crate::warehouse::tables::{Rows, Table, date_of_ms};

/// The activities asked of `sadf` for a binary file: those of the 14 metrics (CPU, task
/// switching, queue and load, network devices, paging, I/O), as in the project's text samples.
pub const SADF_ACTIVITIES: [&str; 7] = ["-u", "-w", "-q", "-n", "DEV", "-B", "-b"];

/// sysstat's magic number (0xd596) opens every sa file; byte-swapped when another architecture
/// wrote it (sadf then says it cannot read it).
pub fn has_sa_magic(path: &Path) -> bool {
    use std::io::Read as _;
    let mut magic = [0u8; 2];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok()
        && (magic == [0x96, 0xd5] || magic == [0xd5, 0x96])
}

/// A `sadf -d`/`-dh` export: a header, or a record of a host, an interval and a timestamp.
pub fn is_text_export(first: &str) -> bool {
    if first.starts_with("# hostname;interval;timestamp") {
        return true;
    }
    let mut fields = first.split(';');
    let (_, interval, stamp) = (fields.next(), fields.next(), fields.next());
    interval.is_some_and(|i| i.parse::<i64>().is_ok()) && stamp.is_some_and(|s| parse_stamp(s).is_some())
}

/// A `sadf -j` export: `{"sysstat": {` opens it, on one line or two.
pub fn is_json_export(first: &[String]) -> bool {
    let head: String = first.iter().take(3).map(|l| l.trim()).collect();
    head.starts_with("{\"sysstat\"")
}

// ---------------------------------------------------------------------------------------------
// Binary sa files through `sadf`

/// A folder for sadf's output, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kahuna-sadf-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `sadf -dh` text of a binary sa file, in a temporary file.
pub struct Converted {
    /// Removed with this value, and the text in it.
    _dir: TempDir,
    text: PathBuf,
    /// Set when sadf stopped at a record cut short (a file being written, or damaged at its
    /// end): the complete records before it are read, and the report says so.
    pub warning: Option<String>,
}

impl Converted {
    pub fn text_path(&self) -> &Path {
        &self.text
    }
}

const CUT_SHORT: &str = "End of system activity file unexpected";

/// Runs `sadf -dh` over a binary sa file; a file of an older format generation is converted
/// with `sadf -c` first. Errors carry sadf's own words.
pub fn convert(path: &Path) -> Result<Converted, String> {
    let dir = TempDir::new().map_err(|e| format!("cannot create a temporary folder: {e}"))?;
    let text = dir.0.join("sadf.txt");
    let warning = match run_sadf(path, &text) {
        Ok(warning) => warning,
        Err(reason) if reason.contains("convert") => {
            let upgraded = dir.0.join("converted.sa");
            let file = std::fs::File::create(&upgraded).map_err(|e| format!("cannot write {}: {e}", upgraded.display()))?;
            let out = Command::new("sadf")
                .arg("-c")
                .arg(path)
                .stdout(file)
                .stderr(Stdio::piped())
                .output()
                .map_err(sadf_missing)?;
            if !out.status.success() {
                return Err(format!("sadf -c cannot convert it: {}", words(&out.stderr)));
            }
            run_sadf(&upgraded, &text).map_err(|e| format!("after sadf -c: {e}"))?
        }
        Err(reason) => return Err(reason),
    };
    Ok(Converted { _dir: dir, text, warning })
}

fn run_sadf(path: &Path, text: &Path) -> Result<Option<String>, String> {
    let file = std::fs::File::create(text).map_err(|e| format!("cannot write {}: {e}", text.display()))?;
    let out = Command::new("sadf")
        .arg("-dh")
        .arg(path)
        .arg("--")
        .args(SADF_ACTIVITIES)
        .stdout(file)
        .stderr(Stdio::piped())
        .output()
        .map_err(sadf_missing)?;
    let said = words(&out.stderr);
    if out.status.success() {
        Ok(None)
    } else if said.contains(CUT_SHORT) {
        Ok(Some(format!("sadf: {CUT_SHORT}; the complete records before it were read")))
    } else {
        Err(format!("sadf cannot read it: {said}"))
    }
}

fn sadf_missing(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        "binary sa file, and `sadf` is not installed: install sysstat (`apt-get install sysstat`)".into()
    } else {
        format!("cannot run sadf: {e}")
    }
}

/// sadf's message on one line: its lines joined, the blank ones and the advice left out.
fn words(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() { "no message".into() } else { lines.join("; ") }
}


// ---------------------------------------------------------------------------------------------
// `sar_metrics` rows, built column by column

/// Rows of a `sar_metrics` batch: its fixed costs vanish, and it stays a few MB.
const SAR_BATCH_ROWS: usize = 64 * 1024;

/// The code of a missing device: a figure of the whole system.
const NO_DEVICE: u32 = u32::MAX;

/// The values of `sar_metrics`' text columns (host, activity, device, metric), each coded once
/// per file: a figure then costs four integers, not four strings.
#[derive(Default)]
struct Names {
    list: Vec<String>,
    index: HashMap<String, u32>,
}

impl Names {
    fn code(&mut self, name: &str) -> u32 {
        if let Some(&code) = self.index.get(name) {
            return code;
        }
        let code = self.list.len() as u32;
        self.list.push(name.to_string());
        self.index.insert(name.to_string(), code);
        code
    }

    fn name(&self, code: u32) -> &str {
        self.list.get(code as usize).map_or("", String::as_str)
    }

    /// A text column of the values the codes name; [`NO_DEVICE`] is null.
    fn column(&self, codes: &[u32]) -> ArrayRef {
        let text = |c: u32| self.list.get(c as usize).map_or(&b""[..], |s| s.as_bytes());
        let nulls = codes.contains(&NO_DEVICE).then(|| NullBuffer::from_iter(codes.iter().map(|&c| c != NO_DEVICE)));
        let (values, offsets) = match codes.split_first() {
            // One value throughout (the host, nearly always): repeated, not copied one by one.
            Some((&first, rest)) if nulls.is_none() && rest.iter().all(|&c| c == first) => {
                let one = text(first);
                let offsets: Vec<i32> = (0..=codes.len()).map(|i| (i * one.len()) as i32).collect();
                (one.repeat(codes.len()), offsets)
            }
            _ => {
                let bytes: usize = codes.iter().map(|&c| text(c).len()).sum();
                let mut values = Vec::with_capacity(bytes);
                let mut offsets = Vec::with_capacity(codes.len() + 1);
                offsets.push(0i32);
                for &code in codes {
                    values.extend_from_slice(text(code));
                    offsets.push(values.len() as i32);
                }
                (values, offsets)
            }
        };
        Arc::new(StringArray::new(OffsetBuffer::new(ScalarBuffer::from(offsets)), values.into(), nulls))
    }
}

/// `sar_metrics` rows of one date being gathered — codes, times and values — and turned into
/// Arrow arrays in one go when the batch is full, the date changes or the file ends.
#[derive(Default)]
struct SarRows {
    names: Names,
    date: i32,
    host: Vec<u32>,
    ts_us: Vec<i64>,
    activity: Vec<u32>,
    device: Vec<u32>,
    metric: Vec<u32>,
    value: Vec<f64>,
}

impl SarRows {
    /// Ready for rows of partition `date`: a batch of another date, or a full one, goes first.
    fn open(&mut self, sink: &mut Sink, date: i32) {
        if !self.value.is_empty() && (self.date != date || self.value.len() >= SAR_BATCH_ROWS) {
            self.flush(sink);
        }
        if self.value.capacity() == 0 {
            for codes in [&mut self.host, &mut self.activity, &mut self.device, &mut self.metric] {
                codes.reserve(SAR_BATCH_ROWS);
            }
            self.ts_us.reserve(SAR_BATCH_ROWS);
            self.value.reserve(SAR_BATCH_ROWS);
        }
        self.date = date;
    }

    #[inline]
    fn push(&mut self, host: u32, ts_us: i64, activity: u32, device: u32, metric: u32, value: f64) {
        self.host.push(host);
        self.ts_us.push(ts_us);
        self.activity.push(activity);
        self.device.push(device);
        self.metric.push(metric);
        self.value.push(value);
    }

    fn flush(&mut self, sink: &mut Sink) {
        if self.value.is_empty() {
            return;
        }
        let ts = TimestampMicrosecondArray::new(ScalarBuffer::from(std::mem::take(&mut self.ts_us)), None).with_timezone("UTC");
        let arrays: Vec<ArrayRef> = vec![
            self.names.column(&self.host),
            Arc::new(ts),
            self.names.column(&self.activity),
            self.names.column(&self.device),
            self.names.column(&self.metric),
            Arc::new(Float64Array::new(ScalarBuffer::from(std::mem::take(&mut self.value)), None)),
        ];
        for codes in [&mut self.host, &mut self.activity, &mut self.device, &mut self.metric] {
            codes.clear();
        }
        sink.emit_rows(Rows::from_arrays(Table::SarMetrics, self.date, arrays));
    }
}

// ---------------------------------------------------------------------------------------------
// Samples: the 14 metrics of one host and second

const USER: usize = 0;
const SYSTEM: usize = 1;
const IOWAIT: usize = 2;
const CSWCH: usize = 3;
const RUNQ: usize = 4;
const PLIST: usize = 5;
const LDAVG1: usize = 6;
const RX: usize = 7;
const TX: usize = 8;
const PGPGIN: usize = 9;
const PGPGOUT: usize = 10;
const FAULT: usize = 11;
const BREAD: usize = 12;
const BWRTN: usize = 13;
/// `sar -u ALL` splits what `sar -u` sums: %user = %usr + %guest, %system = %sys + %irq + %soft.
const USR: usize = 14;
const GUEST: usize = 15;
const SYS: usize = 16;
const IRQ: usize = 17;
const SOFT: usize = 18;
const SLOTS: usize = 19;

/// Where a figure goes in a sample: a slot set, a slot added to (network traffic), or nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    None,
    Set(u8),
    Add(u8),
}

/// The instances of an activity whose figures a slot takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Instances {
    Any,
    /// The all-CPU row.
    AllCpu,
    /// The interface `--iface` names, or every one but loopback.
    Iface,
}

/// The slot an activity's figure feeds, and from which instances.
fn slot_of(activity: &str, metric: &str) -> (Slot, Instances) {
    let set = |at: usize| Slot::Set(at as u8);
    let any = |at: usize| (set(at), Instances::Any);
    match (activity, metric) {
        ("cpu-load", metric) => {
            let slot = match metric {
                "%user" => set(USER),
                "%system" => set(SYSTEM),
                "%iowait" => set(IOWAIT),
                "%usr" => set(USR),
                "%guest" => set(GUEST),
                "%sys" => set(SYS),
                "%irq" => set(IRQ),
                "%soft" => set(SOFT),
                _ => Slot::None,
            };
            (slot, Instances::AllCpu)
        }
        ("process-and-context-switch", "cswch/s") => any(CSWCH),
        ("queue", "runq-sz") => any(RUNQ),
        ("queue", "plist-sz") => any(PLIST),
        ("queue", "ldavg-1") => any(LDAVG1),
        ("paging", "pgpgin/s") => any(PGPGIN),
        ("paging", "pgpgout/s") => any(PGPGOUT),
        ("paging", "fault/s") => any(FAULT),
        ("io", "bread/s") => any(BREAD),
        ("io", "bwrtn/s") => any(BWRTN),
        ("net-dev", "rxkB/s") => (Slot::Add(RX as u8), Instances::Iface),
        ("net-dev", "txkB/s") => (Slot::Add(TX as u8), Instances::Iface),
        _ => (Slot::None, Instances::Any),
    }
}

/// Whether the 14 metrics take the figures of `device`: the all-CPU row of the CPU figures;
/// the interface `iface` names, or else every one but loopback, of the network traffic.
fn takes(instances: Instances, device: Option<&str>, iface: Option<&str>) -> bool {
    match (instances, iface, device) {
        (Instances::Any, _, _) => true,
        (Instances::AllCpu, _, device) => device == Some("all"),
        (Instances::Iface, Some(wanted), Some(d)) => d == wanted,
        (Instances::Iface, None, Some(d)) => d != "lo",
        (Instances::Iface, _, None) => false,
    }
}

/// One host's second: what its figures gave the 14 metrics so far, in a fixed-size value.
#[derive(Clone, Copy, Debug)]
struct Sample {
    ts: i64,
    line: u64,
    offset: u64,
    interval: Option<i64>,
    restart: bool,
    /// Bit `i` set: slot `i` has a value.
    set: u32,
    slots: [f64; SLOTS],
}

impl Sample {
    fn new(ts: i64, line: u64, offset: u64, interval: Option<i64>) -> Sample {
        Sample { ts, line, offset, interval, restart: false, set: 0, slots: [0.0; SLOTS] }
    }

    #[inline]
    fn put(&mut self, slot: Slot, value: f64) {
        match slot {
            Slot::None => {}
            Slot::Set(at) => {
                self.slots[at as usize] = value;
                self.set |= 1 << at;
            }
            Slot::Add(at) => {
                let sum = self.get(at as usize).unwrap_or(0.0);
                self.slots[at as usize] = sum + value;
                self.set |= 1 << at;
            }
        }
    }

    fn get(&self, at: usize) -> Option<f64> {
        (self.set & (1 << at) != 0).then_some(self.slots[at])
    }

    /// Takes what the 14 metrics need from one figure, given by name.
    fn feed(&mut self, activity: &str, device: Option<&str>, metric: &str, value: f64, iface: Option<&str>) {
        let (slot, instances) = slot_of(activity, metric);
        if slot != Slot::None && takes(instances, device, iface) {
            self.put(slot, value);
        }
    }

    fn values(&self) -> [Option<f64>; 14] {
        let mut m: [Option<f64>; 14] = std::array::from_fn(|at| self.get(at));
        let sum = |first: usize, rest: &[usize]| self.get(first).map(|v| v + rest.iter().filter_map(|p| self.get(*p)).sum::<f64>());
        m[USER] = m[USER].or_else(|| sum(USR, &[GUEST]));
        m[SYSTEM] = m[SYSTEM].or_else(|| sum(SYS, &[IRQ, SOFT]));
        m
    }
}

/// What every sysstat reader shares: the command line's say, and how samples become rows.
struct Common {
    host: Option<String>,
    iface: Option<String>,
    zone: ZoneConverter,
    /// Restarts already written: `sadf -d` of some versions repeats them in each group.
    restarts: HashSet<(String, i64)>,
    sar: SarRows,
}

impl Common {
    fn new(hints: &Hints, zone: Option<Tz>) -> Common {
        Common {
            host: hints.host.clone(),
            iface: hints.iface.clone(),
            zone: ZoneConverter::new(zone),
            restarts: HashSet::new(),
            sar: SarRows::default(),
        }
    }

    fn utc_ms(&mut self, (ms, utc): (i64, bool)) -> i64 {
        if utc { ms } else { self.zone.to_utc_ms(ms) }
    }

    /// One `sar_metrics` row of a figure given by name (the JSON route; text rows come coded).
    fn figure(&mut self, sink: &mut Sink, host: &str, ts: i64, offset: u64, figure: (&str, Option<&str>, &str, f64)) {
        if !sink.wants(Table::SarMetrics, offset) {
            return;
        }
        let (activity, device, metric, value) = figure;
        let sar = &mut self.sar;
        sar.open(sink, date_of_ms(ts));
        let names = &mut sar.names;
        let codes = (names.code(host), names.code(activity), device.map_or(NO_DEVICE, |d| names.code(d)), names.code(metric));
        sar.push(codes.0, ts * 1000, codes.1, codes.2, codes.3, value);
    }

    fn sample_row(sink: &mut Sink, host: &str, sample: &Sample) {
        sink.report.events += 1;
        if let Some(t) = sink.rows(Table::Sadc, date_of_ms(sample.ts), sample.offset) {
            let mut row = t.rows.row().text(Some(host)).ms(Some(sample.ts)).bool(sample.restart).int(sample.interval);
            for value in sample.values() {
                row = row.float(value);
            }
            row.text(Some(t.file)).int(Some(sample.line as i64)).text(Some(t.ingest_id));
        }
    }

    /// A restart, written once however often the export repeats it.
    fn restart(&mut self, sink: &mut Sink, host: &str, ts: i64, line: u64, offset: u64) {
        if self.restarts.insert((host.to_string(), ts)) {
            let sample = Sample { restart: true, ..Sample::new(ts, line, offset, None) };
            Common::sample_row(sink, host, &sample);
        }
    }

    /// The file's end: the last `sar_metrics` rows go.
    fn finish(&mut self, sink: &mut Sink) {
        self.sar.flush(sink);
    }
}


/// `yyyy-MM-dd HH:mm:ss[ UTC]` or seconds since 1970 (`sadf -U`): milliseconds, and whether
/// they are UTC (otherwise the capture's local time).
fn parse_stamp(s: &str) -> Option<(i64, bool)> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<i64>().ok()?.checked_mul(1000).map(|ms| (ms, true));
    }
    let (body, utc) = match s.strip_suffix(" UTC") {
        Some(body) => (body, true),
        None => (s, false),
    };
    let b = body.as_bytes();
    let shape = b.len() == 19 && b[4] == b'-' && b[7] == b'-' && b[10] == b' ' && b[13] == b':' && b[16] == b':';
    if !shape {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u32> {
        let digits = &body[from..to];
        digits.bytes().all(|c| c.is_ascii_digit()).then(|| digits.parse().ok()).flatten()
    };
    let date = chrono::NaiveDate::from_ymd_opt(num(0, 4)? as i32, num(5, 7)?, num(8, 10)?)?;
    let time = date.and_hms_opt(num(11, 13)?, num(14, 16)?, num(17, 19)?)?;
    Some((time.and_utc().timestamp_millis(), utc))
}

// ---------------------------------------------------------------------------------------------
// `sadf -d` and `sadf -dh` text

/// Columns that name an instance (a CPU, an interface, a disk) and open a group of figures.
fn is_instance_column(column: &str) -> bool {
    matches!(column, "CPU" | "IFACE" | "DEV" | "FILESYSTEM" | "INTR" | "TTY" | "FAN" | "DEVICE" | "BUS" | "TEMP")
}

/// The activity of a group, named as `sadf -j` names it.
fn group_activity(instance: &str, first_metric: &str) -> String {
    match (instance, first_metric) {
        ("CPU", m) if m.starts_with('%') => "cpu-load".into(),
        ("IFACE", "rxpck/s") => "net-dev".into(),
        ("IFACE", "rxerr/s") => "net-edev".into(),
        ("DEV", _) => "disk".into(),
        ("FILESYSTEM", _) => "filesystems".into(),
        ("INTR", _) => "interrupts".into(),
        ("TTY", _) => "serial".into(),
        (other, m) => format!("{}-{}", other.to_ascii_lowercase(), bare(m)),
    }
}

/// The activity a lone column belongs to, named as `sadf -j` names it.
fn column_activity(column: &str) -> Option<&'static str> {
    Some(match column {
        "proc/s" | "cswch/s" => "process-and-context-switch",
        "pswpin/s" | "pswpout/s" => "swap-pages",
        "pgpgin/s" | "pgpgout/s" | "fault/s" | "majflt/s" | "pgfree/s" | "pgscank/s" | "pgscand/s" | "pgsteal/s"
        | "%vmeff" => "paging",
        "tps" | "rtps" | "wtps" | "dtps" | "bread/s" | "bwrtn/s" | "bdscd/s" => "io",
        "runq-sz" | "plist-sz" | "ldavg-1" | "ldavg-5" | "ldavg-15" | "blocked" => "queue",
        "dentunusd" | "file-nr" | "inode-nr" | "pty-nr" => "kernel",
        "intr/s" => "interrupts",
        c if c.starts_with("kb") || matches!(c, "%memused" | "%commit" | "%swpused" | "%swpcad") => "memory",
        _ => return None,
    })
}

/// A column's name without its unit marks: `%user` → `user`, `cswch/s` → `cswch`.
fn bare(column: &str) -> &str {
    column.trim_start_matches('%').trim_end_matches("/s")
}

#[derive(Debug, PartialEq)]
enum Item {
    Single { activity: String, metric: String },
    /// An instance column and its figures; `repeated` (`-dh`, marked `[...]`) when a row holds
    /// one such group per instance.
    Group { activity: String, cpu: bool, metrics: Vec<String>, repeated: bool },
}

impl Item {
    fn width(&self) -> usize {
        match self {
            Item::Single { .. } => 1,
            Item::Group { metrics, .. } => 1 + metrics.len(),
        }
    }
}

/// The columns of a header after `hostname;interval;timestamp`.
fn parse_header(columns: &str) -> Result<Vec<Item>, String> {
    let columns: Vec<&str> = columns.split(';').collect();
    let mut items = Vec::new();
    let mut i = 0;
    while i < columns.len() {
        let column = columns[i];
        if is_instance_column(column) {
            let mut metrics = Vec::new();
            let mut repeated = false;
            i += 1;
            while i < columns.len() && !is_instance_column(columns[i]) {
                let metric = columns[i];
                i += 1;
                if let Some(stripped) = metric.strip_suffix("[...]") {
                    metrics.push(stripped.to_string());
                    repeated = true;
                    break;
                }
                metrics.push(metric.to_string());
            }
            let Some(first) = metrics.first() else {
                return Err(format!("header column {column} has no figures after it"));
            };
            let activity = group_activity(column, first);
            items.push(Item::Group { activity, cpu: column == "CPU", metrics, repeated });
        } else {
            let metric = column.trim_end_matches("[...]");
            let activity = match column_activity(metric) {
                Some(a) => a.to_string(),
                None => match items.last() {
                    Some(Item::Single { activity, .. } | Item::Group { activity, .. }) => activity.clone(),
                    None => bare(metric).to_string(),
                },
            };
            items.push(Item::Single { activity, metric: metric.to_string() });
            i += 1;
        }
    }
    if items.is_empty() {
        return Err("header names no figures".into());
    }
    Ok(items)
}

/// The CPU column's value as sar names it: `-1` is the all-CPU row.
fn cpu_name(field: &str) -> &str {
    if field == "-1" { "all" } else { field }
}

/// A decimal as sadf prints it (`-12.34`), read without the general parser's cost; anything
/// else goes to `str::parse`. Equal to `str::parse` for every input: up to 15 digits fit a
/// float's mantissa exactly, and dividing by an exact power of ten rounds once, correctly.
#[inline]
fn parse_number(field: &str) -> Option<f64> {
    const POW10: [f64; 16] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];
    let bytes = field.as_bytes();
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    let (mut mantissa, mut count, mut decimals, mut dot) = (0u64, 0usize, 0usize, false);
    for &b in digits {
        match b {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(b - b'0');
                count += 1;
                decimals += usize::from(dot);
                if count > 15 {
                    return field.parse().ok();
                }
            }
            b'.' if !dot => dot = true,
            _ => return field.parse().ok(),
        }
    }
    if count == 0 {
        return field.parse().ok();
    }
    let magnitude = mantissa as f64 / POW10[decimals];
    Some(if negative { -magnitude } else { magnitude })
}

fn number(field: &str, metric: &str) -> Result<f64, String> {
    parse_number(field).ok_or_else(|| format!("{metric}: `{field}` is not a number"))
}

/// The instances a group has met, in the order rows list them: the next one is nearly always
/// the one after the last, so a row finds its devices without hashing.
#[derive(Default)]
struct Devices {
    /// As the row writes it, its code, whether the 14 metrics take its figures.
    known: Vec<(String, u32, bool)>,
    index: HashMap<String, usize>,
    next: usize,
}

impl Devices {
    fn find(&mut self, field: &str, cpu: bool, instances: Instances, iface: Option<&str>, names: &mut Names) -> (u32, bool) {
        let at = match self.known.get(self.next) {
            Some((known, _, _)) if known == field => self.next,
            _ => match self.index.get(field) {
                Some(&at) => at,
                None => {
                    let device = if cpu { cpu_name(field) } else { field };
                    self.known.push((field.to_string(), names.code(device), takes(instances, Some(device), iface)));
                    self.index.insert(field.to_string(), self.known.len() - 1);
                    self.known.len() - 1
                }
            },
        };
        self.next = at + 1;
        let (_, code, takes) = self.known[at];
        (code, takes)
    }
}

/// A header's item compiled for rows: text coded for `sar_metrics`, slots for the 14 metrics.
enum Column {
    Single { activity: u32, metric: u32, slot: Slot },
    Group {
        activity: u32,
        cpu: bool,
        /// Each figure's metric code and slot.
        metrics: Vec<(u32, Slot)>,
        instances: Instances,
        repeated: bool,
        /// Fields the items after this one need.
        needed_after: usize,
        devices: Devices,
    },
}

fn compile(items: &[Item], names: &mut Names, iface: Option<&str>) -> Vec<Column> {
    let mut columns = Vec::with_capacity(items.len());
    for (k, item) in items.iter().enumerate() {
        let needed_after = items[k + 1..].iter().map(Item::width).sum();
        columns.push(match item {
            Item::Single { activity, metric } => {
                let (slot, instances) = slot_of(activity, metric);
                let slot = if takes(instances, None, iface) { slot } else { Slot::None };
                Column::Single { activity: names.code(activity), metric: names.code(metric), slot }
            }
            Item::Group { activity, cpu, metrics, repeated } => {
                let instances = metrics.iter().map(|m| slot_of(activity, m).1).find(|i| *i != Instances::Any);
                Column::Group {
                    activity: names.code(activity),
                    cpu: *cpu,
                    metrics: metrics.iter().map(|m| (names.code(m), slot_of(activity, m).0)).collect(),
                    instances: instances.unwrap_or(Instances::Any),
                    repeated: *repeated,
                    needed_after,
                    devices: Devices::default(),
                }
            }
        });
    }
    columns
}

/// The fields of `rest`, `;`-separated, as byte ranges.
fn split_fields(rest: &str, spans: &mut Vec<(usize, usize)>) {
    spans.clear();
    let mut start = 0;
    for end in memchr::memchr_iter(b';', rest.as_bytes()) {
        spans.push((start, end));
        start = end + 1;
    }
    spans.push((start, rest.len()));
}

/// One figure of a row, coded.
#[derive(Clone, Copy, Debug)]
struct Figure {
    activity: u32,
    device: u32,
    metric: u32,
    slot: Slot,
    value: f64,
}

/// Splits a row's values (after the timestamp; `spans` are its fields in `rest`) along the
/// header's columns. A repeated group takes one more instance while enough fields remain for
/// the items after it and the next field looks like an instance of it: the next CPU number,
/// or a name that is not a number.
fn split_row(
    columns: &mut [Column],
    rest: &str,
    spans: &[(usize, usize)],
    names: &mut Names,
    iface: Option<&str>,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let n = spans.len();
    let field = |i: usize| rest.get(spans[i].0..spans[i].1).unwrap_or("");
    let fewer = || format!("{} fields, fewer than the header names", n + 3);
    let mut at = 0;
    for column in columns.iter_mut() {
        match column {
            Column::Single { activity, metric, slot } => {
                if at >= n {
                    return Err(fewer());
                }
                let value = number(field(at), names.name(*metric))?;
                out.push(Figure { activity: *activity, device: NO_DEVICE, metric: *metric, slot: *slot, value });
                at += 1;
            }
            Column::Group { activity, cpu, metrics, instances, repeated, needed_after, devices } => {
                let width = 1 + metrics.len();
                let mut previous_cpu: Option<i64> = None;
                loop {
                    if n < at + width {
                        return Err(fewer());
                    }
                    let instance = field(at);
                    let (device, counted) = devices.find(instance, *cpu, *instances, iface, names);
                    for (k, &(metric, slot)) in metrics.iter().enumerate() {
                        let value = number(field(at + 1 + k), names.name(metric))?;
                        let slot = if counted { slot } else { Slot::None };
                        out.push(Figure { activity: *activity, device, metric, slot, value });
                    }
                    at += width;
                    if !*repeated {
                        break;
                    }
                    previous_cpu = instance.parse().ok().or(previous_cpu);
                    let room = n.saturating_sub(at) >= *needed_after + width;
                    let next = if at < n { field(at) } else { "" };
                    let looks_like_instance = if *cpu {
                        previous_cpu.is_some_and(|p| next.parse::<i64>().is_ok_and(|x| x == p + 1))
                    } else {
                        next.parse::<f64>().is_err()
                    };
                    if !(room && looks_like_instance) {
                        break;
                    }
                }
            }
        }
    }
    if at != n {
        return Err(format!("{} fields where the header names {}", n + 3, at + 3));
    }
    Ok(())
}

/// The samples of one host waiting, under `-d` headers, for the figures of later groups; in
/// time order.
struct Waiting {
    host: String,
    samples: Vec<Sample>,
    /// Where the last row's sample was: each group walks the same seconds in the same order.
    cursor: usize,
}

impl Waiting {
    fn sample(&mut self, ts: i64, line: u64, offset: u64, interval: i64) -> &mut Sample {
        let (n, cursor) = (self.samples.len(), self.cursor);
        let at = if cursor < n && self.samples[cursor].ts == ts {
            cursor
        } else if cursor + 1 < n && self.samples[cursor + 1].ts == ts {
            cursor + 1
        } else if self.samples.last().is_none_or(|last| last.ts < ts) {
            self.samples.push(Sample::new(ts, line, offset, Some(interval)));
            n
        } else {
            match self.samples.binary_search_by_key(&ts, |s| s.ts) {
                Ok(at) => at,
                Err(at) => {
                    self.samples.insert(at, Sample::new(ts, line, offset, Some(interval)));
                    at
                }
            }
        };
        self.cursor = at;
        &mut self.samples[at]
    }
}

/// Reads `sadf -d` and `-dh` text. A `-dh` header spans several activities, so each row is a
/// whole sample and is written at once; under `-d` headers a sample's figures are spread over
/// the groups of its export, so samples wait, per host and second, for the export's end.
pub struct TextParser {
    common: Common,
    header: Option<Vec<Column>>,
    grouped: Option<bool>,
    /// `-d`: the headers of the export being read; one of them again opens the next export.
    round: Vec<String>,
    waiting: Vec<Waiting>,
    last_stamp: (String, i64),
    /// The host of the last row, and its code.
    last_host: Option<(String, u32)>,
    /// Reused from row to row: the fields after the timestamp, and the row's figures.
    spans: Vec<(usize, usize)>,
    figures: Vec<Figure>,
}

impl TextParser {
    pub fn new(hints: &Hints, zone: Option<Tz>) -> TextParser {
        TextParser {
            common: Common::new(hints, zone),
            header: None,
            grouped: None,
            round: Vec::new(),
            waiting: Vec::new(),
            last_stamp: (String::new(), 0),
            last_host: None,
            spans: Vec::new(),
            figures: Vec::new(),
        }
    }

    fn header(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str) {
        let Some(columns) = text.strip_prefix("# hostname;interval;timestamp;") else {
            sink.reject(number, offset, "header does not start with `# hostname;interval;timestamp;`", text);
            return;
        };
        match parse_header(columns) {
            Ok(items) => {
                let activities: HashSet<&str> = items
                    .iter()
                    .map(|i| match i {
                        Item::Single { activity, .. } | Item::Group { activity, .. } => activity.as_str(),
                    })
                    .collect();
                let whole_samples = activities.len() > 1 || items.iter().any(|i| matches!(i, Item::Group { repeated: true, .. }));
                if *self.grouped.get_or_insert(!whole_samples) {
                    // A header seen already in this export: the next export (after a restart,
                    // or the next file of a concatenation) begins, and every sample waiting is
                    // complete.
                    if self.round.iter().any(|h| h == columns) {
                        self.flush_waiting(sink);
                        self.round.clear();
                    }
                    self.round.push(columns.to_string());
                    for waiting in &mut self.waiting {
                        waiting.cursor = 0;
                    }
                }
                self.header = Some(compile(&items, &mut self.common.sar.names, self.common.iface.as_deref()));
                sink.parsed(1);
            }
            Err(reason) => {
                self.header = None;
                sink.reject(number, offset, &reason, text);
            }
        }
    }

    fn row(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str) -> Result<(), String> {
        let TextParser { common, header, grouped, waiting, last_stamp, last_host, spans, figures, .. } = self;
        let mut fields = text.splitn(4, ';');
        let (Some(host_field), Some(interval_field), Some(stamp_field), Some(rest)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err("fewer than 4 `;`-separated fields".into());
        };
        let interval: i64 = interval_field.parse().map_err(|_| format!("interval `{interval_field}` is not a number"))?;
        // Rows of one sample second share their timestamp: it is parsed once.
        if last_stamp.0 != stamp_field {
            let stamp = parse_stamp(stamp_field).ok_or_else(|| format!("timestamp `{stamp_field}` is not yyyy-MM-dd HH:mm:ss [UTC]"))?;
            last_stamp.0.clear();
            last_stamp.0.push_str(stamp_field);
            last_stamp.1 = common.utc_ms(stamp);
        }
        let ts = last_stamp.1;
        let host = common.host.as_deref().unwrap_or(host_field);
        if interval < 0 {
            // Records that are not samples: a restart, or a comment (`COM …`).
            if rest.starts_with("LINUX-RESTART") {
                let host = host.to_string();
                common.restart(sink, &host, ts, number, offset);
                sink.parsed(1);
            } else {
                sink.skipped(1);
            }
            return Ok(());
        }
        let Some(columns) = header.as_mut() else {
            return Err("sample before any `# hostname;interval;timestamp;…` header".into());
        };
        split_fields(rest, spans);
        // Every figure is read before any row is written: a bad field rejects the whole line.
        figures.clear();
        split_row(columns, rest, spans, &mut common.sar.names, common.iface.as_deref(), figures)?;
        if sink.wants(Table::SarMetrics, offset) {
            let sar = &mut common.sar;
            sar.open(sink, date_of_ms(ts));
            let host_code = match last_host {
                Some((name, code)) if name == host => *code,
                _ => {
                    let code = sar.names.code(host);
                    *last_host = Some((host.to_string(), code));
                    code
                }
            };
            let ts_us = ts * 1000;
            for f in figures.iter() {
                sar.push(host_code, ts_us, f.activity, f.device, f.metric, f.value);
            }
        }
        if *grouped == Some(true) {
            let at = match waiting.iter().position(|w| w.host == host) {
                Some(at) => at,
                None => {
                    waiting.push(Waiting { host: host.to_string(), samples: Vec::new(), cursor: 0 });
                    waiting.len() - 1
                }
            };
            let sample = waiting[at].sample(ts, number, offset, interval);
            for f in figures.iter() {
                sample.put(f.slot, f.value);
            }
        } else {
            let mut sample = Sample::new(ts, number, offset, Some(interval));
            for f in figures.iter() {
                sample.put(f.slot, f.value);
            }
            Common::sample_row(sink, host, &sample);
        }
        sink.parsed(1);
        Ok(())
    }

    /// The samples of the export just read, complete: their `sadc` rows.
    fn flush_waiting(&mut self, sink: &mut Sink) {
        for waiting in &mut self.waiting {
            for sample in waiting.samples.drain(..) {
                Common::sample_row(sink, &waiting.host, &sample);
            }
            waiting.cursor = 0;
        }
    }
}

impl LineParser for TextParser {
    fn line(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str) {
        if text.trim().is_empty() {
            sink.skipped(1);
        } else if text.starts_with('#') {
            self.header(sink, number, offset, text);
        } else if let Err(reason) = self.row(sink, number, offset, text) {
            sink.reject(number, offset, &reason, text);
        }
    }

    fn finish(&mut self, sink: &mut Sink) {
        self.flush_waiting(sink);
        self.common.finish(sink);
    }
}

// ---------------------------------------------------------------------------------------------
// `sadf -j`

/// A figure's name in `sadf -j` as sar prints it, so that `sar_metrics` reads the same from
/// every export: `user` → `%user`, `cswch` → `cswch/s`, `vmeff-percent` → `%vmeff`.
fn sar_name(activity: &str, name: &str) -> String {
    if let Some(stem) = name.strip_suffix("-percent") {
        return format!("%{stem}");
    }
    match activity {
        "cpu-load" | "cpu-load-all" => format!("%{name}"),
        "queue" | "kernel" => name.to_string(),
        "io" if matches!(name, "tps" | "rtps" | "wtps" | "dtps") => name.to_string(),
        "memory" if name == "inactive" => "kbinact".into(),
        "memory" => format!("kb{name}"),
        _ => format!("{name}/s"),
    }
}

/// The figures of one activity of a record: an array holds one object per instance, named by
/// its first text field (`"cpu": "all"`, `"iface": "eth0"`); an object of figures may nest
/// (`"io-reads": {…}`); an object of activities (`"network"`) holds several.
fn activity_figures(name: &str, value: &Value, out: &mut Vec<(String, Option<String>, String, f64)>) {
    match value {
        Value::Array(instances) => {
            for instance in instances {
                let Value::Object(fields) = instance else { continue };
                let device = fields.values().find_map(Value::as_str).map(str::to_string);
                numbers(name, device.as_deref(), fields, out);
            }
        }
        Value::Object(fields) if fields.values().all(|v| v.is_array() || v.is_object()) => {
            for (inner, v) in fields {
                activity_figures(inner, v, out);
            }
        }
        Value::Object(fields) => numbers(name, None, fields, out),
        _ => {}
    }
}

fn numbers(activity: &str, device: Option<&str>, fields: &Map<String, Value>, out: &mut Vec<(String, Option<String>, String, f64)>) {
    for (name, v) in fields {
        match v {
            Value::Number(n) => {
                if let Some(x) = n.as_f64() {
                    out.push((activity.to_string(), device.map(str::to_string), sar_name(activity, name), x));
                }
            }
            Value::Object(inner) => numbers(activity, device, inner, out),
            _ => {}
        }
    }
}

/// `{"date": "2019-06-30", "time": "05:39:34", "utc": 1, …}` (a sample's `timestamp`, a
/// restart's `boot`): milliseconds and whether UTC.
fn json_stamp(v: &Value) -> Option<(i64, bool)> {
    let stamp = format!("{} {}", v.get("date")?.as_str()?, v.get("time")?.as_str()?);
    let (ms, _) = parse_stamp(&stamp)?;
    Some((ms, v.get("utc").and_then(Value::as_i64) == Some(1)))
}

#[derive(Clone, Debug, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// Where a value sits in the document.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Place {
    /// Holds records: the document, `sysstat`, `hosts`, a host, its `statistics` or `restarts`.
    Above,
    Statistics,
    Restart,
    Nodename,
    Elsewhere,
}

fn place(path: &[Seg]) -> Place {
    use Seg::{Index, Key};
    let key = |s: &Seg, k: &str| matches!(s, Key(x) if x == k);
    match path {
        [] => Place::Above,
        [a] if key(a, "sysstat") => Place::Above,
        [a, b] if key(a, "sysstat") && key(b, "hosts") => Place::Above,
        [a, b, Index(_)] if key(a, "sysstat") && key(b, "hosts") => Place::Above,
        [a, b, Index(_), c] if key(a, "sysstat") && key(b, "hosts") => match c {
            Key(k) if k == "statistics" || k == "restarts" => Place::Above,
            Key(k) if k == "nodename" => Place::Nodename,
            _ => Place::Elsewhere,
        },
        [a, b, Index(_), Key(c), Index(_)] if key(a, "sysstat") && key(b, "hosts") => match c.as_str() {
            "statistics" => Place::Statistics,
            "restarts" => Place::Restart,
            _ => Place::Elsewhere,
        },
        _ => Place::Elsewhere,
    }
}

/// An open `{` or `[` whose end is on a later line.
struct Frame {
    seg: Option<Seg>,
    array: bool,
    next_index: usize,
    key: Option<String>,
    /// The container's content so far, when it is a record or inside one.
    value: Option<Value>,
}

/// sadf's documents nest 8 deep; deeper is not sysstat's, and would cost stack to walk.
const MAX_DEPTH: usize = 64;
/// A record longer than this is not sadf's: its lines are rejected rather than held.
const MAX_RECORD_LINES: usize = 100_000;

/// A line of a record still open: its fate is the record's.
struct PendingLine {
    number: u64,
    offset: u64,
    raw: String,
}

/// One `statistics` or `restarts` entry into rows. `first` is where the record starts (the
/// line of its sample), `last` where it ends (the line of a restart).
fn json_record(
    common: &mut Common,
    nodename: Option<&str>,
    sink: &mut Sink,
    kind: Place,
    value: &Value,
    first: (u64, u64),
    last: (u64, u64),
) -> Result<(), String> {
    let host = common.host.clone().or_else(|| nodename.map(str::to_string)).ok_or("record before the host's nodename")?;
    if kind == Place::Restart {
        let stamp = value.get("boot").and_then(json_stamp).ok_or("restart without a boot date and time")?;
        let ts = common.utc_ms(stamp);
        common.restart(sink, &host, ts, last.0, last.1);
        return Ok(());
    }
    let stamp = value.get("timestamp").ok_or("statistics record without a timestamp")?;
    let ts = json_stamp(stamp).ok_or("statistics record whose timestamp has no date and time")?;
    let ts = common.utc_ms(ts);
    let interval = stamp.get("interval").and_then(Value::as_i64);
    let mut figures = Vec::new();
    if let Value::Object(activities) = value {
        for (name, v) in activities.iter().filter(|(k, _)| *k != "timestamp") {
            activity_figures(name, v, &mut figures);
        }
    }
    let mut sample = Sample::new(ts, first.0, first.1, interval);
    for (activity, device, metric, v) in &figures {
        sample.feed(activity, device.as_deref(), metric, *v, common.iface.as_deref());
        common.figure(sink, &host, ts, first.1, (activity, device.as_deref(), metric, *v));
    }
    Common::sample_row(sink, &host, &sample);
    Ok(())
}

/// Reads `sadf -j` a line at a time, whatever its indentation: a value complete on its line
/// is parsed whole by serde_json; a `{` or `[` left open is followed token by token. Records
/// (`statistics` and `restarts` entries) are assembled into values and turned into rows as
/// each closes, so memory holds one record, not the document.
pub struct JsonParser {
    common: Common,
    frames: Vec<Frame>,
    nodename: Option<String>,
    pending: Vec<PendingLine>,
    /// Line of a syntax error: the document's structure is lost after it.
    broken_at: Option<u64>,
    /// This line's records: accepted ones, and the reason of the last rejected one.
    accepted: usize,
    rejected: Option<String>,
    touched: bool,
    line: (u64, u64),
}

impl JsonParser {
    pub fn new(hints: &Hints, zone: Option<Tz>) -> JsonParser {
        JsonParser {
            common: Common::new(hints, zone),
            frames: Vec::new(),
            nodename: None,
            pending: Vec::new(),
            broken_at: None,
            accepted: 0,
            rejected: None,
            touched: false,
            line: (0, 0),
        }
    }

    fn path(&self) -> Vec<Seg> {
        self.frames.iter().filter_map(|f| f.seg.clone()).collect()
    }

    fn in_record(&self) -> bool {
        self.frames.iter().any(|f| f.value.is_some())
    }

    /// The segment the next value of the innermost container takes.
    fn next_seg(&mut self) -> Result<Option<Seg>, String> {
        let Some(top) = self.frames.last_mut() else { return Ok(None) };
        if top.array {
            top.next_index += 1;
            Ok(Some(Seg::Index(top.next_index - 1)))
        } else {
            top.key.take().map(|k| Some(Seg::Key(k))).ok_or_else(|| "a value where a key was expected".to_string())
        }
    }

    /// A value is complete: into the record being assembled, or handled by where it sits.
    fn deliver(&mut self, sink: &mut Sink, seg: Option<Seg>, value: Value) {
        if let Some(parent) = self.frames.last_mut().filter(|f| f.value.is_some()) {
            match (&mut parent.value, seg) {
                (Some(Value::Array(items)), _) => items.push(value),
                (Some(Value::Object(map)), Some(Seg::Key(k))) => {
                    map.insert(k, value);
                }
                _ => {}
            }
            return;
        }
        let mut path = self.path();
        path.extend(seg.clone());
        match place(&path) {
            kind @ (Place::Statistics | Place::Restart) => {
                self.touched = true;
                let result = self.record(sink, kind, &value);
                self.settle_pending(sink, result.as_ref().err());
                match result {
                    Ok(()) => self.accepted += 1,
                    Err(reason) => self.rejected = Some(reason),
                }
            }
            Place::Nodename => self.nodename = value.as_str().map(str::to_string),
            // A container of records complete on one line (a minified document): walk it.
            Place::Above => self.descend(sink, path, value),
            Place::Elsewhere => {}
        }
    }

    fn descend(&mut self, sink: &mut Sink, path: Vec<Seg>, value: Value) {
        let children: Vec<(Seg, Value)> = match value {
            Value::Object(map) => map.into_iter().map(|(k, v)| (Seg::Key(k), v)).collect(),
            Value::Array(items) => items.into_iter().enumerate().map(|(i, v)| (Seg::Index(i), v)).collect(),
            _ => return,
        };
        // The host's name comes before its records whatever the key order.
        let (first, rest): (Vec<_>, Vec<_>) = children.into_iter().partition(|(s, _)| matches!(s, Seg::Key(k) if k == "nodename"));
        for (seg, v) in first.into_iter().chain(rest) {
            let mut child = path.clone();
            child.push(seg);
            match place(&child) {
                Place::Above => self.descend(sink, child, v),
                Place::Nodename => self.nodename = v.as_str().map(str::to_string),
                kind @ (Place::Statistics | Place::Restart) => {
                    self.touched = true;
                    match self.record(sink, kind, &v) {
                        Ok(()) => self.accepted += 1,
                        Err(reason) => self.rejected = Some(reason),
                    }
                }
                Place::Elsewhere => {}
            }
        }
    }

    /// The lines of a record just finished share its fate.
    fn settle_pending(&mut self, sink: &mut Sink, rejected: Option<&String>) {
        for line in std::mem::take(&mut self.pending) {
            match rejected {
                None => sink.parsed(1),
                Some(why) => sink.reject(line.number, line.offset, why, &line.raw),
            }
        }
    }

    fn record(&mut self, sink: &mut Sink, kind: Place, value: &Value) -> Result<(), String> {
        let first = self.pending.first().map_or(self.line, |p| (p.number, p.offset));
        json_record(&mut self.common, self.nodename.as_deref(), sink, kind, value, first, self.line)
    }

    /// Follows one line's tokens; Err on a syntax error.
    fn tokens(&mut self, sink: &mut Sink, text: &str) -> Result<(), String> {
        let mut rest = text.trim_start();
        while !rest.is_empty() {
            let c = rest.as_bytes()[0];
            let expecting_key = self.frames.last().is_some_and(|f| !f.array && f.key.is_none());
            match c {
                b',' => rest = &rest[1..],
                b'}' | b']' => {
                    let frame = self.frames.pop().ok_or("a closing bracket with nothing open")?;
                    if frame.array != (c == b']') {
                        return Err("brackets do not match".into());
                    }
                    if self.in_record() || frame.value.is_some() {
                        self.touched = true;
                    }
                    if let Some(value) = frame.value {
                        self.deliver(sink, frame.seg, value);
                    }
                    rest = &rest[1..];
                }
                b'"' if expecting_key => {
                    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<String>();
                    let key = stream.next().ok_or("a key cut short")?.map_err(|e| e.to_string())?;
                    let after = rest[stream.byte_offset()..].trim_start();
                    rest = after.strip_prefix(':').ok_or_else(|| format!("no `:` after key \"{key}\""))?;
                    if let Some(top) = self.frames.last_mut() {
                        top.key = Some(key);
                    }
                }
                _ => {
                    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
                    match stream.next() {
                        Some(Ok(value)) => {
                            let consumed = stream.byte_offset();
                            let seg = self.next_seg()?;
                            if self.in_record() {
                                self.touched = true;
                            }
                            self.deliver(sink, seg, value);
                            rest = &rest[consumed..];
                        }
                        // An opening bracket whose end is on a later line.
                        Some(Err(e)) if e.is_eof() && (c == b'{' || c == b'[') => {
                            if self.frames.len() >= MAX_DEPTH {
                                return Err(format!("nested deeper than {MAX_DEPTH} levels"));
                            }
                            let seg = if self.frames.is_empty() { None } else { self.next_seg()? };
                            let mut path = self.path();
                            path.extend(seg.clone());
                            let inside = self.in_record();
                            let record = matches!(place(&path), Place::Statistics | Place::Restart);
                            let value = (inside || record)
                                .then(|| if c == b'{' { Value::Object(Map::new()) } else { Value::Array(Vec::new()) });
                            self.touched |= value.is_some();
                            self.frames.push(Frame { seg, array: c == b'[', next_index: 0, key: None, value });
                            rest = &rest[1..];
                        }
                        Some(Err(e)) => return Err(e.to_string()),
                        None => return Err("a value cut short".into()),
                    }
                }
            }
            rest = rest.trim_start();
        }
        Ok(())
    }
}

impl LineParser for JsonParser {
    fn line(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str) {
        if let Some(at) = self.broken_at {
            sink.reject(number, offset, &format!("after the JSON syntax error at line {at}"), text);
            return;
        }
        (self.accepted, self.rejected, self.touched, self.line) = (0, None, false, (number, offset));
        if let Err(e) = self.tokens(sink, text) {
            self.broken_at = Some(number);
            let reason = format!("JSON: {e}");
            for line in std::mem::take(&mut self.pending) {
                sink.reject(line.number, line.offset, &format!("record broken by the JSON syntax error at line {number}"), &line.raw);
            }
            sink.reject(number, offset, &reason, text);
            return;
        }
        if self.in_record() && self.pending.len() >= MAX_RECORD_LINES {
            self.broken_at = Some(number);
            let reason = format!("a record longer than {MAX_RECORD_LINES} lines");
            for line in std::mem::take(&mut self.pending) {
                sink.reject(line.number, line.offset, &reason, &line.raw);
            }
            sink.reject(number, offset, &reason, text);
        } else if self.in_record() {
            self.pending.push(PendingLine { number, offset, raw: text.to_string() });
        } else if !self.touched {
            // Structure and the host's description: no figure of a sample.
            sink.skipped(1);
        } else {
            match (&self.rejected, self.accepted) {
                (Some(why), 0) => {
                    let why = why.clone();
                    sink.reject(number, offset, &why, text);
                }
                _ => sink.parsed(1),
            }
        }
    }

    fn finish(&mut self, sink: &mut Sink) {
        for line in std::mem::take(&mut self.pending) {
            sink.reject(line.number, line.offset, "record cut short by the end of the file", &line.raw);
        }
        self.common.finish(sink);
    }
}

// ---------------------------------------------------------------------------------------------
// `sadf -j` as one document: a minified export, one line of any length

/// How far the document reader has read: shared by the reader and the seeds that walk the
/// document, so each record knows its line.
#[derive(Clone, Copy, Default)]
struct Position {
    bytes: u64,
    newlines: u64,
    /// Offset of the line being read.
    line_start: u64,
}

/// The input, counted. serde_json pulls one byte at a time (peeking one ahead), so when a
/// record's seed runs, the record's first byte has just been read.
struct Counted<R> {
    inner: R,
    at: Rc<Cell<Position>>,
}

impl<R: BufRead> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut at = self.at.get();
        for nl in memchr::memchr_iter(b'\n', &buf[..n]) {
            at.newlines += 1;
            at.line_start = at.bytes + nl as u64 + 1;
        }
        at.bytes += n as u64;
        self.at.set(at);
        Ok(n)
    }
}

/// What became of the records that start on one line.
#[derive(Debug, Default)]
struct Verdict {
    accepted: u64,
    rejected: Option<String>,
}

/// A `sadf -j` document read whole ([`read_document`]); its rows are written. As a
/// [`LineParser`] it then accounts for the file's lines: a line is parsed when a record that
/// starts on it was read, rejected when every record starting on it was, with the last
/// reason; the line of a syntax error is rejected with it and every line after it too.
/// Other lines (structure, and the inner lines of a pretty-printed record) are skipped.
pub struct Document {
    verdicts: BTreeMap<u64, Verdict>,
    /// The line of a syntax error (or read error), and the reason.
    broken: Option<(u64, String)>,
    /// Records read before it.
    pub records: u64,
}

impl Document {
    /// The syntax error that ended the reading, if any.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_ref().map(|(_, why)| why.as_str())
    }
}

impl LineParser for Document {
    fn line(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str) {
        if let Some((at, why)) = &self.broken {
            if number == *at {
                let why = why.clone();
                sink.reject(number, offset, &why, text);
                return;
            }
            if number > *at {
                sink.reject(number, offset, &format!("after the JSON syntax error at line {at}"), text);
                return;
            }
        }
        match self.verdicts.remove(&number) {
            Some(Verdict { accepted: 0, rejected: Some(why) }) => sink.reject(number, offset, &why, text),
            Some(_) => sink.parsed(1),
            None => sink.skipped(1),
        }
    }

    fn finish(&mut self, _sink: &mut Sink) {}

    fn whole_lines(&self) -> bool {
        true
    }
}

/// What the seeds walking the document share.
struct Walker<'s, 'k> {
    common: Common,
    nodename: Option<String>,
    sink: &'s mut Sink<'k>,
    at: Rc<Cell<Position>>,
    verdicts: BTreeMap<u64, Verdict>,
    records: u64,
}

impl Walker<'_, '_> {
    fn record(&mut self, kind: Place, value: &Value, line: (u64, u64)) {
        let result = json_record(&mut self.common, self.nodename.as_deref(), self.sink, kind, value, line, line);
        let verdict = self.verdicts.entry(line.0).or_default();
        match result {
            Ok(()) => {
                verdict.accepted += 1;
                self.records += 1;
            }
            Err(why) => verdict.rejected = Some(why),
        }
    }
}

/// Where a value sits in the document, as far as records go.
#[derive(Clone, Copy)]
enum Level {
    Root,
    Sysstat,
    Hosts,
    Host,
    Records(Place),
}

/// A seed and visitor for one level: walks containers of records, skips everything else
/// (whatever its type, as the line reader does).
struct Walk<'w, 's, 'k> {
    walker: &'w mut Walker<'s, 'k>,
    level: Level,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a sadf -j document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let next = match (self.level, key.as_str()) {
                (Level::Root, "sysstat") => Level::Sysstat,
                (Level::Sysstat, "hosts") => Level::Hosts,
                (Level::Host, "statistics") => Level::Records(Place::Statistics),
                (Level::Host, "restarts") => Level::Records(Place::Restart),
                (Level::Host, "nodename") => {
                    let name: Value = map.next_value()?;
                    self.walker.nodename = name.as_str().map(str::to_string);
                    continue;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            map.next_value_seed(Walk { walker: &mut *self.walker, level: next })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        match self.level {
            Level::Hosts => while seq.next_element_seed(Walk { walker: &mut *self.walker, level: Level::Host })?.is_some() {},
            Level::Records(kind) => while seq.next_element_seed(RecordSeed { walker: &mut *self.walker, kind })?.is_some() {},
            _ => while seq.next_element::<IgnoredAny>()?.is_some() {},
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// One entry of `statistics` or `restarts`: read as a value (one record in memory), then
/// turned into rows.
struct RecordSeed<'w, 's, 'k> {
    walker: &'w mut Walker<'s, 'k>,
    kind: Place,
}

impl<'de> DeserializeSeed<'de> for RecordSeed<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let at = self.walker.at.get();
        let line = (at.newlines + 1, at.line_start);
        let value = <Value as serde::Deserialize>::deserialize(deserializer)?;
        self.walker.record(self.kind, &value, line);
        Ok(())
    }
}

/// Reads a `sadf -j` document from `input` as a stream of records, writing each one's rows as
/// it completes: memory holds one record whatever the length of the lines. A syntax error
/// ends the reading; the records before it stay written, as in a document read line by line.
pub fn read_document(input: std::io::Result<Box<dyn BufRead>>, hints: &Hints, zone: Option<Tz>, sink: &mut Sink) -> Document {
    let input = match input {
        Ok(input) => input,
        Err(e) => return Document { verdicts: BTreeMap::new(), broken: Some((1, format!("cannot read: {e}"))), records: 0 },
    };
    let at = Rc::new(Cell::new(Position::default()));
    let mut walker = Walker { common: Common::new(hints, zone), nodename: None, sink, at: at.clone(), verdicts: BTreeMap::new(), records: 0 };
    let mut deserializer = serde_json::Deserializer::from_reader(Counted { inner: input, at: at.clone() });
    let result = Walk { walker: &mut walker, level: Level::Root }.deserialize(&mut deserializer).and_then(|()| deserializer.end());
    walker.common.finish(walker.sink);
    let broken = result.err().map(|e| {
        let read = at.get();
        // The line serde_json names, within the lines there are (it counts one past a last
        // newline at the end of the input).
        let lines = read.newlines + u64::from(read.bytes > read.line_start);
        let line = if e.line() == 0 { read.newlines + 1 } else { e.line() as u64 };
        (line.min(lines.max(1)), format!("JSON: {e}"))
    });
    Document { verdicts: walker.verdicts, broken, records: walker.records }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_in_utc_local_and_epoch() {
        assert_eq!(parse_stamp("2026-11-21 10:08:43 UTC"), Some((1_795_255_723_000, true)));
        assert_eq!(parse_stamp("2026-11-21 10:08:43"), Some((1_795_255_723_000, false)));
        assert_eq!(parse_stamp("1795255723"), Some((1_795_255_723_000, true)));
        assert_eq!(parse_stamp("2026-13-21 10:08:43 UTC"), None);
        assert_eq!(parse_stamp("2026-11-21 1:08:43 UTC"), None);
        assert_eq!(parse_stamp(""), None);
    }

    #[test]
    fn a_dh_header_splits_into_singles_and_repeated_groups() {
        let items = parse_header("CPU;%user;%idle[...];cswch/s;runq-sz;IFACE;rxpck/s;rxkB/s[...]").unwrap();
        assert_eq!(items.len(), 4);
        assert!(matches!(&items[0], Item::Group { activity, cpu: true, repeated: true, .. } if activity == "cpu-load"));
        assert!(matches!(&items[1], Item::Single { activity, .. } if activity == "process-and-context-switch"));
        assert!(matches!(&items[3], Item::Group { activity, cpu: false, repeated: true, .. } if activity == "net-dev"));
        // Three CPU instances (all, 0, 1), then two interfaces: sequence and names tell them.
        let mut names = Names::default();
        let mut columns = compile(&items, &mut names, None);
        let split = |columns: &mut [Column], names: &mut Names, row: &str| {
            let mut spans = Vec::new();
            split_fields(row, &mut spans);
            let mut out = Vec::new();
            split_row(columns, row, &spans, names, None, &mut out).map(|()| out)
        };
        let row = "-1;50.00;50.00;0;40.00;60.00;1;60.00;40.00;118.00;2;lo;1.00;0.50;eth0;2.00;1.50";
        let out = split(&mut columns, &mut names, row).unwrap();
        let name = |code: u32| (code != NO_DEVICE).then(|| names.name(code));
        let devices: Vec<_> = out.iter().map(|f| (names.name(f.activity), name(f.device), names.name(f.metric))).collect();
        assert_eq!(devices[0], ("cpu-load", Some("all"), "%user"));
        assert_eq!(devices[4], ("cpu-load", Some("1"), "%user"));
        assert_eq!(devices[6], ("process-and-context-switch", None, "cswch/s"));
        assert_eq!(devices[10], ("net-dev", Some("eth0"), "rxpck/s"));
        assert_eq!(out.len(), 12);
        // The 14 metrics take the all-CPU row's %user and the traffic of every interface but lo.
        let slots: Vec<_> = out.iter().map(|f| f.slot).collect();
        assert_eq!((slots[0], slots[2], slots[4]), (Slot::Set(USER as u8), Slot::None, Slot::None));
        assert_eq!((slots[9], slots[11]), (Slot::None, Slot::Add(RX as u8)));
        // The same row again finds its devices where they were; a short or bad one is refused.
        assert_eq!(split(&mut columns, &mut names, row).unwrap().len(), 12);
        assert_eq!(split(&mut columns, &mut names, "-1;50.00").unwrap_err(), "5 fields, fewer than the header names");
        let bad = split(&mut columns, &mut names, &row.replace("118.00", "x")).unwrap_err();
        assert_eq!(bad, "cswch/s: `x` is not a number");
    }

    #[test]
    fn numbers_read_as_str_parse_reads_them() {
        let mut cases: Vec<String> = [
            "0", "0.00", "-0.00", "1.", ".5", "-.5", "12.34", "99.99", "100.00", "33964.00", "0.1", "0.3", "1e5", "inf",
            "NaN", "+1.5", "", "-", ".", "1..2", "1.2.3", "12a", "123456789012345", "1234567890123456", "0.000000000000001",
            "99999999999999.9", "9007199254740993", "-123.456789", "00012.50",
        ]
        .map(String::from)
        .to_vec();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let decimals = (x % 7) as usize;
            let digits = 1 + (x >> 8) % 15;
            let mantissa = (x >> 12) % 10u64.pow(digits as u32);
            let text = format!("{mantissa:0width$}", width = decimals + 1);
            let (int, frac) = text.split_at(text.len() - decimals);
            let sign = if x & 1 == 1 { "-" } else { "" };
            cases.push(if decimals == 0 { format!("{sign}{int}") } else { format!("{sign}{int}.{frac}") });
        }
        for case in &cases {
            let want = case.parse::<f64>().ok();
            let got = parse_number(case);
            assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "{case}");
        }
    }

    #[test]
    fn waiting_samples_stay_in_time_order() {
        let mut w = Waiting { host: "h".into(), samples: Vec::new(), cursor: 0 };
        for ts in [10, 20, 30, 40] {
            w.sample(ts, ts as u64, 0, 1).put(Slot::Set(USER as u8), 1.0);
        }
        // The next group walks the same seconds from the start, one missing and one new.
        w.cursor = 0;
        for ts in [10, 20, 25, 40, 50] {
            w.sample(ts, 0, 0, 1).put(Slot::Set(CSWCH as u8), 2.0);
        }
        let got: Vec<_> = w.samples.iter().map(|s| (s.ts, s.line, s.values()[USER], s.values()[CSWCH])).collect();
        assert_eq!(
            got,
            [
                (10, 10, Some(1.0), Some(2.0)),
                (20, 20, Some(1.0), Some(2.0)),
                (25, 0, None, Some(2.0)),
                (30, 30, Some(1.0), None),
                (40, 40, Some(1.0), Some(2.0)),
                (50, 0, None, Some(2.0)),
            ]
        );
    }

    #[test]
    fn samples_sum_interfaces_and_rebuild_user_and_system() {
        let mut s = Sample::new(0, 0, 0, None);
        for (dev, rx) in [("lo", 100.0), ("eth0", 1.5), ("eth1", 2.0)] {
            s.feed("net-dev", Some(dev), "rxkB/s", rx, None);
        }
        s.feed("cpu-load", Some("all"), "%usr", 40.0, None);
        s.feed("cpu-load", Some("all"), "%guest", 2.0, None);
        s.feed("cpu-load", Some("0"), "%system", 99.0, None);
        let v = s.values();
        assert_eq!((v[RX], v[USER], v[SYSTEM]), (Some(3.5), Some(42.0), None));
        let mut only = Sample::new(0, 0, 0, None);
        only.feed("net-dev", Some("eth1"), "rxkB/s", 2.0, Some("eth1"));
        only.feed("net-dev", Some("eth0"), "rxkB/s", 1.5, Some("eth1"));
        assert_eq!(only.values()[RX], Some(2.0));
    }

    #[test]
    fn json_names_become_sar_names() {
        assert_eq!(sar_name("cpu-load", "user"), "%user");
        assert_eq!(sar_name("process-and-context-switch", "cswch"), "cswch/s");
        assert_eq!(sar_name("paging", "vmeff-percent"), "%vmeff");
        assert_eq!(sar_name("queue", "ldavg-1"), "ldavg-1");
        assert_eq!(sar_name("io", "bread"), "bread/s");
        assert_eq!(sar_name("io", "tps"), "tps");
        assert_eq!(sar_name("net-dev", "rxkB"), "rxkB/s");
        let record: Value = serde_json::from_str(
            r#"{"io": {"tps": 1.0, "io-reads": {"rtps": 0.5, "bread": 8.0}}, "network": {"net-dev": [{"iface": "lo", "rxkB": 1.0}]}}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        for (name, v) in record.as_object().unwrap() {
            activity_figures(name, v, &mut out);
        }
        let names: Vec<_> = out.iter().map(|(a, d, m, _)| format!("{a}/{}/{m}", d.as_deref().unwrap_or("-"))).collect();
        assert_eq!(names, ["io/-/bread/s", "io/-/rtps", "io/-/tps", "net-dev/lo/rxkB/s"]);
    }

    #[test]
    fn places_in_the_document() {
        let k = |s: &str| Seg::Key(s.into());
        let host = [k("sysstat"), k("hosts"), Seg::Index(0)];
        assert_eq!(place(&host), Place::Above);
        assert_eq!(place(&[host.to_vec(), vec![k("statistics"), Seg::Index(3)]].concat()), Place::Statistics);
        assert_eq!(place(&[host.to_vec(), vec![k("restarts"), Seg::Index(0)]].concat()), Place::Restart);
        assert_eq!(place(&[host.to_vec(), vec![k("nodename")]].concat()), Place::Nodename);
        assert_eq!(place(&[host.to_vec(), vec![k("release")]].concat()), Place::Elsewhere);
    }
}
