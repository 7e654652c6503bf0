//! Peer comparison: the window functions `indict(hist, threshold)` and `peer_score(hist,
//! threshold)` over `PARTITION BY` the peer group (e.g. a job's nodes at one time step), and
//! the aggregate `peer_scores(member, hist, threshold)` over `GROUP BY` it.
//!
//! The evaluator sees the whole partition once (like `lead`/`lag`): it normalises every
//! histogram once, computes each pair's `jsd_sqrt` at most once (most pairs are settled by the
//! triangle inequality, see [`count_far_pairs`]), and counts for every row how many of its
//! peers are farther than the threshold. Any window frame or ORDER BY is ignored; the peers
//! are always the whole partition.
//!
//! Peers of a row are the other rows of the partition whose histogram is a distribution (not
//! NULL, empty, all zero, or with negative/NaN/infinite counts, see `jsd_sqrt`). Such rows get
//! NULL and are nobody's peer. A row with no peers gets NULL. The aggregate keeps its groups'
//! rows and counts the same way when it is evaluated.

use std::mem::size_of;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Float64Array, Float64Builder, Int64Builder, ListArray, ListBuilder, StructArray,
    new_empty_array,
};
use datafusion::arrow::compute::interleave;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunctionParams;
use datafusion::logical_expr::function::{
    AccumulatorArgs, PartitionEvaluatorArgs, StateFieldsArgs, WindowUDFFieldArgs,
};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator, PartitionEvaluator, Signature, Volatility,
    WindowUDFImpl, aggregate_doc_sections::DOC_SECTION_GENERAL, udaf_default_schema_name,
    window_doc_sections::DOC_SECTION_ANALYTICAL,
};
use datafusion::physical_expr::PhysicalExpr;

use crate::args::{
    Literals, check_arity, exec_error, f64_list_type, list_item, list_row, logical_literals, on_own_values,
    physical_literals, require_number, require_number_list, require_number_list_uncast, to_f64_list,
};
use crate::cells::{ByGroup, emit_to_groups, lists_side_by_side, passes, values_with_groups};
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
    // Sized once: a partition is often a dozen rows, and growing three vectors by doubling would
    // be a large part of this function's work. The bins of these rows only: a window hands each
    // partition a slice, whose `values()` is the whole column's.
    let offsets = lists.value_offsets();
    let bins = (offsets[lists.len()] - offsets[0]) as usize;
    let mut dists = Distributions::with_capacity(bins, lists.len());
    let mut valid = Vec::with_capacity(lists.len());
    for row in 0..lists.len() {
        let Some(h) = list_row(&lists, row, &mut scratch) else { continue };
        match dists.push_raw(h) {
            Ok(true) => valid.push(row),
            Ok(false) => {}
            Err(width) => {
                let first = valid.first().copied().unwrap_or_default();
                return Err(exec_error(
                    func,
                    format!("rows {first} and {row} of a partition have {width} and {} bins", h.len()),
                ));
            }
        }
    }
    let far = dists.far_counts(threshold);
    let peers = valid.len().saturating_sub(1);
    let mut counts = vec![None; lists.len()];
    if peers > 0 {
        for (&row, &far) in valid.iter().zip(&far) {
            counts[row] = Some((far, peers));
        }
    }
    Ok(counts)
}

/// A peer group's distributions, normalised, one after another in `flat`, each padded with
/// zero bins to a whole number of 8-lane blocks: a zero bin adds exactly 0 to `Σ m·log2 m`,
/// and each row's `Σ p·log2 p` and the pair loop then run on full vectors only (unpadded, 12
/// bins would take one vector and four scalar steps).
#[derive(Debug, Default)]
pub(crate) struct Distributions {
    flat: Vec<f64>,
    entropies: Vec<f64>,
    /// The bins of every distribution, set by the first.
    width: Option<usize>,
}

impl Distributions {
    fn with_capacity(bins: usize, rows: usize) -> Self {
        Self { flat: Vec::with_capacity(bins + rows * WIDE_LANES), entropies: Vec::with_capacity(rows), width: None }
    }

