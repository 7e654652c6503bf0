//! The log4j line layouts Hadoop daemons write, detected per file, and their timestamps.
//!
//! - `2008-08-23 17:12:32,466 INFO org.apache.hadoop.mapred.TaskTracker: msg` (0.x/1.x `%d %p %c: %m`)
//! - `2015-03-01 10:00:00,001 INFO [main] org.apache.hadoop.mapred.MapTask: msg` (2.x/3.x, thread)
//! - `2015-03-01 10:00:00,001 INFO  mapred.TaskTracker (TaskTracker.java:run(123)) - msg`
//! - `081109 203615 148 INFO dfs.DataNode$PacketResponder: msg` (Loghub: `yyMMdd HHmmss thread`)
//! - `12/05/23 13:54:46 INFO mapred.TaskTracker: msg` (the console appender's
//!   `%d{yy/MM/dd HH:mm:ss} %p %c{2}: %m`: `.out` files, logs captured from standard output)
//!
//! Hand-written on bytes rather than with `regex`: this is the hot path of ingestion.

use chrono::TimeZone;
use chrono_tz::Tz;

use super::ids::split_at_first;
use super::pattern::Pattern;

/// How the timestamp and the fields before the message are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A log4j `ConversionPattern` the user gave (`--layout`): never detected.
    Pattern(&'static Pattern),
    /// `yyyy-MM-dd HH:mm:ss,SSS LEVEL [thread] logger: msg` or `… logger (File:method(line)) - msg`.
    Iso8601,
    /// `yyMMdd HHmmss thread LEVEL logger: msg`.
    Loghub,
    /// `yy/MM/dd HH:mm:ss LEVEL logger: msg`, to the second.
    Console,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Pattern(pattern) => pattern.text(),
            Layout::Iso8601 => "iso8601",
            Layout::Loghub => "loghub",
            Layout::Console => "console",
        }
    }

    /// The layout that parses most of a file's first lines, if any parses at all.
    pub fn detect<'a>(first_lines: impl Iterator<Item = &'a str> + Clone) -> Option<Layout> {
        [Layout::Iso8601, Layout::Loghub, Layout::Console]
            .into_iter()
            .map(|layout| {
                let parsed =
                    first_lines.clone().filter(|line| matches!(parse_head(layout, line), Head::Event(_))).count();
                (parsed, layout)
            })
            .filter(|(parsed, _)| *parsed > 0)
            .max_by_key(|(parsed, _)| *parsed)
            .map(|(_, layout)| layout)
    }
}

/// The fields of a line that starts an event. `local_ms` is the wall-clock time as written,
/// counted as if it were UTC; [`ZoneConverter`] turns it into real UTC.
#[derive(Debug, PartialEq, Eq)]
pub struct EventHead<'a> {
    pub local_ms: i64,
    pub level: &'a str,
    pub thread: Option<&'a str>,
    pub logger: &'a str,
    pub message: &'a str,
}

/// What one line is.
#[derive(Debug, PartialEq, Eq)]
pub enum Head<'a> {
    Event(EventHead<'a>),
    /// No timestamp at the start: a stack trace or wrapped message of the event before.
    Continuation,
    /// A timestamp that does not parse, or fields missing after it.
    Malformed(&'static str),
}

/// log4j's levels, matched in line: a search of a list of them would call `memcmp` for each
/// level of the word's length.
pub(super) fn is_level(word: &str) -> bool {
    matches!(word, "INFO" | "DEBUG" | "WARN" | "ERROR" | "FATAL" | "TRACE")
}

/// What one line of a file of `layout` is ([`HeadParser`] for a whole file).
pub fn parse_head(layout: Layout, line: &str) -> Head<'_> {
    HeadParser::new(layout).parse(line)
}

/// Parses the lines of one file, remembering the last date seen: a file's lines share their
/// date for hours, so it is turned into days only when it changes, not on every line.
pub struct HeadParser {
    layout: Layout,
    /// The date as written (`yyyy-MM-dd` or `yyMMdd`, zero-padded) and its days since 1970.
    /// All zeros matches no line: a date opens with digits.
    last_date: ([u8; 10], i64),
}

impl HeadParser {
    pub fn new(layout: Layout) -> Self {
        Self { layout, last_date: ([0; 10], 0) }
    }

