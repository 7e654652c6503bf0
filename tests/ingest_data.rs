//! `data/logs` is a hand-written job (job_200808231712_0001: 4 maps, 2 reduces on node1–3,
//! a failed map attempt, a killed reduce attempt, 0.18 and 0.20 wording, DEBUG and clienttrace
//! DataNodes, and the opening lines of a merged Loghub file). Every number below was worked
//! out by hand from those files' timestamps, not from the parser.

mod common;

use common::{data_dir, ingest_into, owned, rows, scalar};

#[tokio::test]
async fn every_line_is_accounted_for() {
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![data_dir()], wh.path(), None).await;
    // 52 lines in the 9 files (`cat data/logs/**/* | wc -l`), one blank line in node1's
    // TaskTracker log; node2's two stack-trace lines join the `Child Error` event.
    assert_eq!(summary.files_with_status("ingested"), 9);
    assert_eq!(summary.total(|r| r.lines_read), 52);
    assert_eq!(summary.total(|r| r.lines_parsed), 51);
    assert_eq!(summary.total(|r| r.lines_skipped), 1);
    assert_eq!(summary.total(|r| r.lines_rejected), 0);
    assert_eq!(summary.total(|r| r.events), 49);
    let sums = rows(
        wh.path(),
        "SELECT sum(lines_read), sum(lines_parsed + lines_rejected + lines_skipped), sum(events), count(*) FROM ingests",
    )
    .await;
    assert_eq!(sums, vec![vec!["52", "52", "49", "9"]]);
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM logs").await, "49");
    let stack = scalar(wh.path(), "SELECT message FROM logs WHERE message LIKE '%Child Error%'").await;
    assert!(stack.ends_with("at org.apache.hadoop.mapred.TaskRunner.run(TaskRunner.java:418)"), "{stack}");
}

#[tokio::test]
async fn states_by_kind_host_and_duration() {
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![data_dir()], wh.path(), None).await;
    let by_kind = rows(
        wh.path(),
        "SELECT state, count(*), count(*) FILTER (WHERE end_ts IS NULL), count(*) FILTER (WHERE start_ts IS NULL)
         FROM states GROUP BY state ORDER BY state",
    )
    .await;
    let expect = [
        ["Map", "5", "0", "0"],
        ["MapCopy", "1", "0", "0"],
        ["ReadBlock", "4", "0", "1"],
        ["Reduce", "3", "1", "0"],
        ["ReduceCopy", "6", "1", "0"],
        ["ReduceMergeCopy", "1", "0", "0"],
        ["WriteBlock", "5", "2", "0"],
        ["XceiverThread", "1", "1", "0"],
    ];
    assert_eq!(by_kind, owned(&expect));

    // Task durations: LaunchTaskAction to `is done.` / `Child Error` / KillTaskAction.
    let tasks = rows(
        wh.path(),
        "SELECT host, task_id, duration_ms, outcome, job_id FROM states
         WHERE state IN ('Map', 'Reduce') ORDER BY task_id",
    )
    .await;
    let j = "attempt_200808231712_0001";
    let expect = [
        ["node1", &format!("{j}_m_000000_0"), "13000.0", "SUCCEEDED"], // 17:12:32.466 → 45.466
        ["node1", &format!("{j}_m_000001_0"), "14500.0", "SUCCEEDED"], // 32.500 → 47.000
        ["node2", &format!("{j}_m_000002_0"), "13000.0", "SUCCEEDED"], // 33.000 → 46.000
        ["node2", &format!("{j}_m_000003_0"), "16990.0", "FAILED"],    // 33.010 → 50.000
        ["node3", &format!("{j}_m_000003_1"), "10500.0", "SUCCEEDED"], // 51.000 → 13:01.500
        ["node1", &format!("{j}_r_000000_0"), "32250.0", "SUCCEEDED"], // 48.000 → 13:20.250
        ["node2", &format!("{j}_r_000001_0"), "16500.0", "KILLED"],    // 48.500 → 13:05.000
        ["node3", &format!("{j}_r_000001_1"), "", ""],                 // never ends
    ];
    let expect: Vec<Vec<String>> = expect
        .iter()
        .map(|r| r.iter().map(|s| s.to_string()).chain(["job_200808231712_0001".to_string()]).collect())
        .collect();
    assert_eq!(tasks, expect);

    let copies = rows(
        wh.path(),
        "SELECT host, peer_task_id, peer_host, duration_ms FROM states WHERE state = 'ReduceCopy' ORDER BY host, peer_task_id",
    )
    .await;
    let expect = [
        ["node1", &format!("{j}_m_000000_0"), "node1", "400.0"],
        ["node1", &format!("{j}_m_000001_0"), "node1", "600.0"],
        ["node1", &format!("{j}_m_000002_0"), "node2", "1500.0"],
        ["node1", &format!("{j}_m_000003_1"), "node3", "8000.0"],
        ["node3", &format!("{j}_m_000000_0"), "node1", "800.0"],
        ["node3", &format!("{j}_m_000001_0"), "node1", ""],
    ];
    assert_eq!(copies, expect.map(|r| r.map(|s| s.to_string()).to_vec()).to_vec());
    assert_eq!(scalar(wh.path(), "SELECT duration_ms FROM states WHERE state = 'ReduceMergeCopy'").await, "22000.0");
}

