//! sysstat into `sadc` and `sar_metrics`: the project's own exports in `data/sysstat`, the
//! shared samples' exports and binary sa files (skipped, with a message, where the samples are
//! absent or `sadf` is not installed), and damaged input. Every expected number comes from the
//! files by the shell pipeline written beside it, not from the parser.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{ingest_into, options, owned, rows, sample, scalar};
use kahuna::ingest::ingest;

fn data_sysstat() -> PathBuf {
    common::package_dir().join("data/sysstat")
}

/// Whether the machine's `sadf` can be run; if not, says why the test is skipped.
fn have_sadf() -> bool {
    let ok = Command::new("sadf").arg("-V").output().is_ok();
    if !ok {
        println!("skipped: `sadf` is not installed (apt-get install sysstat)");
    }
    ok
}

/// The 14 metrics of a sample, as the shell prints them.
const VECTOR: &str = "cpu_user_pct, cpu_system_pct, cpu_iowait_pct, cswch_s, runq_sz, plist_sz, ldavg_1, \
                      rx_kb_s, tx_kb_s, pgpgin_s, pgpgout_s, fault_s, bread_s, bwrtn_s";

#[tokio::test]
async fn the_projects_exports_give_one_row_per_host_and_second() {
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![data_sysstat()], wh.path(), None).await;
    // `wc -l data/sysstat/*`: 76 + 76 (`-d`, node1 and node2) + 12 (`-dh`, node3) lines, every
    // one a header, a sample or node3's restart.
    assert_eq!(summary.files_with_status("ingested"), 3);
    assert_eq!(summary.total(|r| r.lines_read), 164);
    assert_eq!(summary.total(|r| r.lines_parsed), 164);
    assert_eq!(summary.total(|r| r.lines_rejected) + summary.total(|r| r.lines_skipped), 0);
    // 10 seconds (17:12:30–39) on 3 hosts, and node3's LINUX-RESTART at 17:12:29.
    let counts = rows(
        wh.path(),
        "SELECT host, count(*), count(*) FILTER (WHERE restart), min(ts), max(ts) FROM sadc GROUP BY host ORDER BY host",
    )
    .await;
    let expect = [
        ["node1", "10", "0", "2008-08-23T17:12:30Z", "2008-08-23T17:12:39Z"],
        ["node2", "10", "0", "2008-08-23T17:12:30Z", "2008-08-23T17:12:39Z"],
        ["node3", "11", "1", "2008-08-23T17:12:29Z", "2008-08-23T17:12:39Z"],
    ];
    assert_eq!(counts, owned(&expect));
    // node1 at 17:12:35, by hand from node1.sadf-d.csv (`grep '17:12:35' node1.sadf-d.csv`):
    // eth0's rxkB/s, not lo's, makes rx_kb_s.
    let vector =
        rows(wh.path(), &format!("SELECT {VECTOR} FROM sadc WHERE host = 'node1' AND ts = '2008-08-23T17:12:35Z'"))
            .await;
    let expect = [
        "45.0", "5.0", "1.0", "1150.0", "1.0", "155.0", "1.5", "550.0", "250.0", "1024.0", "2048.0", "305.0", "2048.0",
        "4096.0",
    ];
    assert_eq!(vector, vec![expect.map(String::from).to_vec()]);
    // awk -F';' '$4 == "eth0" {rx += $7} END {print rx}' node1.sadf-d.csv → 5450, and the same
    // for the other hosts; node2's %iowait runs 20..29 (mean 24.5).
    let per_host = rows(
        wh.path(),
        "SELECT host, sum(rx_kb_s), round(avg(cpu_iowait_pct), 2) FROM sadc WHERE NOT restart GROUP BY host ORDER BY host",
    )
    .await;
    let expect = [["node1", "5450.0", "1.0"], ["node2", "5450.0", "24.5"], ["node3", "5450.0", "0.5"]];
    assert_eq!(per_host, owned(&expect));
    // Figures per sample: CPU 6, pcsw 2, paging 4, io 5, queue 6, 2 interfaces × 4 = 31; 30 samples.
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM sar_metrics").await, "930");
    // Stored as one record per activity and device: 5 activities + 2 interfaces = 7 a sample
    // (node3 holds 11 samples but one is its restart, which has no figures). `cluster` after a
    // comma: the generic SQL grammar would take it for the end of the select list.
    let records = rows(wh.path(), "SELECT host, cluster, count(*), sum(cardinality(metric_values)) FROM sar_records GROUP BY host, cluster ORDER BY host").await;
    let expect = [["node1", "test", "70", "310"], ["node2", "test", "70", "310"], ["node3", "test", "70", "310"]];
    assert_eq!(records, owned(&expect));
    let queue = rows(wh.path(), "SELECT metric_names FROM sar_records WHERE activity = 'queue' LIMIT 1").await;
    assert_eq!(queue, vec![vec!["runq-sz;plist-sz;ldavg-1;ldavg-5;ldavg-15;blocked"]]);
    let lo = rows(
        wh.path(),
        "SELECT activity, device, metric, value FROM sar_metrics
         WHERE host = 'node3' AND ts = '2008-08-23T17:12:30Z' AND device IN ('lo', 'all') AND metric IN ('rxkB/s', '%user')
         ORDER BY metric",
    )
    .await;
    let expect = [["cpu-load", "all", "%user", "10.0"], ["net-dev", "lo", "rxkB/s", "100.0"]];
    assert_eq!(lo, owned(&expect));

    // Ingesting again adds nothing.
    let again = ingest_into(vec![data_sysstat()], wh.path(), None).await;
    assert_eq!(again.files_with_status("unchanged"), 3);
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM sadc").await, "31");
}