    pub fn parse<'a>(&mut self, line: &'a str) -> Head<'a> {
        match self.layout {
            Layout::Pattern(pattern) => pattern.parse(line),
            Layout::Iso8601 => self.parse_iso(line),
            Layout::Loghub => self.parse_loghub(line),
            Layout::Console => self.parse_console(line),
        }
    }

    /// Days since 1970 of the date written in `written`, computed by `days` when it is not the
    /// last date seen.
    fn days(&mut self, written: &[u8], days: impl FnOnce() -> Option<i64>) -> Option<i64> {
        let (last, last_days) = &mut self.last_date;
        if last[..written.len()] != *written {
            *last_days = days()?;
            last.fill(0);
            last[..written.len()].copy_from_slice(written);
        }
        Some(*last_days)
    }

    fn parse_iso<'a>(&mut self, line: &'a str) -> Head<'a> {
        let b = line.as_bytes();
        // Anything that does not open with `dddd-dd-dd` is not the start of an event.
        let opens = b.len() >= 10 && digits(b, 0, 4).is_some() && b[4] == b'-' && b[7] == b'-';
        let stamp = || {
            if b.len() < 24 || b[10] != b' ' || b[13] != b':' || b[16] != b':' || !matches!(b[19], b',' | b'.') {
                return None;
            }
            let days =
                self.days(&b[..10], || days_from_civil(digits(b, 0, 4)? as i32, digits(b, 5, 2)?, digits(b, 8, 2)?))?;
            day_ms(days, digits(b, 11, 2)?, digits(b, 14, 2)?, digits(b, 17, 2)?, digits(b, 20, 3)?)
        };
        head(line, opens, stamp, "timestamp is not yyyy-MM-dd HH:mm:ss,SSS", 23, false)
    }

    fn parse_loghub<'a>(&mut self, line: &'a str) -> Head<'a> {
        let b = line.as_bytes();
        let opens = b.len() >= 13 && digits(b, 0, 6).is_some() && b[6] == b' ' && digits(b, 7, 6).is_some();
        let stamp = || {
            let days = self.days(&b[..6], || {
                days_from_civil(2000 + digits(b, 0, 2)? as i32, digits(b, 2, 2)?, digits(b, 4, 2)?)
            })?;
            day_ms(days, digits(b, 7, 2)?, digits(b, 9, 2)?, digits(b, 11, 2)?, 0)
        };
        head(line, opens, stamp, "timestamp is not yyMMdd HHmmss", 13, true)
    }

    fn parse_console<'a>(&mut self, line: &'a str) -> Head<'a> {
        let b = line.as_bytes();
        let opens =
            b.len() >= 8 && digits(b, 0, 2).is_some() && b[2] == b'/' && digits(b, 3, 2).is_some() && b[5] == b'/';
        let stamp = || {
            if b.len() < 17 || b[8] != b' ' || b[11] != b':' || b[14] != b':' {
                return None;
            }
            let days = self.days(&b[..8], || {
                days_from_civil(2000 + digits(b, 0, 2)? as i32, digits(b, 3, 2)?, digits(b, 6, 2)?)
            })?;
            day_ms(days, digits(b, 9, 2)?, digits(b, 12, 2)?, digits(b, 15, 2)?, 0)
        };
        head(line, opens, stamp, "timestamp is not yy/MM/dd HH:mm:ss", 17, false)
    }
}

/// A line that `opens` like its layout's timestamp is an event whose fields follow the stamp's
/// `len` bytes, or malformed (`expected`) where the stamp does not read; any other line
/// continues the event before it.
#[inline(always)]
fn head<'a>(
    line: &'a str,
    opens: bool,
    stamp: impl FnOnce() -> Option<i64>,
    expected: &'static str,
    len: usize,
    bare_thread_first: bool,
) -> Head<'a> {
    if !opens {
        return Head::Continuation;
    }
    match stamp() {
        Some(local_ms) => fields_after_stamp(local_ms, &line[len..], bare_thread_first),
        None => Head::Malformed(expected),
    }
}

