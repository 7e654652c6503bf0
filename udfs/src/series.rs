//! Time series of a group and their comparison: `concurrency_series` (how many intervals are
//! active at each step, Kahuna's Maps executing per second on a node) and `pearson` (the
//! correlation of two such series, Kahuna §IV) and `peer_pearson` (every pair of a peer group's
//! series at once).

use std::mem::size_of;
use std::ops::Range;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, ListArray, StructArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunctionParams, WindowFunctionParams};
use datafusion::logical_expr::function::{
    AccumulatorArgs, PartitionEvaluatorArgs, StateFieldsArgs, WindowUDFFieldArgs,
};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, ColumnarValue, Documentation, EmitTo, GroupsAccumulator, PartitionEvaluator,
    ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility, WindowUDFImpl,
    aggregate_doc_sections::DOC_SECTION_GENERAL, scalar_doc_sections::DOC_SECTION_MATH, udaf_default_schema_name,
    udaf_default_window_function_schema_name, window_doc_sections::DOC_SECTION_ANALYTICAL,
};

use crate::args::{
    Literals, arg_error, check_arity, exec_error, f64_list_type, fixed_width_list, list_scalar, logical_literals,
    physical_literals, require_number_list, require_number_list_uncast, require_time, scalar_or_array, times_to_f64,
    to_f64, to_f64_list, units_per_second,
};
use crate::cells::{for_each_cells, merge_into, passes, take_groups};

/// Ten million steps (four months of seconds) is far beyond any single series a query needs.
pub(crate) const MAX_STEPS: usize = 10_000_000;

/// The step grid `from + i·step`, `i` in `0..steps`, with `steps = ceil((to − from) / step)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    pub(crate) from: f64,
    pub(crate) step: f64,
    pub(crate) steps: usize,
}

impl Grid {
    const FUNC: &'static str = "concurrency_series";

    fn parse(lits: &[Option<ScalarValue>]) -> Result<Self> {
        let l = Literals { func: Self::FUNC, lits };
        let from = l.time(2, "from")?;
        let to = l.time(3, "to")?;
        let step = l.duration(4, "step")?;
        if to <= from {
            return Err(arg_error(Self::FUNC, 3, "to", "must be later than from"));
        }
        let steps = ((to - from) / step).ceil();
        if steps > MAX_STEPS as f64 {
            return Err(arg_error(Self::FUNC, 4, "step", format!("gives {steps} steps, more than {MAX_STEPS}")));
        }
        Ok(Self { from, step, steps: steps as usize })
    }

    /// The first step index whose time is at or after `t`, clamped to `0..=steps`.
    #[inline]
    fn first_at_or_after(&self, t: f64) -> usize {
        // The ceiling by truncation: `f64::ceil` is a call into libm on an x86-64 without SSE4.1,
        // and this runs twice for every interval. `as usize` saturates: -inf and negatives give
        // 0, +inf gives usize::MAX.
        let steps = (t - self.from) / self.step;
        let whole = steps as usize;
        whole.saturating_add(usize::from((whole as f64) < steps)).min(self.steps)
    }

    /// The steps `first..stop` (at least one) an interval from `start` to `end` is active at;
    /// None for one that covers no step, ends before it starts or is NaN at either end.
    #[inline]
    pub(crate) fn covered(&self, start: f64, end: f64) -> Option<(usize, usize)> {
        if start.is_nan() || end.is_nan() || end < start {
            return None;
        }
        let (first, stop) = (self.first_at_or_after(start), self.first_at_or_after(end));
        (first < stop).then_some((first, stop))
    }
}

/// A difference array over the grid: +1 where an interval becomes active, −1 where it stops;
/// the series is its running sum. Partial states add element-wise, and retraction subtracts.
#[derive(Debug)]
struct ConcurrencyAccumulator {
    grid: Grid,
    delta: Vec<f64>,
}

/// Calls `f(row, first, stop)` for each row's interval that covers steps `first..stop` (at
/// least one) of the grid.
fn for_each_interval(grid: &Grid, values: &[ArrayRef], mut f: impl FnMut(usize, usize, usize)) -> Result<()> {
    let starts = times_to_f64(&values[0])?;
    let ends = times_to_f64(&values[1])?;
    for row in 0..starts.len() {
        // NULL start: began before the data (active from the start of the grid); NULL end:
        // still running (active to its end). Both NULL says nothing, so it is skipped.
        let start = if starts.is_valid(row) { starts.value(row) } else { f64::NEG_INFINITY };
        let end = if ends.is_valid(row) { ends.value(row) } else { f64::INFINITY };
        if starts.is_null(row) && ends.is_null(row) {
            continue;
        }
        if let Some((first, stop)) = grid.covered(start, end) {
            f(row, first, stop);
        }
    }
    Ok(())
}

/// The series of each group's difference array (`steps + 1` cells a group): its running sum
/// over the first `steps` cells.
pub(crate) fn running_sums(delta: &[f64], steps: usize, groups: usize) -> ListArray {
    let mut series = Vec::with_capacity(groups * steps);
    for cells in delta.chunks_exact(steps + 1).take(groups) {
        let mut active = 0.0;
        series.extend(cells[..steps].iter().map(|d| {
            active += d;
            active
        }));
    }
    fixed_width_list(series, steps, groups)
}

impl ConcurrencyAccumulator {
    fn add(&mut self, values: &[ArrayRef], sign: f64) -> Result<()> {
        let delta = &mut self.delta;
        for_each_interval(&self.grid, values, |_, first, stop| {
            delta[first] += sign;
            delta[stop] -= sign;
        })
    }
}

impl Accumulator for ConcurrencyAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(values, 1.0)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(values, -1.0)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::List(Arc::new(running_sums(&self.delta, self.grid.steps, 1))))
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![list_scalar(self.delta.clone())])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let delta = &mut self.delta;
        for_each_cells(Grid::FUNC, &states[0], delta.len(), |_, d| delta.iter_mut().zip(d).for_each(|(a, b)| *a += b))
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.delta.capacity() * size_of::<f64>()
    }
}

