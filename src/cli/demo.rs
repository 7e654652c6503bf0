//! `kahuna demo`: the sample logs of `data/` ingested and their states shown, then a simulated
//! cluster with a CPU hog diagnosed by Kahuna-WB, with the verdict explained.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};

use super::DemoArgs;
use crate::diagnose::queries::Query;
use crate::diagnose::{self, Record, Request};
use crate::ingest::discover::Hints;
use crate::ingest::{IngestOptions, ingest, summary};
use crate::shell::{self, Format};
use crate::simulate::{self, faults::FaultSpec, workload::Workload};
use crate::warehouse::Warehouse;
use crate::{catalog, cores};

const STATES_PER_HOST: &str = "SELECT state, host, daemon, count(*) AS states, \
     round(avg(duration_ms)) AS mean_ms, max(duration_ms) AS max_ms, \
     sum(CASE WHEN end_ts IS NULL THEN 1 ELSE 0 END) AS unterminated \
     FROM states GROUP BY state, host, daemon ORDER BY state, host, daemon";

pub async fn run(args: DemoArgs, warehouse: Warehouse) -> Result<()> {
    let data = args.data.unwrap_or_else(|| {
        let here = PathBuf::from("data");
        if here.join("logs").is_dir() { here } else { PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data")) }
    });
    let options = IngestOptions {
        paths: ["logs", "sysstat", "jobhistory"].map(|folder| data.join(folder)).to_vec(),
        cluster: "demo".into(),
        warehouse: warehouse.clone(),
        zone: None,
        hints: Hints::default(),
        progress: true,
        threads: cores(),
        dry_run: false,
    };
    let summary = ingest(&options).await?;
    print!("{}", summary::render(&summary));
    let ctx = catalog::session(&warehouse).await?;
    println!("\n{STATES_PER_HOST}\n");
    shell::run_script(&ctx, STATES_PER_HOST, Format::Table, &mut std::io::stdout()).await?;
    diagnosis(&warehouse).await
}

/// The second half: a 10-node cluster running Sort with a CPU hog on one node, simulated,
/// ingested and diagnosed with Kahuna-WB, and the verdict explained.
async fn diagnosis(warehouse: &Warehouse) -> Result<()> {
    let culprit = "r01n04";
    let out = std::env::temp_dir().join(format!("kahuna-demo-{}", std::process::id()));
    let config = simulate::Config {
        nodes: 10,
        workload: Workload::parse("sort").ok_or_else(|| anyhow!("the simulator has no sort workload"))?,
        fault: Some(format!("CPUHog@{culprit}").parse::<FaultSpec>().map_err(|e| anyhow!("demo fault: {e}"))?),
        duration_s: 15.0 * 60.0,
        seed: 1,
        out: out.clone(),
        version: simulate::Version::V018,
        gzip: false,
        sadc: true,
        threads: cores(),
        progress: false,
        epoch_ms: simulate::DEFAULT_EPOCH_MS,
        conditions: simulate::Conditions::default(),
    };
    println!("\nNow a diagnosis. Simulating 15 minutes of a 10-node Hadoop cluster sorting, with a");
    println!("CPU hog (70% of the cores, Kahuna's CPUHog) injected on {culprit}…");
    simulate::run(&config)?;
    let options = IngestOptions {
        paths: vec![out.clone()],
        cluster: "demo-cpuhog".into(),
        warehouse: warehouse.clone(),
        zone: None,
        hints: Hints::default(),
        progress: false,
        threads: config.threads,
        dry_run: false,
    };
    let summary = ingest(&options).await;
    let _ = std::fs::remove_dir_all(&out);
    let summary = summary?;
    println!("ingested {} states as cluster demo-cpuhog.", summary.total(|r| r.states));

    let mut request = Request::new(Query::resolve("kahuna_wb", Path::new("queries"))?);
    request.cluster = Some("demo-cpuhog".into());
    request.params = vec![("states".into(), "Map".into())];
    let outcome = diagnose::run(warehouse, &request, Record::Append).await?;
    println!("\nkahuna diagnose kahuna_wb --cluster demo-cpuhog --param states=Map");
    println!("compares, job by job, each node's histogram of Map durations with every other node's");
    println!("(square-root Jensen-Shannon distance); a node farther than the threshold from more than");
    println!("half of its peers is indicted. Score: in a job, the share of peers it differs from; for");
    println!("the host as a whole (subject `host`), the share of the jobs indicting anyone that indict it.\n");
    print!("{}", diagnose::summarize(&request.query, &outcome.verdict));
    // Every host's whole-window score, so the culprit stands beside its healthy peers.
    let mut hosts: Vec<_> =
        outcome.verdict.iter().filter(|d| d.job_id.is_none() && d.subject.as_deref() == Some("host")).collect();
    hosts.sort_by(|a, b| b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0)).then_with(|| a.host.cmp(&b.host)));
    println!("\nEvery host, over all jobs:");
    for d in hosts {
        let score = d.score.map_or("-".to_string(), |s| format!("{s:.3}"));
        println!(
            "  {:<8} score {score}{}",
            d.host.as_deref().unwrap_or("?"),
            if d.indicted { "  INDICTED" } else { "" }
        );
    }
    let jobs: std::collections::BTreeSet<_> = outcome.verdict.iter().filter_map(|d| d.job_id.clone()).collect();
    let indicted_jobs: std::collections::BTreeSet<_> = outcome
        .verdict
        .iter()
        .filter(|d| d.indicted && d.host.as_deref() == Some(culprit))
        .filter_map(|d| d.job_id.clone())
        .collect();
    println!(
        "\n{culprit} (where the hog runs) is indicted in {} of {} jobs; every verdict is in the `diagnoses` table:",
        indicted_jobs.len(),
        jobs.len()
    );
    println!("  kahuna sql -c \"SELECT job_id, host, score, indicted, detail FROM diagnoses WHERE indicted\"");
    Ok(())
}
