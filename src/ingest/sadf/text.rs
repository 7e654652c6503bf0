//! `sadf -d` and `sadf -dh` text.

use std::collections::{HashMap, HashSet};

use chrono_tz::Tz;

use super::{Common, Instances, NO_DEVICE, Names, Sample, Slot, parse_stamp, slot_of, takes};
use crate::ingest::discover::Hints;
use crate::ingest::records::{LineParser, Sink};
use crate::warehouse::tables::{Table, date_of_ms};

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
    Single {
        activity: String,
        metric: String,
    },
    /// An instance column and its figures; `repeated` (`-dh`, marked `[...]`) when a row holds
    /// one such group per instance.
    Group {
        activity: String,
        cpu: bool,
        metrics: Vec<String>,
        repeated: bool,
    },
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

/// Seconds from `before` to `after` when both are `yyyy-MM-dd HH:mm:ss…` stamps of one minute
/// with the same ending: the seconds' digits are all that differ.
fn same_minute_step(before: &str, after: &str) -> Option<i64> {
    let (b, a) = (before.as_bytes(), after.as_bytes());
    let seconds = |s: &[u8]| match s.get(17..19)? {
        &[tens @ b'0'..=b'5', ones @ b'0'..=b'9'] => Some(i64::from((tens - b'0') * 10 + (ones - b'0'))),
        _ => None,
    };
    let shaped = a.len() == b.len() && a.len() >= 19 && a[16] == b':' && a[13] == b':' && a[10] == b' ';
    (shaped && a[..17] == b[..17] && a[19..] == b[19..]).then_some(())?;
    Some(seconds(a)? - seconds(b)?)
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
    fn find(
        &mut self,
        field: &str,
        cpu: bool,
        instances: Instances,
        iface: Option<&str>,
        names: &mut Names,
    ) -> (u32, bool) {
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

/// A header's item compiled for rows: text coded for `sar_records`, slots for the 14 metrics.
enum Column {
    Single {
        activity: u32,
        metric: u32,
        slot: Slot,
    },
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
                let whole_samples =
                    activities.len() > 1 || items.iter().any(|i| matches!(i, Item::Group { repeated: true, .. }));
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
        let mut cuts = memchr::memchr_iter(b';', text.as_bytes());
        let (Some(a), Some(b), Some(c)) = (cuts.next(), cuts.next(), cuts.next()) else {
            return Err("fewer than 4 `;`-separated fields".into());
        };
        // `;` is ASCII: every cut is a character boundary.
        let (host_field, interval_field, stamp_field, rest) =
            (&text[..a], &text[a + 1..b], &text[b + 1..c], &text[c + 1..]);
        let interval: i64 =
            interval_field.parse().map_err(|_| format!("interval `{interval_field}` is not a number"))?;
        // Rows of one sample second share their timestamp: it is parsed once; and a `-d`
        // group's rows step through the seconds of one minute, which need no calendar.
        if last_stamp.0 != stamp_field {
            last_stamp.1 = match same_minute_step(&last_stamp.0, stamp_field) {
                Some(step_s) => last_stamp.1 + step_s * 1000,
                None => {
                    let stamp = parse_stamp(stamp_field)
                        .ok_or_else(|| format!("timestamp `{stamp_field}` is not yyyy-MM-dd HH:mm:ss [UTC]"))?;
                    common.utc_ms(stamp)
                }
            };
            last_stamp.0.clear();
            last_stamp.0.push_str(stamp_field);
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
        if sink.wants(Table::SarRecords, offset) {
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

    /// A resumed export's rows are read under the header before them.
    fn replay(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str) {
        if text.starts_with('#') {
            self.header(sink, number, offset, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::sadf::{CSWCH, RX, USER};

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
        let devices: Vec<_> =
            out.iter().map(|f| (names.name(f.activity), name(f.device), names.name(f.metric))).collect();
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
    fn stamps_of_one_minute_step_by_their_seconds() {
        let at = "2026-11-21 10:08:43 UTC";
        assert_eq!(same_minute_step(at, "2026-11-21 10:08:59 UTC"), Some(16));
        assert_eq!(same_minute_step(at, "2026-11-21 10:08:07 UTC"), Some(-36));
        assert_eq!(same_minute_step("2026-11-21 10:08:43", "2026-11-21 10:08:44"), Some(1));
        // Another minute, another ending, a leap second, epoch seconds: parsed in full.
        assert_eq!(same_minute_step(at, "2026-11-21 10:09:00 UTC"), None);
        assert_eq!(same_minute_step(at, "2026-11-21 10:08:44"), None);
        assert_eq!(same_minute_step(at, "2026-11-21 10:08:60 UTC"), None);
        assert_eq!(same_minute_step("1795255723", "1795255724"), None);
        assert_eq!(same_minute_step("", at), None);
    }

    #[test]
    fn numbers_read_as_str_parse_reads_them() {
        let mut cases: Vec<String> = [
            "0",
            "0.00",
            "-0.00",
            "1.",
            ".5",
            "-.5",
            "12.34",
            "99.99",
            "100.00",
            "33964.00",
            "0.1",
            "0.3",
            "1e5",
            "inf",
            "NaN",
            "+1.5",
            "",
            "-",
            ".",
            "1..2",
            "1.2.3",
            "12a",
            "123456789012345",
            "1234567890123456",
            "0.000000000000001",
            "99999999999999.9",
            "9007199254740993",
            "-123.456789",
            "00012.50",
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
}
