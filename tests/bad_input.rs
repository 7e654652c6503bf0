//! Damaged and hostile input: every line is still parsed, rejected with a reason, or skipped,
//! the counts add up, and nothing panics.

mod common;

use std::io::Write;

use common::{ingest_into, owned, rows, scalar, written_an_hour_ago};

const M: &str = "attempt_200808231712_0001_m_000001_0";

#[tokio::test]
async fn damaged_files_are_refused_or_rejected_line_by_line() {
    let input = tempfile::tempdir().unwrap();
    let dir = input.path();
    std::fs::write(dir.join("hadoop-u-datanode-h1.log"), b"\x7fELF\x02\x01\x01\0\0\0\0binary").unwrap();
    std::fs::write(dir.join("hadoop-u-datanode-h4.log"), b"").unwrap();
    let mut mixed = Vec::new();
    mixed.extend_from_slice(b"\tat orphan.Continuation(X.java:1)\n");
    mixed
        .extend_from_slice(format!("2008-08-23 17:12:32,466 INFO a.TaskTracker: LaunchTaskAction: {M}\r\n").as_bytes());
    mixed.extend_from_slice(b"2008-08-23 17:12:31,000 INFO a.TaskTracker: a line from the past\n");
    mixed.extend_from_slice(b"2008-08-23 17:12:33,000 INFO a.TaskTracker: caf\xff\xfe\n");
    mixed.extend_from_slice(&vec![b'x'; 1 << 20]);
    mixed.push(b'\n');
    mixed.extend_from_slice(b"2008-13-01 00:00:00,000 INFO a.B: the thirteenth month\n");
    mixed.extend_from_slice(b"\n");
    // Blank too: a vertical tab and a tab; a no-break space and an em space (Unicode spaces).
    mixed.extend_from_slice("\x0b\t\n\u{a0}\u{2003}\n".as_bytes());
    mixed.extend_from_slice(format!("2008-08-23 17:12:40,000 INFO a.TaskTracker: Task {M} is done.\n").as_bytes());
    std::fs::write(dir.join("hadoop-u-tasktracker-h2.log"), &mixed).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    for i in 0..5000 {
        writeln!(gz, "2008-08-23 17:{:02}:{:02},000 INFO dfs.DataNode: line {i}", i / 60 % 60, i % 60).unwrap();
    }
    let whole = gz.finish().unwrap();
    std::fs::write(dir.join("hadoop-u-datanode-h3.log.gz"), &whole[..whole.len() / 2]).unwrap();

    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![dir.to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.files_with_status("refused"), 1);
    assert_eq!(summary.files_with_status("skipped"), 1);
    assert_eq!(summary.files_with_status("ingested"), 2);
    let refused = rows(wh.path(), "SELECT status, error FROM ingests WHERE status <> 'ingested' ORDER BY file").await;
    assert_eq!(refused[0][0], "refused");
    assert!(refused[0][1].contains("binary file (NUL byte at offset 7)"), "{refused:?}");
    assert_eq!(refused[1][0], "skipped");
    assert!(refused[1][1].ends_with("empty file"), "{refused:?}");

    let mixed_counts = rows(
        wh.path(),
        "SELECT lines_read, lines_parsed, lines_rejected, lines_skipped, out_of_order FROM ingests
         WHERE file LIKE '%tasktracker-h2.log'",
    )
    .await;
    assert_eq!(mixed_counts, vec![vec!["10", "3", "4", "3", "1"]]);
    let reasons = rows(
        wh.path(),
        "SELECT line, reason, length(raw) FROM rejects WHERE file LIKE '%tasktracker-h2.log' ORDER BY line",
    )
    .await;
    // Lengths in characters (`printf '…' | wc -m`); the two invalid bytes of line 4 become
    // two U+FFFD after its 47 valid characters.
    let expect = [
        ["1", "continuation line with no event before it", "33"],
        ["4", "invalid UTF-8", "49"],
        ["5", "line longer than 64 KiB", "4096"],
        ["6", "timestamp is not yyyy-MM-dd HH:mm:ss,SSS", "54"],
    ];
    assert_eq!(reasons, owned(&expect));
    // The map still pairs across the damage: 17:12:32.466 → 17:12:40.000.
    assert_eq!(scalar(wh.path(), "SELECT duration_ms FROM states WHERE state = 'Map'").await, "7534.0");

    // The truncated gzip: what decompressed is kept, the cut is one reject, counts add up.
    let gz = rows(
        wh.path(),
        "SELECT lines_parsed > 1000, lines_parsed < 5000, lines_rejected, error LIKE '%read error after line%'
         FROM ingests WHERE file LIKE '%.gz'",
    )
    .await;
    assert_eq!(gz, vec![vec!["true", "true", "1", "true"]]);
    let unbalanced = scalar(
        wh.path(),
        "SELECT count(*) FROM ingests WHERE lines_read <> lines_parsed + lines_rejected + lines_skipped",
    )
    .await;
    assert_eq!(unbalanced, "0");
    assert_eq!(
        scalar(wh.path(), "SELECT count(*) FROM rejects").await,
        scalar(wh.path(), "SELECT sum(lines_rejected) FROM ingests").await
    );

    // Run again: the cut gzip holds no further whole line, so nothing is read or rejected twice;
    // made whole, it gives the lines after the cut, and all 5,000 are then held.
    let again = ingest_into(vec![dir.to_path_buf()], wh.path(), None).await;
    assert_eq!((again.files_with_status("unchanged"), again.total(|r| r.lines_read)), (2, 0));
    std::fs::write(dir.join("hadoop-u-datanode-h3.log.gz"), &whole).unwrap();
    ingest_into(vec![dir.to_path_buf()], wh.path(), None).await;
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM logs WHERE daemon = 'datanode'").await, "5000");
}