#[tokio::test]
async fn iface_and_host_flags_name_the_nic_and_the_host() {
    let wh = tempfile::tempdir().unwrap();
    let mut opts = options(vec![data_sysstat().join("node1.sadf-d.csv")], wh.path(), Some("r12n01"));
    opts.hints.iface = Some("lo".into());
    ingest(&opts).await.unwrap();
    // lo's rxkB/s is 100.00 in every row of the file.
    let got = rows(wh.path(), "SELECT DISTINCT host, rx_kb_s FROM sadc").await;
    assert_eq!(got, vec![vec!["r12n01", "100.0"]]);
}

#[tokio::test]
async fn the_three_exports_and_the_binary_capture_give_the_same_sadc_rows() {
    let Some(exports) = sample("sysstat/sadf") else { return };
    let mut paths = vec![exports];
    let binary = sample("sysstat/binary/local-12.6.1.sa");
    if let Some(sa) = binary.clone().filter(|_| have_sadf()) {
        paths.push(sa);
    }
    let routes = paths.len() + 2;
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(paths, wh.path(), None).await;
    assert_eq!(summary.files_with_status("ingested"), routes);
    assert_eq!(summary.total(|r| r.lines_rejected), 0);
    // grep -v '^#' local.sadf-d.csv | cut -d';' -f3 | sort -u | wc -l → 59 seconds; every route
    // gives the same 59 vectors, so each distinct row is there once per route.
    let distinct = rows(
        wh.path(),
        &format!("SELECT count(*), min(n), max(n) FROM (SELECT host, ts, restart, interval_s, {VECTOR}, count(*) AS n FROM sadc GROUP BY ALL)"),
    )
    .await;
    assert_eq!(distinct, vec![vec!["59".to_string(), routes.to_string(), routes.to_string()]]);
    // awk -F';' 'NF==10 && $4=="-1" {u+=$5; s+=$7} END {printf "%.2f %.2f\n", u, s}' local.sadf-d.csv
    let sums = rows(
        wh.path(),
        "SELECT DISTINCT round(sum(cpu_user_pct), 2), round(sum(cpu_system_pct), 2) FROM sadc GROUP BY file",
    )
    .await;
    assert_eq!(sums, vec![vec!["2494.44", "255.31"]]);
    // grep '10:09:00' local.sadf-d.csv (the 4 interfaces carry no traffic in this capture).
    let vector =
        rows(wh.path(), &format!("SELECT DISTINCT {VECTOR} FROM sadc WHERE ts = '2026-11-21T10:09:00Z'")).await;
    let expect = [
        "13.2", "8.63", "2.03", "989.0", "1.0", "98.0", "1.06", "0.0", "0.0", "15700.0", "20.0", "27709.0", "31400.0",
        "40.0",
    ];
    assert_eq!(vector, vec![expect.map(String::from).to_vec()]);
    // sar_metrics holds the same figures, under the same names, from every route.
    let figures = rows(
        wh.path(),
        "SELECT count(DISTINCT activity || coalesce(device, '') || metric), count(*) / count(DISTINCT concat(activity, device, metric, ts, value)) FROM sar_metrics",
    )
    .await;
    // 6 CPU + 2 pcsw + 9 paging + 7 io + 6 queue + 4 interfaces × 8 = 62 figures a second.
    assert_eq!(figures, vec![vec!["62".to_string(), routes.to_string()]]);
    // JSON: lines 1–12 (before the first record) and 1075–1080 (after the last) are structure.
    let json =
        rows(wh.path(), "SELECT lines_read, lines_parsed, lines_skipped FROM ingests WHERE layout = 'sadf -j'").await;
    assert_eq!(json, vec![vec!["1080", "1062", "18"]]);
}

