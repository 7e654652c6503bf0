//! `tick_histograms`: a group's decayed histograms at regular ticks, SALSA's distributions
//! over time (§8, Algorithm 1) in one aggregate.
//!
//! A sample at time `t` belongs to the `memory` ticks after it: ticks `k` from
//! `floor(t / step) + 1` to `floor(t / step) + memory`, where it weighs
//! exp(-lambda·age / (alpha·age + 1)) with `age = k·step − t`. In SQL that is every sample
//! repeated `memory` times and grouped again by tick: `memory` times the rows through a hash
//! aggregate. Here each group's samples are sorted once and a window slides along the ticks.

use std::mem::size_of;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, ListArray, StructArray,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::{self, cast};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Int64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunctionParams, WindowFunctionParams};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, DocumentationBuilder, EmitTo, GroupsAccumulator, Signature,
    Volatility, aggregate_doc_sections::DOC_SECTION_GENERAL, udaf_default_schema_name,
    udaf_default_window_function_schema_name,
};

use crate::args::{
    Literals, check_arity, exec_error, f64_list_type, fixed_width_list, logical_literals, physical_literals,
    require_integer, require_number, require_time, times_to_f64,
};
use crate::cells::passes;
use crate::histogram::{Decay, MAX_BINS, merge_samples, samples_state_fields};

const FUNC: &str = "tick_histograms";

/// A memory longer than this is a mistake (ticks in milliseconds, say): every sample would
/// be weighed at each of them.
const MAX_MEMORY: usize = 1 << 20;

/// Ticks stay exact integers in an f64 (`k·step` is computed in floating point).
const MAX_TICK: f64 = (1u64 << 53) as f64;

/// `tick_histograms(bin, bins, ts, step, memory, lambda[, alpha])`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TickHistograms {
    signature: Signature,
}

impl Default for TickHistograms {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// The tick arguments: `bin` at some position (`at`), then `bins`, `ts`, `step`, `memory`,
/// `lambda` and `alpha` after it, as `tick_histograms` and `tick_peer_scores` take them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TickParams {
    func: &'static str,
    pub(crate) bins: usize,
    step: f64,
    memory: i64,
    decay: Decay,
}

impl TickParams {
    pub(crate) fn parse(func: &'static str, lits: &[Option<ScalarValue>], at: usize) -> Result<Self> {
        let l = Literals { func, lits };
        Ok(Self {
            func,
            bins: l.positive_int(at + 1, "bins", MAX_BINS)?,
            step: l.number(at + 3, "step", "a positive number literal", |x| x > 0.0)?,
            memory: l.positive_int(at + 4, "memory", MAX_MEMORY)? as i64,
            decay: Decay::parse(&l, at + 5)?,
        })
    }

    /// Checks the types of the arguments from `bin` at `at` to `lambda` (and `alpha`, if given).
    pub(crate) fn check_types(func: &str, t: &[DataType], at: usize) -> Result<()> {
        require_integer(func, at, "bin", &t[at])?;
        require_integer(func, at + 1, "bins", &t[at + 1])?;
        require_time(func, at + 2, "ts", &t[at + 2])?;
        require_number(func, at + 3, "step", &t[at + 3])?;
        require_integer(func, at + 4, "memory", &t[at + 4])?;
        Decay::check_types(func, t, at + 5)
    }

    /// A sample at finite time `t`, its bin clamped into `[0, bins)`; an error where `t` is
    /// too far from 0 for its ticks to be exact.
    pub(crate) fn sample(&self, t: f64, bin: i64) -> Result<Sample> {
        let ticks = (t / self.step).abs();
        if ticks.is_nan() || ticks >= MAX_TICK {
            return Err(exec_error(self.func, format!("ts {t:e} is not within 2^53 steps of {} from 0", self.step)));
        }
        Ok((t, bin.clamp(0, self.bins as i64 - 1) as u32))
    }

    /// The first tick whose distribution holds a sample taken at `t`.
    fn first_tick(&self, t: f64) -> i64 {
        (t / self.step).floor() as i64 + 1
    }
}

