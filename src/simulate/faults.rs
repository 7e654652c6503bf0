//! The injected problems of Kahuna Table III, at one node from a start time, and what each does
//! to the rates and tasks the scheduler computes:
//!
//! | fault | effect in the model |
//! |---|---|
//! | CPUHog | a hog thread per core, busy 70% of the time: beside it (and the JVMs' own collector and I/O threads) a task keeps half a core |
//! | DiskHog | a 20 GB sequential write streams at 70% of the disk; Hadoop's writes keep 60% of it, its reads, queued behind the hog's writeback, 20%, until the hog has written its 20 GB |
//! | DiskFull | the DataNode takes no block writes; its tasks' first replicas go to other nodes |
//! | PacketLoss1/5/50 | transfers to and from the node are capped by TCP's throughput under loss (1%: Mathis et al., 1.22·MSS/(RTT·√p) with a LAN's 0.2 ms RTT, above the NIC; 5%: retransmission timeouts set the pace, 12 MB/s and 0.4 s a transfer; 50%: 0.6 MB/s, 3 s, and one try of a map-output copy in seven times out and is retried after Hadoop's backoff), HDFS pipelines drop the node at 50%, and waits on the outside world through its NIC (a fetcher's) take 2.5× (5%) or 8× (50%) as long |
//! | HANG-1036 | the first map launched there after the start dies silently while the TaskTracker keeps heartbeating: no progress until a speculative backup elsewhere wins (the hung attempt KILLED) or the 600 s task timeout kills it and it reruns elsewhere |
//! | HANG-1152 | the first reduce there to fetch its last map output fails to rename it in the in-memory file system (the rename/`getLength()` race): the copy fails (`copy failed: … FileNotFoundException`), is retried twice and fails again, and the reduce stays in its copy phase, silent, until its backup wins or the timeout |
//! | HANG-2080 | the first in-memory merge a full shuffle buffer starts in a reduce there (ChecksumFileSystem's miscomputed checksum-file size) never completes: the reduce stalls mid-shuffle with the merge open and its copies clean, until its backup wins or the timeout; reduces with fewer than ten map outputs never merge in memory and escape it |
//!
//! Each hang strikes once per run, as Kahuna triggered each bug once per experiment; a hung task
//! makes no progress, so speculative execution may start a backup attempt before the timeout.

use std::fmt;
use std::str::FromStr;

/// `mapred.task.timeout`: a task silent this long is killed.
pub const TASK_TIMEOUT_MS: i64 = 600_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    CpuHog,
    DiskHog,
    DiskFull,
    PacketLoss1,
    PacketLoss5,
    PacketLoss50,
    Hang1036,
    Hang1152,
    Hang2080,
}

impl Fault {
    pub const ALL: [Fault; 9] = [
        Fault::CpuHog,
        Fault::DiskHog,
        Fault::DiskFull,
        Fault::PacketLoss1,
        Fault::PacketLoss5,
        Fault::PacketLoss50,
        Fault::Hang1036,
        Fault::Hang1152,
        Fault::Hang2080,
    ];

