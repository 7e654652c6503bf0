//! Ingest throughput and memory: `cargo bench --bench ingest` (release build).
//!
//! Writes synthetic TaskTracker and DataNode logs (`kahuna::simulate::synthetic`), then measures, each
//! run in a fresh warehouse: parsing alone (`--dry-run`: lines → events → states, counted,
//! nothing built) and text → all four tables, on 1 and on 2 threads. Prints MB/s (wall time)
//! and MB/s per core (MB per CPU-second the process used, so that other load on a shared
//! machine does not count), each the median of `KAHUNA_BENCH_RUNS` runs (default 5), and the
//! peak resident memory after each size, to show that memory stays flat as the input grows.
//! `KAHUNA_BENCH_MB` sets the input sizes (default `128,512`).
//!
//! The parse-only phase runs again on the same logs rewritten in log4j's console layout
//! (`yy/MM/dd HH:mm:ss LEVEL short.logger: message`) and in a layout read only through a
//! `--layout` pattern, and on the logs of a simulated Hadoop 2 (YARN) cluster beside those of
//! the 0.20 run of the same seed: each should stay within 20% of the 0.x layout's speed. Lines
//! per core-second compare texts whose lines differ in length. A last phase bounds the text-to-tables one: Parquet encoding alone of the four tables of one ingest,
//! their files read back into memory and written again, with the ingest's own writer settings,
//! to a buffer on one thread. Its MB/s per core (of the input's text, as above) is what writing
//! the tables would reach if parsing and building the rows cost nothing.

mod common;

use std::fs::File;
use std::path::Path;

use deltalake::arrow::record_batch::RecordBatch;
use deltalake::parquet::arrow::ArrowWriter;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use kahuna::ingest::discover::{Hints, layout_of};
use kahuna::simulate::{self, Version, workload::Workload};
use kahuna::warehouse::{tables::Table, writer_properties};

use common::{median, peak_rss_mb, process_cpu_seconds, reset_peak, timed_ingest};

/// Wall seconds, CPU seconds, bytes and lines read of one ingest.
async fn run(input: &Path, threads: usize, dry_run: bool, layout: Option<&str>) -> (f64, f64, u64, u64) {
    let warehouse = tempfile::tempdir().expect("temp dir");
    let hints = Hints { layout: layout.map(|l| layout_of(l).expect("a layout")), ..Hints::default() };
    let cpu_before = process_cpu_seconds();
    let (secs, summary) = timed_ingest(input, warehouse.path(), threads, dry_run, hints).await;
    let lines = summary.reports.iter().map(|r| r.lines_read).sum();
    (secs, process_cpu_seconds() - cpu_before, summary.bytes_read(), lines)
}

/// A layout none of the built-in ones reads, so `--layout` must name it.
const PATTERN: &str = "%d{ISO8601} [%t] %p %c - %m%n";