/// A sample: its time and its bin.
pub(crate) type Sample = (f64, u32);

/// Calls `f(row, sample)` for the rows that count: bin and ts not NULL, ts finite; bins
/// clamp into `[0, bins)`. `values` starts at the `bin` column.
pub(crate) fn samples(params: &TickParams, values: &[ArrayRef], mut f: impl FnMut(usize, Sample)) -> Result<()> {
    let bins = cast(&values[0], &DataType::Int64)?;
    let bins = bins.as_primitive::<Int64Type>();
    let ts = times_to_f64(&values[2])?;
    for row in 0..bins.len() {
        let t = ts.value(row);
        if bins.is_null(row) || ts.is_null(row) || !t.is_finite() {
            continue;
        }
        f(row, params.sample(t, bins.value(row))?);
    }
    Ok(())
}

/// Orders a group's samples as its [`Window`] reads them: by time, then bin, so that the sums
/// are the same whatever order the rows came in.
pub(crate) fn by_time(a: &Sample, b: &Sample) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// The samples whose memory holds `tick`, `samples[lo..hi]` of a group's samples in
/// [`by_time`] order, sliding along the ticks.
pub(crate) struct Window {
    lo: usize,
    hi: usize,
    bin_sum: u64,
    pub(crate) tick: i64,
}

impl Window {
    pub(crate) fn new(params: &TickParams, samples: &[Sample]) -> Self {
        Self { lo: 0, hi: 0, bin_sum: 0, tick: samples.first().map_or(0, |s| params.first_tick(s.0)) }
    }

    /// Moves to the first tick from `tick` on that holds a sample; false when none is left.
    pub(crate) fn settle(&mut self, params: &TickParams, samples: &[Sample]) -> bool {
        let first = |s: &Sample| params.first_tick(s.0);
        let n = samples.len();
        while self.lo < n {
            while self.hi < n && first(&samples[self.hi]) <= self.tick {
                self.bin_sum += u64::from(samples[self.hi].1);
                self.hi += 1;
            }
            while self.lo < self.hi && first(&samples[self.lo]) <= self.tick - params.memory {
                self.bin_sum -= u64::from(samples[self.lo].1);
                self.lo += 1;
            }
            if self.lo < self.hi {
                return true;
            }
            // A lull longer than the memory: on to the next sample's first tick.
            if self.hi == n {
                return false;
            }
            self.tick = first(&samples[self.hi]);
        }
        false
    }

    /// Adds the tick's samples, decayed, to `hist`; returns their mean bin (unweighted).
    pub(crate) fn histogram(&self, params: &TickParams, samples: &[Sample], hist: &mut [f64]) -> f64 {
        let at = self.tick as f64 * params.step;
        for &(t, bin) in &samples[self.lo..self.hi] {
            hist[bin as usize] += params.decay.weight(at - t);
        }
        self.bin_sum as f64 / (self.hi - self.lo) as f64
    }
}

/// Each group's ticks, one after another.
#[derive(Default)]
struct Ticks {
    ticks: Vec<i64>,
    hists: Vec<f64>,
    mean_bins: Vec<f64>,
    per_group: Vec<usize>,
}

impl Ticks {
    /// Appends one group's ticks.
    fn sweep(&mut self, params: &TickParams, samples: &mut [Sample]) {
        samples.sort_unstable_by(by_time);
        let before = self.ticks.len();
        let mut window = Window::new(params, samples);
        while window.settle(params, samples) {
            let start = self.hists.len();
            self.hists.resize(start + params.bins, 0.0);
            self.mean_bins.push(window.histogram(params, samples, &mut self.hists[start..]));
            self.ticks.push(window.tick);
            window.tick += 1;
        }
        self.per_group.push(self.ticks.len() - before);
    }

