//! `kahuna ingest`: Hadoop daemon logs into the warehouse.
//!
//! The data path, one file per step: [`discover`] finds files and tells their daemon, host and
//! layout; [`source`] reads their lines; [`log4j`] parses each line's head; [`stream`] assembles
//! events and counts every line; [`tasktracker`], [`datanode`] and [`clienttrace`] recognise the
//! messages that start and end states; [`states`] pairs them; `crate::warehouse` commits.
//! Files of other sources — sysstat ([`sadf`]) and job history ([`jobhistory`]) — are told by
//! their content and read one by one through [`records`], with the same accounting.

pub mod addresses;
pub mod appmaster;
pub mod clienttrace;
pub mod datanode;
pub mod discover;
pub mod ids;
pub mod jobhistory;
pub mod log4j;
pub mod nodemanager;
pub mod pattern;
pub mod records;
pub mod sadf;
pub mod source;
pub mod states;
pub mod stream;
pub mod summary;
pub mod tasktracker;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono_tz::Tz;
use deltalake::kernel::{Add, Transaction};
use indicatif::{ProgressBar, ProgressStyle};

use crate::warehouse::tables::{Rows, Table, date_of_ms};
use crate::warehouse::{
    KilledRun, KilledRuns, PartWriter, Spilled, StartKey, TableAppender, Warehouse, file_app_id, held_by_tables,
};
use discover::{Daemon, Hints, HostOrigin, LogFile, Refusal};
use records::{Format, PlannedRecord};
use stream::{FileReport, Output, PlannedFile, RunContext};

pub struct IngestOptions {
    pub paths: Vec<PathBuf>,
    pub cluster: String,
    pub warehouse: Warehouse,
    pub zone: Option<Tz>,
    pub hints: Hints,
    /// Show a progress bar (only drawn on a terminal).
    pub progress: bool,
    /// Streams read at once; each is one host's daemon.
    pub threads: usize,
    /// Read, parse and count everything; write and commit nothing.
    pub dry_run: bool,
}

/// What a run did, file by file.
pub struct Summary {
    pub ingest_id: String,
    pub reports: Vec<FileReport>,
    pub elapsed: Duration,
}

impl Summary {
    pub fn bytes_read(&self) -> u64 {
        self.reports.iter().map(|r| r.offset_end.saturating_sub(r.offset_start)).sum()
    }

    pub fn total(&self, field: impl Fn(&FileReport) -> u64) -> u64 {
        self.reports.iter().map(field).sum()
    }

