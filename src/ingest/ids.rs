//! Hadoop identifiers found inside log messages: task attempts of both generations, jobs, HDFS
//! blocks (old `blk_-160…`, with generation stamp `blk_…_1763`, and block-pool `BP-…:blk_…`), and
//! the host part of `/10.0.0.1:50010`-style addresses.

use std::sync::LazyLock;

use memchr::memmem::Finder;

/// A byte of an identifier: `[A-Za-z0-9_]`.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Length of the identifier at the start of `s`.
fn word_len(s: &[u8]) -> usize {
    s.iter().position(|&b| !is_word_byte(b)).unwrap_or(s.len())
}

/// A task attempt id as written: `attempt_<jt>_<job>_<m|r>_<task>_<n>` (0.18 on) or
/// `task_<job>_<m|r>_<task>_<n>` (0.12–0.16, where the attempt number makes it an attempt).
/// Returns the id and the rest of the message after it.
pub fn find_attempt(msg: &str) -> Option<(&str, &str)> {
    let bytes = msg.as_bytes();
    let mut from = 0;
    // Most TaskTracker lines (progress reports) open with their attempt: no search for those.
    let mut next = if bytes.starts_with(b"attempt_") || bytes.starts_with(b"task_") {
        Some(0)
    } else {
        find_either(bytes, &ATTEMPT, &TASK)
    };
    while let Some(pos) = next {
        let start = from + pos;
        // Clienttrace writes `cliID: DFSClient_attempt_…`, so an id may follow other word
        // characters: only its own shape is checked.
        if let Some(len) = attempt_len(&bytes[start..]) {
            return Some((&msg[start..start + len], &msg[start + len..]));
        }
        from = start + 1;
        next = find_either(&bytes[from..], &ATTEMPT, &TASK);
    }
    None
}

/// Searchers for the id prefixes, built once: `a` and `t` start half the words of a message,
/// so a first-byte scan would stop everywhere, while these skip ahead on rarer bytes.
static ATTEMPT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"attempt_"));
static TASK: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"task_"));
static JOB: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"job_"));
static BLOCK: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"blk_"));

/// The first place either needle occurs; `b` is searched for only before `a`'s first match.
fn find_either(hay: &[u8], a: &Finder<'_>, b: &Finder<'_>) -> Option<usize> {
    match a.find(hay) {
        Some(x) => Some(b.find(&hay[..x]).unwrap_or(x)),
        None => b.find(hay),
    }
}

/// Where `needle` first occurs in `hay`. Log messages are short and the needles a few bytes:
/// a `memchr` for the first byte and a comparison cost less than building a searcher
/// (`memmem::find`, `str::find`) on every call of the hot path. Fixed needles searched on every
/// line have their searchers built once instead (below).
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(at) = memchr::memchr(first, &hay[from..]) {
        let start = from + at;
        if follows(hay, start, rest) {
            return Some(start);
        }
        from = start + 1;
    }
    None
}

/// Whether `rest` comes right after `hay[at]`: compared in line rather than by `starts_with`,
/// whose call to `memcmp` for a few bytes cost more than the comparison.
fn follows(hay: &[u8], at: usize, rest: &[u8]) -> bool {
    hay.len() - at > rest.len() && rest.iter().zip(&hay[at + 1..]).all(|(a, b)| a == b)
}

/// `s` around the first `sep` (not empty), as `str::split_once`, whose searcher costs more to
/// build than a log message costs to scan; see [`find`].
pub fn split_at_first<'a>(s: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
    let at = find(s.as_bytes(), sep.as_bytes())?;
    Some((&s[..at], &s[at + sep.len()..]))
}

/// `s` around the last `sep` (not empty), as `str::rsplit_once`; see [`find`].
pub fn split_at_last<'a>(s: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
    let (&first, rest) = sep.as_bytes().split_first()?;
    let hay = s.as_bytes();
    let mut end = hay.len();
    while let Some(at) = memchr::memrchr(first, &hay[..end]) {
        if follows(hay, at, rest) {
            return Some((&s[..at], &s[at + sep.len()..]));
        }
        end = at;
    }
    None
}

