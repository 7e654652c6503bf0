//! Job history into `jobs`, `attempts` and `states`: the project's own history of the job in
//! `data/logs`, every job of the shared samples (text and jhist; skipped, with a message, where
//! absent), and damaged input. Expected numbers come from the files by the shell pipelines
//! written beside them, not from the parser.

mod common;

use std::path::PathBuf;

use common::{data_dir, ingest_into, rows, sample, scalar};

fn data_history() -> PathBuf {
    common::package_dir().join("data/jobhistory")
}

fn table(expect: &[&[&str]]) -> Vec<Vec<String>> {
    expect.iter().map(|r| r.iter().map(|s| s.to_string()).collect()).collect()
}

#[tokio::test]
async fn the_history_of_the_logged_job_agrees_with_its_logs() {
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![data_history(), data_dir()], wh.path(), None).await;
    assert_eq!(summary.total(|r| r.lines_rejected), 0);
    // 29 lines, 27 records: the failed map's ERROR runs over 3 lines.
    let history =
        rows(wh.path(), "SELECT lines_read, lines_parsed, events, states FROM ingests WHERE layout = 'job history'")
            .await;
    assert_eq!(history, table(&[&["29", "29", "27", "8"]]));
    let job = rows(
        wh.path(),
        "SELECT job_id, user, name, queue, submit_ts, launch_ts, finish_ts, outcome, total_maps, total_reduces,
                finished_maps, finished_reduces, failed_maps, failed_reduces FROM jobs",
    )
    .await;
    let expect: &[&str] = &[
        "job_200808231712_0001",
        "hadoop",
        "wordcount",
        "",
        "2008-08-23T17:12:30Z",
        "2008-08-23T17:12:31Z",
        "2008-08-23T17:13:25Z",
        "SUCCEEDED",
        "4",
        "2",
        "4",
        "2",
        "1",
        "0",
    ];
    assert_eq!(job, table(&[expect]));
    // 5 map attempts (m_000003 twice), 3 reduce attempts (r_000001 twice), a setup and a cleanup.
    let attempts =
        rows(wh.path(), "SELECT type, status, count(*) FROM attempts GROUP BY type, status ORDER BY type, status")
            .await;
    let expect: &[&[&str]] = &[
        &["CLEANUP", "SUCCEEDED", "1"],
        &["MAP", "FAILED", "1"],
        &["MAP", "SUCCEEDED", "4"],
        &["REDUCE", "KILLED", "1"],
        &["REDUCE", "SUCCEEDED", "2"],
        &["SETUP", "SUCCEEDED", "1"],
    ];
    assert_eq!(attempts, table(expect));
    let error = scalar(wh.path(), "SELECT error FROM attempts WHERE status = 'FAILED'").await;
    assert_eq!(
        error,
        "java.io.IOException: Task process exit with nonzero status of 1.\n\tat org.apache.hadoop.mapred.TaskRunner.run(TaskRunner.java:418)\n"
    );
    let reduce = rows(
        wh.path(),
        "SELECT host, rack, shuffle_finish_ts, sort_finish_ts FROM attempts WHERE attempt_id = 'attempt_200808231712_0001_r_000000_0'",
    )
    .await;
    assert_eq!(reduce, table(&[&["node1", "/default-rack", "2008-08-23T17:13:10Z", "2008-08-23T17:13:11Z"]]));
    // Every Map and Reduce attempt the TaskTrackers logged starts on the same host at the same
    // time in the history; where the logs saw an end, the history has the same one.
    let agree = rows(
        wh.path(),
        "SELECT count(*), count(*) FILTER (WHERE h.host = l.host AND h.start_ts = l.start_ts),
                count(*) FILTER (WHERE l.end_ts IS NULL OR (l.end_ts = h.end_ts AND l.outcome = h.outcome))
         FROM states h JOIN states l ON h.task_id = l.task_id
         WHERE h.daemon = 'history' AND l.daemon = 'tasktracker' AND l.state = h.state",
    )
    .await;
    assert_eq!(agree, table(&[&["8", "8", "8"]]));
}

