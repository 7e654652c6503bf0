//! Reading one stream — the files of one host and daemon, oldest first — into rows: lines
//! become events (a line with a timestamp plus the lines without one that follow it), events
//! become `logs` rows and tokens for the stream's state [`Machine`], and every line is counted:
//! parsed into an event, rejected with a reason, or skipped on purpose (blank lines).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono_tz::Tz;

use super::addresses::{self, AddressBook};
use super::discover::{Daemon, HostOrigin, LogFile};
use super::ids::{find_attempt, find_block, find_job, job_number_of_attempt};
use super::log4j::{Head, HeadParser, ZoneConverter};
use super::source::{Checked, LineReader, RAW_KEPT};
use super::states::{Machine, Mark, State, Token};
use super::{appmaster, clienttrace, datanode, nodemanager, slot, tasktracker};
use crate::warehouse::tables::{Rows, Table, date_of_ms};

/// Rows per batch handed to the writer.
const BATCH_ROWS: usize = 32 * 1024;

/// A file with where to start reading it and how far each table already holds it.
#[derive(Clone, Debug)]
pub struct PlannedFile {
    pub file: LogFile,
    pub start: u64,
    pub first_line: u64,
    /// Per table (by [`slot`]): rows from bytes before this offset are already there.
    pub held_below: Vec<u64>,
    /// Lines before this offset were counted by an earlier run: they are read again (from
    /// `start`) only to reopen the states still open there, so that a state begun before one
    /// nightly ingest and ended after it is one state.
    pub replay_below: u64,
    /// Whether the file holds lines no table has; one that does not is read again only for
    /// the sake of the stream's other files.
    pub grown: bool,
}

/// A state is reopened by the next run if it began at most this long before its stream's
/// last event: an activity open longer (a hung task, a DEBUG connection no end claimed) stays
/// unterminated, and the next run does not read days of log again for it.
pub const REOPEN_WINDOW_MS: i64 = 24 * 3600 * 1000;

/// An unterminated row an earlier run wrote, whose state this run saw end: its host, daemon,
/// start time and line (not its file's name, which rotation changes), and `date` partition.
#[derive(Clone, Debug)]
pub struct Superseded {
    pub host: Option<String>,
    pub daemon: &'static str,
    pub start_ms: i64,
    pub start_line: u64,
    pub date: i32,
}

/// What one run shares with every stream.
pub struct RunContext {
    pub cluster: String,
    pub ingest_id: String,
    pub zone: Option<Tz>,
    /// The `date` partition of `rejects` and `ingests` rows: the day the ingest ran.
    pub run_date: i32,
    /// Parse and count everything, build no rows (`kahuna ingest --dry-run`).
    pub dry_run: bool,
    pub bytes_read: Arc<AtomicU64>,
    pub lines_read: Arc<AtomicU64>,
}

/// The accounting of one file, which becomes its `ingests` row and its share of the summary.
#[derive(Clone, Debug, Default)]
pub struct FileReport {
    pub display: String,
    pub key: Option<String>,
    pub host: Option<String>,
    pub daemon: Option<Daemon>,
    pub layout: Option<&'static str>,
    pub merged: bool,
    pub status: &'static str,
    pub error: Option<String>,
    pub size: u64,
    pub hash: Option<String>,
    pub offset_start: u64,
    pub offset_end: u64,
    pub lines_read: u64,
    pub lines_parsed: u64,
    pub lines_rejected: u64,
    pub lines_skipped: u64,
    pub events: u64,
    pub states: u64,
    pub unterminated: u64,
    pub unmatched_ends: u64,
    pub out_of_order: u64,
    /// Bytes after the last `\n` of a plain file written to in the last minutes: a line still
    /// being written, which the next run reads once it is whole.
    pub waiting_bytes: u64,
    pub rejects_by_reason: BTreeMap<String, u64>,
    pub states_by_kind: BTreeMap<&'static str, u64>,
    pub started_ms: i64,
    pub finished_ms: i64,
    /// Where the next run reads this file again from (offset, line): the earliest start still
    /// open at the end that it reopens; None where there is none.
    pub reopen: Option<(u64, u64)>,
    pub superseded: Vec<Superseded>,
}