    /// The names of Kahuna Table III.
    pub fn name(self) -> &'static str {
        match self {
            Fault::CpuHog => "CPUHog",
            Fault::DiskHog => "DiskHog",
            Fault::DiskFull => "DiskFull",
            Fault::PacketLoss1 => "PacketLoss1",
            Fault::PacketLoss5 => "PacketLoss5",
            Fault::PacketLoss50 => "PacketLoss50",
            Fault::Hang1036 => "HANG-1036",
            Fault::Hang1152 => "HANG-1152",
            Fault::Hang2080 => "HANG-2080",
        }
    }

    /// A name as Table III writes it, in any case, with or without the dash.
    pub fn parse(name: &str) -> Option<Fault> {
        let squash = |s: &str| s.replace('-', "").to_ascii_lowercase();
        let wanted = squash(name);
        Fault::ALL.into_iter().find(|f| squash(f.name()) == wanted)
    }

    fn loss(self) -> Option<f64> {
        match self {
            Fault::PacketLoss1 => Some(0.01),
            Fault::PacketLoss5 => Some(0.05),
            Fault::PacketLoss50 => Some(0.5),
            _ => None,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `F[@node][:start]` from the command line: the node as a host name or 0-based index (a
/// node drawn from the seed when absent), the start as a duration from the run's start.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpec {
    pub fault: Fault,
    pub node: Option<String>,
    pub start_s: f64,
}

impl FromStr for FaultSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (rest, start_s) = match s.split_once(':') {
            Some((rest, start)) => (rest, parse_duration(start)?),
            None => (s, 0.0),
        };
        let (name, node) = match rest.split_once('@') {
            Some((name, node)) if !node.is_empty() => (name, Some(node.to_string())),
            Some(_) => return Err(format!("{s}: nothing after @")),
            None => (rest, None),
        };
        let fault = Fault::parse(name)
            .ok_or_else(|| format!("{name}: not a fault; one of {}", Fault::ALL.map(Fault::name).join(", ")))?;
        Ok(FaultSpec { fault, node, start_s })
    }
}

/// `90`, `90s`, `15m`, `2h`, `1d` → seconds.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => s.split_at(at),
        None => (s, "s"),
    };
    let value: f64 = number.parse().map_err(|_| format!("{s}: not a duration (like 90s, 15m, 2h)"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return Err(format!("{s}: unit is not one of ms, s, m, h, d")),
    };
    if value < 0.0 || !value.is_finite() {
        return Err(format!("{s}: a duration is not negative"));
    }
    Ok(value * scale)
}

/// What a transfer between two nodes is held to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub cap_mb_s: f64,
    /// Retransmission timeouts paid once per transfer.
    pub extra_ms: f64,
    /// Chance that the transfer times out and is retried.
    pub fail_p: f64,
}

const CLEAN: Link = Link { cap_mb_s: f64::INFINITY, extra_ms: 0.0, fail_p: 0.0 };

/// TCP throughput under loss p (Mathis et al. 1997) with a 1460-byte MSS and the 0.2 ms RTT of
/// a LAN: 89 MB/s at 1% (above the NIC: no effect, as Table IV found).
fn mathis_mb_s(p: f64) -> f64 {
    1.22 * 1460.0 / (0.0002 * p.sqrt()) / 1e6
}

/// At 5% loss a LAN's small windows lose retransmissions and tails often enough that TCP waits
/// out 200 ms retransmission timeouts (the Padhye et al. regime) rather than fast-retransmitting:
/// throughput well under Mathis's 40 MB/s, and about one timeout per transfer. Calibrated so
/// that Sort and Nutch slow down by Table IV's 20–30%.
const LOSS5_MB_S: f64 = 12.0;
const LOSS5_EXTRA_MS: f64 = 400.0;
const WAN_SLOWDOWN_5: f64 = 2.5;
const WAN_SLOWDOWN_50: f64 = 8.0;

/// A fault injected at one node of a run.
#[derive(Clone, Debug)]
pub struct Injected {
    pub fault: Fault,
    pub node: usize,
    pub start_ms: i64,
    pub end_ms: i64,
}

/// The hog's duty cycle on each core.
const CPU_HOG_DUTY: f64 = 0.7;
/// The share of a core a task keeps beside the hog. CFS alone would give a task thread sharing
/// a core with a 70%-busy hog thread 65% of it; the task JVMs' own collector and I/O threads,
/// and the daemons', compete too. Calibrated to Table IV (Sort 28%).
const CPU_LEFT_BESIDE_HOG: f64 = 0.5;
const DISK_HOG_MB: f64 = 20.0 * 1024.0;
/// The shares of the disk left to Hadoop while the hog streams its writes: its writes queue
/// behind the hog's in the page cache's writeback, and its reads wait behind a deep queue of
/// them, worse.
const DISK_HOG_WRITES_LEFT: f64 = 0.6;
const DISK_HOG_READS_LEFT: f64 = 0.2;
/// The share of the disk the hog's own stream gets.
const DISK_HOG_TAKES: f64 = 0.7;

