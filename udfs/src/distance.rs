//! Comparing histograms: `jsd_sqrt` (square root of the base-2 Jensen-Shannon divergence, the
//! distance of SALSA and Ganesha) and `kde_smooth` (SALSA's Gaussian-kernel smoothing).
//!
//! The Jensen-Shannon kernel is split so that `indict`/`peer_score` can normalise each node's
//! histogram and its `Σ p·log2 p` once, and pay only `Σ m·log2 m` per pair:
//! JSD(P, Q) = H(M) − (H(P) + H(Q)) / 2 with M = (P + Q) / 2, and H(X) = −Σ x·log2 x.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, Float64Array, ListArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
    scalar_doc_sections::DOC_SECTION_MATH,
};

use crate::args::{
    Literals, check_arity, exec_error, f64_list_type, list_row, require_number, require_number_list, scalar_or_array,
    to_f64_list,
};

/// `a·b + c`, fused into one rounding where the CPU has FMA (`FUSED` is only set in functions
/// compiled for it; elsewhere `mul_add` would be a slow library call).
#[inline(always)]
fn mul_add<const FUSED: bool>(a: f64, b: f64, c: f64) -> f64 {
    if FUSED { a.mul_add(b, c) } else { a * b + c }
}

/// `log2 x` for normal, finite `x > 0`, without branches or calls so that loops over it
/// vectorise: `x = 2^e · m` with `m` in [√½, √2), and `ln m = 2·atanh(s)`, `s = (m − 1)/(m + 1)`,
/// by its series to `s^17` (|s| ≤ 0.172, so the truncation is below 1e-15 relative).
#[inline(always)]
fn log2_normal<const FUSED: bool>(x: f64) -> f64 {
    const MANTISSA: u64 = (1 << 52) - 1;
    const SQRT_HALF: u64 = 0x3fe6_a09e_667f_3bcd;
    // Moving the exponent's cut from 1 to √½ (as musl's `log` does) puts the mantissa in
    // [√½, √2) with integer arithmetic only, no comparison.
    let shifted = x.to_bits().wrapping_add(1.0f64.to_bits() - SQRT_HALF);
    let m = f64::from_bits((shifted & MANTISSA) + SQRT_HALF);
    // The biased exponent as a float without an int-to-float conversion (which SSE2 lacks for
    // 64-bit lanes): placed in the mantissa of 2^52, then 2^52 + 1023 subtracted.
    let e = f64::from_bits((shifted >> 52) | 0x4330_0000_0000_0000) - (4_503_599_627_370_496.0 + 1023.0);
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    // Estrin's scheme: the same sum as Horner's, with a dependency chain a third as long.
    let s4 = s2 * s2;
    let s8 = s4 * s4;
    let fma = mul_add::<FUSED>;
    // This grouping keeps full-width registers; an equivalent one (the high terms nested
    // under one more fma) is split by LLVM into 128-bit halves.
    let series = fma(s4, fma(s2, 1.0 / 7.0, 1.0 / 5.0), fma(s2, 1.0 / 3.0, 1.0))
        + s8 * fma(s8, 1.0 / 17.0, fma(s4, fma(s2, 1.0 / 15.0, 1.0 / 13.0), fma(s2, 1.0 / 11.0, 1.0 / 9.0)));
    fma(2.0 * s * std::f64::consts::LOG2_E, series, e)
}

/// `x·log2 x`, with the limit 0 at 0; below the smallest normal the product is under 1e-305
/// and taken as 0. Both sides are computed and one selected, so zero bins cost no branch.
#[inline(always)]
fn xlog2x<const FUSED: bool>(x: f64) -> f64 {
    let y = x.max(f64::MIN_POSITIVE);
    let term = y * log2_normal::<FUSED>(y);
    if x >= f64::MIN_POSITIVE { term } else { 0.0 }
}

/// `Σ m·log2 m` with `m = (p + q) / 2`, over `LANES` independent sums so that the compiler may
/// vectorise (a single running sum would fix the order of the additions). `Σ p·log2 p` is the
/// same call with `q = p` (`(p + p) / 2 = p` exactly), so identical histograms give exactly the
/// same sums and a distance of exactly 0.
#[inline(always)]
fn mean_x_log2_x_lanes<const LANES: usize, const FUSED: bool>(p: &[f64], q: &[f64]) -> f64 {
    let mut lanes = [0.0; LANES];
    let (p_chunks, q_chunks) = (p.chunks_exact(LANES), q.chunks_exact(LANES));
    let (p_rest, q_rest) = (p_chunks.remainder(), q_chunks.remainder());
    for (a, b) in p_chunks.zip(q_chunks) {
        for i in 0..LANES {
            lanes[i] += xlog2x::<FUSED>(0.5 * (a[i] + b[i]));
        }
    }
    for (i, (a, b)) in p_rest.iter().zip(q_rest).enumerate() {
        lanes[i] += xlog2x::<FUSED>(0.5 * (a + b));
    }
    lanes.iter().sum()
}

