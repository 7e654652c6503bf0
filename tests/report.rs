//! `kahuna report`: pages of real warehouses, opened in headless Chromium (Debian's `chromium`,
//! which `.ci/run` installs), which must show the indicted node and raise no script error.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{artifacts, render, section};
use kahuna::diagnose::eval::SCORED;
use kahuna::schedule::{Config, Runner, WarehouseRunner};
use kahuna::warehouse::Warehouse;

fn kahuna(warehouse: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kahuna")).arg("--warehouse").arg(warehouse).args(args).output().unwrap()
}

fn ok(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn the_demo_clusters_page_names_the_hog_in_its_verdicts_and_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("warehouse");
    ok(kahuna(&wh, &["demo"]));
    let page = dir.path().join("demo.html");
    let said = ok(kahuna(&wh, &["report", "--cluster", "demo-cpuhog", "--out", page.to_str().unwrap()]));
    assert!(said.contains("cluster demo-cpuhog, indicted: r01n04"), "{said}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("http://") && !html.contains("https://"), "the page must open offline");

    let dom = render(&page, &artifacts().join("demo.png"));
    let summary = section(&dom, "summary");
    assert!(summary.contains(r##"<a class="indicted" href="#host-r01n04">r01n04</a>"##), "{summary}");
    // The simulator's CPU hog slows r01n04's Maps in all 7 jobs.
    assert_eq!(summary.matches("<td>job_200808250000_000").count(), 7, "{summary}");
    let host = section(&dom, "host-r01n04");
    assert!(host.contains("<h4>Map <small>(9 peers)</small></h4>"), "{host}");
    assert!(host.contains("Not drawn: no Ganesha model"), "the demo trains no model: {host}");
    let flows = section(&dom, "flows");
    // In the control-flow and the data-flow graph, and no other node.
    assert_eq!(flows.matches(r#"class="node indicted" data-host="r01n04""#).count(), 2, "{flows}");
    assert_eq!(flows.matches(r#"class="node indicted""#).count(), 2);
    assert_eq!(flows.matches(r#"class="node""#).count(), 18, "9 peers in each graph");
    let lanes = section(&dom, "swimlanes");
    assert_eq!(lanes.matches(r#"class="host indicted" data-host="r01n04""#).count(), 1);
    assert_eq!(lanes.matches(r#"class="host""#).count(), 9);

    // The nightly job of the same day: no verdict recorded for that window (the demo's covers
    // all history), the day's states drawn.
    let config = "[[jobs]]\nreport = 'reports/{date}.html'\ncron = '0 2 * * *'\ncluster = 'demo-cpuhog'\n";
    let jobs = toml::from_str::<Config>(config).unwrap().jobs(dir.path()).unwrap();
    let day = chrono::NaiveDate::from_ymd_opt(2008, 8, 25).unwrap();
    let runner = WarehouseRunner::new(Warehouse::new(&wh));
    let indicted = tokio::runtime::Runtime::new().unwrap().block_on(runner.run(&jobs[0], day)).unwrap();
    assert_eq!(indicted, 0);
    let nightly = std::fs::read_to_string(dir.path().join("reports/2008-08-25.html")).unwrap();
    assert!(nightly.contains("2008-08-25 00:00:00 UTC to 2008-08-26 00:00:00 UTC"), "{nightly}");
    assert!(nightly.contains("No diagnosis is recorded for cluster demo-cpuhog over this window"));
    assert_eq!(nightly.matches(r#"class="host" data-host="r01n"#).count(), 10);

    let listing = String::from_utf8(kahuna(&wh, &["report", "--cluster", "demo-cpuhog", "--sql"]).stdout).unwrap();
    assert!(
        listing.contains("-- Host r01n04: State durations against the peers' (Kahuna-WB) (durations)"),
        "{listing}"
    );
    assert!(listing.contains("WHERE cluster = 'demo-cpuhog'"), "{listing}");
}

/// A 50-node hour of Sort with a CPU hog on r01n08, diagnosed as an operator would (every
/// verdict, a Ganesha model trained on its first ten minutes): the page names the hog first,
/// draws every figure of its evidence, and stays small.
#[test]
fn a_50_node_hour_with_a_cpu_hog_gives_a_page_of_a_few_megabytes() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let wh = dir.path().join("warehouse");
    ok(kahuna(
        &wh,
        &["simulate", "--nodes", "50", "--fault", "CPUHog@r01n08", "--duration", "1h", "--out", run.to_str().unwrap()],
    ));
    ok(kahuna(&wh, &["ingest", "--cluster", "hog50", run.to_str().unwrap()]));
    let train = ["--from", "2008-08-25T00:00:00Z", "--to", "2008-08-25T00:10:00Z"];
    ok(kahuna(&wh, &[&["diagnose", "ganesha_train", "--cluster", "hog50"][..], &train].concat()));
    for query in SCORED {
        ok(kahuna(&wh, &["diagnose", query, "--cluster", "hog50"]));
    }
    let page = dir.path().join("hog50.html");
    let said = ok(kahuna(&wh, &["report", "--cluster", "hog50", "--out", page.to_str().unwrap()]));
    assert!(said.contains("cluster hog50, indicted: r01n08\n"), "{said}");
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(size < 3 << 20, "{size} bytes");

    let dom = render(&page, &artifacts().join("hog50.png"));
    let summary = section(&dom, "summary");
    // The combined verdict comes first, and names the hog alone.
    let first_row = summary.split("<tbody><tr>").nth(1).unwrap();
    assert!(
        first_row.starts_with(r##"<td>combined</td><td><a class="indicted" href="#host-r01n08">r01n08</a></td>"##),
        "{first_row}"
    );
    let host = section(&dom, "host-r01n08");
    assert!(!host.contains("Not drawn"), "{host}");
    assert_eq!(host.matches(r#"<polyline class="host""#).count(), host.matches(r#"<polyline class="peers""#).count());
    assert!(host.contains("profile 0"), "Ganesha's profiles: {host}");
    assert_eq!(section(&dom, "flows").matches(r#"class="node indicted" data-host="r01n08""#).count(), 2);
}

#[test]
fn an_empty_window_an_unknown_cluster_and_an_unknown_run_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("warehouse");
    let none = kahuna(&wh, &["report", "--out", dir.path().join("x.html").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&none.stderr).contains("holds no states: `kahuna ingest` logs into it first"));
    assert!(!none.status.success());

    let logs = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/logs");
    ok(kahuna(&wh, &["ingest", "--cluster", "samples", logs.to_str().unwrap()]));
    let unknown_run = kahuna(&wh, &["report", "--run", "nosuch"]);
    assert!(!unknown_run.status.success());
    let said = String::from_utf8_lossy(&unknown_run.stderr);
    assert!(said.contains("no run nosuch in the diagnoses of"), "{said}");

    for (name, args) in [
        ("empty-window", &["--from", "2001-01-01", "--to", "2001-01-02"][..]),
        ("unknown-cluster", &["--cluster", "nosuch"][..]),
    ] {
        let page = dir.path().join(format!("{name}.html"));
        ok(kahuna(&wh, &[&["report", "--out", page.to_str().unwrap()][..], args].concat()));
        let dom = render(&page, &artifacts().join(format!("{name}.png")));
        assert!(dom.contains("has no states in this window: nothing to draw but the recorded verdicts."), "{dom}");
        assert!(dom.contains("No diagnosis is recorded for cluster"), "{dom}");
    }
}
