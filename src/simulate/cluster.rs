//! The slave nodes: names, addresses, slots and resource rates. Rates carry a few percent of
//! per-node noise (drawn once per physical node) and every task draws its own jitter on top, so
//! fault-free nodes look alike but not identical — the peer similarity the papers observed.

use super::rng::{Rng, Stream};

/// Hadoop 0.18's defaults (`mapred.tasktracker.{map,reduce}.tasks.maximum`).
pub const MAP_SLOTS: u8 = 2;
pub const REDUCE_SLOTS: u8 = 2;
const M45_CORES: f64 = 8.0;
const M45_MAP_SLOTS: u8 = 6;
const M45_REDUCE_SLOTS: u8 = 2;
/// Nodes per rack, for names, addresses and replica placement.
pub const RACK_SIZE: usize = 40;

/// What makes a cluster harder to diagnose, beyond its workload and its fault. The default is
/// alike nodes on one clock, DataNodes at DEBUG and nothing but Hadoop in the sysstat capture,
/// as SALSA's and Kahuna's clusters ran.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Conditions {
    pub hardware: Hardware,
    /// Each host's clock is off by up to this much either way, drawn per host from the seed: its
    /// logs and sadc capture are stamped by it, the job history by the master's.
    pub clock_skew_ms: i64,
    pub datanode_log: DataNodeLog,
    /// Each node's capture shows the daemons and cron jobs it runs beside Hadoop.
    pub sysstat_noise: bool,
    /// Seconds between two records of a capture (0 or 1: every second, as Ganesha's ran).
    pub sysstat_interval_s: u32,
    /// The share of task attempts that run slower for reasons of their own, on any node (a
    /// skewed split, a long garbage collection, a slow disk sector): see [`Cluster::stragglers`].
    pub stragglers: f64,
    /// The share of tries of map-output copies that fail, between any two nodes: see
    /// [`Cluster::fetch_failures`].
    pub fetch_failures: f64,
}

/// The machines of a cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hardware {
    /// One model: nodes differ by a few percent.
    #[default]
    Uniform,
    /// Three generations, as a production cluster grows by purchases over the years: a quarter
    /// of the nodes older (0.8 of the base model's CPU and disk speed), half the base model, a
    /// quarter newer (1.2). Classes differ by 20–50%: peers a diagnosis compares are no longer
    /// alike, though none is faulty.
    Mixed,
}

impl Hardware {
    pub fn parse(name: &str) -> Option<Hardware> {
        match name.to_ascii_lowercase().as_str() {
            "uniform" => Some(Hardware::Uniform),
            "mixed" => Some(Hardware::Mixed),
            _ => None,
        }
    }

    /// The CPU and disk speed of node `global`'s class against the base model. Drawn from a
    /// stream of its own, so that the uniform cluster's nodes keep the rates they had.
    fn class_speed(self, global: usize, seed: u64) -> f64 {
        match self {
            Hardware::Uniform => 1.0,
            Hardware::Mixed => match Rng::derive(seed, Stream::NodeClass, &[global as u64]).f64() {
                u if u < 0.25 => 0.8,
                u if u < 0.75 => 1.0,
                _ => 1.2,
            },
        }
    }
}

/// The level a 0.18 DataNode logs at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataNodeLog {
    /// As SALSA ran it: each DataXceiver's start and end also log the count of open
    /// connections, which is how a block read's start shows.
    #[default]
    Debug,
    /// Log4j's usual level: a block read shows only where it ends.
    Info,
}

