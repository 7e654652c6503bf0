//! Real Hadoop logs from `../shared/samples/` (skipped, with a message, where absent). The
//! expected numbers come from shell pipelines over the samples, independent of the parser; each
//! is written beside its assertion.

mod common;

use common::{ingest_into, owned, rows, sample, scalar, written_an_hour_ago};

#[tokio::test]
async fn loghub_hdfs_write_and_read_blocks() {
    let Some(path) = sample("hdfs/HDFS_2k.log") else { return };
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![path], wh.path(), None).await;
    // `wc -l`: 2000 CRLF lines, every one a timestamped event.
    assert_eq!(summary.total(|r| r.lines_read), 2000);
    assert_eq!(summary.total(|r| r.events), 2000);
    assert_eq!(summary.total(|r| r.lines_rejected), 0);
    assert_eq!(scalar(wh.path(), "SELECT merged FROM ingests").await, "true");
    // tr -d '\r' < HDFS_2k.log > h.log
    // grep -c 'Receiving block' h.log                                   → 292 starts
    // grep -c 'Received block .* of size [0-9]* from' h.log             → 292 ends (PacketResponder)
    // grep -c 'Received block .* src: ' h.log                           → 2 ends (DataXceiver)
    // Pairing on (block, writer): sed -n 's/.*Receiving block \(blk_[-0-9]*\) src: \/\([0-9.]*\):.*/\1 \2/p'
    // and the same for the ends, then `comm -12` of the sorted lists → 0 pairs: a 2,000-line
    // random sample holds no write whole, so every start is unterminated and every end unmatched.
    let writes = rows(
        wh.path(),
        "SELECT count(*), count(*) FILTER (WHERE end_ts IS NULL), count(*) FILTER (WHERE start_ts IS NULL),
                count(DISTINCT block_id), count(*) FILTER (WHERE host IS NULL)
         FROM states WHERE state = 'WriteBlock'",
    )
    .await;
    // 586 distinct blocks: `cut -d' ' -f1` of starts and ends, `sort -u`, 292 + 294, none shared.
    // The 292 PacketResponder ends do not name their DataNode, so their host stays NULL.
    assert_eq!(writes, vec![vec!["586", "292", "294", "586", "292"]]);
    // grep -c 'Served block' → 80; grep -c 'Got exception while serving' → 80.
    let reads = rows(
        wh.path(),
        "SELECT outcome, count(*), count(DISTINCT host) > 1 FROM states WHERE state = 'ReadBlock' GROUP BY outcome ORDER BY outcome",
    )
    .await;
    assert_eq!(reads, vec![vec!["FAILED", "80", "true"], vec!["SUCCEEDED", "80", "true"]]);
    // A start's host is the DataNode in `dest:`: the first Receiving line names 10.251.30.6.
    let first = scalar(
        wh.path(),
        "SELECT host FROM states WHERE state = 'WriteBlock' AND block_id = 'blk_5792489080791696128'",
    )
    .await;
    assert_eq!(first, "10.251.30.6");
}