pub(super) fn digits(b: &[u8], from: usize, n: usize) -> Option<u32> {
    let slice = b.get(from..from + n)?;
    slice.iter().try_fold(0u32, |acc, &c| c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0')))
}

/// The head's short fields are split by plain loops over their few bytes: a `memchr` call or
/// `str`'s char pattern cost more than the scan.
fn skip_spaces(s: &str) -> &str {
    &s[s.bytes().take_while(|&b| b == b' ').count()..]
}

fn split_at_space(s: &str) -> Option<(&str, &str)> {
    let at = s.bytes().position(|b| b == b' ')?;
    Some((&s[..at], &s[at + 1..]))
}

/// Level, thread and logger after the timestamp. Loghub writes the thread as a bare word before
/// the level; the 2.x layouts write it in brackets after the level.
fn fields_after_stamp(local_ms: i64, rest: &str, bare_thread_first: bool) -> Head<'_> {
    let mut rest = skip_spaces(rest);
    let mut thread = None;
    if bare_thread_first {
        let Some((word, tail)) = split_at_space(rest) else {
            return Head::Malformed("no level after the thread");
        };
        thread = Some(word);
        rest = skip_spaces(tail);
    }
    let Some((level, tail)) = split_at_space(rest) else {
        return Head::Malformed("no level after the timestamp");
    };
    if !is_level(level) {
        return Head::Malformed("level is not one of INFO, DEBUG, WARN, ERROR, FATAL, TRACE");
    }
    rest = skip_spaces(tail);
    if let Some(bracketed) = rest.strip_prefix('[') {
        let Some((name, after)) = split_at_first(bracketed, "] ") else {
            return Head::Malformed("thread has no closing bracket");
        };
        thread = Some(name);
        rest = after;
    }
    // `logger: message`, or `logger (File.java:method(42)) - message`.
    let logger_end = memchr::memchr(b' ', rest.as_bytes()).unwrap_or(rest.len());
    let (logger, tail) = rest.split_at(logger_end);
    if let Some(logger) = logger.strip_suffix(':') {
        if !logger.is_empty() {
            let message = tail.strip_prefix(' ').unwrap_or(tail);
            return Head::Event(EventHead { local_ms, level, thread, logger, message });
        }
    } else if tail.starts_with(" (")
        && let Some((_, message)) = split_at_first(tail, ") - ")
    {
        return Head::Event(EventHead { local_ms, level, thread, logger, message });
    }
    Head::Malformed("no `logger: ` before the message")
}

