//! Histogram aggregates: `state_histogram` (SALSA's per-node duration histograms),
//! `label_histogram` (Ganesha's histogram of profile labels) and `decayed_histogram` (the same
//! with older samples decayed, SALSA's lull-corrected decay).
//!
//! All three return `List<Float64>` with a fixed number of bins, so that `jsd_sqrt`, `indict`
//! and `kde_smooth` can take them directly. `state_histogram` and `label_histogram` take an
//! optional weight per row (a state's duration, a decayed sample's weight) to sum instead of
//! counting rows. A group that counted nothing gets all-zero bins
//! (like `count`, not NULL); `jsd_sqrt` then returns NULL for it.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::mem::size_of;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunctionParams, WindowFunctionParams};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator, Signature, Volatility,
    aggregate_doc_sections::DOC_SECTION_GENERAL, udaf_default_schema_name, udaf_default_window_function_schema_name,
};

use crate::args::{
    Literals, arg_error, check_arity, exec_error, f64_list_type, fixed_width_list, list_row, list_scalar,
    logical_literals, physical_literals, require_integer, require_number, require_time, times_to_f64, to_f64,
    to_f64_list,
};
use crate::cells::{emit_to_groups, for_each_cells, merge_into, passes, take_groups};

/// More bins than this is a mistake (a bins argument in milliseconds, say), not a histogram.
pub(crate) const MAX_BINS: usize = 1 << 16;

/// Maps input rows to bins. `bin_rows` calls `f(row, bin)` for every row that is counted;
/// NULL (and, for values, NaN) rows are skipped.
pub(crate) trait Binner: Clone + Debug + Send + Sync + 'static {
    fn bins(&self) -> usize;
    fn bin_rows(&self, values: &ArrayRef, f: impl FnMut(usize, usize)) -> Result<()>;
}

/// Calls `f(row, bin, weight)` for every row that is binned and has a weight: NULL and NaN
/// weights skip the row, as NULL and NaN values do.
fn weighted_rows<B: Binner>(
    binner: &B,
    values: &ArrayRef,
    weights: &ArrayRef,
    mut f: impl FnMut(usize, usize, f64),
) -> Result<()> {
    let weights = to_f64(weights)?;
    binner.bin_rows(values, |row, bin| {
        let w = weights.value(row);
        if weights.is_valid(row) && !w.is_nan() {
            f(row, bin, w);
        }
    })
}

/// `state_histogram`'s bins: `bins` equal widths of `value` (or of `ln(value)`) over
/// `[lo, hi]`; values outside clamp to the end bins.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueBinner {
    origin: f64,
    bins_per_unit: f64,
    bins: usize,
    log: bool,
}

impl ValueBinner {
    const FUNC: &'static str = "state_histogram";

    fn parse(lits: &[Option<ScalarValue>]) -> Result<Self> {
        let l = Literals { func: Self::FUNC, lits };
        let lo = l.number(1, "lo", "a finite number literal", |_| true)?;
        let hi = l.number(2, "hi", "a finite number literal greater than lo", |hi| hi > lo)?;
        let bins = l.positive_int(3, "bins", MAX_BINS)?;
        let log = match lits.len() {
            4 => false,
            _ => match l.string(4, "scale", "'linear' or 'log'")?.to_ascii_lowercase().as_str() {
                "linear" => false,
                "log" => true,
                other => {
                    return Err(arg_error(Self::FUNC, 4, "scale", format!("must be 'linear' or 'log', got '{other}'")));
                }
            },
        };
        if log && lo <= 0.0 {
            return Err(arg_error(Self::FUNC, 1, "lo", format!("must be positive with the 'log' scale, got {lo}")));
        }
        Ok(Self::new(lo, hi, bins, log))
    }

    /// `bins` bins over `[lo, hi]` (`lo < hi`, `lo > 0` when `log`).
    pub(crate) fn new(lo: f64, hi: f64, bins: usize, log: bool) -> Self {
        let (origin, span) = if log { (lo.ln(), hi.ln() - lo.ln()) } else { (lo, hi - lo) };
        Self { origin, bins_per_unit: bins as f64 / span, bins, log }
    }

    /// The bin of one finite-or-infinite, non-NaN value. The float-to-int `as` saturates
    /// (negative and -inf give 0, +inf gives usize::MAX, and the `ln` of a non-positive value
    /// is -inf or NaN, which gives 0), so clamping needs only the `min`.
    #[inline]
    pub(crate) fn bin(&self, v: f64) -> usize {
        let x = if self.log { v.ln() } else { v };
        (((x - self.origin) * self.bins_per_unit) as usize).min(self.bins - 1)
    }
}

impl Binner for ValueBinner {
    fn bins(&self) -> usize {
        self.bins
    }

    fn bin_rows(&self, values: &ArrayRef, mut f: impl FnMut(usize, usize)) -> Result<()> {
        let values = to_f64(values)?;
        match values.nulls() {
            None => {
                for (row, &v) in values.values().iter().enumerate() {
                    if !v.is_nan() {
                        f(row, self.bin(v));
                    }
                }
            }
            Some(nulls) => {
                for (row, &v) in values.values().iter().enumerate() {
                    if nulls.is_valid(row) && !v.is_nan() {
                        f(row, self.bin(v));
                    }
                }
            }
        }
        Ok(())
    }
}