#[tokio::test]
async fn sa_files_of_three_format_generations() {
    let Some(dir) = sample("sysstat/binary") else { return };
    if !have_sadf() {
        return;
    }
    let wh = tempfile::tempdir().unwrap();
    let files = ["data-9.1.6", "data-11.6.5", "data-12.0.0"].map(|f| dir.join(f)).to_vec();
    let summary = ingest_into(files.clone(), wh.path(), None).await;
    assert_eq!(
        summary.files_with_status("ingested"),
        3,
        "{:?}",
        summary.reports.iter().map(|r| &r.error).collect::<Vec<_>>()
    );
    // sadf -c data-9.1.6 > a.sa; sadf -d a.sa -- -u -w -q  (and the same for 11.6.5; 12.0.0 is read
    // as it is): one restart and one sample each.
    let got =
        rows(wh.path(), "SELECT host, ts, restart, interval_s, cpu_user_pct, cswch_s, plist_sz FROM sadc ORDER BY ts")
            .await;
    let expect = [
        ["kluane.home", "2017-01-21T08:16:11Z", "true", "", "", "", ""],
        ["kluane.home", "2017-01-21T08:17:02Z", "false", "1", "0.13", "923.0", "594.0"],
        ["linux.home", "2018-08-29T09:33:38Z", "true", "", "", "", ""],
        ["linux.home", "2018-08-29T09:34:34Z", "false", "46", "0.47", "16003.44", "911.0"],
        ["linux.home", "2019-06-30T05:39:21Z", "true", "", "", "", ""],
        ["linux.home", "2019-06-30T05:39:34Z", "false", "1", "0.37", "11727.0", "826.0"],
    ];
    assert_eq!(got, owned(&expect));
    // The binary file grows no more: it is not read again.
    let again = ingest_into(files, wh.path(), None).await;
    assert_eq!(again.files_with_status("unchanged"), 3);
}

