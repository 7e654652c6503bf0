//! `sadf -j` JSON: pretty-printed, line by line; minified, as one document of any length.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::rc::Rc;

use chrono_tz::Tz;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{Common, Sample, parse_stamp};
use crate::ingest::discover::Hints;
use crate::ingest::records::{LineParser, Sink};

/// A figure's name in `sadf -j` as sar prints it, so that `sar_records` reads the same from
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
/// its first text field in key order (`"cpu": "all"`, `"iface": "eth0"`); an object of figures may nest
/// (`"io-reads": {…}`); an object of activities (`"network"`) holds several.
fn activity_figures(name: &str, value: &Value, out: &mut Vec<(String, Option<String>, String, f64)>) {
    match value {
        Value::Array(instances) => {
            for instance in instances {
                let Value::Object(fields) = instance else { continue };
                let device = by_key(fields).into_iter().find_map(|(_, v)| v.as_str()).map(str::to_string);
                numbers(name, device.as_deref(), fields, out);
            }
        }
        Value::Object(fields) if fields.values().all(|v| v.is_array() || v.is_object()) => {
            for (inner, v) in by_key(fields) {
                activity_figures(inner, v, out);
            }
        }
        Value::Object(fields) => numbers(name, None, fields, out),
        _ => {}
    }
}

