//! sysstat captures: `sadf -d` text (rows grouped by activity, each group under its own
//! `# hostname;interval;timestamp;…` header), `sadf -dh` text (one row per sample), `sadf -j`
//! JSON, and binary sa files, which the machine's `sadf` turns into `-dh` text first.
//!
//! Every figure becomes a `sar_metrics` row (host, ts, activity, device, metric, value), named
//! as sar prints it (`%user`, `cswch/s`, `rxkB/s`) whichever export it came from, and each
//! sample second becomes one `sadc` row: Ganesha's 14 metrics (`tables::SADC_METRICS`).
//! `LINUX-RESTART` records become `sadc` rows with `restart` set and no metrics.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use chrono_tz::Tz;
use serde_json::{Map, Value};

use super::discover::Hints;
use super::log4j::ZoneConverter;
use super::records::{LineParser, Sink};
use crate::warehouse::tables::{Table, date_of_ms};

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
#[derive(Clone, Copy)]
enum Part {
    Usr,
    Guest,
    Sys,
    Irq,
    Soft,
}

#[derive(Clone, Debug, Default)]
struct Sample {
    restart: bool,
    interval: Option<i64>,
    line: u64,
    offset: u64,
    metrics: [Option<f64>; 14],
    /// %usr, %guest, %sys, %irq, %soft, for exports of `-u ALL`.
    parts: [Option<f64>; 5],
}

impl Sample {
    fn new(line: u64, offset: u64, interval: Option<i64>) -> Sample {
        Sample { line, offset, interval, ..Sample::default() }
    }

    /// Takes what the 14 metrics need from one figure. Network traffic is summed over the
    /// interfaces other than loopback, or taken from the one `iface` names.
    fn feed(&mut self, activity: &str, device: Option<&str>, metric: &str, value: f64, iface: Option<&str>) {
        let set = |m: &mut [Option<f64>; 14], at: usize| m[at] = Some(value);
        match (activity, metric) {
            ("cpu-load", _) if device == Some("all") => match metric {
                "%user" => set(&mut self.metrics, USER),
                "%system" => set(&mut self.metrics, SYSTEM),
                "%iowait" => set(&mut self.metrics, IOWAIT),
                "%usr" => self.parts[Part::Usr as usize] = Some(value),
                "%guest" => self.parts[Part::Guest as usize] = Some(value),
                "%sys" => self.parts[Part::Sys as usize] = Some(value),
                "%irq" => self.parts[Part::Irq as usize] = Some(value),
                "%soft" => self.parts[Part::Soft as usize] = Some(value),
                _ => {}
            },
            ("process-and-context-switch", "cswch/s") => set(&mut self.metrics, CSWCH),
            ("queue", "runq-sz") => set(&mut self.metrics, RUNQ),
            ("queue", "plist-sz") => set(&mut self.metrics, PLIST),
            ("queue", "ldavg-1") => set(&mut self.metrics, LDAVG1),
            ("paging", "pgpgin/s") => set(&mut self.metrics, PGPGIN),
            ("paging", "pgpgout/s") => set(&mut self.metrics, PGPGOUT),
            ("paging", "fault/s") => set(&mut self.metrics, FAULT),
            ("io", "bread/s") => set(&mut self.metrics, BREAD),
            ("io", "bwrtn/s") => set(&mut self.metrics, BWRTN),
            ("net-dev", "rxkB/s" | "txkB/s") => {
                let counted = match (iface, device) {
                    (Some(wanted), Some(d)) => d == wanted,
                    (None, Some(d)) => d != "lo",
                    (_, None) => false,
                };
                if counted {
                    let at = if metric == "rxkB/s" { RX } else { TX };
                    self.metrics[at] = Some(self.metrics[at].unwrap_or(0.0) + value);
                }
            }
            _ => {}
        }
    }

