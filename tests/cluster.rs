//! Statements on Ballista (`kahuna scheduler`, `kahuna executor`, `--engine`): the same rows as
//! in this process, on a cluster in the test's own runtime and on one of separate processes on
//! loopback, one of whose executors is killed mid-query.

mod common;

use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{batch_rows, data_dir, ingest_into, package_dir};
use futures::TryStreamExt as _;
use kahuna::catalog::{self, Snapshot};
use kahuna::cluster::{ExecutorOptions, executor, scheduler};
use kahuna::diagnose::queries::{BUILT_IN, Query};
use kahuna::diagnose::{self, Record, Request};
use kahuna::warehouse::Warehouse;

/// A port free now, for an executor (which must be told its port).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Rows of each statement's last result, sorted (the cluster may return them in another order).
async fn answers(ctx: &datafusion::prelude::SessionContext, statements: &[&str]) -> Vec<Vec<Vec<String>>> {
    let mut answers = Vec::new();
    for sql in statements {
        let mut parsed = catalog::parse(sql).unwrap();
        let plan = catalog::plan(ctx, parsed.pop_front().unwrap()).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        let frame = catalog::execute(ctx, plan).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        let batches = frame.collect().await;
        answers.push(sorted(batch_rows(&batches.unwrap_or_else(|e| panic!("{sql}: {e}")))));
    }
    answers
}

/// The scheduler plans Ganesha's long statements by deep recursion: `kahuna`'s stacks, not
/// tokio's 2 MiB.
fn on_kahunas_stacks(test: impl Future<Output = ()>) {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.worker_threads(4).thread_stack_size(8 << 20).enable_all();
    runtime.build().unwrap().block_on(test);
}

#[test]
fn statements_on_a_cluster_in_this_process_give_the_local_rows() {
    on_kahunas_stacks(async {
        let dir = tempfile::tempdir().unwrap();
        let warehouse = Warehouse::new(dir.path().join("warehouse"));
        ingest_into_warehouse(&warehouse).await;
        on_a_cluster_in_this_process(&warehouse, &warehouse).await;
    });
}

/// The same with the warehouse in an S3-compatible store: the client reads it, the executors
/// read its files and write the session's tables there, and every answer is the one of the
/// same input in a folder.
#[test]
fn statements_on_a_cluster_over_a_warehouse_on_s3_give_the_rows_of_one_in_a_folder() {
    on_kahunas_stacks(async {
        let Some(on_s3) = common::s3_warehouse("cluster").await else { return };
        let dir = tempfile::tempdir().unwrap();
        let in_folder = Warehouse::new(dir.path().join("warehouse"));
        ingest_into_warehouse(&in_folder).await;
        ingest_into_warehouse(&on_s3).await;
        on_a_cluster_in_this_process(&in_folder, &on_s3).await;
        let left: Vec<_> =
            on_s3.store().list(None).map_ok(|meta| meta.location.to_string()).try_collect().await.unwrap();
        assert!(!left.iter().any(|key| key.starts_with(".session-")), "the sessions' tables are left: {left:?}");
    });
}

async fn ingest_into_warehouse(warehouse: &Warehouse) {
    let root = package_dir().join("data");
    let paths = vec![data_dir(), root.join("sysstat"), root.join("jobhistory")];
    kahuna::ingest::ingest(&common::options_for(paths, warehouse.clone(), None)).await.expect("ingest");
}

