//! Peer comparison window functions: `indict(hist, threshold)` and `peer_score(hist,
//! threshold)` over `PARTITION BY` the peer group (e.g. a job's nodes at one time step).
//!
//! The evaluator sees the whole partition once (like `lead`/`lag`): it normalises every
//! histogram once, computes each pair's `jsd_sqrt` at most once (most pairs are settled by the
//! triangle inequality, see [`count_far_pairs`]), and counts for every row how many of its
//! peers are farther than the threshold. Any window frame or ORDER BY is ignored; the peers
//! are always the whole partition.
//!
//! Peers of a row are the other rows of the partition whose histogram is a distribution (not
//! NULL, empty, all zero, or with negative/NaN/infinite counts, see `jsd_sqrt`). Such rows get
//! NULL and are nobody's peer. A row with no peers gets NULL.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Float64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    Documentation, PartitionEvaluator, Signature, Volatility, WindowUDFImpl,
    window_doc_sections::DOC_SECTION_ANALYTICAL,
};

use crate::args::{
    Literals, check_arity, list_row, physical_literals, require_number, require_number_list_uncast, to_f64_list,
};
use crate::distance::{
    FarTest, WIDE_LANES, distribution_total, far_counts, is_far_normalised, jsd_sqrt_normalised, mean_x_log2_x,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Output {
    /// true when farther than the threshold from more than half of the peers.
    Indict,
    /// The share of peers farther than the threshold.
    Score,
}

/// `indict` and `peer_score`, which differ only in what they make of the counts.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PeerComparison {
    signature: Signature,
    output: Output,
}

impl Output {
    fn name(self) -> &'static str {
        match self {
            Output::Indict => "indict",
            Output::Score => "peer_score",
        }
    }
}

impl PeerComparison {
    pub fn indict() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable), output: Output::Indict }
    }

    pub fn peer_score() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable), output: Output::Score }
    }
}

/// For each row, the number of peers farther than `threshold` and the number of peers, or
/// `None` for rows that are not distributions. Each pair's distance is computed at most once. `func`
/// names the caller in errors.
pub fn count_far_peers(func: &str, hists: &ArrayRef, threshold: f64) -> Result<Vec<Option<(usize, usize)>>> {
    let lists = to_f64_list(hists)?;
    let mut scratch = Vec::new();
    // The distributions, one after another in `flat`, each padded with zero bins to a whole
    // number of 8-lane blocks: a zero bin adds exactly 0 to `Σ m·log2 m`, and each row's
    // `Σ p·log2 p` and the pair loop then run on full vectors only (12 bins took one vector and
    // four scalar steps).
    let mut width = None;
    // Sized once: a partition is often a dozen rows, and growing three vectors by doubling cost
    // a tenth of this function. The bins of these rows only: a window hands each partition a
    // slice, whose `values()` is the whole column's.
    let offsets = lists.value_offsets();
    let bins = (offsets[lists.len()] - offsets[0]) as usize;
    let mut flat = Vec::with_capacity(bins + lists.len() * WIDE_LANES);
    let mut valid = Vec::with_capacity(lists.len());
    let mut entropies = Vec::with_capacity(lists.len());
    for row in 0..lists.len() {
        let Some(h) = list_row(&lists, row, &mut scratch) else { continue };
        let Some(total) = distribution_total(h) else { continue };
        match width {
            None => width = Some(h.len()),
            Some(w) if w != h.len() => {
                let first = valid.first().copied().unwrap_or_default();
                return Err(crate::args::exec_error(
                    func,
                    format!("rows {first} and {row} of a partition have {w} and {} bins", h.len()),
                ));
            }
            Some(_) => {}
        }
        let start = flat.len();
        flat.extend(h.iter().map(|&x| x / total));
        flat.resize(flat.len().next_multiple_of(WIDE_LANES), 0.0);
        let p = &flat[start..];
        entropies.push(mean_x_log2_x(p, p));
        valid.push(row);
    }
    let stride = width.unwrap_or(0).next_multiple_of(WIDE_LANES);
    let far = count_far_pairs(&flat, stride, &entropies, threshold);
    let peers = valid.len().saturating_sub(1);
    let mut counts = vec![None; lists.len()];
    if peers > 0 {
        for (&row, &far) in valid.iter().zip(&far) {
            counts[row] = Some((far, peers));
        }
    }
    Ok(counts)
}