/// `label_histogram`'s bins: labels `0..k` count in their own bin, anything else (the
/// "unknown" label `k`, negative or larger labels) in bin `k`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LabelBinner {
    k: usize,
}

impl LabelBinner {
    const FUNC: &'static str = "label_histogram";

    fn parse(lits: &[Option<ScalarValue>]) -> Result<Self> {
        let k = Literals { func: Self::FUNC, lits }.positive_int(1, "k", MAX_BINS - 1)?;
        Ok(Self { k })
    }
}

#[inline]
fn label_bin(label: i64, k: usize) -> usize {
    if label >= 0 && (label as u64) < k as u64 { label as usize } else { k }
}

impl Binner for LabelBinner {
    fn bins(&self) -> usize {
        self.k + 1
    }

    fn bin_rows(&self, values: &ArrayRef, mut f: impl FnMut(usize, usize)) -> Result<()> {
        let labels = datafusion::arrow::compute::cast(values, &DataType::Int64)?;
        let labels = labels.as_primitive::<Int64Type>();
        for (row, &label) in labels.values().iter().enumerate() {
            if labels.is_valid(row) {
                f(row, label_bin(label, self.k));
            }
        }
        Ok(())
    }
}

/// One group's histogram; supports retraction for sliding window frames.
#[derive(Debug)]
struct HistogramAccumulator<B> {
    func: &'static str,
    binner: B,
    /// The position of the weight argument, when the call has one.
    weight: Option<usize>,
    counts: Vec<f64>,
}

impl<B: Binner> HistogramAccumulator<B> {
    fn new(func: &'static str, binner: B, weight: Option<usize>) -> Self {
        Self { func, counts: vec![0.0; binner.bins()], binner, weight }
    }

    /// Adds (`sign` 1) or retracts (`sign` -1) the rows' counts or weights.
    fn add(&mut self, values: &[ArrayRef], sign: f64) -> Result<()> {
        let counts = &mut self.counts;
        match self.weight {
            None => self.binner.bin_rows(&values[0], |_, bin| counts[bin] += sign),
            Some(w) => weighted_rows(&self.binner, &values[0], &values[w], |_, bin, w| counts[bin] += sign * w),
        }
    }
}

impl<B: Binner> Accumulator for HistogramAccumulator<B> {
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
        Ok(list_scalar(self.counts.clone()))
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let counts = &mut self.counts;
        for_each_cells(self.func, &states[0], counts.len(), |_, h| {
            counts.iter_mut().zip(h).for_each(|(c, x)| *c += x);
        })
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.counts.capacity() * size_of::<f64>()
    }
}

/// Counted rows wait, as cells, until there are this many (8 MB of them), and are then
/// applied together ([`HistogramGroupsAccumulator::apply_pending`]).
const PENDING_ROWS: usize = 1 << 20;

/// Up to this many cells (512 KB of `low`) stay in cache: increments go straight in.
const CACHED_CELLS: usize = 1 << 19;

/// Regions of the cells that waiting increments are ordered by before they are applied.
const REGIONS: usize = 256;

/// All groups' histograms in one flat buffer (`bins` values per group), for GROUP BY over
/// millions of (job, host, state) groups.
struct HistogramGroupsAccumulator<B> {
    func: &'static str,
    binner: B,
    /// Each cell's count below 256: one byte a cell keeps a million groups' histograms (20 MB
    /// for 20 bins) in the last-level cache, where f64 counts (160 MB) would make every row a miss
    /// to memory.
    low: Vec<u8>,
    /// The rest of each cell's count (256 at each carry out of `low`) and merged states;
    /// allocated zeroed on first need, so untouched pages cost nothing.
    counts: Vec<f64>,
    /// The cell of each row counted and not yet applied.
    pending: Vec<usize>,
    /// Scratch for `apply_pending`: `pending` ordered by region of the cells.
    by_region: Vec<usize>,
}

impl<B: Binner> HistogramGroupsAccumulator<B> {
    fn new(func: &'static str, binner: B) -> Self {
        Self { func, binner, low: Vec::new(), counts: Vec::new(), pending: Vec::new(), by_region: Vec::new() }
    }

    /// `counts` as long as `low`.
    fn widen(&mut self) {
        if self.counts.is_empty() {
            self.counts = vec![0.0; self.low.len()];
        } else if self.counts.len() < self.low.len() {
            self.counts.resize(self.low.len(), 0.0);
        }
    }

    /// Adds the waiting rows to `low`. With a million groups `low` is larger than the TLB
    /// covers, and one increment per row at random costs a page walk each. Ordered by region
    /// first — a counting sort into 256 streams, which stay in cache — the increments of one
    /// region touch only its pages, and its cache lines several times each.
    fn apply_pending(&mut self) {
        self.widen();
        let (low, counts) = (&mut self.low, &mut self.counts);
        let cells = low.len();
        let mut bump = |cell: usize| match low[cell] {
            u8::MAX => {
                low[cell] = 0;
                counts[cell] += 256.0;
            }
            _ => low[cell] += 1,
        };
        if cells <= CACHED_CELLS {
            self.pending.iter().for_each(|&cell| bump(cell));
        } else {
            let bits = usize::BITS - (cells - 1).leading_zeros();
            let shift = bits.saturating_sub(REGIONS.trailing_zeros());
            let mut starts = [0usize; REGIONS + 1];
            self.pending.iter().for_each(|&cell| starts[(cell >> shift) + 1] += 1);
            for region in 0..REGIONS {
                starts[region + 1] += starts[region];
            }
            self.by_region.resize(self.pending.len(), 0);
            for &cell in &self.pending {
                let next = &mut starts[cell >> shift];
                self.by_region[*next] = cell;
                *next += 1;
            }
            self.by_region.iter().for_each(|&cell| bump(cell));
        }
        self.pending.clear();
    }