#[tokio::test]
async fn a_growing_file_is_read_from_where_the_last_ingest_stopped() {
    let input = tempfile::tempdir().unwrap();
    let log = input.path().join("hadoop-u-tasktracker-h1.log");
    let line = |s: u32| format!("2008-08-23 17:12:{s:02},000 INFO a.TaskTracker: tick {s}\n");
    std::fs::write(&log, [line(1), line(2), line(3)].concat()).unwrap();
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![log.clone()], wh.path(), None).await;
    // Two more lines and half of a third, still being written.
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    write!(file, "{}{}2008-08-23 17:12:06,000 INFO a.Task", line(4), line(5)).unwrap();
    let second = ingest_into(vec![log.clone()], wh.path(), None).await;
    assert_eq!(second.total(|r| r.lines_read), 2);
    // `printf '2008-08-23 17:12:06,000 INFO a.Task' | wc -c`
    assert_eq!(second.total(|r| r.waiting_bytes), 35);
    assert!(
        kahuna::ingest::summary::render(&second)
            .contains("and 1 unfinished last line(s), 35 bytes, still being written")
    );
    writeln!(file, "Tracker: tick 6").unwrap();
    let third = ingest_into(vec![log.clone()], wh.path(), None).await;
    assert_eq!(third.total(|r| r.lines_read), 1);
    let lines = rows(wh.path(), "SELECT line, message FROM logs ORDER BY line").await;
    let expect: Vec<Vec<String>> = (1..=6).map(|i| vec![i.to_string(), format!("tick {i}")]).collect();
    assert_eq!(lines, expect);
    let ranges = rows(wh.path(), "SELECT offset_start, offset_end FROM ingests ORDER BY offset_start").await;
    // Each line is 51 bytes: `printf '2008-08-23 17:12:01,000 INFO a.TaskTracker: tick 1\n' | wc -c`.
    assert_eq!(ranges, vec![vec!["0", "153"], vec!["153", "255"], vec!["255", "306"]]);

    // Rotation renames the file; its content is known and adds nothing.
    let rotated = input.path().join("hadoop-u-tasktracker-h1.log.2008-08-23");
    std::fs::rename(&log, &rotated).unwrap();
    let after_rotation = ingest_into(vec![rotated.clone()], wh.path(), None).await;
    assert_eq!(after_rotation.files_with_status("unchanged"), 1);
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM logs").await, "6");

    // A seventh line came before logrotate compressed the file: the `.gz` is read from where
    // the plain file stopped, then known whole.
    let mut file = std::fs::OpenOptions::new().append(true).open(&rotated).unwrap();
    write!(file, "{}", line(7)).unwrap();
    let gzipped = input.path().join("hadoop-u-tasktracker-h1.log.2008-08-23.gz");
    let mut gz =
        flate2::write::GzEncoder::new(std::fs::File::create(&gzipped).unwrap(), flate2::Compression::default());
    gz.write_all(&std::fs::read(&rotated).unwrap()).unwrap();
    gz.finish().unwrap();
    std::fs::remove_file(&rotated).unwrap();
    let compressed = ingest_into(vec![gzipped.clone()], wh.path(), None).await;
    assert_eq!(compressed.total(|r| r.lines_read), 1);
    assert_eq!(scalar(wh.path(), "SELECT max(message) FROM logs").await, "tick 7");
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM logs").await, "7");
    let again = ingest_into(vec![gzipped], wh.path(), None).await;
    assert_eq!(again.files_with_status("unchanged"), 1);
}

