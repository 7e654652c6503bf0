//! The README's function reference and `tests/slt/readme.slt` are generated from each registered
//! function's `Documentation`, so that the code is their single source: these tests fail when a
//! file differs from what the code gives, and `KAHUNA_BLESS=1 cargo test -p kahuna-udfs --test
//! function_reference` rewrites both.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use datafusion::logical_expr::Documentation;

const BEGIN: &str = "<!-- function reference: generated from each function's Documentation by \
                     tests/function_reference.rs (KAHUNA_BLESS=1 cargo test -p kahuna-udfs --test \
                     function_reference rewrites it) -->";
const END: &str = "<!-- end of function reference -->";
const REGENERATE: &str = "KAHUNA_BLESS=1 cargo test -p kahuna-udfs --test function_reference";
/// The README's prose lines are wrapped at this many characters, as the hand-written ones are.
const WIDTH: usize = 100;

/// One function's part of the reference.
struct Function {
    name: String,
    syntax: String,
    description: String,
    arguments: Vec<(String, String)>,
    example: String,
}

impl Function {
    fn new(name: &str, doc: Option<&Documentation>) -> Self {
        let doc = doc.unwrap_or_else(|| panic!("{name} has no documentation()"));
        assert!(
            doc.syntax_example.starts_with(&format!("{name}(")),
            "{name}: the syntax example `{}` should be the call, as the README's heading shows it",
            doc.syntax_example
        );
        Self {
            name: name.to_string(),
            syntax: doc.syntax_example.clone(),
            description: doc.description.clone(),
            arguments: doc.arguments.clone().unwrap_or_else(|| panic!("{name}'s documentation has no arguments")),
            example: doc.sql_example.clone().unwrap_or_else(|| panic!("{name}'s documentation has no SQL example")),
        }
    }
}

/// The functions of one kind, with the README's word for it and its heading.
struct Kind {
    name: &'static str,
    heading: &'static str,
    functions: Vec<Function>,
}

/// The registered functions in the order of `kahuna_udfs`' lists, which the README and the .slt
/// keep: an example may read a table that an earlier one made (gmm_fit's `profiles`).
fn kinds() -> [Kind; 3] {
    [
        Kind {
            name: "aggregate",
            heading: "Aggregate functions",
            functions: kahuna_udfs::aggregate_functions()
                .iter()
                .map(|f| Function::new(f.name(), f.documentation()))
                .collect(),
        },
        Kind {
            name: "scalar",
            heading: "Scalar functions",
            functions: kahuna_udfs::scalar_functions()
                .iter()
                .map(|f| Function::new(f.name(), f.documentation()))
                .collect(),
        },
        Kind {
            name: "window",
            heading: "Window functions",
            functions: kahuna_udfs::window_functions()
                .iter()
                .map(|f| Function::new(f.name(), f.documentation()))
                .collect(),
        },
    ]
}

/// The id GitHub gives a heading: lower case, spaces as hyphens, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether a line starting with `word` would open a Markdown block (a list item, a heading, a
/// quote, a rule, HTML, …) rather than continue the paragraph above it.
fn opens_block(word: &str) -> bool {
    let list_number =
        word.strip_suffix(['.', ')']).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    list_number
        || word.chars().all(|c| matches!(c, '-' | '+' | '*' | '=' | '_' | '#'))
        || word.starts_with(['>', '<', '|'])
        || word.starts_with("```")
        || word.starts_with("~~~")
}

/// `text` as lines of at most `WIDTH` characters (a longer word gets a line of its own), each but
/// the first starting with `indent`; a word that would open a Markdown block stays on the line
/// before.
fn wrap(text: &str, indent: &str) -> String {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if line.is_empty() {
            line.push_str(word);
        } else if line.chars().count() + 1 + word.chars().count() <= WIDTH || opens_block(word) {
            line.push(' ');
            line.push_str(word);
        } else {
            lines.push(format!("{indent}{word}"));
        }
    }
    lines.join("\n") + "\n"
}

/// The README's part between the markers: a table of the functions, then a section each.
fn reference(kinds: &[Kind]) -> String {
    let mut out = String::from("| function | kind |\n|---|---|\n");
    for kind in kinds {
        for f in &kind.functions {
            writeln!(out, "| [`{}`](#{}) | {} |", f.syntax, anchor(&f.syntax), kind.name).unwrap();
        }
    }
    for kind in kinds {
        write!(out, "\n### {}\n", kind.heading).unwrap();
        for f in &kind.functions {
            write!(out, "\n#### {}\n\n{}\n", f.syntax, wrap(&f.description, "")).unwrap();
            for (name, text) in &f.arguments {
                out.push_str(&wrap(&format!("- `{name}`: {text}"), "  "));
            }
            write!(out, "\n```sql\n{}\n```\n", f.example).unwrap();
        }
    }
    out
}