/// Margin kept from the threshold when the triangle inequality decides a pair: computed
/// distances near 0 carry errors up to ~1e-8 (the square root of a rounding error).
const BOUND_MARGIN: f64 = 1e-6;

/// Rows from which bounding pays: below, computing every pair costs less than sorting by the
/// pivot (Kahuna-WB over the 5-month history, ~100 K small peer groups, was 6% slower with
/// bounds everywhere).
const BOUND_FROM_ROWS: usize = 32;

/// For each of the `n` normalised distributions laid out in `flat` (each `stride` wide, with
/// its `Σ p·log2 p` in `entropies`), how many of the others are farther than `threshold`.
///
/// `jsd_sqrt` is a metric (Endres & Schindelin 2003), so each row's distance `a` to one pivot
/// (the partition's mean distribution) bounds its distance to any other row `b`:
/// `|a - b| ≤ d ≤ a + b`. Rows sorted by `a`, each row's later peers fall in three runs: near
/// by the upper bound, undecided, far by the lower bound. Only the undecided are computed; in a
/// peer group most nodes sit close to the mean and most pairs are settled without a distance.
/// Small groups compute every pair.
fn count_far_pairs(flat: &[f64], stride: usize, entropies: &[f64], threshold: f64) -> Vec<usize> {
    let n = entropies.len();
    let dist = |i: usize| &flat[i * stride..(i + 1) * stride];
    let test = FarTest::new(threshold);
    if n < BOUND_FROM_ROWS {
        return far_counts(flat, stride, entropies, test);
    }
    let mut pivot = vec![0.0; stride];
    let weight = 1.0 / n as f64;
    for i in 0..n {
        for (m, x) in pivot.iter_mut().zip(dist(i)) {
            *m += x * weight;
        }
    }
    let pivot_entropy = mean_x_log2_x(&pivot, &pivot);
    let to_pivot: Vec<f64> = (0..n).map(|i| jsd_sqrt_normalised(dist(i), entropies[i], &pivot, pivot_entropy)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&x, &y| to_pivot[x].total_cmp(&to_pivot[y]));
    let sorted: Vec<f64> = order.iter().map(|&i| to_pivot[i]).collect();
    // By position in `order`: far peers counted directly, and (`far_from`) the rows from which on
    // every later row is far from an earlier one, summed into a running count below.
    let mut far = vec![0usize; n];
    let mut far_from = vec![0usize; n + 1];
    for (k, &a) in sorted.iter().enumerate() {
        let near_end = k + 1 + sorted[k + 1..].partition_point(|&b| a + b < threshold - BOUND_MARGIN);
        let far_start = near_end + sorted[near_end..].partition_point(|&b| b - a <= threshold + BOUND_MARGIN);
        far[k] += n - far_start;
        far_from[far_start] += 1;
        let i = order[k];
        for l in near_end..far_start {
            let j = order[l];
            if is_far_normalised(dist(i), entropies[i], dist(j), entropies[j], test) {
                far[k] += 1;
                far[l] += 1;
            }
        }
    }
    let mut by_row = vec![0usize; n];
    let mut earlier_far = 0;
    for k in 0..n {
        earlier_far += far_from[k];
        by_row[order[k]] = far[k] + earlier_far;
    }
    by_row
}

#[derive(Debug)]
struct PeerEvaluator {
    name: &'static str,
    threshold: f64,
    output: Output,
}

impl PartitionEvaluator for PeerEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], _num_rows: usize) -> Result<ArrayRef> {
        let counts = count_far_peers(self.name, &values[0], self.threshold)?;
        Ok(match self.output {
            // Ganesha: more than (n - 1) / 2 of the n - 1 peers.
            Output::Indict => {
                Arc::new(counts.iter().map(|c| c.map(|(far, peers)| 2 * far > peers)).collect::<BooleanArray>())
            }
            Output::Score => Arc::new(
                counts.iter().map(|c| c.map(|(far, peers)| far as f64 / peers as f64)).collect::<Float64Array>(),
            ),
        })
    }
}

