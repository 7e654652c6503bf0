//! `kahuna sql`: statements over the warehouse, from `-c`, a file, or an interactive shell with
//! line editing, history, multi-line statements (ended by `;`), `\d` / `.tables` listings and
//! the time each statement took. Errors are printed and the shell goes on.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
    Parquet,
}

/// Runs every statement of `sql`, printing each result; the first error ends it.
pub async fn run_script(ctx: &SessionContext, sql: &str, format: Format, out: &mut dyn Write) -> Result<()> {
    let statements = crate::catalog::parse(sql)?;
    for statement in statements {
        let started = Instant::now();
        let plan = crate::catalog::plan(ctx, statement).await?;
        let frame = crate::catalog::execute(ctx, plan).await?;
        // The plan's schema, not the first batch's: an empty result may come as no batch at all,
        // and its CSV header or Parquet file still says what its columns are.
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let mut batches = frame.collect().await?;
        // (A statement with no result at all, `CREATE VIEW` or `SET`, prints nothing.)
        if batches.is_empty() && !schema.fields().is_empty() {
            batches.push(RecordBatch::new_empty(schema));
        }
        print_batches(&batches, format, out)?;
        // On stderr, so that whatever the format, stdout holds the result alone.
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        eprintln!("{rows} row{} in {:.3} s", if rows == 1 { "" } else { "s" }, started.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Every batch in `format`; nothing for a statement without columns.
pub fn print_batches(batches: &[RecordBatch], format: Format, out: &mut dyn Write) -> Result<()> {
    if batches.is_empty() {
        return Ok(());
    }
    match format {
        Format::Table => writeln!(out, "{}", pretty_format_batches(batches)?)?,
        Format::Csv => {
            let mut writer = datafusion::arrow::csv::WriterBuilder::new().with_header(true).build(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
        }
        Format::Json => {
            let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(&mut *out);
            writer.write_batches(&batches.iter().collect::<Vec<_>>())?;
            writer.finish()?;
        }
        Format::Parquet => {
            let Some(first) = batches.first() else { return Ok(()) };
            let mut buffer = Vec::new();
            let mut writer = datafusion::parquet::arrow::ArrowWriter::try_new(&mut buffer, first.schema(), None)?;
            for batch in batches {
                writer.write(batch)?;
            }
            writer.close()?;
            out.write_all(&buffer)?;
        }
    }
    Ok(())
}

/// The first `limit` rows as a table, and how many more there were: a verdict of a million
/// rows (Kahuna-WB over months) is read in the warehouse, not on a terminal, and formatting it
/// all would cost more than computing it.
pub fn print_head(batches: &[RecordBatch], limit: usize, out: &mut dyn Write) -> Result<()> {
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut head = Vec::new();
    let mut left = limit;
    for batch in batches {
        if left == 0 {
            break;
        }
        let rows = batch.num_rows().min(left);
        head.push(batch.slice(0, rows));
        left -= rows;
    }
    if limit > 0 {
        writeln!(out, "{}", pretty_format_batches(&head)?)?;
    }
    if total > limit {
        writeln!(out, "({total} rows; the first {limit} shown)")?;
    }
    Ok(())
}

/// `\d` / `.tables`: each table with its row count.
async fn list_tables(ctx: &SessionContext) -> Result<()> {
    let sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name";
    let names = ctx.sql(sql).await?.collect().await?;
    let mut listing = String::from("SELECT * FROM (VALUES ('', 0)) WHERE false");
    for batch in &names {
        let column = datafusion::arrow::array::cast::as_string_array(batch.column(0));
        for name in column.iter().flatten() {
            listing.push_str(&format!(" UNION ALL SELECT '{name}', count(*) FROM \"{name}\""));
        }
    }
    let sql = format!("SELECT column1 AS \"table\", column2 AS \"rows\" FROM ({listing}) ORDER BY 1");
    run_script(ctx, &sql, Format::Table, &mut std::io::stdout()).await
}

/// The interactive shell.
pub async fn interactive(ctx: &SessionContext, format: Format) -> Result<()> {
    let mut editor = rustyline::DefaultEditor::new().context("cannot start the line editor")?;
    let history: Option<PathBuf> = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kahuna_history"));
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    println!("kahuna sql: statements end with `;`. \\d or .tables lists tables, \\d NAME describes one, \\q quits.");
    let mut statement = String::new();
    loop {
        let prompt = if statement.is_empty() { "kahuna> " } else { "   ...> " };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(rustyline::error::ReadlineError::Interrupted) => {
                statement.clear();
                continue;
            }
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => bail!("cannot read input: {e}"),
        };
        let trimmed = line.trim();
        if statement.is_empty() && (trimmed.starts_with('\\') || trimmed.starts_with('.')) {
            let _ = editor.add_history_entry(trimmed);
            match trimmed.split_whitespace().collect::<Vec<_>>().as_slice() {
                ["\\q"] | [".quit"] | [".exit"] => break,
                ["\\d"] | [".tables"] => report(list_tables(ctx).await),
                ["\\d", name] | [".schema", name] => report(
                    run_script(ctx, &format!("DESCRIBE \"{name}\""), Format::Table, &mut std::io::stdout()).await,
                ),
                _ => eprintln!("unknown command {trimmed}: \\d, \\d NAME, .tables, \\q"),
            }
            continue;
        }
        statement.push_str(&line);
        statement.push('\n');
        if trimmed.ends_with(';') {
            let _ = editor.add_history_entry(statement.trim());
            report(run_script(ctx, &statement, format, &mut std::io::stdout()).await);
            statement.clear();
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(())
}

fn report(result: Result<()>) {
    if let Err(e) = result {
        eprintln!("error: {}", crate::error_message(&e));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::Int64Array;

    use super::*;

    #[test]
    fn a_long_result_prints_its_head_and_says_how_many_rows_it_had() {
        let batch =
            |values: Vec<i64>| RecordBatch::try_from_iter([("n", Arc::new(Int64Array::from(values)) as _)]).unwrap();
        let batches = [batch(vec![1, 2]), batch(vec![3, 4, 5])];
        let mut out = Vec::new();
        print_head(&batches, 3, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let expected = "+---+\n| n |\n+---+\n| 1 |\n| 2 |\n| 3 |\n+---+\n(5 rows; the first 3 shown)\n";
        assert_eq!(text, expected);
        let mut out = Vec::new();
        print_head(&batches, 40, &mut out).unwrap();
        assert!(String::from_utf8(out).unwrap().ends_with("| 5 |\n+---+\n"), "all rows, no count line");
    }
}