impl DataNodeLog {
    pub fn parse(level: &str) -> Option<DataNodeLog> {
        match level.to_ascii_lowercase().as_str() {
            "debug" => Some(DataNodeLog::Debug),
            "info" => Some(DataNodeLog::Info),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    /// Index in the whole cluster (the M45 history draws experiments' nodes from ~400).
    pub global: usize,
    pub name: String,
    pub ip: String,
    pub rack: usize,
    /// Relative CPU speed per core (1.0 = a 2008 Xeon core).
    pub cpu: f64,
    pub cores: f64,
    pub disk_mb_s: f64,
    pub net_mb_s: f64,
    /// How far the node's clock is off: what its logs and sadc stamp is the true time plus this.
    pub clock_offset_ms: i64,
}

pub fn host_name(global: usize) -> String {
    format!("r{:02}n{:02}", global / RACK_SIZE + 1, global % RACK_SIZE + 1)
}

pub fn host_ip(global: usize) -> String {
    format!("10.1.{}.{}", global / RACK_SIZE + 1, global % RACK_SIZE + 10)
}

impl Node {
    /// The node with this cluster index; its rates depend only on the seed, the index and the
    /// cluster's conditions.
    pub fn new(global: usize, seed: u64, conditions: Conditions) -> Node {
        let mut rng = Rng::derive(seed, Stream::Node, &[global as u64]);
        let class = conditions.hardware.class_speed(global, seed);
        // A stream of its own: the node's rates are the same with skew as without.
        let skew = conditions.clock_skew_ms;
        let clock_offset_ms = match skew {
            0 => 0,
            _ => Rng::derive(seed, Stream::NodeClock, &[global as u64]).range(-skew as f64, skew as f64).round() as i64,
        };
        Node {
            global,
            name: host_name(global),
            ip: host_ip(global),
            rack: global / RACK_SIZE,
            cpu: class * rng.jitter(0.02),
            cores: 4.0,
            // One SATA disk of the era, and gigabit Ethernet less protocol overhead.
            disk_mb_s: class * 60.0 * rng.jitter(0.03),
            net_mb_s: 110.0 * rng.jitter(0.01),
            clock_offset_ms,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Cluster {
    pub nodes: Vec<Node>,
    /// The master (JobTracker, NameNode): not a slave, named for history files.
    pub master: String,
    /// The share of task attempts whose work takes a Pareto (α = 2) multiple of its time, at
    /// most [`STRAGGLER_MAX`]: a heavy tail of durations on healthy nodes (median 1.4×, one
    /// straggler in nine over 3×).
    pub stragglers: f64,
    /// The share of tries of map-output copies that time out and are tried again, between any
    /// two nodes (a TaskTracker too busy to serve in time, a connection reset): the stray fetch
    /// failures of a healthy cluster.
    pub fetch_failures: f64,
    /// Task slots per TaskTracker.
    pub map_slots: u8,
    pub reduce_slots: u8,
}

/// The longest a straggler's work is drawn to take, as a multiple of its time.
pub const STRAGGLER_MAX: f64 = 8.0;

impl Cluster {
    /// A cluster of the given cluster-wide node indices.
    pub fn of(globals: &[usize], seed: u64, conditions: Conditions) -> Cluster {
        Cluster {
            nodes: globals.iter().map(|&g| Node::new(g, seed, conditions)).collect(),
            master: "master".into(),
            stragglers: conditions.stragglers,
            fetch_failures: conditions.fetch_failures,
            map_slots: MAP_SLOTS,
            reduce_slots: REDUCE_SLOTS,
        }
    }

    /// M45's nodes: the paper's 4000 processors over about 500 nodes are 8 cores each. Their
    /// slots are not published; 6 map and 2 reduce slots are our choice, the closest to the
    /// paper's peer similarity of Maps we found (`docs/simulate.md`).
    pub fn m45(mut self) -> Cluster {
        for node in &mut self.nodes {
            node.cores = M45_CORES;
        }
        self.map_slots = M45_MAP_SLOTS;
        self.reduce_slots = M45_REDUCE_SLOTS;
        self
    }

    /// Nodes `0..n` of a cluster under `conditions`.
    pub fn first(n: usize, seed: u64, conditions: Conditions) -> Cluster {
        Cluster::of(&(0..n).collect::<Vec<_>>(), seed, conditions)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node of a host name or a 0-based index, as `--fault F@node` names it.
    pub fn find(&self, name: &str) -> Option<usize> {
        match name.parse::<usize>() {
            Ok(i) if i < self.nodes.len() => Some(i),
            _ => self.nodes.iter().position(|n| n.name == name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_addresses_and_peer_similar_rates() {
        let c = Cluster::first(50, 1, Conditions::default());
        assert_eq!((c.nodes[0].name.as_str(), c.nodes[0].ip.as_str()), ("r01n01", "10.1.1.10"));
        assert_eq!((c.nodes[41].name.as_str(), c.nodes[41].ip.as_str()), ("r02n02", "10.1.2.11"));
        assert_eq!(c.find("r02n02"), Some(41));
        assert_eq!(c.find("3"), Some(3));
        assert_eq!(c.find("r99n01"), None);
        let disks: Vec<f64> = c.nodes.iter().map(|n| n.disk_mb_s).collect();
        let (lo, hi) = disks.iter().fold((f64::MAX, 0f64), |(lo, hi), d| (lo.min(*d), hi.max(*d)));
        assert!(lo > 60.0 * 0.91 && hi < 60.0 * 1.09 && hi - lo > 1.0, "{lo} {hi}");
        assert_eq!(Node::new(7, 1, Conditions::default()).disk_mb_s, c.nodes[7].disk_mb_s);
    }

    /// Mixed hardware: each node's CPU and disk come from its class, in the classes' shares
    /// (a quarter, a half, a quarter, within a few points over 400 nodes); the uniform
    /// cluster's rates are those of the mixed one's base class, node for node.
    #[test]
    fn mixed_hardware_has_three_classes_in_their_shares() {
        let mixed = Conditions { hardware: Hardware::Mixed, ..Conditions::default() };
        let (uniform, mixed) = (Cluster::first(400, 3, Conditions::default()), Cluster::first(400, 3, mixed));
        let mut counts = [0usize; 3];
        for (u, m) in uniform.nodes.iter().zip(&mixed.nodes) {
            let class = m.cpu / u.cpu;
            let index = [0.8, 1.0, 1.2].iter().position(|c| (class - c).abs() < 1e-9).expect("a class");
            assert!((m.disk_mb_s / u.disk_mb_s - class).abs() < 1e-9, "disk of the same class as the CPU");
            assert_eq!(m.net_mb_s, u.net_mb_s);
            counts[index] += 1;
        }
        assert!(
            counts.iter().zip([100, 200, 100]).all(|(n, share): (&usize, usize)| n.abs_diff(share) <= 30),
            "{counts:?}"
        );
    }
}
