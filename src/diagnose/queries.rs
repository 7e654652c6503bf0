//! Saved diagnoses: the `.sql` files of `queries/`, their parameter headers, and the binding of
//! parameter values into the SQL text.
//!
//! A query file is plain SQL that an operator can read, copy and edit. Its header comment
//! declares what the runner needs to know, one directive per line:
//!
//! ```sql
//! -- @param threshold number = 0.35   distance above which two hosts differ
//! -- @param from timestamp = null     start of the window (null: the whole history)
//! -- @output verdict                  rows go to the `diagnoses` table
//! -- @tune threshold = 0.2, 0.3, 0.4  grid `kahuna eval` picks the threshold from
//! ```
//!
//! A grid ending `; not monotone` (`@tune threshold = 0.2, 0.3; not monotone`) says a stricter
//! value can indict more: a calibration then never moves it to hold the queries together.
//!
//! The body names a parameter as `$threshold`. Values are checked against the declared type and
//! rendered as SQL literals (strings quoted, timestamps as `TIMESTAMP '…'`), so a value can never
//! change the statement's shape, and the peer functions, which want literal arguments, get them.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use datafusion::sql::resolve::resolve_table_references;
use indexmap::IndexMap;

/// The queries shipped with Kahuna, used when the queries folder does not hold one by that name.
pub const BUILT_IN: [(&str, &str); 10] = [
    ("kahuna_wb", include_str!("../../queries/kahuna_wb.sql")),
    ("salsa_fingerpoint", include_str!("../../queries/salsa_fingerpoint.sql")),
    ("ganesha_train", include_str!("../../queries/ganesha_train.sql")),
    ("ganesha_bb", include_str!("../../queries/ganesha_bb.sql")),
    ("fetch_failures", include_str!("../../queries/fetch_failures.sql")),
    ("hung_tasks", include_str!("../../queries/hung_tasks.sql")),
    ("peer_correlation", include_str!("../../queries/peer_correlation.sql")),
    ("combined", include_str!("../../queries/combined.sql")),
    ("controlflow", include_str!("../../queries/controlflow.sql")),
    ("dataflow", include_str!("../../queries/dataflow.sql")),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    Number,
    Integer,
    Text,
    Timestamp,
    Date,
    /// A length of time, `90 seconds` or `1 day`: for frames and `date_bin`.
    Interval,
}