    fn into_array(self, bins: usize) -> Result<ArrayRef> {
        if self.hists.len() > i32::MAX as usize {
            return Err(exec_error(
                FUNC,
                format!(
                    "{} ticks of {bins} bins are more than one list array holds; aggregate fewer groups at once",
                    self.ticks.len()
                ),
            ));
        }
        let rows = self.ticks.len();
        let entries = StructArray::try_new(
            tick_fields(),
            vec![
                Arc::new(Int64Array::from(self.ticks)),
                Arc::new(fixed_width_list(self.hists, bins, rows)),
                Arc::new(Float64Array::from(self.mean_bins)),
            ],
            None,
        )?;
        Ok(Arc::new(ListArray::try_new(
            tick_item(),
            OffsetBuffer::from_lengths(self.per_group),
            Arc::new(entries),
            None,
        )?))
    }
}

fn tick_fields() -> Fields {
    Fields::from(vec![
        Field::new("tick", DataType::Int64, false),
        Field::new("hist", f64_list_type(), false),
        Field::new("mean_bin", DataType::Float64, false),
    ])
}

fn tick_item() -> FieldRef {
    Arc::new(Field::new_list_field(DataType::Struct(tick_fields()), true))
}

/// An aggregate that keeps its groups' samples until it is evaluated, as `tick_histograms`
/// (a sample is a time and a bin) and `tick_peer_scores` (and a member) do: a tick's weights
/// depend on its distance to every sample, so nothing can be summed before the ticks are known.
pub(crate) trait KeptSamples: std::fmt::Debug + Send + Sync + 'static {
    type Sample: Copy + std::fmt::Debug + Send + Sync + 'static;

    /// Calls `f(row, sample)` for the input rows that count.
    fn read(&mut self, values: &[ArrayRef], f: impl FnMut(usize, Self::Sample)) -> Result<()>;

    /// Each group's samples as a partial state.
    fn state(&self, groups: &[Vec<Self::Sample>]) -> Vec<ArrayRef>;

    /// Calls `f(row, sample)` for each sample of each row of a partial state.
    fn merge(&mut self, states: &[ArrayRef], f: impl FnMut(usize, Self::Sample)) -> Result<()>;

    /// One result row per group.
    fn evaluate(&self, groups: &mut [Vec<Self::Sample>]) -> Result<ArrayRef>;

    /// The same parameters without the keys `read` and `merge` have kept, for rows read apart
    /// from the groups (`convert_to_state`).
    fn apart(&self) -> Self;

    /// Bytes held beside the samples (keys the samples refer to).
    fn keys_size(&self) -> usize {
        0
    }

    /// Keeps only the keys the samples of `kept` refer to, once the other groups are emitted:
    /// a partial aggregate that emits early under a memory limit must give their memory back.
    fn keep_keys_of(&mut self, _kept: &mut [Vec<Self::Sample>]) {}
}

impl KeptSamples for TickParams {
    type Sample = Sample;

    fn read(&mut self, values: &[ArrayRef], f: impl FnMut(usize, Sample)) -> Result<()> {
        samples(self, values, f)
    }

    /// Each group's sample times and bins, as two lists.
    fn state(&self, groups: &[Vec<Sample>]) -> Vec<ArrayRef> {
        let lengths: Vec<usize> = groups.iter().map(Vec::len).collect();
        let list = |values: Vec<f64>| -> ArrayRef {
            Arc::new(ListArray::new(
                Arc::new(Field::new_list_field(DataType::Float64, true)),
                OffsetBuffer::from_lengths(lengths.iter().copied()),
                Arc::new(Float64Array::from(values)),
                None,
            ))
        };
        let ts = list(groups.iter().flatten().map(|s| s.0).collect());
        let bins = list(groups.iter().flatten().map(|s| f64::from(s.1)).collect());
        vec![ts, bins]
    }

    fn merge(&mut self, states: &[ArrayRef], mut f: impl FnMut(usize, Sample)) -> Result<()> {
        let mut bad = None;
        merge_samples(self.func, states, |row, t, bin| match self.sample(t, bin as i64) {
            Ok(sample) => f(row, sample),
            Err(e) => bad = bad.take().or(Some(e)),
        })?;
        bad.map_or(Ok(()), Err)
    }