fn numbers(
    activity: &str,
    device: Option<&str>,
    fields: &Map<String, Value>,
    out: &mut Vec<(String, Option<String>, String, f64)>,
) {
    for (name, v) in by_key(fields) {
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

/// An object's entries in key order, whatever serde_json's features (a dependency turns on
/// `preserve_order`): a record's figures and an instance's device must not depend on the build.
fn by_key(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    entries
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
    let host =
        common.host.clone().or_else(|| nodename.map(str::to_string)).ok_or("record before the host's nodename")?;
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
        for (name, v) in by_key(activities).into_iter().filter(|(k, _)| *k != "timestamp") {
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
    /// Line of a syntax error: the document's structure is lost after it, up to the next
    /// record where the error was inside a list of records.
    broken_at: Option<u64>,
    /// After a syntax error in a list of records: the frames that lead to that list, kept
    /// while the lines up to the next record's opening `{` are rejected.
    resume_with: Option<usize>,
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
            resume_with: None,
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

    /// How many frames lead to the innermost open list of records (`statistics` or
    /// `restarts`), if one is open.
    fn frames_to_records(&self) -> Option<usize> {
        let mut path = Vec::new();
        let mut found = None;
        for (depth, frame) in self.frames.iter().enumerate() {
            path.extend(frame.seg.clone());
            path.push(Seg::Index(0));
            if frame.array && matches!(place(&path), Place::Statistics | Place::Restart) {
                found = Some(depth + 1);
            }
            path.pop();
        }
        found
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
        let (first, rest): (Vec<_>, Vec<_>) =
            children.into_iter().partition(|(s, _)| matches!(s, Seg::Key(k) if k == "nodename"));
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
            // sadf opens each record with a `{` on a line of its own: reading resumes there.
            match self.resume_with {
                Some(depth) if text.trim() == "{" => {
                    self.frames.truncate(depth);
                    (self.broken_at, self.resume_with) = (None, None);
                }
                _ => {
                    sink.reject(number, offset, &format!("after the JSON syntax error at line {at}"), text);
                    return;
                }
            }
        }
        (self.accepted, self.rejected, self.touched, self.line) = (0, None, false, (number, offset));
        if let Err(e) = self.tokens(sink, text) {
            self.broken_at = Some(number);
            self.resume_with = self.frames_to_records();
            let reason = format!("JSON: {e}");
            for line in std::mem::take(&mut self.pending) {
                sink.reject(
                    line.number,
                    line.offset,
                    &format!("record broken by the JSON syntax error at line {number}"),
                    &line.raw,
                );
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

impl Position {
    /// Past `bytes` just read.
    fn advance(&mut self, bytes: &[u8]) {
        for nl in memchr::memchr_iter(b'\n', bytes) {
            self.newlines += 1;
            self.line_start = self.bytes + nl as u64 + 1;
        }
        self.bytes += bytes.len() as u64;
    }
}

/// The input, counted. serde_json pulls one byte at a time (peeking one ahead), so when a
/// record's seed runs, the record's first byte has just been read.
struct Counted<R> {
    inner: R,
    at: Rc<Cell<Position>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut at = self.at.get();
        at.advance(&buf[..n]);
        self.at.set(at);
        Ok(n)
    }
}

/// The input of a document, shared by the reader of the whole and, after a syntax error, the
/// readers of the records that follow it.
#[derive(Clone)]
struct Shared(Rc<RefCell<Box<dyn BufRead>>>);

impl Read for Shared {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().read(buf)
    }
}

/// Where every record of a minified export opens.
const RECORD_OPENS: &[u8] = b"{\"timestamp\"";

impl Shared {
    /// Reads on to just past the next [`RECORD_OPENS`], counting what it passes; false at the
    /// end of the input.
    fn skip_past_record_start(&self, at: &Cell<Position>) -> std::io::Result<bool> {
        let mut input = self.0.borrow_mut();
        let mut matched = 0;
        loop {
            let buf = input.fill_buf()?;
            if buf.is_empty() {
                return Ok(false);
            }
            let mut used = 0;
            let mut found = false;
            for &byte in buf {
                used += 1;
                matched = if byte == RECORD_OPENS[matched] { matched + 1 } else { usize::from(byte == b'{') };
                if matched == RECORD_OPENS.len() {
                    found = true;
                    break;
                }
            }
            let mut read = at.get();
            read.advance(&buf[..used]);
            at.set(read);
            input.consume(used);
            if found {
                return Ok(true);
            }
        }
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
/// reason; the line of the first syntax error is rejected with it, and every line after it
/// on which no record was read again.
/// Other lines (structure, and the inner lines of a pretty-printed record) are skipped.
pub struct Document {
    verdicts: BTreeMap<u64, Verdict>,
    /// The line of the first syntax error (or read error), and the reason.
    broken: Option<(u64, String)>,
    /// Records read before it.
    pub records: u64,
    /// Records read after it, each from the next `{"timestamp"` on.
    pub resumed: u64,
}

impl Document {
    /// The first syntax error, if any.
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
            if number > *at && self.verdicts.get(&number).is_none_or(|v| v.accepted == 0) {
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
            Level::Hosts => {
                while seq.next_element_seed(Walk { walker: &mut *self.walker, level: Level::Host })?.is_some() {}
            }
            Level::Records(kind) => {
                while seq.next_element_seed(RecordSeed { walker: &mut *self.walker, kind })?.is_some() {}
            }
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
pub fn read_document(
    input: std::io::Result<Box<dyn BufRead>>,
    hints: &Hints,
    zone: Option<Tz>,
    sink: &mut Sink,
) -> Document {
    let input = match input {
        Ok(input) => Shared(Rc::new(RefCell::new(input))),
        Err(e) => {
            let broken = Some((1, format!("cannot read: {e}")));
            return Document { verdicts: BTreeMap::new(), broken, records: 0, resumed: 0 };
        }
    };
    let at = Rc::new(Cell::new(Position::default()));
    let mut walker = Walker {
        common: Common::new(hints, zone),
        nodename: None,
        sink,
        at: at.clone(),
        verdicts: BTreeMap::new(),
        records: 0,
    };
    let mut deserializer = serde_json::Deserializer::from_reader(Counted { inner: input.clone(), at: at.clone() });
    let result = Walk { walker: &mut walker, level: Level::Root }
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end());
    let broken = result.err().map(|e| {
        let read = at.get();
        // The line serde_json names, within the lines there are (it counts one past a last
        // newline at the end of the input).
        let lines = read.newlines + u64::from(read.bytes > read.line_start);
        let line = if e.line() == 0 { read.newlines + 1 } else { e.line() as u64 };
        ((line.min(lines.max(1)), format!("JSON: {e}")), e.is_eof())
    });
    let records = walker.records;
    // A damaged character loses the document's structure, not the records after it: each is
    // read on its own from its opening `{"timestamp"` (a record damaged in turn is rejected).
    if let Some((_, false)) = broken {
        while let Ok(true) = input.skip_past_record_start(&at) {
            let opened = std::io::Cursor::new(RECORD_OPENS).chain(Counted { inner: input.clone(), at: at.clone() });
            let mut deserializer = serde_json::Deserializer::from_reader(opened);
            let seed = RecordSeed { walker: &mut walker, kind: Place::Statistics };
            if let Err(e) = seed.deserialize(&mut deserializer) {
                let line = at.get().newlines + 1;
                walker.verdicts.entry(line).or_default().rejected = Some(format!("JSON: {e}"));
            }
        }
    }
    walker.common.finish(walker.sink);
    let resumed = walker.records - records;
    Document { verdicts: walker.verdicts, broken: broken.map(|(at, _)| at), records, resumed }
}

#[cfg(test)]
mod tests {
    use super::*;

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