#[tokio::test]
async fn every_sample_job_with_its_attempts() {
    let (Some(text), Some(jhist)) = (sample("jobhistory/text"), sample("jobhistory/jhist")) else { return };
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![text, jhist], wh.path(), None).await;
    assert_eq!(summary.files_with_status("ingested"), 11);
    assert_eq!(summary.total(|r| r.lines_rejected), 0);
    // Text: zcat -f F | grep -o '^Job JOBID="[^"]*".*JOB_STATUS="[A-Z]*"' | grep -v 'PREP\|RUNNING'
    // jhist: grep -o '"type":"JOB_[A-Z]*"' F | grep 'FINISHED\|FAILED\|KILLED'
    let jobs =
        rows(wh.path(), "SELECT regexp_replace(file, '.*/', ''), job_id, outcome FROM jobs ORDER BY file, job_id")
            .await;
    let expect: &[&[&str]] = &[
        &["Hadoop18JobHistoryLog.txt", "job_200903042324_10816", "SUCCEEDED"],
        &["JobHistory.log", "job_200909120624_0005", "SUCCEEDED"],
        &["TestJobLog.txt", "job_200903062215_0577", "SUCCEEDED"],
        &["sample-job-tracker-logs.gz", "job_200904211745_0001", "KILLED"],
        &["sample-job-tracker-logs.gz", "job_200904211745_0002", "SUCCEEDED"],
        &["sample-job-tracker-logs.gz", "job_200904211745_0003", "SUCCEEDED"],
        &["sample-job-tracker-logs.gz", "job_200904211745_0004", "SUCCEEDED"],
        &["v20-single-input-log.gz", "job_200904211745_0002", "SUCCEEDED"],
        &["job_0.23.9-FAILED.jhist", "job_1399356417814_19732", "FAILED"],
        &["job_1329348432655_0001-10.jhist", "job_1329348432655_0001", "SUCCEEDED"],
        &[
            "job_1329348432655_0001-1329348443227-user-Sleep+job-1329348468601-10-1-SUCCEEDED-default.jhist",
            "job_1329348432655_0001",
            "SUCCEEDED",
        ],
        &[
            "job_1393307629410_0001-1393307687476-user-Sleep+job-1393307723835-0-0-FAILED-default-1393307693920.jhist",
            "job_1393307629410_0001",
            "FAILED",
        ],
        &["job_2.0.3-alpha-FAILED.jhist", "job_1400206191003_0001", "FAILED"],
        &["job_2.4.0-FAILED.jhist", "job_1400204860297_0001", "FAILED"],
    ];
    let mut expect = table(expect);
    // `ORDER BY file` sorts the full paths: …/jhist/… before …/text/….
    expect.rotate_left(8);
    assert_eq!(jobs, expect);

    // Attempts by type and final status. Text: each attempt's end record,
    //   zcat -f F | grep -o 'TASK_TYPE="[A-Z]*" TASKID="[^"]*" TASK_ATTEMPT_ID="[^"]*" TASK_STATUS="[A-Z]*"' |
    //   sed 's/TASKID="[^"]*" //; s/TASK_ATTEMPT_ID="[^"]*" //' | sort | uniq -c
    // and zcat -f F | grep -o 'TASK_ATTEMPT_ID="[^"]*"' | sort -u | wc -l for all of them
    // (TestJobLog.txt: 19 attempts, 18 ends; a CLEANUP attempt only starts).
    // jhist: grep -o '"type":"[A-Z_]*_ATTEMPT_[A-Z]*"' F | sort | uniq -c.
    let attempts = rows(
        wh.path(),
        "SELECT regexp_replace(file, '.*/', '') AS f, type, coalesce(status, '-'), count(*) FROM attempts
         GROUP BY ALL ORDER BY f, type, 3",
    )
    .await;
    let expect: &[&[&str]] = &[
        &["Hadoop18JobHistoryLog.txt", "MAP", "SUCCEEDED", "9"],
        &["Hadoop18JobHistoryLog.txt", "REDUCE", "SUCCEEDED", "8"],
        &["JobHistory.log", "CLEANUP", "SUCCEEDED", "1"],
        &["JobHistory.log", "MAP", "SUCCEEDED", "10"],
        &["JobHistory.log", "REDUCE", "SUCCEEDED", "8"],
        &["JobHistory.log", "SETUP", "SUCCEEDED", "1"],
        &["TestJobLog.txt", "CLEANUP", "-", "1"],
        &["TestJobLog.txt", "CLEANUP", "SUCCEEDED", "1"],
        &["TestJobLog.txt", "MAP", "FAILED", "1"],
        &["TestJobLog.txt", "MAP", "SUCCEEDED", "14"],
        &["TestJobLog.txt", "REDUCE", "SUCCEEDED", "1"],
        &["TestJobLog.txt", "SETUP", "SUCCEEDED", "1"],
        &["job_0.23.9-FAILED.jhist", "MAP", "FAILED", "7"],
        &["job_0.23.9-FAILED.jhist", "MAP", "KILLED", "1"],
        &["job_1329348432655_0001-10.jhist", "MAP", "SUCCEEDED", "10"],
        &["job_1329348432655_0001-10.jhist", "REDUCE", "SUCCEEDED", "1"],
        &[
            "job_1329348432655_0001-1329348443227-user-Sleep+job-1329348468601-10-1-SUCCEEDED-default.jhist",
            "MAP",
            "SUCCEEDED",
            "10",
        ],
        &[
            "job_1329348432655_0001-1329348443227-user-Sleep+job-1329348468601-10-1-SUCCEEDED-default.jhist",
            "REDUCE",
            "SUCCEEDED",
            "2",
        ],
        &[
            "job_1393307629410_0001-1393307687476-user-Sleep+job-1393307723835-0-0-FAILED-default-1393307693920.jhist",
            "MAP",
            "FAILED",
            "1",
        ],
        &["job_2.0.3-alpha-FAILED.jhist", "MAP", "FAILED", "4"],
        &["job_2.4.0-FAILED.jhist", "MAP", "FAILED", "4"],
        &["sample-job-tracker-logs.gz", "CLEANUP", "SUCCEEDED", "4"],
        &["sample-job-tracker-logs.gz", "MAP", "FAILED", "4"],
        &["sample-job-tracker-logs.gz", "MAP", "KILLED", "66"],
        &["sample-job-tracker-logs.gz", "MAP", "SUCCEEDED", "154"],
        &["sample-job-tracker-logs.gz", "REDUCE", "KILLED", "3"],
        &["sample-job-tracker-logs.gz", "REDUCE", "SUCCEEDED", "49"],
        &["sample-job-tracker-logs.gz", "SETUP", "SUCCEEDED", "3"],
        &["v20-single-input-log.gz", "CLEANUP", "SUCCEEDED", "1"],
        &["v20-single-input-log.gz", "MAP", "FAILED", "1"],
        &["v20-single-input-log.gz", "MAP", "SUCCEEDED", "20"],
        &["v20-single-input-log.gz", "REDUCE", "SUCCEEDED", "1"],
        &["v20-single-input-log.gz", "SETUP", "SUCCEEDED", "1"],
    ];
    assert_eq!(attempts, table(expect));
    // Map and Reduce attempts, and only they, are states of the history.
    assert_eq!(
        scalar(wh.path(), "SELECT count(*) FROM states WHERE daemon = 'history'").await,
        scalar(wh.path(), "SELECT count(*) FROM attempts WHERE type IN ('MAP', 'REDUCE')").await
    );

    // grep -o 'TASK_ATTEMPT_ID="attempt_200909120624_0005_r_000000_0"[^.]*' JobHistory.log, then
    // date -u -d @1252764891.644 +%FT%T.%3NZ and so on for SHUFFLE_FINISHED, SORT_FINISHED,
    // FINISH_TIME; HOSTNAME="/default-rack/host1".
    let reduce = rows(
        wh.path(),
        "SELECT host, rack, start_ts, shuffle_finish_ts, sort_finish_ts, finish_ts FROM attempts
         WHERE attempt_id = 'attempt_200909120624_0005_r_000000_0'",
    )
    .await;
    let expect: &[&str] = &[
        "host1",
        "/default-rack",
        "2009-09-12T14:14:51.644Z",
        "2009-09-12T14:16:19.297Z",
        "2009-09-12T14:16:20.042Z",
        "2009-09-12T14:16:25.415Z",
    ];
    assert_eq!(reduce, table(&[expect]));
    // job_1329348432655_0001-10.jhist: "startTime":1329348464995 of the reduce attempt,
    // "shuffleFinishTime":1329348468462, "finishTime":1329348468600, "hostname":"localhost".
    let jhist = rows(
        wh.path(),
        "SELECT DISTINCT host, start_ts, shuffle_finish_ts, finish_ts FROM attempts
         WHERE attempt_id = 'attempt_1329348432655_0001_r_000000_0'",
    )
    .await;
    assert_eq!(
        jhist,
        table(&[&["localhost", "2012-02-15T23:27:44.995Z", "2012-02-15T23:27:48.462Z", "2012-02-15T23:27:48.600Z"]])
    );
    // TestJobLog.txt's failed attempt names its host without a rack, its error over 13 lines.
    let failed = rows(
        wh.path(),
        "SELECT host, rack IS NULL, error LIKE 'java.io.IOException: MROutput/MRErrThread failed:%', length(error) - length(replace(error, chr(10), ''))
         FROM attempts WHERE attempt_id = 'attempt_200904060626_2141_m_000108_1'",
    )
    .await;
    assert_eq!(failed, table(&[&["test24.chukwa-example.com", "true", "true", "12"]]));
}