    fn values(&self) -> [Option<f64>; 14] {
        let mut m = self.metrics;
        let part = |p: Part| self.parts[p as usize];
        let sum = |first: Part, rest: &[Part]| part(first).map(|v| v + rest.iter().filter_map(|p| part(*p)).sum::<f64>());
        m[USER] = m[USER].or_else(|| sum(Part::Usr, &[Part::Guest]));
        m[SYSTEM] = m[SYSTEM].or_else(|| sum(Part::Sys, &[Part::Irq, Part::Soft]));
        m
    }
}

/// What every sysstat reader shares: the command line's say, and how samples become rows.
struct Common {
    host: Option<String>,
    iface: Option<String>,
    zone: ZoneConverter,
    /// Restarts already written: `sadf -d` repeats them in each activity's group.
    restarts: HashSet<(String, i64)>,
}

impl Common {
    fn new(hints: &Hints, zone: Option<Tz>) -> Common {
        Common { host: hints.host.clone(), iface: hints.iface.clone(), zone: ZoneConverter::new(zone), restarts: HashSet::new() }
    }

    fn utc_ms(&mut self, (ms, utc): (i64, bool)) -> i64 {
        if utc { ms } else { self.zone.to_utc_ms(ms) }
    }

    fn metric_row(sink: &mut Sink, host: &str, ts: i64, offset: u64, figure: (&str, Option<&str>, &str, f64)) {
        let (activity, device, metric, value) = figure;
        if let Some(t) = sink.rows(Table::SarMetrics, date_of_ms(ts), offset) {
            t.rows.row().text(Some(host)).ms(Some(ts)).text(Some(activity)).text(device).text(Some(metric)).float(Some(value));
        }
    }

    fn sample_row(sink: &mut Sink, host: &str, ts: i64, sample: &Sample) {
        sink.report.events += 1;
        if let Some(t) = sink.rows(Table::Sadc, date_of_ms(ts), sample.offset) {
            let mut row = t.rows.row().text(Some(host)).ms(Some(ts)).bool(sample.restart).int(sample.interval);
            for value in sample.values() {
                row = row.float(value);
            }
            row.text(Some(t.file)).int(Some(sample.line as i64)).text(Some(t.ingest_id));
        }
    }