#[tokio::test]
async fn damaged_exports_are_rejected_line_by_line_and_bad_sa_files_refused() {
    let input = tempfile::tempdir().unwrap();
    let dir = input.path();
    let text = "h1;1;2008-08-23 17:12:30 UTC;-1;1.00;0.00;2.00;3.00;0.00;94.00\n\
                # hostname;interval;timestamp;CPU;%user;%nice;%system;%iowait;%steal;%idle\n\
                h1;1;2008-08-23 17:12:30 UTC;-1;1.00;0.00;2.00;3.00;0.00;94.00\n\
                h1;1;2008-08-23 17:12:31 UTC;-1;abc;0.00;2.00;3.00;0.00;94.00\n\
                h1;1;2008-08-23 17:12:32 UTC;-1;1.00\n\
                h1;x;2008-08-23 17:12:33 UTC;-1;1.00;0.00;2.00;3.00;0.00;94.00\n\
                h1;1;2008-08-23 25:12:34 UTC;-1;1.00;0.00;2.00;3.00;0.00;94.00\n\
                \n\
                h1;-1;2008-08-23 17:12:35 UTC;COM a comment\n";
    std::fs::write(dir.join("h1.csv"), text).unwrap();
    let json = "{\"sysstat\": {\n\t\"hosts\": [\n\t\t{\n\t\t\t\"nodename\": \"h2\",\n\t\t\t\"statistics\": [\n\
                \t\t\t\t{\n\t\t\t\t\t\"cpu-load\": [{\"cpu\": \"all\", \"user\": 1.0}]\n\t\t\t\t},\n\
                \t\t\t\t{\n\t\t\t\t\t\"timestamp\": {\"date\": \"2008-08-23\", \"time\": \"17:12:30\", \"utc\": 1, \"interval\": 1},\n\
                \t\t\t\t\t\"queue\": {\"runq-sz\": 2, \"plist-sz\": 90}\n\t\t\t\t},\n\
                \t\t\t\t{\n\t\t\t\t\t\"timestamp\": {\"date\": \"2008-08-23\", \"time\": \"17:12:31\", oops\n";
    std::fs::write(dir.join("h2.json"), json).unwrap();
    // sysstat's magic, then nothing sadf can read.
    std::fs::write(dir.join("sa23"), b"\x96\xd5\x75\x21garbage").unwrap();

    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![dir.to_path_buf()], wh.path(), None).await;
    let by_file = rows(
        wh.path(),
        "SELECT regexp_replace(file, '.*/', ''), status, lines_read, lines_parsed, lines_rejected, lines_skipped, events
         FROM ingests ORDER BY file",
    )
    .await;
    let mut expect = vec![
        // h1.csv: 9 lines; the header and one sample parsed; a blank line and a comment skipped.
        ["h1.csv", "ingested", "9", "2", "5", "2", "1"],
        // h2.json: 14 lines; the first record has no timestamp (its 3 lines rejected), the second
        // is read (4 lines), the third breaks the JSON (2 lines); 5 lines of structure before.
        ["h2.json", "ingested", "14", "4", "5", "5", "1"],
    ];
    if have_sadf() {
        expect.push(["sa23", "refused", "0", "0", "0", "0", "0"]);
    }
    let expect: Vec<Vec<String>> = expect.iter().map(|r| r.map(String::from).to_vec()).collect();
    assert_eq!(by_file[..expect.len()], expect[..]);
    let reasons =
        rows(wh.path(), "SELECT regexp_replace(file, '.*/', ''), line, reason FROM rejects ORDER BY file, line").await;
    let reasons: Vec<String> = reasons.iter().map(|r| r.join(" | ")).collect();
    let expect = [
        "h1.csv | 1 | sample before any `# hostname;interval;timestamp;…` header",
        "h1.csv | 4 | %user: `abc` is not a number",
        "h1.csv | 5 | 5 fields, fewer than the header names",
        "h1.csv | 6 | interval `x` is not a number",
        "h1.csv | 7 | timestamp `2008-08-23 25:12:34 UTC` is not yyyy-MM-dd HH:mm:ss [UTC]",
        "h2.json | 6 | statistics record without a timestamp",
        "h2.json | 7 | statistics record without a timestamp",
        "h2.json | 8 | statistics record without a timestamp",
        "h2.json | 13 | record broken by the JSON syntax error at line 14",
    ];
    assert_eq!(reasons[..expect.len()], expect.map(String::from)[..]);
    assert!(reasons[expect.len()].starts_with("h2.json | 14 | JSON: "), "{reasons:?}");
    if have_sadf() {
        let refusal = scalar(wh.path(), "SELECT error FROM ingests WHERE status = 'refused'").await;
        assert!(refusal.contains("sa23: sadf cannot read it: Invalid system activity file"), "{refusal}");
    }
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM sadc").await, "2");
    assert_eq!(summary.total(|r| r.lines_read), summary.total(|r| r.lines_parsed + r.lines_rejected + r.lines_skipped));
}

