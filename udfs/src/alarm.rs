//! Turning alarms into indictments over an ordered window: `consecutive(flag)` (SALSA indicts
//! after 20 consecutive alarms) and `ewma(x, alpha)` (Ganesha's exponentially weighted alarm
//! count). Both read the partition in its ORDER BY order in one pass; the frame is ignored.
//! And the aggregate `longest_run(flag, ord)`: the longest of `consecutive`'s runs in a group.

use std::mem::size_of;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, ListArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{
    AccumulatorArgs, PartitionEvaluatorArgs, StateFieldsArgs, WindowUDFFieldArgs,
};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator, PartitionEvaluator, Signature, Volatility,
    WindowUDFImpl, aggregate_doc_sections::DOC_SECTION_GENERAL, window_doc_sections::DOC_SECTION_ANALYTICAL,
};

use crate::args::{
    Literals, arg_error, check_arity, exec_error, is_number, list_item, physical_literals, require_number,
    require_time, times_to_f64, to_f64,
};
use crate::cells::{ByGroup, emit_to_groups, lists_side_by_side, passes, values_with_groups};

/// The first argument of `consecutive` and `longest_run`: a boolean (or NULL).
fn require_flag(func: &str, t: &DataType) -> Result<()> {
    match t {
        DataType::Boolean | DataType::Null => Ok(()),
        other => Err(arg_error(func, 0, "flag", format!("must be a boolean, got {other}"))),
    }
}

/// `consecutive(flag)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Consecutive {
    signature: Signature,
}

impl Default for Consecutive {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// The length of the run of true flags ending at each row; NULL breaks a run like false.
pub(crate) fn run_lengths(flags: &datafusion::arrow::array::BooleanArray) -> Int64Array {
    let mut run = 0i64;
    (0..flags.len())
        .map(|i| {
            run = if flags.is_valid(i) && flags.value(i) { run + 1 } else { 0 };
            run
        })
        .collect::<Vec<_>>()
        .into()
}

#[derive(Debug)]
struct ConsecutiveEvaluator;

impl PartitionEvaluator for ConsecutiveEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], _num_rows: usize) -> Result<ArrayRef> {
        let flags = values[0].as_boolean_opt().ok_or_else(|| exec_error("consecutive", "flag must be a boolean"))?;
        Ok(Arc::new(run_lengths(flags)))
    }
}

/// The example of `consecutive` and `ewma`, one query for both: the two ways to count alarms.
const RUN_AND_AVERAGE_EXAMPLE: &str = concat!(
    "SELECT t, consecutive(a) OVER (ORDER BY t) AS run, ewma(a, 0.5) OVER (ORDER BY t) AS weighted\n",
    "FROM (VALUES (1, true), (2, true), (3, false), (4, true)) AS v(t, a) ORDER BY t;\n",
    "-- 1 1 1\n",
    "-- 2 2 1\n",
    "-- 3 0 0.5\n",
    "-- 4 1 0.75"
);

static CONSECUTIVE_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_ANALYTICAL,
        "The length of the current run of true flags in the window's ORDER BY order: 0 on a false or \
         NULL flag, otherwise one more than the previous row's value (SALSA indicts a node after 20 \
         consecutive alarms). The frame is ignored.",
        "consecutive(flag)",
    )
    .with_sql_example(RUN_AND_AVERAGE_EXAMPLE)
    .with_argument("flag", "Boolean column.")
    .build()
});

impl WindowUDFImpl for Consecutive {
    fn name(&self) -> &str {
        "consecutive"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name(), t, 1, 1)?;
        require_flag(self.name(), &t[0])?;
        Ok(vec![DataType::Boolean])
    }

    fn partition_evaluator(&self, _: PartitionEvaluatorArgs) -> Result<Box<dyn PartitionEvaluator>> {
        Ok(Box::new(ConsecutiveEvaluator))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(Field::new(args.name(), DataType::Int64, false)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&CONSECUTIVE_DOC)
    }
}

/// `ewma(x, alpha)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Ewma {
    signature: Signature,
}

