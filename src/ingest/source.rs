//! Reading a log file as lines: plain or gzip (by its magic bytes, whatever its name), from a
//! byte offset (where the last ingest of a growing file stopped) to its last complete line,
//! with CRLF endings, bounded memory for absurdly long lines, and a hash of what was read.

use std::fs::File;
use std::hash::Hasher as _;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use twox_hash::XxHash3_64;

/// Log lines longer than this are rejected; only their first [`RAW_KEPT`] bytes are kept. A
/// reader of another format may take longer ones ([`LineReader::with_max_line`]).
pub const MAX_LINE: usize = 64 * 1024;
/// How much of a rejected line the `rejects` table keeps.
pub const RAW_KEPT: usize = 4 * 1024;
/// Bytes read at a time: small enough that the buffer stays in a core's L2 cache, so the
/// kernel's copy into it is fast and the lines are parsed from the cache; with reads of a
/// MiB or more, that copy is a large share of parsing.
const CHUNK: usize = 128 << 10;
/// The least that lines are checked ahead after faults (see `LineReader::check_ahead`): a
/// faulty line then costs at most this much scanning beyond its own check, about as much.
const MIN_LOOKAHEAD: usize = 256;

/// One line, without its `\n` or `\r\n`.
pub struct Line<'a> {
    /// The line, or its first [`RAW_KEPT`] bytes when `overlong`. Private, as `checked` vouches
    /// for these bytes: see [`Line::bytes`].
    bytes: &'a [u8],
    /// 1-based number of the line in the file.
    pub number: u64,
    /// Byte offset of the line's start in the (decompressed) file.
    pub offset: u64,
    /// Longer than the reader takes: `len` bytes, of which `bytes` is the start.
    pub overlong: Option<u64>,
    /// The longest line the reader takes, for the reason an overlong line is rejected.
    max_line: usize,
    /// Found valid UTF-8 without NUL by [`LineReader::check_ahead`], with the lines around it.
    checked: bool,
}

/// A line as every format first sees it: text to parse, or a reason to reject it.
pub enum Checked<'a> {
    Text(&'a str),
    Rejected { reason: String, raw: String },
}

impl<'a> Line<'a> {
    /// The line, or its first [`RAW_KEPT`] bytes when `overlong`.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Text only if it is valid UTF-8, holds no NUL byte and is not overlong.
    pub fn check(&self) -> Checked<'a> {
        let reject =
            |reason: String| Checked::Rejected { reason, raw: String::from_utf8_lossy(self.bytes).into_owned() };
        if self.overlong.is_some() {
            return reject(format!("line longer than {} KiB", self.max_line / 1024));
        }
        if self.checked {
            // SAFETY: `check_ahead` validated a run of whole lines that holds this one, a line
            // is cut from it at ASCII bytes (`\n`, `\r`), which are never inside a character,
            // and `bytes` is private, set only by `emit` beside `checked`.
            return Checked::Text(unsafe { std::str::from_utf8_unchecked(self.bytes) });
        }
        // simdutf8: a cheaper check than std's, made on every line not checked ahead.
        match simdutf8::basic::from_utf8(self.bytes) {
            Ok(text) if memchr::memchr(0, self.bytes).is_none() => Checked::Text(text),
            Ok(_) => reject("NUL byte in line".into()),
            Err(_) => reject("invalid UTF-8".into()),
        }
    }
}

pub fn is_gzip(path: &Path) -> io::Result<bool> {
    let mut magic = [0u8; 2];
    let mut file = File::open(path)?;
    let n = file.read(&mut magic)?;
    Ok(n == 2 && magic == [0x1f, 0x8b])
}

/// A read error as a rejected line: see [`LineReader::cut`].
pub struct Cut {
    pub number: u64,
    pub offset: u64,
    pub raw: String,
    pub reason: String,
    /// For the file's `error` in `ingests`.
    pub message: String,
}

