//! `kahuna.toml` and the jobs it describes: each job's work, schedule and catch-up policy, and
//! the retry policy of the whole configuration.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use chrono_tz::Tz;

use super::plan::{CatchUp, Schedule};
use crate::diagnose::queries::{Output, Query};
use crate::diagnose::results;
use crate::ingest::discover::{Hints, layout_of, parse_daemon_flag};

/// `kahuna.toml`, as written by an operator.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Folder of the query files (names not found there fall back to the built-in queries).
    #[serde(default = "default_queries")]
    pub queries: PathBuf,
    /// IANA zone of cron expressions and run dates, unless a job says otherwise.
    #[serde(default = "default_zone")]
    pub zone: String,
    #[serde(default = "default_catch_up")]
    pub catch_up: CatchUp,
    /// Retries after a failed attempt.
    #[serde(default = "default_retries")]
    pub retries: u32,
    #[serde(default = "default_backoff")]
    pub backoff_seconds: u64,
    #[serde(default = "default_max_backoff")]
    pub max_backoff_seconds: u64,
    /// Queries due together that run side by side.
    #[serde(default = "default_parallel_jobs")]
    pub parallel_jobs: usize,
    #[serde(default)]
    pub jobs: Vec<JobConfig>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// Name in the ledger; the query's name by default (`ingest` for an ingest).
    pub name: Option<String>,
    /// The query to run (a name in the queries folder, or a path). Absent for an ingest job.
    pub query: Option<String>,
    /// Log folders or files to ingest: makes this an ingest job.
    #[serde(default)]
    pub ingest: Vec<PathBuf>,
    /// The page `kahuna report` writes of the run date's window: makes this a report job, run
    /// after the jobs due with it. `{date}` in it becomes the run date.
    pub report: Option<String>,
    /// An ingest's `--tz`: the zone the logs' timestamps were written in (UTC by default), not
    /// the zone of the cron expression.
    pub tz: Option<String>,
    /// An ingest's `--host`, `--daemon`, `--iface` and `--layout`, for files whose names (or
    /// lines) do not say.
    pub host: Option<String>,
    pub daemon: Option<String>,
    pub iface: Option<String>,
    pub layout: Option<String>,
    pub cron: String,
    pub cluster: Option<String>,
    pub zone: Option<String>,
    pub catch_up: Option<CatchUp>,
    /// The run date is the occurrence's local date minus this many days.
    #[serde(default = "default_days_back")]
    pub days_back: u32,
    #[serde(default)]
    pub params: HashMap<String, toml::Value>,
}

fn default_queries() -> PathBuf {
    PathBuf::from("queries")
}
fn default_zone() -> String {
    "UTC".into()
}
fn default_catch_up() -> CatchUp {
    CatchUp::Latest
}
fn default_retries() -> u32 {
    2
}
fn default_backoff() -> u64 {
    60
}
fn default_max_backoff() -> u64 {
    3600
}

/// Two: one query leaves a core idle in its single-threaded steps (a final sort, a merge of
/// partial aggregates, a commit), and a second one fills it (see the nightly bench).
fn default_parallel_jobs() -> usize {
    2
}

fn default_days_back() -> u32 {
    1
}

/// What a job does.
#[derive(Clone, Debug)]
pub enum Work {
    Query {
        query: Query,
        params: Vec<(String, String)>,
    },
    Ingest {
        paths: Vec<PathBuf>,
        zone: Option<Tz>,
        hints: Hints,
    },
    /// The page to write (`{date}` is the run date) and the folder of the figures' queries.
    Report {
        out: String,
        queries: PathBuf,
    },
}

#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    pub work: Work,
    pub schedule: Schedule,
    pub cluster: Option<String>,
    pub catch_up: CatchUp,
    pub days_back: u32,
}

impl Job {
    pub(super) fn hash(&self) -> String {
        match &self.work {
            Work::Query { query, .. } => query.hash(),
            Work::Ingest { .. } => "ingest".into(),
            Work::Report { .. } => "report".into(),
        }
    }