/// `sadf -d` of a file with a restart prints the groups once per stretch between restarts,
/// each under its header again; concatenated exports repeat the headers too. Every sample
/// still gets all its figures, whichever stretch or export it is in.
#[tokio::test]
async fn restarts_and_concatenated_exports_keep_samples_whole() {
    let input = tempfile::tempdir().unwrap();
    let cpu = "# hostname;interval;timestamp;CPU;%user;%nice;%system;%iowait;%steal;%idle";
    let pcsw = "# hostname;interval;timestamp;proc/s;cswch/s";
    let stretch = |seconds: &[&str], user: f64| {
        let mut text = format!("{cpu}\n");
        for (k, s) in seconds.iter().enumerate() {
            text += &format!("h1;1;2008-08-{s} UTC;-1;{:.2};0.00;1.00;0.00;0.00;50.00\n", user + k as f64);
        }
        text += &format!("{pcsw}\n");
        for (k, s) in seconds.iter().enumerate() {
            text += &format!("h1;1;2008-08-{s} UTC;0.00;{}.00\n", 100 + k);
        }
        text
    };
    let mut text = stretch(&["23 17:12:30", "23 17:12:31"], 10.0);
    text += "h1;-1;2008-08-23 17:12:31 UTC;LINUX-RESTART\t(2 CPU)\n";
    text += &stretch(&["23 17:12:32", "23 17:12:33", "23 17:12:34"], 20.0);
    // The next day's export, appended to the same file.
    text += &stretch(&["24 00:00:00", "24 00:00:01"], 30.0);
    std::fs::write(input.path().join("h1.sadf-d.csv"), &text).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.total(|r| r.lines_rejected), 0);
    let got = rows(wh.path(), "SELECT ts, restart, cpu_user_pct, cswch_s FROM sadc ORDER BY ts, restart").await;
    let expect = [
        ["2008-08-23T17:12:30Z", "false", "10.0", "100.0"],
        ["2008-08-23T17:12:31Z", "false", "11.0", "101.0"],
        ["2008-08-23T17:12:31Z", "true", "", ""],
        ["2008-08-23T17:12:32Z", "false", "20.0", "100.0"],
        ["2008-08-23T17:12:33Z", "false", "21.0", "101.0"],
        ["2008-08-23T17:12:34Z", "false", "22.0", "102.0"],
        ["2008-08-24T00:00:00Z", "false", "30.0", "100.0"],
        ["2008-08-24T00:00:01Z", "false", "31.0", "101.0"],
    ];
    assert_eq!(got, owned(&expect));
    // 6 CPU and 2 pcsw figures a sample, each in the partition of its own day.
    let figures = rows(wh.path(), "SELECT date, count(*) FROM sar_metrics GROUP BY date ORDER BY date").await;
    assert_eq!(figures, vec![vec!["2008-08-23", "40"], vec!["2008-08-24", "16"]]);
}

/// A `sadf -dh` export a cron job appends to is read on from its last whole line, under the
/// header at its top; a half-written line waits for the next run.
#[tokio::test]
async fn an_export_that_grows_is_read_on_under_its_header() {
    // node3.sadf-dh.csv: its restart, the header, then 10 samples (17:12:30–39), a line each.
    let whole = std::fs::read_to_string(data_sysstat().join("node3.sadf-dh.csv")).unwrap();
    let lines: Vec<&str> = whole.lines().collect();
    let input = tempfile::tempdir().unwrap();
    let export = input.path().join("node3.csv");
    // Run 1: restart, header, 4 samples, and half of the fifth.
    let half = &lines[6][..40];
    std::fs::write(&export, format!("{}\n{half}", lines[..6].join("\n"))).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let first = ingest_into(vec![export.clone()], wh.path(), None).await;
    assert_eq!((first.total(|r| r.lines_read), first.total(|r| r.lines_parsed)), (6, 6));
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM sadc WHERE NOT restart").await, "4");
    // Run 2: the file as sadf finished it; lines 7–12 are read, none again.
    std::fs::write(&export, &whole).unwrap();
    let second = ingest_into(vec![export.clone()], wh.path(), None).await;
    assert_eq!(second.files_with_status("ingested"), 1);
    assert_eq!(
        (second.total(|r| r.lines_read), second.total(|r| r.lines_parsed), second.total(|r| r.lines_rejected)),
        (6, 6, 0)
    );
    let got = rows(
        wh.path(),
        "SELECT count(*), count(DISTINCT ts), min(ts), max(ts), sum(cpu_user_pct) FROM sadc WHERE NOT restart",
    )
    .await;
    // %user runs 10, 12, …, 28: a sum of 190.
    assert_eq!(got, vec![vec!["10", "10", "2008-08-23T17:12:30Z", "2008-08-23T17:12:39Z", "190.0"]]);
    // Line numbers go on from where the first run stopped: the last sample is line 12.
    assert_eq!(rows(wh.path(), "SELECT min(line), max(line) FROM sadc WHERE NOT restart").await, vec![vec!["3", "12"]]);
    // 31 figures a sample, as in the test above.
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM sar_metrics").await, (10 * 31).to_string());
    let third = ingest_into(vec![export], wh.path(), None).await;
    assert_eq!(third.files_with_status("unchanged"), 1);
}