    fn evaluate(&self, groups: &mut [Vec<Sample>]) -> Result<ArrayRef> {
        let mut out = Ticks::default();
        for samples in groups {
            out.sweep(self, samples);
        }
        out.into_array(self.bins)
    }

    fn apart(&self) -> Self {
        *self
    }
}

/// The groups accumulator of a [`KeptSamples`] aggregate.
#[derive(Debug)]
pub(crate) struct SampleGroups<K: KeptSamples> {
    kind: K,
    groups: Vec<Vec<K::Sample>>,
    /// The samples the groups have room for, kept up to date: DataFusion asks for the size
    /// after every batch, and a sum over every group each time grows with the groups, not the
    /// batch.
    room: usize,
}

impl<K: KeptSamples> SampleGroups<K> {
    pub(crate) fn new(kind: K) -> Self {
        Self { kind, groups: Vec::new(), room: 0 }
    }

    fn take(&mut self, emit_to: EmitTo) -> Vec<Vec<K::Sample>> {
        let taken = emit_to.take_needed(&mut self.groups);
        self.room -= taken.iter().map(Vec::capacity).sum::<usize>();
        taken
    }
}

/// Adds `sample` to `group`, counting the room it grew by.
fn keep<S>(group: &mut Vec<S>, sample: S, room: &mut usize) {
    let before = group.capacity();
    group.push(sample);
    *room += group.capacity() - before;
}

impl<K: KeptSamples> GroupsAccumulator for SampleGroups<K> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.groups.resize_with(total_num_groups, Vec::new);
        let (groups, room) = (&mut self.groups, &mut self.room);
        // Rows a FILTER leaves out are not read at all: reading them would keep their keys.
        match opt_filter {
            Some(filter) if filter.true_count() == 0 => Ok(()),
            Some(filter) if filter.true_count() < filter.len() => {
                let values = values.iter().map(|v| compute::filter(v, filter)).collect::<Result<Vec<_>, _>>()?;
                let indices: Vec<usize> = group_indices
                    .iter()
                    .enumerate()
                    .filter(|&(row, _)| passes(Some(filter), row))
                    .map(|(_, &g)| g)
                    .collect();
                self.kind.read(&values, |row, sample| keep(&mut groups[indices[row]], sample, room))
            }
            _ => self.kind.read(values, |row, sample| keep(&mut groups[group_indices[row]], sample, room)),
        }
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let mut taken = self.take(emit_to);
        let out = self.kind.evaluate(&mut taken);
        self.kind.keep_keys_of(&mut self.groups);
        out
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let taken = self.take(emit_to);
        let state = self.kind.state(&taken);
        self.kind.keep_keys_of(&mut self.groups);
        Ok(state)
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.groups.resize_with(total_num_groups, Vec::new);
        let (groups, room) = (&mut self.groups, &mut self.room);
        self.kind.merge(values, |row, sample| keep(&mut groups[group_indices[row]], sample, room))
    }

    /// Each row as a group of its own (DataFusion skips partial aggregation when groups are
    /// nearly as many as rows).
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let mut rows = vec![Vec::new(); values[0].len()];
        let mut kind = self.kind.apart();
        kind.read(values, |row, sample| {
            if passes(opt_filter, row) {
                rows[row].push(sample);
            }
        })?;
        Ok(kind.state(&rows))
    }

    fn size(&self) -> usize {
        size_of::<Self>()
            + self.groups.capacity() * size_of::<Vec<K::Sample>>()
            + self.room * size_of::<K::Sample>()
            + self.kind.keys_size()
    }
}

/// One group of a [`KeptSamples`] aggregate, for windows and aggregates without GROUP BY.
#[derive(Debug)]
pub(crate) struct SampleAccumulator<K: KeptSamples> {
    kind: K,
    samples: Vec<K::Sample>,
}

impl<K: KeptSamples> SampleAccumulator<K> {
    pub(crate) fn new(kind: K) -> Self {
        Self { kind, samples: Vec::new() }
    }
}