/// Whether `needle` occurs in `hay`; see [`find`].
pub fn contains(hay: &str, needle: &str) -> bool {
    find(hay.as_bytes(), needle.as_bytes()).is_some()
}

/// `attempt_200808231712_0001_m_000003_0` or `task_0001_m_000003_0`: after the prefix, runs
/// of digits with `m` or `r` second to last but two.
pub fn is_attempt(id: &str) -> bool {
    attempt_len(id.as_bytes()) == Some(id.len())
}

/// The length of the attempt id `b` opens with, if it opens with one that ends its word. One
/// hand-written scan, not a split: this runs on every id-like word of every line.
fn attempt_len(b: &[u8]) -> Option<usize> {
    let (numbers_before_kind, mut at) = if b.starts_with(b"attempt_") {
        (2, "attempt_".len())
    } else if b.starts_with(b"task_") {
        (1, "task_".len())
    } else {
        return None;
    };
    for _ in 0..numbers_before_kind {
        at = digits_then(b, at, b'_')?;
    }
    if !matches!(b.get(at..at + 2), Some(b"m_" | b"r_")) {
        return None;
    }
    at = digits_then(b, at + 2, b'_')?;
    let end = at + digits_at(b, at);
    let word_goes_on = b.get(end).copied().is_some_and(is_word_byte);
    (end > at && !word_goes_on).then_some(end)
}

/// Where a run of digits from `at` followed by `end` stops, past `end`; None where there is no
/// such run.
fn digits_then(b: &[u8], at: usize, end: u8) -> Option<usize> {
    let digits = digits_at(b, at);
    (digits > 0 && b.get(at + digits) == Some(&end)).then_some(at + digits + 1)
}

/// How many digits run from `at` (none past the end of `b`).
fn digits_at(b: &[u8], at: usize) -> usize {
    b.get(at..).map_or(0, |rest| rest.iter().take_while(|c| c.is_ascii_digit()).count())
}

/// Whether an attempt id names a map (`_m_`) rather than a reduce.
pub fn is_map_attempt(attempt: &str) -> bool {
    contains(attempt, "_m_")
}

/// The job of an attempt: `job_<jt>_<job>` for new ids, `job_<job>` for 0.12–0.16 ids.
pub fn job_of_attempt(attempt: &str) -> Option<String> {
    job_number_of_attempt(attempt).map(|number| format!("job_{number}"))
}

/// What follows `job_` in the job id of an attempt (`<jt>_<job>` or `<job>`), a slice of the
/// attempt id: the hot path writes the job id into a buffer it reuses instead of a new string.
/// One scan of bytes: this runs on every attempt id, where `str`'s char searchers cost more.
pub fn job_number_of_attempt(attempt: &str) -> Option<&str> {
    let (numbers, rest) = if let Some(rest) = attempt.strip_prefix("attempt_") {
        (2, rest)
    } else if let Some(rest) = attempt.strip_prefix("task_") {
        (1, rest)
    } else if let Some(rest) = attempt.strip_prefix("container_") {
        // YARN containers: `container_[e<epoch>_]<rm start>_<application>_<attempt>_<n>`; the
        // application's numbers are its MapReduce job's.
        let epoch = rest
            .strip_prefix('e')
            .and_then(|r| r.split_once('_'))
            .filter(|(e, _)| e.bytes().all(|b| b.is_ascii_digit()));
        (2, epoch.map_or(rest, |(_, r)| r))
    } else {
        return None;
    };
    let mut underscores = 0;
    for (at, byte) in rest.bytes().enumerate() {
        if byte == b'_' {
            underscores += 1;
            if underscores == numbers {
                return Some(&rest[..at]);
            }
        }
    }
    (underscores == numbers - 1).then_some(rest)
}