#[tokio::test]
async fn damaged_history_is_rejected_record_by_record() {
    let input = tempfile::tempdir().unwrap();
    let text = "Meta VERSION=\"1\" .\n\
                Job JOBID=\"job_1_0001\" USER=\"u\" SUBMIT_TIME=\"1000\" .\n\
                MapAttempt TASK_TYPE=\"MAP\" START_TIME=\"1000\" .\n\
                Job JOBID=\"job_1_0001\" what is this .\n\
                MapAttempt TASK_TYPE=\"MAP\" TASK_ATTEMPT_ID=\"attempt_1_0001_m_000000_0\" START_TIME=\"2000\" .\n\
                MapAttempt TASK_ATTEMPT_ID=\"attempt_1_0001_m_000000_0\" TASK_STATUS=\"FAILED\" ERROR=\"never\n\
                closed\n";
    std::fs::write(input.path().join("history.txt"), text).unwrap();
    let jhist = "Avro-Json\n{\"type\":\"record\"}\n{\"type\":\"JOB_SUBMITTED\",\"event\":{\"x\":{\"jobid\":\"job_2_0001\",\"submitTime\":5}}}\n\
                 {\"type\":\"JOB_FINISHED\"\n\n{\"type\":\"JOB_FINISHED\",\"event\":{\"x\":{\"jobid\":\"job_2_0001\",\"finishTime\":9}}}\n";
    std::fs::write(input.path().join("job_2_0001.jhist"), jhist).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.total(|r| r.lines_read), summary.total(|r| r.lines_parsed + r.lines_rejected + r.lines_skipped));
    let reasons =
        rows(wh.path(), "SELECT regexp_replace(file, '.*/', ''), line, reason FROM rejects ORDER BY file, line").await;
    let reasons: Vec<String> = reasons.iter().map(|r| r.join(" | ")).collect();
    let expect = [
        "history.txt | 3 | MapAttempt record without TASK_ATTEMPT_ID",
        "history.txt | 4 | `what is this .` is not KEY=\"value\"",
        "history.txt | 6 | record cut short by the end of the file (a quote never closed)",
        "history.txt | 7 | record cut short by the end of the file (a quote never closed)",
    ];
    assert_eq!(reasons[..4], expect.map(String::from)[..]);
    assert!(reasons[4].starts_with("job_2_0001.jhist | 4 | not JSON: "), "{reasons:?}");
    assert_eq!(reasons.len(), 5);
    let jobs = rows(wh.path(), "SELECT job_id, user, outcome, finish_ts FROM jobs ORDER BY job_id").await;
    assert_eq!(
        jobs,
        table(&[&["job_1_0001", "u", "", ""], &["job_2_0001", "", "SUCCEEDED", "1970-01-01T00:00:00.009Z"]])
    );
    // The attempt's start survives; its end was in the broken record.
    let attempt = rows(wh.path(), "SELECT attempt_id, status, finish_ts FROM attempts").await;
    assert_eq!(attempt, table(&[&["attempt_1_0001_m_000000_0", "", ""]]));
}

