//! Realistic TaskTracker and DataNode log text in bulk, for the ingest benchmark and the
//! crash test: the messages and mix of a busy 0.18/0.20 slave (task launches, progress reports,
//! completions, block writes and reads, clienttrace), deterministic for a seed. The cluster
//! simulator of `kahuna simulate` supersedes it for anything that needs faults or ground truth.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A small deterministic generator (64-bit LCG): reproducible text without a dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Wall-clock text of a millisecond count, as log4j writes it.
fn stamp(ms: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
    t.format("%Y-%m-%d %H:%M:%S,%3f").to_string()
}

/// Writes one TaskTracker and one DataNode log per host, each about `bytes_per_file` long;
/// returns the paths written.
pub fn write_cluster_logs(dir: &Path, hosts: usize, bytes_per_file: u64, seed: u64) -> io::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for host in 0..hosts {
        let name = format!("node{host}");
        let tt = dir.join(format!("hadoop-hadoop-tasktracker-{name}.log"));
        let dn = dir.join(format!("hadoop-hadoop-datanode-{name}.log"));
        write_tasktracker(&tt, host, bytes_per_file, seed ^ host as u64)?;
        write_datanode(&dn, host, bytes_per_file, seed ^ (host as u64) << 32)?;
        paths.extend([tt, dn]);
    }
    Ok(paths)
}

const START_MS: i64 = 1_219_511_552_466; // 2008-08-23 17:12:32.466 UTC

fn write_tasktracker(path: &Path, host: usize, bytes: u64, seed: u64) -> io::Result<()> {
    let mut out = CountingWriter::new(path)?;
    let mut rng = Lcg(seed);
    let mut now = START_MS;
    let logger = "org.apache.hadoop.mapred.TaskTracker";
    let mut task = 0u64;
    while out.written < bytes {
        task += 1;
        let kind = if task.is_multiple_of(5) { "r" } else { "m" };
        let attempt = format!("attempt_200808231712_{:04}_{kind}_{:06}_0", 1 + task / 1000, task * 7 + host as u64);
        writeln!(out, "{} INFO {logger}: LaunchTaskAction: {attempt}", stamp(now))?;
        for step in 1..=8u64 {
            now += 200 + rng.below(800) as i64;
            writeln!(
                out,
                "{} INFO {logger}: {attempt} {:.7}% hdfs://master:9000/user/hadoop/rand/part-{:05}:0+67108864",
                stamp(now),
                step as f64 / 8.0,
                task % 100_000
            )?;
        }
        now += 100 + rng.below(400) as i64;
        writeln!(out, "{} INFO {logger}: Task {attempt} is done.", stamp(now))?;
    }
    out.finish()
}

fn write_datanode(path: &Path, host: usize, bytes: u64, seed: u64) -> io::Result<()> {
    let mut out = CountingWriter::new(path)?;
    let mut rng = Lcg(seed);
    let mut now = START_MS;
    let logger = "org.apache.hadoop.dfs.DataNode";
    let trace = "org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace";
    let me = format!("10.0.{}.{}", host / 250, host % 250 + 1);
    while out.written < bytes {
        let block = rng.next() as i64 * if rng.below(2) == 0 { 1 } else { -1 } * 7919;
        let writer = format!("10.0.0.{}", rng.below(250) + 1);
        let port = 40_000 + rng.below(20_000);
        writeln!(
            out,
            "{} INFO {logger}: Receiving block blk_{block} src: /{writer}:{port} dest: /{me}:50010",
            stamp(now)
        )?;
        now += 300 + rng.below(900) as i64;
        writeln!(out, "{} INFO {logger}: Received block blk_{block} of size 67108864 from /{writer}", stamp(now))?;
        now += rng.below(50) as i64;
        writeln!(out, "{} INFO {logger}: {me}:50010 Served block blk_{block} to /{writer}", stamp(now))?;
        now += rng.below(50) as i64;
        writeln!(
            out,
            "{} INFO {trace}: src: /{me}:50010, dest: /{writer}:{port}, bytes: 67108864, op: HDFS_READ, cliID: DFSClient_attempt_200808231712_0001_m_{:06}_0, srvID: DS-1-{me}-50010-1219511500000, blockid: blk_{block}_1001, duration: {}",
            stamp(now),
            rng.below(100_000),
            rng.below(2_000_000_000)
        )?;
    }
    out.finish()
}

struct CountingWriter {
    inner: BufWriter<File>,
    written: u64,
}

impl CountingWriter {
    fn new(path: &Path) -> io::Result<Self> {
        Ok(CountingWriter { inner: BufWriter::with_capacity(1 << 20, File::create(path)?), written: 0 })
    }

    fn finish(mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
