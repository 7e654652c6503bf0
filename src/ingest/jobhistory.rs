//! Hadoop job history → `jobs`, `attempts`, and `states` (Map and Reduce attempts, daemon
//! `history`), so that history alone supports the Kahuna study (maps per node per second,
//! successful versus failed jobs).
//!
//! Two generations: the text history of Hadoop 0.18–1.x (`Job JOBID="…" …`, `Task`,
//! `MapAttempt`, `ReduceAttempt`; from 0.20 `Meta VERSION="1"` and a ` .` after each record;
//! values escape `"`, `=` and `.` with `\` and may run over several lines), also as Rumen
//! concatenates it (`!!FILE=<name>!!` before each file, job configurations between them); and
//! Hadoop 2/3 `.jhist` (Avro-JSON: `Avro-Json`, the schema, then one event a line).
//!
//! A job's records are spread over its file, so jobs and attempts are merged by id and written
//! when the file (or a `!!FILE` part) ends.

use indexmap::IndexMap;
use serde_json::Value;

use super::ids::job_of_attempt;
use super::records::{LineParser, Sink};
use crate::warehouse::tables::{Table, date_of_ms};

/// The first line of a text history, or of Rumen's concatenation of them.
pub fn is_text_history(first: &str) -> bool {
    file_marker(first).is_some()
        || ["Meta VERSION=", "Job JOBID=", "Task TASKID=", "MapAttempt ", "ReduceAttempt "]
            .iter()
            .any(|p| first.starts_with(p))
}

/// Rumen's `\f!!FILE=<name>!!` line (the form feed is optional here) → the file's name.
fn file_marker(line: &str) -> Option<&str> {
    line.trim_start_matches('\u{c}').strip_prefix("!!FILE=")?.trim_end().strip_suffix("!!")
}

#[derive(Debug, Default)]
struct Job {
    user: Option<String>,
    name: Option<String>,
    queue: Option<String>,
    submit: Option<i64>,
    launch: Option<i64>,
    finish: Option<i64>,
    outcome: Option<&'static str>,
    /// Total, finished and failed maps, then reduces.
    counts: [Option<i64>; 6],
    line: u64,
    offset: u64,
}

const TOTAL_MAPS: usize = 0;
const TOTAL_REDUCES: usize = 1;
const FINISHED_MAPS: usize = 2;
const FINISHED_REDUCES: usize = 3;
const FAILED_MAPS: usize = 4;
const FAILED_REDUCES: usize = 5;

#[derive(Debug, Default)]
struct Attempt {
    task_id: Option<String>,
    kind: Option<String>,
    host: Option<String>,
    rack: Option<String>,
    /// The TaskTracker's host from the start record, where the end names none.
    tracker_host: Option<String>,
    start: Option<i64>,
    finish: Option<i64>,
    shuffle: Option<i64>,
    sort: Option<i64>,
    status: Option<&'static str>,
    error: Option<String>,
    line: u64,
    offset: u64,
    last_line: u64,
}

/// SUCCESS (text) and SUCCEEDED (jhist) are one outcome; PREP, RUNNING and the like are none.
fn outcome(status: &str) -> Option<&'static str> {
    match status {
        "SUCCESS" | "SUCCEEDED" => Some("SUCCEEDED"),
        "FAILED" | "ERROR" => Some("FAILED"),
        "KILLED" => Some("KILLED"),
        _ => None,
    }
}

/// A time in milliseconds; history writes 0 for a time it does not know.
fn millis(text: &str) -> Option<i64> {
    text.trim().parse::<i64>().ok().filter(|ms| *ms > 0)
}

/// `/default-rack/node7` → (`node7`, `/default-rack`); a bare host has no rack.
fn host_and_rack(hostname: &str) -> (Option<String>, Option<String>) {
    let hostname = hostname.trim();
    match hostname.rfind('/') {
        Some(at) => {
            let host = &hostname[at + 1..];
            let rack = &hostname[..at];
            ((!host.is_empty()).then(|| host.to_string()), (!rack.is_empty()).then(|| rack.to_string()))
        }
        None => ((!hostname.is_empty()).then(|| hostname.to_string()), None),
    }
}

/// `tracker_node7:localhost/127.0.0.1:50060` → `node7`.
fn tracker_host(tracker: &str) -> Option<String> {
    let name = tracker.strip_prefix("tracker_").unwrap_or(tracker);
    let host = name.split(':').next().unwrap_or(name);
    (!host.is_empty()).then(|| host.to_string())
}

/// The jobs and attempts of one history file, in the order they first appear.
#[derive(Default)]
struct History {
    jobs: IndexMap<String, Job>,
    attempts: IndexMap<String, Attempt>,
}