/// A job id written in a message: `job_200808231712_0001` or, before 0.18, `job_0001`.
pub fn find_job(msg: &str) -> Option<&str> {
    let bytes = msg.as_bytes();
    let pos = JOB.find(bytes)?;
    let len = word_len(&bytes[pos..]);
    let id = &msg[pos..pos + len];
    let parts: Vec<&str> = id.split('_').collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    ((parts.len() == 3 && digits(parts[1]) && digits(parts[2])) || (parts.len() == 2 && digits(parts[1]))).then_some(id)
}

/// The first HDFS block id in a message, normalised to `blk_<id>`: the generation stamp
/// (`blk_1073741825_1001`) and the block pool (`BP-…:blk_…`) are dropped, so that every Hadoop
/// generation names a block the same way.
pub fn find_block(msg: &str) -> Option<&str> {
    let bytes = msg.as_bytes();
    let pos = BLOCK.find(bytes)?;
    let after_prefix = pos + "blk_".len();
    let first_digit = if bytes.get(after_prefix) == Some(&b'-') { after_prefix + 1 } else { after_prefix };
    let digits = digits_at(bytes, first_digit);
    (digits > 0).then(|| &msg[pos..first_digit + digits])
}

/// The host of an address written as `/10.251.30.6:50010`, `10.251.30.6:50010` or `/10.0.0.1`.
/// Byte-wise: the `char` patterns of `str::trim_*_matches` cost more than the address is long.
pub fn host_of_address(addr: &str) -> &str {
    let b = addr.as_bytes();
    let start = b.iter().take_while(|&&c| c == b'/').count();
    let end = start.max(b.len() - b.iter().rev().take_while(|&&c| matches!(c, b',' | b':' | b'.')).count());
    let addr = &addr[start..end];
    match memchr::memrchr(b':', addr.as_bytes()) {
        Some(colon) if addr.as_bytes()[colon + 1..].iter().all(u8::is_ascii_digit) => &addr[..colon],
        _ => addr,
    }
}