    pub(crate) fn len(&self) -> usize {
        self.entropies.len()
    }

    pub(crate) fn clear(&mut self) {
        self.flat.clear();
        self.entropies.clear();
        self.width = None;
    }

    /// Adds `raw` normalised, and returns whether it was a distribution (see
    /// [`distribution_total`]); `Err` with the others' width when its width differs.
    pub(crate) fn push_raw(&mut self, raw: &[f64]) -> std::result::Result<bool, usize> {
        let Some(total) = distribution_total(raw) else { return Ok(false) };
        match self.width {
            None => self.width = Some(raw.len()),
            Some(w) if w != raw.len() => return Err(w),
            Some(_) => {}
        }
        let start = self.flat.len();
        self.flat.extend(raw.iter().map(|&x| x / total));
        self.flat.resize(self.flat.len().next_multiple_of(WIDE_LANES), 0.0);
        let p = &self.flat[start..];
        self.entropies.push(mean_x_log2_x(p, p));
        Ok(true)
    }

    fn stride(&self) -> usize {
        self.width.unwrap_or(0).next_multiple_of(WIDE_LANES)
    }

    /// For each distribution, how many of the others are farther than `threshold`.
    pub(crate) fn far_counts(&self, threshold: f64) -> Vec<usize> {
        count_far_pairs(&self.flat, self.stride(), &self.entropies, threshold)
    }
}

/// Margin kept from the threshold when the triangle inequality decides a pair: computed
/// distances near 0 carry errors up to ~1e-8 (the square root of a rounding error).
const BOUND_MARGIN: f64 = 1e-6;

/// Rows from which bounding pays: below, computing every pair costs less than sorting by the
/// pivot (as in Kahuna-WB's many small peer groups).
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
    let to_pivot: Vec<f64> =
        (0..n).map(|i| jsd_sqrt_normalised(dist(i), entropies[i], &pivot, pivot_entropy)).collect();
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

/// The example of `indict` and `peer_score`, one query for both: they judge the same pairs.
const PEER_COMPARISON_EXAMPLE: &str = concat!(
    "SELECT host, indict(h, 0.5) OVER (PARTITION BY job) AS indicted,\n",
    "       peer_score(h, 0.5) OVER (PARTITION BY job) AS score\n",
    "FROM (VALUES ('j', 'r1', [5, 5, 0]), ('j', 'r2', [6, 4, 0]),\n",
    "             ('j', 'r3', [5, 4, 1]), ('j', 'r4', [0, 1, 9])) AS v(job, host, h)\n",
    "ORDER BY host;\n",
    "-- r1 false 0.333333333\n",
    "-- r2 false 0.333333333\n",
    "-- r3 false 0.333333333\n",
    "-- r4 true 1"
);

/// How `indict` and `peer_score` judge the pairs, and their NULLs: the same for both.
const PEER_COMPARISON_RULES: &str = "Each pair is judged at most once per partition, most without a distance: in \
     partitions of 32 rows or more by the triangle inequality through the partition's mean, and every pair first \
     by the triangular discrimination Δ = Σ (p − q)² / (p + q), which bounds the divergence between \
     Δ / (4 ln 2) and Δ / 2. The verdicts are exactly those of computing every distance. A row whose histogram \
     is NULL, empty or all zero is NULL and nobody's peer; a row without peers is NULL. ORDER BY and frames are \
     ignored.";

static INDICT_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_ANALYTICAL,
        format!(
            "Over `PARTITION BY` the peer group, the peers of a row being the other rows of its partition: \
             true when the row's histogram is farther (`jsd_sqrt`) than `threshold` from more than half of \
             its peers (Ganesha's (n − 1)/2), i.e. when its `peer_score` is above 0.5. {PEER_COMPARISON_RULES}"
        ),
        "indict(hist, threshold)",
    )
    .with_sql_example(PEER_COMPARISON_EXAMPLE)
    .with_argument("hist", "List of numbers (a histogram), the same bins for the whole partition.")
    .with_argument("threshold", "Number literal: the distance above which two histograms differ.")
    .build()
});