    /// Whole counts of the groups `emit_to` names, which leave the accumulator.
    fn take(&mut self, emit_to: EmitTo) -> (Vec<f64>, usize) {
        self.apply_pending();
        self.counts.iter_mut().zip(&self.low).for_each(|(c, &l)| *c += f64::from(l));
        let width = self.binner.bins();
        self.low = vec![0; self.low.len() - emit_to_groups(emit_to, self.low.len() / width) * width];
        take_groups(&mut self.counts, emit_to, width)
    }
}

impl<B: Binner> GroupsAccumulator for HistogramGroupsAccumulator<B> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let width = self.binner.bins();
        self.low.resize(total_num_groups * width, 0);
        let pending = &mut self.pending;
        match opt_filter {
            None => self.binner.bin_rows(&values[0], |row, bin| pending.push(group_indices[row] * width + bin))?,
            Some(_) => self.binner.bin_rows(&values[0], |row, bin| {
                if passes(opt_filter, row) {
                    pending.push(group_indices[row] * width + bin);
                }
            })?,
        }
        // Few cells stay in cache anyway: no reason to hold rows back (and their memory).
        if self.low.len() <= CACHED_CELLS || self.pending.len() >= PENDING_ROWS {
            self.apply_pending();
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (counts, groups) = self.take(emit_to);
        Ok(Arc::new(fixed_width_list(counts, self.binner.bins(), groups)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(emit_to)?])
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        let width = self.binner.bins();
        self.low.resize(total_num_groups * width, 0);
        self.widen();
        merge_into(self.func, &mut self.counts, &values[0], group_indices, width)
    }

    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let width = self.binner.bins();
        let rows = values[0].len();
        let mut one_hot = vec![0.0; rows * width];
        self.binner.bin_rows(&values[0], |row, bin| {
            if passes(opt_filter, row) {
                one_hot[row * width + bin] = 1.0;
            }
        })?;
        Ok(vec![Arc::new(fixed_width_list(one_hot, width, rows))])
    }

    fn size(&self) -> usize {
        let cells = self.pending.capacity() + self.by_region.capacity();
        size_of::<Self>() + self.low.capacity() + self.counts.capacity() * size_of::<f64>() + cells * size_of::<usize>()
    }
}

/// All groups' weighted histograms in one flat buffer. Sums of weights have no small integer
/// part to keep in a byte, so each cell is an f64 updated in place.
struct WeightedGroupsAccumulator<B> {
    func: &'static str,
    binner: B,
    /// The position of the weight argument.
    weight: usize,
    sums: Vec<f64>,
}

impl<B: Binner> GroupsAccumulator for WeightedGroupsAccumulator<B> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let width = self.binner.bins();
        self.sums.resize(total_num_groups * width, 0.0);
        let sums = &mut self.sums;
        weighted_rows(&self.binner, &values[0], &values[self.weight], |row, bin, w| {
            if passes(opt_filter, row) {
                sums[group_indices[row] * width + bin] += w;
            }
        })
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let width = self.binner.bins();
        let (sums, groups) = take_groups(&mut self.sums, emit_to, width);
        Ok(Arc::new(fixed_width_list(sums, width, groups)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(emit_to)?])
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        let width = self.binner.bins();
        self.sums.resize(total_num_groups * width, 0.0);
        merge_into(self.func, &mut self.sums, &values[0], group_indices, width)
    }

    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let width = self.binner.bins();
        let rows = values[0].len();
        let mut one_hot = vec![0.0; rows * width];
        weighted_rows(&self.binner, &values[0], &values[self.weight], |row, bin, w| {
            if passes(opt_filter, row) {
                one_hot[row * width + bin] = w;
            }
        })?;
        Ok(vec![Arc::new(fixed_width_list(one_hot, width, rows))])
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.sums.capacity() * size_of::<f64>()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Binning {
    Values,
    Labels,
}

/// `state_histogram(value, lo, hi, bins[, 'linear' | 'log'])` and `label_histogram(label, k)`:
/// one aggregate over two ways of choosing a row's bin.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct BinnedHistogram {
    signature: Signature,
    binning: Binning,
}

impl BinnedHistogram {
    pub fn state_histogram() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable), binning: Binning::Values }
    }

    pub fn label_histogram() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable), binning: Binning::Labels }
    }

    fn check_literals(&self, lits: &[Option<ScalarValue>]) -> Result<()> {
        match self.binning {
            Binning::Values => ValueBinner::parse(lits).map(drop),
            Binning::Labels => LabelBinner::parse(lits).map(drop),
        }
    }

    /// The position of the optional weight argument: after `scale`, or after `k`.
    fn weight_position(&self) -> usize {
        match self.binning {
            Binning::Values => 5,
            Binning::Labels => 2,
        }
    }

    /// The weight argument's position when the call has one.
    fn weight(&self, args: &AccumulatorArgs) -> Option<usize> {
        let position = self.weight_position();
        (args.exprs.len() > position).then_some(position)
    }

    fn check_weight(&self, t: &mut [DataType]) -> Result<()> {
        let position = self.weight_position();
        if let Some(weight) = t.get_mut(position) {
            require_number(self.name(), position, "weight", weight)?;
            *weight = DataType::Float64;
        }
        Ok(())
    }
}

