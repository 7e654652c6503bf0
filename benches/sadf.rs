//! sysstat ingest throughput and memory: `cargo bench --bench sadf` (release build).
//!
//! Writes `sadf -d` exports of one-second captures (the activities of the 14 metrics, two
//! interfaces; one file per host and day, as sadf writes them per daily sa file), then measures
//! the release `kahuna ingest`, each run its own process and a fresh warehouse, as an
//! operator's nightly ingest runs: parsing alone (`--dry-run`) and text → `sadc` +
//! `sar_records` (+ the bookkeeping tables), on 1 and on 2 threads. Prints MB/s, MB/s per core,
//! MB per CPU-second (the process's user + system time: the per-core figure that other load on
//! the machine does not distort), `sadc` rows per second, the median of `KAHUNA_BENCH_RUNS`
//! runs (default 5), and the largest peak resident memory of those runs, to show that memory
//! stays flat as the input grows (inputs above ~390 MB hold several days a host).
//! `KAHUNA_BENCH_MB` sets the input sizes (default `64,1024`).

mod common;

use std::io::Write as _;
use std::path::Path;

use common::{cli_ingest, median};

/// A host's `sadf -d` export of `seconds` samples from `first` seconds after 2008-08-23
/// 00:00:00 UTC; about 560 bytes a second. Values vary with the second so that nothing
/// compresses to a constant.
fn write_export(path: &Path, host: &str, first: u64, seconds: u64) -> std::io::Result<()> {
    let base = 1_219_449_600 + first;
    let stamp = |s: u64| {
        let t = chrono::DateTime::from_timestamp((base + s) as i64, 0).unwrap_or_default();
        t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
    };
    let stamps: Vec<String> = (0..seconds).map(stamp).collect();
    // Written as it goes: a day's export held whole would stay in the heap and count in the
    // peak memory measured after it.
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut group = |header: &str, row: &dyn Fn(u64) -> Vec<String>| -> std::io::Result<()> {
        writeln!(out, "{header}")?;
        for (s, ts) in stamps.iter().enumerate() {
            for fields in row(s as u64) {
                writeln!(out, "{host};1;{ts};{fields}")?;
            }
        }
        Ok(())
    };
    let f = |s: u64, k: u64| ((s * 7919 + k * 104_729) % 10_000) as f64 / 100.0;
    group("# hostname;interval;timestamp;CPU;%user;%nice;%system;%iowait;%steal;%idle", &|s| {
        vec![format!("-1;{:.2};0.00;{:.2};{:.2};0.00;{:.2}", f(s, 1) / 2.0, f(s, 2) / 4.0, f(s, 3) / 8.0, 20.0)]
    })?;
    group("# hostname;interval;timestamp;proc/s;cswch/s", &|s| vec![format!("{:.2};{:.2}", f(s, 4), f(s, 5) * 100.0)])?;
    group(
        "# hostname;interval;timestamp;pgpgin/s;pgpgout/s;fault/s;majflt/s;pgfree/s;pgscank/s;pgscand/s;pgsteal/s;%vmeff",
        &|s| {
            vec![format!(
                "{:.2};{:.2};{:.2};0.00;{:.2};0.00;0.00;0.00;0.00",
                f(s, 6) * 10.0,
                f(s, 7) * 10.0,
                f(s, 8) * 30.0,
                f(s, 9) * 5.0
            )]
        },
    )?;
    group("# hostname;interval;timestamp;tps;rtps;wtps;dtps;bread/s;bwrtn/s;bdscd/s", &|s| {
        vec![format!(
            "{:.2};{:.2};{:.2};0.00;{:.2};{:.2};0.00",
            f(s, 10),
            f(s, 11),
            f(s, 12),
            f(s, 13) * 20.0,
            f(s, 14) * 40.0
        )]
    })?;
    group("# hostname;interval;timestamp;runq-sz;plist-sz;ldavg-1;ldavg-5;ldavg-15;blocked", &|s| {
        vec![format!(
            "{};{};{:.2};{:.2};{:.2};0",
            s % 5,
            300 + s % 50,
            f(s, 15) / 10.0,
            f(s, 16) / 10.0,
            f(s, 17) / 10.0
        )]
    })?;
    group(
        "# hostname;interval;timestamp;IFACE;rxpck/s;txpck/s;rxkB/s;txkB/s;rxcmp/s;txcmp/s;rxmcst/s;%ifutil",
        &|s| {
            vec![
                "lo;0.00;0.00;0.00;0.00;0.00;0.00;0.00;0.00".to_string(),
                format!(
                    "eth0;{:.2};{:.2};{:.2};{:.2};0.00;0.00;0.00;{:.2}",
                    f(s, 18) * 10.0,
                    f(s, 19) * 10.0,
                    f(s, 20) * 100.0,
                    f(s, 21) * 50.0,
                    f(s, 22) / 10.0
                ),
            ]
        },
    )?;
    out.flush()
}

fn main() {
    let sizes: Vec<u64> = std::env::var("KAHUNA_BENCH_MB")
        .unwrap_or_else(|_| "64,1024".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runs: usize = std::env::var("KAHUNA_BENCH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    println!(
        "{:>8} {:>30} {:>8} {:>10} {:>14} {:>14} {:>14} {:>12}",
        "input", "phase", "threads", "MB/s", "MB/s per core", "MB per CPU-s", "sadc rows/s", "peak RSS MB"
    );
    for mb in sizes {
        let input = tempfile::tempdir().expect("temp dir");
        // 8 hosts; ~560 bytes of `-d` text per host and second; one export a host and day, as
        // sadf gives one for each daily sa file.
        let seconds = (mb << 20) / 8 / 560;
        for host in 0..8 {
            for (day, first) in (0..seconds).step_by(86_400).enumerate() {
                let path = input.path().join(format!("node{host}-day{day}.sadf-d.csv"));
                write_export(&path, &format!("node{host}"), first, (seconds - first).min(86_400))
                    .expect("write export");
            }
        }
        let bytes: u64 = std::fs::read_dir(input.path())
            .expect("input")
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum();
        let samples = 8 * seconds;
        for (phase, dry_run) in [("parse only (--dry-run)", true), ("text -> sadc + sar_records", false)] {
            for threads in [1, 2] {
                let costs: Vec<_> = (0..runs).map(|_| cli_ingest(input.path(), threads, dry_run)).collect();
                let rate = median(costs.iter().map(|c| bytes as f64 / 1e6 / c.secs).collect());
                println!(
                    "{:>6}MB {phase:>30} {threads:>8} {rate:>10.1} {:>14.1} {:>14.1} {:>14.0} {:>12.0}",
                    mb,
                    rate / threads as f64,
                    median(costs.iter().map(|c| bytes as f64 / 1e6 / c.cpu_secs).collect()),
                    median(costs.iter().map(|c| samples as f64 / c.secs).collect()),
                    costs.iter().map(|c| c.peak_mb).fold(0.0, f64::max)
                );
            }
        }
    }
}