#[tokio::test]
async fn data_flow_states_carry_both_hosts() {
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![data_dir()], wh.path(), None).await;
    let blocks = rows(
        wh.path(),
        "SELECT state, host, block_id, peer_host, duration_ms, bytes, source FROM states
         WHERE state IN ('ReadBlock', 'WriteBlock', 'MapCopy') ORDER BY state, host, start_ts NULLS FIRST",
    )
    .await;
    let expect = [
        ["MapCopy", "node3", "", "10.0.0.1", "250.0", "1048576", "clienttrace"],
        // node1 logs `Served block` at INFO: the end alone.
        ["ReadBlock", "node1", "blk_-1608999687919862906", "10.0.0.1", "", "", "log"],
        // node2 logs at DEBUG: connection counts 1, 2 at 33.000 and 33.100 start the two reads.
        ["ReadBlock", "node2", "blk_1111111111111111111", "10.0.0.2", "1000.0", "", "log"],
        ["ReadBlock", "node2", "blk_2222222222222222222", "10.0.0.3", "1500.0", "", "log"],
        ["ReadBlock", "node3", "blk_7128370237687728475", "10.0.0.3", "1500.0", "67108864", "clienttrace"],
        ["WriteBlock", "10.250.10.6", "blk_-1608999687919862906", "10.250.10.6", "", "", "log"],
        ["WriteBlock", "10.250.19.102", "blk_-1608999687919862906", "10.250.19.102", "1000.0", "91178", "log"],
        ["WriteBlock", "node1", "blk_-1608999687919862906", "10.0.0.2", "1250.0", "67108864", "log"],
        ["WriteBlock", "node1", "blk_4332711451661776648", "10.0.0.1", "", "", "log"],
        ["WriteBlock", "node3", "blk_4332711451661776648", "10.0.0.1", "400.0", "2097152", "clienttrace"],
    ];
    assert_eq!(blocks, owned(&expect));
    // The merged file's NameNode line has no host of its own.
    let namenode = rows(wh.path(), "SELECT daemon, host IS NULL FROM logs WHERE logger = 'dfs.FSNamesystem'").await;
    assert_eq!(namenode, vec![vec!["namenode", "true"]]);
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM ingests WHERE merged").await, "1");
}

#[tokio::test]
async fn ingesting_again_adds_nothing() {
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![data_dir()], wh.path(), None).await;
    let again = ingest_into(vec![data_dir()], wh.path(), None).await;
    assert_eq!(again.files_with_status("unchanged"), 9);
    assert_eq!(again.total(|r| r.lines_read), 0);
    let counts = rows(
        wh.path(),
        "SELECT (SELECT count(*) FROM logs) AS l, (SELECT count(*) FROM states) AS s, (SELECT count(*) FROM ingests) AS i",
    )
    .await;
    assert_eq!(counts, vec![vec!["49", "26", "9"]]);
}