impl History {
    fn job(&mut self, id: &str, line: u64, offset: u64) -> &mut Job {
        self.jobs.entry(id.to_string()).or_insert_with(|| Job { line, offset, ..Job::default() })
    }

    fn attempt(&mut self, id: &str, line: u64, offset: u64) -> &mut Attempt {
        let attempt =
            self.attempts.entry(id.to_string()).or_insert_with(|| Attempt { line, offset, ..Attempt::default() });
        attempt.last_line = line;
        attempt
    }

    /// Writes every job, attempt and task state, and starts afresh.
    fn flush(&mut self, sink: &mut Sink) {
        for (id, job) in std::mem::take(&mut self.jobs) {
            let when = job.submit.or(job.launch).or(job.finish).unwrap_or(0);
            if let Some(t) = sink.rows(Table::Jobs, date_of_ms(when), job.offset) {
                let mut row = t
                    .rows
                    .row()
                    .text(Some(&id))
                    .text(job.user.as_deref())
                    .text(job.name.as_deref())
                    .text(job.queue.as_deref())
                    .ms(job.submit)
                    .ms(job.launch)
                    .ms(job.finish)
                    .text(job.outcome);
                for count in job.counts {
                    row = row.int(count);
                }
                row.text(Some(t.file)).int(Some(job.line as i64)).text(Some(t.ingest_id));
            }
        }
        for (id, a) in std::mem::take(&mut self.attempts) {
            let job = job_of_attempt(&id);
            let host = a.host.clone().or_else(|| a.tracker_host.clone());
            let when = a.start.or(a.finish).unwrap_or(0);
            if let Some(t) = sink.rows(Table::Attempts, date_of_ms(when), a.offset) {
                t.rows
                    .row()
                    .text(job.as_deref())
                    .text(a.task_id.as_deref())
                    .text(Some(&id))
                    .text(a.kind.as_deref())
                    .text(host.as_deref())
                    .text(a.rack.as_deref())
                    .ms(a.start)
                    .ms(a.finish)
                    .ms(a.shuffle)
                    .ms(a.sort)
                    .text(a.status)
                    .text(a.error.as_deref())
                    .text(Some(t.file))
                    .int(Some(a.line as i64))
                    .text(Some(t.ingest_id));
            }
            // Setup and cleanup attempts run in task slots too, but are not SALSA's Map and
            // Reduce states.
            let state = match a.kind.as_deref() {
                Some("MAP") => "Map",
                Some("REDUCE") => "Reduce",
                _ => continue,
            };
            sink.report.states += 1;
            sink.report.unterminated += u64::from(a.finish.is_none());
            *sink.report.states_by_kind.entry(state).or_default() += 1;
            let duration = a.start.zip(a.finish).map(|(s, f)| (f - s) as f64);
            if let Some(t) = sink.rows(Table::States, date_of_ms(when), a.offset) {
                t.rows
                    .row()
                    .text(host.as_deref())
                    .text(Some("history"))
                    .text(Some(state))
                    .text(job.as_deref())
                    .text(Some(&id))
                    .text(None)
                    .text(None)
                    .text(None)
                    .text(None)
                    .ms(a.start)
                    .ms(a.finish)
                    .float(duration)
                    .int(None)
                    .text(a.status)
                    .text(Some("history"))
                    .text(Some(t.file))
                    .int(Some(a.line as i64))
                    .int(Some(a.last_line as i64))
                    .text(Some(t.ingest_id));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Text history

/// A record's `KEY="value"` pairs, values unescaped.
type Pairs<'a> = Vec<(&'a str, String)>;

/// `Type KEY="value" KEY="value" … [.]` → the type and its pairs.
fn parse_record(text: &str) -> Result<(&str, Pairs<'_>), String> {
    let text = text.trim_start();
    let type_end = text.find(' ').unwrap_or(text.len());
    let kind = &text[..type_end];
    if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err("record does not start with its type (`Job`, `Task`, `MapAttempt`, …)".into());
    }
    let mut pairs = Vec::new();
    let mut rest = &text[type_end..];
    loop {
        rest = rest.trim_start();
        if rest.is_empty() || rest == "." {
            return Ok((kind, pairs));
        }
        let eq = rest.find("=\"").ok_or_else(|| format!("`{}` is not KEY=\"value\"", cut(rest)))?;
        let key = &rest[..eq];
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!("`{}` is not a key", cut(key)));
        }
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let mut closed = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.extend(chars.next().map(|(_, c)| c)),
                '"' => {
                    closed = Some(eq + 2 + i + 1);
                    break;
                }
                c => value.push(c),
            }
        }
        let Some(after) = closed else {
            return Err(format!("value of {key} has no closing quote"));
        };
        pairs.push((key, value));
        rest = &rest[after..];
    }
}

