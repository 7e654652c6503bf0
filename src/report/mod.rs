//! `kahuna report`: the papers' pictures of one cluster over one window, as one HTML page that
//! opens offline. Every figure is drawn from queries over the warehouse (`queries/report/*.sql`
//! and the diagnoses' own files, overridable in the queries folder), and shows its SQL.
//!
//! The summary reads the verdicts recorded in `diagnoses`; the evidence behind an indicted host
//! is computed again for the window: its state durations beside its peers' (Kahuna-WB), its
//! SALSA alarms over time and its Ganesha profiles (each from that diagnosis' own tables, run in
//! the report's session), then swimlanes of every node, the control and data flow between
//! nodes, and the peer-correlation study.

pub mod svg;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, SecondsFormat, Utc};
use datafusion::arrow::array::{Array, RecordBatch, cast::AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::prelude::SessionContext;

use crate::catalog::{self, Snapshot};
use crate::diagnose::queries::Query;
use crate::diagnose::{self, Request};
use crate::warehouse::Warehouse;
use svg::{Edge, Line, Points, Span, escape};

/// The report's figure queries, built in; `<queries>/report/<name>.sql` replaces one.
const FIGURES: [(&str, &str); 7] = [
    ("verdicts", include_str!("../../queries/report/verdicts.sql")),
    ("span", include_str!("../../queries/report/span.sql")),
    ("durations", include_str!("../../queries/report/durations.sql")),
    ("salsa_alarms", include_str!("../../queries/report/salsa_alarms.sql")),
    ("ganesha_labels", include_str!("../../queries/report/ganesha_labels.sql")),
    ("swimlanes", include_str!("../../queries/report/swimlanes.sql")),
    ("eval", include_str!("../../queries/report/eval.sql")),
];

/// Edges a flow graph draws at most.
const MAX_EDGES: usize = 1500;
/// Indicted hosts whose evidence the page draws at most.
const MAX_HOSTS: usize = 20;

const STYLE: &str = include_str!("page.css");
/// Runs first: any script error or `console.error` is kept on the page's root element, where a
/// headless browser (and a reader of the source) sees it.
const ERRORS: &str = include_str!("errors.js");
const ZOOM: &str = include_str!("zoom.js");

pub struct Options {
    pub cluster: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    /// One recorded run of a diagnosis: its cluster and window unless given, its verdicts only.
    pub run: Option<String>,
    /// The queries folder, where `report/<name>.sql` and the diagnoses' files may replace the
    /// built-in ones.
    pub queries: PathBuf,
    /// `kahuna eval`'s CSV file, whose TP/FP tables the page draws; alone (no cluster or run
    /// given), the page is only that.
    pub eval: Option<PathBuf>,
}

pub struct Report {
    pub cluster: String,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    /// Hosts an indicting verdict names, the combined verdict's first.
    pub indicted: Vec<String>,
    notes: Vec<String>,
    stats: String,
    sections: Vec<Section>,
}

struct Section {
    id: String,
    title: String,
    figures: Vec<Figure>,
}

struct Figure {
    title: String,
    caption: String,
    body: String,
    /// Each query the figure ran, by name, as bound.
    sql: Vec<(String, String)>,
}

impl Figure {
    fn new(title: &str, caption: &str) -> Figure {
        Figure { title: title.into(), caption: caption.into(), body: String::new(), sql: Vec::new() }
    }

    fn not_drawn(mut self, why: &str) -> Figure {
        self.body = format!(r#"<p class="missing">Not drawn: {}</p>"#, escape(why));
        self
    }
}

/// A query's rows, read by column name.
struct Rows(Vec<RecordBatch>);

impl Rows {
    fn len(&self) -> usize {
        self.0.iter().map(RecordBatch::num_rows).sum()
    }

    fn column(&self, name: &str, to: &DataType) -> Result<Vec<std::sync::Arc<dyn Array>>> {
        self.0
            .iter()
            .map(|b| {
                let column = b.column_by_name(name).with_context(|| format!("no column {name}"))?;
                Ok(cast(column, to)?)
            })
            .collect()
    }

    fn text(&self, name: &str) -> Result<Vec<Option<String>>> {
        let mut out = Vec::with_capacity(self.len());
        for array in self.column(name, &DataType::Utf8)? {
            out.extend(array.as_string::<i32>().iter().map(|v| v.map(str::to_string)));
        }
        Ok(out)
    }

    fn num(&self, name: &str) -> Result<Vec<Option<f64>>> {
        let mut out = Vec::with_capacity(self.len());
        for array in self.column(name, &DataType::Float64)? {
            out.extend(array.as_primitive::<Float64Type>().iter());
        }
        Ok(out)
    }
}

/// The report's session and what every query of it shares.
struct Session<'a> {
    ctx: SessionContext,
    warehouse: &'a Warehouse,
    options: &'a Options,
    /// `from`, `to` and `cluster` as query parameters.
    window: Vec<(String, String)>,
}

impl Session<'_> {
    fn query(&self, name: &str) -> Result<Query> {
        if let Some((_, text)) = FIGURES.iter().find(|(n, _)| *n == name) {
            let file = self.options.queries.join("report").join(format!("{name}.sql"));
            return if file.is_file() { Query::read(&file) } else { Query::parse(name, "<built-in>", text) };
        }
        Query::resolve(name, &self.options.queries)
    }

    /// Runs a query with the window's parameters it declares and `params`; its last statement's
    /// rows, and its SQL as bound (for the page).
    async fn run(
        &self,
        name: &str,
        params: &[(&str, String)],
    ) -> Result<(Rows, (String, String), Vec<Vec<RecordBatch>>)> {
        let query = self.query(name)?;
        let given: Vec<(String, String)> = self
            .window
            .iter()
            .cloned()
            .chain(params.iter().map(|(n, v)| (n.to_string(), v.clone())))
            .filter(|(n, _)| query.param(n).is_some())
            .collect();
        let mut request = Request::new(query);
        request.params = given;
        let executed = diagnose::execute(&self.ctx, &request).await?;
        Ok((Rows(executed.last), (name.to_string(), executed.sql), executed.results))
    }

    async fn scalar_rows(&self, sql: &str) -> Result<Rows> {
        Ok(Rows(self.ctx.sql(sql).await?.collect().await?))
    }
}

fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn micros(seconds: Option<f64>) -> Option<DateTime<Utc>> {
    seconds.and_then(|s| DateTime::from_timestamp_micros((s * 1e6).round() as i64))
}

/// Builds the report of `options` over the warehouse as of its last finished ingest.
pub async fn build(warehouse: &Warehouse, options: &Options) -> Result<Report> {
    let snapshot = Snapshot::take(warehouse).await?;
    let ctx = catalog::session_over(&snapshot)?;
    let mut report = Report {
        cluster: String::new(),
        from: options.from,
        to: options.to,
        indicted: Vec::new(),
        notes: Vec::new(),
        stats: String::new(),
        sections: Vec::new(),
    };
    let mut cx = Session { ctx, warehouse, options, window: Vec::new() };
    let evaluation = match &options.eval {
        Some(path) => Some(evaluation(&cx, path).await?),
        None => None,
    };
    if evaluation.is_some() && options.cluster.is_none() && options.run.is_none() {
        // No cluster: the page is the scores alone.
        report.sections.extend(evaluation);
        return Ok(report);
    }
    let has_diagnoses = warehouse.has_table("diagnoses").await?;
    if let Some(run) = &options.run {
        let found = if has_diagnoses {
            let sql = format!(
                "SELECT cluster, date_part('epoch', window_from) AS f, date_part('epoch', window_to) AS t \
                 FROM diagnoses WHERE run_id = {} LIMIT 1",
                literal(run)
            );
            cx.scalar_rows(&sql).await?
        } else {
            Rows(Vec::new())
        };
        if found.len() == 0 {
            bail!(
                "no run {run} in the diagnoses of {warehouse}: `kahuna sql -c \"SELECT DISTINCT run_id, query, cluster FROM diagnoses\"` lists them"
            );
        }
        let cluster = found.text("cluster")?.remove(0).unwrap_or_default();
        if let Some(given) = options.cluster.as_ref().filter(|c| **c != cluster) {
            bail!("run {run} diagnosed cluster {cluster}, not {given}");
        }
        report.cluster = cluster;
        if options.from.is_none() && options.to.is_none() {
            (report.from, report.to) = (micros(found.num("f")?[0]), micros(found.num("t")?[0]));
        }
    } else {
        report.cluster = cluster_of(&cx).await?;
        if options.from.is_none() && options.to.is_none() && has_diagnoses {
            let sql = format!(
                "SELECT run_id, date_part('epoch', window_from) AS f, date_part('epoch', window_to) AS t \
                 FROM diagnoses WHERE cluster = {} ORDER BY ran_at DESC LIMIT 1",
                literal(&report.cluster)
            );
            let newest = cx.scalar_rows(&sql).await?;
            if newest.len() > 0 {
                (report.from, report.to) = (micros(newest.num("f")?[0]), micros(newest.num("t")?[0]));
                report.notes.push(format!(
                    "The window is that of the newest recorded diagnosis ({}); --from and --to choose another.",
                    newest.text("run_id")?[0].clone().unwrap_or_default()
                ));
            }
        }
    }
    let stamp =
        |t: Option<DateTime<Utc>>| t.map_or("null".to_string(), |t| t.to_rfc3339_opts(SecondsFormat::Micros, true));
    cx.window = vec![
        ("cluster".into(), report.cluster.clone()),
        ("from".into(), stamp(report.from)),
        ("to".into(), stamp(report.to)),
    ];

    let summary = summary(&cx, has_diagnoses).await?;
    report.indicted = summary.1;
    report.sections.push(summary.0);

    let (span_rows, span_sql, _) = cx.run("span", &[]).await?;
    let states = span_rows.num("states")?.first().copied().flatten().unwrap_or(0.0);
    let hosts = span_rows.num("hosts")?.first().copied().flatten().unwrap_or(0.0);
    let t0 = report.from.map(|t| t.timestamp() as f64).or(span_rows.num("first_s")?.first().copied().flatten());
    let t1 = report.to.map(|t| t.timestamp() as f64).or(span_rows.num("last_s")?.first().copied().flatten());
    report.stats = format!("{hosts} hosts, {states} states");
    let window = Figure::new("The window", "The first and last instant of its states, its hosts and states.");
    let body = format!("<p>{}</p>", escape(&report.stats));
    report.sections[0].figures.push(Figure { sql: vec![span_sql], body, ..window });
    let (Some(t0), Some(t1), true) = (t0, t1, states > 0.0) else {
        report.notes.push(format!(
            "Cluster {} has no states in this window: nothing to draw but the recorded verdicts.",
            report.cluster
        ));
        return Ok(report);
    };
    // A day of a big cluster can indict a hundred hosts: the evidence of the first ones (the
    // combined verdict's, then by score) keeps the page readable and light.
    let shown = &report.indicted[..report.indicted.len().min(MAX_HOSTS)];
    if shown.len() < report.indicted.len() {
        report.notes.push(format!(
            "{} hosts are indicted; the evidence of the first {MAX_HOSTS} is drawn (--run shows one diagnosis' alone).",
            report.indicted.len()
        ));
    }
    if !shown.is_empty() {
        let evidence = Evidence::gather(&cx, shown, t0, t1).await;
        report.sections.extend(shown.iter().map(|host| evidence.section(host)));
    }
    let mut timeline = Section { id: "swimlanes".into(), title: "States over time".into(), figures: Vec::new() };
    timeline.figures.push(swimlanes(&cx, t0, t1, &report.indicted).await);
    report.sections.push(timeline);
    let mut flows = Section { id: "flows".into(), title: "Control flow and data flow".into(), figures: Vec::new() };
    flows.figures.push(flow(&cx, "controlflow", &report.indicted).await);
    flows.figures.push(flow(&cx, "dataflow", &report.indicted).await);
    report.sections.push(flows);
    let mut study = Section { id: "peers".into(), title: "Are a job's nodes alike?".into(), figures: Vec::new() };
    study.figures.push(peer_correlation(&cx).await);
    report.sections.push(study);
    report.sections.extend(evaluation);
    Ok(report)
}

