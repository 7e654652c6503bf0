//! Files of the record formats — sysstat captures and exports ([`super::sadf`]) and Hadoop job
//! history ([`super::jobhistory`]) — found among the inputs and read one at a time, line by
//! line, with the accounting of log files: every line is parsed, rejected with a reason or
//! skipped on purpose, and counted in the file's `ingests` row.
//!
//! Unlike logs these files are not paired across rotations, so each is its own unit of work.
//! JSON exports and history files are read whole, once (a JSON document or a job's records
//! cannot be resumed in the middle). `sadf -d`/`-dh` text a cron job appends to is resumed
//! after its last complete line, like a log; binary sa files, which sadc keeps appending to,
//! are turned into text by `sadf` and resumed in that text (see [`plan`]). A resumed text
//! parser is first shown the headers before the resume point ([`LineParser::replay`]).

use std::fs::File;
use std::hash::Hasher as _;
use std::io::{BufRead, BufReader, Read as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use twox_hash::XxHash3_64;

use super::discover::{Hints, Refusal};
use super::source::{Checked, LineReader, MAX_LINE, is_gzip, read_end};
use super::stream::{Batcher, FileReport, Output, Progress, RunContext, append_reject};
use super::{held_under_either_key, jobhistory, sadf, slot, unchanged};
use crate::warehouse::tables::{Rows, Table};
use crate::warehouse::{TableAppender, file_app_id, held_by_tables};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `sadf -d` (grouped by activity) or `sadf -dh` (one row per sample) text.
    SadfText,
    /// `sadf -j`.
    SadfJson,
    /// A binary sa file written by sadc, read through the machine's `sadf`.
    SaBinary,
    /// Hadoop 0.18–1.x text job history, alone or concatenated with `!!FILE=…!!` markers.
    HistoryText,
    /// Hadoop 2/3 `.jhist` (Avro-JSON).
    Jhist,
}

impl Format {
    /// The `layout` column of the file's `ingests` row.
    pub fn name(self) -> &'static str {
        match self {
            Format::SadfText => "sadf -d",
            Format::SadfJson => "sadf -j",
            Format::SaBinary => "sa (sadf -dh)",
            Format::HistoryText => "job history",
            Format::Jhist => "jhist",
        }
    }

    /// The longest line read as one: a job history event holds every counter of its job or
    /// task, and a large job's run far past a log line's bound; memory bounds it still.
    fn max_line(self) -> usize {
        match self {
            Format::HistoryText | Format::Jhist => 16 << 20,
            Format::SadfText | Format::SadfJson | Format::SaBinary => MAX_LINE,
        }
    }
}

/// A record file ready to read.
#[derive(Clone, Debug)]
pub struct RecordFile {
    pub path: PathBuf,
    pub display: String,
    pub size: u64,
    pub gzip: bool,
    pub format: Format,
    /// Where a plain `sadf` text export's last complete line ends: what this run reads of it.
    pub end: Option<u64>,
    /// Identifies the content whatever the file is called: a hash of its format and first lines
    /// (of a binary sa file: of its header, which sadc writes once when it creates the file).
    pub key: String,
    /// The key an older version gave the file, honoured where the tables hold it.
    pub legacy_key: Option<String>,
}

/// Lines (or, for sa files, bytes) hashed into a file's key.
const KEY_LINES: usize = 16;
const KEY_BYTES: usize = 1024;

