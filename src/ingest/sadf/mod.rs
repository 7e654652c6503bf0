//! sysstat captures: `sadf -d` text (rows grouped by activity, each group under its own
//! `# hostname;interval;timestamp;…` header), `sadf -dh` text (one row per sample), `sadf -j`
//! JSON, and binary sa files, which the machine's `sadf` turns into `-dh` text first.
//!
//! Every figure goes to `sar_records`, named as sar prints it (`%user`, `cswch/s`, `rxkB/s`)
//! whichever export it came from: one row per activity, device and second, holding its metric
//! names and figures, read one row per figure through the view `sar_metrics`. Each sample
//! second becomes one `sadc` row: Ganesha's 14 metrics (`tables::SADC_METRICS`).
//! `LINUX-RESTART` records become `sadc` rows with `restart` set and no metrics.
//!
//! Speed and memory. A figure costs no allocation: a text header is compiled once into codes
//! (each name of `sar_records`' text columns coded once per file, [`Names`]) and into the slot
//! of the 14 metrics each column feeds, so a row is split, its numbers parsed, and its
//! figures appended as integers and floats; `sar_records` batches are built column by column
//! ([`SarRows`]). Under `-d` headers a sample's figures are spread over the groups of one
//! export, so its 14 metrics wait, compactly ([`Sample`], about 190 bytes), until the export
//! ends: at the file's end, or where a header seen already in this export opens the next one
//! (sadf repeats the headers after a restart, and concatenated exports repeat them too).
//! Memory is therefore bounded by one export — a day of one-second samples is ~16 MB — not by
//! the file. A minified `sadf -j` document, one line of any length, is read as a stream of
//! records ([`read_document`]); pretty-printed ones line by line ([`JsonParser`]).

mod convert;
mod json;
mod text;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use chrono_tz::Tz;
use datafusion::arrow::array::{ArrayRef, Float64Array, ListArray, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::DataType;

use super::discover::Hints;
use super::log4j::ZoneConverter;
use super::records::Sink;
use crate::warehouse::tables::{METRIC_NAME_SEPARATOR, Rows, Table, date_of_ms, list_element};

pub use convert::{Converted, convert};
pub use json::{JsonParser, read_document};
pub use text::TextParser;

/// The activities asked of `sadf` for a binary file: those of the 14 metrics (CPU, task
/// switching, queue and load, network devices, paging, I/O), as in the project's text samples.
/// Not `-A`: `-dh` puts a sample's activities on one line, where several groups of instances
/// (CPUs, disks, interrupts) cannot be told apart (with sysstat 12, every sample is rejected);
/// and `-d`, which would tell them apart, lists a grown file's new samples inside its text, not
/// after it, where a resumed read could not find them.
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
// `sar_records` rows, built column by column

/// Figures of a `sar_records` batch: its fixed costs vanish, and it stays a few MB.
const SAR_BATCH_FIGURES: usize = 128 * 1024;

/// The code of a missing device: a figure of the whole system.
const NO_DEVICE: u32 = u32::MAX;

/// The values of `sar_records`' text columns (host, activity, device, metric), each coded once
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
}