/// A binary sa file sadc goes on appending to: the new samples are read under the header of
/// `sadf`'s text, which it writes once, at the top.
#[tokio::test]
async fn an_sa_file_that_grows_is_read_on() {
    let sadc = std::path::Path::new("/usr/lib/sysstat/sadc");
    if !have_sadf() || !sadc.exists() {
        println!("skipped: no sadc at {}", sadc.display());
        return;
    }
    let input = tempfile::tempdir().unwrap();
    let sa = input.path().join("sa01");
    let capture = |samples: &str| assert!(Command::new(sadc).args(["1", samples]).arg(&sa).status().unwrap().success());
    capture("2");
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![sa.clone()], wh.path(), None).await;
    capture("3");
    let second = ingest_into(vec![sa.clone()], wh.path(), None).await;
    assert_eq!((second.files_with_status("ingested"), second.total(|r| r.lines_rejected)), (1, 0));
    // Listed apart from the parser: sadf's own text, a line a sample (interval ≥ 0), each
    // sample once, whichever run read it. (A second sadc run started within the second of the
    // first one's last record makes a sample of interval 0 at the same time: sadf's own.)
    let text =
        Command::new("sadf").args(["-dh", "--"]).args(kahuna::ingest::sadf::SADF_ACTIVITIES).arg(&sa).output().unwrap();
    let mut samples: Vec<Vec<String>> = String::from_utf8_lossy(&text.stdout)
        .lines()
        .map(|l| l.split(';').collect::<Vec<_>>())
        .filter(|f| f.len() > 3 && f[1].parse::<i64>().is_ok_and(|i| i >= 0))
        .map(|f| vec![f[2].replace(" UTC", "Z").replace(' ', "T"), f[1].to_string()])
        .collect();
    samples.sort();
    assert!(samples.len() >= 3, "{samples:?}");
    let got = rows(wh.path(), "SELECT ts, interval_s FROM sadc WHERE NOT restart ORDER BY ts, interval_s").await;
    assert_eq!(got, samples);
}