    /// Whether this job must run before `later` when both are due at one instant: an ingest
    /// writes what every query reads, and a query writes its output (`diagnoses` for a verdict),
    /// which a query such as `combined` reads; a report draws from all of it.
    pub(super) fn feeds(&self, later: &Job) -> Result<bool> {
        let Work::Query { query: reader, params } = &later.work else {
            return Ok(matches!(later.work, Work::Report { .. }) && !matches!(self.work, Work::Report { .. }));
        };
        let output = match &self.work {
            Work::Ingest { .. } => return Ok(true),
            Work::Report { .. } => return Ok(false),
            Work::Query { query, .. } => match &query.output {
                Output::Verdict => results::DIAGNOSES,
                Output::Table(table) => table.as_str(),
            },
        };
        Ok(reader.bind(params)?.tables()?.contains(output))
    }
}

pub struct Policy {
    pub retries: u32,
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// Queries due together that run side by side (at least 1).
    pub parallel: usize,
}

/// The policy of a configuration that says nothing.
impl Default for Policy {
    fn default() -> Policy {
        Policy {
            retries: default_retries(),
            backoff: Duration::from_secs(default_backoff()),
            max_backoff: Duration::from_secs(default_max_backoff()),
            parallel: default_parallel_jobs(),
        }
    }
}

pub fn parse_zone(name: &str) -> Result<Tz> {
    name.parse().map_err(|e| anyhow!("zone {name}: {e}"))
}

impl Config {
    pub fn read(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
    }

    pub fn policy(&self) -> Policy {
        Policy {
            retries: self.retries,
            backoff: Duration::from_secs(self.backoff_seconds),
            max_backoff: Duration::from_secs(self.max_backoff_seconds),
            parallel: self.parallel_jobs.max(1),
        }
    }

    /// The jobs, with every query read and every expression, zone and parameter checked now
    /// rather than at 2 a.m. Relative paths are taken from `base` (the config file's folder).
    pub fn jobs(&self, base: &Path) -> Result<Vec<Job>> {
        let mut jobs: Vec<Job> = Vec::new();
        for (index, job) in self.jobs.iter().enumerate() {
            let at = || format!("jobs[{index}]{}", job.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default());
            let zone = parse_zone(job.zone.as_deref().unwrap_or(&self.zone)).with_context(at)?;
            let schedule = Schedule::parse(&job.cron, zone).with_context(at)?;
            let ingest_flags = [
                ("tz", &job.tz),
                ("host", &job.host),
                ("daemon", &job.daemon),
                ("iface", &job.iface),
                ("layout", &job.layout),
            ];
            if job.ingest.is_empty()
                && let Some((flag, _)) = ingest_flags.iter().find(|(_, value)| value.is_some())
            {
                bail!("{}: `{flag}` is for ingest jobs; a query or report job has none", at());
            }
            let (name, work) = match (&job.query, job.ingest.is_empty(), &job.report) {
                (None, true, Some(_)) if !job.params.is_empty() => {
                    bail!("{}: `params` are a query's; a report job has none", at())
                }
                (None, true, Some(out)) => {
                    let out = base.join(out).to_string_lossy().into_owned();
                    let work = Work::Report { out, queries: base.join(&self.queries) };
                    (job.name.clone().unwrap_or_else(|| "report".into()), work)
                }
                (Some(spec), true, None) => {
                    let query = Query::resolve(spec, &base.join(&self.queries)).with_context(at)?;
                    let params: Vec<(String, String)> =
                        job.params.iter().map(|(k, v)| (k.clone(), toml_text(v))).collect();
                    // Bind once now, so a misspelt parameter fails at start.
                    query.bind(&params).with_context(at)?;
                    (job.name.clone().unwrap_or_else(|| query.name.clone()), Work::Query { query, params })
                }
                (None, false, None) => {
                    let paths = job.ingest.iter().map(|p| base.join(p)).collect();
                    let zone = match job.tz.as_deref() {
                        None | Some("UTC") => None,
                        Some(name) => Some(parse_zone(name).with_context(at)?),
                    };
                    let daemon = job.daemon.as_deref().map(parse_daemon_flag).transpose().with_context(at)?;
                    let layout = job
                        .layout
                        .as_deref()
                        .map(layout_of)
                        .transpose()
                        .map_err(anyhow::Error::msg)
                        .with_context(at)?;
                    let hints = Hints { host: job.host.clone(), daemon, iface: job.iface.clone(), layout };
                    (job.name.clone().unwrap_or_else(|| "ingest".into()), Work::Ingest { paths, zone, hints })
                }
                _ => bail!("{}: a job has one of `query`, `ingest` and `report`", at()),
            };
            if jobs.iter().any(|j| j.name == name) {
                bail!("{}: two jobs are named {name}; give one a `name`", at());
            }
            jobs.push(Job {
                name,
                work,
                schedule,
                cluster: job.cluster.clone(),
                catch_up: job.catch_up.unwrap_or(self.catch_up),
                days_back: job.days_back,
            });
        }
        Ok(jobs)
    }
}