impl Default for Ewma {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// `y = x` on the first non-NULL value, then `y = alpha·x + (1 − alpha)·y`. A NULL `x` leaves
/// `y` unchanged (NULL before the first value); NaN and infinities propagate.
pub(crate) fn ewma(xs: &Float64Array, alpha: f64) -> Float64Array {
    let mut y: Option<f64> = None;
    (0..xs.len())
        .map(|i| {
            if xs.is_valid(i) {
                let x = xs.value(i);
                y = Some(y.map_or(x, |y| alpha * x + (1.0 - alpha) * y));
            }
            y
        })
        .collect()
}

#[derive(Debug)]
struct EwmaEvaluator {
    alpha: f64,
}

impl PartitionEvaluator for EwmaEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], _num_rows: usize) -> Result<ArrayRef> {
        Ok(Arc::new(ewma(&to_f64(&values[0])?, self.alpha)))
    }
}

static EWMA_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_ANALYTICAL,
        "Exponentially weighted moving average in the window's ORDER BY order: the first non-NULL x, \
         then alpha·x + (1 − alpha)·previous. A NULL x keeps the previous value (NULL before the first); \
         NaN and infinities propagate. Booleans count as 0/1, so `ewma(alarm, alpha)` is Ganesha's \
         weighted alarm count. The frame is ignored.",
        "ewma(x, alpha)",
    )
    .with_sql_example(RUN_AND_AVERAGE_EXAMPLE)
    .with_argument("x", "Numeric or boolean column.")
    .with_argument("alpha", "Number literal in (0, 1]: the weight of the newest value.")
    .build()
});

impl WindowUDFImpl for Ewma {
    fn name(&self) -> &str {
        "ewma"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name(), t, 2, 2)?;
        if !(is_number(&t[0]) || t[0] == DataType::Boolean) {
            return Err(arg_error(self.name(), 0, "x", format!("must be a number or boolean, got {}", t[0])));
        }
        require_number(self.name(), 1, "alpha", &t[1])?;
        Ok(vec![DataType::Float64, t[1].clone()])
    }

    fn partition_evaluator(&self, args: PartitionEvaluatorArgs) -> Result<Box<dyn PartitionEvaluator>> {
        let lits = physical_literals(args.input_exprs());
        let alpha =
            Literals { func: self.name(), lits: &lits }
                .number(1, "alpha", "a number literal in (0, 1]", |a| a > 0.0 && a <= 1.0)?;
        Ok(Box::new(EwmaEvaluator { alpha }))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(Field::new(args.name(), DataType::Float64, true)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&EWMA_DOC)
    }
}

const LONGEST_RUN: &str = "longest_run";

/// `longest_run(flag, ord)`: the longest run of `consecutive(flag)` in the order of `ord`, as an
/// aggregate. `max(consecutive(flag) OVER (PARTITION BY g ORDER BY ord))` sorts every row of
/// the table by (g, ord); a group's rows are fewer, sorted each on its own.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LongestRun {
    signature: Signature,
}

impl Default for LongestRun {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// Every row of every group, kept until the end: (ord, flag), a NULL flag kept as false.
#[derive(Debug, Default)]
struct RunGroups {
    groups: usize,
    group_of: Vec<usize>,
    rows: Vec<(f64, bool)>,
}

impl RunGroups {
    /// Adds the rows `rows` yields, each (row of `flags` and `ords`, its group); rows whose
    /// ord is NULL or NaN have no place in the order and are skipped.
    fn add(&mut self, flags: &ArrayRef, ords: &ArrayRef, rows: impl Iterator<Item = (usize, usize)>) -> Result<()> {
        let flags = flags.as_boolean_opt().ok_or_else(|| exec_error(LONGEST_RUN, "flag must be a boolean"))?;
        let ords = times_to_f64(ords)?;
        if flags.len() != ords.len() {
            return Err(exec_error(LONGEST_RUN, "flags and ords of different lengths"));
        }
        for (row, g) in rows {
            let ord = ords.value(row);
            if ords.is_null(row) || ord.is_nan() {
                continue;
            }
            self.group_of.push(g);
            self.rows.push((ord, flags.is_valid(row) && flags.value(row)));
        }
        Ok(())
    }

    /// Each group's longest run.
    fn longest(&self, by_group: &ByGroup) -> Int64Array {
        let mut ordered = Vec::new();
        by_group
            .groups()
            .map(|rows| {
                ordered.clear();
                ordered.extend(rows.iter().map(|&row| self.rows[row]));
                // At equal ords a false comes first: a tie never joins two runs.
                ordered.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let (mut run, mut longest) = (0i64, 0i64);
                for &(_, flag) in &ordered {
                    run = if flag { run + 1 } else { 0 };
                    longest = longest.max(run);
                }
                longest
            })
            .collect::<Vec<_>>()
            .into()
    }