impl Injected {
    /// The fault from its start to the run's end, except DiskHog, which stops once it has
    /// written its 20 GB with the share of the disk it takes.
    pub fn new(fault: Fault, node: usize, start_ms: i64, run_end_ms: i64, disk_mb_s: f64) -> Injected {
        let end_ms = match fault {
            Fault::DiskHog => {
                (start_ms + (DISK_HOG_MB / Injected::disk_hog_mb_s(disk_mb_s) * 1000.0) as i64).min(run_end_ms)
            }
            _ => run_end_ms,
        };
        Injected { fault, node, start_ms, end_ms: end_ms.max(start_ms) }
    }

    pub fn at(&self, node: usize, t: i64) -> bool {
        node == self.node && t >= self.start_ms && t < self.end_ms
    }

    /// The share of a core that each of `tasks` CPU-bound tasks gets.
    pub fn cpu_share(fault: Option<&Injected>, node: usize, t: i64, tasks: f64, cores: f64) -> f64 {
        let alone = (cores / tasks.max(1.0)).min(1.0);
        match fault {
            Some(f) if f.fault == Fault::CpuHog && f.at(node, t) => alone * CPU_LEFT_BESIDE_HOG,
            _ => alone,
        }
    }

    /// Cores the hog keeps busy (for the sadc capture).
    pub fn cpu_hog_cores(cores: f64) -> f64 {
        CPU_HOG_DUTY * cores
    }

    /// The share of the node's disk bandwidth left to Hadoop's reads (`write` false) or writes.
    pub fn disk_share(fault: Option<&Injected>, node: usize, t: i64, write: bool) -> f64 {
        match fault {
            Some(f) if f.fault == Fault::DiskHog && f.at(node, t) => {
                if write {
                    DISK_HOG_WRITES_LEFT
                } else {
                    DISK_HOG_READS_LEFT
                }
            }
            _ => 1.0,
        }
    }

    /// What the disk hog writes per second.
    pub fn disk_hog_mb_s(disk_mb_s: f64) -> f64 {
        disk_mb_s * DISK_HOG_TAKES
    }

    /// How much longer waits on the outside world (a fetcher's downloads, many small TCP
    /// connections over the WAN) take through a lossy NIC: page fetches that lose their last
    /// segments wait out retransmission timeouts, at 50% loss most of them time out and are
    /// retried. Calibrated to Table IV's Nutch (no effect at 1%).
    pub fn wan_slowdown(fault: Option<&Injected>, node: usize, t: i64) -> f64 {
        match fault.filter(|f| f.at(node, t)).and_then(|f| f.fault.loss()) {
            Some(p) if p >= 0.5 => WAN_SLOWDOWN_50,
            Some(p) if p >= 0.05 => WAN_SLOWDOWN_5,
            _ => 1.0,
        }
    }

    pub fn link(fault: Option<&Injected>, a: usize, b: usize, t: i64) -> Link {
        let Some(f) = fault else { return CLEAN };
        let Some(p) = f.fault.loss() else { return CLEAN };
        if a == b || !(f.at(a, t) || f.at(b, t)) {
            return CLEAN;
        }
        if p >= 0.5 {
            // Past ~20% loss TCP lives on retransmission timeouts (200 ms, doubling), not
            // fast retransmit: a few hundred KB/s, and many connections stall until Hadoop's
            // socket timeouts retry them. The share of tries that stall is set so that Sort
            // slows by about Kahuna Table IV's 90% under Hadoop's fetch backoff.
            return Link { cap_mb_s: 0.6, extra_ms: 3000.0, fail_p: 0.14 };
        }
        if p >= 0.05 {
            return Link { cap_mb_s: LOSS5_MB_S.min(mathis_mb_s(p)), extra_ms: LOSS5_EXTRA_MS, fail_p: 0.0 };
        }
        Link { cap_mb_s: mathis_mb_s(p), extra_ms: 0.0, fail_p: 0.0 }
    }

