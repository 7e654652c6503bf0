//! What the benchmarks share: a timed ingest, peak memory and medians.

// Each benchmark is its own crate and uses only some of these.
#![allow(dead_code)]

// The allocator of the `kahuna` binary, so that the benchmarks measure what it runs.
kahuna::jemalloc!();

/// The process's peak resident memory so far, in MB (Linux `VmHWM`).
pub fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// CPU time this process has used so far, all threads, in seconds. Per-core rates divide by
/// it rather than by wall time, so that other processes on a shared machine do not count.
pub fn process_cpu_seconds() -> f64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable timespec; the clock id is a constant Linux defines.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed");
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

/// Resets the peak so each phase reports its own (Linux: write 5 to clear_refs). The heap that
/// earlier phases freed is handed back first: jemalloc (and glibc, for the C libraries) keep
/// it mapped, and it would count as resident in every later phase's peak.
pub fn reset_peak() {
    // SAFETY: `arena.<MALLCTL_ARENAS_ALL>.purge` takes and returns nothing, and malloc_trim
    // only releases free memory; no pointer of ours is involved.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
        libc::malloc_trim(0);
    }
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Ingests `input` into `warehouse`; the seconds it took and the run's summary.
pub async fn timed_ingest(
    input: &std::path::Path,
    warehouse: &std::path::Path,
    threads: usize,
    dry_run: bool,
    hints: kahuna::ingest::discover::Hints,
) -> (f64, kahuna::ingest::Summary) {
    let options = kahuna::ingest::IngestOptions {
        paths: vec![input.to_path_buf()],
        cluster: "bench".into(),
        warehouse: kahuna::warehouse::Warehouse::new(warehouse),
        zone: None,
        hints,
        progress: false,
        threads,
        dry_run,
    };
    let started = std::time::Instant::now();
    let summary = kahuna::ingest::ingest(&options).await.expect("ingest");
    (started.elapsed().as_secs_f64(), summary)
}

/// What one process cost: wall seconds, CPU seconds (user + system) and peak resident MB, from
/// the kernel's account of the child; and what it printed.
pub struct ProcessCost {
    pub secs: f64,
    pub cpu_secs: f64,
    pub peak_mb: f64,
    pub output: String,
}

/// Runs the release `kahuna ingest` over `input` into a fresh warehouse, in its own process, as
/// an operator's nightly ingest runs: no heap or runtime left over from earlier runs.
pub fn cli_ingest(input: &std::path::Path, threads: usize, dry_run: bool) -> ProcessCost {
    let warehouse = tempfile::tempdir().expect("temp dir");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kahuna"));
    command.arg("ingest").arg(input).arg("--warehouse").arg(warehouse.path()).arg("--threads").arg(threads.to_string());
    if dry_run {
        command.arg("--dry-run");
    }
    process_cost(&mut command)
}

/// Runs `command` to its end, which must be a success, and what it cost.
pub fn process_cost(command: &mut std::process::Command) -> ProcessCost {
    let (cost, succeeded) = process_outcome(command);
    assert!(succeeded, "{command:?} failed");
    cost
}

/// Runs `command` to its end: what it cost, and whether it succeeded.
pub fn process_outcome(command: &mut std::process::Command) -> (ProcessCost, bool) {
    // Into a file: a pipe left unread would stall a child that prints more than it holds.
    let mut printed = tempfile::tempfile().expect("temp file");
    let started = std::time::Instant::now();
    let child = command.stdout(printed.try_clone().expect("temp file")).spawn().expect("start the command");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for; `status` and `usage` are writable.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(waited, pid, "wait4 failed");
    let succeeded = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    drop(child);
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    let mut output = String::new();
    use std::io::{Read, Seek};
    printed.rewind().and_then(|_| printed.read_to_string(&mut output)).expect("read what the command printed");
    let cost = ProcessCost {
        secs,
        cpu_secs: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        peak_mb: usage.ru_maxrss as f64 / 1024.0,
        output,
    };
    (cost, succeeded)
}