/// A nightly ingest of a live log stops in the middle of tasks. The next run reads again from
/// the earliest start still open (within a day of the log's last line), so a task begun before
/// one run and ended after it is one state with its duration, and the unterminated row the
/// first run wrote is gone; lines are counted and logged once.
#[tokio::test]
async fn a_state_begun_before_one_ingest_and_ended_after_it_is_one_state() {
    let input = tempfile::tempdir().unwrap();
    let log = input.path().join("hadoop-u-tasktracker-h1.log");
    let task = |i: u32| format!("attempt_200808231712_0001_m_00000{i}_0");
    let launch = |at: &str, i: u32| format!("2008-08-{at},000 INFO a.TaskTracker: LaunchTaskAction: {}\n", task(i));
    let done = |at: &str, i: u32| format!("2008-08-{at},000 INFO a.TaskTracker: Task {} is done.\n", task(i));
    // Task 0 began two days before the rest: too long ago to be reopened.
    let first = [launch("21 10:00:00", 0), launch("23 17:12:01", 1), launch("23 17:12:02", 2), done("23 17:12:05", 2)];
    std::fs::write(&log, first.concat()).unwrap();
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![log.clone()], wh.path(), None).await;
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    write!(file, "{}{}{}", launch("23 17:12:06", 3), done("23 17:12:09", 1), done("23 17:12:10", 0)).unwrap();
    let second = ingest_into(vec![log.clone()], wh.path(), None).await;
    let counts = |s: &kahuna::ingest::Summary| {
        [s.total(|r| r.lines_read), s.total(|r| r.states), s.total(|r| r.unterminated), s.total(|r| r.unmatched_ends)]
    };
    // Lines 5–7: task 1 ended, task 3 began, task 0's end found no start.
    assert_eq!(counts(&second), [3, 3, 1, 1]);
    write!(file, "{}", done("23 17:12:12", 3)).unwrap();
    let third = ingest_into(vec![log.clone()], wh.path(), None).await;
    assert_eq!(counts(&third), [1, 1, 0, 0]);
    let nothing_new = ingest_into(vec![log.clone()], wh.path(), None).await;
    assert_eq!((nothing_new.files_with_status("unchanged"), nothing_new.total(|r| r.lines_read)), (1, 0));

    let states = rows(
        wh.path(),
        "SELECT substr(task_id, 34, 1) AS task, start_line, end_line, duration_ms FROM states ORDER BY task_id, start_line NULLS FIRST",
    )
    .await;
    let expect = [
        ["0", "", "7", ""],
        ["0", "1", "", ""],
        ["1", "2", "6", "8000.0"],
        ["2", "3", "4", "3000.0"],
        ["3", "5", "8", "6000.0"],
    ];
    assert_eq!(states, owned(&expect));
    assert_eq!(scalar(wh.path(), "SELECT count(*) || ' ' || count(DISTINCT line) FROM logs").await, "8 8");
    let ranges = rows(wh.path(), "SELECT offset_start, lines_read FROM ingests ORDER BY offset_start").await;
    assert_eq!(ranges.iter().map(|r| r[1].as_str()).collect::<Vec<_>>(), ["4", "3", "1"], "{ranges:?}");

    // Task 4 begins; the log rotates (renamed, then a new one) before it ends. Its start is in
    // the renamed file, read again for it, its end in the new one: one state still, and the
    // row written under the old name is gone.
    write!(file, "{}", launch("23 17:12:13", 4)).unwrap();
    ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    std::fs::rename(&log, input.path().join("hadoop-u-tasktracker-h1.log.1")).unwrap();
    std::fs::write(&log, done("23 17:12:20", 4)).unwrap();
    let rotated = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(counts(&rotated), [1, 1, 0, 0]);
    let task_4 =
        "SELECT start_line, end_line, duration_ms, file LIKE '%.log' FROM states WHERE task_id LIKE '%_000004_0'";
    assert_eq!(rows(wh.path(), task_4).await, owned(&[["9", "1", "7000.0", "true"]]));

    // A 0.20 DataNode logs a write's start, and its clienttrace line ends it with the duration
    // it measured: the line after the ingest closes the start before it, whose row goes.
    let datanode = input.path().join("hadoop-u-datanode-h1.log");
    let receiving = "2008-08-23 17:13:15,000 INFO org.apache.hadoop.hdfs.server.datanode.DataNode: \
                     Receiving block blk_7 src: /10.0.0.2:50600 dest: /10.0.0.1:50010\n";
    std::fs::write(&datanode, receiving).unwrap();
    ingest_into(vec![datanode.clone()], wh.path(), None).await;
    let mut file = std::fs::OpenOptions::new().append(true).open(&datanode).unwrap();
    writeln!(
        file,
        "2008-08-23 17:13:16,000 INFO org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace: src: /10.0.0.2:50600, \
         dest: /10.0.0.1:50010, bytes: 42, op: HDFS_WRITE, cliID: DFSClient_1, blockid: blk_7, duration: 400000000"
    )
    .unwrap();
    ingest_into(vec![datanode], wh.path(), None).await;
    let writes = "SELECT start_line, end_line, duration_ms, source FROM states WHERE state = 'WriteBlock'";
    assert_eq!(rows(wh.path(), writes).await, owned(&[["2", "2", "400.0", "clienttrace"]]));
}