impl FileReport {
    /// The report of a file whose reading starts now at byte `start`.
    pub fn begin(display: &str, key: &str, size: u64, start: u64) -> FileReport {
        FileReport {
            display: display.to_string(),
            key: Some(key.to_string()),
            status: "ingested",
            size,
            offset_start: start,
            offset_end: start,
            started_ms: now_ms(),
            ..FileReport::default()
        }
    }
}

#[derive(Clone, Debug, Default)]
struct StateCounts {
    states: u64,
    unterminated: u64,
    unmatched_ends: u64,
    by_kind: BTreeMap<&'static str, u64>,
}

impl StateCounts {
    fn count(&mut self, state: &State) {
        self.states += 1;
        self.unterminated += u64::from(state.end.is_none());
        self.unmatched_ends += u64::from(state.start.is_none() && !state.from_clienttrace);
        *self.by_kind.entry(state.kind.name()).or_default() += 1;
    }
}

/// What a stream hands to the writer.
pub enum Output {
    Rows(Rows),
    /// Boxed: a report is several times the size of a batch of rows' handle.
    Report(Box<FileReport>),
}

/// Rows of one table, cut into batches at partition (date) changes and at [`BATCH_ROWS`].
pub(super) struct Batcher {
    table: Table,
    rows: Option<Rows>,
}

impl Batcher {
    pub(super) fn new(table: Table) -> Batcher {
        Batcher { table, rows: None }
    }

    pub(super) fn rows_for(&mut self, date: i32, emit: &mut dyn FnMut(Output)) -> &mut Rows {
        let full = self.rows.as_ref().is_some_and(|r| r.date != date || r.len() >= BATCH_ROWS);
        if let Some(rows) = self.rows.take_if(|_| full) {
            self.rows = Some(rows.empty_like(date));
            emit(Output::Rows(rows));
        }
        self.rows.get_or_insert_with(|| Rows::new(self.table, date))
    }

    pub(super) fn flush(&mut self, emit: &mut dyn FnMut(Output)) {
        if let Some(rows) = self.rows.take().filter(|r| !r.is_empty()) {
            emit(Output::Rows(rows));
        }
    }
}

/// Publishes how far a file has been read, every so many lines, for the progress bar.
pub(super) struct Progress<'a> {
    ctx: &'a RunContext,
    offset: u64,
    lines: u64,
}

impl<'a> Progress<'a> {
    pub(super) fn new(ctx: &'a RunContext, offset: u64) -> Progress<'a> {
        Progress { ctx, offset, lines: 0 }
    }

    pub(super) fn advance(&mut self, offset: u64) {
        self.lines += 1;
        if self.lines >= 1 << 16 {
            self.publish(offset);
        }
    }

    pub(super) fn publish(&mut self, offset: u64) {
        self.ctx.bytes_read.fetch_add(offset.saturating_sub(self.offset), Ordering::Relaxed);
        self.ctx.lines_read.fetch_add(self.lines, Ordering::Relaxed);
        self.offset = offset.max(self.offset);
        self.lines = 0;
    }
}

/// The event being assembled; its buffers are reused from event to event.
#[derive(Default)]
struct Pending {
    active: bool,
    local_ms: i64,
    level: String,
    logger: String,
    thread: String,
    has_thread: bool,
    message: String,
    line: u64,
    offset: u64,
}

struct StreamReader<'a> {
    ctx: &'a RunContext,
    files: &'a [PlannedFile],
    zone: ZoneConverter,
    machine: Machine,
    logs: Batcher,
    states: Batcher,
    rejects: Batcher,
    address_rows: Batcher,
    /// The addresses the file being read gives its DataNode.
    address_book: AddressBook,
    reports: Vec<FileReport>,
    /// States counted per file of the stream; they end in the reports once the stream is read.
    state_counts: Vec<StateCounts>,
    /// Per file of the stream: the rows its lines supersede.
    superseded: Vec<Vec<Superseded>>,
    finished_states: Vec<State>,
    last_ts: i64,
    /// The stream's newest event, across its files.
    newest_ts: i64,
    /// A job id made from an attempt's, reused row after row.
    job_id: String,
    fetcher_hosts: tasktracker::FetcherHosts,
}