/// The address token that follows `key` in a message (`src: /a:1, dest: /b:2` → `/a:1`).
pub fn field_after<'a>(msg: &'a str, key: &str) -> Option<&'a str> {
    let pos = find(msg.as_bytes(), key.as_bytes())?;
    let rest = msg[pos + key.len()..].trim_ascii_start();
    let end = rest.bytes().position(|b| b == b' ' || b == b',').unwrap_or(rest.len());
    Some(&rest[..end]).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_agree_with_str() {
        for (s, sep) in [
            ("Received block blk_1 of size 9 from /10.0.0.1", " from "),
            ("a from b from c", " from "),
            ("x to y to z", " to "),
            (" to ", " to "),
            ("no separator", " to "),
            ("éé to ü", " to "),
            ("aaa", "aa"),
        ] {
            assert_eq!(split_at_first(s, sep), s.split_once(sep), "{s:?} / {sep:?}");
            assert_eq!(split_at_last(s, sep), s.rsplit_once(sep), "{s:?} / {sep:?}");
        }
    }

    #[test]
    fn attempts_of_both_generations() {
        let (a, rest) = find_attempt("LaunchTaskAction: task_0001_m_000003_0").unwrap();
        assert_eq!((a, rest), ("task_0001_m_000003_0", ""));
        assert_eq!(job_of_attempt(a).as_deref(), Some("job_0001"));
        let msg = "attempt_200808231712_0001_r_000002_0 Copying attempt_200808231712_0001_m_000001_0 output";
        let (a, rest) = find_attempt(msg).unwrap();
        assert_eq!(a, "attempt_200808231712_0001_r_000002_0");
        assert!(!is_map_attempt(a));
        assert_eq!(find_attempt(rest).unwrap().0, "attempt_200808231712_0001_m_000001_0");
        assert_eq!(job_of_attempt(a).as_deref(), Some("job_200808231712_0001"));
        assert_eq!(job_number_of_attempt("task_0001_m_000003_0"), Some("0001"));
        assert_eq!(job_number_of_attempt("attempt_200808231712_0001"), Some("200808231712_0001"));
        assert_eq!(job_number_of_attempt("attempt_0001"), None);
        assert_eq!(job_number_of_attempt("job_0001_m_1_0"), None);
        assert_eq!(job_number_of_attempt("container_1553147085057_0001_01_000002"), Some("1553147085057_0001"));
        assert_eq!(job_number_of_attempt("container_e17_1553147085057_0001_01_000002"), Some("1553147085057_0001"));
        assert_eq!(
            find_attempt("cliID: DFSClient_attempt_200909120624_0005_m_000000_0, srvID").unwrap().0,
            "attempt_200909120624_0005_m_000000_0"
        );
        assert!(find_attempt("task_tracker is up").is_none());
        assert!(find_attempt("attempt_x_1_m_1_0").is_none());
        // An id-like word that goes on is not one; the next that ends its word is.
        let (a, rest) = find_attempt("attempt_1_2_m_3_4x to attempt_1_2_m_3_5.").unwrap();
        assert_eq!((a, rest), ("attempt_1_2_m_3_5", "."));
        assert!(!is_attempt("attempt_1_2_m_3_4_5") && !is_attempt("task_1_x_3_4") && !is_attempt("task_1_m_3"));
        assert!(is_attempt("task_1_r_3_4") && is_attempt("attempt_200808231712_0001_m_000003_0"));
        for not_one in [
            "task_",
            "task__m_3_4",
            "task_1_m__4",
            "task_1_m_3_",
            "task_1_mm_3_4",
            "attempt_1_m_3_4",
            "task_1_m_3_4x",
            "task_a_m_3_4",
        ] {
            assert!(!is_attempt(not_one), "{not_one}");
        }
        assert_eq!(find(b"abcabd", b"abd"), Some(3));
        assert_eq!(find(b"ab", b"abc"), None);
    }

    #[test]
    fn jobs() {
        assert_eq!(find_job("Job job_200806011200_0042 completed"), Some("job_200806011200_0042"));
        assert_eq!(find_job("Killing job_0007"), Some("job_0007"));
        assert_eq!(find_job("job_x_1 and no job here"), None);
    }

    #[test]
    fn blocks_of_every_generation() {
        assert_eq!(find_block("Receiving block blk_-1608999687919862906 src:"), Some("blk_-1608999687919862906"));
        assert_eq!(find_block("blockid: blk_-4693506771893277444_1763, duration"), Some("blk_-4693506771893277444"));
        assert_eq!(find_block("BP-1-10.0.0.1-1400000000000:blk_1073741825_1001"), Some("blk_1073741825"));
        assert_eq!(find_block("blk_ alone"), None);
    }

    #[test]
    fn addresses() {
        assert_eq!(host_of_address("/10.251.30.6:50010"), "10.251.30.6");
        assert_eq!(host_of_address("10.251.30.85:50010:"), "10.251.30.85");
        assert_eq!(host_of_address("/10.251.90.64"), "10.251.90.64");
        assert_eq!(host_of_address("fp30.pdl.cmu.local."), "fp30.pdl.cmu.local");
        assert_eq!(host_of_address("node7:http"), "node7:http");
        for nothing in ["", "/", "/:", ".,:"] {
            assert_eq!(host_of_address(nothing), "", "{nothing:?}");
        }
        let msg = "src: /127.0.0.1:50012, dest: /127.0.0.1:53107, bytes: 10620380, op: HDFS_READ";
        assert_eq!(field_after(msg, "dest:"), Some("/127.0.0.1:53107"));
        assert_eq!(field_after(msg, "bytes:"), Some("10620380"));
        assert_eq!(field_after(msg, "nothing:"), None);
    }
}
