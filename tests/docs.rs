//! The commands of README.md and docs/*.md run as written, from the checkout, on the demo data.
//!
//! Every fenced block marked `sh` is run with bash, block after block in the order of its page,
//! in a fresh folder that links the checkout's `data/` and `queries/` and has the built `kahuna`
//! first on the PATH. `cargo run -- ARGS` is run as `kahuna ARGS`; other `cargo` lines (the test
//! command, benchmarks) are what CI itself runs and are left out. Blocks that are slow or need
//! inputs beyond the checkout are marked `console` in the pages and are not run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::package_dir;

/// The `sh` blocks of a Markdown page, each with the line its fence opens on.
fn sh_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, bool, String)> = None;
    for (number, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match &mut open {
            None if fence => {
                open = Some((number + 1, line.trim_start().trim_start_matches('`').trim() == "sh", String::new()))
            }
            Some((start, is_sh, text)) if fence => {
                if *is_sh {
                    blocks.push((*start, std::mem::take(text)));
                }
                open = None;
            }
            Some((_, _, text)) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// A block's commands as the test runs them: `cargo run --` becomes `kahuna`, other cargo
/// lines are dropped.
fn runnable(block: &str) -> String {
    block
        .lines()
        .filter_map(|line| match line.trim_start().strip_prefix("cargo ") {
            Some(rest) => rest.strip_prefix("run -- ").map(|args| format!("kahuna {args}")),
            None => Some(line.to_string()),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn pages() -> Vec<PathBuf> {
    let root = package_dir();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn run_page(page: &Path) -> usize {
    let root = package_dir();
    let work = tempfile::tempdir().unwrap();
    for linked in ["data", "queries"] {
        std::os::unix::fs::symlink(root.join(linked), work.path().join(linked)).unwrap();
    }
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kahuna"), bin.path().join("kahuna")).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let text = std::fs::read_to_string(page).unwrap();
    let blocks = sh_blocks(&text);
    for (line, block) in &blocks {
        let script = runnable(block);
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .current_dir(work.path())
            .env("PATH", &path)
            .env_remove("KAHUNA_WAREHOUSE")
            .env_remove("KAHUNA_QUERIES")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}:{line}: the block failed\n{script}\n--- stdout\n{}\n--- stderr\n{}",
            page.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    blocks.len()
}

#[test]
fn blocks_are_found_and_cargo_lines_mapped() {
    let page = "text\n```sh\ncargo run -- demo\ncargo nextest run --workspace\n```\n```console\nkahuna x\n```\n```sh\nkahuna sql -c 'SELECT 1'\n```\n";
    let blocks = sh_blocks(page);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].0, 2);
    assert_eq!(runnable(&blocks[0].1), "kahuna demo");
    assert_eq!(runnable(&blocks[1].1), "kahuna sql -c 'SELECT 1'");
}

#[test]
fn every_documented_command_runs() {
    let mut ran = 0;
    for page in pages() {
        ran += run_page(&page);
    }
    // README's two commands at least, and the pages' own.
    assert!(ran >= 3, "only {ran} blocks found");
}