/// Tells a record file by its first bytes and lines, whatever its name; None for anything else
/// (a log file, or a file for the log path to refuse).
pub fn classify(path: &Path) -> Option<Result<RecordFile, Refusal>> {
    let display = path.display().to_string();
    let meta = std::fs::metadata(path).ok()?;
    let size = meta.len();
    let refuse = |reason: String| Refusal { display: display.clone(), size, reason, skipped: false };
    let gzip = is_gzip(path).ok()?;
    let mut hasher = XxHash3_64::with_seed(0);
    if !gzip && sadf::has_sa_magic(path) {
        let mut head = Vec::new();
        if let Err(e) = std::fs::File::open(path).and_then(|f| f.take(KEY_BYTES as u64).read_to_end(&mut head)) {
            return Some(Err(refuse(format!("cannot read: {e}"))));
        }
        hasher.write(Format::SaBinary.name().as_bytes());
        hasher.write(&head);
        let key = format!("{:016x}", hasher.finish());
        let format = Format::SaBinary;
        return Some(Ok(RecordFile {
            path: path.to_path_buf(),
            display,
            size,
            gzip,
            format,
            end: None,
            key,
            legacy_key: None,
        }));
    }
    let mut reader = LineReader::open(path, gzip, 0, None, 1).ok()?;
    // The first lines, and where each ends.
    let (mut first, mut ends) = (Vec::new(), Vec::new());
    while first.len() < KEY_LINES {
        match reader.next_line() {
            Ok(Some(line)) => first.push(String::from_utf8_lossy(line.bytes()).into_owned()),
            _ => break,
        }
        ends.push(reader.offset());
    }
    let head = first.iter().map(String::as_str).find(|l| !l.trim().is_empty())?;
    let format = if sadf::is_text_export(head) {
        Format::SadfText
    } else if sadf::is_json_export(&first) {
        Format::SadfJson
    } else if head.trim_end() == "Avro-Json" {
        Format::Jhist
    } else if jobhistory::is_text_history(head) {
        Format::HistoryText
    } else {
        return None;
    };
    let end = match format {
        Format::SadfText if !gzip => match read_end(path, size, meta.modified()) {
            Ok(end) => Some(end),
            Err(e) => return Some(Err(refuse(format!("cannot read: {e}")))),
        },
        _ => None,
    };
    // A growing export keeps its key once its first sample is whole: its headers and that
    // sample name it, not lines still to come.
    let key_lines = match format {
        Format::SadfText => {
            let whole = ends.iter().take_while(|&&e| end.is_none_or(|end| e <= end)).count();
            let through_sample = first[..whole].iter().position(|l| !l.starts_with('#')).map_or(whole, |at| at + 1);
            &first[..through_sample]
        }
        _ => &first[..],
    };
    let hash_of = |lines: &[String]| {
        let mut hasher = hasher.clone();
        hasher.write(format.name().as_bytes());
        for line in lines {
            hasher.write(line.as_bytes());
            hasher.write(b"\n");
        }
        format!("{:016x}", hasher.finish())
    };
    let key = hash_of(key_lines);
    // Before exports were resumed, their key was their first 16 lines.
    let legacy_key = (key_lines.len() < first.len()).then(|| hash_of(&first));
    Some(Ok(RecordFile { path: path.to_path_buf(), display, size, gzip, format, end, key, legacy_key }))
}

/// A record file with where to start and how far each table (by [`slot`]) holds it already.
#[derive(Clone, Debug)]
pub struct PlannedRecord {
    pub file: RecordFile,
    pub start: u64,
    held_below: Vec<u64>,
}

/// The application transaction that says how many bytes of a binary sa file were converted:
/// its text offset alone cannot tell whether the file grew since.
pub fn sa_bytes_app_id(cluster: &str, key: &str) -> String {
    format!("{}/sa-bytes", file_app_id(cluster, key))
}

/// Where to start a record file, or None when every table holds it (for a binary sa file: at
/// its present size).
pub async fn plan(file: &RecordFile, appenders: &[TableAppender], cluster: &str) -> Result<Option<PlannedRecord>> {
    let mut file = file.clone();
    let held = held_under_either_key(appenders, cluster, &mut file.key, file.legacy_key.take());
    let sa_bytes = match file.format {
        Format::SaBinary => held_by_tables(appenders, &sa_bytes_app_id(cluster, &file.key)),
        _ => Vec::new(),
    };
    let held_below: Vec<u64> = held.iter().map(|h| h.unwrap_or(0)).collect();
    let start = held_below.iter().copied().min().unwrap_or(0);
    let done = match (file.format, file.end) {
        (Format::SaBinary, _) => sa_bytes.iter().all(|b| b.is_some_and(|b| b >= file.size)),
        (_, Some(end)) => start >= end,
        _ => held.iter().all(Option::is_some),
    };
    if done {
        return Ok(None);
    }
    Ok(Some(PlannedRecord { file, start, held_below }))
}

