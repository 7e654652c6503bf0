//! HDFS as the simulator needs it: block ids, where a block's three replicas go (the 0.18
//! policy: the writer's own DataNode, then one on another rack, then another node of that
//! rack), and the rate of a write pipeline, which is that of its slowest disk or hop.

use super::cluster::Node;
use super::rng::Rng;

pub const BLOCK_MB: f64 = 64.0;
pub const REPLICAS: usize = 3;

/// A block id as the NameNode draws them: a random non-zero long.
pub fn new_block_id(rng: &mut Rng) -> i64 {
    loop {
        let id = rng.next_u64() as i64;
        if id != 0 {
            return id;
        }
    }
}

/// Replica nodes for a block written from `writer` (a node index), skipping DataNodes that
/// `refuses` (a full disk). Fewer than three when the cluster has fewer usable nodes.
pub fn place(writer: usize, nodes: &[Node], rng: &mut Rng, refuses: impl Fn(usize) -> bool) -> Vec<usize> {
    let usable: Vec<usize> = (0..nodes.len()).filter(|&i| !refuses(i)).collect();
    let mut chosen: Vec<usize> = Vec::with_capacity(REPLICAS);
    if usable.is_empty() {
        return chosen;
    }
    let first = if usable.contains(&writer) { writer } else { usable[rng.below(usable.len() as u64) as usize] };
    chosen.push(first);
    let pick = |rng: &mut Rng, chosen: &[usize], want: &dyn Fn(usize) -> bool| -> Option<usize> {
        let fits: Vec<usize> = usable.iter().copied().filter(|i| !chosen.contains(i) && want(*i)).collect();
        (!fits.is_empty()).then(|| fits[rng.below(fits.len() as u64) as usize])
    };
    let first_rack = nodes[first].rack;
    let second = pick(rng, &chosen, &|i| nodes[i].rack != first_rack).or_else(|| pick(rng, &chosen, &|_| true));
    if let Some(second) = second {
        chosen.push(second);
        let rack = nodes[second].rack;
        if let Some(third) = pick(rng, &chosen, &|i| nodes[i].rack == rack).or_else(|| pick(rng, &chosen, &|_| true)) {
            chosen.push(third);
        }
    }
    chosen
}

/// Replicas of an input block written earlier by some other job: three distinct nodes.
pub fn existing_replicas(nodes: &[Node], rng: &mut Rng) -> [u16; 3] {
    let writer = rng.below(nodes.len() as u64) as usize;
    let placed = place(writer, nodes, rng, |_| false);
    let at = |i: usize| placed.get(i).or(placed.first()).copied().unwrap_or(0) as u16;
    [at(0), at(1), at(2)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::cluster::{Cluster, Conditions};

    #[test]
    fn placement_follows_the_policy() {
        let c = Cluster::first(80, 1, Conditions::default());
        let mut rng = Rng::new(5);
        for _ in 0..50 {
            let r = place(3, &c.nodes, &mut rng, |_| false);
            assert_eq!(r.len(), 3);
            assert_eq!(r[0], 3);
            assert_ne!(c.nodes[r[1]].rack, c.nodes[r[0]].rack);
            assert_eq!(c.nodes[r[2]].rack, c.nodes[r[1]].rack);
            assert_ne!(r[1], r[2]);
        }
        let full = place(3, &c.nodes, &mut rng, |i| i == 3);
        assert!(!full.contains(&3) && full.len() == 3);
        let small = Cluster::first(2, 1, Conditions::default());
        assert_eq!(place(0, &small.nodes, &mut rng, |_| false).len(), 2);
        assert!(new_block_id(&mut rng) != 0);
    }
}
