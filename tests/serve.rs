//! `kahuna serve` end to end: the server started as a child process on a free loopback port and
//! queried by a real Flight SQL client, ADBC's Python driver (`tests/serve/client.py`, run by
//! the Python of KAHUNA_PYTHON: `.ci/run` makes a venv with `adbc-driver-flightsql` and
//! `pyarrow`). Without KAHUNA_PYTHON each test says it is skipped.

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use common::{batch_rows, package_dir, rows, write_jobs};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::reader::FileReader;
use kahuna::diagnose::queries::Query;
use kahuna::diagnose::{Request, execute};
use kahuna::warehouse::Warehouse;
use kahuna::warehouse::tables::Table;
use serde_json::{Value, json};

const TOKEN: &str = "s3cret-t0ken";
const HOSTS: [&str; 5] = ["node1", "node2", "node3", "node4", "node5"];

struct Server {
    child: Child,
    uri: String,
}

impl Server {
    /// `kahuna serve` on a free port of 127.0.0.1, once it has said where it listens.
    fn start(warehouse: &Path, args: &[&str]) -> Server {
        let mut child = kahuna(warehouse)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start kahuna serve");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("read");
        let uri = line.split_whitespace().last().unwrap_or_default().to_string();
        assert!(
            uri.starts_with("grpc://127.0.0.1:") || uri.starts_with("grpc+tls://127.0.0.1:"),
            "kahuna serve said {line:?}"
        );
        Server { child, uri }
    }

    /// The server's peak resident memory, in MiB.
    fn peak_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("status");
        let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).expect("VmHWM");
        kib.trim().trim_end_matches("kB").trim().parse::<f64>().expect("kB") / 1024.0
    }

    /// SIGTERM, and the server's exit status once the calls under way are done.
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
        self.child.wait().expect("wait")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kahuna(warehouse: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kahuna"));
    command.arg("--warehouse").arg(warehouse).env("KAHUNA_SERVE_TOKEN", TOKEN);
    command
}

/// The venv's Python, or None with the reason printed.
fn python() -> Option<PathBuf> {
    match std::env::var_os("KAHUNA_PYTHON") {
        Some(python) => Some(PathBuf::from(python)),
        None => {
            println!(
                "skipped: KAHUNA_PYTHON names no Python with adbc-driver-flightsql and pyarrow (.ci/run makes one)"
            );
            None
        }
    }
}

/// The Python client, stopped if it runs past `LIMIT`.
fn client(python: &Path) -> Command {
    let mut command = Command::new("timeout");
    command.arg(LIMIT).arg(python).arg(package_dir().join("tests/serve/client.py")).env("KAHUNA_SERVE_TOKEN", TOKEN);
    command
}

/// Seconds the client may run: the load takes ~25 s in a debug build on 2 cores.
const LIMIT: &str = "300";

/// Each request through the Python client: its rows, or the error the client was given.
fn run(python: &Path, uri: &str, requests: Value) -> Vec<Result<Vec<RecordBatch>, String>> {
    run_with(python, uri, requests, &[])
}

fn run_with(python: &Path, uri: &str, requests: Value, args: &[&str]) -> Vec<Result<Vec<RecordBatch>, String>> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requests.json");
    std::fs::write(&file, requests.to_string()).unwrap();
    let mut command = client(python);
    command.arg("run").arg(uri).arg(&file).arg(dir.path()).args(args);
    let out = command.output().expect("run the client");
    assert!(out.status.success(), "client: {}", String::from_utf8_lossy(&out.stderr));
    let count = requests.as_array().expect("a list").len();
    (0..count)
        .map(|i| {
            let base = dir.path().join(i.to_string());
            match std::fs::read_to_string(base.with_extension("error")) {
                Ok(error) => Err(error),
                Err(_) => {
                    let reader = FileReader::try_new(std::fs::File::open(base.with_extension("arrow")).unwrap(), None);
                    Ok(reader.unwrap().collect::<Result<Vec<_>, _>>().unwrap())
                }
            }
        })
        .collect()
}

fn answer(result: &Result<Vec<RecordBatch>, String>) -> Vec<Vec<String>> {
    batch_rows(result.as_ref().unwrap_or_else(|e| panic!("the server said: {e}")))
}

fn refusal(result: &Result<Vec<RecordBatch>, String>) -> &str {
    result.as_ref().err().map(String::as_str).unwrap_or_else(|| panic!("answered where refusal was due"))
}

/// Five hosts' TaskTracker logs, node3 slow, ingested as cluster `cluster`.
fn ingested(logs: &Path, warehouse: &Path, cluster: &str) {
    std::fs::create_dir_all(logs).unwrap();
    write_jobs(logs, &HOSTS, &[&["node3"]]);
    let out = kahuna(warehouse).args(["ingest", "--cluster", cluster]).arg(logs).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A folder holding the logs of [`ingested`] and the warehouse they went to, as cluster c1.
fn five_hosts() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("warehouse");
    ingested(&dir.path().join("logs"), &wh, "c1");
    (dir, wh)
}

