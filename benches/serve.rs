//! Serving: `cargo bench --bench serve` (release build).
//!
//! Simulates a 10-node, 30-minute Sort run (`kahuna simulate --seed 1`), ingests it, then runs a
//! small query (`SMALL`) `KAHUNA_BENCH_QUERIES` times (default 1,000) from
//! `KAHUNA_BENCH_CLIENTS` clients at once (default 20), twice: in process (a task per client,
//! each query in a fresh session over one snapshot of the warehouse), and through `kahuna serve`
//! on loopback with arrow-flight's own Flight SQL client (a connection per client; each query a
//! GetFlightInfo and a DoGet, with the bearer token). Prints queries per second, p50 and p99
//! latency, and the server's peak resident memory; client and server share the machine's cores.

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt as _;
use kahuna::catalog::{self, Snapshot};
use kahuna::warehouse::Warehouse;
use tonic::transport::Endpoint;

const SMALL: &str = "SELECT host, count(*) AS maps, round(avg(duration_ms)) AS mean_ms \
                     FROM states WHERE state = 'Map' GROUP BY host ORDER BY host";
const TOKEN: &str = "bench-token";

fn kahuna() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kahuna"))
}

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Latencies of `queries` runs of `query`, `clients` at a time, and the wall time of them all.
async fn load<F, Fut>(clients: usize, queries: usize, query: F) -> (Vec<f64>, f64)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = usize> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let (next, query) = (next.clone(), query.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < queries {
                    let at = Instant::now();
                    assert_eq!(query(client).await, 10, "one row per host");
                    latencies.push(at.elapsed().as_secs_f64() * 1000.0);
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("client"));
    }
    latencies.sort_by(f64::total_cmp);
    (latencies, started.elapsed().as_secs_f64())
}

fn report(what: &str, latencies: &[f64], secs: f64) {
    let at = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "{what:<28} {:>7.0} queries/s   p50 {:>6.1} ms   p99 {:>6.1} ms",
        latencies.len() as f64 / secs,
        at(0.50),
        at(0.99)
    );
}

fn simulated_warehouse(scratch: &Path) -> std::path::PathBuf {
    let run = scratch.join("run");
    let warehouse = scratch.join("warehouse");
    let simulate = kahuna().args(["simulate", "--nodes", "10", "--duration", "30m", "--out"]).arg(&run).output();
    assert!(simulate.expect("kahuna simulate").status.success());
    let ingest = kahuna().arg("--warehouse").arg(&warehouse).arg("ingest").arg(&run).output();
    assert!(ingest.expect("kahuna ingest").status.success());
    warehouse
}

#[tokio::main]
async fn main() {
    let (clients, queries) = (setting("KAHUNA_BENCH_CLIENTS", 20), setting("KAHUNA_BENCH_QUERIES", 1000));
    let scratch = tempfile::tempdir().expect("temp dir");
    let warehouse = simulated_warehouse(scratch.path());
    println!("{queries} queries from {clients} clients at once: {SMALL}");

    let snapshot = Snapshot::take(&Warehouse::new(&warehouse)).await.expect("snapshot");
    let (latencies, secs) = load(clients, queries, move |_| {
        let snapshot = snapshot.clone();
        async move {
            let ctx = catalog::session_over(&snapshot).expect("session");
            let batches = ctx.sql(SMALL).await.expect("plan").collect().await.expect("run");
            batches.iter().map(|b| b.num_rows()).sum()
        }
    })
    .await;
    report("in process", &latencies, secs);

    let mut server = kahuna()
        .arg("--warehouse")
        .arg(&warehouse)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("KAHUNA_SERVE_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .expect("kahuna serve");
    let mut line = String::new();
    BufReader::new(server.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("read");
    let uri = line.split_whitespace().last().expect("an address").replace("grpc://", "http://");
    let mut connections = Vec::new();
    for _ in 0..clients {
        let channel = Endpoint::new(uri.clone()).expect("uri").connect().await.expect("connect");
        let mut client = FlightSqlServiceClient::new(channel);
        client.set_token(TOKEN.to_string());
        connections.push(client);
    }
    let connections = Arc::new(connections);
    let (latencies, secs) = load(clients, queries, move |client| {
        let mut client = connections[client].clone();
        async move {
            let info = client.execute(SMALL.to_string(), None).await.expect("GetFlightInfo");
            let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
            let batches: Vec<_> = client.do_get(ticket).await.expect("DoGet").try_collect().await.expect("rows");
            batches.iter().map(|b| b.num_rows()).sum()
        }
    })
    .await;
    report("kahuna serve (Flight SQL)", &latencies, secs);
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.id())).unwrap_or_default();
    let peak = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap_or("?").trim().to_string();
    println!("server peak resident memory: {peak}");
    let _ = server.kill();
    let _ = server.wait();
}