/// `Σ (p − q)² / (p + q)` over the bins, the triangular discrimination Δ, in `LANES`
/// independent sums. It bounds the divergence on both sides, Δ / (4 ln 2) ≤ JSD ≤ Δ / 2, for
/// bin by bin the divergence adds `(s / 2)·(1 − h((1 + y) / 2))` with `s = p + q`,
/// `y = (p − q) / s` and `h` the binary entropy in bits, and `1 − h((1 + y) / 2)` is
/// `Σ_k y^2k / (2k (2k − 1) ln 2)`: at least its first term, at most `y²` (the coefficients sum
/// to 1). A division per bin instead of a logarithm: peers are mostly near, and settled by Δ.
#[inline(always)]
fn triangular_lanes<const LANES: usize>(p: &[f64], q: &[f64]) -> f64 {
    // An empty bin adds 0, not NaN.
    let term = |a: f64, b: f64| (a - b) * (a - b) / (a + b).max(f64::MIN_POSITIVE);
    let mut lanes = [0.0; LANES];
    let (p_chunks, q_chunks) = (p.chunks_exact(LANES), q.chunks_exact(LANES));
    let (p_rest, q_rest) = (p_chunks.remainder(), q_chunks.remainder());
    for (a, b) in p_chunks.zip(q_chunks) {
        for i in 0..LANES {
            lanes[i] += term(a[i], b[i]);
        }
    }
    for (i, (a, b)) in p_rest.iter().zip(q_rest).enumerate() {
        lanes[i] += term(*a, *b);
    }
    lanes.iter().sum()
}

/// The lanes of the wide loops below: histograms padded with zero bins to a multiple of this
/// run without a scalar remainder.
pub const WIDE_LANES: usize = 8;

/// The same loop compiled for wider registers with fused multiply-adds: eight lanes fill one
/// AVX-512 or two AVX2 registers, more work per instruction than the SSE2 loop. Chosen at run
/// time, so the crate runs on any x86-64 and needs no `-C target-cpu`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn mean_x_log2_x_avx512(p: &[f64], q: &[f64]) -> f64 {
    mean_x_log2_x_lanes::<WIDE_LANES, true>(p, q)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn mean_x_log2_x_avx2(p: &[f64], q: &[f64]) -> f64 {
    mean_x_log2_x_lanes::<WIDE_LANES, true>(p, q)
}

/// The widest registers the kernels here may use on this CPU. One choice for all of them, so
/// that a pair's divergence is the same number whichever kernel computes it.
#[derive(Clone, Copy)]
enum Registers {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

#[inline]
fn registers() -> Registers {
    #[cfg(target_arch = "x86_64")]
    {
        // std caches the detection; each check is one load.
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma") {
            return Registers::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return Registers::Avx2;
        }
    }
    Registers::Portable
}

#[inline]
pub(crate) fn mean_x_log2_x(p: &[f64], q: &[f64]) -> f64 {
    match registers() {
        // SAFETY: `registers` saw AVX-512F and FMA.
        #[cfg(target_arch = "x86_64")]
        Registers::Avx512 => unsafe { mean_x_log2_x_avx512(p, q) },
        // SAFETY: `registers` saw AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Registers::Avx2 => unsafe { mean_x_log2_x_avx2(p, q) },
        Registers::Portable => mean_x_log2_x_lanes::<4, false>(p, q),
    }
}

/// Whether a pair's `jsd_sqrt` is above `threshold`, judged on the divergence (its square)
/// without a square root except within a hair of the threshold, where the square root decides
/// exactly as `jsd_sqrt_normalised(..) > threshold` does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FarTest {
    threshold: f64,
    /// Divergences above are far, below near; between, the square root decides.
    above: f64,
    below: f64,
    /// Triangular discriminations below are near, above far (see [`triangular_lanes`]);
    /// between, the divergence decides.
    near_below: f64,
    far_above: f64,
}

impl FarTest {
    pub(crate) fn new(threshold: f64) -> Self {
        // Every distance (≥ 0) is above a negative threshold.
        if threshold < 0.0 {
            return Self::deciding(threshold, f64::NEG_INFINITY, f64::NEG_INFINITY);
        }
        // 1e-9 relative is millions of roundings away from the square's; near the subnormals
        // a square loses its precision, and the square root decides every pair.
        let square = threshold * threshold;
        if square < 1e-290 {
            return Self::deciding(threshold, f64::INFINITY, f64::NEG_INFINITY);
        }
        Self::deciding(threshold, square * (1.0 + 1e-9), square * (1.0 - 1e-9))
    }