static PEER_SCORE_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_ANALYTICAL,
        format!(
            "Over `PARTITION BY` the peer group, the peers of a row being the other rows of its partition: \
             the share of its peers, in [0, 1], whose histogram is farther (`jsd_sqrt`) than `threshold`; \
             `indict` is true where it is above 0.5. {PEER_COMPARISON_RULES}"
        ),
        "peer_score(hist, threshold)",
    )
    .with_sql_example(PEER_COMPARISON_EXAMPLE)
    .with_argument("hist", "List of numbers (a histogram), the same bins for the whole partition.")
    .with_argument("threshold", "Number literal: the distance above which two histograms differ.")
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

const PEER_SCORES: &str = "peer_scores";

/// `peer_scores(member, hist, threshold)`: `peer_score` as an aggregate, for a GROUP BY of the
/// peer group. Where every peer group is small (a cluster's hosts at one tick), a window
/// partitioned by it repartitions, sorts and concatenates the histograms and evaluates each
/// partition on its own; the aggregate points at each row where it came and scores each group
/// when it is emitted.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PeerScores {
    signature: Signature,
}

impl Default for PeerScores {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// The result's items: each member with its score and how many of its peers are near it.
fn score_fields(member: &DataType) -> Fields {
    Fields::from(vec![
        Field::new("member", member.clone(), true),
        Field::new("score", DataType::Float64, true),
        Field::new("near", DataType::Int64, true),
    ])
}

fn score_item(member: &DataType) -> FieldRef {
    list_item(DataType::Struct(score_fields(member)))
}

fn threshold_of(exprs: &[Arc<dyn PhysicalExpr>]) -> Result<f64> {
    Literals { func: PEER_SCORES, lits: &physical_literals(exprs) }.number(2, "threshold", "a number literal", |_| true)
}

/// Every row of every group, in arrival order, kept until the end: a row's score depends on
/// all of its peers. A row is kept as where it is in its batch (or partial state), whose arrays
/// are kept: nothing is copied until the groups are emitted. (Copying each histogram into a
/// buffer as it came would cost more, most of it the buffer's growth.)
#[derive(Debug)]
struct PeerScoresGroups {
    threshold: f64,
    member_type: DataType,
    /// The members and histograms of each batch or partial state seen, side by side.
    inputs: Vec<(ArrayRef, ListArray)>,
    input_bytes: usize,
    groups: usize,
    /// Each row's group, and its place (input, row) in `inputs`.
    group_of: Vec<usize>,
    rows: Vec<(usize, usize)>,
}

/// The memory a batch's arrays hold (all of their buffers, even where they are a slice).
fn input_size((members, hists): &(ArrayRef, ListArray)) -> usize {
    members.get_array_memory_size() + hists.get_array_memory_size()
}

impl PeerScoresGroups {
    fn new(threshold: f64, member_type: DataType) -> Self {
        Self {
            threshold,
            member_type,
            inputs: Vec::new(),
            input_bytes: 0,
            groups: 0,
            group_of: Vec::new(),
            rows: Vec::new(),
        }
    }

    fn keep(&mut self, members: ArrayRef, hists: ListArray) -> usize {
        let input = (members, hists);
        self.input_bytes += input_size(&input);
        self.inputs.push(input);
        self.inputs.len() - 1
    }

    fn add_rows(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total: usize,
    ) -> Result<()> {
        self.groups = self.groups.max(total);
        let rows: Vec<usize> = (0..group_indices.len()).filter(|&row| passes(opt_filter, row)).collect();
        if rows.is_empty() {
            return Ok(());
        }
        let input = self.keep(values[0].clone(), to_f64_list(&values[1])?);
        for row in rows {
            self.group_of.push(group_indices[row]);
            self.rows.push((input, row));
        }
        Ok(())
    }