    pub fn states_by_kind(&self) -> BTreeMap<&'static str, u64> {
        let mut all = BTreeMap::new();
        for (kind, n) in self.reports.iter().flat_map(|r| &r.states_by_kind) {
            *all.entry(*kind).or_default() += n;
        }
        all
    }

    pub fn rejects_by_reason(&self) -> BTreeMap<String, u64> {
        let mut all = BTreeMap::new();
        for (reason, n) in self.reports.iter().flat_map(|r| &r.rejects_by_reason) {
            *all.entry(reason.clone()).or_default() += n;
        }
        all
    }

    pub fn files_with_status(&self, status: &str) -> usize {
        self.reports.iter().filter(|r| r.status == status).count()
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Index of a table among the appenders, which are opened in [`Table::ALL`] order.
fn slot(table: Table) -> usize {
    Table::ALL.iter().position(|t| *t == table).unwrap_or(0)
}

pub async fn ingest(options: &IngestOptions) -> Result<Summary> {
    // One ingest at a time: two that planned against the same tables would each commit what
    // the other's plan did not see, or fail on each other's commits.
    let lock = options.warehouse.lock_for_ingest().await?;
    let summary = ingest_holding_lock(options).await;
    lock.release().await?;
    summary
}

async fn ingest_holding_lock(options: &IngestOptions) -> Result<Summary> {
    let started = Instant::now();
    let started_ms = now_ms();
    let ingest_id = format!("{}-{:x}", chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ"), std::process::id());
    let paths = discover::walk(&options.paths)?;
    if addresses::needs_backfill(&options.warehouse).await? {
        crate::catalog::Snapshot::take(&options.warehouse).await?;
    }
    // Opened (on first use, created) together: one after the other, eight tables take long
    // enough to show in every small ingest.
    let mut appenders = futures::future::try_join_all(
        Table::ALL.map(|table| TableAppender::open(&options.warehouse, table, &options.cluster)),
    )
    .await?;

    let mut reports = Vec::new();
    let mut record_files = Vec::new();
    let mut log_files: Vec<LogFile> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for path in &paths {
        if let Some(found) = records::classify(path) {
            match found {
                Ok(file) => record_files.push(file),
                Err(refusal) => reports.push(refused(&refusal, started_ms)),
            }
            continue;
        }
        match discover::classify(path, &options.hints) {
            Ok(file) => match by_key.get(&file.key) {
                // The same log twice (a plain file and its `.gz` copy): read once, from the
                // plain one, which a daemon may still be writing.
                Some(&index) => {
                    let seen = &mut log_files[index];
                    let (kept, other) =
                        if seen.gzip && !file.gzip { (file, seen.clone()) } else { (seen.clone(), file) };
                    let why = format!("{}: the same log as {}, read instead", other.display, kept.display);
                    reports.push(listed(&other.display, other.size, "duplicate", why, started_ms));
                    *seen = kept;
                }
                None => {
                    by_key.insert(file.key.clone(), log_files.len());
                    log_files.push(file);
                }
            },
            Err(refusal) => reports.push(refused(&refusal, started_ms)),
        }
    }
    rotated_files_end_at_their_size(&mut log_files);
    let killed = settle_killed_runs(options, &log_files, &record_files, &mut appenders).await?;
    let mut planned = Vec::new();
    for file in &log_files {
        planned.push(plan(file, &appenders, &options.cluster).await?);
    }
    let planned_records = records::plan_all(record_files, &appenders, &options.cluster, &mut reports).await?;
    let streams = streams_to_read(planned, &mut reports);
    let planned: Vec<PlannedFile> = streams.iter().flatten().cloned().collect();

    let to_read: u64 = planned.iter().map(|p| p.file.end.unwrap_or(p.file.size).saturating_sub(p.start)).sum::<u64>()
        + planned_records.iter().map(|p| p.file.size.saturating_sub(p.start)).sum::<u64>();
    let ctx = Arc::new(RunContext {
        cluster: options.cluster.clone(),
        ingest_id: ingest_id.clone(),
        zone: options.zone,
        dry_run: options.dry_run,
        run_date: date_of_ms(started_ms),
        bytes_read: Arc::new(AtomicU64::new(0)),
        lines_read: Arc::new(AtomicU64::new(0)),
    });
    let bar = progress_bar(options.progress, to_read);
    let mut work: VecDeque<Work> = streams.into_iter().map(Work::Logs).collect();
    work.extend(planned_records.iter().cloned().map(Work::Record));
    let work = Arc::new(Mutex::new(work));
    let hints = Arc::new(options.hints.clone());
    let appenders = Arc::new(appenders);
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<FileReport>(64);
    let mut workers = Vec::new();
    for _ in 0..options.threads.max(1) {
        let (work, sender, ctx, hints) = (work.clone(), sender.clone(), ctx.clone(), hints.clone());
        let (appenders, runtime) = (appenders.clone(), tokio::runtime::Handle::current());
        workers.push(tokio::task::spawn_blocking(move || {
            let mut sink = RowSink::new(&appenders, &runtime);
            while let Some(next) = work.lock().ok().and_then(|mut w| w.pop_front()) {
                let mut emit = |out| sink.take(out, &sender);
                match next {
                    Work::Logs(stream) => stream::read_stream(&ctx, &stream, &mut emit),
                    Work::Record(file) => records::read(&ctx, &hints, &file, &mut emit),
                }
                if sink.failed() {
                    break;
                }
            }
            sink.finish()
        }));
    }
    drop(sender);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            report = receiver.recv() => match report {
                Some(report) => reports.push(report),
                None => break,
            },
            _ = tick.tick() => {}
        }
        bar.set_position(ctx.bytes_read.load(Ordering::Relaxed));
        let lines = ctx.lines_read.load(Ordering::Relaxed);
        bar.set_message(format!("{:.0} k lines/s", lines as f64 / started.elapsed().as_secs_f64().max(1e-3) / 1e3));
    }
    let mut adds: Vec<Vec<Add>> = Table::ALL.map(|_| Vec::new()).to_vec();
    let mut spills: Vec<Vec<Spilled>> = Table::ALL.map(|_| Vec::new()).into_iter().collect();
    for worker in workers {
        for (slot, (written, spilled)) in worker.await.context("a reader thread panicked")??.into_iter().enumerate() {
            adds[slot].extend(written);
            spills[slot].extend(spilled);
        }
    }
    write_spilled(&appenders, spills, options.threads.max(1), &mut adds).await?;
    bar.finish_and_clear();
    reports.sort_by(|a, b| a.display.cmp(&b.display));
    if options.dry_run {
        return Ok(Summary { ingest_id, reports, elapsed: started.elapsed() });
    }

    // One `ingests` row per file looked at, except those with nothing new.
    let mut ingest_rows = Rows::new(Table::Ingests, ctx.run_date);
    for report in reports.iter().filter(|r| r.status != "unchanged") {
        append_ingest_row(&mut ingest_rows, report, &ingest_id);
    }
    // Each file's report, found once for the transactions of every table.
    let report_of: HashMap<(&str, &str), &FileReport> =
        reports.iter().filter_map(|r| Some(((r.key.as_deref()?, r.display.as_str()), r))).collect();
    let ingested =
        |key: &str, display: &str| report_of.get(&(key, display)).copied().filter(|r| r.status == "ingested");
    let mut transactions: Vec<Transaction> = planned
        .iter()
        .filter_map(|p| {
            let report = ingested(&p.file.key, &p.file.display)?;
            Some(Transaction::new(file_app_id(&options.cluster, &p.file.key), report.offset_end as i64))
        })
        .collect();
    for p in &planned_records {
        let Some(report) = ingested(&p.file.key, &p.file.display) else { continue };
        transactions.push(Transaction::new(file_app_id(&options.cluster, &p.file.key), report.offset_end as i64));
        if p.file.format == Format::SaBinary {
            transactions
                .push(Transaction::new(records::sa_bytes_app_id(&options.cluster, &p.file.key), p.file.size as i64));
        }
    }
    let mut ingests_writer = appenders[slot(Table::Ingests)].part_writer()?;
    ingests_writer.write(ingest_rows).await?;
    adds[slot(Table::Ingests)].extend(ingests_writer.finish().await?);
    // States this run saw end that an earlier run wrote unterminated: their old rows go in the
    // commit that adds the new ones.
    let states = &appenders[slot(Table::States)];
    let mut superseded: BTreeMap<i32, HashMap<StartKey, usize>> = BTreeMap::new();
    for row in reports.iter().flat_map(|r| &r.superseded) {
        let key = (row.host.clone(), row.daemon.to_string(), row.start_ms, row.start_line as i64);
        *superseded.entry(row.date).or_default().entry(key).or_default() += 1;
    }
    let (mut removes, rewritten) = states.without_unterminated(&superseded).await?;
    adds[slot(Table::States)].extend(rewritten);
    let mut state_transactions = transactions.clone();
    for p in &planned {
        let Some(report) = report_of.get(&(p.file.key.as_str(), p.file.display.as_str())) else { continue };
        let earlier = reopen_point(states, &options.cluster, &p.file.key);
        // Where nothing is open any more, or the file could not be read again (its later files
        // would otherwise be read again whole every night), the point moves to where the file
        // is held: nothing to reopen.
        let read = matches!(report.status, "ingested" | "unchanged");
        let point = if read { report.reopen } else { None };
        let Some((offset, line)) = point.or(earlier.map(|_| (report.offset_end.max(p.replay_below), 0))) else {
            continue;
        };
        let [offset_id, line_id] = reopen_app_ids(&options.cluster, &p.file.key);
        state_transactions.push(Transaction::new(offset_id, offset as i64));
        state_transactions.push(Transaction::new(line_id, line as i64));
    }
    let none = KilledRuns::default();
    for (appender, adds) in appenders.iter().zip(adds) {
        let (removes, transactions, killed) = match appender.table() {
            Table::States => (std::mem::take(&mut removes), &state_transactions, &none),
            Table::Ingests => (Vec::new(), &transactions, &killed),
            _ => (Vec::new(), &transactions, &none),
        };
        appender.commit_completing(adds, removes, transactions.clone(), &ingest_id, killed).await?;
        crash_point(appender.table());
    }
    // Once the run is finished: a checkpoint changes nothing readers see, only how fast they open.
    let checkpoints = appenders.iter().map(|appender| options.warehouse.checkpoint_if_long(appender.table().name()));
    for written in futures::future::join_all(checkpoints).await {
        if let Err(e) = written {
            eprintln!("warning: {e:#}; the run is committed, and readers replay the table's log instead");
        }
    }
    Ok(Summary { ingest_id, reports, elapsed: started.elapsed() })
}