/// `text` without the whitespace between JSON tokens: a minified export, one line.
fn minify(text: &str) -> String {
    let (mut out, mut in_string, mut escaped) = (String::with_capacity(text.len()), false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            (escaped, in_string) = match (escaped, c) {
                (true, _) => (false, true),
                (false, '\\') => (true, true),
                (false, '"') => (false, false),
                _ => (false, true),
            };
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

#[tokio::test]
async fn a_minified_sadf_j_export_gives_what_the_pretty_one_gives() {
    let Some(pretty) = sample("sysstat/sadf/local.sadf-j.json") else { return };
    let input = tempfile::tempdir().unwrap();
    let minified = minify(&std::fs::read_to_string(&pretty).unwrap()) + "\n";
    // Longer than a line may be (64 KiB): read as one document.
    assert!(minified.len() > 64 * 1024, "{}", minified.len());
    std::fs::write(input.path().join("local.min.json"), &minified).unwrap();
    std::fs::copy(&pretty, input.path().join("local.sadf-j.json")).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.files_with_status("ingested"), 2);
    let accounts = rows(
        wh.path(),
        "SELECT regexp_replace(file, '.*/', ''), lines_read, lines_parsed, lines_rejected, lines_skipped, events, error
         FROM ingests ORDER BY file",
    )
    .await;
    assert_eq!(accounts[0], ["local.min.json", "1", "1", "0", "0", "59", ""]);
    assert_eq!(accounts[1][..6], ["local.sadf-j.json", "1080", "1062", "0", "18", "59"]);
    // Each distinct sadc row and sar_metrics figure is there once per file.
    let distinct = rows(
        wh.path(),
        &format!("SELECT count(*), min(n), max(n) FROM (SELECT host, ts, restart, interval_s, {VECTOR}, count(*) AS n FROM sadc GROUP BY ALL)"),
    )
    .await;
    assert_eq!(distinct, vec![vec!["59", "2", "2"]]);
    let figures = rows(
        wh.path(),
        "SELECT count(*), count(DISTINCT concat(activity, device, metric, ts, value)) FROM sar_metrics",
    )
    .await;
    assert_eq!(figures, vec![vec![(2 * 62 * 59).to_string(), (62 * 59).to_string()]]);
}

/// A minified `sadf -j` document of `records` one-second samples from 10:00:00, and a restart.
fn minified_export(records: usize) -> (String, Vec<usize>) {
    let mut text = String::from(r#"{"sysstat":{"hosts":[{"nodename":"j1","sysname":"Linux","statistics":["#);
    let mut ends = Vec::new();
    for i in 0..records {
        let (m, s) = (i / 60, i % 60);
        if i > 0 {
            text.push(',');
        }
        text += &format!(
            r#"{{"timestamp":{{"date":"2008-08-23","time":"10:{m:02}:{s:02}","utc":1,"interval":1}},"cpu-load":[{{"cpu":"all","user":{}.25,"nice":0.00,"system":1.50,"iowait":0.25,"steal":0.00,"idle":50.00}}],"process-and-context-switch":{{"proc":1.00,"cswch":{}.00}},"network":{{"net-dev":[{{"iface":"lo","rxpck":1.00,"txpck":1.00,"rxkB":9.00,"txkB":9.00}},{{"iface":"eth0","rxpck":2.00,"txpck":2.00,"rxkB":{i}.50,"txkB":1.00}}]}}}}"#,
            i % 50,
            100 + i
        );
        ends.push(text.len());
    }
    text += r#"],"restarts":[{"boot":{"date":"2008-08-23","time":"09:59:59","utc":1}}]}]}}"#;
    text.push('\n');
    (text, ends)
}

#[tokio::test]
async fn minified_exports_stream_whole_gzipped_or_cut_short() {
    let input = tempfile::tempdir().unwrap();
    let (text, ends) = minified_export(400);
    assert!(text.len() > 2 * 64 * 1024);
    std::fs::write(input.path().join("whole.json"), &text).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, text.as_bytes()).unwrap();
    std::fs::write(input.path().join("whole.json.gz"), gz.finish().unwrap()).unwrap();
    // Cut in the middle of record 250: the 250 before it are read.
    let cut = (ends[249] + ends[250]) / 2;
    std::fs::write(input.path().join("cut.json"), &text[..cut]).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.files_with_status("ingested"), 3);
    let accounts = rows(
        wh.path(),
        "SELECT regexp_replace(file, '.*/', ''), lines_read, lines_parsed, lines_rejected, events FROM ingests ORDER BY file",
    )
    .await;
    let expect = [
        ["cut.json", "1", "0", "1", "250"],
        ["whole.json", "1", "1", "0", "401"],
        ["whole.json.gz", "1", "1", "0", "401"],
    ];
    assert_eq!(accounts, owned(&expect));
    // Per file: 400 samples and the restart; eth0's rxkB/s is i + 0.5 (sum 80000), lo's is left
    // out; cswch/s is 100 + i (sum 119800). 16 figures a sample.
    let per_file = rows(
        wh.path(),
        "SELECT regexp_replace(file, '.*/', ''), count(*), count(*) FILTER (WHERE restart), sum(rx_kb_s), sum(cswch_s)
         FROM sadc GROUP BY file ORDER BY file",
    )
    .await;
    let expect = [
        ["cut.json", "250", "0", "31250.0", "56125.0"],
        ["whole.json", "401", "1", "80000.0", "119800.0"],
        ["whole.json.gz", "401", "1", "80000.0", "119800.0"],
    ];
    assert_eq!(per_file, owned(&expect));
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM sar_metrics").await, (16 * (400 + 400 + 250)).to_string());
    // The cut line is rejected with serde_json's words; the file's error says what was kept.
    let reason = scalar(wh.path(), "SELECT reason FROM rejects").await;
    assert!(reason.starts_with("JSON: EOF while parsing"), "{reason}");
    let error = scalar(wh.path(), "SELECT error FROM ingests WHERE file LIKE '%cut.json'").await;
    assert!(error.ends_with("the 250 records before it were read"), "{error}");
}