#[tokio::test]
async fn every_clienttrace_line_is_one_state() {
    let Some(path) = sample("clienttrace/ClientTrace.log") else { return };
    let wh = tempfile::tempdir().unwrap();
    // The file's name says no host: the operator names it.
    let summary = ingest_into(vec![path], wh.path(), Some("localhost")).await;
    assert_eq!(summary.total(|r| r.events), 98);
    let by_kind = rows(
        wh.path(),
        "SELECT state, count(*), sum(bytes), round(sum(duration_ms), 3), count(*) FILTER (WHERE start_ts IS NULL)
         FROM states GROUP BY state ORDER BY state",
    )
    .await;
    // for op in HDFS_READ HDFS_WRITE MAPRED_SHUFFLE; do grep "op: $op" ClientTrace.log |
    //   sed 's/.*bytes: \([0-9]*\),.*duration: \([0-9]*\).*/\1 \2/' |
    //   awk '{b+=$1; d+=$2} END {printf "%d %d %.6f\n", NR, b, d/1e6}'; done
    let expect = [
        ["MapCopy", "80", "105098599", "11304.523", "0"],
        ["ReadBlock", "10", "106132038", "0.0", "0"],
        ["WriteBlock", "8", "105309054", "8674.166", "0"],
    ];
    assert_eq!(by_kind, owned(&expect));
    // Shuffles: map side 127.0.1.1 serving the reduce at `dest` (all 127.0.1.1 here); reads
    // served to the client at `dest`, writes from the client at `src` (all 127.0.0.1).
    let peers =
        rows(wh.path(), "SELECT state, peer_host, count(*) FROM states GROUP BY state, peer_host ORDER BY state").await;
    let expect = [["MapCopy", "127.0.1.1", "80"], ["ReadBlock", "127.0.0.1", "10"], ["WriteBlock", "127.0.0.1", "8"]];
    assert_eq!(peers, owned(&expect));
    let first_shuffle = rows(
        wh.path(),
        "SELECT task_id, peer_task_id, duration_ms, end_ts - start_ts = INTERVAL '277 milliseconds'
         FROM states WHERE state = 'MapCopy' ORDER BY end_ts LIMIT 1",
    )
    .await;
    assert_eq!(
        first_shuffle,
        vec![vec![
            "attempt_200909120624_0005_m_000000_0",
            "attempt_200909120624_0005_r_000000_0",
            "277.277094",
            "true"
        ]]
    );
}

/// A YARN MapReduce application master's log (Loghub's Hadoop sample: 2,000 random lines of
/// one application's master and task containers, no host in its name): each attempt's Map state
/// runs from the line that gives it a container on a node to its first move out of RUNNING.
#[tokio::test]
async fn an_application_masters_log_gives_its_attempts_map_states_on_their_nodes() {
    let Some(sample) = sample("yarn/Hadoop_2k.log") else { return };
    // Its last line has no `\n`: read as a log collected an hour after it was written, where
    // that line is whole (a fresh copy's would wait for the next run, see bad_input.rs).
    let input = tempfile::tempdir().unwrap();
    let path = input.path().join("Hadoop_2k.log");
    std::fs::copy(&sample, &path).unwrap();
    written_an_hour_ago(&path);
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![path], wh.path(), None).await;
    assert_eq!(summary.total(|r| r.lines_read), 2000);
    assert_eq!(summary.total(|r| r.lines_rejected), 0);
    // grep -c 'TaskAttempt: \[attempt_.*\] using containerId: \[.* on NM: \[' → 10 starts, on
    // 04DN8IQ (1), MININT-FNANLI5 (2), MSRA-SA-41 (5), MSRA-SA-39 (2).
    // grep -E ' TaskAttempt Transitioned from (ASSIGNED|RUNNING|COMMIT_PENDING) to (SUCCESS|FAIL|KILL)'
    // → m_000003 to SUCCESS_CONTAINER_CLEANUP (line 799), m_000001 and m_000002 to
    // FAIL_CONTAINER_CLEANUP (lines 1056, 1023); each started above: 3 pairs, 7 unterminated.
    let by_host = rows(
        wh.path(),
        "SELECT split_part(host, '.', 1), count(*), count(end_ts), string_agg(outcome, ',' ORDER BY outcome)
         FROM states WHERE state = 'Map' AND daemon = 'mrappmaster' GROUP BY 1 ORDER BY 1",
    )
    .await;
    let expect = [
        ["04DN8IQ", "1", "0", ""],
        ["MININT-FNANLI5", "2", "2", "FAILED,FAILED"],
        ["MSRA-SA-39", "2", "0", ""],
        ["MSRA-SA-41", "5", "1", "SUCCEEDED"],
    ];
    assert_eq!(by_host, owned(&expect));
    // Line 305 (18:02:47,841) to line 799 (18:04:50,208).
    let succeeded = "SELECT task_id, duration_ms, start_line, end_line FROM states WHERE outcome = 'SUCCEEDED'";
    assert_eq!(
        rows(wh.path(), succeeded).await,
        owned(&[["attempt_1445144423722_0020_m_000003_0", "122367.0", "305", "799"]])
    );
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM states WHERE state <> 'Map'").await, "0");
}