/// Statements and built-in queries over `warehouse` on a cluster give the rows they give here
/// over `reference` (the same input).
async fn on_a_cluster_in_this_process(reference: &Warehouse, warehouse: &Warehouse) {
    let (sender, address) = tokio::sync::oneshot::channel();
    tokio::spawn(scheduler("127.0.0.1:0".parse().unwrap(), |address| sender.send(address).unwrap()));
    let address: SocketAddr = address.await.unwrap();
    let options = ExecutorOptions {
        scheduler: address.to_string(),
        listen: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        tasks: 2,
        work_dir: None,
    };
    tokio::spawn(executor(options));

    let statements = [
        // The README's, a view, Kahuna's functions, and a table of the session's own.
        "SELECT host, state, count(*) AS states, round(avg(duration_ms)) AS mean_ms FROM states GROUP BY host, state",
        "SELECT host, metric, count(*) AS n FROM sar_metrics GROUP BY host, metric",
        "SELECT host, cluster, date, state_histogram(duration_ms, 1, 60000, 20, 'log') AS h FROM states \
         WHERE state = 'Map' GROUP BY host, cluster, date",
        "CREATE TABLE maps AS SELECT job_id, host, count(*) AS n FROM states WHERE state = 'Map' GROUP BY job_id, host",
        "SELECT m.host, m.n, j.outcome FROM maps m JOIN jobs j ON j.job_id = m.job_id",
        // Files chosen by their partition values.
        "SELECT cluster, date, count(*) FROM states WHERE date >= DATE '2008-08-01' AND cluster <> 'x' GROUP BY cluster, date",
    ];
    let local = answers(&catalog::session(reference).await.unwrap(), &statements).await;
    assert_eq!(answers(&catalog::session(warehouse).await.unwrap(), &statements).await, local);
    let snapshot = Snapshot::take_as_files(warehouse).await.unwrap();
    let cluster = catalog::session_on_cluster(&snapshot, &address.to_string()).await.unwrap();
    // The executor registers with its first heartbeat; the first statement waits for it.
    let on_cluster = answers(&cluster, &statements).await;
    assert_eq!(on_cluster, local);
    assert!(local[0].len() > 5 && local[2].len() == 3 && local[4].len() == 3, "{local:?}");
    let explained =
        batch_rows(&cluster.sql("EXPLAIN SELECT count(*) FROM states").await.unwrap().collect().await.unwrap());
    assert!(format!("{explained:?}").contains("distributed_plan"), "{explained:?}");
    assert!(format!("{explained:?}").contains(".parquet"), "{explained:?}");
    let none = "EXPLAIN SELECT count(*) FROM states WHERE date < DATE '1970-01-02'";
    let explained = format!("{:?}", batch_rows(&cluster.sql(none).await.unwrap().collect().await.unwrap()));
    assert!(!explained.contains(".parquet"), "{explained}");

    // Every built-in query, each statement's rows. Recorded when run here, so that Ganesha has
    // a model and `combined` verdicts to combine; not recorded on the cluster.
    for (name, text) in BUILT_IN {
        let mut request = Request::new(Query::parse(name, "<built-in>", text).unwrap());
        let run = async |warehouse, request: &Request, record| {
            let outcome = diagnose::run(warehouse, request, record).await.unwrap_or_else(|e| panic!("{name}: {e:#}"));
            outcome.results.iter().map(|batches| sorted(batch_rows(batches))).collect::<Vec<_>>()
        };
        let local = run(reference, &request, Record::Append).await;
        if reference.to_string() != warehouse.to_string() {
            assert_eq!(run(warehouse, &request, Record::Append).await, local, "{name}");
        }
        request.engine = Some(address.to_string());
        assert_eq!(run(warehouse, &request, Record::Nothing).await, local, "{name}");
        assert!(local.iter().any(|rows| !rows.is_empty()), "{name}");
    }
}

fn sorted(mut rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    rows.sort();
    rows
}

fn kahuna(wh: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kahuna"));
    command.arg("--warehouse").arg(wh).current_dir(package_dir());
    command
}

fn ok(output: Output) -> String {
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{said}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A child killed when the test ends, however it ends.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines of a diagnosis' output, sorted: tables without ORDER BY come in any order.
fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    lines.sort();
    lines
}