/// `job_<number>` in `buffer`, which keeps its allocation from one row to the next.
fn job_id_into<'b>(number: &str, buffer: &'b mut String) -> &'b str {
    buffer.clear();
    buffer.push_str("job_");
    buffer.push_str(number);
    buffer
}

/// Reads every file of a stream in order and emits its rows, then one report per file.
pub fn read_stream(ctx: &RunContext, files: &[PlannedFile], emit: &mut dyn FnMut(Output)) {
    let mut reader = StreamReader {
        ctx,
        files,
        zone: ZoneConverter::new(ctx.zone),
        machine: Machine::default(),
        logs: Batcher::new(Table::Logs),
        states: Batcher::new(Table::States),
        rejects: Batcher::new(Table::Rejects),
        address_rows: Batcher::new(Table::Addresses),
        address_book: AddressBook::default(),
        reports: Vec::new(),
        state_counts: vec![StateCounts::default(); files.len()],
        superseded: vec![Vec::new(); files.len()],
        finished_states: Vec::new(),
        last_ts: i64::MIN,
        newest_ts: i64::MIN,
        job_id: String::new(),
        fetcher_hosts: tasktracker::FetcherHosts::default(),
    };
    for index in 0..files.len() {
        reader.read_file(index, emit);
    }
    let mut reopen: Vec<Option<(u64, u64)>> = vec![None; files.len()];
    for mark in
        reader.machine.keyed_open_marks().filter(|m| m.ts_ms >= reader.newest_ts.saturating_sub(REOPEN_WINDOW_MS))
    {
        let earliest = &mut reopen[mark.file];
        if earliest.is_none_or(|(offset, _)| mark.offset < offset) {
            *earliest = Some((mark.offset, mark.line));
        }
    }
    let machine = std::mem::take(&mut reader.machine);
    machine.finish(&mut reader.finished_states);
    reader.drain_states(emit);
    reader.logs.flush(emit);
    reader.states.flush(emit);
    reader.rejects.flush(emit);
    reader.address_rows.flush(emit);
    let per_file = reader.state_counts.into_iter().zip(reader.superseded).zip(reopen);
    for (mut report, ((counts, superseded), reopen)) in reader.reports.drain(..).zip(per_file) {
        report.reopen = reopen;
        report.superseded = superseded;
        report.states = counts.states;
        report.unterminated = counts.unterminated;
        report.unmatched_ends = counts.unmatched_ends;
        report.states_by_kind = counts.by_kind;
        emit(Output::Report(Box::new(report)));
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl StreamReader<'_> {
    fn read_file(&mut self, index: usize, emit: &mut dyn FnMut(Output)) {
        let planned = &self.files[index];
        let file = &planned.file;
        let mut report = FileReport {
            host: match &file.host {
                HostOrigin::Known(h) => Some(h.clone()),
                HostOrigin::Merged => None,
            },
            daemon: Some(file.daemon),
            layout: Some(file.layout.name()),
            merged: file.host == HostOrigin::Merged,
            ..FileReport::begin(&file.display, &file.key, file.size, planned.replay_below)
        };
        let mut source = match LineReader::open(&file.path, file.gzip, planned.start, file.end, planned.first_line) {
            Ok(source) => source,
            Err(e) => {
                report.status = "failed";
                report.error = Some(format!("{}: cannot read: {e}", file.display));
                report.finished_ms = now_ms();
                self.reports.push(report);
                return;
            }
        };
        let mut heads = HeadParser::new(file.layout);
        // The file's counts, and where lines read again to reopen states are counted: nowhere
        // (an earlier run counted them).
        let mut counts = [report, FileReport::default()];
        let below = planned.replay_below;
        let counted_in = |offset: u64| usize::from(offset < below);
        let mut pending = Pending::default();
        // Order is a file's property: a stream's files (rotations, or the attempt logs of one
        // host, which overlap in time) are compared line by line only within each file.
        self.last_ts = i64::MIN;
        let mut progress = Progress::new(self.ctx, planned.start);
        loop {
            let line = match source.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    let cut = source.cut(&file.display, &e);
                    let report = &mut counts[counted_in(cut.offset)];
                    report.lines_read += 1;
                    report.error = Some(cut.message);
                    self.reject(report, index, cut.number, cut.offset, cut.reason, &cut.raw, emit);
                    break;
                }
            };
            let (number, offset) = (line.number, line.offset);
            // The first new line ends the replayed event: that event's row is held, so a
            // continuation of it here is rejected with its text, as without the replay.
            if offset >= below && pending.active && pending.offset < below {
                self.flush_event(&mut pending, index, &mut counts[1], emit);
            }
            counts[counted_in(offset)].lines_read += 1;
            progress.advance(offset);
            let text = match line.check() {
                Checked::Text(text) => text,
                Checked::Rejected { reason, raw } => {
                    let report = &mut counts[counted_in(offset)];
                    if let Some(len) = line.overlong {
                        report.error.get_or_insert_with(|| format!("{}:{number}: a line of {len} bytes", file.display));
                    }
                    self.reject(report, index, number, offset, reason, &raw, emit);
                    continue;
                }
            };
            // Only a line opening with a space, a control byte or a non-ASCII byte (a Unicode
            // space) can be blank: the others, nearly all, are not trimmed to find out.
            let may_be_blank = text.as_bytes().first().is_none_or(|b| !b.is_ascii_graphic());
            if may_be_blank && text.trim().is_empty() {
                counts[counted_in(offset)].lines_skipped += 1;
                continue;
            }
            match heads.parse(text) {
                Head::Event(head) => {
                    if pending.active {
                        let at = counted_in(pending.offset);
                        self.flush_event(&mut pending, index, &mut counts[at], emit);
                    }
                    pending.active = true;
                    pending.local_ms = head.local_ms;
                    pending.level.clear();
                    pending.level.push_str(head.level);
                    pending.logger.clear();
                    pending.logger.push_str(head.logger);
                    pending.thread.clear();
                    pending.thread.push_str(head.thread.unwrap_or_default());
                    pending.has_thread = head.thread.is_some();
                    pending.message.clear();
                    pending.message.push_str(head.message);
                    pending.line = number;
                    pending.offset = offset;
                    counts[counted_in(offset)].lines_parsed += 1;
                }
                Head::Continuation if pending.active => {
                    pending.message.push('\n');
                    pending.message.push_str(text);
                    counts[counted_in(offset)].lines_parsed += 1;
                }
                Head::Continuation => {
                    let reason = "continuation line with no event before it".to_string();
                    self.reject(&mut counts[counted_in(offset)], index, number, offset, reason, text, emit);
                }
                Head::Malformed(why) => {
                    self.reject(&mut counts[counted_in(offset)], index, number, offset, why.to_string(), text, emit);
                }
            }
        }
        if pending.active {
            let at = counted_in(pending.offset);
            self.flush_event(&mut pending, index, &mut counts[at], emit);
        }
        let [mut report, _replayed] = counts;
        if !planned.grown {
            report.status = "unchanged";
        }
        for seen in self.address_book.take() {
            let rows = self.address_rows.rows_for(seen.date, emit);
            addresses::append_row(rows, &seen, file.daemon.name(), &file.display, &self.ctx.ingest_id);
        }
        // (A file cut short among the lines read again ends where the new ones would start.)
        report.offset_end = source.offset().max(report.offset_start);
        report.waiting_bytes = file.end.map_or(0, |end| file.size.saturating_sub(end));
        report.hash = Some(format!("{:016x}", source.hash()));
        report.finished_ms = now_ms();
        progress.publish(report.offset_end);
        self.reports.push(report);
        self.drain_states(emit);
    }

    /// Whether a row of `table` from the line at `offset` of file `index` is to be written:
    /// not in a dry run, nor where the table holds it already.
    fn wants_rows(&self, index: usize, table: Table, offset: u64) -> bool {
        !self.ctx.dry_run && offset >= self.files[index].held_below[slot(table)]
    }

    #[allow(clippy::too_many_arguments)]
    fn reject(
        &mut self,
        report: &mut FileReport,
        index: usize,
        line: u64,
        offset: u64,
        reason: String,
        raw: &str,
        emit: &mut dyn FnMut(Output),
    ) {
        report.lines_rejected += 1;
        *report.rejects_by_reason.entry(reason.clone()).or_default() += 1;
        if !self.wants_rows(index, Table::Rejects, offset) {
            return;
        }
        let rows = self.rejects.rows_for(self.ctx.run_date, emit);
        append_reject(rows, &self.ctx.ingest_id, &self.files[index].file.display, line, offset, &reason, raw);
    }

    fn flush_event(
        &mut self,
        event: &mut Pending,
        index: usize,
        report: &mut FileReport,
        emit: &mut dyn FnMut(Output),
    ) {
        event.active = false;
        report.events += 1;
        let planned = &self.files[index];
        let file = &planned.file;
        let ts = self.zone.to_utc_ms(event.local_ms);
        if ts < self.last_ts {
            report.out_of_order += 1;
        }
        self.last_ts = self.last_ts.max(ts);
        self.newest_ts = self.newest_ts.max(ts);
        let message = event.message.as_str();
        let (daemon, host) = match &file.host {
            HostOrigin::Known(host) => (file.daemon, Some(host.as_str())),
            HostOrigin::Merged => {
                (Daemon::of_logger(&event.logger).unwrap_or(file.daemon), datanode::own_host(message))
            }
        };
        if self.wants_rows(index, Table::Logs, event.offset) {
            let task = find_attempt(message).map(|(a, _)| a);
            // A message about an attempt is about its job, whether it names the job or not.
            let job = match find_job(message) {
                Some(job) => Some(job),
                None => task.and_then(job_number_of_attempt).map(|number| job_id_into(number, &mut self.job_id)),
            };
            let rows = self.logs.rows_for(date_of_ms(ts), emit);
            rows.row()
                .text(host)
                .text(Some(daemon.name()))
                .ms(Some(ts))
                .text(Some(&event.level))
                .text(Some(&event.logger))
                .text(event.has_thread.then_some(event.thread.as_str()))
                .text(Some(message))
                .text(job)
                .text(task)
                .text(find_block(message))
                .text(Some(&file.display))
                .int(Some(event.line as i64))
                .text(Some(&self.ctx.ingest_id));
        }
        if daemon == Daemon::DataNode
            && let Some(host) = host
            && self.wants_rows(index, Table::Addresses, event.offset)
        {
            self.address_book.note_line(host, message, ts);
        }
        let mut token = recognize(daemon, &event.logger, message, file.attempt.as_deref());
        if file.attempt.is_some() {
            self.fetcher_hosts.observe(message, token.as_mut());
        }
        if let Some(token) = token {
            // Only a merged file's lines and the application master's name a host of their own;
            // the rows of any other take the stream's host, so its marks need no copy of it.
            let line_host = match (&file.host, daemon) {
                (_, Daemon::AppMaster) => appmaster::node_of(message).map(str::to_string),
                (HostOrigin::Merged, _) => host.map(str::to_string),
                (HostOrigin::Known(_), _) => None,
            };
            let mark = Mark { file: index, ts_ms: ts, line: event.line, offset: event.offset, host: line_host };
            self.machine.replaying = event.offset < planned.replay_below;
            self.machine.observe(token, mark, &mut self.finished_states);
            if self.finished_states.len() >= 1024 {
                self.drain_states(emit);
            }
        }
    }

    /// Finished states to rows, each counted in the report of the file whose line completed it.
    fn drain_states(&mut self, emit: &mut dyn FnMut(Output)) {
        let mut states = std::mem::take(&mut self.finished_states);
        for state in &states {
            let Some(owner) = state.last_mark() else { continue };
            let planned = &self.files[owner.file];
            // A state whose last line an earlier run read was counted (and written) by it.
            if owner.offset < planned.replay_below {
                continue;
            }
            self.state_counts[owner.file].count(state);
            if !self.wants_rows(owner.file, Table::States, owner.offset) {
                continue;
            }
            // Begun where an earlier run stopped, that run wrote it unterminated: this row
            // replaces that one.
            let file = &planned.file;
            let stream_host = match &file.host {
                HostOrigin::Known(h) => Some(h.as_str()),
                HostOrigin::Merged => None,
            };
            // The application master's host is not its attempts'.
            let host = state.host.as_deref().or(stream_host.filter(|_| file.daemon != Daemon::AppMaster));
            // (The old row's host is its start line's: NULL in a merged file whose line names none.)
            if let (Some(start), Some(_)) = (state.closed.as_ref().or(state.start.as_ref()), &state.end)
                && !self.wants_rows(start.file, Table::States, start.offset)
            {
                self.superseded[owner.file].push(Superseded {
                    host: start.host.as_deref().or(stream_host).map(str::to_string),
                    daemon: file.daemon.name(),
                    start_ms: start.ts_ms,
                    start_line: start.line,
                    date: date_of_ms(start.ts_ms),
                });
            }
            let job = state
                .detail
                .task_id
                .as_deref()
                .and_then(job_number_of_attempt)
                .map(|n| job_id_into(n, &mut self.job_id));
            let when = state.start.as_ref().or(state.end.as_ref()).map_or(0, |m| m.ts_ms);
            let rows = self.states.rows_for(date_of_ms(when), emit);
            rows.row()
                .text(host)
                .text(Some(file.daemon.name()))
                .text(Some(state.kind.name()))
                .text(job)
                .text(state.detail.task_id.as_deref())
                .text(state.detail.peer_task_id.as_deref())
                .text(state.detail.block_id.as_deref())
                .text(state.detail.peer_host.as_deref())
                .text(state.detail.mirror_host.as_deref())
                .ms(state.start.as_ref().map(|m| m.ts_ms))
                .ms(state.end.as_ref().map(|m| m.ts_ms))
                .float(state.duration_ms)
                .int(state.detail.bytes)
                .text(state.outcome.map(|o| o.name()))
                .text(Some(if state.from_clienttrace { "clienttrace" } else { "log" }))
                .text(Some(&file.display))
                .int(state.start.as_ref().map(|m| m.line as i64))
                .int(state.end.as_ref().map(|m| m.line as i64))
                .text(Some(&self.ctx.ingest_id));
        }
        // Its room is kept for the next states, not grown again from nothing.
        states.clear();
        self.finished_states = states;
    }
}