static STATE_HISTOGRAM_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_GENERAL,
        "Counts of `value` in `bins` equal-width bins over [lo, hi] (of ln(value) with `'log'`, which \
         needs lo > 0), as a `List<Float64>`. Values below lo or above hi clamp to the first or last \
         bin; NULL and NaN values (and weights) are skipped; a group with no values gives all-zero bins. \
         With `weight`, each bin sums its rows' weights instead of counting them, e.g. a host's time \
         spent per duration bin (`weight` = the duration, as Kahuna-WB does), or SALSA's decayed \
         samples. Has a groups accumulator and retracts for sliding windows.",
        "state_histogram(value, lo, hi, bins[, scale[, weight]])",
    )
    .with_sql_example(concat!(
        "SELECT host, state_histogram(ms, 1, 1000, 3, 'log') AS hist\n",
        "FROM (VALUES ('r1', 5), ('r1', 50), ('r1', 500), ('r2', 7), ('r2', 8)) AS s(host, ms)\n",
        "GROUP BY host ORDER BY host;\n",
        "-- r1 [1, 1, 1]\n",
        "-- r2 [2, 0, 0]"
    ))
    .with_argument("value", "Numeric column, e.g. a state's duration.")
    .with_argument("lo", "Number literal: the lower edge of the first bin (positive with `'log'`).")
    .with_argument("hi", "Number literal: the upper edge of the last bin, greater than `lo`.")
    .with_argument("bins", "Positive integer literal, at most 65536: the number of bins.")
    .with_argument("scale", "Optional string literal, `'linear'` (the default) or `'log'`.")
    .with_argument("weight", "Optional numeric column: what each row adds to its bin (default 1).")
    .build()
});

static LABEL_HISTOGRAM_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_GENERAL,
        "Counts of integer labels in k + 1 bins, as a `List<Float64>`: labels 0..k-1 in their own bin, \
         the unknown label k (and any negative or larger label) in bin k. With `weight`, each bin sums \
         its rows' weights instead. NULL labels and NULL or NaN weights are skipped; a group with none \
         gives all-zero bins.",
        "label_histogram(label, k[, weight])",
    )
    .with_sql_example(concat!(
        "SELECT label_histogram(l, 3) FROM (VALUES (0), (2), (2), (3), (9)) AS v(l);\n",
        "-- [1, 0, 2, 2]"
    ))
    .with_argument("label", "Integer column, e.g. the output of `gmm_classify`.")
    .with_argument("k", "Positive integer literal, at most 65535: the number of known labels.")
    .with_argument("weight", "Optional numeric column: what each row adds to its bin (default 1).")
    .build()
});

impl AggregateUDFImpl for BinnedHistogram {
    fn name(&self) -> &str {
        match self.binning {
            Binning::Values => ValueBinner::FUNC,
            Binning::Labels => LabelBinner::FUNC,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        let f = self.name();
        match self.binning {
            Binning::Values => {
                check_arity(f, t, 4, 6)?;
                require_number(f, 0, "value", &t[0])?;
                require_number(f, 1, "lo", &t[1])?;
                require_number(f, 2, "hi", &t[2])?;
                require_integer(f, 3, "bins", &t[3])?;
                if let Some(scale) = t.get(4)
                    && !matches!(scale, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
                {
                    return Err(arg_error(f, 4, "scale", format!("must be a string, got {scale}")));
                }
                let mut out = t.to_vec();
                out[0] = DataType::Float64;
                self.check_weight(&mut out)?;
                Ok(out)
            }
            Binning::Labels => {
                check_arity(f, t, 2, 3)?;
                require_integer(f, 0, "label", &t[0])?;
                require_integer(f, 1, "k", &t[1])?;
                let mut out = t.to_vec();
                out[0] = DataType::Int64;
                self.check_weight(&mut out)?;
                Ok(out)
            }
        }
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(f64_list_type())
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        // The literal-only parameters are checked here, while planning, so that a bad `bins`
        // fails `ctx.sql(...)` rather than the first batch.
        self.check_literals(&logical_literals(&params.args))?;
        udaf_default_schema_name(self, params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.check_literals(&logical_literals(&params.args))?;
        udaf_default_window_function_schema_name(self, params)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let lits = physical_literals(args.exprs);
        let weight = self.weight(&args);
        Ok(match self.binning {
            Binning::Values => {
                Box::new(HistogramAccumulator::new(ValueBinner::FUNC, ValueBinner::parse(&lits)?, weight))
            }
            Binning::Labels => {
                Box::new(HistogramAccumulator::new(LabelBinner::FUNC, LabelBinner::parse(&lits)?, weight))
            }
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(format_state_name(args.name, "histogram"), f64_list_type(), true))])
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        let lits = physical_literals(args.exprs);
        let weight = self.weight(&args);
        match self.binning {
            Binning::Values => groups_accumulator(ValueBinner::FUNC, ValueBinner::parse(&lits)?, weight),
            Binning::Labels => groups_accumulator(LabelBinner::FUNC, LabelBinner::parse(&lits)?, weight),
        }
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(match self.binning {
            Binning::Values => &STATE_HISTOGRAM_DOC,
            Binning::Labels => &LABEL_HISTOGRAM_DOC,
        })
    }
}

fn groups_accumulator<B: Binner>(
    func: &'static str,
    binner: B,
    weight: Option<usize>,
) -> Result<Box<dyn GroupsAccumulator>> {
    Ok(match weight {
        None => Box::new(HistogramGroupsAccumulator::new(func, binner)),
        Some(weight) => Box::new(WeightedGroupsAccumulator { func, binner, weight, sums: Vec::new() }),
    })
}

/// `decayed_histogram(label, k, ts, lambda[, alpha])`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DecayedHistogram {
    signature: Signature,
}

impl Default for DecayedHistogram {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// SALSA's lull-corrected decay: a sample `dt` old weighs exp(-lambda·dt / (alpha·dt + 1)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decay {
    lambda: f64,
    alpha: f64,
}

impl Decay {
    /// From the literals `lambda` at `at` and the optional `alpha` after it (default 0: plain
    /// exponential decay).
    pub(crate) fn parse(l: &Literals, at: usize) -> Result<Self> {
        let lambda = l.number(at, "lambda", "a non-negative number literal", |x| x >= 0.0)?;
        let alpha = if l.lits.len() > at + 1 {
            l.number(at + 1, "alpha", "a non-negative number literal", |x| x >= 0.0)?
        } else {
            0.0
        };
        Ok(Self { lambda, alpha })
    }