/// `2008-08-23 17:12:32,466 INFO org.apache.hadoop.mapred.TaskTracker: m` as [`PATTERN`] writes
/// it: `2008-08-23 17:12:32,466 [main] INFO org.apache.hadoop.mapred.TaskTracker - m`.
fn in_pattern_layout(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.lines() {
        let rewritten = line.get(..23).zip(line.get(24..)).and_then(|(stamp, rest)| {
            let (level, rest) = rest.split_once(' ')?;
            let (logger, message) = rest.split_once(": ")?;
            Some(format!("{stamp} [main] {level} {logger} - {message}"))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The logs of a simulated Sort run of `version` (sized to about `mb`), under `dir/logs`.
fn simulated_logs(dir: &Path, version: Version, mb: u64) {
    let cfg = simulate::Config {
        nodes: 20,
        workload: Workload::Sort,
        fault: None,
        duration_s: 60.0 * (mb as f64 / 2.5).max(5.0),
        seed: 42,
        out: dir.to_path_buf(),
        version,
        gzip: false,
        sadc: false,
        threads: 2,
        progress: false,
        epoch_ms: simulate::DEFAULT_EPOCH_MS,
        conditions: simulate::Conditions::default(),
    };
    simulate::run(&cfg).expect("simulate");
}

/// The tables an ingest writes, each with every row of its Parquet files under `warehouse`.
fn tables_read_back(warehouse: &Path) -> Vec<(Table, Vec<RecordBatch>)> {
    [Table::Logs, Table::States, Table::Rejects, Table::Ingests]
        .into_iter()
        .map(|table| {
            let mut batches = Vec::new();
            // Data files only: a checkpoint in `_delta_log` is Parquet too.
            let files = walkdir::WalkDir::new(warehouse.join(table.name()))
                .into_iter()
                .filter_entry(|e| e.file_name() != "_delta_log");
            for entry in files {
                let path = entry.expect("walk the warehouse").into_path();
                if path.extension().is_some_and(|e| e == "parquet") {
                    let file = File::open(&path).expect("open a Parquet file");
                    // Batches as large as the ingest's.
                    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                        .and_then(|b| b.with_batch_size(32 * 1024).build())
                        .expect("read Parquet");
                    batches.extend(reader.map(|batch| batch.expect("decode Parquet")));
                }
            }
            (table, batches)
        })
        .collect()
}

/// CPU seconds to encode `tables` as the ingest does (one file per table here; the ingest cuts
/// files by partition and size, which changes little of the per-value work measured).
fn encoding_cpu_seconds(tables: &[(Table, Vec<RecordBatch>)]) -> f64 {
    let cpu_before = process_cpu_seconds();
    for (table, batches) in tables {
        let Some(first) = batches.first() else { continue };
        let properties = writer_properties(Some(*table));
        let mut writer = ArrowWriter::try_new(Vec::new(), first.schema(), Some(properties)).expect("Parquet writer");
        for batch in batches {
            writer.write(batch).expect("encode");
        }
        writer.into_inner().expect("finish the file");
    }
    process_cpu_seconds() - cpu_before
}

/// `2008-08-23 17:12:32,466 INFO org.apache.hadoop.mapred.TaskTracker: m` as a console-layout
/// line: `08/08/23 17:12:32 INFO mapred.TaskTracker: m`. Lines of another shape stay as they are.
fn in_console_layout(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let rewritten = line.get(..23).zip(line.get(24..)).and_then(|(stamp, rest)| {
            let (level, rest) = rest.split_once(' ')?;
            let short = rest.strip_prefix("org.apache.hadoop.")?;
            Some(format!("{}/{}/{} {} {level} {short}", &stamp[2..4], &stamp[5..7], &stamp[8..10], &stamp[11..19]))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[tokio::main]
async fn main() {
    let sizes: Vec<u64> = std::env::var("KAHUNA_BENCH_MB")
        .unwrap_or_else(|_| "128,512".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runs: usize = std::env::var("KAHUNA_BENCH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    println!(
        "{:>8} {:>32} {:>8} {:>10} {:>14} {:>16} {:>12}",
        "input", "phase", "threads", "MB/s", "MB/s per core", "Mlines/s per core", "peak RSS MB"
    );
    for mb in sizes {
        let input = tempfile::tempdir().expect("temp dir");
        // 8 hosts, a TaskTracker and a DataNode log each.
        let written =
            kahuna::simulate::synthetic::write_cluster_logs(input.path(), 8, (mb << 20) / 16, 42).expect("write logs");
        let (console, patterned) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
        for path in &written {
            let text = std::fs::read_to_string(path).expect("read a written log");
            let name = path.file_name().expect("a file");
            std::fs::write(console.path().join(name), in_console_layout(&text)).expect("write a console-layout log");
            std::fs::write(patterned.path().join(name), in_pattern_layout(&text)).expect("write a patterned log");
        }
        let (yarn, classic) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
        simulated_logs(yarn.path(), Version::V2, mb);
        simulated_logs(classic.path(), Version::V020, mb);
        let phases = [
            ("parse only (--dry-run)", input.path(), true, None),
            ("parse only, console layout", console.path(), true, None),
            ("parse only, --layout pattern", patterned.path(), true, Some(PATTERN)),
            ("parse only, simulated 0.20", &classic.path().join("logs"), true, None),
            ("parse only, simulated Hadoop 2", &yarn.path().join("logs"), true, None),
            ("text -> 4 Delta tables", input.path(), false, None),
        ];
        for (phase, dir, dry_run, layout) in phases {
            for threads in [1, 2] {
                reset_peak();
                let (mut rates, mut per_core, mut lines_per_core) = (Vec::new(), Vec::new(), Vec::new());
                for _ in 0..runs {
                    let (secs, cpu_secs, bytes, lines) = run(dir, threads, dry_run, layout).await;
                    rates.push(bytes as f64 / 1e6 / secs);
                    per_core.push(bytes as f64 / 1e6 / cpu_secs);
                    lines_per_core.push(lines as f64 / 1e6 / cpu_secs);
                }
                println!(
                    "{:>6}MB {phase:>32} {threads:>8} {:>10.1} {:>14.1} {:>16.2} {:>12.0}",
                    mb,
                    median(rates),
                    median(per_core),
                    median(lines_per_core),
                    peak_rss_mb()
                );
            }
        }
        let warehouse = tempfile::tempdir().expect("temp dir");
        let (_, summary) = timed_ingest(input.path(), warehouse.path(), 2, false, Hints::default()).await;
        let tables = tables_read_back(warehouse.path());
        let per_core: Vec<f64> =
            (0..runs).map(|_| summary.bytes_read() as f64 / 1e6 / encoding_cpu_seconds(&tables)).collect();
        println!(
            "{:>6}MB {:>32} {:>8} {:>10} {:>14.1} {:>16} {:>12}",
            mb,
            "Parquet encoding alone",
            1,
            "",
            median(per_core),
            "",
            ""
        );
    }
}