/// Runs killed before their `ingests` commit that read some of the files this run looks at:
/// those whose every file is among them it completes; of the others it undoes every write (in
/// `appenders`, before planning), so that no file of theirs stays held by rows readers never
/// see. Their other files are read by the next run that looks at them.
async fn settle_killed_runs(
    options: &IngestOptions,
    log_files: &[LogFile],
    record_files: &[records::RecordFile],
    appenders: &mut [TableAppender],
) -> Result<KilledRuns> {
    let cluster = &options.cluster;
    let keys = log_files.iter().flat_map(|f| std::iter::once(&f.key).chain(&f.legacy_key));
    let record_keys = record_files.iter().flat_map(|f| std::iter::once(&f.key).chain(&f.legacy_key));
    let mut looked_at: HashSet<String> = keys.chain(record_keys).map(|key| file_app_id(cluster, key)).collect();
    looked_at.extend(record_files.iter().map(|f| records::sa_bytes_app_id(cluster, &f.key)));
    let completed = options.warehouse.completed_ingests().await?;
    let (completes, abandons): (Vec<KilledRun>, Vec<KilledRun>) = (options.warehouse.killed_runs(&completed).await?)
        .into_iter()
        .filter(|run| !run.files.is_disjoint(&looked_at))
        .partition(|run| run.files.is_subset(&looked_at));
    for run in &abandons {
        let again = run.files.intersection(&looked_at).count();
        eprintln!(
            "ingest run {} was killed having read {} files; this run reads {again} of them again: \
             it removes that run's rows and reads these files whole; the others wait for the next run that reads them",
            run.id,
            run.files.len()
        );
    }
    for appender in appenders.iter_mut() {
        appender.abandon(&abandons).await?;
    }
    let ids = |runs: Vec<KilledRun>| runs.into_iter().map(|run| run.id).collect();
    Ok(KilledRuns { completes: ids(completes), abandons: ids(abandons) })
}