impl ParamType {
    fn parse(word: &str) -> Option<ParamType> {
        Some(match word {
            "number" => ParamType::Number,
            "integer" => ParamType::Integer,
            "text" => ParamType::Text,
            "timestamp" => ParamType::Timestamp,
            "date" => ParamType::Date,
            "interval" => ParamType::Interval,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            ParamType::Number => "number",
            ParamType::Integer => "integer",
            ParamType::Text => "text",
            ParamType::Timestamp => "timestamp",
            ParamType::Date => "date",
            ParamType::Interval => "interval",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub kind: ParamType,
    /// The default as written in the header (`null` for none).
    pub default: String,
    pub doc: String,
    /// Line of the declaration in its file, for messages.
    pub line: usize,
}

/// Where the rows of a query's last statement go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A verdict per host (and job, and state or metric): rows for the `diagnoses` table.
    Verdict,
    /// A table of its own, one partition per cluster and run date, replaced by a rerun.
    Table(String),
}

/// The threshold `kahuna eval` tunes, and the values it tries, most sensitive first.
#[derive(Clone, Debug, PartialEq)]
pub struct Tune {
    pub param: String,
    pub grid: Vec<String>,
    /// Whether a stricter value indicts no host a looser one does not (`; not monotone` if not).
    pub monotone: bool,
}

#[derive(Clone, Debug)]
pub struct Query {
    pub name: String,
    /// The file read, or `<built-in>` for a shipped query.
    pub origin: String,
    pub text: String,
    /// The first line of the header, without its `--`.
    pub title: String,
    pub params: Vec<Param>,
    pub output: Output,
    pub tune: Option<Tune>,
}

/// A query with its parameter values bound: SQL ready to run.
#[derive(Clone, Debug)]
pub struct Bound {
    pub sql: String,
    /// Every parameter's value as text (`null` for none), in declaration order.
    pub values: IndexMap<String, String>,
}

impl Query {
    /// The query `spec` names: a file path, or a name looked up as `<dir>/<name>.sql` and then
    /// among the built-in queries.
    pub fn resolve(spec: &str, dir: &Path) -> Result<Query> {
        let as_path = PathBuf::from(spec);
        if spec.ends_with(".sql") || spec.contains(std::path::MAIN_SEPARATOR) {
            return Query::read(&as_path);
        }
        let in_dir = dir.join(format!("{spec}.sql"));
        if in_dir.is_file() {
            return Query::read(&in_dir);
        }
        match BUILT_IN.iter().find(|(name, _)| *name == spec) {
            Some((name, text)) => Query::parse(name, "<built-in>", text),
            None => bail!(
                "no query named {spec}: neither {} nor a built-in query ({})",
                in_dir.display(),
                BUILT_IN.map(|(n, _)| n).join(", ")
            ),
        }
    }

    pub fn read(path: &Path) -> Result<Query> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read query {}", path.display()))?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "query".into());
        Query::parse(&name, &path.display().to_string(), &text)
    }

    /// Reads the header directives. Errors name the file and line.
    pub fn parse(name: &str, origin: &str, text: &str) -> Result<Query> {
        let mut params: Vec<Param> = Vec::new();
        let mut output = Output::Verdict;
        let mut tune = None;
        let mut title = String::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let Some(comment) = line.trim_start().strip_prefix("--") else { continue };
            let comment = comment.trim();
            if title.is_empty() && !comment.is_empty() && !comment.starts_with('@') {
                title = comment.to_string();
            }
            let Some(directive) = comment.strip_prefix('@') else { continue };
            let at = |e: anyhow::Error| e.context(format!("{origin}:{number}"));
            let (word, rest) = directive.split_once(char::is_whitespace).unwrap_or((directive, ""));
            match word {
                "param" => {
                    let param = parse_param(rest, number).map_err(at)?;
                    if params.iter().any(|p| p.name == param.name) {
                        return Err(at(anyhow!("parameter {} is declared twice", param.name)));
                    }
                    params.push(param);
                }
                "output" => {
                    output = match rest.split_whitespace().collect::<Vec<_>>().as_slice() {
                        ["verdict"] => Output::Verdict,
                        ["table", table] if is_identifier(table) => Output::Table(table.to_string()),
                        _ => return Err(at(anyhow!("@output takes `verdict` or `table NAME`, got `{rest}`"))),
                    }
                }
                "tune" => {
                    let (param, grid) = rest
                        .split_once('=')
                        .ok_or_else(|| at(anyhow!("@tune takes `PARAM = v1, v2, …`, got `{rest}`")))?;
                    let (grid, monotone) = match grid.split_once(';').map(|(grid, rest)| (grid, rest.trim())) {
                        Some((grid, "not monotone")) => (grid, false),
                        Some((_, other)) => {
                            return Err(at(anyhow!("@tune: `;` is followed by `not monotone`, got `{other}`")));
                        }
                        None => (grid, true),
                    };
                    let grid: Vec<String> =
                        grid.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
                    tune = Some((Tune { param: param.trim().to_string(), grid, monotone }, number));
                }
                _ => return Err(at(anyhow!("unknown directive @{word} (expected @param, @output or @tune)"))),
            }
        }
        let query = Query {
            name: name.to_string(),
            origin: origin.to_string(),
            text: text.to_string(),
            title,
            params,
            output,
            tune: None,
        };
        // The grid is checked like any value, so a bad grid fails when the file is read.
        let tune = match tune {
            Some((tune, number)) => {
                let param = query
                    .param(&tune.param)
                    .ok_or_else(|| anyhow!("{origin}:{number}: @tune names {}, which is not a @param", tune.param))?;
                if tune.grid.is_empty() {
                    bail!("{origin}:{number}: @tune {} lists no value", tune.param);
                }
                for value in &tune.grid {
                    render(param, value).with_context(|| format!("{origin}:{number}: @tune {}", tune.param))?;
                }
                Some(tune)
            }
            None => None,
        };
        // Defaults must be valid values of their type.
        for param in &query.params {
            render(param, &param.default)
                .with_context(|| format!("{origin}:{}: default of parameter {}", param.line, param.name))?;
        }
        Ok(Query { tune, ..query })
    }

    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// A content hash of the file: the run ledger tells which version of a query produced a run.
    pub fn hash(&self) -> String {
        format!("{:016x}", twox_hash::XxHash3_64::oneshot(self.text.as_bytes()))
    }

