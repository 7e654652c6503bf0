//! Mutation fuzzing of every parser, on stable Rust: each parser's seed file (`data/`, and
//! `../shared/samples` where it is there) with its opening lines kept, so that the file is
//! read by that parser, and three lines in ten of the rest damaged the ways real logs are
//! (bytes flipped, cut, NULs, invalid UTF-8, lines doubled or spliced, digits of timestamps and
//! ids changed). Every file is ingested (dry run, one at a time, under a time limit): no panic,
//! no hang, and every line accounted for: read = parsed + rejected + skipped = the file's lines.
//!
//! `KAHUNA_FUZZ_INPUTS` sets the damaged-or-kept lines per parser (20,000 by default, for
//! CI); `KAHUNA_FUZZ_SEED` the first seed. The long campaign and its result are in
//! `docs/benchmarks.md`.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{options, package_dir};
use kahuna::ingest::discover::layout_of;
use kahuna::ingest::ingest;
use kahuna::simulate::rng::Rng;

/// Lines of one fuzzed file.
const LINES_PER_FILE: usize = 2_000;

struct Parser {
    name: &'static str,
    /// The seed, from the checkout or the shared samples.
    seed: PathBuf,
    /// The fuzzed file's name, which routes it to the parser as a user's file would be.
    file_name: &'static str,
    /// Opening lines kept whole: what tells the file's format.
    kept: usize,
    host: Option<&'static str>,
    /// A `--layout` pattern to read the file with.
    layout: Option<&'static str>,
}

fn parsers() -> Vec<Parser> {
    let data = package_dir().join("data");
    let samples = package_dir().join("../shared/samples");
    let parser =
        |name, seed: PathBuf, file_name, kept, host| Parser { name, seed, file_name, kept, host, layout: None };
    let yarn_master =
        data.join("yarn/node0/userlogs/application_1553147085057_0001/container_1553147085057_0001_01_000001/syslog");
    vec![
        parser(
            "tasktracker",
            data.join("logs/hadoop-hadoop-tasktracker-node1.log"),
            "hadoop-u-tasktracker-fz.log",
            3,
            None,
        ),
        parser("datanode", data.join("logs/hadoop-hadoop-datanode-node2.log"), "hadoop-u-datanode-fz.log", 3, None),
        parser("loghub hdfs", data.join("logs/hdfs-merged/hdfs.log"), "hdfs.log", 3, None),
        parser(
            "console layout",
            data.join("console/hadoop-hadoop-tasktracker-node4.log"),
            "hadoop-u-tasktracker-fz.log",
            1,
            None,
        ),
        parser(
            "job history text",
            data.join("jobhistory/master_1219511520000_job_200808231712_0001_hadoop_wordcount"),
            "job_fz_history",
            1,
            None,
        ),
        parser("yarn application master", yarn_master.clone(), "syslog", 1, None),
        Parser {
            layout: Some("%d{ISO8601} %-5p [%t] %c: %m%n"),
            ..parser("--layout pattern", yarn_master, "syslog", 1, None)
        },
        parser("sadf -d", data.join("sysstat/node1.sadf-d.csv"), "fz.sadf-d.csv", 1, None),
        parser("sadf -dh", data.join("sysstat/node3.sadf-dh.csv"), "fz.sadf-dh.csv", 1, None),
        parser("clienttrace", samples.join("clienttrace/ClientTrace.log"), "hadoop-u-datanode-fz.log", 3, None),
        parser("log4j 2.x [thread]", samples.join("yarn/Hadoop_2k.log"), "mrappmaster.log", 3, Some("fz")),
        parser("jhist", samples.join("jobhistory/jhist/job_1329348432655_0001-10.jhist"), "job_fz.jhist", 2, None),
        parser("sadf -j", samples.join("sysstat/sadf/local.sadf-j.json"), "fz.json", 13, None),
    ]
}