    fn deciding(threshold: f64, above: f64, below: f64) -> Self {
        // Δ / 2 bounds the divergence from above and Δ / (4 ln 2) from below. The margin
        // (far more than the roundings of either sum) leaves pairs within a hair of the
        // threshold to the divergence, which then decides exactly as it would alone.
        const MARGIN: f64 = 1e-12;
        let near_below = 2.0 * (below - MARGIN);
        let far_above = 4.0 * std::f64::consts::LN_2 * (above + MARGIN);
        Self { threshold, above, below, near_below, far_above }
    }

    /// Whether normalised `p` and `q` (with their `Σ x·log2 x`) are far: settled by the
    /// triangular discrimination where it can be, else by the divergence.
    #[inline(always)]
    fn is_far_pair<const LANES: usize, const FUSED: bool>(
        &self,
        p: &[f64],
        p_log_p: f64,
        q: &[f64],
        q_log_q: f64,
    ) -> bool {
        let triangular = triangular_lanes::<LANES>(p, q);
        if triangular < self.near_below {
            return false;
        }
        if triangular > self.far_above {
            return true;
        }
        self.is_far(0.5 * (p_log_p + q_log_q) - mean_x_log2_x_lanes::<LANES, FUSED>(p, q))
    }

    /// `divergence` as `jsd_sqrt_normalised` computes it before its clamp and square root.
    #[inline(always)]
    fn is_far(&self, divergence: f64) -> bool {
        let x = divergence.clamp(0.0, 1.0);
        x > self.above || (x >= self.below && x.sqrt() > self.threshold)
    }
}