/// Where to start a file: after the bytes every table already holds, or before them where an
/// earlier run left states open (it is read again from there: [`stream::REOPEN_WINDOW_MS`]).
/// Tables can disagree only after a run killed between its commits; then each skips the rows
/// it holds. A file every table holds whole is planned as not `grown`, its first line unknown
/// (0): it is read only if its stream reopens states before it, and then from its start.
async fn plan(file: &LogFile, appenders: &[TableAppender], cluster: &str) -> Result<PlannedFile> {
    let mut file = file.clone();
    let held = held_under_either_key(appenders, cluster, &mut file.key, file.legacy_key.take());
    let all_held = held.iter().all(Option::is_some);
    let start = held.iter().map(|h| h.unwrap_or(0)).min().unwrap_or(0);
    let reopen =
        reopen_point(&appenders[slot(Table::States)], cluster, &file.key).filter(|(offset, _)| *offset < start);
    // A gzip file is never appended to, but it may hold more than the plain log it was
    // rotated from held when last read. Its trailer gives its length (mod 2^32); where that
    // differs (several members, or a file cut short) the file itself says whether more follows.
    let done = match file.end {
        Some(end) => start >= end,
        None => {
            all_held
                && (source::gzip_length(&file.path) == Some(start as u32)
                    || !source::gzip_continues_after(&file.path, start))
        }
    };
    let held_below: Vec<u64> = held.iter().map(|h| h.unwrap_or(0)).collect();
    if done && reopen.is_none() {
        return Ok(PlannedFile { file, start, first_line: 0, held_below, replay_below: start, grown: false });
    }
    let (first_line, read_from) = match reopen {
        Some((offset, line)) => (line, offset),
        None if start == 0 => (1, 0),
        None => (
            source::count_lines(&file.path, file.gzip, start)
                .with_context(|| format!("{}: cannot read", file.display))?
                + 1,
            start,
        ),
    };
    Ok(PlannedFile { file, start: read_from, first_line, held_below, replay_below: start, grown: !done })
}