/// A text column of the values `codes` name in `list`; [`NO_DEVICE`] is null.
fn text_column(list: &[String], codes: &[u32]) -> ArrayRef {
    let text = |c: u32| list.get(c as usize).map_or(&b""[..], |s| s.as_bytes());
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

/// The metric names of a record, in order, joined into `sar_records.metric_names`: each list
/// met (a header's group, a JSON activity) coded once per file.
#[derive(Default)]
struct NameLists {
    joined: Vec<String>,
    index: HashMap<Vec<u32>, u32>,
    /// By activity code, the list its last record had: records of an activity nearly always
    /// repeat it, and a comparison costs less than hashing.
    last_of_activity: Vec<Option<(Vec<u32>, u32)>>,
}

impl NameLists {
    fn code(&mut self, activity: u32, metrics: &[u32], names: &Names) -> u32 {
        let at = activity as usize;
        if let Some(Some((last, code))) = self.last_of_activity.get(at)
            && last.as_slice() == metrics
        {
            return *code;
        }
        let code = self.code_by_hash(metrics, names);
        if self.last_of_activity.len() <= at {
            self.last_of_activity.resize(at + 1, None);
        }
        self.last_of_activity[at] = Some((metrics.to_vec(), code));
        code
    }

    fn code_by_hash(&mut self, metrics: &[u32], names: &Names) -> u32 {
        if let Some(&code) = self.index.get(metrics) {
            return code;
        }
        let separator = METRIC_NAME_SEPARATOR.to_string();
        // A separator inside a name (possible only in a JSON key) would split it in the view.
        let joined = metrics.iter().map(|&m| names.name(m).replace(METRIC_NAME_SEPARATOR, ",")).collect::<Vec<_>>();
        let code = self.joined.len() as u32;
        self.joined.push(joined.join(&separator));
        self.index.insert(metrics.to_vec(), code);
        code
    }
}

/// `sar_records` rows of one date being gathered and turned into Arrow arrays in one go when
/// the batch is full, the date changes or the file ends. Figures arrive one by one; those of
/// one host, second, activity and device in a row make one record.
#[derive(Default)]
struct SarRows {
    names: Names,
    name_lists: NameLists,
    date: i32,
    host: Vec<u32>,
    ts_us: Vec<i64>,
    activity: Vec<u32>,
    device: Vec<u32>,
    metric_names: Vec<u32>,
    /// Where each record's figures end in `values`.
    ends: Vec<i32>,
    values: Vec<f64>,
    /// The record being gathered: its host, time, activity and device, and its metrics' codes.
    open: Option<(u32, i64, u32, u32)>,
    open_metrics: Vec<u32>,
}

impl SarRows {
    /// Ready for figures of partition `date`: a batch of another date, or a full one, goes first.
    fn open(&mut self, sink: &mut Sink, date: i32) {
        if !self.values.is_empty() && (self.date != date || self.values.len() >= SAR_BATCH_FIGURES) {
            self.flush(sink);
        }
        if self.values.capacity() == 0 {
            // Batches are handed over whole: each new one is sized once, not grown.
            self.values.reserve(SAR_BATCH_FIGURES + 1024);
            self.ts_us.reserve(SAR_BATCH_FIGURES / 4);
        }
        self.date = date;
    }

    #[inline]
    fn push(&mut self, host: u32, ts_us: i64, activity: u32, device: u32, metric: u32, value: f64) {
        let record = (host, ts_us, activity, device);
        if self.open != Some(record) {
            self.close_record();
            self.open = Some(record);
        }
        self.open_metrics.push(metric);
        self.values.push(value);
    }

    fn close_record(&mut self) {
        let Some((host, ts_us, activity, device)) = self.open.take() else { return };
        self.host.push(host);
        self.ts_us.push(ts_us);
        self.activity.push(activity);
        self.device.push(device);
        self.metric_names.push(self.name_lists.code(activity, &self.open_metrics, &self.names));
        self.ends.push(self.values.len() as i32);
        self.open_metrics.clear();
    }

    fn flush(&mut self, sink: &mut Sink) {
        self.close_record();
        if self.values.is_empty() {
            return;
        }
        let ts = TimestampMicrosecondArray::new(ScalarBuffer::from(std::mem::take(&mut self.ts_us)), None)
            .with_timezone("UTC");
        let mut offsets = Vec::with_capacity(self.ends.len() + 1);
        offsets.push(0);
        offsets.append(&mut self.ends);
        let values = Float64Array::new(ScalarBuffer::from(std::mem::take(&mut self.values)), None);
        let element = Arc::new(list_element(DataType::Float64));
        let lists = ListArray::new(element, OffsetBuffer::new(ScalarBuffer::from(offsets)), Arc::new(values), None);
        let arrays: Vec<ArrayRef> = vec![
            text_column(&self.names.list, &self.host),
            Arc::new(ts),
            text_column(&self.names.list, &self.activity),
            text_column(&self.names.list, &self.device),
            text_column(&self.name_lists.joined, &self.metric_names),
            Arc::new(lists),
        ];
        for codes in [&mut self.host, &mut self.activity, &mut self.device, &mut self.metric_names] {
            codes.clear();
        }
        sink.emit_rows(Rows::from_arrays(Table::SarRecords, self.date, arrays));
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
        let sum = |first: usize, rest: &[usize]| {
            self.get(first).map(|v| v + rest.iter().filter_map(|p| self.get(*p)).sum::<f64>())
        };
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

    /// One figure given by name for `sar_records` (the JSON route; text rows come coded).
    fn figure(&mut self, sink: &mut Sink, host: &str, ts: i64, offset: u64, figure: (&str, Option<&str>, &str, f64)) {
        if !sink.wants(Table::SarRecords, offset) {
            return;
        }
        let (activity, device, metric, value) = figure;
        let sar = &mut self.sar;
        sar.open(sink, date_of_ms(ts));
        let names = &mut sar.names;
        let codes =
            (names.code(host), names.code(activity), device.map_or(NO_DEVICE, |d| names.code(d)), names.code(metric));
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

    /// The file's end: the last `sar_records` rows go.
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
}