    /// The SQL with `$name` replaced by each value (given, else the default). A value for an
    /// undeclared parameter, an ill-typed value, or an undeclared `$name` in the body is an error
    /// naming it.
    pub fn bind(&self, given: &[(String, String)]) -> Result<Bound> {
        for (name, _) in given {
            if self.param(name).is_none() {
                let known: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
                bail!("{}: no parameter {name} (it has: {})", self.origin, known.join(", "));
            }
        }
        let mut values = IndexMap::new();
        let mut literals = IndexMap::new();
        for param in &self.params {
            // The last value given wins, as with repeated command-line flags.
            let value = given.iter().rev().find(|(n, _)| *n == param.name).map_or(param.default.as_str(), |(_, v)| v);
            let literal = render(param, value).with_context(|| format!("{}: parameter {}", self.origin, param.name))?;
            values.insert(param.name.clone(), value.to_string());
            literals.insert(param.name.as_str(), literal);
        }
        let sql = substitute(&self.text, &literals).with_context(|| self.origin.clone())?;
        Ok(Bound { sql, values })
    }
}

impl Bound {
    /// The tables its statements read, whatever the statement (CTE names are not tables; the
    /// tables an earlier statement creates are), lowercase as the planner resolves them.
    pub fn tables(&self) -> Result<BTreeSet<String>> {
        let mut tables = BTreeSet::new();
        for statement in crate::catalog::parse(&self.sql)? {
            let (references, _ctes) = resolve_table_references(&statement, true)?;
            tables.extend(references.iter().map(|r| r.table().to_string()));
        }
        Ok(tables)
    }
}

fn is_identifier(word: &str) -> bool {
    let mut chars = word.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `NAME TYPE = DEFAULT [description]`, the default a single word or a quoted string.
fn parse_param(rest: &str, line: usize) -> Result<Param> {
    let usage = "@param takes `NAME TYPE = DEFAULT [description]`";
    let (head, tail) = rest.split_once('=').ok_or_else(|| anyhow!("{usage}, got `{rest}`"))?;
    let words: Vec<&str> = head.split_whitespace().collect();
    let [name, kind] = words.as_slice() else { bail!("{usage}, got `{rest}`") };
    if !is_identifier(name) {
        bail!("parameter name {name} is not an identifier");
    }
    let kind = ParamType::parse(kind).ok_or_else(|| {
        anyhow!("parameter {name}: unknown type {kind} (number, integer, text, timestamp, date, interval)")
    })?;
    let tail = tail.trim_start();
    let (default, doc) = if let Some(quoted) = tail.strip_prefix('\'') {
        let end = quoted.find('\'').ok_or_else(|| anyhow!("parameter {name}: unterminated quoted default"))?;
        (quoted[..end].to_string(), quoted[end + 1..].trim())
    } else {
        let (word, doc) = tail.split_once(char::is_whitespace).unwrap_or((tail, ""));
        (word.to_string(), doc.trim())
    };
    if default.is_empty() {
        bail!("parameter {name}: no default (write `null` for none)");
    }
    Ok(Param { name: name.to_string(), kind, default, doc: doc.to_string(), line })
}

/// The SQL literal of `value` for `param`'s type; `null` is a typed NULL.
pub fn render(param: &Param, value: &str) -> Result<String> {
    let value = value.trim();
    let is_null = value.eq_ignore_ascii_case("null");
    let expect = |what: &str| anyhow!("expected {what}, got `{value}`");
    Ok(match param.kind {
        ParamType::Number if is_null => "CAST(NULL AS DOUBLE)".into(),
        ParamType::Number => {
            let parsed: f64 = value.parse().map_err(|_| expect("a number"))?;
            if !parsed.is_finite() {
                return Err(expect("a finite number"));
            }
            // Written back with a decimal point, so `1` stays a DOUBLE and not an integer.
            format!("{parsed:?}")
        }
        ParamType::Integer if is_null => "CAST(NULL AS BIGINT)".into(),
        ParamType::Integer => value.parse::<i64>().map_err(|_| expect("an integer"))?.to_string(),
        ParamType::Text if is_null => "CAST(NULL AS VARCHAR)".into(),
        ParamType::Text => format!("'{}'", value.replace('\'', "''")),
        ParamType::Timestamp if is_null => "CAST(NULL AS TIMESTAMP)".into(),
        ParamType::Timestamp => {
            let ts = parse_timestamp(value).ok_or_else(|| expect("a UTC time such as 2008-08-23T17:00:00Z"))?;
            format!("TIMESTAMP '{}'", ts.format("%Y-%m-%dT%H:%M:%S%.6f"))
        }
        ParamType::Date if is_null => "CAST(NULL AS DATE)".into(),
        ParamType::Date => {
            let date = NaiveDate::parse_from_str(value, "%Y-%m-%d").map_err(|_| expect("a date such as 2008-08-23"))?;
            format!("DATE '{date}'")
        }
        ParamType::Interval if is_null => "CAST(NULL AS INTERVAL)".into(),
        ParamType::Interval => {
            let units = ["second", "minute", "hour", "day"];
            let valid = match value.split_whitespace().collect::<Vec<_>>().as_slice() {
                [amount, unit] => {
                    amount.parse::<u64>().is_ok() && units.contains(&unit.strip_suffix('s').unwrap_or(unit))
                }
                _ => false,
            };
            if !valid {
                return Err(expect("a whole number of seconds, minutes, hours or days, such as `90 seconds`"));
            }
            format!("INTERVAL '{value}'")
        }
    })
}

/// RFC 3339, or `YYYY-MM-DD[ HH:MM[:SS[.f]]]` taken as UTC.
pub fn parse_timestamp(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(ts) = DateTime::parse_from_rfc3339(text) {
        return Some(ts.with_timezone(&Utc));
    }
    for layout in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M"] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, layout) {
            return Some(naive.and_utc());
        }
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)).map(|n| n.and_utc())
}