const SUMMARY: &str = "SELECT host, state, count(*) AS states, round(avg(duration_ms)) AS mean_ms \
                       FROM states GROUP BY host, state ORDER BY host, state";

#[tokio::test]
async fn clients_with_the_token_get_what_kahuna_gets_and_nothing_is_written() {
    let Some(python) = python() else { return };
    let (dir, wh) = five_hosts();
    let before = Warehouse::new(&wh).versions().await.unwrap();
    let server = Server::start(&wh, &[]);
    let kahuna_wb = std::fs::read_to_string(package_dir().join("queries/kahuna_wb.sql")).unwrap();
    let copied = dir.path().join("copied.csv");
    let copy = format!("COPY (SELECT host FROM states) TO '{}'", copied.display());
    let results = run(
        &python,
        &server.uri,
        json!([
            {"sql": SUMMARY},
            {"sql": kahuna_wb},
            {"sql": "SELECT count(*) AS maps FROM states WHERE host = $1 AND state = 'Map'", "params": ["node3"]},
            {"sql": "SELECT 1", "token": "not-the-token"},
            {"sql": "SELECT 1", "token": null},
            {"sql": "CREATE TABLE mine AS SELECT 1 AS x"},
            {"sql": "INSERT INTO states SELECT * FROM states"},
            {"sql": "DROP TABLE states"},
            {"sql": copy},
            {"sql": format!("CREATE TABLE mine AS SELECT host FROM states;\n{copy};\nSELECT 1")},
            {"sql": "SELEC host FROM states"},
            {"sql": "SELECT * FROM no_such_table"},
            {"sql": "CREATE TABLE mine AS SELECT host, duration_ms FROM states WHERE state = 'Map';\nSELECT count(*) FROM mine"},
            {"sql": kahuna_wb, "params": {"states": "Map", "min_slowdown": 5}},
            {"table_schema": "states"},
            {"tables": true},
            {"sql": format!("CREATE TABLE mine AS SELECT 1 AS x;\nEXPLAIN ANALYZE {copy}")},
        ]),
    );
    assert_eq!(answer(&results[0]), rows(&wh, SUMMARY).await);
    let query = Query::resolve("kahuna_wb", &package_dir().join("queries")).unwrap();
    let in_process = |request: Request| {
        let wh = wh.clone();
        async move {
            let ctx = kahuna::catalog::session(&Warehouse::new(&wh)).await.unwrap();
            batch_rows(&execute(&ctx, &request).await.unwrap().last)
        }
    };
    let mut request = Request::new(query);
    let verdict = answer(&results[1]);
    assert_eq!(verdict, in_process(request.clone()).await);
    request.params = vec![("states".into(), "Map".into()), ("min_slowdown".into(), "5".into())];
    let strict = in_process(request).await;
    assert_ne!(strict, verdict, "the parameters changed nothing");
    assert_eq!(answer(&results[13]), strict);
    let indicted: Vec<&str> =
        verdict.iter().filter(|r| r[3] == "host" && r[5] == "true").map(|r| r[2].as_str()).collect();
    assert_eq!(indicted, ["node3"], "{verdict:?}");
    assert_eq!(answer(&results[2]), [["10"]]);
    assert!(refusal(&results[3]).contains("wrong bearer token"), "{}", refusal(&results[3]));
    assert!(refusal(&results[4]).contains("authorization: Bearer"), "{}", refusal(&results[4]));
    for (index, what) in [(5, "DDL"), (6, "DML"), (7, "DDL"), (8, "DML")] {
        let refused = refusal(&results[index]);
        assert!(refused.contains(&format!("{what} not supported")), "request {index}: {refused}");
    }
    assert!(
        refusal(&results[9]).contains("COPY is refused: the warehouse is served read-only"),
        "{}",
        refusal(&results[9])
    );
    assert!(refusal(&results[16]).contains("COPY is refused"), "{}", refusal(&results[16]));
    assert!(!copied.exists(), "COPY wrote {}", copied.display());
    assert!(refusal(&results[10]).contains("SELEC"), "{}", refusal(&results[10]));
    assert!(refusal(&results[11]).contains("no_such_table"), "{}", refusal(&results[11]));
    assert_eq!(answer(&results[12]), [["50"]], "a script's own table, after the errors");
    let columns: Vec<String> = answer(&results[14]).into_iter().map(|row| row[0].clone()).collect();
    let expected: Vec<String> =
        Table::States.table_schema().fields().iter().map(|field| field.name().clone()).collect();
    assert_eq!(columns, expected);
    let tables: Vec<Vec<String>> = answer(&results[15]).into_iter().filter(|row| row[1] == "public").collect();
    let names: Vec<&str> = tables.iter().map(|row| row[2].as_str()).collect();
    for table in ["ingests", "logs", "states", "sar_metrics"] {
        assert!(names.contains(&table), "{table} is not listed: {tables:?}");
    }
    assert!(tables.iter().all(|row| row[0] == "datafusion"), "{tables:?}");
    assert_eq!(Warehouse::new(&wh).versions().await.unwrap(), before, "the warehouse changed");
    assert!(server.terminate().success());
}