    /// A restart, written once however often the export repeats it.
    fn restart(&mut self, sink: &mut Sink, host: &str, ts: i64, line: u64, offset: u64) {
        if self.restarts.insert((host.to_string(), ts)) {
            let sample = Sample { restart: true, ..Sample::new(line, offset, None) };
            Common::sample_row(sink, host, ts, &sample);
        }
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

/// One figure of a row: activity, device, metric, value.
type Figure<'a> = (&'a str, Option<&'a str>, &'a str, f64);

fn number(field: &str, metric: &str) -> Result<f64, String> {
    field.parse::<f64>().map_err(|_| format!("{metric}: `{field}` is not a number"))
}

/// The CPU column's value as sar names it: `-1` is the all-CPU row.
fn cpu_name(field: &str) -> &str {
    if field == "-1" { "all" } else { field }
}

/// Splits a row's values (after the timestamp) along the header's items. A repeated group
/// takes one more instance while enough fields remain for the items after it and the next
/// field looks like an instance of it: the next CPU number, or a name that is not a number.
fn split_row<'a>(items: &'a [Item], fields: &[&'a str], out: &mut Vec<Figure<'a>>) -> Result<(), String> {
    let mut at = 0;
    for (k, item) in items.iter().enumerate() {
        let needed_after: usize = items[k + 1..].iter().map(Item::width).sum();
        match item {
            Item::Single { activity, metric } => {
                let field = fields.get(at).ok_or_else(|| format!("{} fields, fewer than the header names", fields.len() + 3))?;
                out.push((activity, None, metric, number(field, metric)?));
                at += 1;
            }
            Item::Group { activity, cpu, metrics, repeated } => {
                let width = 1 + metrics.len();
                let mut previous_cpu: Option<i64> = None;
                loop {
                    if fields.len() < at + width {
                        return Err(format!("{} fields, fewer than the header names", fields.len() + 3));
                    }
                    let instance = fields[at];
                    let device = if *cpu { cpu_name(instance) } else { instance };
                    for (metric, field) in metrics.iter().zip(&fields[at + 1..at + width]) {
                        out.push((activity, Some(device), metric, number(field, metric)?));
                    }
                    at += width;
                    previous_cpu = instance.parse().ok().or(previous_cpu);
                    let room = fields.len().saturating_sub(at) >= needed_after + width;
                    let next = fields.get(at).copied().unwrap_or("");
                    let looks_like_instance = if *cpu {
                        previous_cpu.is_some_and(|p| next.parse::<i64>().is_ok_and(|n| n == p + 1))
                    } else {
                        next.parse::<f64>().is_err()
                    };
                    if !(*repeated && room && looks_like_instance) {
                        break;
                    }
                }
            }
        }
    }
    if at != fields.len() {
        return Err(format!("{} fields where the header names {}", fields.len() + 3, at + 3));
    }
    Ok(())
}

/// Reads `sadf -d` and `-dh` text. A `-dh` header spans several activities, so each row is a
/// whole sample and is written at once; under `-d` headers a sample's figures are spread over
/// the file's groups, so samples wait, per host and second, for the end of the file.
pub struct TextParser {
    common: Common,
    header: Option<Vec<Item>>,
    grouped: Option<bool>,
    waiting: BTreeMap<String, BTreeMap<i64, Sample>>,
    last_stamp: (String, i64),
}

impl TextParser {
    pub fn new(hints: &Hints, zone: Option<Tz>) -> TextParser {
        TextParser {
            common: Common::new(hints, zone),
            header: None,
            grouped: None,
            waiting: BTreeMap::new(),
            last_stamp: (String::new(), 0),
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
                self.grouped.get_or_insert(!whole_samples);
                self.header = Some(items);
                sink.parsed(1);
            }
            Err(reason) => {
                self.header = None;
                sink.reject(number, offset, &reason, text);
            }
        }
    }

