//! The summary `kahuna ingest` prints: files by outcome, lines accounted for, states by kind,
//! rejects by reason, throughput, and every refused or damaged file with its reason.

use std::fmt::Write as _;

use crate::ingest::Summary;

pub fn render(summary: &Summary) -> String {
    let mut out = String::new();
    let secs = summary.elapsed.as_secs_f64().max(1e-6);
    let mb = summary.bytes_read() as f64 / 1e6;
    let _ = writeln!(out, "ingest {}", summary.ingest_id);
    let _ = writeln!(
        out,
        "files: {} ingested, {} unchanged, {} refused, {} failed",
        summary.files_with_status("ingested"),
        summary.files_with_status("unchanged"),
        summary.files_with_status("refused"),
        summary.files_with_status("failed"),
    );
    let set_aside = [
        ("skipped", "not logs: empty, configurations, traces, .out reports"),
        ("duplicate", "the same log under another name, read once"),
    ];
    for (status, why) in set_aside {
        let files = summary.files_with_status(status);
        if files > 0 {
            let _ = writeln!(out, "       {files} {status} ({why})");
        }
    }
    let _ = writeln!(
        out,
        "lines: {} read = {} parsed + {} rejected + {} skipped; {} events, {} out of time order",
        summary.total(|r| r.lines_read),
        summary.total(|r| r.lines_parsed),
        summary.total(|r| r.lines_rejected),
        summary.total(|r| r.lines_skipped),
        summary.total(|r| r.events),
        summary.total(|r| r.out_of_order),
    );
    let waiting: Vec<_> = summary.reports.iter().filter(|r| r.waiting_bytes > 0).collect();
    if !waiting.is_empty() {
        let _ = writeln!(
            out,
            "       and {} unfinished last line(s), {} bytes, still being written: read by a later run once whole, rotated or {} min old",
            waiting.len(),
            waiting.iter().map(|r| r.waiting_bytes).sum::<u64>(),
            crate::ingest::source::SETTLED.as_secs() / 60,
        );
    }
    let _ = writeln!(
        out,
        "states: {} ({} unterminated, {} ends without a start)",
        summary.total(|r| r.states),
        summary.total(|r| r.unterminated),
        summary.total(|r| r.unmatched_ends),
    );
    for (kind, n) in summary.states_by_kind() {
        let _ = writeln!(out, "  {kind:<22} {n:>10}");
    }
    let rejects = summary.rejects_by_reason();
    if !rejects.is_empty() {
        let _ = writeln!(out, "rejects by reason:");
        for (reason, n) in rejects {
            let _ = writeln!(out, "  {n:>10}  {reason}");
        }
    }
    for report in &summary.reports {
        if let Some(error) = &report.error {
            let _ = writeln!(out, "{}: {error}", report.status);
        }
    }
    let _ = writeln!(out, "read {mb:.1} MB in {secs:.2} s ({:.1} MB/s)", mb / secs);
    out
}