/// Where a parser's rows and verdicts go: batches per table, the file's rejects and counts.
pub struct Sink<'a> {
    ctx: &'a RunContext,
    planned: &'a PlannedRecord,
    batchers: Vec<Batcher>,
    pub report: FileReport,
    emit: &'a mut dyn FnMut(Output),
    /// Lines an earlier run counted are being shown again ([`LineParser::replay`]).
    replaying: bool,
}

impl Sink<'_> {
    /// The rows of `table` and partition `date` to append a record from the line at `offset`
    /// to, or None in a dry run and where the table holds that line already.
    pub fn rows(&mut self, table: Table, date: i32, offset: u64) -> Option<Target<'_>> {
        if !self.wants(table, offset) {
            return None;
        }
        let at = slot(table);
        Some(Target {
            rows: self.batchers[at].rows_for(date, self.emit),
            file: &self.planned.file.display,
            ingest_id: &self.ctx.ingest_id,
        })
    }

    /// Whether rows of `table` from the line at `offset` are to be written: not in a dry run,
    /// nor where the table holds that line already.
    pub fn wants(&self, table: Table, offset: u64) -> bool {
        !self.ctx.dry_run && offset >= self.planned.held_below[slot(table)]
    }

    /// Rows a parser built whole (after asking [`Sink::wants`]), handed to the writer as they are.
    pub fn emit_rows(&mut self, rows: Rows) {
        if !rows.is_empty() {
            (self.emit)(Output::Rows(rows));
        }
    }

    pub fn parsed(&mut self, lines: u64) {
        if !self.replaying {
            self.report.lines_parsed += lines;
        }
    }

    pub fn skipped(&mut self, lines: u64) {
        if !self.replaying {
            self.report.lines_skipped += lines;
        }
    }

    /// A line that could not be read, with why; `raw` is cut to 4 KiB in `rejects`.
    pub fn reject(&mut self, line: u64, offset: u64, reason: &str, raw: &str) {
        if self.replaying {
            return;
        }
        self.report.lines_rejected += 1;
        *self.report.rejects_by_reason.entry(reason.to_string()).or_default() += 1;
        if let Some(t) = self.rows(Table::Rejects, self.ctx.run_date, offset) {
            append_reject(t.rows, t.ingest_id, t.file, line, offset, reason, raw);
        }
    }
}

/// Where one row goes, with the values every row of a record table carries.
pub struct Target<'a> {
    pub rows: &'a mut Rows,
    pub file: &'a str,
    pub ingest_id: &'a str,
}