fn toml_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_job_and_field() {
        let base = Path::new(".");
        let read = |text: &str| toml::from_str::<Config>(text).map_err(anyhow::Error::from).and_then(|c| c.jobs(base));
        let jobs = read("zone = 'Europe/Paris'\n[[jobs]]\nquery = 'kahuna_wb'\ncron = '0 30 2 * * *'\nparams = { threshold = 0.45 }\n")
            .unwrap();
        assert_eq!(jobs[0].name, "kahuna_wb");
        assert_eq!(jobs[0].schedule.zone, chrono_tz::Europe::Paris);
        assert_eq!(jobs[0].catch_up, CatchUp::Latest);
        let Work::Query { params, .. } = &jobs[0].work else { panic!("a query job") };
        assert_eq!(params, &vec![("threshold".to_string(), "0.45".to_string())]);

        for (text, expected) in [
            ("[[jobs]]\nquery = 'kahuna_wb'\ncron = '0 2 * *'\n", "jobs[0]: cron expression `0 2 * *`"),
            ("[[jobs]]\nquery = 'kahuna_wb'\ncron = '0 2 * * *'\nzone = 'Mars/Base'\n", "jobs[0]: zone Mars/Base"),
            (
                "[[jobs]]\nname = 'x'\nquery = 'kahuna_wb'\ncron = '0 2 * * *'\nparams = { treshold = 1 }\n",
                "jobs[0] (x)",
            ),
            ("[[jobs]]\ncron = '0 2 * * *'\n", "a job has one of `query`, `ingest` and `report`"),
            (
                "[[jobs]]\nquery = 'kahuna_wb'\nreport = 'r.html'\ncron = '0 2 * * *'\n",
                "a job has one of `query`, `ingest` and `report`",
            ),
            (
                "[[jobs]]\nreport = 'r.html'\ncron = '0 2 * * *'\nparams = { x = 1 }\n",
                "jobs[0]: `params` are a query's",
            ),
            (
                "[[jobs]]\nquery = 'kahuna_wb'\ncron = '0 2 * * *'\ntz = 'Asia/Tokyo'\n",
                "jobs[0]: `tz` is for ingest jobs",
            ),
            (
                "[[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\ndaemon = 'jobtrack'\n",
                "jobs[0]: --daemon jobtrack: not a daemon",
            ),
            ("[[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\ntz = 'Mars/Base'\n", "jobs[0]: zone Mars/Base"),
            (
                "[[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\nlayout = '%d %p %c: %m %q'\n",
                "jobs[0]: --layout \"%d %p %c: %m %q\": `%q` is not a conversion",
            ),
        ] {
            let err = format!("{:#}", read(text).unwrap_err());
            assert!(err.contains(expected), "{text}: {err}");
        }
        // An ingest of logs written in local time, by one host whose files are not named after it.
        let jobs = read("[[jobs]]\ningest = ['logs']\ncron = '0 2 * * *'\ntz = 'America/Los_Angeles'\nhost = 'r01n07'\ndaemon = 'datanode'\nlayout = '%d [%t] %-5p %c - %m%n'\n")
            .unwrap();
        let Work::Ingest { zone, hints, .. } = &jobs[0].work else { panic!("an ingest job") };
        assert_eq!(*zone, Some(chrono_tz::America::Los_Angeles));
        assert_eq!(
            (hints.host.as_deref(), hints.daemon),
            (Some("r01n07"), Some(crate::ingest::discover::Daemon::DataNode))
        );
        assert_eq!(hints.layout.map(|l| l.name()), Some("%d [%t] %-5p %c - %m%n"));
        let err = format!("{:#}", read("catch_up = 'sometimes'\n").unwrap_err());
        assert!(err.contains("sometimes"), "{err}");
    }
}