    pub fn refuses_writes(fault: Option<&Injected>, node: usize, t: i64) -> bool {
        matches!(fault, Some(f) if f.fault == Fault::DiskFull && f.at(node, t))
    }

    /// HADOOP-1152: a reduce's rename of a fetched map output fails.
    pub fn hangs_copy(fault: Option<&Injected>, node: usize, t: i64) -> bool {
        matches!(fault, Some(f) if f.fault == Fault::Hang1152 && f.at(node, t))
    }

    /// HADOOP-2080: a reduce's in-memory merge never completes.
    pub fn hangs_merge(fault: Option<&Injected>, node: usize, t: i64) -> bool {
        matches!(fault, Some(f) if f.fault == Fault::Hang2080 && f.at(node, t))
    }

    /// A node past TCP's working range (50% loss): peers' clients give up on it and go
    /// elsewhere where they can (another replica, a shorter pipeline).
    pub fn drops_connections(fault: Option<&Injected>, node: usize, t: i64) -> bool {
        matches!(fault, Some(f) if f.fault == Fault::PacketLoss50 && f.at(node, t))
    }

    pub fn hangs_map(fault: Option<&Injected>, node: usize, t: i64) -> bool {
        matches!(fault, Some(f) if f.fault == Fault::Hang1036 && f.at(node, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            "CPUHog@r01n03:2m".parse::<FaultSpec>(),
            Ok(FaultSpec { fault: Fault::CpuHog, node: Some("r01n03".into()), start_s: 120.0 })
        );
        assert_eq!("hang-1036".parse::<FaultSpec>().map(|f| f.fault), Ok(Fault::Hang1036));
        assert_eq!("HANG2080@4".parse::<FaultSpec>().map(|f| f.node), Ok(Some("4".into())));
        assert!("Meteor".parse::<FaultSpec>().unwrap_err().contains("CPUHog, DiskHog"));
        assert_eq!(parse_duration("1.5h"), Ok(5400.0));
        assert_eq!(parse_duration("600"), Ok(600.0));
        assert!(parse_duration("3 weeks").is_err());
    }

    #[test]
    fn effects_follow_table_iii() {
        let hog = Injected::new(Fault::CpuHog, 2, 1000, 10_000, 60.0);
        // Two tasks on 4 cores: alone each has a core; beside the hog's threads, half of one.
        assert_eq!(Injected::cpu_share(Some(&hog), 1, 5000, 2.0, 4.0), 1.0);
        assert_eq!(Injected::cpu_share(Some(&hog), 2, 5000, 2.0, 4.0), CPU_LEFT_BESIDE_HOG);
        assert_eq!(Injected::cpu_share(Some(&hog), 2, 500, 2.0, 4.0), 1.0);
        let disk = Injected::new(Fault::DiskHog, 0, 0, i64::MAX, 64.0);
        assert_eq!(disk.end_ms, 457_142, "20 GB at 70% of 64 MB/s");
        assert!((mathis_mb_s(0.01) - 89.06).abs() < 0.01);
        let lossy = Injected::new(Fault::PacketLoss5, 3, 0, 100, 60.0);
        assert_eq!(Injected::link(Some(&lossy), 1, 2, 5), CLEAN);
        assert_eq!(Injected::link(Some(&lossy), 3, 2, 5).cap_mb_s, LOSS5_MB_S);
        assert_eq!(Injected::link(Some(&lossy), 2, 3, 5).extra_ms, LOSS5_EXTRA_MS);
        let one = Injected::new(Fault::PacketLoss1, 3, 0, 100, 60.0);
        assert_eq!(Injected::link(Some(&one), 2, 3, 5).extra_ms, 0.0);
    }
}