/// A format's reader: sees every line once, in order, and says what became of it through the
/// sink (`parsed`, `skipped` or `reject`, possibly later for lines of an unfinished record).
pub trait LineParser {
    fn line(&mut self, sink: &mut Sink, number: u64, offset: u64, text: &str);
    /// The end of the file: records still open are finished or rejected.
    fn finish(&mut self, sink: &mut Sink);
    /// A line before where a resumed file is read from, read and counted by an earlier run:
    /// what the parser needs of it to read the rest (a `sadf` header), and nothing written.
    fn replay(&mut self, _sink: &mut Sink, _number: u64, _offset: u64, _text: &str) {}
    /// Whether it is shown every line, even one the line check rejects (too long, not UTF-8),
    /// as its first bytes: a reader that read the file another way accounts for its lines.
    fn whole_lines(&self) -> bool {
        false
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Reads one record file into rows, then emits its report.
pub fn read(ctx: &RunContext, hints: &Hints, planned: &PlannedRecord, emit: &mut dyn FnMut(Output)) {
    let file = &planned.file;
    let mut report = FileReport {
        host: hints.host.clone(),
        layout: Some(file.format.name()),
        ..FileReport::begin(&file.display, &file.key, file.size, planned.start)
    };
    // A binary file is first turned into text in full, so that a file sadf cannot read leaves
    // no row behind; the temporary text is removed when `converted` goes.
    let converted = match file.format {
        Format::SaBinary => match sadf::convert(&file.path) {
            Ok(converted) => {
                report.error = converted.warning.as_ref().map(|w| format!("{}: {w}", file.display));
                Some(converted)
            }
            Err(reason) => return give_up(report, "refused", format!("{}: {reason}", file.display), emit),
        },
        _ => None,
    };
    let (path, gzip) = match &converted {
        Some(c) => (c.text_path(), false),
        None => (file.path.as_path(), file.gzip),
    };
    let mut sink = Sink {
        ctx,
        planned,
        batchers: Table::ALL.iter().map(|t| Batcher::new(*t)).collect(),
        report,
        emit,
        replaying: false,
    };
    let mut parser: Box<dyn LineParser> = match file.format {
        Format::SadfText | Format::SaBinary => Box::new(sadf::TextParser::new(hints, ctx.zone)),
        // A minified export is one line longer than a line may be: it is read as a stream of
        // records first, then its lines are accounted for.
        Format::SadfJson if has_long_line(path, gzip).unwrap_or(false) => {
            let document = sadf::read_document(open_text(path, gzip), hints, ctx.zone, &mut sink);
            if let Some(why) = document.broken().filter(|_| document.records + document.resumed > 0) {
                let (before, after) = (document.records, document.resumed);
                let read = match after {
                    0 => format!("the {before} records before it were read"),
                    _ => format!("the {before} records before it and {after} after it were read"),
                };
                sink.report.error = Some(format!("{}: {why}; {read}", file.display));
            }
            Box::new(document)
        }
        Format::SadfJson => Box::new(sadf::JsonParser::new(hints, ctx.zone)),
        Format::HistoryText => Box::new(jobhistory::TextParser::default()),
        Format::Jhist => Box::new(jobhistory::JhistParser::default()),
    };
    // A resumed file's earlier lines are read once: shown to the parser, and counted for the
    // number its next line gets.
    let first_number = if planned.start > 0 {
        replay(parser.as_mut(), &mut sink, path, gzip, planned.start, file.format.max_line())
    } else {
        Ok(1)
    };
    let opened = first_number.and_then(|number| {
        Ok(LineReader::open(path, gzip, planned.start, file.end, number)?.with_max_line(file.format.max_line()))
    });
    let mut source = match opened {
        Ok(source) => source,
        Err(e) => return give_up(sink.report, "failed", format!("{}: cannot read: {e}", file.display), emit),
    };
    let mut progress = Progress::new(ctx, planned.start);
    loop {
        let line = match source.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                let cut = source.cut(&file.display, &e);
                sink.report.lines_read += 1;
                sink.report.error = Some(cut.message);
                sink.reject(cut.number, cut.offset, &cut.reason, &cut.raw);
                break;
            }
        };
        sink.report.lines_read += 1;
        let (number, offset) = (line.number, line.offset);
        progress.advance(offset);
        match line.check() {
            Checked::Text(text) => parser.line(&mut sink, number, offset, text),
            Checked::Rejected { raw, .. } if parser.whole_lines() => parser.line(&mut sink, number, offset, &raw),
            Checked::Rejected { reason, raw } => sink.reject(number, offset, &reason, &raw),
        }
    }
    parser.finish(&mut sink);
    let Sink { mut batchers, mut report, emit, .. } = sink;
    for batcher in &mut batchers {
        batcher.flush(emit);
    }
    report.offset_end = source.offset();
    report.waiting_bytes = file.end.map_or(0, |end| file.size.saturating_sub(end));
    report.hash = Some(format!("{:016x}", source.hash()));
    report.finished_ms = now_ms();
    progress.publish(report.offset_end);
    emit(Output::Report(Box::new(report)));
}

