//! The workloads of Kahuna §VII and Ganesha §2 as streams of jobs. Each job's shape (maps,
//! reduces, bytes, CPU per byte) is drawn from its own stream of the seed, so a faulty run and
//! its control submit the same jobs; a stream submits its next job when the last one ends.

use std::fmt;

use super::cluster::REDUCE_SLOTS;
use super::rng::{Rng, Stream};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// Write-heavy: maps write random data to HDFS, no reduces.
    RandWriter,
    /// Read/write with a heavy all-to-all shuffle.
    Sort,
    /// Fluctuating: crawl rounds of four short jobs of varying size.
    Nutch,
    /// Multi-job, compute-heavy scripts.
    Pig,
    /// Five job types submitted side by side.
    Gridmix,
}

impl Workload {
    pub const ALL: [Workload; 5] =
        [Workload::RandWriter, Workload::Sort, Workload::Nutch, Workload::Pig, Workload::Gridmix];

    pub fn name(self) -> &'static str {
        match self {
            Workload::RandWriter => "randwriter",
            Workload::Sort => "sort",
            Workload::Nutch => "nutch",
            Workload::Pig => "pig",
            Workload::Gridmix => "gridmix",
        }
    }

    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name().eq_ignore_ascii_case(name))
    }

    /// Streams of jobs running side by side.
    fn streams(self) -> u32 {
        match self {
            Workload::Gridmix => 5,
            Workload::Pig => 2,
            Workload::RandWriter | Workload::Sort | Workload::Nutch => 1,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One job's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    pub name: String,
    pub user: String,
    pub maps: u32,
    pub reduces: u32,
    /// HDFS input read by each map (0: the map generates its data).
    pub input_mb: f64,
    /// CPU seconds per MB of map input (or of generated output), on a speed-1.0 core.
    pub map_cpu_s_per_mb: f64,
    /// CPU seconds a map spends besides its bytes (a lookup, a model to load).
    pub map_fixed_s: f64,
    /// Seconds a map waits on the outside world through the node's NIC (a fetcher's web
    /// servers), not using the CPU.
    pub map_wait_s: f64,
    /// Map output (to the shuffle, or to HDFS for map-only jobs) per MB of input.
    pub map_out_mb: f64,
    /// Map-only jobs write their output to HDFS rather than to local spills.
    pub map_writes_hdfs: bool,
    /// Replicas of each block the job writes (`dfs.replication`).
    pub replication: usize,
    pub reduce_cpu_s_per_mb: f64,
    /// Reduce output written to HDFS per MB shuffled in.
    pub reduce_out_ratio: f64,
    /// The map index whose every attempt fails (a bad record): the job fails after 4 tries.
    pub poison_map: Option<u32>,
    /// The reduce index whose every attempt fails in its reduce phase, after its shuffle.
    pub poison_reduce: Option<u32>,
    /// The user kills the job this long after submitting it.
    pub kill_after_ms: Option<i64>,
}

impl JobSpec {
    fn new(name: &str, user: &str, maps: u32, reduces: u32, input_mb: f64) -> JobSpec {
        JobSpec {
            name: name.into(),
            user: user.into(),
            maps: maps.max(1),
            reduces,
            input_mb,
            map_cpu_s_per_mb: 0.1,
            map_fixed_s: 0.0,
            map_wait_s: 0.0,
            map_out_mb: 1.0,
            map_writes_hdfs: false,
            replication: 3,
            reduce_cpu_s_per_mb: 0.1,
            reduce_out_ratio: 1.0,
            poison_map: None,
            poison_reduce: None,
            kill_after_ms: None,
        }
    }

    fn cpu(mut self, map: f64, reduce: f64) -> JobSpec {
        self.map_cpu_s_per_mb = map;
        self.reduce_cpu_s_per_mb = reduce;
        self
    }

    fn output(mut self, map_out: f64, reduce_out: f64) -> JobSpec {
        self.map_out_mb = map_out;
        self.reduce_out_ratio = reduce_out;
        self
    }
}

/// The M45 history's generic research job, sized to run about `budget_s` on `nodes` nodes of
/// `map_slots` each: one to three waves of maps whose length grows with the budget (long jobs
/// have long maps, not thousands of waves, which keeps the shuffle — maps × reduces copies —
/// realistic), and no, one or a share of the nodes' worth of reduces.
pub fn research_job(rng: &mut Rng, user: &str, nodes: usize, map_slots: u8, budget_s: f64) -> JobSpec {
    let kinds = ["streamjob", "wordcount", "PigLatin:DefaultJobName", "indexer", "translate", "grep-search"];
    let name = kinds[rng.below(kinds.len() as u64) as usize];
    let slots = nodes as f64 * f64::from(map_slots);
    let waves = rng.range(1.0, 3.0).min((budget_s / 40.0).max(1.0));
    let cpu = rng.range(0.02, 0.1);
    let fill = if budget_s < 60.0 { rng.range(0.1, 1.0) } else { rng.range(0.8, 1.0) };
    let maps = (waves * slots * fill).round().max(1.0) as u32;
    // A part-filled last wave takes a whole map's time: the budget is shared among whole waves.
    let map_s = ((budget_s * 0.95 - 20.0) / (f64::from(maps) / slots).ceil()).max(4.0);
    // A third of M45 jobs had no reduces (Kahuna §IV). Of the others, some keep Hadoop's
    // default of one reduce (aggregates: little map output), the rest scale theirs to a share
    // of the allocation.
    let (reduces, map_out) = match rng.f64() {
        x if x < 1.0 / 3.0 => (0, rng.range(0.05, 0.5)),
        x if x < 0.5 => (1, rng.range(0.001, 0.01)),
        _ => (((nodes as f64 * rng.range(0.25, 1.0)).round() as u32).max(1).min(maps), rng.range(0.05, 0.5)),
    };
    let mut spec = JobSpec::new(name, user, maps, reduces, 64.0).cpu(cpu, rng.range(0.01, 0.05));
    spec.map_fixed_s = (map_s - 3.0 - 64.0 * cpu).max(0.0);
    spec = spec.output(map_out, rng.range(0.1, 1.0));
    if reduces == 0 {
        spec.map_writes_hdfs = true;
    }
    spec
}

/// Submits a workload's jobs: each stream's first job at the start, the next when one ends.
pub struct Driver {
    workload: Workload,
    seed: u64,
    nodes: u32,
    /// Jobs drawn so far per stream.
    drawn: Vec<u64>,
}

impl Driver {
    pub fn new(workload: Workload, seed: u64, nodes: usize) -> Driver {
        Driver { workload, seed, nodes: nodes as u32, drawn: vec![0; workload.streams() as usize] }
    }

    pub fn streams(&self) -> u32 {
        self.workload.streams()
    }

    /// The next job of a stream and the think time before it is submitted.
    pub fn next(&mut self, stream: u32) -> (i64, JobSpec) {
        let k = self.drawn[stream as usize];
        self.drawn[stream as usize] += 1;
        let mut rng = Rng::derive(self.seed, Stream::Jobs, &[u64::from(stream), k]);
        let n = self.nodes;
        let reduce_slots = n * u32::from(REDUCE_SLOTS);
        let think_ms = (rng.range(5.0, 15.0) * 1000.0) as i64;
        let spec = match self.workload {
            // RandomWriter with its defaults (`test.randomwriter.maps_per_host` 10,
            // `bytes_per_map` 1 GB), written at replication 1: Kahuna found RandWriter "largely
            // disk I/O but minimal network communication" (§VIII-A), and packet loss did not slow
            // it at all (Table IV), which three-way pipelines through the lossy node would.
            Workload::RandWriter => {
                let mut s = JobSpec::new("random-writer", "hadoop", 10 * n, 0, 0.0).cpu(0.01, 0.0);
                s.map_out_mb = 1024.0;
                s.map_writes_hdfs = true;
                s.replication = 1;
                s
            }
            // The Sort example: 512 MB of RandWriter output per node, 0.9 reduces per slot.
            Workload::Sort => JobSpec::new("sorter", "hadoop", 8 * n, (reduce_slots * 9).div_ceil(10), 64.0)
                .cpu(0.12, 0.08)
                .output(1.0, 1.0),
            // Crawl rounds: generate, fetch (downloads: long, uneven waits on remote sites),
            // parse (CPU-heavy), updatedb. Sizes fluctuate from round to round.
            Workload::Nutch => {
                let size = rng.range(0.5, 1.5);
                let maps = |per_node: f64| ((per_node * f64::from(n) * size).round() as u32).max(1);
                match k % 4 {
                    0 => JobSpec::new("generate: crawl/segments", "nutch", maps(2.0), n, 64.0)
                        .cpu(0.15, 0.1)
                        .output(0.2, 0.5),
                    1 => {
                        // Fetch lists in, pages out: ~20 MB of content per map.
                        // The fetcher parses what it fetched as it goes (`fetcher.parse`).
                        let mut s = JobSpec::new("fetch: crawl/segments", "nutch", maps(2.0), n, 2.0)
                            .cpu(0.5, 0.2)
                            .output(10.0, 1.0);
                        s.map_wait_s = rng.range(40.0, 120.0);
                        s.map_fixed_s = rng.range(30.0, 60.0);
                        s
                    }
                    2 => JobSpec::new("parse: crawl/segments", "nutch", maps(2.0), n, 64.0)
                        .cpu(0.5, 0.1)
                        .output(0.6, 1.0),
                    _ => JobSpec::new("crawldb crawl/crawldb", "nutch", maps(2.0), n, 64.0)
                        .cpu(0.15, 0.15)
                        .output(1.0, 1.0),
                }
            }
            // Scripts of three jobs (load+filter, group, order), CPU-heavy UDFs.
            Workload::Pig => {
                let stage = k % 3;
                let maps = [12 * n, 6 * n, 4 * n][stage as usize];
                JobSpec::new("PigLatin:script.pig", "pig", maps, n, 32.0)
                    .cpu([0.45, 0.3, 0.2][stage as usize], 0.35)
                    .output([0.4, 0.6, 1.0][stage as usize], 0.5)
            }
            // Gridmix's javaSort, combiner, monsterQuery, webdataScan and webdataSort, each
            // stream one type, scaled to the cluster.
            Workload::Gridmix => match stream {
                0 => JobSpec::new("GridmixJavaSort", "gridmix", 4 * n, n, 64.0).cpu(0.1, 0.08),
                1 => JobSpec::new("GridmixCombiner", "gridmix", 3 * n, n.div_ceil(2), 64.0)
                    .cpu(0.25, 0.1)
                    .output(0.1, 0.5),
                2 => JobSpec::new("GridmixMonsterQuery", "gridmix", 4 * n, n, 64.0).cpu(0.2, 0.15).output(0.5, 0.3),
                3 => JobSpec::new("GridmixWebdataScan", "gridmix", 5 * n, 1, 64.0).cpu(0.05, 0.05).output(0.01, 1.0),
                _ => JobSpec::new("GridmixWebdataSort", "gridmix", 6 * n, n, 64.0).cpu(0.1, 0.08),
            },
        };
        (think_ms, spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_repeat_for_a_seed_and_scale_with_the_cluster() {
        let (_, a) = Driver::new(Workload::Sort, 3, 10).next(0);
        let (_, b) = Driver::new(Workload::Sort, 3, 10).next(0);
        assert_eq!(a, b);
        assert_eq!((a.maps, a.reduces), (80, 18));
        let mut nutch = Driver::new(Workload::Nutch, 3, 10);
        let names: Vec<String> = (0..4).map(|_| nutch.next(0).1.name).collect();
        assert_eq!(names[1], "fetch: crawl/segments");
        let rw = Driver::new(Workload::RandWriter, 3, 25).next(0).1;
        assert_eq!((rw.maps, rw.reduces, rw.map_writes_hdfs, rw.replication), (250, 0, true, 1));
        assert_eq!(Driver::new(Workload::Gridmix, 1, 10).streams(), 5);
        assert_eq!(Workload::parse("RandWriter"), Some(Workload::RandWriter));
    }
}