/// Each DataNode's own address, from the lines that name it (read off `data/logs` by hand):
/// node1's two `dest:` of writes to it and its `Served block`; node2's two `Served block`
/// (its connection counts name nothing); node3's clienttrace, the source of a read and the
/// destination of a write; and the merged file's two writers, named by their address.
const ADDRESSES: [[&str; 6]; 5] = [
    ["10.250.10.6", "10.250.10.6", "2008-11-09T20:35:19Z", "2008-11-09T20:35:19Z", "1", "2008-11-09"],
    ["10.250.19.102", "10.250.19.102", "2008-11-09T20:35:18Z", "2008-11-09T20:35:18Z", "1", "2008-11-09"],
    ["node1", "10.0.0.1", "2008-08-23T17:12:20Z", "2008-08-23T17:13:15Z", "3", "2008-08-23"],
    ["node2", "10.0.0.2", "2008-08-23T17:12:34Z", "2008-08-23T17:12:34.600Z", "2", "2008-08-23"],
    ["node3", "10.0.0.3", "2008-08-23T17:12:52Z", "2008-08-23T17:13:19Z", "2", "2008-08-23"],
];

const ADDRESSES_SQL: &str = "SELECT host, address, first_ts, last_ts, lines, date FROM addresses ORDER BY host";

#[tokio::test]
async fn datanodes_own_addresses_are_kept() {
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![data_dir()], wh.path(), None).await;
    assert_eq!(rows(wh.path(), ADDRESSES_SQL).await, owned(&ADDRESSES));
}

/// A warehouse from before the `addresses` table gets it from its `logs` when next opened,
/// with how far each file is held, so that ingesting again reads nothing.
#[tokio::test]
async fn an_older_warehouse_gets_its_addresses_from_its_logs() {
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![data_dir()], wh.path(), None).await;
    std::fs::remove_dir_all(wh.path().join("addresses")).unwrap();
    let again = ingest_into(vec![data_dir()], wh.path(), None).await;
    assert_eq!(again.files_with_status("unchanged"), 9);
    assert_eq!(again.total(|r| r.lines_read), 0);
    assert_eq!(rows(wh.path(), ADDRESSES_SQL).await, owned(&ADDRESSES));
    let provenance =
        "SELECT count(DISTINCT a.file) FROM addresses a JOIN logs l ON l.file = a.file AND l.ingest_id = a.ingest_id";
    assert_eq!(scalar(wh.path(), provenance).await, "4");
}

#[tokio::test]
async fn a_state_across_a_log_rotation_is_paired_and_nameless_files_are_refused() {
    let input = tempfile::tempdir().unwrap();
    let tt = "org.apache.hadoop.mapred.TaskTracker";
    let m = "attempt_200808231712_0001_m_000007_0";
    // log4j's daily rotation: yesterday's file carries the date, today's the bare name.
    std::fs::write(
        input.path().join("hadoop-hadoop-tasktracker-node9.log.2008-08-23"),
        format!("2008-08-23 23:59:58,000 INFO {tt}: LaunchTaskAction: {m}\n"),
    )
    .unwrap();
    std::fs::write(
        input.path().join("hadoop-hadoop-tasktracker-node9.log"),
        format!("2008-08-24 00:00:03,500 INFO {tt}: Task {m} is done.\n"),
    )
    .unwrap();
    let nameless = input.path().join("logs");
    std::fs::create_dir(&nameless).unwrap();
    std::fs::write(nameless.join("tasktracker.log"), format!("2008-08-24 00:00:03,500 INFO {tt}: hello\n")).unwrap();
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![input.path().to_path_buf()], wh.path(), None).await;
    let map = rows(wh.path(), "SELECT host, duration_ms, date, end_line, file LIKE '%node9.log' FROM states").await;
    // 23:59:58.000 → 00:00:03.500 the next day; the row's partition is its start's date.
    assert_eq!(map, vec![vec!["node9", "5500.0", "2008-08-23", "1", "true"]]);
    let refused = scalar(wh.path(), "SELECT error FROM ingests WHERE status = 'refused'").await;
    assert!(
        refused.ends_with("cannot tell which host wrote it: name it hadoop-<user>-<daemon>-<host>.log, put it in a folder named after the host, or pass --host"),
        "{refused}"
    );
}