    fn row(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str) -> Result<(), String> {
        let TextParser { common, header, grouped, waiting, last_stamp } = self;
        let fields: Vec<&str> = text.split(';').collect();
        if fields.len() < 4 {
            return Err("fewer than 4 `;`-separated fields".into());
        }
        let interval: i64 = fields[1].parse().map_err(|_| format!("interval `{}` is not a number", fields[1]))?;
        // Rows of one sample second share their timestamp: it is parsed once.
        if last_stamp.0 != fields[2] {
            let stamp = parse_stamp(fields[2]).ok_or_else(|| format!("timestamp `{}` is not yyyy-MM-dd HH:mm:ss [UTC]", fields[2]))?;
            *last_stamp = (fields[2].to_string(), common.utc_ms(stamp));
        }
        let ts = last_stamp.1;
        let host = common.host.as_deref().unwrap_or(fields[0]);
        if interval < 0 {
            // Records that are not samples: a restart, or a comment (`COM …`).
            if fields[3].starts_with("LINUX-RESTART") {
                let host = host.to_string();
                common.restart(sink, &host, ts, number, offset);
                sink.parsed(1);
            } else {
                sink.skipped(1);
            }
            return Ok(());
        }
        let Some(items) = header.as_ref() else {
            return Err("sample before any `# hostname;interval;timestamp;…` header".into());
        };
        // Every figure is read before any row is written: a bad field rejects the whole line.
        let mut figures = Vec::with_capacity(fields.len());
        split_row(items, &fields[3..], &mut figures)?;
        let iface = common.iface.as_deref();
        let mut fresh = Sample::new(number, offset, Some(interval));
        let sample = if *grouped == Some(true) {
            if !waiting.contains_key(host) {
                waiting.insert(host.to_string(), BTreeMap::new());
            }
            match waiting.get_mut(host) {
                Some(samples) => samples.entry(ts).or_insert_with(|| Sample::new(number, offset, Some(interval))),
                None => &mut fresh,
            }
        } else {
            &mut fresh
        };
        for &(activity, device, metric, value) in &figures {
            sample.feed(activity, device, metric, value, iface);
            Common::metric_row(sink, host, ts, offset, (activity, device, metric, value));
        }
        if *grouped != Some(true) {
            Common::sample_row(sink, host, ts, &fresh);
        }
        sink.parsed(1);
        Ok(())
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
        for (host, samples) in std::mem::take(&mut self.waiting) {
            for (ts, sample) in samples {
                Common::sample_row(sink, &host, ts, &sample);
            }
        }
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
        let host = self
            .common
            .host
            .clone()
            .or_else(|| self.nodename.clone())
            .ok_or("record before the host's nodename")?;
        let (number, offset) = self.line;
        if kind == Place::Restart {
            let stamp = value.get("boot").and_then(json_stamp).ok_or("restart without a boot date and time")?;
            let ts = self.common.utc_ms(stamp);
            self.common.restart(sink, &host, ts, number, offset);
            return Ok(());
        }
        let stamp = value.get("timestamp").ok_or("statistics record without a timestamp")?;
        let ts = json_stamp(stamp).ok_or("statistics record whose timestamp has no date and time")?;
        let ts = self.common.utc_ms(ts);
        let interval = stamp.get("interval").and_then(Value::as_i64);
        let mut figures = Vec::new();
        if let Value::Object(activities) = value {
            for (name, v) in activities.iter().filter(|(k, _)| *k != "timestamp") {
                activity_figures(name, v, &mut figures);
            }
        }
        let first_line = self.pending.first().map_or((number, offset), |p| (p.number, p.offset));
        let mut sample = Sample::new(first_line.0, first_line.1, interval);
        for (activity, device, metric, v) in &figures {
            sample.feed(activity, device.as_deref(), metric, *v, self.common.iface.as_deref());
            Common::metric_row(sink, &host, ts, first_line.1, (activity, device.as_deref(), metric, *v));
        }
        Common::sample_row(sink, &host, ts, &sample);
        Ok(())
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
    }
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
        let row = "-1;50.00;50.00;0;40.00;60.00;1;60.00;40.00;118.00;2;lo;1.00;0.50;eth0;2.00;1.50";
        let fields: Vec<&str> = row.split(';').collect();
        let mut out = Vec::new();
        split_row(&items, &fields, &mut out).unwrap();
        let devices: Vec<_> = out.iter().map(|f| (f.0, f.1, f.2)).collect();
        assert_eq!(devices[0], ("cpu-load", Some("all"), "%user"));
        assert_eq!(devices[4], ("cpu-load", Some("1"), "%user"));
        assert_eq!(devices[6], ("process-and-context-switch", None, "cswch/s"));
        assert_eq!(devices[10], ("net-dev", Some("eth0"), "rxpck/s"));
        assert_eq!(out.len(), 12);
        let short: Vec<&str> = "-1;50.00".split(';').collect();
        assert!(split_row(&items, &short, &mut Vec::new()).is_err());
    }

    #[test]
    fn samples_sum_interfaces_and_rebuild_user_and_system() {
        let mut s = Sample::default();
        for (dev, rx) in [("lo", 100.0), ("eth0", 1.5), ("eth1", 2.0)] {
            s.feed("net-dev", Some(dev), "rxkB/s", rx, None);
        }
        s.feed("cpu-load", Some("all"), "%usr", 40.0, None);
        s.feed("cpu-load", Some("all"), "%guest", 2.0, None);
        s.feed("cpu-load", Some("0"), "%system", 99.0, None);
        let v = s.values();
        assert_eq!((v[RX], v[USER], v[SYSTEM]), (Some(3.5), Some(42.0), None));
        let mut only = Sample::default();
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