/// Streams the lines of `[start, end)` of a file. `end` is known for plain files (the last
/// complete line when the ingest began, so a line being written is left for the next run) and
/// unknown for gzip files, read to their end.
pub struct LineReader {
    input: Box<dyn Read + Send>,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[pos..filled]`.
    pos: usize,
    filled: usize,
    eof: bool,
    offset: u64,
    next_number: u64,
    remaining: Option<u64>,
    hasher: XxHash3_64,
    /// `buf[..hashed]` is in `hasher`; consumed bytes after it are hashed when the buffer is
    /// refilled, a window at a time rather than a line at a time.
    hashed: usize,
    /// The start and length of the overlong line last skipped.
    overlong_head: Vec<u8>,
    overlong_len: u64,
    /// Where `checked_to > pos`, `buf[pos..checked_to]` is whole lines of valid UTF-8 without
    /// NUL (see `check_ahead`).
    checked_to: usize,
    /// How far `check_ahead` looks: halved after each look that found a fault, down to
    /// [`MIN_LOOKAHEAD`], doubled after each that found none, up to [`CHUNK`].
    lookahead: usize,
    /// Lines longer than this are skipped and handed out `overlong`.
    max_line: usize,
}

impl LineReader {
    /// Opens `path` at `start` (bytes of decompressed content) with `first_number` the number of
    /// the first line read. For a plain file, reading stops at `end`.
    pub fn open(path: &Path, gzip: bool, start: u64, end: Option<u64>, first_number: u64) -> io::Result<Self> {
        let mut file = File::open(path)?;
        // A small plain file gets a buffer of its size: a zeroed CHUNK per file would cost more
        // than parsing a cluster's thousands of short attempt logs. Longer lines grow it.
        let capacity = match gzip {
            true => CHUNK,
            false => {
                usize::try_from(file.metadata()?.len().saturating_sub(start) + 1).map_or(CHUNK, |len| len.min(CHUNK))
            }
        };
        let input: Box<dyn Read + Send> = if gzip {
            let mut decoder = MultiGzDecoder::new(io::BufReader::with_capacity(CHUNK, file));
            io::copy(&mut (&mut decoder).take(start), &mut io::sink())?;
            Box::new(decoder)
        } else {
            file.seek(SeekFrom::Start(start))?;
            Box::new(file)
        };
        Ok(LineReader {
            input,
            buf: vec![0; capacity],
            pos: 0,
            filled: 0,
            eof: false,
            offset: start,
            next_number: first_number,
            remaining: end.map(|end| end.saturating_sub(start)),
            hasher: XxHash3_64::with_seed(0),
            hashed: 0,
            overlong_head: Vec::new(),
            overlong_len: 0,
            checked_to: 0,
            lookahead: CHUNK,
            max_line: MAX_LINE,
        })
    }

    /// Takes lines of up to `max_line` bytes: a format whose records are lines that may be
    /// long (a job history event with its counters) sets its own bound.
    pub fn with_max_line(mut self, max_line: usize) -> Self {
        self.max_line = max_line;
        self
    }

    /// Bytes consumed so far: where the next ingest of this file starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Number the next line would get.
    pub fn next_number(&self) -> u64 {
        self.next_number
    }

    /// What a read error (a truncated gzip stream) cut: the line it counts as, rejected with
    /// the bytes that had no line end yet. What decompressed before it is kept.
    pub fn cut(&self, display: &str, error: &io::Error) -> Cut {
        Cut {
            number: self.next_number,
            offset: self.offset,
            raw: String::from_utf8_lossy(&self.buf[self.pos..self.filled]).into_owned(),
            reason: format!("read error: {error}"),
            message: format!("{display}: read error after line {}: {error}", self.next_number - 1),
        }
    }

    /// Hash of every byte consumed so far (the lines returned, with their line ends).
    pub fn hash(&self) -> u64 {
        let mut hasher = self.hasher.clone();
        hasher.write(&self.buf[self.hashed..self.pos]);
        hasher.finish()
    }

    /// Reads more input behind the unconsumed bytes; false at the end of input.
    fn fill(&mut self) -> io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.hasher.write(&self.buf[self.hashed..self.pos]);
            self.hashed = 0;
            self.buf.copy_within(self.pos..self.filled, 0);
            self.filled -= self.pos;
            self.checked_to = self.checked_to.saturating_sub(self.pos);
            self.pos = 0;
        }
        if self.filled == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let mut want = self.buf.len() - self.filled;
        if let Some(remaining) = self.remaining {
            want = want.min(usize::try_from(remaining).unwrap_or(usize::MAX));
        }
        if want == 0 {
            self.eof = true;
            return Ok(false);
        }
        let n = self.input.read(&mut self.buf[self.filled..self.filled + want])?;
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        if let Some(remaining) = self.remaining.as_mut() {
            *remaining -= n as u64;
        }
        self.filled += n;
        Ok(true)
    }

    /// The next line, or None at the end. A last line without `\n` is returned only for gzip
    /// input (a plain file's is still being written); an I/O error (a truncated gzip stream)
    /// comes after every complete line before it.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        let mut searched = 0;
        loop {
            let window = &self.buf[self.pos + searched..self.filled];
            if let Some(nl) = memchr::memchr(b'\n', window) {
                let start = self.pos;
                let end = self.pos + searched + nl;
                self.pos = end + 1;
                return Ok(Some(self.emit(start, end, end + 1 - start)));
            }
            searched = self.filled - self.pos;
            if searched > self.max_line {
                self.skip_overlong()?;
                return Ok(Some(self.emit_overlong()));
            }
            if !self.fill()? {
                // A last line without `\n`: the end of a gzip stream, or of a plain file read
                // to its end because it has stopped growing (a growing one is read to its last
                // `\n` only, see [`last_line_end`]).
                if self.pos < self.filled {
                    let (start, end) = (self.pos, self.filled);
                    self.pos = end;
                    return Ok(Some(self.emit(start, end, end - start)));
                }
                return Ok(None);
            }
        }
    }

    fn emit(&mut self, start: usize, end: usize, consumed: usize) -> Line<'_> {
        if end >= self.checked_to {
            self.check_ahead(start);
        }
        let checked = end < self.checked_to;
        let mut bytes = &self.buf[start..end];
        if let Some(stripped) = bytes.strip_suffix(b"\r") {
            bytes = stripped;
        }
        let max_line = self.max_line;
        let line = Line { bytes, number: self.next_number, offset: self.offset, overlong: None, max_line, checked };
        self.next_number += 1;
        self.offset += consumed as u64;
        line
    }

    /// Checks the whole lines buffered from `start` (a line's start) for UTF-8 and NUL bytes at
    /// once, up to the first fault: two calls per line cost more than their short scans. The
    /// faulty line itself, a line longer than the look ahead and a last line without `\n` are
    /// left to the per-line check; the line after a faulty one starts a new look. Not inlined:
    /// on clean input it runs about once a read window, and inlined it would keep `emit`, which
    /// runs once a line, from being inlined.
    #[inline(never)]
    fn check_ahead(&mut self, start: usize) {
        let buffered = &self.buf[start..self.filled.min(start + self.lookahead)];
        let nul = memchr::memchr(0, buffered);
        let before_nul = &buffered[..nul.unwrap_or(buffered.len())];
        let (clean, invalid) = match simdutf8::compat::from_utf8(before_nul) {
            Ok(_) => (before_nul.len(), false),
            // With no `error_len`, a character cut by the end of what was looked at (its line is
            // not whole yet: no fault) or by a NUL (a fault, as `nul` says).
            Err(error) => (error.valid_up_to(), error.error_len().is_some()),
        };
        // Back to the end of the last whole line before the fault.
        let whole_lines = memchr::memrchr(b'\n', &buffered[..clean]).map_or(0, |nl| nl + 1);
        self.checked_to = start + whole_lines;
        // A file of faulty lines would otherwise be scanned to the buffer's end for each line.
        self.lookahead = match nul.is_some() || invalid {
            true => (self.lookahead / 2).max(MIN_LOOKAHEAD),
            false => (self.lookahead * 2).min(CHUNK),
        };
    }

    /// Consumes an overlong line up to its `\n`, keeping its head, so memory stays bounded.
    fn skip_overlong(&mut self) -> io::Result<()> {
        self.overlong_head = self.buf[self.pos..self.pos + RAW_KEPT].to_vec();
        let mut len = 0u64;
        loop {
            let window = &self.buf[self.pos..self.filled];
            if let Some(nl) = memchr::memchr(b'\n', window) {
                len += nl as u64 + 1;
                self.pos += nl + 1;
                break;
            }
            len += window.len() as u64;
            self.pos = self.filled;
            if !self.fill()? {
                break;
            }
        }
        self.overlong_len = len;
        Ok(())
    }

    fn emit_overlong(&mut self) -> Line<'_> {
        let len = self.overlong_len;
        let line = Line {
            bytes: &self.overlong_head,
            number: self.next_number,
            offset: self.offset,
            overlong: Some(len),
            max_line: self.max_line,
            checked: false,
        };
        self.next_number += 1;
        self.offset += len;
        line
    }
}

/// A plain file not written for this long has stopped growing: its last line is read even
/// without a `\n`, which a daemon that died mid-line never writes.
pub const SETTLED: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Where this run stops reading a plain file of `size` bytes: its end once it has settled, else
/// the end of its last complete line, so that a half-written line waits for the next run.
pub fn read_end(path: &Path, size: u64, modified: io::Result<std::time::SystemTime>) -> io::Result<u64> {
    let settled = modified.ok().and_then(|t| t.elapsed().ok()).is_some_and(|age| age >= SETTLED);
    if settled { Ok(size) } else { last_line_end(path, size) }
}

/// Where a plain file's last complete line ends, at or before `size`.
fn last_line_end(path: &Path, size: u64) -> io::Result<u64> {
    let mut file = File::open(path)?;
    let mut end = size;
    let mut buf = vec![0u8; 64 * 1024];
    while end > 0 {
        let from = end.saturating_sub(buf.len() as u64);
        let len = (end - from) as usize;
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut buf[..len])?;
        if let Some(nl) = memchr::memrchr(b'\n', &buf[..len]) {
            return Ok(from + nl as u64 + 1);
        }
        end = from;
    }
    Ok(0)
}

/// Lines in the first `upto` bytes of a file: the number the next line of a resumed ingest gets,
/// less one.
pub fn count_lines(path: &Path, gzip: bool, upto: u64) -> io::Result<u64> {
    let file = File::open(path)?;
    let input: Box<dyn Read> =
        if gzip { Box::new(MultiGzDecoder::new(io::BufReader::new(file))) } else { Box::new(file) };
    let mut input = input.take(upto);
    let mut buf = vec![0u8; CHUNK];
    let mut lines = 0;
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            return Ok(lines);
        }
        lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
    }
}

/// The length a gzip file's trailer gives (ISIZE: the last member's uncompressed bytes mod
/// 2^32; a single-member file's whole length below 4 GiB).
pub fn gzip_length(path: &Path) -> Option<u32> {
    let mut file = File::open(path).ok()?;
    file.seek(SeekFrom::End(-4)).ok()?;
    let mut trailer = [0u8; 4];
    file.read_exact(&mut trailer).ok()?;
    Some(u32::from_le_bytes(trailer))
}

/// Whether a gzip file holds another whole line past `offset`: false where it ends there, or is
/// cut short before the line's end (the rest of a truncated file, already rejected once).
pub fn gzip_continues_after(path: &Path, offset: u64) -> bool {
    let Ok(file) = File::open(path) else { return false };
    let mut input = MultiGzDecoder::new(io::BufReader::new(file));
    if !io::copy(&mut (&mut input).take(offset), &mut io::sink()).is_ok_and(|n| n == offset) {
        return false;
    }
    let mut buf = vec![0u8; CHUNK];
    loop {
        match input.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) if memchr::memchr(b'\n', &buf[..n]).is_some() => return true,
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A line read: its offset, number, text and `overlong`.
    type Read = (u64, u64, String, Option<u64>);

    fn lines(path: &Path, gzip: bool, start: u64, end: Option<u64>) -> (Vec<Read>, Option<String>) {
        let mut reader = LineReader::open(path, gzip, start, end, 1).unwrap();
        let mut out = Vec::new();
        loop {
            match reader.next_line() {
                Ok(Some(l)) => {
                    out.push((l.number, l.offset, String::from_utf8_lossy(l.bytes()).into_owned(), l.overlong))
                }
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
    }

    #[test]
    fn crlf_offsets_and_the_unfinished_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        std::fs::write(&path, b"one\r\ntwo\n\nthree-being-writ").unwrap();
        let end = last_line_end(&path, 26).unwrap();
        assert_eq!(end, 10);
        let (got, err) = lines(&path, false, 0, Some(end));
        assert_eq!(err, None);
        let got: Vec<_> = got.iter().map(|(n, o, s, _)| (*n, *o, s.as_str())).collect();
        assert_eq!(got, vec![(1, 0, "one"), (2, 5, "two"), (3, 9, "")]);
        // Resuming from byte 5 reads the same tail.
        let (got, _) = lines(&path, false, 5, Some(end));
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn overlong_lines_are_cut_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.log");
        let mut content = vec![b'x'; 1 << 20];
        content.extend_from_slice(b"\nafter\n");
        std::fs::write(&path, &content).unwrap();
        let (got, _) = lines(&path, false, 0, Some(content.len() as u64));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].2.len(), RAW_KEPT);
        assert_eq!(got[0].3, Some((1 << 20) + 1));
        assert_eq!((got[1].1, got[1].2.as_str()), ((1 << 20) + 1, "after"));
    }

    #[test]
    fn the_hash_covers_exactly_the_bytes_consumed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("many.log");
        // Several read windows, a CRLF line and an overlong line across window boundaries.
        let mut content = Vec::new();
        for i in 0..40_000 {
            content.extend_from_slice(format!("2008-08-23 17:12:32,466 INFO a.B: line {i}\n").as_bytes());
            if i == 20_000 {
                content.extend_from_slice(&vec![b'y'; 300_000]);
                content.extend_from_slice(b"\r\n");
            }
        }
        std::fs::write(&path, &content).unwrap();
        let whole = |bytes: &[u8]| {
            let mut hasher = XxHash3_64::with_seed(0);
            hasher.write(bytes);
            hasher.finish()
        };
        let mut reader = LineReader::open(&path, false, 0, Some(content.len() as u64), 1).unwrap();
        for _ in 0..25_000 {
            reader.next_line().unwrap().unwrap();
        }
        assert_eq!(reader.hash(), whole(&content[..reader.offset() as usize]));
        while reader.next_line().unwrap().is_some() {}
        assert_eq!(reader.offset(), content.len() as u64);
        assert_eq!(reader.hash(), whole(&content));
    }

    /// Lines checked a buffer at a time must get the verdicts std gives each line on its own:
    /// faulty lines at every distance from each other and from the read windows' edges, and
    /// two-byte characters cut by those edges.
    #[test]
    fn checked_a_buffer_at_a_time_as_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mixed.log");
        let mut content = Vec::new();
        for i in 0..12_000u32 {
            content.extend_from_slice(format!("{i} é ").as_bytes());
            content.extend(std::iter::repeat_n(b'x', (i * 7919 % 251) as usize));
            match i % 53 {
                // A run of faulty lines, where the look ahead shrinks, and then grows again.
                _ if (6000..6300).contains(&i) => content.push(0xe9),
                0 if i % 3 == 0 => content.push(0),
                1 | 2 if i % 5 == 0 => content.push(0xff),
                // The first byte of `é` without its second, before the line's end or a NUL.
                3 if i % 7 == 0 => content.push(0xc3),
                4 if i % 9 == 0 => content.extend_from_slice(b"\xc3\0"),
                _ => {}
            }
            content.extend_from_slice(if i % 11 == 0 { b"\r\n" } else { b"\n" });
        }
        std::fs::write(&path, &content).unwrap();
        let mut reader = LineReader::open(&path, false, 0, Some(content.len() as u64), 1).unwrap();
        let (mut lines, mut nul, mut invalid) = (0, 0, 0);
        while let Some(line) = reader.next_line().unwrap() {
            let expected = match std::str::from_utf8(line.bytes()) {
                Ok(text) if !line.bytes().contains(&0) => Ok(text.to_string()),
                Ok(_) => Err("NUL byte in line"),
                Err(_) => Err("invalid UTF-8"),
            };
            let got = match line.check() {
                Checked::Text(text) => Ok(text.to_string()),
                Checked::Rejected { reason, .. } => {
                    Err(if reason.starts_with("NUL") { "NUL byte in line" } else { "invalid UTF-8" })
                }
            };
            assert_eq!(got, expected, "line {}", line.number);
            nul += usize::from(expected == Err("NUL byte in line"));
            invalid += usize::from(expected == Err("invalid UTF-8"));
            lines += 1;
        }
        // 1.6 MB, a dozen read windows. Counted apart, in Python, over i in 0..12000 by the
        // rules above, the run first: 74 lines with a NUL and 447 with invalid UTF-8 (a cut `é`
        // before a NUL is invalid UTF-8 first, as std says).
        assert_eq!((lines, nul, invalid), (12_000, 74, 447));
    }

    #[test]
    fn gzip_whole_and_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        for i in 0..20_000 {
            writeln!(gz, "line {i}").unwrap();
        }
        let bytes = gz.finish().unwrap();
        std::fs::write(&path, &bytes).unwrap();
        assert!(is_gzip(&path).unwrap());
        let (got, err) = lines(&path, true, 0, None);
        assert_eq!((got.len(), err), (20_000, None));
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let (got, err) = lines(&path, true, 0, None);
        assert!(got.len() < 20_000);
        assert!(err.is_some(), "a truncated stream must end in an error");
    }
}