/// Partition columns read as plain strings: DataFusion groups and joins on a dictionary column
/// through its row format, several times slower. A filter on one still skips the other
/// partitions' files without reading them.
#[tokio::test]
async fn partition_columns_are_plain_strings_that_prune() {
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![data_dir()], wh.path(), None).await;
    assert_eq!(scalar(wh.path(), "SELECT DISTINCT arrow_typeof(cluster) FROM states").await, "Utf8View");
    let mut files_scanned = Vec::new();
    for cluster in ["test", "elsewhere"] {
        let sql = format!("EXPLAIN ANALYZE SELECT count(*) FROM states WHERE cluster = '{cluster}' AND host <> ''");
        let plan = rows(wh.path(), &sql).await.concat().concat();
        // No scan at all where the statistics already say no row matches.
        let scanned = plan
            .split_once("count_files_scanned=")
            .map_or(0, |(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse::<usize>().unwrap());
        files_scanned.push(scanned);
    }
    assert!(files_scanned[0] > 0 && files_scanned[1] == 0, "{files_scanned:?}");
}

/// The session opens warehouse tables when a statement names them; tables a query creates
/// for itself live beside them and can neither replace, drop nor write them.
#[tokio::test]
async fn session_tables_live_beside_the_warehouse_tables() {
    use datafusion::arrow::util::pretty::pretty_format_batches;
    let wh = tempfile::tempdir().unwrap();
    ingest_into(vec![data_dir()], wh.path(), None).await;
    let ctx = kahuna::catalog::session(&kahuna::warehouse::Warehouse::new(wh.path())).await.unwrap();
    let run = |sql: &'static str| {
        let ctx = ctx.clone();
        async move { ctx.sql(sql).await?.collect().await.and_then(|b| Ok(pretty_format_batches(&b)?.to_string())) }
    };
    run("CREATE TABLE maps AS SELECT * FROM states WHERE state = 'Map'").await.unwrap();
    let listed = run("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'").await.unwrap();
    for name in ["ingests", "logs", "maps", "rejects", "states"] {
        assert!(listed.contains(&format!("| {name} ")), "{name} missing from\n{listed}");
    }
    // 5 Map states and 49 log events, as in the tests above.
    assert!(run("SELECT count(*) AS n FROM maps").await.unwrap().contains("| 5 |"));
    let shadow = run("CREATE TABLE states AS SELECT 1 AS x").await.unwrap_err().to_string();
    assert!(shadow.contains("states") && shadow.contains("exists"), "{shadow}");
    run("DROP TABLE logs").await.unwrap_err();
    // Nor written to: ingest accounts for every line a table holds. A session's own table is.
    let script = |sql: &'static str| {
        let ctx = ctx.clone();
        async move { kahuna::shell::run_script(&ctx, sql, kahuna::shell::Format::Csv, &mut Vec::new()).await }
    };
    let write = script("INSERT INTO states SELECT * FROM states LIMIT 1").await.unwrap_err().to_string();
    assert!(write.starts_with("table states is the warehouse's and takes no Insert Into"), "{write}");
    script("INSERT INTO maps SELECT * FROM states WHERE state = 'Map' LIMIT 1").await.unwrap();
    assert!(run("SELECT count(*) AS n FROM maps").await.unwrap().contains("| 6 |"));
    assert!(run("SELECT count(*) AS n FROM states WHERE state = 'Map'").await.unwrap().contains("| 5 |"));
    assert!(run("SELECT count(*) AS n FROM logs").await.unwrap().contains("| 49 |"));

    // Sessions over one snapshot share its opened warehouse tables, not their own tables.
    let snapshot = kahuna::catalog::Snapshot::take(&kahuna::warehouse::Warehouse::new(wh.path())).await.unwrap();
    let (first, second) =
        (kahuna::catalog::session_over(&snapshot).unwrap(), kahuna::catalog::session_over(&snapshot).unwrap());
    first.sql("CREATE TABLE mine AS SELECT 1 AS x").await.unwrap().collect().await.unwrap();
    assert!(second.sql("SELECT * FROM mine").await.is_err(), "a session's own table is its own");
    for ctx in [&first, &second] {
        let batches =
            ctx.sql("SELECT count(*) AS n FROM states WHERE state = 'Map'").await.unwrap().collect().await.unwrap();
        assert!(pretty_format_batches(&batches).unwrap().to_string().contains("| 5 |"));
    }
}