/// One line damaged one of the ways real logs are.
fn damage(line: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = line.to_vec();
    let at = |rng: &mut Rng, len: usize| rng.below(len.max(1) as u64) as usize;
    match rng.below(9) {
        0 if !out.is_empty() => {
            let i = at(rng, out.len());
            out[i] ^= 1 << rng.below(8);
        }
        1 => out.truncate(at(rng, out.len())),
        2 => {
            let i = at(rng, out.len() + 1).min(out.len());
            let run = 1 + rng.below(64) as usize;
            out.splice(i..i, std::iter::repeat_n(0u8, run));
        }
        3 => {
            let i = at(rng, out.len() + 1).min(out.len());
            out.splice(i..i, [0xff, 0xfe, 0xc3]);
        }
        4 => out.extend_from_slice(&line[..line.len() / 2]),
        5 => {
            let cut = at(rng, out.len() + 1).min(out.len());
            out.truncate(cut);
            out.extend_from_slice(&other[at(rng, other.len() + 1).min(other.len())..]);
        }
        6 => {
            for byte in out.iter_mut().filter(|b| b.is_ascii_digit()) {
                if rng.below(4) == 0 {
                    *byte = b'0' + rng.below(10) as u8;
                }
            }
        }
        7 => {
            let n = rng.below(32) as usize;
            for _ in 0..n {
                let i = at(rng, out.len() + 1).min(out.len());
                out.insert(i, rng.below(256) as u8);
            }
        }
        _ => {
            let i = at(rng, out.len() + 1).min(out.len());
            out.splice(i..i, *b"\"{[\\");
        }
    }
    out
}

/// A fuzzed file: the seed's opening lines, then `lines` lines drawn from the rest in order,
/// three in ten damaged. Every line ends with `\n`, so that each is read now.
fn fuzzed(seed: &[&[u8]], kept: usize, lines: usize, rng: &mut Rng) -> Vec<u8> {
    let body = &seed[kept.min(seed.len())..];
    let mut out = Vec::new();
    for line in &seed[..kept.min(seed.len())] {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    for i in 0..lines {
        let line = body[i % body.len().max(1)];
        let other = body[rng.below(body.len().max(1) as u64) as usize];
        if rng.below(10) < 3 {
            out.extend_from_slice(&damage(line, other, rng));
        } else {
            out.extend_from_slice(line);
        }
        out.push(b'\n');
    }
    out
}

async fn fuzz(parser: &Parser, inputs: usize, first_seed: u64, work: &Path) -> u64 {
    let text = std::fs::read(&parser.seed).unwrap();
    let seed: Vec<&[u8]> = text.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
    let warehouse = work.join("warehouse");
    let folder = work.join(parser.name.replace(' ', "_"));
    std::fs::create_dir_all(&folder).unwrap();
    let mut done = 0;
    let mut file_seed = first_seed;
    while done < inputs {
        let lines = LINES_PER_FILE.min(inputs - done);
        let mut rng = Rng::new(file_seed);
        let bytes = fuzzed(&seed, parser.kept, lines, &mut rng);
        let path = folder.join(parser.file_name);
        std::fs::write(&path, &bytes).unwrap();
        let mut run = options(vec![path.clone()], &warehouse, parser.host);
        run.hints.layout = parser.layout.map(|pattern| layout_of(pattern).unwrap());
        run.dry_run = true;
        run.threads = 1;
        let context = format!("{} (KAHUNA_FUZZ_SEED={file_seed})", parser.name);
        let summary = tokio::time::timeout(Duration::from_secs(120), ingest(&run))
            .await
            .unwrap_or_else(|_| panic!("{context}: no answer in 120 s"))
            .unwrap_or_else(|e| panic!("{context}: {e:#}"));
        let report = &summary.reports[0];
        assert_eq!(report.status, "ingested", "{context}: {:?}", report.error);
        let newlines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
        assert_eq!(report.lines_read, newlines, "{context}: lines read");
        assert_eq!(
            report.lines_read,
            report.lines_parsed + report.lines_rejected + report.lines_skipped,
            "{context}: read = parsed + rejected + skipped"
        );
        done += lines;
        file_seed += 1;
    }
    done as u64
}

#[tokio::test]
async fn every_parser_survives_damaged_input_and_accounts_for_every_line() {
    let inputs = std::env::var("KAHUNA_FUZZ_INPUTS").ok().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let first_seed = std::env::var("KAHUNA_FUZZ_SEED").ok().and_then(|n| n.parse().ok()).unwrap_or(1);
    let work = tempfile::tempdir().unwrap();
    let mut fuzzed_parsers = 0;
    for parser in parsers() {
        if !parser.seed.exists() {
            println!(
                "skipped {}: {} is absent (the shared samples live beside the checkout)",
                parser.name,
                parser.seed.display()
            );
            continue;
        }
        let started = std::time::Instant::now();
        let lines = fuzz(&parser, inputs, first_seed, work.path()).await;
        println!("{}: {lines} lines, {:.1} s", parser.name, started.elapsed().as_secs_f64());
        fuzzed_parsers += 1;
    }
    assert!(fuzzed_parsers >= 6, "the checkout's own seeds are always there");
}