fn cut(s: &str) -> &str {
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Whether a quoted value is still open after `text`, given whether it was before; `\`
/// escapes the next character, a line end included.
fn quote_open_after(text: &str, mut open: bool, mut escaped: bool) -> (bool, bool) {
    for b in text.bytes() {
        if escaped {
            escaped = false;
        } else if open && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            open = !open;
        }
    }
    (open, escaped)
}

/// A record longer than this is a quote never closed, not a stack trace.
const MAX_RECORD_LINES: usize = 10_000;
const MAX_RECORD_BYTES: usize = 16 << 20;

struct PendingLine {
    number: u64,
    offset: u64,
    raw: String,
}

/// Reads text history: records of one or more lines, `!!FILE` markers, configurations.
#[derive(Default)]
pub struct TextParser {
    history: History,
    record: Vec<PendingLine>,
    record_bytes: usize,
    quote_open: bool,
    escaped: bool,
    /// Inside a job configuration that Rumen put between histories.
    in_configuration: bool,
}

impl TextParser {
    fn reject_record(&mut self, sink: &mut Sink, reason: &str) {
        for line in std::mem::take(&mut self.record) {
            sink.reject(line.number, line.offset, reason, &line.raw);
        }
        (self.quote_open, self.escaped, self.record_bytes) = (false, false, 0);
    }

    fn complete_record(&mut self, sink: &mut Sink) {
        let lines = std::mem::take(&mut self.record);
        self.record_bytes = 0;
        let Some(first) = lines.first() else { return };
        let text: String = lines.iter().map(|l| l.raw.as_str()).collect::<Vec<_>>().join("\n");
        let result = parse_record(&text).and_then(|(kind, pairs)| self.apply(kind, &pairs, first.number, first.offset));
        match result {
            Ok(()) => {
                sink.parsed(lines.len() as u64);
                sink.report.events += 1;
            }
            Err(reason) => {
                for line in lines {
                    sink.reject(line.number, line.offset, &reason, &line.raw);
                }
            }
        }
    }

    fn apply(&mut self, kind: &str, pairs: &[(&str, String)], line: u64, offset: u64) -> Result<(), String> {
        let get = |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str());
        match kind {
            "Job" => {
                let id = get("JOBID").ok_or("Job record without JOBID")?;
                let job = self.history.job(id, line, offset);
                for (key, value) in pairs {
                    let count = |at: usize, job: &mut Job| job.counts[at] = value.trim().parse().ok();
                    match *key {
                        "JOBNAME" => job.name = Some(value.clone()),
                        "USER" => job.user = Some(value.clone()),
                        "JOB_QUEUE" | "QUEUE_NAME" => job.queue = Some(value.clone()),
                        "SUBMIT_TIME" => job.submit = millis(value),
                        "LAUNCH_TIME" => job.launch = millis(value),
                        "FINISH_TIME" => job.finish = millis(value),
                        "JOB_STATUS" => job.outcome = outcome(value).or(job.outcome),
                        "TOTAL_MAPS" => count(TOTAL_MAPS, job),
                        "TOTAL_REDUCES" => count(TOTAL_REDUCES, job),
                        "FINISHED_MAPS" => count(FINISHED_MAPS, job),
                        "FINISHED_REDUCES" => count(FINISHED_REDUCES, job),
                        "FAILED_MAPS" => count(FAILED_MAPS, job),
                        "FAILED_REDUCES" => count(FAILED_REDUCES, job),
                        _ => {}
                    }
                }
            }
            "MapAttempt" | "ReduceAttempt" => {
                let id = get("TASK_ATTEMPT_ID").ok_or_else(|| format!("{kind} record without TASK_ATTEMPT_ID"))?;
                let attempt = self.history.attempt(id, line, offset);
                for (key, value) in pairs {
                    match *key {
                        "TASKID" => attempt.task_id = Some(value.clone()),
                        "TASK_TYPE" => attempt.kind = Some(value.clone()),
                        "START_TIME" => attempt.start = millis(value),
                        "FINISH_TIME" => attempt.finish = millis(value),
                        "SHUFFLE_FINISHED" => attempt.shuffle = millis(value),
                        "SORT_FINISHED" => attempt.sort = millis(value),
                        "TASK_STATUS" => attempt.status = outcome(value),
                        "ERROR" if !value.is_empty() => attempt.error = Some(value.clone()),
                        "HOSTNAME" => (attempt.host, attempt.rack) = host_and_rack(value),
                        "TRACKER_NAME" => attempt.tracker_host = tracker_host(value),
                        _ => {}
                    }
                }
            }
            // `Meta` says the version; `Task` records repeat what the attempts say.
            _ => {}
        }
        Ok(())
    }
}

impl LineParser for TextParser {
    fn line(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str) {
        if let Some(name) = file_marker(text) {
            if !self.record.is_empty() {
                self.reject_record(sink, "record cut short by the next !!FILE marker");
            }
            self.history.flush(sink);
            self.in_configuration = name.ends_with(".xml");
            sink.parsed(1);
            return;
        }
        if self.in_configuration || (self.record.is_empty() && text.trim().is_empty()) {
            sink.skipped(1);
            return;
        }
        self.record.push(PendingLine { number, offset, raw: text.to_string() });
        self.record_bytes += text.len();
        (self.quote_open, self.escaped) = quote_open_after(text, self.quote_open, self.escaped);
        if self.escaped {
            // The escaped character is the line end itself.
            self.escaped = false;
        }
        if !self.quote_open {
            self.complete_record(sink);
        } else if self.record.len() > MAX_RECORD_LINES || self.record_bytes > MAX_RECORD_BYTES {
            self.reject_record(sink, "a quoted value runs on for more than 10000 lines or 16 MiB");
        }
    }

    fn finish(&mut self, sink: &mut Sink) {
        if !self.record.is_empty() {
            self.reject_record(sink, "record cut short by the end of the file (a quote never closed)");
        }
        self.history.flush(sink);
    }
}

// ---------------------------------------------------------------------------------------------
// .jhist (Avro-JSON)

/// Avro's JSON encoding wraps a value of a union type: `{"string": "x"}`.
fn unwrap_union(v: &Value) -> &Value {
    match v {
        Value::Object(map) if map.len() == 1 => match map.iter().next() {
            Some((k, inner)) if matches!(k.as_str(), "string" | "long" | "int" | "boolean" | "double") => inner,
            _ => v,
        },
        _ => v,
    }
}

/// Reads `.jhist`: the `Avro-Json` line, the schema line, then one event a line.
#[derive(Default)]
pub struct JhistParser {
    history: History,
}

impl JhistParser {
    fn event(&mut self, text: &str, line: u64, offset: u64) -> Result<(), String> {
        let event: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let kind = event.get("type").and_then(Value::as_str).ok_or("event without a type")?;
        let body = event
            .get("event")
            .and_then(Value::as_object)
            .and_then(|wrapper| wrapper.values().next())
            .and_then(Value::as_object)
            .ok_or("event without a body")?;
        let text_of = |key: &str| body.get(key).map(unwrap_union).and_then(Value::as_str);
        let number_of = |key: &str| body.get(key).map(unwrap_union).and_then(Value::as_i64);
        let time_of = |key: &str| number_of(key).filter(|ms| *ms > 0);
        if let Some(id) = text_of("attemptId") {
            let attempt = self.history.attempt(id, line, offset);
            attempt.task_id = text_of("taskid").map(str::to_string).or(attempt.task_id.take());
            attempt.kind = text_of("taskType").map(str::to_string).or(attempt.kind.take());
            attempt.start = time_of("startTime").or(attempt.start);
            attempt.finish = time_of("finishTime").or(attempt.finish);
            attempt.shuffle = time_of("shuffleFinishTime").or(attempt.shuffle);
            attempt.sort = time_of("sortFinishTime").or(attempt.sort);
            if let Some(tracker) = text_of("trackerName") {
                attempt.tracker_host = tracker_host(tracker);
            }
            if let Some(hostname) = text_of("hostname") {
                let (host, rack) = host_and_rack(hostname);
                attempt.host = host;
                attempt.rack = text_of("rackname").map(str::to_string).or(rack);
            }
            if let Some(error) = text_of("error").filter(|e| !e.is_empty()) {
                attempt.error = Some(error.to_string());
            }
            let status = text_of("taskStatus").or_else(|| text_of("status")).and_then(outcome);
            let by_kind = match kind.rsplit('_').next() {
                Some("FINISHED") => Some("SUCCEEDED"),
                Some("FAILED") => Some("FAILED"),
                Some("KILLED") => Some("KILLED"),
                _ => None,
            };
            attempt.status = status.or(by_kind).or(attempt.status);
        } else if let Some(id) = text_of("jobid") {
            let job = self.history.job(id, line, offset);
            job.name = text_of("jobName").map(str::to_string).or(job.name.take());
            job.user = text_of("userName").map(str::to_string).or(job.user.take());
            job.queue = text_of("jobQueueName").map(str::to_string).or(job.queue.take());
            job.submit = time_of("submitTime").or(job.submit);
            job.launch = time_of("launchTime").or(job.launch);
            job.finish = time_of("finishTime").or(job.finish);
            let keys = ["totalMaps", "totalReduces", "finishedMaps", "finishedReduces", "failedMaps", "failedReduces"];
            for (at, key) in keys.iter().enumerate() {
                job.counts[at] = number_of(key).or(job.counts[at]);
            }
            match kind {
                "JOB_FINISHED" => job.outcome = Some("SUCCEEDED"),
                "JOB_FAILED" | "JOB_KILLED" | "JOB_ERROR" => {
                    job.outcome = text_of("jobStatus").and_then(outcome).or_else(|| outcome(&kind[4..]));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl LineParser for JhistParser {
    fn line(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str) {
        if text.trim().is_empty() {
            sink.skipped(1);
            return;
        }
        // Line 1 names the encoding, line 2 is the Avro schema: read, not events.
        if number <= 2 {
            let expected = if number == 1 { text.trim() == "Avro-Json" } else { text.contains("\"type\"") };
            if expected {
                sink.parsed(1);
            } else {
                sink.reject(number, offset, "not the Avro-Json header of a .jhist file", text);
            }
            return;
        }
        match self.event(text, number, offset) {
            Ok(()) => {
                sink.parsed(1);
                sink.report.events += 1;
            }
            Err(reason) => sink.reject(number, offset, &reason, text),
        }
    }

    fn finish(&mut self, sink: &mut Sink) {
        self.history.flush(sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_unescape_and_end_with_a_dot() {
        let (kind, pairs) = parse_record(
            r#"MapAttempt TASK_ATTEMPT_ID="attempt_1_0001_m_000000_0" HOSTNAME="/rack\.1/node\.7" ERROR="a \"b\"" ."#,
        )
        .unwrap();
        assert_eq!(kind, "MapAttempt");
        assert_eq!(pairs[1], ("HOSTNAME", "/rack.1/node.7".to_string()));
        assert_eq!(pairs[2], ("ERROR", "a \"b\"".to_string()));
        assert!(parse_record(r#"Job JOBID="job_1"#).is_err());
        assert!(parse_record("!! nonsense").is_err());
        assert_eq!(parse_record("Meta VERSION=\"1\" .").unwrap().1.len(), 1);
    }

    #[test]
    fn rumen_markers_name_files() {
        assert_eq!(file_marker("\u{c}!!FILE=c_job_1_conf.xml!!"), Some("c_job_1_conf.xml"));
        assert_eq!(file_marker("!!FILE=c_job_1_u_name!!"), Some("c_job_1_u_name"));
        assert_eq!(file_marker("!!FILE=unterminated"), None);
        assert!(is_text_history("\u{c}!!FILE=x!!"));
    }

    #[test]
    fn quotes_open_across_lines() {
        assert_eq!(quote_open_after(r#"MapAttempt ERROR="java\.io"#, false, false), (true, false));
        assert_eq!(quote_open_after(r#"  at x\.y(Z\.java:1)"#, true, false), (true, false));
        assert_eq!(quote_open_after(r#"" ."#, true, false), (false, false));
        assert_eq!(quote_open_after(r#"Job A="\"#, false, false), (true, true));
    }

    #[test]
    fn hosts_lose_their_racks() {
        assert_eq!(host_and_rack("/default-rack/node1"), (Some("node1".into()), Some("/default-rack".into())));
        assert_eq!(
            host_and_rack("/192.30.63.192/n.example.com"),
            (Some("n.example.com".into()), Some("/192.30.63.192".into()))
        );
        assert_eq!(host_and_rack("node1"), (Some("node1".into()), None));
        assert_eq!(tracker_host("tracker_host1:localhost/127.0.0.1:58165"), Some("host1".into()));
        assert_eq!(outcome("SUCCESS"), Some("SUCCEEDED"));
        assert_eq!(outcome("RUNNING"), None);
        assert_eq!(millis("0"), None);
    }

    #[test]
    fn avro_unions_are_unwrapped() {
        let v: Value = serde_json::from_str(r#"{"string": "x"}"#).unwrap();
        assert_eq!(unwrap_union(&v), &Value::String("x".into()));
        let plain: Value = serde_json::from_str(r#"{"a": 1}"#).unwrap();
        assert_eq!(unwrap_union(&plain), &plain);
    }
}