/// A file named both on its own and through its folder, or by two spellings of its path, is
/// read once: the same states as the folder alone.
#[tokio::test]
async fn a_file_named_twice_in_one_run_is_read_once() {
    let logs = data_dir();
    let tasktracker = logs.join("hadoop-hadoop-tasktracker-node1.log");
    let respelled = logs.join("node1/../hadoop-hadoop-tasktracker-node1.log");
    let once = tempfile::tempdir().unwrap();
    ingest_into(vec![logs.clone()], once.path(), None).await;
    let twice = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![logs, tasktracker, respelled], twice.path(), None).await;
    assert_eq!(summary.files_with_status("ingested"), 9);
    let count = "SELECT state, count(*), count(start_ts), count(end_ts) FROM states GROUP BY state ORDER BY state";
    let expected = rows(once.path(), count).await;
    assert_eq!(rows(twice.path(), count).await, expected);
    let maps = expected.iter().find(|r| r[0] == "Map").expect("Map states");
    assert_eq!(maps[1], maps[2], "every Map has its start: {expected:?}");
}

/// A log and its gzipped copy in one run: the same log, read once (from the plain file), and
/// the copy listed as a duplicate.
#[tokio::test]
async fn a_log_and_its_gzipped_copy_are_read_once() {
    use std::io::Write as _;
    let input = tempfile::tempdir().unwrap();
    let plain = std::fs::read(data_dir().join("hadoop-hadoop-tasktracker-node1.log")).unwrap();
    std::fs::write(input.path().join("hadoop-hadoop-tasktracker-node1.log"), &plain).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    std::fs::write(input.path().join("hadoop-hadoop-tasktracker-node1.log.gz"), gz.finish().unwrap()).unwrap();
    let count = "SELECT state, count(*) FROM states GROUP BY state ORDER BY state";
    let once = tempfile::tempdir().unwrap();
    ingest_into(vec![data_dir().join("hadoop-hadoop-tasktracker-node1.log")], once.path(), None).await;
    let both = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], both.path(), None).await;
    assert_eq!((summary.files_with_status("ingested"), summary.files_with_status("duplicate")), (1, 1));
    assert_eq!(rows(both.path(), count).await, rows(once.path(), count).await);
    let listed = rows(both.path(), "SELECT regexp_replace(file, '.*/', ''), status FROM ingests ORDER BY file").await;
    assert_eq!(
        listed,
        owned(&[
            ["hadoop-hadoop-tasktracker-node1.log", "ingested"],
            ["hadoop-hadoop-tasktracker-node1.log.gz", "duplicate"]
        ])
    );
}

/// `data/console`: a Hadoop 1.0 TaskTracker log in log4j's console layout (`yy/MM/dd HH:mm:ss
/// LEVEL short.logger: message`, whole seconds), opening with the STARTUP_MSG block: two Maps
/// of 6 s (13:54:46–52) and 12 s (13:54:47–59), a Reduce of 30 s (13:55:00–30).
#[tokio::test]
async fn a_console_layout_log_gives_its_states() {
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![common::package_dir().join("data/console")], wh.path(), None).await;
    // 14 lines: 9 events, the 5 lines of the STARTUP_MSG block continue the first.
    assert_eq!(summary.files_with_status("ingested"), 1);
    assert_eq!(summary.total(|r| r.lines_read), 14);
    assert_eq!(summary.total(|r| r.lines_parsed), 14);
    assert_eq!(summary.total(|r| r.events), 9);
    let states = rows(
        wh.path(),
        "SELECT host, state, task_id, CAST(start_ts AS VARCHAR) AS start, duration_ms FROM states ORDER BY start_ts",
    )
    .await;
    let expected = [
        ["node4", "Map", "attempt_201205231353_0001_m_000000_0", "2012-05-23T13:54:46Z", "6000.0"],
        ["node4", "Map", "attempt_201205231353_0001_m_000001_0", "2012-05-23T13:54:47Z", "12000.0"],
        ["node4", "Reduce", "attempt_201205231353_0001_r_000000_0", "2012-05-23T13:55:00Z", "30000.0"],
    ];
    assert_eq!(states, owned(&expected));
}