    /// Checks the types of `lambda` at `at` and of the optional `alpha` after it.
    pub(crate) fn check_types(func: &str, t: &[DataType], at: usize) -> Result<()> {
        require_number(func, at, "lambda", &t[at])?;
        if let Some(alpha) = t.get(at + 1) {
            require_number(func, at + 1, "alpha", alpha)?;
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn weight(&self, dt: f64) -> f64 {
        (-self.lambda * dt / (self.alpha * dt + 1.0)).exp()
    }
}

#[derive(Debug, Clone, Copy)]
struct DecayParams {
    k: usize,
    decay: Decay,
}

impl DecayParams {
    const FUNC: &'static str = "decayed_histogram";

    fn parse(lits: &[Option<ScalarValue>]) -> Result<Self> {
        let l = Literals { func: Self::FUNC, lits };
        Ok(Self { k: l.positive_int(1, "k", MAX_BINS - 1)?, decay: Decay::parse(&l, 3)? })
    }
}

/// Keeps the group's samples rather than a running decayed histogram: with alpha > 0 the weight
/// of a sample depends on its distance to the group's final newest timestamp in a way that
/// partial histograms cannot be rescaled to, and keeping samples makes partial aggregation and
/// sliding-window retraction exact for every alpha (16 bytes per sample).
#[derive(Debug)]
struct DecayedAccumulator {
    params: DecayParams,
    ts: VecDeque<f64>,
    labels: VecDeque<u32>,
}

impl DecayedAccumulator {
    /// Calls `f(ts, bin)` for the rows that count: label and ts not NULL, ts finite.
    fn samples(&self, values: &[ArrayRef], mut f: impl FnMut(f64, u32)) -> Result<()> {
        let labels = datafusion::arrow::compute::cast(&values[0], &DataType::Int64)?;
        let labels = labels.as_primitive::<Int64Type>();
        let ts = times_to_f64(&values[2])?;
        for row in 0..labels.len() {
            if labels.is_valid(row) && ts.is_valid(row) && ts.value(row).is_finite() {
                f(ts.value(row), label_bin(labels.value(row), self.params.k) as u32);
            }
        }
        Ok(())
    }
}

impl Accumulator for DecayedAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let mut added = Vec::new();
        self.samples(values, |t, bin| added.push((t, bin)))?;
        for (t, bin) in added {
            self.ts.push_back(t);
            self.labels.push_back(bin);
        }
        Ok(())
    }