/// Days since 1970 of a civil date, or None where a field is out of range. Plain arithmetic
/// (Hinnant's days-from-civil) rather than a date library; [`HeadParser`] calls it when the date changes.
pub(super) fn days_from_civil(year: i32, month: u32, day: u32) -> Option<i64> {
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let y = i64::from(if month <= 2 { year - 1 } else { year });
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let shifted_month = i64::from((month + 9) % 12);
    let day_of_year = (153 * shifted_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    Some(era * 146_097 + day_of_era - 719_468)
}

/// Milliseconds since 1970 of a time of day `days` after 1970-01-01, or None where a field is
/// out of range.
pub(super) fn day_ms(days: i64, hour: u32, min: u32, sec: u32, ms: u32) -> Option<i64> {
    if hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    Some(((days * 24 + i64::from(hour)) * 60 + i64::from(min)) * 60_000 + i64::from(sec) * 1000 + i64::from(ms))
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

const HOUR_MS: i64 = 3_600_000;

/// Turns wall-clock times of one zone into UTC. Offsets only change on whole hours in the zones
/// clusters run in, so one lookup per local hour serves every line of that hour.
pub struct ZoneConverter {
    zone: Option<Tz>,
    cached_hour: i64,
    cached_offset_ms: i64,
}

impl ZoneConverter {
    /// `None` is UTC, the default when logs say nothing of their zone.
    pub fn new(zone: Option<Tz>) -> Self {
        ZoneConverter { zone, cached_hour: i64::MIN, cached_offset_ms: 0 }
    }

    pub fn to_utc_ms(&mut self, local_ms: i64) -> i64 {
        let Some(zone) = self.zone else {
            return local_ms;
        };
        let hour = local_ms.div_euclid(HOUR_MS);
        if hour != self.cached_hour {
            self.cached_hour = hour;
            self.cached_offset_ms = offset_ms(zone, hour * HOUR_MS);
        }
        local_ms - self.cached_offset_ms
    }
}

/// The zone's offset at a wall-clock time; in a spring-forward gap, the offset before the gap,
/// and in an autumn overlap, the earlier (daylight) reading, as log4j itself wrote it first.
fn offset_ms(zone: Tz, local_ms: i64) -> i64 {
    let Some(naive) = chrono::DateTime::from_timestamp_millis(local_ms).map(|t| t.naive_utc()) else {
        return 0;
    };
    let resolved = zone
        .from_local_datetime(&naive)
        .earliest()
        .or_else(|| zone.from_local_datetime(&(naive - chrono::Duration::hours(1))).earliest());
    resolved.map_or(0, |t| t.naive_local().signed_duration_since(t.naive_utc()).num_milliseconds())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(layout: Layout, line: &str) -> EventHead<'_> {
        match parse_head(layout, line) {
            Head::Event(e) => e,
            other => panic!("{line}: {other:?}"),
        }
    }

    // 2008-08-23 17:12:32.466 UTC is 1219511552466 ms (`date -u -d '2008-08-23 17:12:32' +%s`
    // gives 1219511552).
    const SALSA_FIG3_MS: i64 = 1_219_511_552_466;

    #[test]
    fn hadoop_1x_layout() {
        let e = event(
            Layout::Iso8601,
            "2008-08-23 17:12:32,466 INFO org.apache.hadoop.mapred.TaskTracker: LaunchTaskAction: task_0001_m_000003_0",
        );
        assert_eq!(e.local_ms, SALSA_FIG3_MS);
        assert_eq!((e.level, e.thread, e.logger), ("INFO", None, "org.apache.hadoop.mapred.TaskTracker"));
        assert_eq!(e.message, "LaunchTaskAction: task_0001_m_000003_0");
    }

    #[test]
    fn hadoop_2x_layouts() {
        let e = event(Layout::Iso8601, "2008-08-23 17:12:32,466 WARN [main] org.apache.hadoop.mapred.MapTask: spill");
        assert_eq!(
            (e.level, e.thread, e.logger, e.message),
            ("WARN", Some("main"), "org.apache.hadoop.mapred.MapTask", "spill")
        );
        let e = event(
            Layout::Iso8601,
            "2008-08-23 17:12:32,466 INFO  mapred.TaskTracker (TaskTracker.java:run(123)) - Task x is done.",
        );
        assert_eq!((e.logger, e.message), ("mapred.TaskTracker", "Task x is done."));
        assert_eq!(e.local_ms, SALSA_FIG3_MS);
    }

    #[test]
    fn loghub_layout() {
        let e = event(
            Layout::Loghub,
            "081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 for block blk_1 terminating",
        );
        // 2008-11-09 20:36:15 UTC = 1226262975 s (`date -u -d '2008-11-09 20:36:15' +%s`).
        assert_eq!(e.local_ms, 1_226_262_975_000);
        assert_eq!((e.thread, e.logger), (Some("148"), "dfs.DataNode$PacketResponder"));
    }

    #[test]
    fn console_layout() {
        let e = event(
            Layout::Console,
            "12/05/23 13:54:46 INFO mapred.TaskTracker: LaunchTaskAction (registerTask): attempt_1 task's state:UNASSIGNED",
        );
        // `date -u -d '2012-05-23 13:54:46' +%s` = 1337781286.
        assert_eq!(e.local_ms, 1_337_781_286_000);
        assert_eq!((e.level, e.thread, e.logger), ("INFO", None, "mapred.TaskTracker"));
        assert_eq!(e.message, "LaunchTaskAction (registerTask): attempt_1 task's state:UNASSIGNED");
        let mut parser = HeadParser::new(Layout::Console);
        // `date -u -d '2012-05-24 00:00:01' +%s` = 1337817601.
        assert!(
            matches!(parser.parse("12/05/24 00:00:01 WARN a.B: x"), Head::Event(e) if e.local_ms == 1_337_817_601_000)
        );
        assert!(matches!(parser.parse("12/13/24 00:00:01 WARN a.B: x"), Head::Malformed(_)));
        assert!(matches!(parser.parse("12/05/24 24:00:01 WARN a.B: x"), Head::Malformed(_)));
        assert!(matches!(parser.parse("12/05/24"), Head::Malformed(_)));
        assert_eq!(parser.parse("/*****"), Head::Continuation);
        assert_eq!(parser.parse("STARTUP_MSG:   version = 1.0.3"), Head::Continuation);
        let lines =
            ["12/05/23 13:53:40 INFO mapred.TaskTracker: STARTUP_MSG: ", "/****", "12/05/23 13:54:46 INFO a.B: x"];
        assert_eq!(Layout::detect(lines.into_iter()), Some(Layout::Console));
    }

    #[test]
    fn continuations_and_malformed_lines() {
        assert_eq!(parse_head(Layout::Iso8601, "\tat org.apache.hadoop.Foo(Foo.java:1)"), Head::Continuation);
        assert_eq!(parse_head(Layout::Iso8601, "java.io.IOException: x"), Head::Continuation);
        assert!(matches!(parse_head(Layout::Iso8601, "2008-13-23 17:12:32,466 INFO a: b"), Head::Malformed(_)));
        assert!(matches!(parse_head(Layout::Iso8601, "2008-08-23 17:12:32,466 LOUD a: b"), Head::Malformed(_)));
        assert!(matches!(parse_head(Layout::Iso8601, "2008-08-23 17:12:32,466 INFO nologger"), Head::Malformed(_)));
        assert!(matches!(parse_head(Layout::Iso8601, "2008-08-23"), Head::Malformed(_)));
        assert!(matches!(parse_head(Layout::Iso8601, "2009-02-29 00:00:00,000 INFO a: b"), Head::Malformed(_)));
        assert!(matches!(parse_head(Layout::Iso8601, "2008-02-29 00:00:00,000 INFO a: b"), Head::Event(_)));
    }

    /// One parser over a file's lines: the date it remembers is reused only for the same date,
    /// and a bad date is neither taken from nor left in it.
    #[test]
    fn a_file_of_lines_across_dates() {
        let ms = |parser: &mut HeadParser, line| match parser.parse(line) {
            Head::Event(e) => Some(e.local_ms),
            _ => None,
        };
        let mut iso = HeadParser::new(Layout::Iso8601);
        assert_eq!(ms(&mut iso, "2008-08-23 17:12:32,466 INFO a: b"), Some(SALSA_FIG3_MS));
        // `date -u -d '2008-08-24 00:00:00' +%s` = 1219536000.
        assert_eq!(ms(&mut iso, "2008-08-24 00:00:00,000 INFO a: b"), Some(1_219_536_000_000));
        assert_eq!(ms(&mut iso, "2008-08-24 00:00:00,001 INFO a: b"), Some(1_219_536_000_001));
        assert_eq!(ms(&mut iso, "2008-02-30 00:00:00,000 INFO a: b"), None);
        assert_eq!(ms(&mut iso, "2008-08-24 24:00:00,000 INFO a: b"), None);
        assert_eq!(ms(&mut iso, "2008-08-23 17:12:32,466 INFO a: b"), Some(SALSA_FIG3_MS));
        assert_eq!(ms(&mut iso, "2008-08-24 00:00:00,000 INFO a: b"), Some(1_219_536_000_000));
        let mut loghub = HeadParser::new(Layout::Loghub);
        assert_eq!(ms(&mut loghub, "081109 203615 148 INFO a: b"), Some(1_226_262_975_000));
        // `date -u -d '2008-11-10 00:00:01' +%s` = 1226275201.
        assert_eq!(ms(&mut loghub, "081110 000001 148 INFO a: b"), Some(1_226_275_201_000));
        assert_eq!(ms(&mut loghub, "081131 000001 148 INFO a: b"), None);
        assert_eq!(ms(&mut loghub, "081110 000001 148 INFO a: b"), Some(1_226_275_201_000));
    }

    #[test]
    fn detection_prefers_the_layout_that_parses() {
        let iso = ["2008-08-23 17:12:32,466 INFO a.B: x", "\tat y"];
        assert_eq!(Layout::detect(iso.iter().copied()), Some(Layout::Iso8601));
        let loghub = ["081109 203615 148 INFO dfs.DataNode: x"];
        assert_eq!(Layout::detect(loghub.iter().copied()), Some(Layout::Loghub));
        assert_eq!(Layout::detect(["hello", "world"].iter().copied()), None);
    }

    #[test]
    fn zones_convert_wall_clock_to_utc() {
        let mut utc = ZoneConverter::new(None);
        assert_eq!(utc.to_utc_ms(SALSA_FIG3_MS), SALSA_FIG3_MS);
        // Pittsburgh in August is EDT, UTC-4.
        let mut eastern = ZoneConverter::new(Some(chrono_tz::America::New_York));
        assert_eq!(eastern.to_utc_ms(SALSA_FIG3_MS), SALSA_FIG3_MS + 4 * HOUR_MS);
        // …and EST, UTC-5, on 2008-11-09.
        assert_eq!(eastern.to_utc_ms(1_226_262_975_000), 1_226_262_975_000 + 5 * HOUR_MS);
    }
}