/// All groups' difference arrays in one flat buffer, `steps + 1` cells a group: the M45 study
/// builds a series for each of a million (job, host) groups, where a boxed accumulator per group
/// would cost more than the series themselves.
struct ConcurrencyGroupsAccumulator {
    grid: Grid,
    delta: Vec<f64>,
}

impl ConcurrencyGroupsAccumulator {
    fn width(&self) -> usize {
        self.grid.steps + 1
    }
}

impl GroupsAccumulator for ConcurrencyGroupsAccumulator {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let width = self.width();
        self.delta.resize(total_num_groups * width, 0.0);
        let delta = &mut self.delta;
        for_each_interval(&self.grid, values, |row, first, stop| {
            if passes(opt_filter, row) {
                let base = group_indices[row] * width;
                delta[base + first] += 1.0;
                delta[base + stop] -= 1.0;
            }
        })
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let width = self.width();
        let (delta, groups) = take_groups(&mut self.delta, emit_to, width);
        Ok(Arc::new(running_sums(&delta, self.grid.steps, groups)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let width = self.width();
        let (delta, groups) = take_groups(&mut self.delta, emit_to, width);
        Ok(vec![Arc::new(fixed_width_list(delta, width, groups))])
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        let width = self.width();
        self.delta.resize(total_num_groups * width, 0.0);
        merge_into(Grid::FUNC, &mut self.delta, &values[0], group_indices, width)
    }

    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let (width, rows) = (self.width(), values[0].len());
        let mut delta = vec![0.0; rows * width];
        for_each_interval(&self.grid, values, |row, first, stop| {
            if passes(opt_filter, row) {
                delta[row * width + first] = 1.0;
                delta[row * width + stop] = -1.0;
            }
        })?;
        Ok(vec![Arc::new(fixed_width_list(delta, width, rows))])
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.delta.capacity() * size_of::<f64>()
    }
}

/// `concurrency_series(start, end, from, to, step)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ConcurrencySeries {
    signature: Signature,
}

impl Default for ConcurrencySeries {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

static CONCURRENCY_SERIES_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_GENERAL,
        "For each step time t = from + i·step in [from, to) (ceil((to − from)/step) steps, the last may \
         pass `to`), the number of the group's intervals [start, end) active at t, i.e. with start ≤ t < \
         end, as a `List<Float64>`: Kahuna's Maps executing per second on a node. A NULL start means the \
         interval began before the data, a NULL end that it is still running; rows with both NULL, a \
         NaN, or end < start are skipped. Has a groups accumulator (a million job-and-host series in one \
         buffer) and retracts for sliding windows.",
        "concurrency_series(start, end, from, to, step)",
    )
    .with_sql_example(concat!(
        "SELECT concurrency_series(s, e, 0, 6, 1)\n",
        "FROM (VALUES (0, 3), (1, 2), (4, NULL), (NULL, 1)) AS v(s, e);\n",
        "-- [2, 2, 1, 0, 1, 1]"
    ))
    .with_argument("start", "Timestamp or numeric column: when the interval starts (inclusive).")
    .with_argument("end", "Timestamp or numeric column: when it ends (exclusive).")
    .with_argument("from", "Timestamp literal for timestamp columns, number literal otherwise: the first step time.")
    .with_argument("to", "Literal as `from`, later than it: the end of the series (exclusive).")
    .with_argument(
        "step",
        "Positive literal: seconds or an `INTERVAL` without months for timestamp columns, a number in \
         the column's unit otherwise; at most 10,000,000 steps.",
    )
    .build()
});

impl AggregateUDFImpl for ConcurrencySeries {
    fn name(&self) -> &str {
        Grid::FUNC
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        let f = Grid::FUNC;
        check_arity(f, t, 5, 5)?;
        for (i, name) in [(0, "start"), (1, "end"), (2, "from"), (3, "to")] {
            require_time(f, i, name, &t[i])?;
        }
        // Timestamps and numbers do not mix: seconds since the epoch are not a unit we can guess.
        let kinds: Vec<bool> =
            t[..4].iter().filter(|t| **t != DataType::Null).map(|t| units_per_second(t).is_some()).collect();
        if kinds.windows(2).any(|w| w[0] != w[1]) {
            return Err(arg_error(
                f,
                2,
                "from",
                format!("start, end, from and to must all be timestamps or all numbers, got {t:?}"),
            ));
        }
        Ok(t.to_vec())
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(f64_list_type())
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        Grid::parse(&logical_literals(&params.args))?;
        udaf_default_schema_name(self, params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        Grid::parse(&logical_literals(&params.args))?;
        udaf_default_window_function_schema_name(self, params)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let grid = Grid::parse(&physical_literals(args.exprs))?;
        Ok(Box::new(ConcurrencyAccumulator { grid, delta: vec![0.0; grid.steps + 1] }))
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        let grid = Grid::parse(&physical_literals(args.exprs))?;
        Ok(Box::new(ConcurrencyGroupsAccumulator { grid, delta: Vec::new() }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(format_state_name(args.name, "delta"), f64_list_type(), true))])
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&CONCURRENCY_SERIES_DOC)
    }
}

/// Pearson's r of the pairs where both items are present. `None` with fewer than two pairs or
/// when either series is constant; NaN when a value is NaN or infinite.
pub(crate) fn pearson_pairs(a: &[f64], b: &[f64], present: impl Fn(usize) -> bool) -> Option<f64> {
    let (mut n, mut sa, mut sb) = (0usize, 0.0, 0.0);
    for i in (0..a.len()).filter(|&i| present(i)) {
        n += 1;
        sa += a[i];
        sb += b[i];
    }
    if n < 2 {
        return None;
    }
    if !(sa.is_finite() && sb.is_finite()) {
        return Some(f64::NAN);
    }
    let (ma, mb) = (sa / n as f64, sb / n as f64);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for i in (0..a.len()).filter(|&i| present(i)) {
        let (da, db) = (a[i] - ma, b[i] - mb);
        sab += da * db;
        saa += da * da;
        sbb += db * db;
    }
    if saa == 0.0 || sbb == 0.0 {
        return None;
    }
    Some((sab / (saa.sqrt() * sbb.sqrt())).clamp(-1.0, 1.0))
}

/// `pearson(a, b)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Pearson {
    signature: Signature,
}