    /// Window frames retract the oldest rows first, in the order they were added.
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let mut n = 0;
        self.samples(values, |_, _| n += 1)?;
        for _ in 0..n {
            self.ts.pop_front();
            self.labels.pop_front();
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let mut hist = vec![0.0; self.params.k + 1];
        let newest = self.ts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        for (&t, &bin) in self.ts.iter().zip(&self.labels) {
            hist[bin as usize] += self.params.decay.weight(newest - t);
        }
        Ok(list_scalar(hist))
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            list_scalar(self.ts.iter().copied().collect()),
            list_scalar(self.labels.iter().map(|&b| b as f64).collect()),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let k = self.params.k;
        merge_samples(DecayParams::FUNC, states, |_, t, label| {
            self.ts.push_back(t);
            self.labels.push_back(label_bin(label as i64, k) as u32);
        })
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.ts.capacity() * size_of::<f64>() + self.labels.capacity() * size_of::<u32>()
    }
}

/// The partial state of the aggregates that keep their samples (`decayed_histogram`,
/// `tick_histograms`): each group's sample times and bins (or labels), as two lists.
pub(crate) fn samples_state_fields(name: &str) -> Vec<FieldRef> {
    vec![
        Arc::new(Field::new(format_state_name(name, "ts"), f64_list_type(), true)),
        Arc::new(Field::new(format_state_name(name, "bins"), f64_list_type(), true)),
    ]
}

/// Calls `f(row, ts, bin)` for each sample of each row of such a state.
pub(crate) fn merge_samples(func: &str, states: &[ArrayRef], mut f: impl FnMut(usize, f64, f64)) -> Result<()> {
    let ts = to_f64_list(&states[0])?;
    let bins = to_f64_list(&states[1])?;
    let (mut s1, mut s2) = (Vec::new(), Vec::new());
    for row in 0..ts.len() {
        let (Some(t), Some(b)) = (list_row(&ts, row, &mut s1), list_row(&bins, row, &mut s2)) else { continue };
        if t.len() != b.len() {
            return Err(exec_error(func, "partial state has mismatched lengths"));
        }
        t.iter().zip(b).for_each(|(&t, &b)| f(row, t, b));
    }
    Ok(())
}

static DECAYED_HISTOGRAM_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_GENERAL,
        "As `label_histogram` (k + 1 bins), each sample weighing exp(-lambda·Δt/(alpha·Δt + 1)), Δt \
         being how much older it is than the group's newest sample (SALSA's decay with the lull \
         correction; alpha = 0, the default, is plain exponential decay). Δt is in seconds for \
         timestamps, in the column's unit for numbers. Rows with a NULL label or a NULL or non-finite \
         `ts` are skipped. The accumulator keeps the group's samples (16 bytes each), so partial \
         aggregation and sliding windows are exact for any alpha.",
        "decayed_histogram(label, k, ts, lambda[, alpha])",
    )
    .with_sql_example(concat!(
        "SELECT decayed_histogram(l, 2, t, 0.5) FROM (VALUES (0, 0), (1, 2), (0, 4)) AS v(l, t);\n",
        "-- [1.135335283, 0.367879441, 0]   (e^-2 + 1, e^-1, nothing unknown)"
    ))
    .with_argument("label", "Integer column.")
    .with_argument("k", "Positive integer literal, at most 65535: the number of known labels.")
    .with_argument("ts", "Timestamp or numeric column: when the sample was taken.")
    .with_argument("lambda", "Non-negative number literal: the decay rate per second (per unit).")
    .with_argument("alpha", "Optional non-negative number literal: the lull correction (default 0).")
    .build()
});