/// The all-pairs loop of `count_far_pairs` for `LANES`-wide registers: for each of the `n`
/// distributions in `flat` (`stride` apart, a multiple of `LANES`), how many others are
/// farther than the test's threshold. Counts are added without branches: whether a pair is
/// far is a coin toss the branch predictor would lose (whether Δ settles it is mostly yes).
#[inline(always)]
fn far_counts_lanes<const LANES: usize, const FUSED: bool>(
    flat: &[f64],
    stride: usize,
    entropies: &[f64],
    test: FarTest,
    far: &mut [usize],
) {
    let n = entropies.len();
    for i in 0..n {
        let p = &flat[i * stride..(i + 1) * stride];
        let mut far_i = 0;
        for j in i + 1..n {
            let q = &flat[j * stride..(j + 1) * stride];
            let is_far = usize::from(test.is_far_pair::<LANES, FUSED>(p, entropies[i], q, entropies[j]));
            far_i += is_far;
            far[j] += is_far;
        }
        far[i] += far_i;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn far_counts_avx512(flat: &[f64], stride: usize, entropies: &[f64], test: FarTest, far: &mut [usize]) {
    far_counts_lanes::<WIDE_LANES, true>(flat, stride, entropies, test, far)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn far_counts_avx2(flat: &[f64], stride: usize, entropies: &[f64], test: FarTest, far: &mut [usize]) {
    far_counts_lanes::<WIDE_LANES, true>(flat, stride, entropies, test, far)
}

/// For each of the `n` normalised distributions laid out in `flat` (each `stride` wide, a
/// multiple of [`WIDE_LANES`], with its `Σ p·log2 p` in `entropies`), how many of the others
/// are farther than the test's threshold: every pair computed once, in one call compiled for
/// the widest registers the CPU has.
pub(crate) fn far_counts(flat: &[f64], stride: usize, entropies: &[f64], test: FarTest) -> Vec<usize> {
    let mut far = vec![0; entropies.len()];
    match registers() {
        // SAFETY: `registers` saw AVX-512F and FMA.
        #[cfg(target_arch = "x86_64")]
        Registers::Avx512 => unsafe { far_counts_avx512(flat, stride, entropies, test, &mut far) },
        // SAFETY: `registers` saw AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Registers::Avx2 => unsafe { far_counts_avx2(flat, stride, entropies, test, &mut far) },
        Registers::Portable => far_counts_lanes::<4, false>(flat, stride, entropies, test, &mut far),
    }
    far
}

/// The sum of `raw`'s counts, or `None` when it is no distribution: empty, all zero, or with
/// a negative, NaN or infinite count.
pub(crate) fn distribution_total(raw: &[f64]) -> Option<f64> {
    let mut sum = 0.0;
    for &x in raw {
        if !(0.0..f64::INFINITY).contains(&x) {
            return None;
        }
        sum += x;
    }
    (sum > 0.0 && sum.is_finite()).then_some(sum)
}

/// Normalises `raw` into `out` (sum 1) and returns `Σ p·log2 p`; `None` when the histogram is
/// empty, all zero, or has a negative, NaN or infinite count (no distribution to compare).
pub fn normalise(raw: &[f64], out: &mut Vec<f64>) -> Option<f64> {
    let sum = distribution_total(raw)?;
    out.clear();
    out.extend(raw.iter().map(|&x| x / sum));
    Some(mean_x_log2_x(out, out))
}

/// The distance of two normalised histograms of equal length, given their `Σ p·log2 p`
/// (from [`normalise`]). Rounding can make the divergence a hair below 0 or above 1; it is
/// clamped so the result stays in [0, 1].
#[inline]
pub fn jsd_sqrt_normalised(p: &[f64], p_log_p: f64, q: &[f64], q_log_q: f64) -> f64 {
    divergence_normalised(p, p_log_p, q, q_log_q).clamp(0.0, 1.0).sqrt()
}

/// The Jensen-Shannon divergence itself, before the clamp and square root of
/// [`jsd_sqrt_normalised`].
#[inline]
fn divergence_normalised(p: &[f64], p_log_p: f64, q: &[f64], q_log_q: f64) -> f64 {
    0.5 * (p_log_p + q_log_q) - mean_x_log2_x(p, q)
}

/// Whether two normalised histograms are farther apart than `test`'s threshold, exactly as
/// `jsd_sqrt_normalised(..) > threshold`.
#[inline]
pub(crate) fn is_far_normalised(p: &[f64], p_log_p: f64, q: &[f64], q_log_q: f64, test: FarTest) -> bool {
    match registers() {
        // SAFETY: `registers` saw AVX-512F and FMA.
        #[cfg(target_arch = "x86_64")]
        Registers::Avx512 => unsafe { is_far_avx512(p, p_log_p, q, q_log_q, test) },
        // SAFETY: `registers` saw AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Registers::Avx2 => unsafe { is_far_avx2(p, p_log_p, q, q_log_q, test) },
        Registers::Portable => test.is_far_pair::<4, false>(p, p_log_p, q, q_log_q),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn is_far_avx512(p: &[f64], p_log_p: f64, q: &[f64], q_log_q: f64, test: FarTest) -> bool {
    test.is_far_pair::<WIDE_LANES, true>(p, p_log_p, q, q_log_q)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn is_far_avx2(p: &[f64], p_log_p: f64, q: &[f64], q_log_q: f64, test: FarTest) -> bool {
    test.is_far_pair::<WIDE_LANES, true>(p, p_log_p, q, q_log_q)
}

/// `jsd_sqrt` of two raw histograms, `None` when either is not a distribution.
pub fn jsd_sqrt_raw(p: &[f64], q: &[f64]) -> Option<f64> {
    let (mut np, mut nq) = (Vec::new(), Vec::new());
    let hp = normalise(p, &mut np)?;
    let hq = normalise(q, &mut nq)?;
    Some(jsd_sqrt_normalised(&np, hp, &nq, hq))
}

fn list_arrays(args: &ScalarFunctionArgs, count: usize) -> Result<Vec<ListArray>> {
    ColumnarValue::values_to_arrays(&args.args[..count])?.iter().map(to_f64_list).collect()
}

/// `jsd_sqrt(p, q)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsdSqrt {
    signature: Signature,
}

impl Default for JsdSqrt {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

static JSD_SQRT_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_MATH,
        "The square root of the base-2 Jensen-Shannon divergence of the two histograms, each normalised \
         to sum 1: a distance in [0, 1], 0 for the same shape, 1 for disjoint ones (SALSA's and \
         Ganesha's distance). NULL when either list is NULL, empty, all zero, or has a negative, NaN or \
         infinite count; NULL items count as 0. Lists of different lengths are an error.",
        "jsd_sqrt(p, q)",
    )
    .with_sql_example(concat!(
        "SELECT jsd_sqrt([1, 0], [0, 1]), jsd_sqrt([18, 12, 13, 17], [11, 15, 16, 4]);\n",
        "-- 1 0.253259097"
    ))
    .with_argument("p", "List of non-negative numbers (a histogram).")
    .with_argument("q", "List of non-negative numbers with as many bins as `p`.")
    .build()
});

impl ScalarUDFImpl for JsdSqrt {
    fn name(&self) -> &str {
        "jsd_sqrt"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name(), t, 2, 2)?;
        Ok(vec![require_number_list(self.name(), 0, "p", &t[0])?, require_number_list(self.name(), 1, "q", &t[1])?])
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let lists = list_arrays(&args, 2)?;
        let (p, q) = (&lists[0], &lists[1]);
        let (mut sp, mut sq, mut np, mut nq) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut out = Vec::with_capacity(p.len());
        for row in 0..p.len() {
            let (Some(a), Some(b)) = (list_row(p, row, &mut sp), list_row(q, row, &mut sq)) else {
                out.push(None);
                continue;
            };
            if a.len() != b.len() {
                return Err(exec_error(
                    self.name(),
                    format!(
                        "p has {} bins and q has {} bins (row {row}); histograms must share their bins",
                        a.len(),
                        b.len()
                    ),
                ));
            }
            out.push(match (normalise(a, &mut np), normalise(b, &mut nq)) {
                (Some(hp), Some(hq)) => Some(jsd_sqrt_normalised(&np, hp, &nq, hq)),
                _ => None,
            });
        }
        scalar_or_array(&args.args, Arc::new(Float64Array::from(out)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&JSD_SQRT_DOC)
    }
}

/// Gaussian-kernel smoothing with a standard deviation of `sigma` bins. Each bin's count is
/// spread over the bins within 4·sigma, with weights renormalised to sum 1 over the bins that
/// exist, so the total count is kept (nothing leaks past the ends). NaN and infinite counts
/// propagate as in arithmetic. One smoother serves a whole batch: its weights are computed
/// once, not once a row (the exponentials and their vector would be most of a row's cost),
/// and so are each bin's renormalising sums, for the width of the last histogram.
pub(crate) struct Kde {
    sigma: f64,
    /// exp(-d²/2σ²) for d = 0, 1, …, as far as the widest histogram so far has needed.
    weights: Vec<f64>,
    /// For each bin of a histogram `norms.len()` wide, the sum of its kernel's weights over the
    /// bins that exist.
    norms: Vec<f64>,
}

impl Kde {
    pub(crate) fn new(sigma: f64) -> Kde {
        Kde { sigma, weights: Vec::new(), norms: Vec::new() }
    }

    pub(crate) fn smooth(&mut self, hist: &[f64], out: &mut Vec<f64>) {
        let n = hist.len();
        out.clear();
        if self.sigma == 0.0 || n < 2 {
            out.extend_from_slice(hist);
            return;
        }
        out.resize(n, 0.0);
        let reach = ((4.0 * self.sigma).ceil() as usize).min(n - 1);
        let two_variance = 2.0 * self.sigma * self.sigma;
        while self.weights.len() <= reach {
            let d = self.weights.len() as f64;
            self.weights.push((-(d * d) / two_variance).exp());
        }
        let kernel = &self.weights[..=reach];
        let window = |j: usize| (j.saturating_sub(reach), (j + reach).min(n - 1));
        if self.norms.len() != n {
            self.norms = (0..n)
                .map(|j| {
                    let (lo, hi) = window(j);
                    (lo..=hi).map(|i| kernel[i.abs_diff(j)]).sum()
                })
                .collect();
        }
        for (j, &count) in hist.iter().enumerate() {
            if count == 0.0 {
                continue;
            }
            let (lo, hi) = window(j);
            let share = count / self.norms[j];
            for i in lo..=hi {
                out[i] += share * kernel[i.abs_diff(j)];
            }
        }
    }
}

/// `kde_smooth(hist, bandwidth_bins)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct KdeSmooth {
    signature: Signature,
}

impl Default for KdeSmooth {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl KdeSmooth {
    const FUNC: &'static str = "kde_smooth";

    fn bandwidth(lits: &[Option<ScalarValue>]) -> Result<f64> {
        Literals { func: Self::FUNC, lits }.number(1, "bandwidth_bins", "a non-negative number literal", |x| x >= 0.0)
    }
}

static KDE_SMOOTH_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_MATH,
        "Gaussian-kernel smoothing of a histogram with a standard deviation of `bandwidth_bins` bins \
         (SALSA's kernel density estimate): each bin is spread over the bins within 4 standard \
         deviations, renormalised at the ends so the total is kept; a bandwidth of 0 returns the input. \
         A NULL list gives NULL; NULL items count as 0; NaN and infinities propagate.",
        "kde_smooth(hist, bandwidth_bins)",
    )
    .with_sql_example(concat!(
        "SELECT kde_smooth([0, 0, 10, 0, 0], 1);\n",
        "-- [0.544886845, 2.44201342, 4.026199469, 2.44201342, 0.544886845]"
    ))
    .with_argument("hist", "List of numbers (a histogram).")
    .with_argument("bandwidth_bins", "Non-negative number literal: the kernel's standard deviation in bins.")
    .build()
});