/// A damaged character in one record of a minified `sadf -j` export costs that record only: the
/// records after it are read again from their own `{"timestamp"`. The restart after the
/// statistics is not a record that reading finds again.
#[tokio::test]
async fn a_damaged_record_of_a_minified_export_costs_only_itself() {
    let input = tempfile::tempdir().unwrap();
    let (text, ends) = minified_export(400);
    let damaged = text[ends[99]..ends[100]].replacen("\"cswch\":", "\"cswch\" ", 1);
    let text = format!("{}{damaged}{}", &text[..ends[99]], &text[ends[100]..]);
    std::fs::write(input.path().join("damaged.json"), &text).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.files_with_status("ingested"), 1);
    let accounts = "SELECT lines_read, lines_parsed, lines_rejected, events FROM ingests";
    assert_eq!(rows(wh.path(), accounts).await, owned(&[["1", "0", "1", "399"]]));
    // Record 100 (rx 100.5, cswch 200) is the one lost.
    let sums = "SELECT count(*), count(*) FILTER (WHERE restart), sum(rx_kb_s), sum(cswch_s) FROM sadc";
    assert_eq!(rows(wh.path(), sums).await, owned(&[["399", "0", "79899.5", "119600.0"]]));
    let error = scalar(wh.path(), "SELECT error FROM ingests").await;
    assert!(error.ends_with("the 100 records before it and 299 after it were read"), "{error}");
}

/// A damaged character in one record of a `sadf -j` export costs that record's lines only:
/// reading resumes at the next record's `{`, and the records after it are kept.
#[tokio::test]
async fn a_damaged_sadf_j_record_costs_only_its_own_lines() {
    let input = tempfile::tempdir().unwrap();
    let record = |second: u32, queue: &str| {
        format!(
            "\t\t\t\t{{\n\t\t\t\t\t\"timestamp\": {{\"date\": \"2008-08-23\", \"time\": \"17:12:{second:02}\", \"utc\": 1, \"interval\": 1}},\n\
             \t\t\t\t\t\"queue\": {queue}\n\t\t\t\t}}"
        )
    };
    let json = format!(
        "{{\"sysstat\": {{\n\t\"hosts\": [\n\t\t{{\n\t\t\t\"nodename\": \"h5\",\n\t\t\t\"statistics\": [\n{},\n{},\n{}\n\t\t\t]\n\t\t}}\n\t]\n}}}}\n",
        record(30, "{\"runq-sz\": 2, \"plist-sz\": 90}"),
        record(31, "{\"runq-sz\": 2, \"plist-sz\" 90}"),
        record(32, "{\"runq-sz\": 3, \"plist-sz\": 91}"),
    );
    std::fs::write(input.path().join("h5.json"), &json).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.total(|r| r.lines_read), json.lines().count() as u64);
    assert_eq!(summary.total(|r| r.lines_read), summary.total(|r| r.lines_parsed + r.lines_rejected + r.lines_skipped));
    let reasons: Vec<String> =
        rows(wh.path(), "SELECT line, reason FROM rejects ORDER BY line").await.iter().map(|r| r.join(" | ")).collect();
    // Lines 10–13 are the second record: its `{` and timestamp, the damaged line, its `}`.
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert_eq!(reasons[0], "10 | record broken by the JSON syntax error at line 12");
    assert_eq!(reasons[1], "11 | record broken by the JSON syntax error at line 12");
    assert!(reasons[2].starts_with("12 | JSON: "), "{reasons:?}");
    assert_eq!(reasons[3], "13 | after the JSON syntax error at line 12");
    let samples = rows(wh.path(), "SELECT host, ts FROM sadc ORDER BY ts").await;
    assert_eq!(samples, owned(&[["h5", "2008-08-23T17:12:30Z"], ["h5", "2008-08-23T17:12:32Z"]]),);
}