impl Default for Pearson {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

static PEARSON_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_MATH,
        "Pearson's r, in [-1, 1], of two equal-length series, over the positions where neither item is \
         NULL. NULL when either list is NULL, with fewer than two such positions, or when a series is \
         constant; NaN when a value is NaN or infinite. Lists of different lengths are an error. \
         Kahuna's peer similarity is `abs(pearson(a, b))` of two nodes' `concurrency_series`.",
        "pearson(a, b)",
    )
    .with_sql_example(concat!("SELECT pearson([1, 2, 3, 4], [2, 4, 5, 9]);\n", "-- 0.964763821"))
    .with_argument("a", "List of numbers.")
    .with_argument("b", "List of numbers as long as `a`.")
    .build()
});

impl ScalarUDFImpl for Pearson {
    fn name(&self) -> &str {
        "pearson"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name(), t, 2, 2)?;
        Ok(vec![require_number_list(self.name(), 0, "a", &t[0])?, require_number_list(self.name(), 1, "b", &t[1])?])
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (a, b) = (to_f64_list(&arrays[0])?, to_f64_list(&arrays[1])?);
        let mut out = Vec::with_capacity(a.len());
        for row in 0..a.len() {
            if a.is_null(row) || b.is_null(row) {
                out.push(None);
                continue;
            }
            let (xs, ys) = (a.value(row), b.value(row));
            if xs.len() != ys.len() {
                return Err(exec_error(
                    self.name(),
                    format!(
                        "a has {} values and b has {} (row {row}); series must have equal length",
                        xs.len(),
                        ys.len()
                    ),
                ));
            }
            let (xs, ys) = (to_f64(&xs)?, to_f64(&ys)?);
            out.push(pearson_pairs(xs.values(), ys.values(), |i| xs.is_valid(i) && ys.is_valid(i)));
        }
        scalar_or_array(&args.args, Arc::new(Float64Array::from(out)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&PEARSON_DOC)
    }
}

/// A series' lowest |r| with a peer and its mean |r|.
pub type LowestAndMean = (f64, Option<f64>);