/// Replaces `$name` outside string literals, quoted identifiers and comments.
fn substitute(sql: &str, literals: &IndexMap<&str, String>) -> Result<String> {
    #[derive(PartialEq)]
    enum In {
        Code,
        Text,
        Ident,
        LineComment,
        BlockComment,
    }
    let mut out = String::with_capacity(sql.len());
    let mut state = In::Code;
    let mut line = 1;
    let mut chars = sql.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c == '\n' {
            line += 1;
        }
        let next = chars.peek().map(|&(_, n)| n);
        match state {
            In::Code => match c {
                '\'' => state = In::Text,
                '"' => state = In::Ident,
                '-' if next == Some('-') => state = In::LineComment,
                '/' if next == Some('*') => state = In::BlockComment,
                '$' if next.is_some_and(|n| n.is_ascii_alphabetic() || n == '_') => {
                    let start = at + 1;
                    let mut end = start;
                    while let Some(&(i, n)) = chars.peek() {
                        if !(n.is_ascii_alphanumeric() || n == '_') {
                            break;
                        }
                        end = i + n.len_utf8();
                        chars.next();
                    }
                    let name = &sql[start..end];
                    let literal = literals.get(name).ok_or_else(|| {
                        let known: Vec<&str> = literals.keys().copied().collect();
                        anyhow!("line {line}: ${name} is not a declared @param (declared: {})", known.join(", "))
                    })?;
                    let _ = write!(out, "{literal}");
                    continue;
                }
                _ => {}
            },
            In::Text if c == '\'' => state = In::Code,
            In::Ident if c == '"' => state = In::Code,
            In::LineComment if c == '\n' => state = In::Code,
            In::BlockComment if c == '*' && next == Some('/') => {
                out.push(c);
                chars.next();
                out.push('/');
                state = In::Code;
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    Ok(out)
}

/// `k=v` as given to `--param`.
pub fn parse_assignment(text: &str) -> Result<(String, String)> {
    let (name, value) = text.split_once('=').ok_or_else(|| anyhow!("--param {text}: expected NAME=VALUE"))?;
    Ok((name.trim().to_string(), value.trim().to_string()))
}

/// The header as an operator reads it: title, then each parameter with its default.
pub fn describe(query: &Query) -> String {
    let mut out = format!("{} ({}): {}\n", query.name, query.origin, query.title);
    for p in &query.params {
        let _ = writeln!(out, "  ${:<16} {:<9} = {:<12} {}", p.name, p.kind.name(), p.default, p.doc);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
-- Finds the odd host out.
-- @param threshold number = 0.35   distance above which hosts differ
-- @param cluster text = null       cluster (all when null)
-- @param from timestamp = '2008-08-23 17:00'  start
-- @output verdict
-- @tune threshold = 0.2, 0.3
SELECT '$threshold' AS kept, \"$x\" AS also_kept, $threshold AS t, -- $nothing here
       $cluster AS c, $from AS f /* $nor here */ FROM states WHERE x = $threshold
";

    fn given(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn header_declares_parameters_output_and_tuning_grid() {
        let q = Query::parse("odd", "odd.sql", SAMPLE).unwrap();
        assert_eq!(q.title, "Finds the odd host out.");
        assert_eq!(q.params.len(), 3);
        assert_eq!(
            q.params[0],
            Param {
                name: "threshold".into(),
                kind: ParamType::Number,
                default: "0.35".into(),
                doc: "distance above which hosts differ".into(),
                line: 2
            }
        );
        assert_eq!(q.params[2].default, "2008-08-23 17:00");
        assert_eq!(q.output, Output::Verdict);
        assert_eq!(
            q.tune,
            Some(Tune { param: "threshold".into(), grid: vec!["0.2".into(), "0.3".into()], monotone: true })
        );
        let text = SAMPLE.replace("0.2, 0.3", "0.2, 0.3 ; not monotone");
        let q = Query::parse("odd", "odd.sql", &text).unwrap();
        assert_eq!(q.tune.map(|t| (t.grid, t.monotone)), Some((vec!["0.2".into(), "0.3".into()], false)));
    }

    #[test]
    fn binding_substitutes_literals_outside_strings_and_comments() {
        let q = Query::parse("odd", "odd.sql", SAMPLE).unwrap();
        let bound = q.bind(&given(&[("threshold", "0.5"), ("cluster", "o'brien")])).unwrap();
        let body = bound.sql.lines().skip(6).collect::<Vec<_>>().join("\n");
        assert_eq!(
            body,
            "SELECT '$threshold' AS kept, \"$x\" AS also_kept, 0.5 AS t, -- $nothing here\n       \
             'o''brien' AS c, TIMESTAMP '2008-08-23T17:00:00.000000' AS f /* $nor here */ FROM states WHERE x = 0.5"
        );
        assert_eq!(bound.values["threshold"], "0.5");
        assert_eq!(bound.values["from"], "2008-08-23 17:00");
        // Defaults, typed NULLs, and integers written as doubles.
        let defaults = q.bind(&given(&[("threshold", "1")])).unwrap();
        assert!(
            defaults.sql.contains("1.0 AS t") && defaults.sql.contains("CAST(NULL AS VARCHAR) AS c"),
            "{}",
            defaults.sql
        );
    }

    #[test]
    fn errors_name_the_file_line_and_parameter() {
        let q = Query::parse("odd", "odd.sql", SAMPLE).unwrap();
        let err = format!("{:#}", q.bind(&given(&[("treshold", "0.5")])).unwrap_err());
        assert!(err.contains("odd.sql: no parameter treshold (it has: threshold, cluster, from)"), "{err}");
        let err = format!("{:#}", q.bind(&given(&[("threshold", "0.5; DROP")])).unwrap_err());
        assert!(err.contains("parameter threshold: expected a number, got `0.5; DROP`"), "{err}");
        let err = format!("{:#}", q.bind(&given(&[("from", "yesterday")])).unwrap_err());
        assert!(err.contains("parameter from: expected a UTC time"), "{err}");

        let undeclared = Query::parse("u", "u.sql", "-- @param a integer = 1\nSELECT $a,\n $b").unwrap();
        let err = format!("{:#}", undeclared.bind(&[]).unwrap_err());
        assert!(err.contains("u.sql: line 3: $b is not a declared @param (declared: a)"), "{err}");

        for (text, expected) in [
            ("-- @param a float = 1\n", "u.sql:1: parameter a: unknown type float"),
            ("-- @param a integer = x\n", "u.sql:1: default of parameter a: expected an integer, got `x`"),
            ("-- @param a integer\n", "u.sql:1: @param takes `NAME TYPE = DEFAULT [description]`"),
            ("\n-- @output file x\n", "u.sql:2: @output takes `verdict` or `table NAME`"),
            ("-- @tune b = 1\n", "u.sql:1: @tune names b, which is not a @param"),
            ("-- @tune b = 1; monotone\n", "u.sql:1: @tune: `;` is followed by `not monotone`, got `monotone`"),
            ("-- @params a\n", "u.sql:1: unknown directive @params"),
        ] {
            let err = format!("{:#}", Query::parse("u", "u.sql", text).unwrap_err());
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn names_resolve_to_files_then_built_ins() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mine.sql"), "-- Mine.\n-- @output table edges\nSELECT 1").unwrap();
        let mine = Query::resolve("mine", dir.path()).unwrap();
        assert_eq!(mine.output, Output::Table("edges".into()));
        let built_in = Query::resolve("kahuna_wb", dir.path()).unwrap();
        assert_eq!(built_in.origin, "<built-in>");
        let err = format!("{:#}", Query::resolve("nosuch", dir.path()).unwrap_err());
        assert!(err.contains("no query named nosuch"), "{err}");
        // Every shipped query's header reads, and its defaults bind.
        for (name, text) in BUILT_IN {
            let query = Query::parse(name, "<built-in>", text).unwrap();
            query.bind(&[]).unwrap();
            assert!(!query.title.is_empty(), "{name}");
        }
    }
}