/// Shows the parser the lines before `start`, uncounted (see [`LineParser::replay`]); the
/// number of the line at `start`.
fn replay(
    parser: &mut dyn LineParser,
    sink: &mut Sink,
    path: &Path,
    gzip: bool,
    start: u64,
    max_line: usize,
) -> std::io::Result<u64> {
    let mut earlier = LineReader::open(path, gzip, 0, Some(start), 1)?.with_max_line(max_line);
    sink.replaying = true;
    while let Some(line) = earlier.next_line()? {
        if let Checked::Text(text) = line.check() {
            parser.replay(sink, line.number, line.offset, text);
        }
    }
    sink.replaying = false;
    Ok(earlier.next_number())
}

/// A file's decompressed bytes, buffered.
fn open_text(path: &Path, gzip: bool) -> std::io::Result<Box<dyn BufRead>> {
    let file = File::open(path)?;
    Ok(if gzip {
        Box::new(BufReader::with_capacity(1 << 16, flate2::read::MultiGzDecoder::new(BufReader::new(file))))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, file))
    })
}

/// Whether a line of the file is longer than the line reader takes ([`MAX_LINE`]).
fn has_long_line(path: &Path, gzip: bool) -> std::io::Result<bool> {
    let mut input = open_text(path, gzip)?;
    let mut run = 0;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(false);
        }
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', chunk) {
            if run + (end - start) > MAX_LINE {
                return Ok(true);
            }
            (run, start) = (0, end + 1);
        }
        run += chunk.len() - start;
        if run > MAX_LINE {
            return Ok(true);
        }
        let n = chunk.len();
        input.consume(n);
    }
}

/// Reports a file that could not be read at all, and why.
fn give_up(mut report: FileReport, status: &'static str, error: String, emit: &mut dyn FnMut(Output)) {
    report.status = status;
    report.error = Some(error);
    report.finished_ms = now_ms();
    emit(Output::Report(Box::new(report)));
}

/// Plans every record file among `files`, reporting the unchanged ones.
pub async fn plan_all(
    files: Vec<RecordFile>,
    appenders: &[TableAppender],
    cluster: &str,
    reports: &mut Vec<FileReport>,
) -> Result<Vec<PlannedRecord>> {
    let mut planned = Vec::new();
    for file in files {
        match plan(&file, appenders, cluster).await.with_context(|| format!("{}: cannot plan", file.display))? {
            Some(p) => planned.push(p),
            None => reports.push(unchanged(&file.display, file.size)),
        }
    }
    Ok(planned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::kernel::Transaction;

    /// An export's key is its header and first sample: it stays as the file grows. One read by
    /// an older version, under the key of its first 16 lines, is not read again.
    #[tokio::test]
    async fn an_export_keeps_its_key_as_it_grows_and_its_older_key_is_honoured() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let export = dir.path().join("h1.csv");
        let row = |s: u32| format!("h1;1;2008-08-23 17:12:{s:02} UTC;3\n");
        let mut text = "# hostname;interval;timestamp;runq-sz\n".to_string() + &row(30);
        std::fs::write(&export, &text)?;
        let key_of = || classify(&export).and_then(Result::ok).map(|f| (f.key, f.legacy_key)).context("an export");
        let (key, legacy) = key_of()?;
        assert_eq!(legacy, None, "header and sample are all its lines");
        text.extend((31..50).map(row));
        std::fs::write(&export, &text)?;
        let (grown_key, legacy) = key_of()?;
        assert_eq!(grown_key, key);
        let legacy = legacy.context("16 lines differ from header and first sample")?;

        let file = classify(&export).and_then(Result::ok).context("an export")?;
        let warehouse = crate::warehouse::Warehouse::new(dir.path().join("wh"));
        let open =
            || futures::future::try_join_all(Table::ALL.map(|table| TableAppender::open(&warehouse, table, "c1")));
        assert_eq!(plan(&file, &open().await?, "c1").await?.map(|p| p.start), Some(0));
        for appender in open().await? {
            appender
                .commit(
                    Vec::new(),
                    Vec::new(),
                    vec![Transaction::new(file_app_id("c1", &legacy), file.size as i64)],
                    "older",
                )
                .await?;
        }
        assert!(plan(&file, &open().await?, "c1").await?.is_none());
        Ok(())
    }
}