/// `Σ a·b` over eight independent sums: a single running sum is a chain of dependent additions
/// in a fixed order, which the compiler may not vectorise, and this sum is most of a pair's
/// work (the M45 study compares many pairs of short series).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    const LANES: usize = 8;
    let mut lanes = [0.0; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let rest: f64 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..LANES {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f64>() + rest
}

/// For every series of a partition, its lowest |r| with a peer (a peer with which r is
/// undefined counts 0) and its mean |r| over the peers where r is defined (None where it is
/// nowhere); `None` for a NULL series or one without peers. Each pair is computed once. Series of
/// small whole numbers (counts, as `concurrency_series` makes them) pair through exact integer
/// sums ([`WholeSeries`]); other series without missing or non-finite items are standardised
/// once, so that a pair costs one dot product; the others pair through [`pearson_pairs`], as
/// `pearson` does.
pub fn peer_correlations(func: &str, series: &ArrayRef) -> Result<Vec<Option<LowestAndMean>>> {
    let lists = to_f64_list(series)?;
    let values = lists.values().as_primitive::<Float64Type>();
    let offsets = lists.value_offsets();
    let rows: Vec<usize> = (0..lists.len()).filter(|&row| lists.is_valid(row)).collect();
    let span = |row: usize| offsets[row] as usize..offsets[row + 1] as usize;
    let width = rows.first().map_or(0, |&row| span(row).len());
    if let Some(&row) = rows.iter().find(|&&row| span(row).len() != width) {
        return Err(exec_error(
            func,
            format!("rows {} and {row} of a partition have series of {width} and {} values", rows[0], span(row).len()),
        ));
    }
    let spans: Vec<Range<usize>> = rows.iter().map(|&row| span(row)).collect();
    let no_nulls = |s: &Range<usize>| values.nulls().is_none_or(|n| n.slice(s.start, s.len()).null_count() == 0);
    let whole = spans.iter().all(no_nulls).then(|| WholeSeries::of(values.values(), &spans, width)).flatten();
    let found = if let Some(whole) = whole {
        whole.peer_correlations()
    } else {
        // Plain: no missing or non-finite item, decided once per series, not once per pair.
        let plain: Vec<bool> =
            spans.iter().map(|s| no_nulls(s) && values.values()[s.clone()].iter().all(|v| v.is_finite())).collect();
        // Standardised: centred and scaled to unit norm, so r is their dot product. None: constant.
        let standardised: Vec<Option<Vec<f64>>> = spans
            .iter()
            .zip(&plain)
            .map(|(s, &plain)| {
                let xs = &values.values()[s.clone()];
                let mean = xs.iter().sum::<f64>() / xs.len().max(1) as f64;
                let norm = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>().sqrt();
                (plain && xs.len() >= 2 && norm > 0.0).then(|| xs.iter().map(|x| (x - mean) / norm).collect())
            })
            .collect();
        lowest_and_mean(rows.len(), |i, j| {
            if plain[i] && plain[j] {
                let (a, b) = (standardised[i].as_ref()?, standardised[j].as_ref()?);
                return Some(dot(a, b).clamp(-1.0, 1.0));
            }
            let (a, b) = (&spans[i], &spans[j]);
            pearson_pairs(&values.values()[a.clone()], &values.values()[b.clone()], |k| {
                values.is_valid(a.start + k) && values.is_valid(b.start + k)
            })
        })
    };
    let mut out = vec![None; lists.len()];
    if rows.len() > 1 {
        for (row, found) in rows.into_iter().zip(found) {
            out[row] = Some(found);
        }
    }
    Ok(out)
}

/// Each of `n` series' lowest |r| and mean |r|, `r(i, j)` called once per pair (None: undefined).
fn lowest_and_mean(n: usize, r: impl Fn(usize, usize) -> Option<f64>) -> Vec<LowestAndMean> {
    let mut tally = Tally::new(n);
    for i in 0..n {
        for j in i + 1..n {
            tally.take(i, j, r(i, j));
        }
    }
    tally.finish()
}

/// Each series' lowest |r| and sum of |r| so far, pair by pair: an undefined r counts as 0 for
/// the lowest and is left out of the mean.
struct Tally {
    lowest: Vec<f64>,
    sums: Vec<(f64, usize)>,
}

impl Tally {
    fn new(n: usize) -> Self {
        Self { lowest: vec![f64::INFINITY; n], sums: vec![(0.0, 0); n] }
    }

    #[inline(always)]
    fn take(&mut self, i: usize, j: usize, r: Option<f64>) {
        let r = r.map(f64::abs).filter(|r| !r.is_nan());
        for k in [i, j] {
            self.lowest[k] = self.lowest[k].min(r.unwrap_or(0.0));
            if let Some(r) = r {
                self.sums[k].0 += r;
                self.sums[k].1 += 1;
            }
        }
    }

    fn finish(self) -> Vec<LowestAndMean> {
        let means = self.sums.into_iter().map(|(sum, n)| (n > 0).then(|| sum / n as f64));
        self.lowest.into_iter().zip(means).collect()
    }
}

/// Series of whole numbers small enough that every sum of products of two of them fits an
/// `i32`, kept as `i16`: r = (n·Σab − Σa·Σb) / √((n·Σa² − (Σa)²)(n·Σb² − (Σb)²)) from exact
/// integer sums. A pair is then one integer dot product, eight products an instruction.
pub(crate) struct WholeSeries {
    values: Vec<i16>,
    width: usize,
    /// Σa of each series.
    sums: Vec<i64>,
    /// √(n·Σa² − (Σa)²) of each series: 0 for a constant one, whose r is undefined.
    spreads: Vec<f64>,
}

impl WholeSeries {
    /// The largest magnitude of a value of series of `width` items.
    pub(crate) fn largest(width: usize) -> i64 {
        ((i32::MAX as f64 / width.max(1) as f64).sqrt() as i64).min(i64::from(i16::MAX))
    }

    /// `series` series of `width` values one after another, each at most [`Self::largest`] in
    /// magnitude.
    pub(crate) fn new(values: Vec<i16>, width: usize, series: usize) -> Self {
        let (mut sums, mut spreads) = (Vec::with_capacity(series), Vec::with_capacity(series));
        for k in 0..series {
            let items = &values[k * width..][..width];
            // Both fit an `i32` at values of at most `largest(width)`, and sum faster there.
            let sum = i64::from(items.iter().map(|&v| i32::from(v)).sum::<i32>());
            let squares = i64::from(items.iter().map(|&v| i32::from(v) * i32::from(v)).sum::<i32>());
            sums.push(sum);
            spreads.push(((width as i64 * squares - sum * sum) as f64).sqrt());
        }
        Self { values, width, sums, spreads }
    }

    /// None where a value is not a whole number or too large.
    fn of(values: &[f64], spans: &[Range<usize>], width: usize) -> Option<Self> {
        let largest = Self::largest(width) as f64;
        let mut kept = Vec::with_capacity(spans.len() * width);
        for v in spans.iter().flat_map(|span| &values[span.clone()]) {
            let whole = *v as i16;
            if f64::from(whole) != *v || v.abs() > largest {
                return None;
            }
            kept.push(whole);
        }
        Some(Self::new(kept, width, spans.len()))
    }

    /// Each series' lowest and mean |r| with the others.
    pub(crate) fn peer_correlations(&self) -> Vec<LowestAndMean> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: this processor has AVX2.
            return unsafe { self.peer_correlations_avx2() };
        }
        self.rows_of_pairs(whole_dot)
    }

    /// The same with sixteen products an instruction, and wider registers for the coefficients:
    /// AVX2 is chosen at run time so that the crate runs on any x86-64.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn peer_correlations_avx2(&self) -> Vec<LowestAndMean> {
        self.rows_of_pairs(|a, b| whole_dot_avx2(a, b))
    }

    /// The pairs of series i and each later one, a row at a time: their dot products, then
    /// their coefficients in a loop of their own, so that the divisions, the slowest step, go
    /// several to an instruction rather than one a pair, each waited on; then the tally in
    /// [`lowest_and_mean`]'s order, so that the means are the same to the last bit. Inlined,
    /// so that a caller compiled for wider registers compiles it for them too.
    #[inline(always)]
    fn rows_of_pairs(&self, dot: impl Fn(&[i16], &[i16]) -> i32) -> Vec<LowestAndMean> {
        let n = self.sums.len();
        let mut tally = Tally::new(n);
        let (mut covariances, mut coefficients) = (vec![0.0; n], vec![0.0; n]);
        let series = |k: usize| &self.values[k * self.width..][..self.width];
        for i in 0..n {
            let later = i + 1..n;
            for j in later.clone() {
                let products = self.width as i64 * i64::from(dot(series(i), series(j)));
                covariances[j] = (products - self.sums[i] * self.sums[j]) as f64;
            }
            let spread = self.spreads[i];
            let row = coefficients[later.clone()].iter_mut().zip(&covariances[later.clone()]);
            for ((r, covariance), other) in row.zip(&self.spreads[later.clone()]) {
                *r = (covariance / (spread * other)).clamp(-1.0, 1.0);
            }
            for j in later {
                // Undefined where either series is constant.
                tally.take(i, j, (spread != 0.0 && self.spreads[j] != 0.0).then_some(coefficients[j]));
            }
        }
        tally.finish()
    }
}

/// `Σ a·b`: integer sums may be reordered. On x86-64, eight products an instruction that adds
/// them in pairs (`pmaddwd`, in every x86-64); the compiler's own choice for the portable form
/// changes from build to build, and in ours took twice as long. No partial sum overflows where
/// the whole sum of magnitudes fits an `i32`, as [`WholeSeries::largest`] makes sure.
#[cfg(target_arch = "x86_64")]
fn whole_dot(a: &[i16], b: &[i16]) -> i32 {
    use std::arch::x86_64::{__m128i, _mm_add_epi32, _mm_loadu_si128, _mm_madd_epi16, _mm_setzero_si128};
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let rest = dot_of_rest(a_chunks.remainder(), b_chunks.remainder());
    // SAFETY: SSE2 is part of every x86-64 processor; each chunk is 8 `i16`, the 16 bytes an
    // unaligned load reads; the sums' 16 bytes are four `i32` whatever their bits.
    let lanes: [i32; 4] = unsafe {
        let mut sums = _mm_setzero_si128();
        for (x, y) in a_chunks.zip(b_chunks) {
            let (x, y) = (_mm_loadu_si128(x.as_ptr().cast::<__m128i>()), _mm_loadu_si128(y.as_ptr().cast()));
            sums = _mm_add_epi32(sums, _mm_madd_epi16(x, y));
        }
        std::mem::transmute::<__m128i, [i32; 4]>(sums)
    };
    lanes.iter().sum::<i32>() + rest
}