    /// Adds partial states: each row a group's members and their histograms, as
    /// [`Self::state_of`] writes them.
    fn merge_rows(&mut self, states: &[ArrayRef], group_indices: &[usize], total: usize) -> Result<()> {
        self.groups = self.groups.max(total);
        let [members, hists] = lists_side_by_side(PEER_SCORES, states)?;
        // Kept on the values their rows hold only: a state is often a slice of a larger one.
        let (members, hists) = (on_own_values(members)?, on_own_values(hists)?);
        let input = self.keep(members.values().clone(), to_f64_list(hists.values())?);
        for (member, g) in values_with_groups(members.value_offsets(), group_indices) {
            self.group_of.push(g);
            self.rows.push((input, member));
        }
        Ok(())
    }

    /// `f` of the groups `emit_to` names, which are then forgotten with the batches no row
    /// left points into; the groups after become `0..`.
    fn emit<T>(&mut self, emit_to: EmitTo, f: impl FnOnce(&Self, &ByGroup) -> Result<T>) -> Result<T> {
        let n = emit_to_groups(emit_to, self.groups).min(self.groups);
        let emitted = f(self, &ByGroup::of(&self.group_of, n))?;
        ByGroup::forget_first(&mut self.group_of, &mut self.rows, n);
        self.groups -= n;
        let mut used = vec![false; self.inputs.len()];
        self.rows.iter().for_each(|&(input, _)| used[input] = true);
        for (input, _) in self.inputs.iter_mut().zip(used).filter(|(_, used)| !used) {
            // Emptied in place: the rows left keep their inputs' positions.
            *input = (new_empty_array(&self.member_type), ListArray::new_null(list_item(DataType::Float64), 0));
        }
        self.input_bytes = self.inputs.iter().map(input_size).sum();
        Ok(emitted)
    }

    /// The members of the rows `order`.
    fn members_of(&self, order: &[usize]) -> Result<ArrayRef> {
        if order.is_empty() {
            return Ok(new_empty_array(&self.member_type));
        }
        let rows: Vec<(usize, usize)> = order.iter().map(|&row| self.rows[row]).collect();
        let arrays: Vec<&dyn Array> = self.inputs.iter().map(|(members, _)| members.as_ref()).collect();
        Ok(interleave(&arrays, &rows)?)
    }

    /// The histogram of row `row`, `None` when NULL.
    fn hist<'a>(&'a self, row: usize, scratch: &'a mut Vec<f64>) -> Option<&'a [f64]> {
        let (input, at) = self.rows[row];
        list_row(&self.inputs[input].1, at, scratch)
    }

    /// The length of row `row`'s histogram (0 when NULL).
    fn hist_len(&self, row: usize) -> usize {
        let (input, at) = self.rows[row];
        self.inputs[input].1.value_length(at) as usize
    }

    fn scores_of(&self, by_group: &ByGroup) -> Result<ArrayRef> {
        let mut scores = Float64Builder::with_capacity(by_group.order.len());
        let mut nears = Int64Builder::with_capacity(by_group.order.len());
        let mut dists = Distributions::default();
        let mut dist_of = Vec::new();
        let mut scratch = Vec::new();
        for rows in by_group.groups() {
            dists.clear();
            dist_of.clear();
            for &row in rows {
                let hist = self.hist(row, &mut scratch).unwrap_or_default();
                let counted = dists.push_raw(hist).map_err(|had| {
                    exec_error(PEER_SCORES, format!("a group has histograms of {had} and {} bins", hist.len()))
                })?;
                dist_of.push(counted.then(|| dists.len() - 1));
            }
            let far = dists.far_counts(self.threshold);
            let peers = dists.len().saturating_sub(1);
            for &dist in &dist_of {
                let far = dist.filter(|_| peers > 0).map(|d| far[d]);
                scores.append_option(far.map(|far| far as f64 / peers as f64));
                nears.append_option(far.map(|far| (peers - far) as i64));
            }
        }
        let items = StructArray::try_new(
            score_fields(&self.member_type),
            vec![self.members_of(&by_group.order)?, Arc::new(scores.finish()), Arc::new(nears.finish())],
            None,
        )?;
        Ok(Arc::new(ListArray::try_new(score_item(&self.member_type), by_group.lengths(), Arc::new(items), None)?))
    }