static INDICT_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_ANALYTICAL,
        "true when the row's histogram is farther (jsd_sqrt) than threshold from more than half of \
         its peers: the other rows of the window partition. Every pair is compared once per \
         partition; the frame and ORDER BY are ignored. Rows whose histogram is NULL, empty or all \
         zero are NULL and nobody's peer; a row without peers is NULL.",
        "indict(hist, threshold) OVER (PARTITION BY peer_group)",
    )
    .with_sql_example("SELECT host, indict(hist, 0.3) OVER (PARTITION BY job_id, state) FROM node_histograms")
    .with_argument("hist", "List of numbers (a histogram), same bins for the whole partition.")
    .with_argument("threshold", "Number literal: the distance above which two nodes differ.")
    .build()
});

static PEER_SCORE_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_ANALYTICAL,
        "The share (0 to 1) of the row's peers, the other rows of the window partition, whose \
         histogram is farther (jsd_sqrt) than threshold; indict is peer_score > 0.5. NULL rules \
         as for indict.",
        "peer_score(hist, threshold) OVER (PARTITION BY peer_group)",
    )
    .with_sql_example("SELECT host, peer_score(hist, 0.3) OVER (PARTITION BY job_id, state) FROM node_histograms")
    .with_argument("hist", "List of numbers (a histogram), same bins for the whole partition.")
    .with_argument("threshold", "Number literal: the distance above which two nodes differ.")
    .build()
});