/// [`whole_dot`] sixteen items a step, the rest as `whole_dot` does it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn whole_dot_avx2(a: &[i16], b: &[i16]) -> i32 {
    use std::arch::x86_64::{__m256i, _mm256_add_epi32, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_setzero_si256};
    let (a_chunks, b_chunks) = (a.chunks_exact(16), b.chunks_exact(16));
    let rest = whole_dot(a_chunks.remainder(), b_chunks.remainder());
    let mut sums = _mm256_setzero_si256();
    for (x, y) in a_chunks.zip(b_chunks) {
        // SAFETY: each chunk is 16 `i16`, the 32 bytes an unaligned load reads.
        let (x, y) =
            unsafe { (_mm256_loadu_si256(x.as_ptr().cast::<__m256i>()), _mm256_loadu_si256(y.as_ptr().cast())) };
        sums = _mm256_add_epi32(sums, _mm256_madd_epi16(x, y));
    }
    // SAFETY: the sums' 32 bytes are eight `i32` whatever their bits.
    let lanes = unsafe { std::mem::transmute::<__m256i, [i32; 8]>(sums) };
    lanes.iter().sum::<i32>() + rest
}

/// `Σ a·b` in eight lanes, eight items a step.
#[cfg(not(target_arch = "x86_64"))]
fn whole_dot(a: &[i16], b: &[i16]) -> i32 {
    const LANES: usize = 8;
    let mut lanes = [0i32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let rest = dot_of_rest(a_chunks.remainder(), b_chunks.remainder());
    for (x, y) in a_chunks.zip(b_chunks) {
        for k in 0..LANES {
            lanes[k] += i32::from(x[k]) * i32::from(y[k]);
        }
    }
    lanes.iter().sum::<i32>() + rest
}

fn dot_of_rest(a: &[i16], b: &[i16]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum()
}

fn peer_pearson_fields() -> Fields {
    Fields::from(vec![
        Field::new("lowest_abs_r", DataType::Float64, true),
        Field::new("mean_abs_r", DataType::Float64, true),
    ])
}

/// `peer_pearson(series) OVER (PARTITION BY peer_group)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PeerPearson {
    signature: Signature,
}

impl Default for PeerPearson {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

static PEER_PEARSON_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_ANALYTICAL,
        "Over `PARTITION BY` the peer group: how alike a row's series is to the other rows' series, as a \
         struct of `lowest_abs_r` (the lowest |`pearson`| with any peer; a peer with which r is \
         undefined, such as a constant series, counts 0) and `mean_abs_r` (the mean |`pearson`| over the \
         peers where r is defined, NULL where it is nowhere). A NULL series is NULL and nobody's peer; a \
         row without peers is NULL; ORDER BY and frames are ignored. It replaces a self-join with \
         `pearson`, which copies both series into every pair's row: each pair is computed once, within \
         the partition, and series without missing items cost one dot product a pair. Kahuna's *similar* \
         node has `lowest_abs_r >= 0.6`.",
        "peer_pearson(series)",
    )
    .with_sql_example(concat!(
        "SELECT host, p['lowest_abs_r'] AS lowest, p['mean_abs_r'] AS mean\n",
        "FROM (SELECT host, peer_pearson(s) OVER (PARTITION BY job) AS p\n",
        "      FROM (VALUES ('j', 'r1', [1, 2, 3, 4]), ('j', 'r2', [2, 4, 5, 9]),\n",
        "                   ('j', 'r3', [4, 3, 2, 1])) AS v(job, host, s))\n",
        "ORDER BY host;\n",
        "-- r1 0.964763821 0.982381911\n",
        "-- r2 0.964763821 0.964763821\n",
        "-- r3 0.964763821 0.982381911"
    ))
    .with_argument("series", "List of numbers, equally long for the whole partition.")
    .build()
});

#[derive(Debug)]
struct PeerPearsonEvaluator;

impl PartitionEvaluator for PeerPearsonEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], _num_rows: usize) -> Result<ArrayRef> {
        let found = peer_correlations("peer_pearson", &values[0])?;
        let lowest: Float64Array = found.iter().map(|f| f.map(|(lowest, _)| lowest)).collect();
        let mean: Float64Array = found.iter().map(|f| f.and_then(|(_, mean)| mean)).collect();
        let nulls = NullBuffer::from_iter(found.iter().map(Option::is_some));
        Ok(Arc::new(StructArray::try_new(peer_pearson_fields(), vec![Arc::new(lowest), Arc::new(mean)], Some(nulls))?))
    }
}

