//! Deterministic random numbers: xoshiro256++ seeded through SplitMix64. Written here rather
//! than taken from `rand`/`rand_pcg` so that a seed keeps giving the same bytes whatever version
//! of a dependency gets compiled in (`rand` has changed its value streams between releases), and
//! because the simulator needs independent streams per entity, which is one hash here.

/// What a stream is for, so that two entities with the same numbers still draw apart.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    Node = 1,
    FaultNode,
    Jobs,
    Schedule,
    Map,
    Reduce,
    Copy,
    ReduceEnd,
    Input,
    Sadc,
    History,
    Experiment,
    NodeClass,
    NodeClock,
    SadcNoise,
}

#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        Rng { s: [splitmix(&mut x), splitmix(&mut x), splitmix(&mut x), splitmix(&mut x)] }
    }

    /// The stream of one entity of a run (a node, a job, a task attempt), keyed by a path of
    /// numbers: it draws the same values whatever else the run does, so that a faulty run and
    /// its control differ by the fault and not by reshuffled noise.
    pub fn derive(seed: u64, stream: Stream, path: &[u64]) -> Rng {
        let mut x = seed ^ (stream as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut h = splitmix(&mut x);
        for &p in path {
            let mut y = h ^ p.wrapping_mul(0xD6E8_FEB8_6659_FD93);
            h = splitmix(&mut y);
        }
        Rng::new(h)
    }

    pub fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = self.s;
        let out = s0.wrapping_add(s3).rotate_left(23).wrapping_add(s0);
        let t = s1 << 17;
        let (mut a, mut b, mut c, mut d) = (s0, s1, s2, s3);
        c ^= a;
        d ^= b;
        b ^= c;
        a ^= d;
        c ^= t;
        d = d.rotate_left(45);
        self.s = [a, b, c, d];
        out
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in 0..n (n ≥ 1; 0 gives 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f64()
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    /// Standard normal (Box–Muller; one value per call keeps streams simple to reason about).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.f64();
        let v = self.f64();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// A multiplicative jitter around 1 with relative spread `sd`, cut at ±3 sd so that
    /// no draw turns a rate negative.
    pub fn jitter(&mut self, sd: f64) -> f64 {
        1.0 + sd * self.normal().clamp(-3.0, 3.0)
    }

    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.f64()).ln()
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_independent() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let mut r = Rng::new(7);
        assert_eq!(a, (0..4).map(|_| r.next_u64()).collect::<Vec<_>>());
        assert_ne!(Rng::derive(7, Stream::Map, &[1, 2]).next_u64(), Rng::derive(7, Stream::Map, &[2, 1]).next_u64());
        assert_ne!(Rng::derive(7, Stream::Map, &[1, 2]).next_u64(), Rng::derive(7, Stream::Reduce, &[1, 2]).next_u64());
        assert_eq!(Rng::derive(7, Stream::Map, &[1, 2]).next_u64(), Rng::derive(7, Stream::Map, &[1, 2]).next_u64());
    }

    #[test]
    fn moments_are_right() {
        let mut r = Rng::new(42);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01 && (var - 1.0).abs() < 0.02, "{mean} {var}");
        let below: u64 = (0..n).map(|_| r.below(10)).sum();
        assert!((below as f64 / n as f64 - 4.5).abs() < 0.03);
        let e = (0..n).map(|_| r.exp(3.0)).sum::<f64>() / n as f64;
        assert!((e - 3.0).abs() < 0.05, "{e}");
    }
}
