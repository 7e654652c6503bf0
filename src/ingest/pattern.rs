//! Log4j `ConversionPattern`s given with `--layout`, for clusters whose `log4j.properties` writes
//! lines that none of the built-in layouts reads. A pattern is compiled once into the parts of a
//! line, in order; each field is read up to the text that follows it in the pattern.
//!
//! Read: `%d` (ISO8601 by default, or `{ISO8601}`, `{DATE}` or a `SimpleDateFormat` of `yyyy`,
//! `yy`, `MM`, `MMM`, `dd`, `HH`, `mm`, `ss`, `SSS` and separators), `%p`, `%t`, `%c`/`%C` (with
//! `{n}`), `%m`, `%n`, `%%`; `%F`, `%L`, `%M`, `%l`, `%x`, `%X{…}` and `%r` are read and left
//! out. Widths and alignment (`%-5p`, `%20c`) are allowed.

use std::sync::{Mutex, OnceLock};

use super::ids;
use super::log4j::{EventHead, Head, day_ms, days_from_civil, digits, is_level};

#[derive(Debug, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Date(Vec<DatePart>),
    Level,
    Thread,
    Logger,
    Message,
    /// A field read and left out (file, line, method, NDC, MDC, elapsed time).
    Skipped,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum DatePart {
    Year4,
    Year2,
    Month,
    MonthName,
    Day,
    Hour,
    Minute,
    Second,
    Millis,
    Text(char),
}

impl Pattern {
    /// The compiled pattern, shared by every file and thread of the process; each distinct text
    /// is compiled once.
    pub fn intern(text: &str) -> Result<&'static Pattern, String> {
        static KNOWN: OnceLock<Mutex<Vec<&'static Pattern>>> = OnceLock::new();
        let mut known = KNOWN.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pattern) = known.iter().find(|p| p.text == text) {
            return Ok(pattern);
        }
        let pattern: &'static Pattern = Box::leak(Box::new(Pattern::compile(text)?));
        known.push(pattern);
        Ok(pattern)
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn compile(text: &str) -> Result<Pattern, String> {
        let fail = |why: String| Err(format!("--layout {text:?}: {why}"));
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                literal.push(c);
                continue;
            }
            // Alignment and width: `-`, digits, `.`.
            while chars.peek().is_some_and(|c| *c == '-' || *c == '.' || c.is_ascii_digit()) {
                chars.next();
            }
            let Some(conversion) = chars.next() else { return fail("it ends with `%`".into()) };
            let mut option = None;
            if chars.peek() == Some(&'{') {
                chars.next();
                let inside: String = chars.by_ref().take_while(|c| *c != '}').collect();
                option = Some(inside);
            }
            let part = match conversion {
                '%' => {
                    literal.push('%');
                    continue;
                }
                'n' => continue,
                'd' => match date_parts(option.as_deref().unwrap_or("ISO8601")) {
                    Ok(date) => Part::Date(date),
                    Err(why) => return fail(why),
                },
                'p' => Part::Level,
                't' => Part::Thread,
                'c' | 'C' => Part::Logger,
                'm' => Part::Message,
                'F' | 'L' | 'M' | 'l' | 'x' | 'X' | 'r' => Part::Skipped,
                other => return fail(format!("`%{other}` is not a conversion Kahuna reads")),
            };
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal)));
            }
            if matches!(parts.last(), Some(p) if !matches!(p, Part::Text(_))) && !matches!(part, Part::Date(_)) {
                return fail("two fields with no text between them cannot be told apart".into());
            }
            parts.push(part);
        }
        let trailing = literal.trim_end_matches(['\n', '\r']);
        if !trailing.is_empty() {
            parts.push(Part::Text(trailing.to_string()));
        }
        for (needed, name) in [(Part::Level, "%p"), (Part::Message, "%m")] {
            if !parts.contains(&needed) {
                return fail(format!("it has no {name}"));
            }
        }
        if !parts.iter().any(|p| matches!(p, Part::Date(_))) {
            return fail("it has no %d: lines without a date cannot be placed in time".into());
        }
        if parts.iter().skip_while(|p| **p != Part::Message).skip(1).any(|p| !matches!(p, Part::Text(_))) {
            return fail("%m must be its last field".into());
        }
        Ok(Pattern { text: text.to_string(), parts })
    }

    /// What one line is: an event where its parts up to the date read (and malformed where a
    /// later one does not), else the continuation of the event before it.
    pub fn parse<'a>(&self, line: &'a str) -> Head<'a> {
        let mut rest = line;
        let mut dated = false;
        let (mut local_ms, mut level, mut thread, mut logger, mut message) = (0, "", None, "", "");
        for (index, part) in self.parts.iter().enumerate() {
            let broken = |why| if dated { Head::Malformed(why) } else { Head::Continuation };
            match part {
                Part::Text(text) => {
                    let text = match text.trim_start_matches(' ') {
                        trimmed if trimmed.len() < text.len() => {
                            // Padding of the field before (`%-5p`) widens the spaces.
                            rest = rest.trim_start_matches(' ');
                            trimmed
                        }
                        _ => text.as_str(),
                    };
                    match rest.strip_prefix(text) {
                        Some(after) => rest = after,
                        None => return broken("the line does not follow --layout"),
                    }
                }
                Part::Date(date) => match read_date(date, rest) {
                    Some((ms, after)) => {
                        (local_ms, rest, dated) = (ms, after, true);
                    }
                    None if dated => return Head::Malformed("a second date does not read"),
                    None => {
                        let opens = rest.as_bytes().first().is_some_and(u8::is_ascii_digit);
                        return if opens {
                            Head::Malformed("the date does not follow --layout")
                        } else {
                            Head::Continuation
                        };
                    }
                },
                Part::Message => {
                    message = rest;
                    rest = "";
                }
                field => {
                    let value;
                    (value, rest) = match self.parts.get(index + 1) {
                        Some(Part::Text(next)) => {
                            let next = next.trim_start_matches(' ');
                            let next = if next.is_empty() { " " } else { next };
                            // A field's end is a separator of a byte or a few.
                            match ids::find(rest.as_bytes(), next.as_bytes()) {
                                Some(at) => (rest[..at].trim_end_matches(' '), &rest[at..]),
                                None => return broken("a field is not followed by the text --layout puts after it"),
                            }
                        }
                        _ => (rest.trim_end_matches(' '), ""),
                    };
                    match field {
                        Part::Level => level = value.trim_start_matches(' '),
                        Part::Thread => thread = Some(value),
                        Part::Logger => logger = value.trim_start_matches(' '),
                        _ => {}
                    }
                }
            }
        }
        if !dated {
            return Head::Continuation;
        }
        if !is_level(level) {
            return Head::Malformed("level is not one of INFO, DEBUG, WARN, ERROR, FATAL, TRACE");
        }
        Head::Event(EventHead { local_ms, level, thread, logger, message })
    }
}