    /// Each group's rows as two lists, ords and flags.
    fn state_of(&self, by_group: &ByGroup) -> Vec<ArrayRef> {
        let ords: Float64Array = by_group.order.iter().map(|&row| self.rows[row].0).collect::<Vec<_>>().into();
        let flags: BooleanArray = by_group.order.iter().map(|&row| Some(self.rows[row].1)).collect();
        vec![
            Arc::new(ListArray::new(list_item(DataType::Float64), by_group.lengths(), Arc::new(ords), None)),
            Arc::new(ListArray::new(list_item(DataType::Boolean), by_group.lengths(), Arc::new(flags), None)),
        ]
    }

    fn merge(&mut self, states: &[ArrayRef], group_indices: &[usize], total: usize) -> Result<()> {
        self.groups = self.groups.max(total);
        let [ords, flags] = lists_side_by_side(LONGEST_RUN, states)?;
        self.add(flags.values(), ords.values(), values_with_groups(ords.value_offsets(), group_indices))
    }

    /// `f` of the groups `emit_to` names, which are then forgotten; the groups after become `0..`.
    fn emit<T>(&mut self, emit_to: EmitTo, f: impl FnOnce(&Self, &ByGroup) -> T) -> T {
        let n = emit_to_groups(emit_to, self.groups).min(self.groups);
        let emitted = f(self, &ByGroup::of(&self.group_of, n));
        ByGroup::forget_first(&mut self.group_of, &mut self.rows, n);
        self.groups -= n;
        emitted
    }

    fn size(&self) -> usize {
        size_of::<Self>()
            + self.group_of.capacity() * size_of::<usize>()
            + self.rows.capacity() * size_of::<(f64, bool)>()
    }
}

impl GroupsAccumulator for RunGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.groups = self.groups.max(total_num_groups);
        let rows = group_indices.iter().enumerate().filter(|&(row, _)| passes(opt_filter, row));
        self.add(&values[0], &values[1], rows.map(|(row, &g)| (row, g)))
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        Ok(Arc::new(self.emit(emit_to, Self::longest)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(self.emit(emit_to, Self::state_of))
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.merge(values, group_indices, total_num_groups)
    }

    /// Each row as a group of its own (DataFusion skips partial aggregation when groups are
    /// nearly as many as rows).
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let mut rows = Self { groups: values[0].len(), ..Self::default() };
        let passing = (0..values[0].len()).filter(|&row| passes(opt_filter, row));
        rows.add(&values[0], &values[1], passing.map(|row| (row, row)))?;
        Ok(rows.state_of(&ByGroup::of(&rows.group_of, rows.groups)))
    }

    fn size(&self) -> usize {
        RunGroups::size(self)
    }
}

/// One group, for windows and aggregates without GROUP BY.
#[derive(Debug, Default)]
struct RunAccumulator(RunGroups);

impl Accumulator for RunAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.0.groups = 1;
        self.0.add(&values[0], &values[1], (0..values[0].len()).map(|row| (row, 0)))
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        ScalarValue::try_from_array(&self.0.longest(&ByGroup::of(&self.0.group_of, 1)), 0)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.0.state_of(&ByGroup::of(&self.0.group_of, 1)).iter().map(|a| ScalarValue::try_from_array(a, 0)).collect()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.0.merge(states, &vec![0; states[0].len()], 1)
    }

    fn size(&self) -> usize {
        self.0.size()
    }
}

static LONGEST_RUN_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_GENERAL,
        "The length of the group's longest run of true flags in the order of `ord`, the longest of \
         `consecutive`'s runs: `max(consecutive(flag) OVER (PARTITION BY g ORDER BY ord))` as one \
         aggregate (SALSA indicts a node after 20 consecutive alarms); 0 when no flag is true. The \
         window sorts every row of the table by (g, ord); the aggregate keeps each group's rows and \
         sorts each group on its own (SALSA's 540 K alarms a day: the sort took a tenth of its peer \
         statement). A NULL flag ends a run like false; rows whose `ord` is NULL or NaN are skipped; at \
         equal ords a false comes first, so a tie never joins two runs. Ords are compared as doubles \
         (timestamps in seconds, to about a microsecond).",
        "longest_run(flag, ord)",
    )
    .with_sql_example(concat!(
        "SELECT h, longest_run(a, t) AS longest\n",
        "FROM (VALUES ('x', 3, true), ('x', 1, true), ('x', 2, false), ('x', 4, true),\n",
        "             ('y', 1, false)) AS v(h, t, a)\n",
        "GROUP BY h ORDER BY h;\n",
        "-- x 2\n",
        "-- y 0"
    ))
    .with_argument("flag", "Boolean column.")
    .with_argument("ord", "Timestamp or numeric column: the order of the rows.")
    .build()
});