/// The streams to read, each with the files to read: a stream none of whose files grew is not
/// read (its open states stay open). In one that reopens states, every file after the first
/// one read again is read again whole: its lines closed some of the starts reopened, and must
/// close the same ones again.
fn streams_to_read(planned: Vec<PlannedFile>, reports: &mut Vec<FileReport>) -> VecDeque<Vec<PlannedFile>> {
    let mut streams = VecDeque::new();
    for stream in group_streams(planned) {
        if !stream.iter().any(|p| p.grown) {
            reports.extend(stream.iter().map(|p| unchanged(&p.file.display, p.file.size)));
            continue;
        }
        let reopened = stream.iter().position(|p| p.start < p.replay_below);
        let mut read = Vec::new();
        for (index, mut planned) in stream.into_iter().enumerate() {
            if reopened.is_some_and(|first| index > first) {
                if planned.start > 0 {
                    planned.start = 0;
                    planned.first_line = 1;
                }
                read.push(planned);
            } else if planned.grown || planned.start < planned.replay_below {
                read.push(planned);
            } else {
                reports.push(unchanged(&planned.file.display, planned.file.size));
            }
        }
        streams.push_back(read);
    }
    streams
}

/// The application transactions of the `states` table that say where the next run reads a
/// file again from to reopen its states (offset and line; [`stream::REOPEN_WINDOW_MS`]).
fn reopen_app_ids(cluster: &str, file_key: &str) -> [String; 2] {
    [format!("kahuna-reopen/{cluster}/{file_key}"), format!("kahuna-reopen-line/{cluster}/{file_key}")]
}

fn reopen_point(states: &TableAppender, cluster: &str, file_key: &str) -> Option<(u64, u64)> {
    let [offset, line] = reopen_app_ids(cluster, file_key);
    Some((states.ingested_up_to(&offset)?, states.ingested_up_to(&line)?))
}

/// How far each table holds a file: under `key`, or else under `legacy`, the key an older
/// version gave it, which then becomes `key`.
fn held_under_either_key(
    appenders: &[TableAppender],
    cluster: &str,
    key: &mut String,
    legacy: Option<String>,
) -> Vec<Option<u64>> {
    let held = held_by_tables(appenders, &file_app_id(cluster, key));
    if let Some(legacy) = legacy {
        let held_before = held_by_tables(appenders, &file_app_id(cluster, &legacy));
        if held.iter().all(Option::is_none) && held_before.iter().any(Option::is_some) {
            *key = legacy;
            return held_before;
        }
    }
    held
}

/// What a reader thread takes next: a stream of log files, or one record file.
enum Work {
    Logs(Vec<PlannedFile>),
    Record(PlannedRecord),
}

/// The report of a file every table holds whole already: nothing to read.
fn unchanged(display: &str, size: u64) -> FileReport {
    FileReport { display: display.to_string(), status: "unchanged", size, ..FileReport::default() }
}

fn refused(refusal: &Refusal, at_ms: i64) -> FileReport {
    let why = format!("{}: {}", refusal.display, refusal.reason);
    let status = if refusal.skipped { "skipped" } else { "refused" };
    listed(&refusal.display, refusal.size, status, why, at_ms)
}