impl<K: KeptSamples> Accumulator for SampleAccumulator<K> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let all = &mut self.samples;
        self.kind.read(values, |_, sample| all.push(sample))
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        ScalarValue::try_from_array(&self.kind.evaluate(std::slice::from_mut(&mut self.samples))?, 0)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let state = self.kind.state(std::slice::from_ref(&self.samples));
        state.iter().map(|a| ScalarValue::try_from_array(a, 0)).collect()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let all = &mut self.samples;
        self.kind.merge(states, |_, sample| all.push(sample))
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.samples.capacity() * size_of::<K::Sample>() + self.kind.keys_size()
    }
}

static TICK_HISTOGRAMS_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    let doc = Documentation::builder(
        DOC_SECTION_GENERAL,
        "The group's decayed histograms at regular ticks (SALSA's distributions over time), as a list of \
         `{tick, hist, mean_bin}` structs ordered by tick: tick k is time k·step; a sample at time t \
         counts in the `memory` ticks from floor(t / step) + 1 on, in its bin, weighing \
         exp(-lambda·age/(alpha·age + 1)) with age = k·step − t. A tick is listed when it holds a \
         sample; `mean_bin` is its samples' plain (unweighted) mean bin. Bins clamp into [0, bins); rows \
         with a NULL bin or a NULL or non-finite `ts` are skipped. The same as repeating each sample at \
         each of its ticks and grouping by tick, without `memory` times the rows: the accumulator keeps \
         the group's samples and slides a window along the ticks. `unnest` the list, then read the \
         fields with `h['tick']`. Order by `tick` before the group key, or materialise the unnested \
         rows, while DataFusion keeps the group key's uniqueness through an unnest \
         (apache/datafusion#24787): `ORDER BY host, tick` would sort by host only.",
        "tick_histograms(bin, bins, ts, step, memory, lambda[, alpha])",
    )
    .with_sql_example(concat!(
        "SELECT h['tick'] AS tick, h['hist'] AS hist, h['mean_bin'] AS mean_bin\n",
        "FROM (SELECT unnest(tick_histograms(b, 2, t, 10, 2, 0.1)) AS h\n",
        "      FROM (VALUES (0, 3), (1, 12)) AS v(b, t))\n",
        "ORDER BY tick;\n",
        "-- 1  [0.496585304, 0]            0    (e^-0.7: the bin-0 sample, 7 s old at t = 10)\n",
        "-- 2  [0.182683524, 0.449328964]  0.5  (e^-1.7, e^-0.8)\n",
        "-- 3  [0, 0.165298888]            1    (the bin-0 sample has left; e^-1.8)"
    ));
    with_tick_arguments(doc)
        .with_argument("alpha", "Optional non-negative number literal: the lull correction (default 0).")
        .build()
});

/// `doc` with the arguments `tick_histograms` and `tick_peer_scores` share, after its own.
pub(crate) fn with_tick_arguments(doc: DocumentationBuilder) -> DocumentationBuilder {
    TICK_ARGUMENTS.iter().fold(doc, |doc, (name, text)| doc.with_argument(*name, *text))
}

const TICK_ARGUMENTS: [(&str, &str); 6] = [
    ("bin", "Integer column: the sample's bin."),
    ("bins", "Positive integer literal, at most 65536: the number of bins."),
    ("ts", "Timestamp or numeric column: when the sample was taken."),
    (
        "step",
        "Positive number literal: the time between two ticks, in seconds for timestamp columns, in the column's \
         unit for numbers.",
    ),
    ("memory", "Positive integer literal, at most 1048576: the ticks a sample stays in the histograms."),
    ("lambda", "Non-negative number literal: the decay rate per second (per unit)."),
];