impl AggregateUDFImpl for LongestRun {
    fn name(&self) -> &str {
        LONGEST_RUN
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(LONGEST_RUN, t, 2, 2)?;
        require_flag(LONGEST_RUN, &t[0])?;
        require_time(LONGEST_RUN, 1, "ord", &t[1])?;
        Ok(vec![DataType::Boolean, t[1].clone()])
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(RunAccumulator::default()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                format_state_name(args.name, "ords"),
                DataType::List(list_item(DataType::Float64)),
                true,
            )),
            Arc::new(Field::new(
                format_state_name(args.name, "flags"),
                DataType::List(list_item(DataType::Boolean)),
                true,
            )),
        ])
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(RunGroups::default()))
    }

    fn default_value(&self, _: &DataType) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(0)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&LONGEST_RUN_DOC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{ctx, ctx_skipping_partial_aggregation, query_err, strings};
    use datafusion::arrow::compute::cast;

    /// Booleans reach `ewma` cast to Float64 by coercion, as here.
    fn bools_to_f64(flags: &[Option<bool>]) -> Float64Array {
        let array: ArrayRef = Arc::new(BooleanArray::from(flags.to_vec()));
        cast(&array, &DataType::Float64).unwrap().as_primitive().clone()
    }

    #[test]
    fn runs() {
        let flags = BooleanArray::from(vec![
            Some(true),
            Some(true),
            None,
            Some(true),
            Some(false),
            Some(true),
            Some(true),
            Some(true),
        ]);
        assert_eq!(run_lengths(&flags).values().to_vec(), [1, 2, 0, 1, 0, 1, 2, 3]);
    }

    #[test]
    fn ewma_by_hand() {
        let xs = bools_to_f64(&[None, Some(true), Some(false), None, Some(true)]);
        // Hand-computed with alpha 0.5: NULL, 1, 0.5, 0.5, 0.75.
        assert_eq!(ewma(&xs, 0.5).iter().collect::<Vec<_>>(), [None, Some(1.0), Some(0.5), Some(0.5), Some(0.75)]);
    }

    #[tokio::test]
    async fn sql() {
        let ctx = ctx(4);
        let sql = "SELECT h, t, consecutive(a) OVER (PARTITION BY h ORDER BY t), ewma(a, 0.5) OVER (PARTITION BY h ORDER BY t) \
                   FROM (VALUES ('x', 3, true), ('x', 1, true), ('x', 2, false), ('y', 1, true), ('x', 4, true)) AS v(h, t, a) \
                   ORDER BY h, t";
        assert_eq!(strings(&ctx, sql).await, ["x|1|1|1.0", "x|2|0|0.5", "x|3|1|0.75", "x|4|2|0.875", "y|1|1|1.0"]);
        let err = query_err(&ctx, "SELECT ewma(t, 1.5) OVER (ORDER BY t) FROM (VALUES (1)) AS v(t)").await;
        assert!(err.contains("ewma: argument 2 (alpha) must be a number literal in (0, 1]"), "{err}");
        let err = query_err(&ctx, "SELECT consecutive(t) OVER (ORDER BY t) FROM (VALUES (1)) AS v(t)").await;
        assert!(err.contains("consecutive: argument 1 (flag) must be a boolean"), "{err}");
    }

    #[tokio::test]
    async fn longest_run_by_hand() {
        // x in the order of t: T F T T NULL T (t = 5 a NULL flag): the longest run is 2.
        // y: at t = 1 a false comes before the true, which joins t = 2's: 2.
        // z: the true has no ord and is skipped: 0.
        let data = "(VALUES ('x', 3, true), ('x', 1, true), ('x', 2, false), ('x', 4, true), ('x', 5, NULL), \
                    ('x', 6, true), ('y', 1, true), ('y', 1, false), ('y', 2, true), ('z', NULL, true), \
                    ('z', 1, false)) AS v(h, t, a)";
        let sql = format!("SELECT h, longest_run(a, t) FROM {data} GROUP BY h ORDER BY h");
        for ctx in [ctx(1), ctx(4), ctx_skipping_partial_aggregation(4)] {
            assert_eq!(strings(&ctx, &sql).await, ["x|2", "y|2", "z|0"]);
        }
        let ctx = ctx(2);
        let whole = format!("SELECT longest_run(a, t) FROM {data} WHERE h = 'x'");
        assert_eq!(strings(&ctx, &whole).await, ["2"]);
        let none = format!("SELECT longest_run(a, t) FROM {data} WHERE h = 'none'");
        assert_eq!(strings(&ctx, &none).await, ["0"]);
        let err = query_err(&ctx, "SELECT longest_run(t, t) FROM (VALUES (1)) AS v(t)").await;
        assert!(err.contains("longest_run: argument 1 (flag) must be a boolean"), "{err}");
        let err = query_err(&ctx, "SELECT longest_run(true, t) FROM (VALUES ('a')) AS v(t)").await;
        assert!(err.contains("longest_run: argument 2 (ord) must be a timestamp or a number"), "{err}");
    }

    /// On rows without ties or NULL ords, `longest_run` is the longest `consecutive` run of the
    /// group: 12 groups of 30 to 60 rows, in no order, flags drawn with runs of every length.
    #[tokio::test]
    async fn longest_run_is_the_longest_consecutive_run() {
        let mut uniform = crate::test_util::uniform(0x2545_f491_4f6c_dd1d);
        let mut rows = Vec::new();
        for g in 0..12 {
            let n = 30 + g * 3;
            let mut ts: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                ts.swap(i, (uniform() * (i + 1) as f64) as usize);
            }
            for t in ts {
                let flag = match (uniform() * 10.0) as u32 {
                    0 => "NULL",
                    1..=3 => "false",
                    _ => "true",
                };
                rows.push(format!("({g}, {t}, {flag})"));
            }
        }
        let data = format!("(VALUES {}) AS v(g, t, a)", rows.join(", "));
        let windowed = strings(
            &ctx(1),
            &format!(
                "SELECT g, max(run) FROM \
                 (SELECT g, consecutive(a) OVER (PARTITION BY g ORDER BY t) AS run FROM {data}) GROUP BY g ORDER BY g"
            ),
        )
        .await;
        // Not only trivial groups: runs of different lengths, each at least 3 long.
        let longest: Vec<u32> = windowed.iter().map(|r| r.split('|').nth(1).unwrap().parse().unwrap()).collect();
        assert!(longest.iter().min() < longest.iter().max() && longest.iter().all(|&l| l >= 3), "{longest:?}");
        let grouped = format!("SELECT g, longest_run(a, t) FROM {data} GROUP BY g ORDER BY g");
        for ctx in [ctx(1), ctx(4), ctx_skipping_partial_aggregation(4)] {
            assert_eq!(strings(&ctx, &grouped).await, windowed);
        }
    }

    /// Emitting the first groups keeps the others, renumbered; a partial state merged into
    /// another accumulator gives what the rows themselves do.
    #[test]
    fn longest_run_emits_in_parts_and_merges() {
        // Runs of 2, 1 (true, false, true) and 3, out of order within a group.
        let flags: ArrayRef = Arc::new(BooleanArray::from(vec![true, true, true, false, true, true, true, true]));
        let ords: ArrayRef = Arc::new(Int64Array::from(vec![2, 1, 1, 2, 3, 3, 1, 2]));
        let groups = [0, 0, 1, 1, 1, 2, 2, 2];
        let longest =
            |array: ArrayRef| array.as_primitive::<datafusion::arrow::datatypes::Int64Type>().values().to_vec();
        let mut parts = RunGroups::default();
        parts.update_batch(&[flags.clone(), ords.clone()], &groups, None, 3).unwrap();
        assert_eq!(longest(parts.evaluate(EmitTo::First(1)).unwrap()), [2]);
        assert_eq!(longest(parts.evaluate(EmitTo::All).unwrap()), [1, 3]);
        let mut partial = RunGroups::default();
        partial.update_batch(&[flags, ords], &groups, None, 3).unwrap();
        let state = partial.state(EmitTo::All).unwrap();
        let mut merged = RunGroups::default();
        merged.merge_batch(&state, &[2, 0, 1], 3).unwrap();
        assert_eq!(longest(merged.evaluate(EmitTo::All).unwrap()), [1, 3, 2]);
        // A state sliced to its last group.
        let sliced: Vec<ArrayRef> = state.iter().map(|s| s.slice(2, 1)).collect();
        let mut one = RunGroups::default();
        one.merge_batch(&sliced, &[0], 1).unwrap();
        assert_eq!(longest(one.evaluate(EmitTo::All).unwrap()), [3]);
    }
}