/// `data/yarn`: a Hadoop 3 application master's container log, in the folder of the node it ran
/// on (`node0`): its attempts' states are on the nodes its lines name, not on `node0`. Two
/// Maps (6.833 s on worker1, succeeded; 8.35 s on worker2, failed) and a Reduce through
/// COMMIT_PENDING (8.74 s on worker1); the moves after the first out of RUNNING end nothing.
#[tokio::test]
async fn an_application_masters_log_puts_each_attempt_on_its_node() {
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![common::package_dir().join("data/yarn/node0")], wh.path(), None).await;
    assert_eq!(summary.total(|r| r.lines_read), 18);
    assert_eq!(summary.total(|r| r.unmatched_ends), 0);
    let states =
        rows(wh.path(), "SELECT host, daemon, state, task_id, outcome, duration_ms FROM states ORDER BY start_ts")
            .await;
    let expected = [
        ["worker1", "mrappmaster", "Map", "attempt_1553147085057_0001_m_000000_0", "SUCCEEDED", "6833.0"],
        ["worker2", "mrappmaster", "Map", "attempt_1553147085057_0001_m_000001_0", "FAILED", "8350.0"],
        ["worker1", "mrappmaster", "Reduce", "attempt_1553147085057_0001_r_000000_0", "SUCCEEDED", "8740.0"],
    ];
    assert_eq!(states, owned(&expected));
    assert_eq!(scalar(wh.path(), "SELECT DISTINCT host FROM logs").await, "node0");
}

/// `data/yarn/worker1`: a Hadoop 3 reduce's container log. Its folder names the container; its
/// event fetcher's start names the reduce. Two fetches: into memory (45 ms, 1,052 bytes, from
/// worker1) and to disk (1.5 s, 5,000,004 bytes, from worker3), each a ReduceCopy of the reduce
/// on the container's node, its map's host the one the scheduler assigned to that fetcher.
#[tokio::test]
async fn a_yarn_reduces_fetches_are_its_reduce_copies() {
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![common::package_dir().join("data/yarn/worker1")], wh.path(), None).await;
    assert_eq!(summary.total(|r| r.lines_read), 13);
    assert_eq!(summary.total(|r| r.unmatched_ends), 0);
    let copies = rows(
        wh.path(),
        "SELECT host, daemon, task_id, peer_task_id, peer_host, bytes, duration_ms, outcome FROM states
         WHERE state = 'ReduceCopy' ORDER BY start_ts",
    )
    .await;
    let reduce = "attempt_1553147085057_0001_r_000000_0";
    let expected = [
        ["worker1", "task", reduce, "attempt_1553147085057_0001_m_000000_0", "worker1", "1052", "45.0", "SUCCEEDED"],
        [
            "worker1",
            "task",
            reduce,
            "attempt_1553147085057_0001_m_000002_0",
            "worker3",
            "5000004",
            "1500.0",
            "SUCCEEDED",
        ],
    ];
    assert_eq!(copies, owned(&expected));
    assert_eq!(scalar(wh.path(), "SELECT count(*) FROM states WHERE state <> 'ReduceCopy'").await, "0");
}

/// `data/yarn/nodemanager`: a Hadoop 3 NodeManager log (`yarn-<user>-nodemanager-<host>.log`):
/// each container's localization and run are states of the node, of the container's job.
#[tokio::test]
async fn a_node_managers_containers_localize_and_run() {
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![common::package_dir().join("data/yarn/nodemanager")], wh.path(), None).await;
    assert_eq!(summary.total(|r| r.lines_read), 12);
    assert_eq!((summary.total(|r| r.unmatched_ends), summary.total(|r| r.unterminated)), (0, 0));
    let states = rows(
        wh.path(),
        "SELECT host, daemon, state, job_id, right(task_id, 6), duration_ms, outcome FROM states ORDER BY start_ts",
    )
    .await;
    let job = "job_1553147085057_0001";
    let expected = [
        ["worker2", "nodemanager", "ContainerLocalizing", job, "000003", "500.0", "SUCCEEDED"],
        ["worker2", "nodemanager", "ContainerRunning", job, "000003", "7800.0", "FAILED"],
        ["worker2", "nodemanager", "ContainerLocalizing", job, "000005", "500.0", "SUCCEEDED"],
        ["worker2", "nodemanager", "ContainerRunning", job, "000005", "14000.0", "SUCCEEDED"],
    ];
    assert_eq!(states, owned(&expected));
}