/// A stray run of NULs (what a crash leaves in a log's last blocks) rejects the line it sits
/// in, not the file: the lines around it are read, and the Map it interrupts is still paired.
#[tokio::test]
async fn a_stray_nul_rejects_its_line_not_the_file() {
    let input = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    log.extend_from_slice(format!("2008-08-23 17:12:32,466 INFO a.TaskTracker: LaunchTaskAction: {M}\n").as_bytes());
    log.extend_from_slice(b"2008-08-23 17:12:33,000 INFO a.TaskTracker: before the hole\n");
    log.extend_from_slice(&[0; 4096]);
    log.extend_from_slice(b"2008-08-23 17:12:34,000 INFO a.TaskTracker: after the hole\n");
    log.extend_from_slice(format!("2008-08-23 17:12:40,000 INFO a.TaskTracker: Task {M} is done.\n").as_bytes());
    std::fs::write(input.path().join("hadoop-u-tasktracker-h1.log"), &log).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.files_with_status("ingested"), 1);
    let counts = rows(wh.path(), "SELECT lines_read, lines_parsed, lines_rejected, lines_skipped FROM ingests").await;
    assert_eq!(counts, owned(&[["4", "3", "1", "0"]]));
    let reasons = rows(wh.path(), "SELECT line, reason FROM rejects").await;
    assert_eq!(reasons, owned(&[["3", "NUL byte in line"]]));
    let maps = rows(wh.path(), "SELECT state, duration_ms FROM states").await;
    assert_eq!(maps, owned(&[["Map", "7534.0"]]));
}

/// A last line without `\n` waits while its file may still grow, and is read once the file is
/// rotated away (a later file of the same daemon follows it) or has stopped growing.
#[tokio::test]
async fn a_last_line_without_a_newline_is_read_once_the_file_is_done() {
    let input = tempfile::tempdir().unwrap();
    let line = |s: u32| format!("2008-08-23 17:12:{s:02},000 INFO a.TaskTracker: tick {s}");
    let log = input.path().join("hadoop-u-tasktracker-h1.log");
    std::fs::write(&log, format!("{}\n{}\n{}", line(1), line(2), line(3))).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let first = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(first.total(|r| r.lines_read), 2, "tick 3 may still be being written");

    // Rotated: the daemon writes a new file, and tick 3 is whole.
    std::fs::rename(&log, input.path().join("hadoop-u-tasktracker-h1.log.1")).unwrap();
    std::fs::write(&log, format!("{}\n", line(4))).unwrap();
    let second = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(second.total(|r| r.lines_read), 2);
    let messages = rows(wh.path(), "SELECT message FROM logs ORDER BY ts").await;
    assert_eq!(messages, owned(&[["tick 1"], ["tick 2"], ["tick 3"], ["tick 4"]]));

    // A log nobody has written for an hour: its last line is whole too.
    let quiet = input.path().join("hadoop-u-tasktracker-h2.log");
    std::fs::write(&quiet, format!("{}\n{}", line(5), line(6))).unwrap();
    written_an_hour_ago(&quiet);
    let third = ingest_into(vec![quiet], wh.path(), None).await;
    assert_eq!(third.total(|r| r.lines_read), 2);
    let again = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(again.total(|r| r.lines_read), 0, "each line once");
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM logs").await, "6");
}