    fn state_of(&self, by_group: &ByGroup) -> Result<Vec<ArrayRef>> {
        let members = ListArray::try_new(
            list_item(self.member_type.clone()),
            by_group.lengths(),
            self.members_of(&by_group.order)?,
            None,
        )?;
        let mut scratch = Vec::new();
        // Sized once, rather than growing the builder as it fills.
        let bins = by_group.order.iter().map(|&row| self.hist_len(row)).sum();
        let mut hists = ListBuilder::with_capacity(Float64Builder::with_capacity(bins), by_group.order.len());
        for &row in &by_group.order {
            let hist = self.hist(row, &mut scratch);
            hists.values().append_slice(hist.unwrap_or_default());
            hists.append(hist.is_some());
        }
        let hists = ListArray::try_new(list_item(f64_list_type()), by_group.lengths(), Arc::new(hists.finish()), None)?;
        Ok(vec![Arc::new(members), Arc::new(hists)])
    }
}

impl GroupsAccumulator for PeerScoresGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.add_rows(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.emit(emit_to, Self::scores_of)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.emit(emit_to, Self::state_of)
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.merge_rows(values, group_indices, total_num_groups)
    }

    /// Each row as a group of its own (DataFusion skips partial aggregation when groups are
    /// nearly as many as rows).
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let mut rows = Self::new(self.threshold, self.member_type.clone());
        let own: Vec<usize> = (0..values[0].len()).collect();
        rows.add_rows(values, &own, opt_filter, own.len())?;
        rows.state_of(&ByGroup::of(&rows.group_of, own.len()))
    }

    fn size(&self) -> usize {
        size_of::<Self>()
            + self.input_bytes
            + self.group_of.capacity() * size_of::<usize>()
            + self.rows.capacity() * size_of::<(usize, usize)>()
    }
}

/// One group, for windows and aggregates without GROUP BY.
#[derive(Debug)]
struct PeerScoresAccumulator(PeerScoresGroups);

impl Accumulator for PeerScoresAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.0.add_rows(values, &vec![0; values[0].len()], None, 1)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        ScalarValue::try_from_array(&self.0.scores_of(&ByGroup::of(&self.0.group_of, 1))?, 0)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.0.state_of(&ByGroup::of(&self.0.group_of, 1))?.iter().map(|a| ScalarValue::try_from_array(a, 0)).collect()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.0.merge_rows(states, &vec![0; states[0].len()], 1)
    }

    fn size(&self) -> usize {
        GroupsAccumulator::size(&self.0)
    }
}

static PEER_SCORES_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_GENERAL,
        "`peer_score` as an aggregate over `GROUP BY` the peer group: a list of `{member, score, near}`, \
         in no particular order, with each row's `member`, its score, the same number the window gives \
         (above 0.5 where `indict` is true), and `near`, how many of its peers are within the threshold \
         (a member far from most of its peers but near a few is one of a group of its own). A row whose \
         histogram is NULL, empty or all zero scores NULL and is nobody's peer. Where peer groups are many and small (a cluster's hosts at each of \
         30 K ticks), a window partitioned by the group hash-partitions, sorts and concatenates the \
         histograms and evaluates each partition on its own; the aggregate keeps each row where it came \
         (its batch, or a partial state) and scores each group when it is emitted. `unnest` the list to \
         join the scores back. Ganesha's alarms in `kahuna`'s queries run this way.",
        "peer_scores(member, hist, threshold)",
    )
    .with_sql_example(concat!(
        "SELECT p['member'] AS host, p['score'] AS score, p['near'] AS near\n",
        "FROM (SELECT unnest(peer_scores(host, h, 0.5)) AS p\n",
        "      FROM (VALUES ('j', 'r1', [5, 5, 0]), ('j', 'r2', [6, 4, 0]),\n",
        "                   ('j', 'r3', [5, 4, 1]), ('j', 'r4', [0, 1, 9])) AS v(job, host, h)\n",
        "      GROUP BY job)\n",
        "ORDER BY host;\n",
        "-- r1 0.333333333 2\n",
        "-- r2 0.333333333 2\n",
        "-- r3 0.333333333 2\n",
        "-- r4 1 0"
    ))
    .with_argument(
        "member",
        "Any column: what identifies the row in the result, returned as given (a struct carries several).",
    )
    .with_argument("hist", "List of numbers (a histogram), the same bins for the whole group.")
    .with_argument("threshold", "Number literal: the distance above which two rows differ.")
    .build()
});