impl WindowUDFImpl for PeerComparison {
    fn name(&self) -> &str {
        self.output.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name(), t, 2, 2)?;
        require_number(self.name(), 1, "threshold", &t[1])?;
        Ok(vec![require_number_list_uncast(self.name(), 0, "hist", &t[0])?, t[1].clone()])
    }

    /// Called while planning the physical plan, so a non-literal threshold fails early.
    fn partition_evaluator(&self, args: PartitionEvaluatorArgs) -> Result<Box<dyn PartitionEvaluator>> {
        let lits = physical_literals(args.input_exprs());
        let threshold =
            Literals { func: self.name(), lits: &lits }.number(1, "threshold", "a number literal", |_| true)?;
        Ok(Box::new(PeerEvaluator { name: self.output.name(), threshold, output: self.output }))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        let t = match self.output {
            Output::Indict => DataType::Boolean,
            Output::Score => DataType::Float64,
        };
        Ok(Arc::new(Field::new(args.name(), t, true)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(match self.output {
            Output::Indict => &INDICT_DOC,
            Output::Score => &PEER_SCORE_DOC,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::fixed_width_list;
    use crate::test_util::{ctx, query_err, strings};

    #[test]
    fn odd_node_out_is_indicted() {
        // Four similar nodes and one whose histogram is disjoint from theirs, one NULL.
        let hists = fixed_width_list(
            vec![5.0, 5.0, 0.0, 6.0, 4.0, 0.0, 5.0, 4.0, 1.0, 4.0, 6.0, 0.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0],
            3,
            6,
        );
        let counts = count_far_peers("indict", &(Arc::new(hists) as ArrayRef), 0.5).unwrap();
        // Row 5 is all zero: not a distribution, so NULL and nobody's peer (4 peers each).
        assert_eq!(counts, [Some((1, 4)), Some((1, 4)), Some((1, 4)), Some((1, 4)), Some((4, 4)), None]);
    }

    /// The bounds settle pairs exactly as computing every distance does: partitions of
    /// similar histograms with some odd ones and some repeated, at thresholds from tight to
    /// loose, against every distance computed from the histograms alone.
    #[test]
    fn pivot_bounds_count_as_every_pair_does() {
        let mut uniform = crate::test_util::uniform(0x9e37_79b9_7f4a_7c15_u64);
        let mut mixed = 0;
        for n in [2, 3, 7, 31, 32, 40, 120] {
            let stride = 16;
            let mut flat = Vec::new();
            let mut entropies = Vec::new();
            let mut p = Vec::new();
            for row in 0..n {
                let odd = row % 9 == 4;
                let raw: Vec<f64> = (0..12)
                    .map(|bin| {
                        let shape = if odd { (bin as f64 - 9.0).abs() } else { (bin as f64 - 3.0).abs() };
                        (6.0 - shape).max(0.0) + 2.0 * uniform()
                    })
                    .collect();
                // Every fifth row repeats the one before: distance 0.
                if row % 5 == 1 {
                    let previous = flat[(row - 1) * stride..row * stride].to_vec();
                    flat.extend(previous);
                    entropies.push(entropies[row - 1]);
                    continue;
                }
                entropies.push(crate::distance::normalise(&raw, &mut p).unwrap());
                flat.extend_from_slice(&p);
                flat.resize(flat.len().next_multiple_of(stride), 0.0);
            }
            // The reference: every distance, both ways, from the histograms alone.
            let row = |i: usize| &flat[i * stride..(i + 1) * stride];
            let distances: Vec<Vec<f64>> =
                (0..n).map(|i| (0..n).map(|j| crate::distance::jsd_sqrt_raw(row(i), row(j)).unwrap()).collect()).collect();
            for threshold in [0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0] {
                let expected: Vec<usize> =
                    (0..n).map(|i| (0..n).filter(|&j| j != i && distances[i][j] > threshold).count()).collect();
                assert_eq!(count_far_pairs(&flat, stride, &entropies, threshold), expected, "n {n}, threshold {threshold}");
                mixed += usize::from(expected.iter().any(|&f| f > 0 && f < n - 1));
            }
        }
        // Not only the trivial cases: rows with near and far peers both.
        assert!(mixed >= 10, "{mixed}");
    }

    #[test]
    fn lone_row_has_no_peers() {
        let hists = fixed_width_list(vec![1.0, 2.0], 2, 1);
        assert_eq!(count_far_peers("indict", &(Arc::new(hists) as ArrayRef), 0.1).unwrap(), [None]);
    }

    #[tokio::test]
    async fn sql() {
        let ctx = ctx(4);
        let sql = "SELECT g, h, indict(hist, 0.5) OVER (PARTITION BY g) AS i, \
                   peer_score(hist, 0.5) OVER (PARTITION BY g) AS s \
                   FROM (VALUES (1, 'a', [5, 5, 0]), (1, 'b', [6, 4, 0]), (1, 'c', [0, 0, 9]), \
                   (2, 'd', [1, 0, 0]), (2, 'e', [0, 1, 0])) AS v(g, h, hist) ORDER BY h";
        let got = strings(&ctx, sql).await;
        assert_eq!(
            got,
            [
                "1|a|false|0.5", // farther than 0.5 from c only: 1 of 2 peers is not more than half
                "1|b|false|0.5",
                "1|c|true|1.0",
                "2|d|true|1.0", // a pair that differs: both are farther than half their peers
                "2|e|true|1.0",
            ]
        );
        // Histograms of another list type (here `List<Int64>`, and below `List<Float32>`) are
        // not cast before the window, which would convert the whole column for each partition
        // (`require_number_list_uncast`); each partition converts its own rows, with the same
        // verdicts.
        let narrow = sql.replace(
            "FROM (VALUES",
            "FROM (SELECT g, h, arrow_cast(hist, 'List(Float32)') AS hist FROM (VALUES",
        ).replace("AS v(g, h, hist)", "AS v(g, h, hist))");
        for (query, list) in [(sql, "Int64"), (narrow.as_str(), "Float32")] {
            let plan = strings(&ctx, &format!("EXPLAIN {query}")).await.join("\n");
            assert!(plan.contains(list) && !plan.contains("AS List(Float64)"), "{plan}");
        }
        assert_eq!(strings(&ctx, &narrow).await, got);
        let err = query_err(&ctx, "SELECT indict(h, t) OVER () FROM (VALUES ([1, 2], 0.5)) AS v(h, t)").await;
        assert!(err.contains("indict: argument 2 (threshold) must be a number literal"), "{err}");
    }
}