/// A cluster whose log4j.properties writes `%d [%t] %-5p %c - %m%n` (date, thread in brackets
/// first, padded level, ` - ` before the message): no built-in layout reads it, `--layout` does,
/// and the states are those of the same lines in Hadoop's own layout.
#[tokio::test]
async fn a_layout_given_as_a_conversion_pattern_reads_what_detection_cannot() {
    let source = std::fs::read_to_string(data_dir().join("hadoop-hadoop-tasktracker-node1.log")).unwrap();
    let mut rewritten = String::new();
    for line in source.lines() {
        // `2008-08-23 17:12:32,466 INFO org.apache.hadoop.mapred.TaskTracker: msg`
        let rewrite = line.get(..23).zip(line.get(24..)).and_then(|(stamp, rest)| {
            let (level, rest) = rest.split_once(' ')?;
            let (logger, message) = rest.split_once(": ")?;
            Some(format!("{stamp} [main] {level:<5} {logger} - {message}"))
        });
        rewritten.push_str(&rewrite.unwrap_or_else(|| line.to_string()));
        rewritten.push('\n');
    }
    let input = tempfile::tempdir().unwrap();
    std::fs::write(input.path().join("hadoop-hadoop-tasktracker-node1.log"), rewritten).unwrap();
    let states = "SELECT state, count(*), sum(duration_ms) FROM states GROUP BY state ORDER BY state";

    let refused = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![input.path().to_path_buf()], refused.path(), None).await;
    assert_eq!(summary.files_with_status("refused"), 1);

    let (read, reference) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut run = common::options(vec![input.path().to_path_buf()], read.path(), None);
    run.hints.layout = Some(kahuna::ingest::discover::layout_of("%d [%t] %-5p %c - %m%n").unwrap());
    let summary = kahuna::ingest::ingest(&run).await.unwrap();
    assert_eq!((summary.files_with_status("ingested"), summary.total(|r| r.lines_rejected)), (1, 0));
    ingest_into(vec![data_dir().join("hadoop-hadoop-tasktracker-node1.log")], reference.path(), None).await;
    let expected = rows(reference.path(), states).await;
    assert!(expected.len() > 1, "{expected:?}");
    assert_eq!(rows(read.path(), states).await, expected);
}

/// What a Hadoop log folder holds beside the logs is listed once as skipped, with its kind, and
/// nothing is refused.
#[tokio::test]
async fn files_that_are_not_logs_are_skipped_with_their_kind() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("hadoop-hadoop-tasktracker-node4.out", "ulimit -a for user hadoop\ncore file size          (blocks, -c) 0\n");
    write("job_201205231353_0001_conf.xml", "<?xml version=\"1.0\"?>\n<configuration>\n</configuration>\n");
    write("rumen-trace.txt", "{\n  \"jobID\" : \"job_201205231353_0001\"\n}\n");
    write("userlogs/application_1/container_1/stderr", "log4j:WARN No appenders could be found for logger.\n");
    write("userlogs/application_1/container_1/stdout", "");
    let wh = tempfile::tempdir().unwrap();
    let summary = ingest_into(vec![dir.path().to_path_buf()], wh.path(), None).await;
    assert_eq!(summary.files_with_status("refused"), 0, "{:?}", summary.reports);
    let skipped = rows(wh.path(), "SELECT status, error FROM ingests ORDER BY file").await;
    let kinds: Vec<(&str, &str)> =
        skipped.iter().map(|row| (row[0].as_str(), row[1].rsplit(": ").next().unwrap_or_default())).collect();
    assert_eq!(
        kinds,
        [
            ("skipped", "the ulimit report hadoop-daemon.sh writes to its .out file, not a log"),
            ("skipped", "XML (a configuration or a job's conf), not a log"),
            ("skipped", "JSON (a Rumen trace or another export), not a log"),
            ("skipped", "a task container's standard output, with no log4j line"),
            ("skipped", "empty file"),
        ]
    );
}