/// The report of a file looked at and not read, with why.
fn listed(display: &str, size: u64, status: &'static str, why: String, at_ms: i64) -> FileReport {
    FileReport {
        display: display.to_string(),
        status,
        error: Some(why),
        size,
        started_ms: at_ms,
        finished_ms: at_ms,
        ..FileReport::default()
    }
}

/// A daemon's log that a later file of the same host and daemon follows was rotated away:
/// nobody writes it any more, and a last line without `\n` is whole. (Attempts' logs of one
/// host are written side by side, so a later one says nothing of an earlier one.)
fn rotated_files_end_at_their_size(files: &mut [LogFile]) {
    let stream_of = |file: &LogFile| match (&file.host, file.attempt.is_none() && !file.gzip) {
        (HostOrigin::Known(host), true) => Some((host.clone(), file.daemon)),
        _ => None,
    };
    let mut newest: BTreeMap<(String, Daemon), i64> = BTreeMap::new();
    for file in files.iter() {
        if let Some(stream) = stream_of(file) {
            let start = newest.entry(stream).or_insert(i64::MIN);
            *start = (*start).max(file.first_local_ms);
        }
    }
    for file in files.iter_mut() {
        if stream_of(file).is_some_and(|stream| newest[&stream] > file.first_local_ms) {
            file.end = Some(file.size);
        }
    }
}

/// Files of one host and daemon form a stream, read oldest first so that a state begun
/// before a log rotation meets its end in the next file. Each merged file is its own stream.
fn group_streams(files: Vec<PlannedFile>) -> VecDeque<Vec<PlannedFile>> {
    let mut streams: BTreeMap<(String, Daemon), Vec<PlannedFile>> = BTreeMap::new();
    for planned in files {
        let host = match &planned.file.host {
            HostOrigin::Known(host) => format!("host:{host}"),
            HostOrigin::Merged => format!("file:{}", planned.file.display),
        };
        streams.entry((host, planned.file.daemon)).or_default().push(planned);
    }
    streams
        .into_values()
        .map(|mut files| {
            files.sort_by_key(|p| p.file.first_local_ms);
            files
        })
        .collect()
}

fn append_ingest_row(rows: &mut Rows, r: &FileReport, ingest_id: &str) {
    let n = |v: u64| Some(v as i64);
    rows.row()
        .text(Some(ingest_id))
        .text(Some(&r.display))
        .text(r.key.as_deref())
        .text(r.host.as_deref())
        .text(r.daemon.map(Daemon::name))
        .text(r.layout)
        .bool(r.merged)
        .text(Some(r.status))
        .text(r.error.as_deref())
        .int(n(r.size))
        .text(r.hash.as_deref())
        .int(n(r.offset_start))
        .int(n(r.offset_end))
        .int(n(r.lines_read))
        .int(n(r.lines_parsed))
        .int(n(r.lines_rejected))
        .int(n(r.lines_skipped))
        .int(n(r.events))
        .int(n(r.states))
        .int(n(r.unterminated))
        .int(n(r.unmatched_ends))
        .int(n(r.out_of_order))
        .ms(Some(r.started_ms))
        .ms(Some(r.finished_ms));
}

/// A reader thread's writers: rows become Parquet on the thread that parsed them, so encoding
/// runs on every core; reports go to the run. The first write error stops the thread's work.
struct RowSink<'a> {
    appenders: &'a [TableAppender],
    runtime: &'a tokio::runtime::Handle,
    writers: Vec<Option<PartWriter>>,
    error: Option<anyhow::Error>,
}

impl<'a> RowSink<'a> {
    fn new(appenders: &'a [TableAppender], runtime: &'a tokio::runtime::Handle) -> Self {
        RowSink { appenders, runtime, writers: appenders.iter().map(|_| None).collect(), error: None }
    }

    fn take(&mut self, output: Output, reports: &tokio::sync::mpsc::Sender<FileReport>) {
        match output {
            // A closed channel means the run already failed; its error is the one reported.
            Output::Report(report) => drop(reports.blocking_send(*report)),
            Output::Rows(rows) if self.error.is_none() => {
                if let Err(e) = self.write(rows) {
                    self.error = Some(e);
                }
            }
            Output::Rows(_) => {}
        }
    }