impl ScalarUDFImpl for KdeSmooth {
    fn name(&self) -> &str {
        Self::FUNC
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(Self::FUNC, t, 2, 2)?;
        require_number(Self::FUNC, 1, "bandwidth_bins", &t[1])?;
        Ok(vec![require_number_list(Self::FUNC, 0, "hist", &t[0])?, t[1].clone()])
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(f64_list_type())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        // Planning-time check that the bandwidth is a usable literal.
        let lits: Vec<Option<ScalarValue>> = args.scalar_arguments.iter().map(|v| v.cloned()).collect();
        Self::bandwidth(&lits)?;
        Ok(Arc::new(Field::new(self.name(), f64_list_type(), true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let sigma = match &args.args[1] {
            ColumnarValue::Scalar(v) => Self::bandwidth(&[None, Some(v.clone())])?,
            // A host calling through DataFusion's FFI passes every argument as an array; planning
            // (`return_field_from_args`) has seen that this one is a literal.
            ColumnarValue::Array(a) if !a.is_empty() => {
                Self::bandwidth(&[None, Some(ScalarValue::try_from_array(a, 0)?)])?
            }
            ColumnarValue::Array(_) => Self::bandwidth(&[None, None])?,
        };
        let lists = list_arrays(&args, 1)?;
        let hists = &lists[0];
        let (mut scratch, mut smoothed) = (Vec::new(), Vec::new());
        let mut values = Vec::with_capacity(hists.values().len());
        let mut kde = Kde::new(sigma);
        for row in 0..hists.len() {
            if let Some(h) = list_row(hists, row, &mut scratch) {
                kde.smooth(h, &mut smoothed);
                values.extend_from_slice(&smoothed);
            } else {
                // A NULL list keeps its (possibly non-empty) slot so the offsets stay valid.
                let offsets = hists.value_offsets();
                values.extend(std::iter::repeat_n(0.0, (offsets[row + 1] - offsets[row]) as usize));
            }
        }
        // Offsets from 0: a sliced input's offsets start wherever its slice began, while
        // `values` holds this slice's rows only.
        let lengths = (0..hists.len()).map(|row| hists.value_length(row) as usize);
        let out = ListArray::new(
            Arc::new(Field::new_list_field(DataType::Float64, true)),
            datafusion::arrow::buffer::OffsetBuffer::from_lengths(lengths),
            Arc::new(Float64Array::from(values)) as ArrayRef,
            hists.nulls().cloned(),
        );
        scalar_or_array(&args.args, Arc::new(out))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&KDE_SMOOTH_DOC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{ctx, f64_column, f64_lists, query_err};

    /// The test on divergences agrees with comparing their square roots, at the edges too:
    /// a divergence exactly the threshold's square and its neighbours, thresholds below 0,
    /// at 0 and from 1 up, divergences out of [0, 1] and NaN.
    #[test]
    fn far_test_agrees_with_the_square_root() {
        let mut checked = 0;
        for threshold in [-0.5, 0.0, 1e-160, 1e-8, 0.1, 0.3, 0.5, 0.7, 0.99, 1.0, 1.5] {
            let test = FarTest::new(threshold);
            let square = threshold * threshold;
            let mut divergences = vec![-0.1, 0.0, 1e-300, 0.25, 0.5, 1.0, 1.2, f64::NAN, square];
            let (mut up, mut down) = (square, square);
            for _ in 0..64 {
                up = up.next_up();
                down = down.next_down();
                divergences.extend([up, down]);
            }
            for x in divergences {
                assert_eq!(
                    test.is_far(x),
                    x.clamp(0.0, 1.0).sqrt() > threshold,
                    "threshold {threshold}, divergence {x:e}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 11 * 137);
    }

    /// Δ / (4 ln 2) ≤ JSD ≤ Δ / 2 on random pairs of every sparsity and at both ends (one-hot
    /// pairs: disjoint meets the upper bound, identical gives 0 for all three), and a pair is far
    /// by `is_far_normalised` exactly when its computed distance is above the threshold, also at a
    /// threshold equal to that distance or a hair on either side of it.
    #[test]
    fn triangular_bounds_and_pair_decisions() {
        let mut uniform = crate::test_util::uniform(0x2545_f491_4f6c_dd1d);
        let (mut p, mut q) = (Vec::new(), Vec::new());
        let mut settled_by_bound = 0;
        for case in 0..2000 {
            let sparsity = (case % 5) as f64 / 5.0;
            let mut draw = || {
                let raw: Vec<f64> = (0..16).map(|_| if uniform() < sparsity { 0.0 } else { uniform() }).collect();
                if raw.iter().all(|&x| x == 0.0) { vec![1.0; 16] } else { raw }
            };
            let (a, b) = (draw(), draw());
            let (hp, hq) = (normalise(&a, &mut p).unwrap(), normalise(&b, &mut q).unwrap());
            let triangular = triangular_lanes::<WIDE_LANES>(&p, &q);
            let divergence = divergence_normalised(&p, hp, &q, hq);
            let lower = triangular / (4.0 * std::f64::consts::LN_2);
            assert!(lower <= divergence + 1e-15 && divergence <= triangular / 2.0 + 1e-15, "{a:?} {b:?}");
            let distance = jsd_sqrt_normalised(&p, hp, &q, hq);
            for threshold in [distance, distance.next_up(), distance.next_down(), 0.3, 0.5, 0.7] {
                let test = FarTest::new(threshold);
                // The kernel `jsd_sqrt_normalised` used: fused or not, the last bits may differ.
                let far = is_far_normalised(&p, hp, &q, hq, test);
                assert_eq!(far, distance > threshold, "{a:?} {b:?} at {threshold}");
                settled_by_bound += usize::from(triangular < test.near_below || triangular > test.far_above);
            }
        }
        // The bound settles most pairs at the fixed thresholds, none at the distance itself.
        assert!(settled_by_bound > 3000, "{settled_by_bound}");
        let one_hot = |i: usize| (0..16).map(|b| f64::from(u8::from(b == i))).collect::<Vec<_>>();
        let (h0, h1) = (normalise(&one_hot(0), &mut p).unwrap(), normalise(&one_hot(1), &mut q).unwrap());
        assert_eq!(divergence_normalised(&p, h0, &q, h1), 1.0);
        assert_eq!(triangular_lanes::<WIDE_LANES>(&p, &q), 2.0);
        assert_eq!(divergence_normalised(&p, h0, &p, h0), 0.0);
        assert_eq!(triangular_lanes::<WIDE_LANES>(&p, &p), 0.0);
    }

    #[test]
    fn log2_is_accurate() {
        let mut x = 1e-300;
        while x < 1e300 {
            for y in [x, x * std::f64::consts::FRAC_1_SQRT_2, x * std::f64::consts::SQRT_2, x * 1.1] {
                // Both the plain and the fused form (`mul_add` is exact in software where the
                // CPU lacks FMA, so this checks the fused arithmetic on any machine).
                for got in [log2_normal::<false>(y), log2_normal::<true>(y)] {
                    let want = y.log2();
                    assert!((got - want).abs() <= 4.0 * f64::EPSILON * want.abs().max(1.0), "{y}: {got} vs {want}");
                }
            }
            x *= 3.7;
        }
        assert_eq!(log2_normal::<false>(1.0), 0.0);
        assert_eq!(log2_normal::<true>(1.0), 0.0);
        assert_eq!(xlog2x::<false>(0.0), 0.0);
        assert_eq!(xlog2x::<true>(1e-320), 0.0);
    }

    #[test]
    fn disjoint_and_identical() {
        assert_eq!(jsd_sqrt_raw(&[1.0, 0.0], &[0.0, 1.0]), Some(1.0));
        assert_eq!(jsd_sqrt_raw(&[3.0, 1.0, 0.0], &[6.0, 2.0, 0.0]), Some(0.0));
    }

    #[test]
    fn not_distributions_give_none() {
        assert_eq!(jsd_sqrt_raw(&[], &[]), None);
        assert_eq!(jsd_sqrt_raw(&[0.0, 0.0], &[1.0, 1.0]), None);
        assert_eq!(jsd_sqrt_raw(&[1.0, -1.0, 2.0], &[1.0, 1.0, 1.0]), None);
        assert_eq!(jsd_sqrt_raw(&[1.0, f64::NAN], &[1.0, 1.0]), None);
        assert_eq!(jsd_sqrt_raw(&[1.0, f64::INFINITY], &[1.0, 1.0]), None);
    }

    /// Reference values from SciPy 1.17.1 (NumPy 2.4.6), computed with
    /// `scipy.spatial.distance.jensenshannon(p, q, base=2)` on the lists below, which were drawn
    /// with `numpy.random.default_rng(7).integers(0, 20, n)`.
    #[test]
    fn matches_scipy() {
        for (p, q, expected) in SCIPY_CASES {
            let got = jsd_sqrt_raw(p, q).unwrap();
            assert!((got - expected).abs() < 1e-12, "{p:?} {q:?}: {got} vs {expected}");
        }
    }

    /// Every compiled form of the kernel (plain four lanes, fused eight lanes) gives the sums of
    /// the one this CPU runs, up to rounding, so no machine misses the SciPy tolerance.
    #[test]
    fn kernel_forms_agree() {
        for (p, q, _) in SCIPY_CASES {
            let dispatched = mean_x_log2_x(p, q);
            for form in [mean_x_log2_x_lanes::<4, false>(p, q), mean_x_log2_x_lanes::<8, true>(p, q)] {
                assert!((form - dispatched).abs() < 1e-13 * dispatched.abs().max(1.0), "{form} vs {dispatched}");
            }
        }
    }

    #[rustfmt::skip]
    const SCIPY_CASES: &[(&[f64], &[f64], f64)] = &[
        (&[18.0, 12.0, 13.0, 17.0], &[11.0, 15.0, 16.0, 4.0], 0.25325909739682695),
        (&[1.0, 6.0, 5.0, 17.0, 18.0, 0.0, 9.0, 16.0], &[2.0, 15.0, 2.0, 9.0, 16.0, 6.0, 6.0, 5.0], 0.3464923973163965),
        (&[14.0, 5.0, 19.0, 8.0, 9.0, 10.0, 11.0, 11.0, 10.0, 19.0, 16.0, 15.0, 14.0, 12.0, 6.0, 19.0], &[9.0, 4.0, 16.0, 3.0, 17.0, 12.0, 2.0, 0.0, 8.0, 0.0, 2.0, 10.0, 19.0, 9.0, 16.0, 18.0], 0.3841943314294589),
        (&[16.0, 12.0, 8.0, 10.0, 5.0, 9.0, 7.0, 4.0, 19.0, 0.0, 1.0, 3.0, 19.0, 13.0, 17.0, 4.0, 14.0, 7.0, 9.0, 0.0, 12.0, 16.0, 13.0, 3.0, 10.0, 5.0, 19.0, 17.0, 3.0, 10.0, 18.0, 16.0], &[14.0, 12.0, 0.0, 14.0, 9.0, 1.0, 4.0, 10.0, 14.0, 10.0, 12.0, 17.0, 13.0, 7.0, 12.0, 11.0, 2.0, 1.0, 13.0, 7.0, 11.0, 6.0, 4.0, 3.0, 7.0, 16.0, 8.0, 7.0, 11.0, 19.0, 7.0, 11.0], 0.3926433582900835),
        (&[8.0, 12.0, 8.0, 12.0, 10.0, 13.0, 19.0, 3.0, 11.0, 8.0, 7.0, 4.0, 1.0, 8.0, 16.0, 1.0, 8.0, 19.0, 19.0, 4.0, 0.0, 13.0, 0.0, 6.0, 9.0, 17.0, 1.0, 13.0, 10.0, 2.0, 16.0, 16.0], &[9.0, 18.0, 12.0, 18.0, 19.0, 11.0, 5.0, 2.0, 11.0, 3.0, 15.0, 18.0, 4.0, 11.0, 0.0, 3.0, 7.0, 17.0, 19.0, 12.0, 11.0, 11.0, 1.0, 7.0, 19.0, 8.0, 4.0, 4.0, 14.0, 0.0, 19.0, 17.0], 0.32752826400113927),
    ];

    #[test]
    fn kde_keeps_mass_and_spreads_symmetrically() {
        let mut out = Vec::new();
        let mut kde = Kde::new(1.0);
        kde.smooth(&[0.0, 0.0, 10.0, 0.0, 0.0], &mut out);
        assert!((out.iter().sum::<f64>() - 10.0).abs() < 1e-12);
        assert!((out[1] - out[3]).abs() < 1e-12 && out[2] > out[1] && out[1] > out[0]);
        // Hand-computed: weights e^0, e^-1/2, e^-2 normalised over the 5 bins.
        let norm = 1.0 + 2.0 * (-0.5f64).exp() + 2.0 * (-2.0f64).exp();
        assert!((out[2] - 10.0 / norm).abs() < 1e-12);
        let wide = out.clone();
        // A smoother that saw a narrow histogram first grows its weights for a wider one.
        let mut grown = Kde::new(1.0);
        grown.smooth(&[0.0, 1.0], &mut out);
        grown.smooth(&[0.0, 0.0, 10.0, 0.0, 0.0], &mut out);
        assert_eq!(out, wide);
        kde.smooth(&[1.0, 0.0, 0.0, 0.0], &mut out);
        assert!((out.iter().sum::<f64>() - 1.0).abs() < 1e-12, "edge bins keep their mass");
        // Back to five bins after four: the sums of the kernel are those of five bins again.
        kde.smooth(&[0.0, 0.0, 10.0, 0.0, 0.0], &mut out);
        assert_eq!(out, wide);
        Kde::new(0.0).smooth(&[1.0, 2.0], &mut out);
        assert_eq!(out, [1.0, 2.0]);
    }

    #[tokio::test]
    async fn sql_nulls_and_errors() {
        let ctx = ctx(1);
        let got = f64_column(
            &ctx,
            "SELECT jsd_sqrt(p, q) FROM (VALUES ([1, 0], [0, 1]), ([1, 1], NULL), ([], []), ([0, 0], [1, 2]), ([1, NULL], [1, 0])) AS v(p, q)",
        )
        .await;
        assert_eq!(got, [Some(1.0), None, None, None, Some(0.0)]);
        let err = query_err(&ctx, "SELECT jsd_sqrt([1, 2], [1, 2, 3])").await;
        assert!(err.contains("jsd_sqrt: p has 2 bins and q has 3 bins"), "{err}");
        let err = query_err(&ctx, "SELECT jsd_sqrt(1, [1])").await;
        assert!(err.contains("jsd_sqrt: argument 1 (p) must be a list of numbers"), "{err}");
        let smoothed = f64_lists(&ctx, "SELECT kde_smooth(h, 0.5) FROM (VALUES ([0, 4, 0]), (NULL)) AS v(h)").await;
        assert_eq!(smoothed.len(), 2);
        assert!(smoothed[1].is_none());
        // A slice of a batch (OFFSET slices it) whose offsets do not start at 0.
        let sliced = f64_lists(
            &ctx,
            "SELECT kde_smooth(h, 0) FROM (SELECT h FROM (VALUES ([1, 2]), ([3, 4, 5]), ([6]), ([7, 8])) AS v(h) LIMIT 2 OFFSET 1)",
        )
        .await;
        assert_eq!(sliced, [Some(vec![3.0, 4.0, 5.0]), Some(vec![6.0])]);
        let err = query_err(&ctx, "SELECT kde_smooth(h, b) FROM (VALUES ([0, 4, 0], 1.0)) AS v(h, b)").await;
        assert!(err.contains("kde_smooth: argument 2 (bandwidth_bins) must be a non-negative number literal"), "{err}");
    }
}