/// One `rejects` row; the raw line is cut to [`RAW_KEPT`] bytes, at a character boundary.
pub(super) fn append_reject(
    rows: &mut Rows,
    ingest_id: &str,
    file: &str,
    line: u64,
    offset: u64,
    reason: &str,
    raw: &str,
) {
    let mut cut = raw.len().min(RAW_KEPT);
    while !raw.is_char_boundary(cut) {
        cut -= 1;
    }
    rows.row()
        .text(Some(ingest_id))
        .text(Some(file))
        .int(Some(line as i64))
        .int(Some(offset as i64))
        .text(Some(reason))
        .text(Some(&raw[..cut]));
}

/// The token a message gives, by the daemon that wrote it and the attempt whose log it is;
/// clienttrace loggers of any daemon share one format.
fn recognize(daemon: Daemon, logger: &str, message: &str, attempt: Option<&str>) -> Option<Token> {
    if logger.ends_with("clienttrace") {
        return clienttrace::recognize(message);
    }
    match daemon {
        Daemon::TaskTracker | Daemon::Task => tasktracker::recognize(message, attempt),
        Daemon::DataNode => datanode::recognize(message),
        Daemon::AppMaster => appmaster::recognize(message),
        Daemon::NodeManager => nodemanager::recognize(message),
        _ => None,
    }
}