impl AggregateUDFImpl for PeerScores {
    fn name(&self) -> &str {
        PEER_SCORES
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(PEER_SCORES, t, 3, 3)?;
        require_number(PEER_SCORES, 2, "threshold", &t[2])?;
        Ok(vec![t[0].clone(), require_number_list(PEER_SCORES, 1, "hist", &t[1])?, t[2].clone()])
    }

    fn return_type(&self, t: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(score_item(&t[0])))
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        Literals { func: PEER_SCORES, lits: &logical_literals(&params.args) }.number(
            2,
            "threshold",
            "a number literal",
            |_| true,
        )?;
        udaf_default_schema_name(self, params)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let member_type = args.expr_fields[0].data_type().clone();
        Ok(Box::new(PeerScoresAccumulator(PeerScoresGroups::new(threshold_of(args.exprs)?, member_type))))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let member_type = args.input_fields[0].data_type().clone();
        Ok(vec![
            Arc::new(Field::new(format_state_name(args.name, "members"), DataType::List(list_item(member_type)), true)),
            Arc::new(Field::new(
                format_state_name(args.name, "dists"),
                DataType::List(list_item(f64_list_type())),
                true,
            )),
        ])
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        let member_type = args.expr_fields[0].data_type().clone();
        Ok(Box::new(PeerScoresGroups::new(threshold_of(args.exprs)?, member_type)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&PEER_SCORES_DOC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::fixed_width_list;
    use crate::test_util::{ctx, ctx_skipping_partial_aggregation, query_err, strings};
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

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
            let distances: Vec<Vec<f64>> = (0..n)
                .map(|i| (0..n).map(|j| crate::distance::jsd_sqrt_raw(row(i), row(j)).unwrap()).collect())
                .collect();
            for threshold in [0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0] {
                let expected: Vec<usize> =
                    (0..n).map(|i| (0..n).filter(|&j| j != i && distances[i][j] > threshold).count()).collect();
                assert_eq!(
                    count_far_pairs(&flat, stride, &entropies, threshold),
                    expected,
                    "n {n}, threshold {threshold}"
                );
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
        let narrow = sql
            .replace("FROM (VALUES", "FROM (SELECT g, h, arrow_cast(hist, 'List(Float32)') AS hist FROM (VALUES")
            .replace("AS v(g, h, hist)", "AS v(g, h, hist))");
        for (query, list) in [(sql, "Int64"), (narrow.as_str(), "Float32")] {
            let plan = strings(&ctx, &format!("EXPLAIN {query}")).await.join("\n");
            assert!(plan.contains(list) && !plan.contains("AS List(Float64)"), "{plan}");
        }
        assert_eq!(strings(&ctx, &narrow).await, got);
        let err = query_err(&ctx, "SELECT indict(h, t) OVER () FROM (VALUES ([1, 2], 0.5)) AS v(h, t)").await;
        assert!(err.contains("indict: argument 2 (threshold) must be a number literal"), "{err}");
    }

    /// The rows of the `peer_scores` tests' groups: group 1 as in `sql` above; in group 2 a pair
    /// that differs, a NULL and an all-zero histogram (no distributions: NULL scores, nobody's
    /// peers); group 3 a lone row (no peers). Group 1's rows repeated (`x` 0 to 39, each a copy
    /// of a, b or c), so that small batches split it across partitions.
    const PEER_ROWS: &str = "SELECT g, h || CAST(x AS VARCHAR) AS h, hist FROM (VALUES \
        (1, 'a', [5, 5, 0]), (1, 'b', [6, 4, 0]), (1, 'c', [0, 0, 9]), \
        (2, 'd', [1, 0, 0]), (2, 'e', [0, 1, 0]), (2, 'f', NULL), (2, 'z', [0, 0, 0]), (3, 'l', [2, 1, 0])) \
        AS v(g, h, hist) CROSS JOIN (SELECT unnest(range(CAST(40 AS BIGINT))) AS x) AS r \
        WHERE g = 1 OR x = 0";

    #[tokio::test]
    async fn peer_scores_score_each_member_as_the_window_does() {
        let grouped = format!(
            "SELECT g, p['member'] AS h, p['score'] AS s FROM (SELECT g, unnest(peer_scores(h, hist, 0.5)) AS p \
             FROM ({PEER_ROWS}) GROUP BY g) ORDER BY h"
        );
        let windowed =
            format!("SELECT g, h, peer_score(hist, 0.5) OVER (PARTITION BY g) AS s FROM ({PEER_ROWS}) ORDER BY h");
        let expected = strings(&ctx(1), &windowed).await;
        // Group 1: 40 copies each of a, b, c. a and b are within 0.5 of each other, c farther
        // from both: a's far peers are the 40 c's of 119 peers, c's the 80 a's and b's.
        let a_score = format!("1|a0|{}", 40.0 / 119.0);
        let c_score = format!("1|c0|{}", 80.0 / 119.0);
        assert!(expected.contains(&a_score) && expected.contains(&c_score), "{expected:?}");
        for tail in ["2|d0|1.0", "2|e0|1.0", "2|f0|NULL", "2|z0|NULL", "3|l0|NULL"] {
            assert!(expected.iter().any(|r| r == tail), "{tail} in {expected:?}");
        }
        assert_eq!(expected.len(), 125);
        // One partition, four (partial and final aggregation, groups split across batches), and
        // partial aggregation skipped (each row a state of its own).
        for ctx in [ctx(1), ctx(4), ctx_skipping_partial_aggregation(4)] {
            assert_eq!(strings(&ctx, &grouped).await, expected);
        }
        // Without GROUP BY, one group of all the rows; a struct member carries several values.
        let whole = format!(
            "SELECT p['member']['h'] AS h, p['member']['g'] AS g, p['score'] AS s FROM \
             (SELECT unnest(peer_scores(named_struct('h', h, 'g', g), hist, 0.5)) AS p FROM ({PEER_ROWS}) WHERE g = 2) \
             ORDER BY h"
        );
        assert_eq!(strings(&ctx(2), &whole).await, ["d0|2|1.0", "e0|2|1.0", "f0|2|NULL", "z0|2|NULL"]);
        // How many peers each is near: a0 the 39 other a's and the 40 b's, c0 the other c's; d0
        // none (its one peer differs); f0 and the lone l0 have no score.
        let near = format!(
            "SELECT p['member'] AS h, p['near'] AS n FROM (SELECT unnest(peer_scores(h, hist, 0.5)) AS p \
             FROM ({PEER_ROWS}) GROUP BY g) WHERE p['member'] IN ('a0', 'c0', 'd0', 'f0', 'l0') ORDER BY h"
        );
        assert_eq!(strings(&ctx(4), &near).await, ["a0|79", "c0|39", "d0|0", "f0|NULL", "l0|NULL"]);
    }

    #[tokio::test]
    async fn peer_scores_refuse_what_they_cannot_compare() {
        let ctx = ctx(2);
        let err =
            query_err(&ctx, "SELECT peer_scores(h, hist, t) FROM (VALUES ('a', [1, 2], 0.5)) AS v(h, hist, t)").await;
        assert!(err.contains("peer_scores: argument 3 (threshold) must be a number literal"), "{err}");
        let err = query_err(&ctx, "SELECT peer_scores(h, h, 0.5) FROM (VALUES ('a')) AS v(h)").await;
        assert!(err.contains("peer_scores: argument 2 (hist) must be a list of numbers"), "{err}");
        let err = query_err(
            &ctx,
            "SELECT g, peer_scores(h, hist, 0.5) FROM (VALUES (1, 'a', [1, 2]), (1, 'b', [1, 2, 3])) AS v(g, h, hist) \
             GROUP BY g",
        )
        .await;
        assert!(err.contains("peer_scores: a group has histograms of 2 and 3 bins"), "{err}");
    }

    /// Emitting the first groups keeps the others, renumbered, with their rows; a partial
    /// state merged into another accumulator scores as the rows themselves do.
    #[test]
    fn peer_scores_emit_in_parts_and_merge() {
        let members: ArrayRef = Arc::new(datafusion::arrow::array::Int64Array::from(vec![10, 11, 20, 21, 22, 30]));
        let hists: ArrayRef =
            Arc::new(fixed_width_list(vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], 2, 6));
        let groups = [0, 0, 1, 1, 1, 2];
        let scores = |array: ArrayRef| -> Vec<String> {
            let options = FormatOptions::default().with_null("NULL");
            let formatter = ArrayFormatter::try_new(array.as_ref(), &options).unwrap();
            (0..array.len()).map(|row| formatter.value(row).to_string()).collect()
        };
        let mut parts = PeerScoresGroups::new(0.5, DataType::Int64);
        parts.update_batch(&[members.clone(), hists.clone()], &groups, None, 3).unwrap();
        let first = scores(parts.evaluate(EmitTo::First(1)).unwrap());
        let rest = scores(parts.evaluate(EmitTo::All).unwrap());
        // Group 1: 20 and 21 are the same and 22 differs from both (distance 1), so 22 is far
        // from both of its peers and 20 and 21 from one of two; 30, all zero, has no score.
        assert_eq!(first, ["[{member: 10, score: 1.0, near: 0}, {member: 11, score: 1.0, near: 0}]"]);
        assert_eq!(
            rest,
            [
                "[{member: 20, score: 0.5, near: 1}, {member: 21, score: 0.5, near: 1}, {member: 22, score: 1.0, near: 0}]",
                "[{member: 30, score: NULL, near: NULL}]"
            ]
        );
        let mut partial = PeerScoresGroups::new(0.5, DataType::Int64);
        partial.update_batch(&[members.clone(), hists.clone()], &groups, None, 3).unwrap();
        let state = partial.state(EmitTo::All).unwrap();
        let mut merged = PeerScoresGroups::new(0.5, DataType::Int64);
        merged.merge_batch(&state, &[2, 0, 1], 3).unwrap();
        let merged_scores = scores(merged.evaluate(EmitTo::All).unwrap());
        assert_eq!(merged_scores, [rest[0].as_str(), rest[1].as_str(), first[0].as_str()]);
        // A state sliced to its last two groups, merged where a group already has rows:
        // group 1's members join 10 and 11 (20 and 21 are 10's copies, 22 is 11's).
        let sliced: Vec<ArrayRef> = state.iter().map(|s| s.slice(1, 2)).collect();
        let mut joined = PeerScoresGroups::new(0.5, DataType::Int64);
        joined.update_batch(&[members.slice(0, 2), hists.slice(0, 2)], &[0, 0], None, 1).unwrap();
        joined.merge_batch(&sliced, &[0, 1], 2).unwrap();
        assert_eq!(
            scores(joined.evaluate(EmitTo::All).unwrap()),
            [
                "[{member: 10, score: 0.5, near: 2}, {member: 11, score: 0.75, near: 1}, {member: 20, score: 0.5, near: 2}, \
                 {member: 21, score: 0.5, near: 2}, {member: 22, score: 0.75, near: 1}]",
                "[{member: 30, score: NULL, near: NULL}]"
            ]
        );
        // Emitting a group lets go of the batches only it pointed into.
        let mut two_batches = PeerScoresGroups::new(0.5, DataType::Int64);
        two_batches.update_batch(&[members.slice(0, 2), hists.slice(0, 2)], &[0, 0], None, 1).unwrap();
        two_batches.update_batch(&[members.slice(2, 4), hists.slice(2, 4)], &[1, 1, 1, 2], None, 3).unwrap();
        let before = GroupsAccumulator::size(&two_batches);
        two_batches.evaluate(EmitTo::First(1)).unwrap();
        assert!(GroupsAccumulator::size(&two_batches) < before);
        assert_eq!(scores(two_batches.evaluate(EmitTo::All).unwrap()), rest);
    }
}