/// 1,000 queries from 20 clients at once, while an ingest of a second cluster lands: every
/// query answered, each with the warehouse before or after that run, and none with half of it.
#[tokio::test]
async fn a_thousand_queries_from_twenty_clients_while_an_ingest_lands() {
    let Some(python) = python() else { return };
    let (dir, wh) = five_hosts();
    let server = Server::start(&wh, &["--max-queries", "4"]);
    let sql = "SELECT cluster, count(*) AS states FROM states GROUP BY cluster ORDER BY cluster";
    let mut load = client(&python)
        .args(["load", &server.uri, sql, "--clients", "20", "--queries", "1000", "--ready-after", "100"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the load");
    let mut out = BufReader::new(load.stdout.take().expect("stdout"));
    assert_eq!(line(&mut out), "ready");
    ingested(&dir.path().join("c2"), &wh, "c2");
    let report: Value = serde_json::from_str(&line(&mut out)).expect("the load's report");
    assert!(load.wait().unwrap().success());
    println!("load: {report}; server peak {:.0} MiB", server.peak_mib());
    assert_eq!(report["queries"], 1000);
    assert_eq!(report["errors"], json!([]));
    let before = json!([{"cluster": "c1", "states": 50}]);
    let after = json!([{"cluster": "c1", "states": 50}, {"cluster": "c2", "states": 50}]);
    let (mut seen_before, mut seen_after) = (0, 0);
    for (rows, count) in report["answers"].as_object().expect("answers") {
        let rows: Value = serde_json::from_str(rows).unwrap();
        let count = count.as_u64().unwrap();
        match rows {
            _ if rows == before => seen_before += count,
            _ if rows == after => seen_after += count,
            _ => panic!("an answer of neither warehouse: {rows}"),
        }
    }
    assert_eq!(seen_before + seen_after, 1000);
    assert!(seen_before >= 100 && seen_after > 0, "the ingest did not land during the load: {report}");
    let last = run(&python, &server.uri, json!([{"sql": sql}]));
    assert_eq!(answer(&last[0]), [["c1", "50"], ["c2", "50"]], "the run that landed, without a restart");
}

fn line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    line.trim().to_string()
}

#[tokio::test]
async fn a_query_past_its_memory_fails_and_the_server_goes_on() {
    let Some(python) = python() else { return };
    let (_dir, wh) = five_hosts();
    let server = Server::start(&wh, &["--query-memory-mib", "8"]);
    let results = run(
        &python,
        &server.uri,
        json!([
            {"sql": "SELECT array_agg(value) FROM generate_series(1, 5000000)"},
            {"sql": "SELECT count(*) FROM states"},
        ]),
    );
    assert!(refusal(&results[0]).contains("ResourcesExhausted"), "{}", refusal(&results[0]));
    assert_eq!(answer(&results[1]), [["50"]]);
}

#[tokio::test]
async fn over_tls_a_client_that_trusts_the_certificate_is_answered() {
    let Some(python) = python() else { return };
    let (dir, wh) = five_hosts();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let server = Server::start(&wh, &["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
    assert!(server.uri.starts_with("grpc+tls://"), "{}", server.uri);
    let trusted = run_with(
        &python,
        &server.uri,
        json!([{"sql": "SELECT count(*) FROM states"}]),
        &["--tls-root-certs", cert.to_str().unwrap()],
    );
    assert_eq!(answer(&trusted[0]), [["50"]]);
    let untrusted = run(&python, &server.uri, json!([{"sql": "SELECT count(*) FROM states"}]));
    assert!(refusal(&untrusted[0]).contains("certificate"), "{}", refusal(&untrusted[0]));
    let plain = run(&python, &server.uri.replace("grpc+tls://", "grpc://"), json!([{"sql": "SELECT 1"}]));
    assert!(plain[0].is_err(), "answered in plain text");
}

#[test]
fn without_a_token_the_server_listens_on_loopback_only_and_never_without_a_warehouse() {
    let dir = tempfile::tempdir().unwrap();
    let refusal = |warehouse: &Path, listen: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_kahuna"))
            .arg("--warehouse")
            .arg(warehouse)
            .args(["serve", "--listen", listen])
            .env_remove("KAHUNA_SERVE_TOKEN")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let open = refusal(dir.path(), "0.0.0.0:0");
    assert!(open.contains("refusing to serve 0.0.0.0:0 without a token"), "{open}");
    let missing = dir.path().join("none");
    let nothing = refusal(&missing, "127.0.0.1:0");
    assert!(nothing.contains(&format!("no warehouse at {}", missing.display())), "{nothing}");
}