/// The cluster of a warehouse that holds one; otherwise the user must choose.
async fn cluster_of(cx: &Session<'_>) -> Result<String> {
    if let Some(cluster) = &cx.options.cluster {
        return Ok(cluster.clone());
    }
    if !cx.warehouse.has_table("states").await? {
        bail!("{} holds no states: `kahuna ingest` logs into it first", cx.warehouse);
    }
    let clusters = cx.scalar_rows("SELECT DISTINCT cluster FROM states ORDER BY cluster").await?.text("cluster")?;
    match clusters.as_slice() {
        [one] => Ok(one.clone().unwrap_or_default()),
        [] => bail!("{} holds no states: `kahuna ingest` logs into it first", cx.warehouse),
        many => bail!(
            "the warehouse holds clusters {}: choose one with --cluster",
            many.iter().flatten().cloned().collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The verdicts recorded for the window, and the hosts they indict.
async fn summary(cx: &Session<'_>, has_diagnoses: bool) -> Result<(Section, Vec<String>)> {
    let mut section = Section { id: "summary".into(), title: "Verdicts".into(), figures: Vec::new() };
    let mut figure = Figure::new(
        "Verdicts recorded for this window",
        "The newest run of each diagnosis over this cluster and window (`kahuna diagnose`, or the nightly schedule), the combined verdict first, and the evidence each indictment gives.",
    );
    let cluster = &cx.window[0].1;
    let advice = format!(
        "No diagnosis is recorded for cluster {cluster} over this window. Run `kahuna diagnose kahuna_wb --cluster {cluster}` \
         (and salsa_fingerpoint, ganesha_bb, fetch_failures, hung_tasks, then combined) with the same --from and --to, then this report again."
    );
    if !has_diagnoses {
        section.figures.push(figure.not_drawn(&advice));
        return Ok((section, Vec::new()));
    }
    let (rows, sql, _) =
        cx.run("verdicts", &[("run", cx.options.run.clone().unwrap_or_else(|| "null".into()))]).await?;
    figure.sql.push(sql);
    if rows.len() == 0 {
        section.figures.push(figure.not_drawn(&advice));
        return Ok((section, Vec::new()));
    }
    let (query, run, ran_at, subjects) =
        (rows.text("query")?, rows.text("run_id")?, rows.text("ran_at")?, rows.num("subjects")?);
    let (host, job, subject, score, detail) =
        (rows.text("host")?, rows.text("job_id")?, rows.text("subject")?, rows.num("score")?, rows.text("detail")?);
    let mut indicted: Vec<String> = Vec::new();
    let mut by_run: Vec<(usize, Vec<usize>)> = Vec::new();
    for i in 0..rows.len() {
        match by_run.last_mut() {
            Some((first, members)) if run[*first] == run[i] => members.push(i),
            _ => by_run.push((i, vec![i])),
        }
        // A host-level verdict indicts; a per-job row (Kahuna-WB's) is evidence.
        if let (Some(h), None) = (&host[i], &job[i])
            && !indicted.contains(h)
        {
            indicted.push(h.clone());
        }
    }
    let body = &mut figure.body;
    body.push_str(
        r#"<table class="verdicts"><thead><tr><th>diagnosis</th><th>indicted</th><th>subjects</th><th>run</th><th>ran at</th></tr></thead><tbody>"#,
    );
    for (first, members) in &by_run {
        // Each host once: as a verdict, or in so many jobs.
        let mut named: Vec<String> = Vec::new();
        let mut per_job: BTreeMap<&str, usize> = BTreeMap::new();
        for &i in members {
            match (&host[i], &job[i]) {
                (Some(h), None) => named.push(format!(r##"<a class="indicted" href="#host-{0}">{0}</a>"##, escape(h))),
                (Some(h), Some(_)) => *per_job.entry(h).or_default() += 1,
                _ => {}
            }
        }
        for (h, jobs) in per_job {
            named.push(format!("{} in {jobs} job(s)", escape(h)));
        }
        let named = if named.is_empty() { "nobody".to_string() } else { named.join(", ") };
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{named}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            escape(query[*first].as_deref().unwrap_or("")),
            subjects[*first].unwrap_or(0.0),
            escape(run[*first].as_deref().unwrap_or("")),
            escape(ran_at[*first].as_deref().unwrap_or("")),
        );
    }
    body.push_str("</tbody></table>");
    // Host verdicts first; the per-job rows behind them folded away.
    let header = r#"<table class="evidence"><thead><tr><th>diagnosis</th><th>host</th><th>job</th><th>subject</th><th>score</th><th>detail</th></tr></thead><tbody>"#;
    let evidence = |rows_of: &mut dyn Iterator<Item = usize>| {
        let mut table = header.to_string();
        for i in rows_of {
            let _ = write!(
                table,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                escape(query[i].as_deref().unwrap_or("")),
                escape(host[i].as_deref().unwrap_or("")),
                escape(job[i].as_deref().unwrap_or("")),
                escape(subject[i].as_deref().unwrap_or("")),
                score[i].map_or(String::new(), |s| format!("{s:.3}")),
                escape(detail[i].as_deref().unwrap_or("")),
            );
        }
        table + "</tbody></table>"
    };
    if !indicted.is_empty() {
        let _ = write!(
            body,
            "<h4>Evidence</h4>{}",
            evidence(&mut (0..rows.len()).filter(|&i| host[i].is_some() && job[i].is_none()))
        );
    }
    let per_job = (0..rows.len()).filter(|&i| host[i].is_some() && job[i].is_some()).count();
    if per_job > 0 {
        let _ = write!(
            body,
            "<details><summary>{per_job} indictments in single jobs</summary>{}</details>",
            evidence(&mut (0..rows.len()).filter(|&i| host[i].is_some() && job[i].is_some()))
        );
    }
    section.figures.push(figure);
    Ok((section, indicted))
}

/// A query's rows and the SQL that made them, or why there are none (with the SQL run so far).
struct Ran {
    rows: std::result::Result<Rows, String>,
    /// The last query's statements that returned rows, in order (its last one is `rows`).
    earlier: Vec<Vec<RecordBatch>>,
    sql: Vec<(String, String)>,
}

impl Ran {
    /// Runs `names` in order, the last one's rows kept.
    async fn queries(cx: &Session<'_>, names: &[&str], params: &[(&str, String)]) -> Ran {
        let mut ran = Ran { rows: Err("nothing ran".into()), earlier: Vec::new(), sql: Vec::new() };
        for name in names {
            match cx.run(name, params).await {
                Ok((rows, sql, earlier)) => {
                    ran.sql.push(sql);
                    ran.rows = Ok(rows);
                    ran.earlier = earlier;
                }
                Err(e) => {
                    ran.rows = Err(format!("{e:#}"));
                    break;
                }
            }
        }
        ran
    }

    /// The figure drawn by `draw` from the rows, or saying why it is not.
    fn figure(&self, title: &str, caption: &str, draw: impl FnOnce(&Rows) -> Result<String>) -> Figure {
        let figure = Figure { sql: self.sql.clone(), ..Figure::new(title, caption) };
        match self.rows.as_ref().map_err(|e| anyhow::anyhow!("{e}")).and_then(draw) {
            Ok(body) => Figure { body, ..figure },
            Err(e) => figure.not_drawn(&format!("{e:#}")),
        }
    }
}

/// What the evidence of every indicted host is drawn from, each query run once a report.
struct Evidence {
    durations: Ran,
    salsa: Ran,
    ganesha: Ran,
    t0: f64,
    t1: f64,
}

impl Evidence {
    async fn gather(cx: &Session<'_>, indicted: &[String], t0: f64, t1: f64) -> Evidence {
        let durations = Ran::queries(cx, &["durations"], &[]).await;
        let step = cx
            .query("salsa_fingerpoint")
            .and_then(|q| q.bind(&[]))
            .ok()
            .and_then(|bound| bound.values.get("step_seconds").and_then(|v| v.parse::<f64>().ok()))
            .unwrap_or(5.0);
        let bucket = ((t1 - t0) / 120.0).max(step).ceil();
        let params =
            [("hosts", indicted.join(",")), ("step_seconds", step.to_string()), ("bucket_seconds", bucket.to_string())];
        let salsa = Ran::queries(cx, &["salsa_fingerpoint", "salsa_alarms"], &params).await;
        let has = async |table| cx.warehouse.has_table(table).await.unwrap_or(false);
        let ganesha = if has("ganesha_models").await && has("sadc").await {
            Ran::queries(cx, &["ganesha_bb", "ganesha_labels"], &[]).await
        } else {
            let why = "no Ganesha model or no sadc data: `kahuna diagnose ganesha_train` on a fault-free window first";
            Ran { rows: Err(why.into()), earlier: Vec::new(), sql: Vec::new() }
        };
        Evidence { durations, salsa, ganesha, t0, t1 }
    }

    /// An indicted host's evidence: its durations, its SALSA alarms and its Ganesha profiles,
    /// each beside its peers'.
    fn section(&self, host: &str) -> Section {
        let figures = vec![
            self.durations.figure(
                "State durations against the peers' (Kahuna-WB)",
                "Each state's durations over the cluster's median for that state, in half-octaves: the host's share of its states in each (red) beside the median share of its peers (grey).",
                |rows| durations(rows, host),
            ),
            self.salsa.figure(
                "SALSA alarms over time",
                "salsa_fingerpoint's peer comparison, run again for this window: the share of the host's ticks in alarm (red) and the mean over its peers (grey), per state.",
                |rows| alarms(rows, host, self.t0, self.t1),
            ),
            self.ganesha.figure(
                "Black-box profiles (Ganesha)",
                "ganesha_bb's classification of each second of sadc metrics into the trained model's profiles (the last is unknown), run again for this window: the host's share of seconds in each (red) beside its peers' median (grey).",
                |rows| profiles(rows, host),
            ),
        ];
        Section { id: format!("host-{host}"), title: format!("Host {host}"), figures }
    }
}

/// The median of `values`, zeros for the peers that have none.
fn median(mut values: Vec<f64>, peers: usize) -> f64 {
    values.resize(peers.max(values.len()), 0.0);
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn durations(rows: &Rows, host: &str) -> Result<String> {
    let (state, hosts, bin, share) = (rows.text("state")?, rows.text("host")?, rows.num("bin")?, rows.num("share")?);
    // state → bin → (this host's share, the peers' shares); state → peers.
    let mut bins: BTreeMap<&str, BTreeMap<i64, (f64, Vec<f64>)>> = BTreeMap::new();
    let mut peers: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for i in 0..rows.len() {
        let (Some(s), Some(h), Some(b), Some(v)) = (&state[i], &hosts[i], bin[i], share[i]) else { continue };
        let cell = bins.entry(s).or_default().entry(b as i64).or_default();
        if h == host {
            cell.0 = v;
        } else {
            cell.1.push(v);
            peers.entry(s).or_default().insert(h);
        }
    }
    let categories: Vec<String> = (-8..=8).map(|b: i32| format!("{:.2}×", 2f64.powf(f64::from(b) / 2.0))).collect();
    let mut body = String::new();
    for (state, cells) in bins.iter().filter(|(_, cells)| cells.values().any(|(mine, _)| *mine > 0.0)) {
        let n = peers.get(state).map_or(0, |p| p.len());
        let mine: Vec<f64> = (-8..=8).map(|b| cells.get(&b).map_or(0.0, |c| c.0)).collect();
        let theirs: Vec<f64> = (-8..=8).map(|b| cells.get(&b).map_or(0.0, |c| median(c.1.clone(), n))).collect();
        let _ = write!(
            body,
            r#"<div class="small"><h4>{} <small>({n} peers)</small></h4>{}</div>"#,
            escape(state),
            svg::paired_bars(&categories, ("host", &mine), ("peers", &theirs), "share")
        );
    }
    if body.is_empty() {
        bail!("{host} has no finished states in this window");
    }
    Ok(body)
}

fn alarms(rows: &Rows, host: &str, t0: f64, t1: f64) -> Result<String> {
    let (state, hosts, at, share) =
        (rows.text("state")?, rows.text("host")?, rows.num("bucket_s")?, rows.num("alarm_share")?);
    let mut lines: BTreeMap<&str, (Points, Points)> = BTreeMap::new();
    for i in 0..rows.len() {
        let (Some(s), Some(h), Some(t), Some(v)) = (&state[i], &hosts[i], at[i], share[i]) else { continue };
        let entry = lines.entry(s).or_default();
        if h == host {
            entry.0.push((t, v));
        } else if h == "(peers)" {
            entry.1.push((t, v));
        }
    }
    let mut body = String::new();
    for (state, (mine, theirs)) in lines.into_iter().filter(|(_, (mine, _))| !mine.is_empty()) {
        let drawn = [
            Line { class: "peers", label: format!("{state}: peers"), points: theirs },
            Line { class: "host", label: format!("{state}: {host}"), points: mine },
        ];
        let _ = write!(
            body,
            r#"<div class="small"><h4>{}</h4>{}</div>"#,
            escape(state),
            svg::series(t0, t1, &drawn, 1.0, "alarm share")
        );
    }
    if body.is_empty() {
        bail!("salsa_fingerpoint compared no state of {host} with its peers");
    }
    Ok(body)
}

fn profiles(rows: &Rows, host: &str) -> Result<String> {
    let (hosts, label, share) = (rows.text("host")?, rows.num("label")?, rows.num("share")?);
    let labels = label.iter().flatten().fold(0.0_f64, |a, &b| a.max(b)) as usize + 1;
    let peers = hosts.iter().flatten().filter(|h| *h != host).collect::<std::collections::BTreeSet<_>>().len();
    let (mut mine, mut theirs) = (vec![0.0; labels], vec![Vec::new(); labels]);
    for i in 0..rows.len() {
        let (Some(h), Some(l), Some(v)) = (&hosts[i], label[i], share[i]) else { continue };
        if h == host {
            mine[l as usize] = v;
        } else {
            theirs[l as usize].push(v);
        }
    }
    if mine.iter().all(|v| *v == 0.0) {
        bail!("{host} has no sadc samples in this window");
    }
    let theirs: Vec<f64> = theirs.into_iter().map(|v| median(v, peers)).collect();
    let categories: Vec<String> =
        (0..labels).map(|l| if l + 1 == labels { "unknown".to_string() } else { format!("profile {l}") }).collect();
    Ok(svg::paired_bars(&categories, ("host", &mine), ("peers", &theirs), "share of seconds"))
}

async fn swimlanes(cx: &Session<'_>, t0: f64, t1: f64, indicted: &[String]) -> Figure {
    let gap = ((t1 - t0) / 1000.0).max(0.001).to_string();
    Ran::queries(cx, &["swimlanes"], &[("gap_seconds", gap)]).await.figure(
        "Swimlanes",
        "When each node was in each state (SALSA's view of a run); states of a kind that overlap or nearly touch are one span. Scroll over the lanes to zoom, drag to pan, double-click to see the whole window again. Indicted hosts are red.",
        |rows| {
            let (host, state, start, end, n) =
                (rows.text("host")?, rows.text("state")?, rows.num("start_s")?, rows.num("end_s")?, rows.num("states")?);
            let spans: Vec<Span> = (0..rows.len())
                .filter_map(|i| {
                    Some(Span {
                        host: host[i].clone()?,
                        state: state[i].clone()?,
                        start: start[i]?.max(t0),
                        end: end[i]?.min(t1),
                        states: n[i]? as i64,
                    })
                })
                .collect();
            Ok(svg::swimlanes(t0, t1, &spans, indicted))
        },
    )
}

/// SALSA's control flow (ReduceCopy between TaskTrackers) or data flow (blocks between
/// DataNodes), from the saved query of that name, run for the window without saving.
async fn flow(cx: &Session<'_>, query: &str, indicted: &[String]) -> Figure {
    let (title, caption, weight) = match query {
        "controlflow" => (
            "Control flow: shuffle copies between TaskTrackers",
            "Every ReduceCopy is an edge from the Map's node to the Reduce's, wider for more copies (SALSA Fig. 6). Edges of an indicted node are red.",
            "copies",
        ),
        _ => (
            "Data flow: block operations between DataNodes",
            "Every ReadBlock, WriteBlock and replication is an edge between DataNodes, wider for more blocks; a ring is local I/O (SALSA Fig. 8). Edges of an indicted node are red.",
            "blocks",
        ),
    };
    Ran::queries(cx, &[query], &[]).await.figure(title, caption, |rows| {
        let (src, dst, n, mean) = (rows.text("src")?, rows.text("dst")?, rows.num(weight)?, rows.num("mean_ms")?);
        let mut edges: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
        for i in 0..rows.len() {
            let (Some(s), Some(d), Some(n)) = (&src[i], &dst[i], n[i]) else { continue };
            let edge = edges.entry((s.clone(), d.clone())).or_default();
            edge.0 += n;
            edge.1 += n * mean[i].unwrap_or(0.0);
        }
        let mut edges: Vec<Edge> = edges
            .into_iter()
            .map(|((src, dst), (n, total_ms))| Edge {
                label: format!("{src} → {dst}: {n} {weight}, mean {:.0} ms", total_ms / n.max(1.0)),
                src,
                dst,
                weight: n,
            })
            .collect();
        if edges.is_empty() {
            bail!("no {weight} between nodes in this window");
        }
        // A few hundred nodes have tens of thousands of edges: the heaviest tell the story and
        // keep the page light.
        let mut body = String::new();
        if edges.len() > MAX_EDGES {
            let _ =
                write!(body, r#"<p class="caption">The {MAX_EDGES} heaviest of {} edges are drawn.</p>"#, edges.len());
            edges.sort_by(|a, b| b.weight.total_cmp(&a.weight));
            edges.truncate(MAX_EDGES);
        }
        Ok(body + &svg::graph(&edges, indicted))
    })
}

/// The Kahuna M45 study for the window: how many of a job's nodes are alike, successful jobs
/// against failed ones.
async fn peer_correlation(cx: &Session<'_>) -> Figure {
    let ran = Ran::queries(cx, &["peer_correlation"], &[]).await;
    ran.figure(
        "Peer correlation of Maps executing (Kahuna §IV)",
        "Per job, the share of its hosts whose Maps-executing series has |r| ≥ 0.6 with every peer: how many jobs show each share, for successful and for failed jobs. The paper found 89% of nodes alike in successful jobs, 43% in failed ones.",
        |jobs| {
            let (outcome, share) = (jobs.text("outcome")?, jobs.num("share_similar")?);
            let mut histogram: BTreeMap<bool, Vec<f64>> = BTreeMap::new();
            for (outcome, share) in outcome.iter().zip(&share) {
                let (Some(outcome), Some(share)) = (outcome, share) else { continue };
                let bins = histogram.entry(outcome == "SUCCEEDED").or_insert_with(|| vec![0.0; 10]);
                bins[((share * 10.0) as usize).min(9)] += 1.0;
            }
            if histogram.is_empty() {
                bail!("no job ran Maps on two hosts or more in this window");
            }
            let categories: Vec<String> = (0..10).map(|b| format!("{}–{}%", b * 10, b * 10 + 10)).collect();
            let none = vec![0.0; 10];
            let ok = histogram.get(&true).unwrap_or(&none);
            let failed = histogram.get(&false).unwrap_or(&none);
            let mut body = svg::paired_bars(&categories, ("peers", ok), ("host", failed), "jobs");
            body.push_str(r#"<p class="legend"><span><i class="peers"></i>succeeded</span><span><i class="host"></i>failed or unknown</span></p>"#);
            // Statement 2: the split by outcome, printed beside the chart.
            if let Some(split) = ran.earlier.len().checked_sub(2).map(|i| Rows(ran.earlier[i].clone()))
                && let (Ok(outcome), Ok(jobs), Ok(share)) =
                    (split.text("outcome"), split.num("jobs"), split.num("share_similar"))
            {
                body.push_str(r#"<table class="split"><tr><th>outcome</th><th>jobs</th><th>hosts alike</th></tr>"#);
                for i in 0..split.len() {
                    let _ = write!(
                        body,
                        "<tr><td>{}</td><td>{}</td><td>{:.0}%</td></tr>",
                        escape(outcome[i].as_deref().unwrap_or("")),
                        jobs[i].unwrap_or(0.0),
                        100.0 * share[i].unwrap_or(0.0)
                    );
                }
                body.push_str("</table>");
            }
            Ok(body)
        },
    )
}

/// `kahuna eval`'s TP/FP tables as charts, one per diagnosis.
async fn evaluation(cx: &Session<'_>, path: &std::path::Path) -> Result<Section> {
    let csv = path.to_str().with_context(|| format!("{}: not a UTF-8 path", path.display()))?;
    cx.ctx
        .register_csv("eval", csv, datafusion::prelude::CsvReadOptions::new())
        .await
        .with_context(|| format!("cannot read {} as kahuna eval's CSV", path.display()))?;
    let (rows, sql, _) =
        cx.run("eval", &[]).await.with_context(|| format!("{}: not kahuna eval's CSV", path.display()))?;
    let (query, setting, fault) = (rows.text("query")?, rows.text("setting")?, rows.text("fault")?);
    let (tp, fp, alarm) = (rows.num("tp")?, rows.num("fp")?, rows.num("false_alarm")?);
    /// One diagnosis' bars: per setting, the culprits found and the healthy hosts indicted.
    #[derive(Default)]
    struct Scores {
        settings: Vec<String>,
        found: Vec<f64>,
        wrong: Vec<f64>,
    }
    let mut by_query: BTreeMap<&str, Scores> = BTreeMap::new();
    for i in 0..rows.len() {
        let (Some(q), Some(s), Some(f)) = (&query[i], &setting[i], &fault[i]) else { continue };
        let scores = by_query.entry(q).or_default();
        scores.settings.push(s.clone());
        // A fault-free run has no culprit: its bar is the false-alarm rate.
        scores.found.push(if f == "none" { 0.0 } else { tp[i].unwrap_or(0.0) });
        scores.wrong.push(if f == "none" { alarm[i].unwrap_or(0.0) } else { fp[i].unwrap_or(0.0) });
    }
    let mut section = Section { id: "eval".into(), title: "Evaluation".into(), figures: Vec::new() };
    for (query, Scores { settings, found, wrong }) in by_query {
        let mut figure = Figure::new(
            &format!("{query}: true and false positives"),
            "Per fault, workload and cluster size: the share of faulty runs whose culprit it indicted (TP, green) and of healthy hosts it indicted (FP, red); for fault-free runs (none), the false-alarm rate.",
        );
        figure.body = svg::paired_bars(&settings, ("tp", &found), ("fp", &wrong), "rate");
        figure.sql.push(sql.clone());
        section.figures.push(figure);
    }
    if section.figures.is_empty() {
        bail!("{} holds no scores", path.display());
    }
    Ok(section)
}

impl Report {
    fn window(&self) -> String {
        let at = |t: Option<DateTime<Utc>>| t.map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string());
        match (at(self.from), at(self.to)) {
            (None, None) => "all history".into(),
            (from, to) => {
                format!("{} to {}", from.unwrap_or_else(|| "the start".into()), to.unwrap_or_else(|| "the end".into()))
            }
        }
    }

    /// The page: self-contained, no request to anywhere when it opens.
    pub fn html(&self) -> String {
        let mut page = String::with_capacity(256 << 10);
        let title = match self.cluster.as_str() {
            "" => "Kahuna report: kahuna eval's scores".to_string(),
            cluster => format!("Kahuna report: cluster {cluster}, {}", self.window()),
        };
        let _ = write!(
            page,
            r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{0}</title><script>{ERRORS}</script><style>{STYLE}</style></head><body><header><h1>{0}</h1><p>{1}</p>"#,
            escape(&title),
            escape(&self.stats)
        );
        for note in &self.notes {
            let _ = write!(page, r#"<p class="note">{}</p>"#, escape(note));
        }
        page.push_str("<nav>");
        for section in &self.sections {
            let _ = write!(page, r##"<a href="#{}">{}</a>"##, escape(&section.id), escape(&section.title));
        }
        page.push_str("</nav></header>");
        for section in &self.sections {
            let _ = write!(page, r#"<section id="{}"><h2>{}</h2>"#, escape(&section.id), escape(&section.title));
            for figure in &section.figures {
                let _ = write!(
                    page,
                    r#"<figure><h3>{}</h3><p class="caption">{}</p>{}"#,
                    escape(&figure.title),
                    escape(&figure.caption),
                    figure.body
                );
                for (name, sql) in &figure.sql {
                    let _ = write!(
                        page,
                        "<details><summary>SQL: {}</summary><pre>{}</pre></details>",
                        escape(name),
                        escape(sql)
                    );
                }
                page.push_str("</figure>");
            }
            page.push_str("</section>");
        }
        let _ = write!(page, "<script>{ZOOM}</script></body></html>");
        page
    }

    /// Every figure's SQL as bound, for `kahuna sql -f` or an edit of one.
    pub fn sql(&self) -> String {
        let mut out = String::new();
        for section in &self.sections {
            for figure in &section.figures {
                for (name, sql) in &figure.sql {
                    let _ = writeln!(
                        out,
                        "-- {}: {} ({name})\n{};\n",
                        section.title,
                        figure.title,
                        sql.trim_end().trim_end_matches(';')
                    );
                }
            }
        }
        out
    }
}