/// `readme` with the generated reference between its marker lines.
fn with_reference(readme: &str, reference: &str) -> String {
    let (before, rest) =
        readme.split_once(&format!("{BEGIN}\n")).unwrap_or_else(|| panic!("README.md has no line\n{BEGIN}"));
    let (_, after) = rest.split_once(&format!("{END}\n")).unwrap_or_else(|| panic!("README.md has no line\n{END}"));
    format!("{before}{BEGIN}\n\n{reference}\n{END}\n{after}")
}

/// A statement of an example and the result rows the README shows under it.
struct Statement {
    sql: String,
    rows: Vec<String>,
}

/// The statements of `function`'s example: each ends with a `;` at the end of a line, and the
/// `-- ` lines after it are its result rows.
fn statements(function: &str, example: &str) -> Vec<Statement> {
    let mut statements: Vec<Statement> = Vec::new();
    let mut sql = String::new();
    for line in example.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(row) = line.strip_prefix("-- ") {
            let statement = statements
                .last_mut()
                .filter(|_| sql.is_empty())
                .unwrap_or_else(|| panic!("{function}: result line `{line}` follows no statement ending in `;`"));
            statement.rows.push(result_row(row));
        } else {
            sql.push_str(line);
            if line.ends_with(';') {
                statements.push(Statement { sql: std::mem::take(&mut sql), rows: Vec::new() });
            } else {
                sql.push('\n');
            }
        }
    }
    assert!(sql.is_empty(), "{function}: the example's last statement does not end in `;`:\n{sql}");
    statements
}

/// A README result line as the .slt runner prints the row: without its note (from two or more
/// spaces and a `(` on), one space between columns.
fn result_row(line: &str) -> String {
    let values = line.find("  (").map_or(line, |note| &line[..note]);
    values.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The columns of a result row: its values separated by spaces outside `[…]` and `{…}`.
fn columns(row: &str) -> usize {
    let (mut depth, mut count, mut in_value) = (0, 0, false);
    for c in row.chars() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            _ => {}
        }
        if c == ' ' && depth == 0 {
            in_value = false;
        } else if !in_value {
            in_value = true;
            count += 1;
        }
    }
    count
}

/// `tests/slt/readme.slt`: every example once, each statement with the rows its example shows.
fn readme_slt(kinds: &[Kind]) -> String {
    // Functions sharing an example (`indict` and `peer_score`) run it once.
    let mut examples: Vec<(Vec<&str>, &str)> = Vec::new();
    for f in kinds.iter().flat_map(|k| &k.functions) {
        match examples.iter_mut().find(|(_, example)| *example == f.example) {
            Some((names, _)) => names.push(&f.name),
            None => examples.push((vec![&f.name], &f.example)),
        }
    }
    let mut out = format!(
        "# Generated by tests/function_reference.rs from each function's Documentation: the examples of\n\
         # udfs/README.md with the results they show. Do not edit; rewrite it with\n# {REGENERATE}\n"
    );
    for (names, example) in examples {
        write!(out, "\n# {}\n", names.join(", ")).unwrap();
        let records: Vec<String> = statements(names[0], example)
            .into_iter()
            .map(|s| match s.rows.first() {
                // `?` (any type) for each column: the runner compares the values, not the types.
                Some(first) => {
                    format!("query {}\n{}\n----\n{}\n", "?".repeat(columns(first)), s.sql, s.rows.join("\n"))
                }
                None => format!("statement ok\n{}\n", s.sql),
            })
            .collect();
        out.push_str(&records.join("\n"));
    }
    out
}

/// The folder the runner names now, not the one the binary was built in (`env!`): a build shared
/// by several checkouts (CI's cache) can outlive the checkout that made it.
fn package() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from)
}

/// Writes `generated` to `path` with `KAHUNA_BLESS=1`; otherwise panics unless `path` holds it.
fn check_or_bless(path: &Path, generated: &str) {
    let found = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if found == generated {
        return;
    }
    if std::env::var_os("KAHUNA_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(path, generated).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    // Split on '\n' rather than `lines()`, so that a missing final newline is a difference too.
    let (mut found_lines, mut generated_lines) = (found.split('\n'), generated.split('\n'));
    let (number, found_line, generated_line) = (1..)
        .map(|number| (number, found_lines.next(), generated_lines.next()))
        .find(|(_, a, b)| a != b)
        .expect("different texts differ in a line");
    fn show(line: Option<&str>) -> &str {
        match line {
            None => "(end of file)",
            Some("") => "(empty line)",
            Some(line) => line,
        }
    }
    panic!(
        "{} is not what the functions' Documentation gives; it first differs at line {number}:\n  file:      {}\n  \
         generated: {}\nChange the Documentation in udfs/src (not the file), then run `{REGENERATE}` to rewrite it.",
        path.display(),
        show(found_line),
        show(generated_line)
    );
}

#[test]
fn readme_reference_is_the_documentation() {
    let path = package().join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    check_or_bless(&path, &with_reference(&readme, &reference(&kinds())));
}

#[test]
fn readme_slt_is_the_documentation_examples() {
    check_or_bless(&package().join("tests/slt/readme.slt"), &readme_slt(&kinds()));
}