impl AggregateUDFImpl for TickHistograms {
    fn name(&self) -> &str {
        FUNC
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(FUNC, t, 6, 7)?;
        TickParams::check_types(FUNC, t, 0)?;
        let mut out = t.to_vec();
        out[0] = DataType::Int64;
        Ok(out)
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(tick_item()))
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        TickParams::parse(FUNC, &logical_literals(&params.args), 0)?;
        udaf_default_schema_name(self, params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        TickParams::parse(FUNC, &logical_literals(&params.args), 0)?;
        udaf_default_window_function_schema_name(self, params)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(SampleAccumulator::new(TickParams::parse(FUNC, &physical_literals(args.exprs), 0)?)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(samples_state_fields(args.name))
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(SampleGroups::new(TickParams::parse(FUNC, &physical_literals(args.exprs), 0)?)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&TICK_HISTOGRAMS_DOC)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{assert_lists_close, ctx, ctx_skipping_partial_aggregation, f64_lists, query_err, strings};

    /// Rows `(g, b, t)` as a VALUES table named `v`.
    fn values(rows: &[(i64, Option<i64>, f64)]) -> String {
        let rows: Vec<String> = rows
            .iter()
            .map(|(g, b, t)| format!("({g}, {}, {t:?})", b.map_or("CAST(NULL AS BIGINT)".into(), |b| b.to_string())))
            .collect();
        format!("(VALUES {}) AS v(g, b, t)", rows.join(", "))
    }

    #[tokio::test]
    async fn ticks_follow_the_samples_through_lulls() {
        let ctx = ctx(2);
        // Group 1: three samples, step 5, memory 3: t = 1 and 7 share ticks 2 and 3; t = 30
        // comes after a lull. Group 2: bins out of range clamp; a NULL bin and a NaN time
        // are skipped.
        let data = values(&[
            (1, Some(0), 1.0),
            (1, Some(2), 7.0),
            (1, Some(1), 30.0),
            (2, Some(-3), 0.0),
            (2, Some(9), 0.0),
            (2, None, 0.0),
        ]);
        let ticks = format!(
            "SELECT g, unnest(tick_histograms(b, 3, t, 5, 3, 0.1)) AS h FROM (SELECT * FROM {data} \
             UNION ALL SELECT 2, 1, CAST('NaN' AS DOUBLE)) GROUP BY g"
        );
        // By tick first: see [`same_as_every_sample_weighed_at_each_of_its_ticks`] on why.
        let got =
            strings(&ctx, &format!("SELECT g, h['tick'], h['mean_bin'] FROM ({ticks}) ORDER BY h['tick'], g")).await;
        // Sample at t is in ticks floor(t / 5) + 1 to floor(t / 5) + 3.
        let expected = [
            "1|1|0.0", "2|1|1.0", "1|2|1.0", "2|2|1.0", "1|3|1.0", "2|3|1.0", "1|4|2.0", "1|7|1.0", "1|8|1.0",
            "1|9|1.0",
        ];
        assert_eq!(got, expected);
        let hists = f64_lists(&ctx, &format!("SELECT h['hist'] FROM ({ticks}) ORDER BY h['tick'], g")).await;
        // Weights exp(-0.1 · age), age = 5·tick - t.
        let w = |age: f64| (-0.1 * age).exp();
        let expected = [
            [w(4.0), 0.0, 0.0],
            [w(5.0), 0.0, w(5.0)],
            [w(9.0), 0.0, w(3.0)],
            [w(10.0), 0.0, w(10.0)],
            [w(14.0), 0.0, w(8.0)],
            [w(15.0), 0.0, w(15.0)],
            [0.0, 0.0, w(13.0)],
            [0.0, w(5.0), 0.0],
            [0.0, w(10.0), 0.0],
            [0.0, w(15.0), 0.0],
        ];
        let expected: Vec<Option<Vec<f64>>> = expected.iter().map(|h| Some(h.to_vec())).collect();
        assert_lists_close(&hists, &expected, 1e-15, "hists");
    }

    /// The same distributions as SQL computes them the long way, each sample repeated at each
    /// of its ticks and grouped again (SALSA's query without this function), on clustered
    /// random samples in several groups, over partitions that merge partial states.
    #[tokio::test]
    async fn same_as_every_sample_weighed_at_each_of_its_ticks() {
        let mut uniform = crate::test_util::uniform(0x2545_f491_4f6c_dd1d_u64);
        let mut rows = Vec::new();
        for g in 0..5 {
            for burst in 0..6 {
                let start = burst as f64 * 400.0 + uniform() * 300.0;
                for _ in 0..12 {
                    rows.push((g, Some((uniform() * 12.0) as i64), start + uniform() * 90.0));
                }
            }
        }
        let data = values(&rows);
        let ctx = ctx(4);
        let long_way = format!(
            "WITH ticked AS (SELECT g, b, CAST(floor(t / 5.0) AS BIGINT) + 1 + x.value AS tick, \
             (CAST(floor(t / 5.0) AS BIGINT) + 1 + x.value) * 5.0 - t AS age \
             FROM generate_series(0, 23) AS x CROSS JOIN {data}) \
             SELECT g, tick, state_histogram(b + 0.5, 0, 12, 12, 'linear', exp(-0.02 * age / (0.1 * age + 1.0))) AS hist, \
             avg(b) AS mean FROM ticked GROUP BY g, tick"
        );
        let one_pass = format!(
            "SELECT g, h['tick'] AS tick, h['hist'] AS hist, h['mean_bin'] AS mean FROM \
             (SELECT g, unnest(tick_histograms(b, 12, t, 5.0, 24, 0.02, 0.1)) AS h FROM {data} GROUP BY g)"
        );
        // Ordered by tick first: DataFusion 55 keeps the GROUP BY's "g is unique" through the
        // unnest (apache/datafusion#24787) and would drop `tick` from `ORDER BY g, tick`.
        let keys = |q: &str| format!("SELECT g, tick, mean FROM ({q}) ORDER BY tick, g");
        let hists = |q: &str| format!("SELECT hist FROM ({q}) ORDER BY tick, g");
        let expected_keys = strings(&ctx, &keys(&long_way)).await;
        assert!(expected_keys.len() > 1000, "{}", expected_keys.len());
        assert_eq!(strings(&ctx, &keys(&one_pass)).await, expected_keys);
        let expected = f64_lists(&ctx, &hists(&long_way)).await;
        assert_lists_close(&f64_lists(&ctx, &hists(&one_pass)).await, &expected, 1e-12, "hists");
        let skipping = ctx_skipping_partial_aggregation(4);
        assert_eq!(strings(&skipping, &keys(&one_pass)).await, expected_keys);
        assert_lists_close(&f64_lists(&skipping, &hists(&one_pass)).await, &expected, 1e-12, "hists, rows as states");
    }

    /// A time whose tick would not be an exact integer is an error, not a wrong tick.
    #[tokio::test]
    async fn times_too_far_from_zero_are_an_error() {
        let sql = "SELECT tick_histograms(b, 2, t, 10, 2, 0.1) FROM (VALUES (0, 3e300), (1, 12)) AS v(b, t)";
        let err = query_err(&ctx(1), sql).await;
        assert!(err.contains("tick_histograms: ts 3e300 is not within 2^53 steps of 10 from 0"), "{err}");
    }

    #[tokio::test]
    async fn bad_arguments_fail_while_planning() {
        let ctx = ctx(1);
        let call = |args: &str| format!("SELECT tick_histograms({args}) FROM (VALUES (1, 2.5)) AS v(b, t)");
        for (args, message) in [
            ("b, 12, t, 5, 0, 0.1", "tick_histograms: argument 5 (memory) must be a positive integer literal"),
            ("b, 12, t, 0, 24, 0.1", "tick_histograms: argument 4 (step) must be a positive number literal"),
            (
                "b, 12, t, t, 24, 0.1",
                "tick_histograms: argument 4 (step) must be a positive number literal, got a non-literal",
            ),
            ("t, 12, t, 5, 24, 0.1", "tick_histograms: argument 1 (bin) must be an integer"),
            ("b, 12, t, 5, 24, -1", "tick_histograms: argument 6 (lambda) must be a non-negative number literal"),
            ("b, 12, t, 5, 24", "tick_histograms"),
        ] {
            let err = query_err(&ctx, &call(args)).await;
            assert!(err.contains(message), "{args}: {err}");
        }
    }
}