/// A jhist event far longer than a log line may be (a job's counters) is read whole: the job
/// keeps its outcome and finish time.
#[tokio::test]
async fn a_jhist_event_longer_than_a_log_line_is_read_whole() {
    let input = tempfile::tempdir().unwrap();
    let counters: Vec<String> = (0..4000)
        .map(|i| format!("{{\"name\":\"COUNTER_{i:05}\",\"displayName\":\"counter {i}\",\"value\":{i}}}"))
        .collect();
    let finished = format!(
        "{{\"type\":\"JOB_FINISHED\",\"event\":{{\"x\":{{\"jobid\":\"job_3_0001\",\"finishTime\":9,\"totalCounters\":{{\"groups\":[{{\"counts\":[{}]}}]}}}}}}}}",
        counters.join(",")
    );
    assert!(finished.len() > 200 * 1024, "{}", finished.len());
    let jhist = format!(
        "Avro-Json\n{{\"type\":\"record\"}}\n{{\"type\":\"JOB_SUBMITTED\",\"event\":{{\"x\":{{\"jobid\":\"job_3_0001\",\"submitTime\":5}}}}}}\n{finished}\n"
    );
    std::fs::write(input.path().join("job_3_0001.jhist"), jhist).unwrap();
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.total(|r| r.lines_read), 4);
    assert_eq!(summary.total(|r| r.lines_rejected), 0);
    let jobs = rows(wh.path(), "SELECT job_id, outcome, finish_ts FROM jobs").await;
    assert_eq!(jobs, table(&[&["job_3_0001", "SUCCEEDED", "1970-01-01T00:00:00.009Z"]]));
}