impl WindowUDFImpl for PeerPearson {
    fn name(&self) -> &str {
        "peer_pearson"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name(), t, 1, 1)?;
        Ok(vec![require_number_list_uncast(self.name(), 0, "series", &t[0])?])
    }

    fn partition_evaluator(&self, _args: PartitionEvaluatorArgs) -> Result<Box<dyn PartitionEvaluator>> {
        Ok(Box::new(PeerPearsonEvaluator))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(Field::new(args.name(), DataType::Struct(peer_pearson_fields()), true)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&PEER_PEARSON_DOC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{
        assert_lists_close, ctx, ctx_skipping_partial_aggregation, f64_column, f64_lists, query_err, strings,
    };

    #[test]
    fn pearson_by_hand() {
        // Hand-computed: means 2.5 and 5; deviations (-1.5,-0.5,0.5,1.5) and (-3,-1,0,4):
        // sab = 4.5+0.5+0+6 = 11, saa = 5, sbb = 26, r = 11 / sqrt(130).
        let r = pearson_pairs(&[1.0, 2.0, 3.0, 4.0], &[2.0, 4.0, 5.0, 9.0], |_| true).unwrap();
        assert!((r - 11.0 / 130f64.sqrt()).abs() < 1e-15);
        assert_eq!(pearson_pairs(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0], |_| true), None);
        assert_eq!(pearson_pairs(&[1.0], &[1.0], |_| true), None);
        assert!(pearson_pairs(&[1.0, f64::INFINITY], &[1.0, 2.0], |_| true).unwrap().is_nan());
    }

    #[tokio::test]
    async fn pearson_equals_corr() {
        let ctx = ctx(1);
        ctx.sql(
            "CREATE TABLE s AS SELECT value AS i, sin(CAST(value AS DOUBLE)) * 10 + value % 7 AS a, \
             cos(CAST(value AS DOUBLE) / 3) + CAST(value AS DOUBLE) / 50 AS b FROM generate_series(1, 500)",
        )
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
        let ours = f64_column(&ctx, "SELECT pearson(array_agg(a ORDER BY i), array_agg(b ORDER BY i)) FROM s").await;
        let theirs = f64_column(&ctx, "SELECT corr(a, b) FROM s").await;
        let (ours, theirs) = (ours[0].unwrap(), theirs[0].unwrap());
        assert!((ours - theirs).abs() < 1e-12, "{ours} vs {theirs}");
        let got = f64_column(&ctx, "SELECT pearson(a, b) FROM (VALUES ([1, 2, NULL, 4], [2, 4, 100, 9]), ([1, 1], [2, 3]), (NULL, [1])) AS v(a, b)").await;
        // The NULL pair is skipped: numpy.corrcoef([1, 2, 4], [2, 4, 9]) = 0.998625428903524.
        assert!((got[0].unwrap() - 0.998625428903524).abs() < 1e-12, "{got:?}");
        assert_eq!(got[1..], [None, None]);
        let err = query_err(&ctx, "SELECT pearson([1, 2], [1, 2, 3])").await;
        assert!(err.contains("pearson: a has 2 values and b has 3"), "{err}");
    }

    #[tokio::test]
    async fn concurrency_by_hand() {
        let ctx = ctx(1);
        // Steps at 0, 2, 4, 6, 8 ([0, 10) by 2). Intervals: [0, 3) active at 0, 2; [2, 2) never;
        // [3, NULL) from 4 on; [NULL, 4) at 0, 2; [5, 100) at 6, 8; [7, 1) skipped (end < start).
        let sql = "SELECT concurrency_series(s, e, 0, 10, 2) FROM (VALUES (0, 3), (2, 2), (3, NULL), \
                   (NULL, 4), (5, 100), (7, 1), (NULL, NULL)) AS v(s, e)";
        assert_lists_close(&f64_lists(&ctx, sql).await, &[Some(vec![2.0, 2.0, 1.0, 2.0, 2.0])], 0.0, sql);
        let sql = "SELECT concurrency_series(s, e, TIMESTAMP '2008-08-23 17:00:00', TIMESTAMP '2008-08-23 17:00:03', \
                   INTERVAL '1 second') FROM (VALUES (TIMESTAMP '2008-08-23 17:00:00.500', TIMESTAMP '2008-08-23 17:00:02')) AS v(s, e)";
        // Active at 17:00:01 only (started after :00, ended at :02, exclusive).
        assert_lists_close(&f64_lists(&ctx, sql).await, &[Some(vec![0.0, 1.0, 0.0])], 0.0, sql);
        let err = query_err(&ctx, "SELECT concurrency_series(s, e, 0, 10, 0) FROM (VALUES (1, 2)) AS v(s, e)").await;
        assert!(err.contains("concurrency_series: argument 5 (step) must be a positive"), "{err}");
    }

    #[test]
    fn concurrency_groups_by_hand() {
        use crate::args::list_row;
        // Steps at 0, 2, 4, 6, 8, as in concurrency_by_hand. Group 0: [0, 3) and [NULL, 4),
        // both active at 0 and 2; [1, 9) is filtered out. Group 1: [3, NULL) from 4 on and
        // [5, 100) at 6 and 8.
        let grid = Grid { from: 0.0, step: 2.0, steps: 5 };
        let starts: ArrayRef = Arc::new(Float64Array::from(vec![Some(0.0), Some(3.0), None, Some(5.0), Some(1.0)]));
        let ends: ArrayRef = Arc::new(Float64Array::from(vec![Some(3.0), None, Some(4.0), Some(100.0), Some(9.0)]));
        let values = [starts, ends];
        let (groups, filter) = ([0, 1, 0, 1, 0], BooleanArray::from(vec![true, true, true, true, false]));
        let lists = |array: ArrayRef| -> Vec<Vec<f64>> {
            let lists = to_f64_list(&array).unwrap();
            (0..lists.len()).map(|row| list_row(&lists, row, &mut Vec::new()).unwrap().to_vec()).collect()
        };
        let mut acc = ConcurrencyGroupsAccumulator { grid, delta: Vec::new() };
        acc.update_batch(&values, &groups, Some(&filter), 2).unwrap();
        // Group 0's partial state, merged twice into another accumulator, counts double there.
        let first = acc.state(EmitTo::First(1)).unwrap();
        let mut merged = ConcurrencyGroupsAccumulator { grid, delta: Vec::new() };
        merged.merge_batch(&first, &[0], 1).unwrap();
        merged.merge_batch(&first, &[0], 1).unwrap();
        assert_eq!(lists(merged.evaluate(EmitTo::All).unwrap()), vec![vec![4.0, 4.0, 0.0, 0.0, 0.0]]);
        assert_eq!(lists(acc.evaluate(EmitTo::All).unwrap()), vec![vec![0.0, 0.0, 1.0, 2.0, 2.0]]);
        // Each row as a state of its own (partial aggregation skipped) merges to the same.
        let rows = acc.convert_to_state(&values, Some(&filter)).unwrap();
        let mut from_rows = ConcurrencyGroupsAccumulator { grid, delta: Vec::new() };
        from_rows.merge_batch(&rows, &groups, 2).unwrap();
        let expected = vec![vec![2.0, 2.0, 0.0, 0.0, 0.0], vec![0.0, 0.0, 1.0, 2.0, 2.0]];
        assert_eq!(lists(from_rows.evaluate(EmitTo::All).unwrap()), expected);
    }

    #[tokio::test]
    async fn concurrency_agrees_across_partitionings() {
        let sql = "SELECT concurrency_series(s, s + value % 13, 0, 1000, 7) FROM \
                   (SELECT value, value % 997 AS s FROM generate_series(1, 5000)) GROUP BY value % 3 ORDER BY value % 3";
        let mut results = Vec::new();
        for ctx in [ctx(1), ctx(8), ctx_skipping_partial_aggregation(8)] {
            results.push(f64_lists(&ctx, sql).await);
        }
        assert_lists_close(&results[0], &results[1], 0.0, sql);
        assert_lists_close(&results[0], &results[2], 0.0, sql);
    }

    fn series(rows: &[Option<Vec<f64>>]) -> ArrayRef {
        let rows = rows.iter().map(|r| r.as_ref().map(|v| v.iter().copied().map(Some).collect::<Vec<_>>()));
        Arc::new(datafusion::arrow::array::ListArray::from_iter_primitive::<Float64Type, _, _>(rows))
    }

    /// The first step at or after a time is the ceiling of its place on the grid, clamped.
    #[test]
    fn first_at_or_after_is_the_clamped_ceiling() {
        let grid = Grid { from: -3.0, step: 0.5, steps: 100 };
        let times =
            [f64::NEG_INFINITY, -1e300, -3.7, -3.2, -3.0, -2.99, -2.5, 0.0, 0.1, 1.75, 47.0, 47.01, f64::INFINITY];
        for t in times {
            let want = ((t + 3.0) / 0.5).ceil().clamp(0.0, 100.0) as usize;
            assert_eq!(grid.first_at_or_after(t), want, "{t}");
        }
    }

    /// Every width up to 130 (chunks and a rest), values at ± the largest allowed: the sums of
    /// `whole_dot` (and of `whole_dot_avx2`, where the processor has AVX2) equal those of 64-bit
    /// integers.
    #[test]
    fn whole_dot_is_exact_at_the_bound() {
        type Dot = fn(&[i16], &[i16]) -> i32;
        let mut dots: Vec<(&str, Dot)> = vec![("whole_dot", whole_dot)];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: this processor has AVX2.
            dots.push(("whole_dot_avx2", |a, b| unsafe { super::whole_dot_avx2(a, b) }));
        }
        for width in 1..=130usize {
            let largest = WholeSeries::largest(width) as i16;
            let a: Vec<i16> = (0..width).map(|k| if k % 3 == 0 { -largest } else { largest }).collect();
            let b: Vec<i16> = (0..width).map(|k| if k % 5 == 1 { largest } else { -largest + k as i16 % 7 }).collect();
            let want: i64 = a.iter().zip(&b).map(|(&x, &y)| i64::from(x) * i64::from(y)).sum();
            let squares: i64 = a.iter().map(|&x| i64::from(x) * i64::from(x)).sum();
            for (name, dot) in &dots {
                assert_eq!(i64::from(dot(&a, &b)), want, "{name}, width {width}");
                assert_eq!(i64::from(dot(&a, &a)), squares, "{name}, width {width}");
            }
        }
    }

    #[test]
    fn peer_correlations_by_hand() {
        // b is a with noise (r_ab = 11/√130, as in pearson_by_hand); c = 5 − a, so r_ac = −1
        // and r_bc = −r_ab; d is constant (r undefined: counts 0 for the lowest, left out of
        // the mean); the NULL row is nobody's peer.
        let four = series(&[
            Some(vec![1.0, 2.0, 3.0, 4.0]),
            Some(vec![2.0, 4.0, 5.0, 9.0]),
            Some(vec![4.0, 3.0, 2.0, 1.0]),
            Some(vec![5.0, 5.0, 5.0, 5.0]),
            None,
        ]);
        let r_ab = 11.0 / 130f64.sqrt();
        let got = peer_correlations("peer_pearson", &four).unwrap();
        let want = [(0.0, (r_ab + 1.0) / 2.0), (0.0, r_ab), (0.0, (1.0 + r_ab) / 2.0)];
        for (row, (lowest, mean)) in want.into_iter().enumerate() {
            let (got_lowest, got_mean) = got[row].unwrap();
            let got_mean = got_mean.unwrap();
            assert_eq!(got_lowest, lowest, "row {row}");
            assert!((got_mean - mean).abs() < 1e-15, "row {row}: {got_mean} against {mean}");
        }
        assert_eq!(got[3], Some((0.0, None)));
        assert_eq!(got[4], None);
        // Without the constant series, a and c are perfectly (anti-)correlated; a lone series
        // has no peers.
        let two = peer_correlations("peer_pearson", &series(&[Some(vec![1.0, 2.0, 3.0]), Some(vec![3.0, 2.0, 1.0])]));
        for found in two.unwrap() {
            let (lowest, mean) = found.unwrap();
            let mean = mean.unwrap();
            assert!((lowest - 1.0).abs() < 1e-15 && (mean - 1.0).abs() < 1e-15, "{lowest} {mean}");
        }
        assert_eq!(peer_correlations("peer_pearson", &series(&[Some(vec![1.0, 2.0])])).unwrap(), [None]);
    }

    /// A row of pairs at a time gives each pair's coefficient as one pair at a time does, and
    /// takes them in the same order: the lowest and the mean are equal to the last bit, with
    /// constant series (undefined r) among them.
    #[test]
    fn rows_of_pairs_equal_pairs_one_at_a_time() {
        let mut next = crate::test_util::uniform(11);
        let (width, n) = (37, 23);
        let values: Vec<i16> =
            (0..n * width).map(|k| if (k / width) % 7 == 3 { 4 } else { (next() * 60.0) as i16 - 20 }).collect();
        let whole = super::WholeSeries::new(values, width, n);
        let series = |k: usize| &whole.values[k * width..][..width];
        let one_pair = |i: usize, j: usize| {
            if whole.spreads[i] == 0.0 || whole.spreads[j] == 0.0 {
                return None;
            }
            let products: i64 = series(i).iter().zip(series(j)).map(|(&a, &b)| i64::from(a) * i64::from(b)).sum();
            let covariance = width as i64 * products - whole.sums[i] * whole.sums[j];
            Some((covariance as f64 / (whole.spreads[i] * whole.spreads[j])).clamp(-1.0, 1.0))
        };
        let want = super::lowest_and_mean(n, one_pair);
        assert_eq!(whole.peer_correlations(), want);
        assert_eq!(whole.rows_of_pairs(whole_dot), want);
        assert!(want.iter().filter(|(lowest, _)| *lowest == 0.0).count() >= 3, "constant series take part");
    }

    /// Series of whole numbers pair through exact integer sums, others through standardised
    /// series: the same coefficients, r being unchanged by shifting or scaling a series. Values
    /// too large for the integer sums (here 9,000 > √(2³¹ / 50)) take the standardised route.
    #[test]
    fn whole_series_agree_with_the_standardised_route() {
        let mut next = crate::test_util::uniform(7);
        let whole: Vec<Vec<f64>> = (0..6).map(|_| (0..50).map(|_| (next() * 10.0).floor()).collect()).collect();
        let changed = |f: fn(f64) -> f64| -> Vec<Option<Vec<f64>>> {
            whole.iter().map(|row| Some(row.iter().map(|&v| f(v)).collect())).collect()
        };
        let spans: Vec<_> = (0..6).map(|k| k * 50..(k + 1) * 50).collect();
        let flat = |rows: &[Option<Vec<f64>>]| rows.iter().flatten().flatten().copied().collect::<Vec<f64>>();
        let (same, shifted, scaled) = (changed(|v| v), changed(|v| v + 0.5), changed(|v| v * 1000.0));
        assert!(super::WholeSeries::of(&flat(&same), &spans, 50).is_some());
        assert!(super::WholeSeries::of(&flat(&shifted), &spans, 50).is_none());
        assert!(super::WholeSeries::of(&flat(&scaled), &spans, 50).is_none());
        let exact = peer_correlations("peer_pearson", &series(&same)).unwrap();
        for other in [shifted, scaled] {
            for (a, b) in exact.iter().zip(peer_correlations("peer_pearson", &series(&other)).unwrap()) {
                let ((lowest_a, mean_a), (lowest_b, mean_b)) = (a.unwrap(), b.unwrap());
                assert!((lowest_a - lowest_b).abs() < 1e-12, "{lowest_a} {lowest_b}");
                assert!((mean_a.unwrap() - mean_b.unwrap()).abs() < 1e-12, "{mean_a:?} {mean_b:?}");
            }
        }
    }

    #[tokio::test]
    async fn peer_pearson_agrees_with_the_pair_join() {
        // Missing items take the pairwise route, the others the standardised one: both must
        // give what a self-join with `pearson` gives.
        let ctx = ctx(4);
        let values = "(1, 'a', [1.0, 2.0, 3.0, 4.0, 2.0]), (1, 'b', [2.0, 4.0, 5.0, 9.0, 1.0]), \
                      (1, 'c', [3.0, NULL, 2.0, 1.0, 0.5]), (1, 'd', [0.0, 1.0, 0.0, 1.0, 0.0]), \
                      (2, 'e', [1.0, 2.0, 3.0, 4.0, 5.0]), (2, 'f', [7.0, 7.0, 7.0, 7.0, 7.0])";
        let window =
            format!("SELECT h, peer_pearson(s) OVER (PARTITION BY g) AS p FROM (VALUES {values}) AS v(g, h, s)");
        let join = format!(
            "WITH v(g, h, s) AS (VALUES {values}) \
             SELECT a.h, min(coalesce(abs(pearson(a.s, b.s)), 0)) AS lowest, avg(abs(pearson(a.s, b.s))) AS mean \
             FROM v a JOIN v b ON a.g = b.g AND a.h <> b.h GROUP BY a.h"
        );
        let sql = format!(
            "SELECT w.h, abs(w.p['lowest_abs_r'] - j.lowest) < 1e-12, \
             coalesce(abs(w.p['mean_abs_r'] - j.mean) < 1e-12, w.p['mean_abs_r'] IS NULL AND j.mean IS NULL), \
             round(w.p['lowest_abs_r'], 4) \
             FROM ({window}) w JOIN ({join}) j ON w.h = j.h ORDER BY w.h"
        );
        let got = strings(&ctx, &sql).await;
        assert_eq!(got.len(), 6, "{got:?}");
        assert!(got.iter().all(|row| row.contains("|true|true|")), "{got:?}");
        // e and f: f is constant, so each one's lowest is 0.
        assert!(got[4].ends_with("|0.0") && got[5].ends_with("|0.0"), "{got:?}");
        // The same series as `List<Float32>` (every value exact in it): no cast to
        // `List<Float64>` in the plan, the evaluator converts its partition's slice
        // (`require_number_list_uncast`), and the coefficients are the same.
        let narrow = window.replace(
            "FROM (VALUES {values}) AS v(g, h, s)".replace("{values}", values).as_str(),
            &format!("FROM (SELECT g, h, arrow_cast(s, 'List(Float32)') AS s FROM (VALUES {values}) AS v(g, h, s))"),
        );
        let plan = strings(&ctx, &format!("EXPLAIN {narrow}")).await.join("\n");
        assert!(plan.contains("Float32") && !plan.contains("AS List(Float64)"), "{plan}");
        let ordered = |sql: &str| format!("SELECT h, p['lowest_abs_r'], p['mean_abs_r'] FROM ({sql}) ORDER BY h");
        assert_eq!(strings(&ctx, &ordered(&narrow)).await, strings(&ctx, &ordered(&window)).await);
        let err =
            query_err(&ctx, "SELECT peer_pearson(s) OVER () FROM (VALUES ([1.0, 2.0]), ([1.0, 2.0, 3.0])) AS v(s)")
                .await;
        assert!(err.contains("peer_pearson") && err.contains("series of 2 and 3 values"), "{err}");
        let err = query_err(&ctx, "SELECT peer_pearson('x') OVER ()").await;
        assert!(err.contains("peer_pearson: argument 1 (series)"), "{err}");
    }
}