impl AggregateUDFImpl for DecayedHistogram {
    fn name(&self) -> &str {
        DecayParams::FUNC
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        let f = DecayParams::FUNC;
        check_arity(f, t, 4, 5)?;
        require_integer(f, 0, "label", &t[0])?;
        require_integer(f, 1, "k", &t[1])?;
        require_time(f, 2, "ts", &t[2])?;
        Decay::check_types(f, t, 3)?;
        let mut out = t.to_vec();
        out[0] = DataType::Int64;
        Ok(out)
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(f64_list_type())
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        DecayParams::parse(&logical_literals(&params.args))?;
        udaf_default_schema_name(self, params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        DecayParams::parse(&logical_literals(&params.args))?;
        udaf_default_window_function_schema_name(self, params)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let params = DecayParams::parse(&physical_literals(args.exprs))?;
        Ok(Box::new(DecayedAccumulator { params, ts: VecDeque::new(), labels: VecDeque::new() }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(samples_state_fields(args.name))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DECAYED_HISTOGRAM_DOC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{assert_lists_close, ctx, ctx_skipping_partial_aggregation, f64_lists, query_err};
    use datafusion::arrow::array::{Float64Array, Int64Array};

    fn value_binner(lo: f64, hi: f64, bins: i64, scale: &str) -> ValueBinner {
        let lits = [
            None,
            Some(ScalarValue::from(lo)),
            Some(ScalarValue::from(hi)),
            Some(ScalarValue::from(bins)),
            Some(ScalarValue::from(scale)),
        ];
        ValueBinner::parse(&lits).unwrap()
    }

    /// Enough groups for the counts to outgrow the cache, enough rows to apply waiting rows
    /// mid-stream and a cell counted past 255 many times, against counts kept the plain way:
    /// value `v + 0.5` is in bin `v` (width 1).
    #[test]
    fn many_groups_count_alike_whatever_order_rows_wait_in() {
        let (groups, bins, rows) = (40_000usize, 20usize, PENDING_ROWS + 300_000);
        assert!(groups * bins > CACHED_CELLS);
        let mut acc = HistogramGroupsAccumulator::new("state_histogram", value_binner(0.0, 20.0, 20, "linear"));
        let mut expect = vec![0.0; groups * bins];
        let mut state = 12345u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as usize
        };
        let mut done = 0;
        while done < rows {
            let n = 8192.min(rows - done);
            let (mut values, mut indices) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for _ in 0..n {
                // One cell in four rows: its count carries out of `low` a thousand times.
                let (group, bin) = if next() % 4 == 0 { (0, 3) } else { (next() % groups, next() % bins) };
                expect[group * bins + bin] += 1.0;
                values.push(bin as f64 + 0.5);
                indices.push(group);
            }
            let values: ArrayRef = Arc::new(Float64Array::from(values));
            acc.update_batch(&[values], &indices, None, groups).unwrap();
            done += n;
        }
        let first = acc.evaluate(EmitTo::First(7)).unwrap();
        let rest = acc.evaluate(EmitTo::All).unwrap();
        let cells = |a: &ArrayRef| {
            a.as_list::<i32>().values().as_primitive::<datafusion::arrow::datatypes::Float64Type>().values().to_vec()
        };
        let got = [cells(&first), cells(&rest)].concat();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "counts differ");
    }

    #[test]
    fn linear_bins_clamp_and_skip_nan() {
        let b = value_binner(0.0, 10.0, 5, "linear");
        // Hand-computed: width 2, so 0 -> 0, 1.99 -> 0, 2 -> 1, 9.99 -> 4, 10 (hi) -> 4.
        assert_eq!([0.0, 1.99, 2.0, 9.99, 10.0].map(|v| b.bin(v)), [0, 0, 1, 4, 4]);
        assert_eq!([-5.0, f64::NEG_INFINITY, 1e300, f64::INFINITY].map(|v| b.bin(v)), [0, 0, 4, 4]);
        let values: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.0), None, Some(f64::NAN), Some(3.0)]));
        let mut seen = Vec::new();
        b.bin_rows(&values, |row, bin| seen.push((row, bin))).unwrap();
        assert_eq!(seen, [(0, 0), (3, 1)]);
    }

    #[test]
    fn log_bins() {
        let b = value_binner(1.0, 1000.0, 3, "log");
        // Decades: [1, 10), [10, 100), [100, 1000]; non-positive values clamp to the first.
        assert_eq!([1.0, 9.9, 10.5, 99.0, 101.0, 5000.0, 0.0, -3.0].map(|v| b.bin(v)), [0, 0, 1, 1, 2, 2, 0, 0]);
    }

    #[test]
    fn bad_parameters_are_planning_errors() {
        let lits = [None, Some(ScalarValue::from(0.0)), Some(ScalarValue::from(1.0)), Some(ScalarValue::from(0i64))];
        let err = ValueBinner::parse(&lits).unwrap_err().to_string();
        assert!(err.contains("state_histogram: argument 4 (bins) must be a positive integer literal"), "{err}");
        let lits = [
            None,
            Some(ScalarValue::from(0.0)),
            Some(ScalarValue::from(1.0)),
            Some(ScalarValue::from(4i64)),
            Some(ScalarValue::from("log")),
        ];
        let err = ValueBinner::parse(&lits).unwrap_err().to_string();
        assert!(err.contains("argument 2 (lo) must be positive with the 'log' scale"), "{err}");
    }

    #[test]
    fn labels_outside_range_are_unknown() {
        assert_eq!([0, 2, 3, 4, -1, 99].map(|l| label_bin(l, 3)), [0, 2, 3, 3, 3, 3]);
    }

    #[test]
    fn groups_accumulator_matches_per_group_and_survives_state_round_trip() {
        let binner = LabelBinner { k: 2 };
        let values: ArrayRef = Arc::new(Int64Array::from(vec![Some(0), Some(1), None, Some(5), Some(1), Some(0)]));
        let groups = [0, 1, 0, 1, 1, 2];
        let mut acc = HistogramGroupsAccumulator::new("t", binner);
        let filter = BooleanArray::from(vec![true, true, true, true, true, false]);
        acc.update_batch(std::slice::from_ref(&values), &groups, Some(&filter), 3).unwrap();
        let state = acc.state(EmitTo::All).unwrap();
        let mut merged = HistogramGroupsAccumulator::new("t", binner);
        merged.merge_batch(&state, &[0, 1, 2], 3).unwrap();
        // convert_to_state of the same rows, merged, must give the same histograms.
        let converted = merged.convert_to_state(std::slice::from_ref(&values), Some(&filter)).unwrap();
        let mut from_rows = HistogramGroupsAccumulator::new("t", binner);
        from_rows.merge_batch(&converted, &groups, 3).unwrap();
        let expected = [1.0, 0.0, 0.0, /* group 1: labels 1, 5->unknown, 1 */ 0.0, 2.0, 1.0, 0.0, 0.0, 0.0];
        assert_eq!(merged.counts, expected);
        assert_eq!(from_rows.counts, expected);
        let first = merged.evaluate(EmitTo::First(1)).unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(merged.counts.len(), 6);
    }

    #[test]
    fn decay_weights() {
        let p = Decay { lambda: 0.5, alpha: 0.0 };
        assert!((p.weight(2.0) - (-1.0f64).exp()).abs() < 1e-15);
        // With the lull correction the weight never falls below exp(-lambda / alpha).
        let p = Decay { lambda: 0.5, alpha: 1.0 };
        assert!((p.weight(1.0) - (-0.25f64).exp()).abs() < 1e-15);
        assert!(p.weight(1e12) > (-0.5f64).exp() - 1e-9);
    }

    const SETUP: &str = "CREATE TABLE t AS SELECT value % 7 AS g, CAST(value % 5 AS BIGINT) AS label, \
        CAST(value AS DOUBLE) * 1.7 AS d, CAST(value AS DOUBLE) AS ts \
        FROM generate_series(1, 3000)";

    #[tokio::test]
    async fn aggregates_agree_across_partitionings() {
        let queries = [
            "SELECT state_histogram(d, 1, 5000, 12, 'log') FROM t",
            "SELECT state_histogram(d, 0, 3000, 7) FROM t GROUP BY g ORDER BY g",
            "SELECT label_histogram(label, 3) FROM t GROUP BY g ORDER BY g",
            "SELECT label_histogram(label, 3) FILTER (WHERE d > 100) FROM t GROUP BY g ORDER BY g",
            "SELECT state_histogram(d, 1, 5000, 12, 'log', d) FROM t GROUP BY g ORDER BY g",
            "SELECT label_histogram(label, 3, ts / 7) FILTER (WHERE d > 100) FROM t GROUP BY g ORDER BY g",
            "SELECT decayed_histogram(label, 4, ts, 0.001, 0.01) FROM t GROUP BY g ORDER BY g",
            "SELECT decayed_histogram(label, 4, ts, 0.002) FROM t",
        ];
        for sql in queries {
            let mut results = Vec::new();
            for ctx in [ctx(1), ctx(8), ctx_skipping_partial_aggregation(8)] {
                ctx.sql(SETUP).await.unwrap().collect().await.unwrap();
                results.push(f64_lists(&ctx, sql).await);
            }
            assert_lists_close(&results[0], &results[1], 1e-9, sql);
            assert_lists_close(&results[0], &results[2], 1e-9, sql);
        }
    }

    #[tokio::test]
    async fn decayed_histogram_matches_hand_computed_weights() {
        let ctx = ctx(1);
        let sql =
            "SELECT decayed_histogram(l, 2, t, 0.5) FROM (VALUES (0, 0.0), (1, 2.0), (0, 4.0), (9, 4.0)) AS v(l, t)";
        let got = f64_lists(&ctx, sql).await;
        // Newest ts is 4: label 0 gets e^-2 + 1, label 1 gets e^-1, the unknown label 9 gets 1.
        let expected = vec![Some(vec![(-2.0f64).exp() + 1.0, (-1.0f64).exp(), 1.0])];
        assert_lists_close(&got, &expected, 1e-12, sql);
    }

    #[tokio::test]
    async fn weights_sum_per_bin_and_slide_out_of_window_frames() {
        let ctx = ctx(1);
        let rows = "(VALUES (1, 1.0, 2.0), (2, 3.0, 0.5), (3, 3.5, NULL), (4, 9.0, 1.5), (5, NULL, 4.0), \
                    (6, 5.0, CAST('NaN' AS DOUBLE)), (7, 0.5, 3.0)) AS v(i, x, w)";
        let sql = format!("SELECT state_histogram(x, 0, 10, 5, 'linear', w) FROM {rows}");
        // Width 2: 1.0 and 0.5 in bin 0 (2 + 3), 3.0 in bin 1 (0.5), 9.0 in bin 4 (1.5); a NULL
        // weight, a NULL value and a NaN weight skip rows 3, 5 and 6.
        assert_lists_close(&f64_lists(&ctx, &sql).await, &[Some(vec![5.0, 0.5, 0.0, 0.0, 1.5])], 0.0, &sql);
        let sql = format!("SELECT label_histogram(CAST(x AS BIGINT), 2, w) FROM {rows}");
        // Labels 1, 3, 9 and 0 (of 0.5) weigh 2, 0.5, 1.5 and 3; 3 and 9 are unknown (bin 2).
        assert_lists_close(&f64_lists(&ctx, &sql).await, &[Some(vec![3.0, 2.0, 2.0])], 0.0, &sql);
        // A sliding frame retracts the weight a row added: rows 6 and 7 are the frame of the last row.
        let sql = format!(
            "SELECT state_histogram(x, 0, 10, 5, 'linear', w) OVER (ORDER BY i ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) \
             FROM {rows} ORDER BY i DESC LIMIT 1"
        );
        assert_lists_close(&f64_lists(&ctx, &sql).await, &[Some(vec![3.0, 0.0, 0.0, 0.0, 0.0])], 0.0, &sql);
        let err = query_err(&ctx, &format!("SELECT label_histogram(CAST(x AS BIGINT), 2, 'heavy') FROM {rows}")).await;
        assert!(err.contains("label_histogram: argument 3 (weight) must be a number"), "{err}");
        let err = query_err(&ctx, &format!("SELECT state_histogram(x, 0, 10, 5, w) FROM {rows}")).await;
        assert!(err.contains("state_histogram: argument 5 (scale) must be a string"), "{err}");
    }

    #[tokio::test]
    async fn literal_only_parameters_fail_at_planning() {
        let ctx = ctx(1);
        ctx.sql(SETUP).await.unwrap().collect().await.unwrap();
        let err = query_err(&ctx, "SELECT state_histogram(d, 0, 10, label) FROM t").await;
        assert!(err.contains("state_histogram: argument 4 (bins) must be a positive integer literal"), "{err}");
        let err = query_err(&ctx, "SELECT state_histogram(d, 0, 10, 2.5) FROM t").await;
        assert!(err.contains("state_histogram: argument 4 (bins) must be an integer"), "{err}");
        let err = query_err(&ctx, "SELECT label_histogram(d, 3) FROM t").await;
        assert!(err.contains("label_histogram: argument 1 (label) must be an integer"), "{err}");
        let err = query_err(&ctx, "SELECT decayed_histogram(label, 3, ts, -1) FROM t").await;
        assert!(err.contains("decayed_histogram: argument 4 (lambda) must be a non-negative number literal"), "{err}");
    }
}