#[test]
fn a_two_executor_cluster_gives_the_local_verdicts_and_a_killed_executor_no_wrong_answer() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let wh = dir.path().join("warehouse");
    let simulate = ["simulate", "--nodes", "50", "--fault", "CPUHog@r01n08", "--duration", "20m", "--out"];
    ok(kahuna(&wh).args(simulate).arg(&run).output().unwrap());
    ok(kahuna(&wh).args(["ingest", "--cluster", "hog50"]).arg(&run).output().unwrap());
    let train = ["--from", "2008-08-25T00:00:00Z", "--to", "2008-08-25T00:10:00Z"];
    ok(kahuna(&wh).args(["diagnose", "ganesha_train", "--cluster", "hog50"]).args(train).output().unwrap());

    let mut scheduler =
        Process(kahuna(&wh).args(["scheduler", "--listen", "127.0.0.1:0"]).stdout(Stdio::piped()).spawn().unwrap());
    let mut said = String::new();
    BufReader::new(scheduler.0.stdout.take().unwrap()).read_line(&mut said).unwrap();
    let engine = said.trim().strip_prefix("scheduler listening at ").unwrap_or_else(|| panic!("{said}")).to_string();
    // Shuffle files in the test's folder: a killed executor cannot remove its own.
    let executor = |port: u16| {
        let listen = format!("127.0.0.1:{port}");
        let work = dir.path().join(format!("executor-{port}"));
        std::fs::create_dir(&work).unwrap();
        let args = ["executor", "--scheduler", &engine, "--listen", &listen, "--tasks", "2"];
        Process(kahuna(&wh).args(args).arg("--work-dir").arg(&work).stdout(Stdio::null()).spawn().unwrap())
    };
    let _first = executor(free_port());
    let mut second = executor(free_port());

    let diagnose = |query: &str, engine: Option<&str>| {
        let mut command = kahuna(&wh);
        command.args(["diagnose", query, "--cluster", "hog50", "--dry-run", "--rows", "1000"]);
        if let Some(engine) = engine {
            command.args(["--engine", engine]);
        }
        command
    };
    for query in ["kahuna_wb", "salsa_fingerpoint", "ganesha_bb", "peer_correlation"] {
        let local = ok(diagnose(query, None).output().unwrap());
        let on_cluster = ok(diagnose(query, Some(&engine)).output().unwrap());
        assert_eq!(sorted_lines(&on_cluster), sorted_lines(&local), "{query}");
        if query == "kahuna_wb" {
            assert!(local.contains("r01n08"), "{local}");
        }
    }

    // An executor killed mid-query: the query completes on the other with the same answer, or
    // fails saying so; never a wrong answer.
    let local = ok(diagnose("peer_correlation", None).output().unwrap());
    let query = diagnose("peer_correlation", Some(&engine)).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    std::thread::sleep(Duration::from_millis(700));
    second.0.kill().unwrap();
    let output = query.unwrap().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() {
        assert_eq!(sorted_lines(&String::from_utf8_lossy(&output.stdout)), sorted_lines(&local));
    } else {
        assert!(stderr.contains("failed") || stderr.contains("executor"), "{stderr}");
    }
    // And the cluster still answers, on the executor left.
    assert_eq!(
        sorted_lines(&ok(diagnose("kahuna_wb", Some(&engine)).output().unwrap())),
        sorted_lines(&ok(diagnose("kahuna_wb", None).output().unwrap()))
    );
}

#[test]
fn an_engine_that_is_not_one_or_does_not_answer_says_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("warehouse");
    ok(kahuna(&wh).args(["ingest", "--cluster", "samples"]).arg(data_dir()).output().unwrap());
    let port = free_port();
    for (engine, expected) in [
        ("spark://x:1".to_string(), "spark://x:1: not an engine; give ballista://host:port".to_string()),
        ("ballista://nohost".to_string(), "ballista://nohost: give ballista://host:port".to_string()),
        (format!("ballista://127.0.0.1:{port}"), format!("no Ballista scheduler answers at 127.0.0.1:{port}")),
    ] {
        let output =
            kahuna(&wh).args(["sql", "--engine", &engine, "-c", "SELECT count(*) FROM states"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(stderr.contains(&expected), "{engine}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}

/// A plain Ballista executor (not `kahuna executor`) cannot run Kahuna's functions: the
/// statement fails in one line that names the function, and nothing else breaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_without_kahunas_functions_fails_the_statement_naming_the_function() {
    use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("warehouse");
    ingest_into(vec![data_dir()], &wh, None).await;
    let (sender, address) = tokio::sync::oneshot::channel();
    tokio::spawn(scheduler("127.0.0.1:0".parse().unwrap(), |address| sender.send(address).unwrap()));
    let address: SocketAddr = address.await.unwrap();
    let config = ExecutorProcessConfig {
        bind_host: "127.0.0.1".into(),
        external_host: Some("127.0.0.1".into()),
        port: free_port(),
        scheduler_host: "127.0.0.1".into(),
        scheduler_port: address.port(),
        task_scheduling_policy: kahuna::cluster::POLICY,
        executor_heartbeat_interval_seconds: 1,
        ..Default::default()
    };
    tokio::spawn(start_executor_process(std::sync::Arc::new(config)));

    let engine = format!("ballista://{address}");
    let sql = |statement: &str| {
        let mut command = kahuna(&wh);
        command.args(["sql", "--format", "csv", "--engine", &engine, "-c", statement]);
        tokio::task::spawn_blocking(move || command.output().unwrap())
    };
    let output =
        sql("SELECT jsd_sqrt(make_array(1.0, duration_ms), make_array(duration_ms, 1.0)) FROM states").await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("jsd_sqrt"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let count = "SELECT count(*) AS n FROM states";
    let here = ok(kahuna(&wh).args(["sql", "--format", "csv", "-c", count]).output().unwrap());
    assert_eq!(ok(sql(count).await.unwrap()), here);
    assert!(here.starts_with("n\n") && here.len() > 3, "{here}");
}