fn date_parts(format: &str) -> Result<Vec<DatePart>, String> {
    let format = match format {
        "ISO8601" => "yyyy-MM-dd HH:mm:ss,SSS",
        "DATE" => "dd MMM yyyy HH:mm:ss,SSS",
        "ABSOLUTE" => return Err("%d{ABSOLUTE} writes no date: lines cannot be placed in time".into()),
        other => other,
    };
    let mut parts = Vec::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        let mut run = 1;
        while chars.peek() == Some(&c) {
            chars.next();
            run += 1;
        }
        let part = match (c, run) {
            ('y', 4) => DatePart::Year4,
            ('y', 2) => DatePart::Year2,
            ('M', 2) => DatePart::Month,
            ('M', 3) => DatePart::MonthName,
            ('d', 2) => DatePart::Day,
            ('H', 2) => DatePart::Hour,
            ('m', 2) => DatePart::Minute,
            ('s', 2) => DatePart::Second,
            ('S', 3) => DatePart::Millis,
            (c, _) if c.is_ascii_alphabetic() => {
                return Err(format!(
                    "`{}` in %d{{{format}}} is not a date field Kahuna reads",
                    c.to_string().repeat(run)
                ));
            }
            (c, run) => {
                parts.extend(std::iter::repeat_n(DatePart::Text(c), run - 1));
                DatePart::Text(c)
            }
        };
        parts.push(part);
    }
    let has = |p: &DatePart| parts.contains(p);
    if !(has(&DatePart::Year4) || has(&DatePart::Year2))
        || !(has(&DatePart::Month) || has(&DatePart::MonthName))
        || !has(&DatePart::Day)
    {
        return Err(format!("%d{{{format}}} has no whole date (year, month and day)"));
    }
    Ok(parts)
}

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// The local time a line opens with, and the rest of the line.
fn read_date<'a>(parts: &[DatePart], text: &'a str) -> Option<(i64, &'a str)> {
    let b = text.as_bytes();
    let (mut at, mut year, mut month, mut day) = (0, 0i32, 0u32, 0u32);
    let (mut hour, mut minute, mut second, mut millis) = (0u32, 0u32, 0u32, 0u32);
    let number = |at: &mut usize, width: usize| -> Option<u32> {
        let value = digits(b, *at, width)?;
        *at += width;
        Some(value)
    };
    for part in parts {
        match part {
            DatePart::Year4 => year = number(&mut at, 4)? as i32,
            DatePart::Year2 => year = 2000 + number(&mut at, 2)? as i32,
            DatePart::Month => month = number(&mut at, 2)?,
            DatePart::MonthName => {
                let name = text.get(at..at + 3)?;
                month = MONTHS.iter().position(|m| *m == name)? as u32 + 1;
                at += 3;
            }
            DatePart::Day => day = number(&mut at, 2)?,
            DatePart::Hour => hour = number(&mut at, 2)?,
            DatePart::Minute => minute = number(&mut at, 2)?,
            DatePart::Second => second = number(&mut at, 2)?,
            DatePart::Millis => millis = number(&mut at, 3)?,
            DatePart::Text(c) => {
                let mut buf = [0; 4];
                let expected = c.encode_utf8(&mut buf).as_bytes();
                if b.get(at..at + expected.len())? != expected {
                    return None;
                }
                at += expected.len();
            }
        }
    }
    let ms = day_ms(days_from_civil(year, month, day)?, hour, minute, second, millis)?;
    Some((ms, text.get(at..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(pattern: &str, line: &str) -> (i64, String, Option<String>, String, String) {
        match Pattern::compile(pattern).unwrap().parse(line) {
            Head::Event(e) => {
                (e.local_ms, e.level.into(), e.thread.map(String::from), e.logger.into(), e.message.into())
            }
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn patterns_read_the_lines_they_write() {
        // 2015-10-18 18:01:47.978 UTC.
        let ms = 1_445_191_307_978;
        let cases = [
            ("%d{ISO8601} %p %c: %m%n", "2015-10-18 18:01:47,978 INFO org.a.B: hello: world", None),
            (
                "%d %-5p [%t] %c{2} - %m%n",
                "2015-10-18 18:01:47,978 INFO  [IPC Server handler 3] a.B - hello: world",
                Some("IPC Server handler 3"),
            ),
            (
                "%d{yyyy-MM-dd HH:mm:ss.SSS} %t %p %c %m%n",
                "2015-10-18 18:01:47.978 main INFO org.a.B hello: world",
                Some("main"),
            ),
            ("[%d{DATE}] %p %c (%F:%L) %m%n", "[18 Oct 2015 18:01:47,978] INFO org.a.B (B.java:42) hello: world", None),
        ];
        for (pattern, line, thread) in cases {
            let logger = if pattern.contains("{2}") { "a.B" } else { "org.a.B" };
            let expected = (ms, "INFO".into(), thread.map(String::from), logger.into(), "hello: world".into());
            assert_eq!(event(pattern, line), expected, "{pattern}");
        }
        let console = event("%d{yy/MM/dd HH:mm:ss} %p %c{2}: %m%n", "15/10/18 18:01:47 WARN mapred.TaskTracker: x");
        assert_eq!(console, (ms - 978, "WARN".into(), None, "mapred.TaskTracker".into(), "x".into()));
    }

    #[test]
    fn lines_that_do_not_follow_are_continuations_or_malformed() {
        let pattern = Pattern::compile("%d %p [%t] %c: %m%n").unwrap();
        assert_eq!(pattern.parse("\tat org.a.B.run(B.java:1)"), Head::Continuation);
        assert_eq!(pattern.parse(""), Head::Continuation);
        assert!(matches!(pattern.parse("2015-13-18 18:01:47,978 INFO [m] a: x"), Head::Malformed(_)));
        assert!(matches!(pattern.parse("2015-10-18 18:01:47,978 LOUD [m] a: x"), Head::Malformed(_)));
        assert!(matches!(pattern.parse("2015-10-18 18:01:47,978 INFO m a: x"), Head::Malformed(_)));
    }

    #[test]
    fn patterns_kahuna_cannot_read_are_refused_with_the_reason() {
        let refused = |p: &str| Pattern::compile(p).unwrap_err();
        assert!(refused("%d %p %c: %m %q").contains("`%q` is not a conversion"));
        assert!(refused("%p %c: %m").contains("no %d"));
        assert!(refused("%d{ABSOLUTE} %p %c: %m").contains("writes no date"));
        assert!(refused("%d{HH:mm:ss} %p %c: %m").contains("no whole date"));
        assert!(refused("%d %p%c: %m").contains("cannot be told apart"));
        assert!(refused("%d %c: %m").contains("no %p"));
        assert!(refused("%d %p %m %c").contains("last field"));
        assert!(std::ptr::eq(Pattern::intern("%d %p %c: %m").unwrap(), Pattern::intern("%d %p %c: %m").unwrap()));
    }
}