    fn write(&mut self, rows: Rows) -> Result<()> {
        let at = slot(rows.table);
        let writer = match &mut self.writers[at] {
            Some(writer) => writer,
            empty => empty.insert(self.appenders[at].part_writer()?),
        };
        self.runtime.block_on(writer.write(rows))
    }

    fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// The files written and the rows spilled, per table slot.
    fn finish(self) -> Result<Vec<(Vec<Add>, Option<Spilled>)>> {
        if let Some(error) = self.error {
            return Err(error);
        }
        self.writers
            .into_iter()
            .map(|writer| match writer {
                Some(writer) => self.runtime.block_on(writer.finish_open()),
                None => Ok((Vec::new(), None)),
            })
            .collect()
    }
}

/// Writes what the reader threads spilled, each table's dates shared out among `threads`
/// threads: every date once, from the spills of all of them.
async fn write_spilled(
    appenders: &Arc<Vec<TableAppender>>,
    spills: Vec<Vec<Spilled>>,
    threads: usize,
    adds: &mut [Vec<Add>],
) -> Result<()> {
    let spills = Arc::new(spills);
    let mut writers = Vec::new();
    for thread in 0..threads {
        let (appenders, spills, runtime) = (appenders.clone(), spills.clone(), tokio::runtime::Handle::current());
        writers.push(tokio::task::spawn_blocking(move || -> Result<Vec<(usize, Vec<Add>)>> {
            let mut written = Vec::new();
            for (slot, table_spills) in spills.iter().enumerate() {
                let dates: BTreeSet<i32> = table_spills.iter().flat_map(Spilled::dates).collect();
                let mine: Vec<i32> = dates.into_iter().skip(thread).step_by(threads).collect();
                if !mine.is_empty() {
                    let writer = appenders[slot].part_writer()?;
                    written.push((slot, runtime.block_on(writer.write_spilled(table_spills, &mine))?));
                }
            }
            Ok(written)
        }));
    }
    for writer in writers {
        for (slot, written) in writer.await.context("a writer thread panicked")?? {
            adds[slot].extend(written);
        }
    }
    Ok(())
}

/// `KAHUNA_CRASH_AFTER_COMMIT=<table>` aborts the process right after that table's commit: the
/// crash test's way to stop a run between two commits, where a SIGKILL would land by chance.
/// Built only with the `fault-injection` feature, which the tests enable and releases do not.
#[cfg(feature = "fault-injection")]
fn crash_point(committed: Table) {
    if std::env::var("KAHUNA_CRASH_AFTER_COMMIT").is_ok_and(|t| t == committed.name()) {
        std::process::abort();
    }
}

#[cfg(not(feature = "fault-injection"))]
fn crash_point(_: Table) {}

fn progress_bar(enabled: bool, total: u64) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    // Drawn to stderr, and only when stderr is a terminal.
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A warehouse of an older version holds an attempt's log under the key it had then: the
    /// file is not read again.
    #[tokio::test]
    async fn an_attempts_log_held_under_its_older_key_is_not_read_again() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let folder = dir.path().join("logs/node1/userlogs/attempt_200808231712_0001_m_000001_0");
        std::fs::create_dir_all(&folder)?;
        std::fs::write(
            folder.join("syslog"),
            "2008-08-23 17:12:30,000 INFO org.apache.hadoop.mapred.MapTask: numReduceTasks: 1\n",
        )?;
        let file =
            discover::classify(&folder.join("syslog"), &Hints::default()).map_err(|r| anyhow::anyhow!(r.reason))?;
        let warehouse = Warehouse::new(dir.path().join("wh"));
        let open =
            || futures::future::try_join_all(Table::ALL.map(|table| TableAppender::open(&warehouse, table, "c1")));
        let fresh = plan(&file, &open().await?, "c1").await?;
        assert_eq!((fresh.start, fresh.grown), (0, true));
        let legacy = file.legacy_key.clone().context("an attempt's log has a legacy key")?;
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
        let held = plan(&file, &open().await?, "c1").await?;
        assert_eq!((held.start, held.grown), (file.size, false));
        Ok(())
    }
}
