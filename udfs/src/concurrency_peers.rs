//! `concurrency_peer_pearson`: the Kahuna M45 study's comparison (§IV) in one aggregate over a
//! peer group. Each member's intervals make its concurrency series over the group's span (as
//! `concurrency_series` makes it from times scaled onto a grid of `points` steps), and each
//! member's series is compared with the others' (as `peer_pearson`).
//!
//! In SQL that is a `concurrency_series` per (group, member) and `peer_pearson` over the group.
//! But every series then lives twice in memory at once (the aggregate's difference arrays and
//! its output), and is sorted by group for the window: over the M45 history, 2.8 M series of
//! 120 points, 2.7 GB each time. Here a group keeps only its intervals, and makes its series
//! one group at a time.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Float64Builder, Int64Array, ListArray, StructArray,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, Int64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunctionParams, WindowFunctionParams};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, GroupsAccumulator, Signature, Volatility,
    aggregate_doc_sections::DOC_SECTION_GENERAL, udaf_default_schema_name, udaf_default_window_function_schema_name,
};

use crate::args::{
    Literals, check_arity, exec_error, list_item, logical_literals, physical_literals, require_integer, require_number,
    to_f64,
};
use crate::cells::lists_side_by_side;
use crate::series::{Grid, MAX_STEPS, peer_correlations, running_sums};
use crate::ticks::{KeptSamples, SampleAccumulator, SampleGroups};

const FUNC: &str = "concurrency_peer_pearson";

/// A group's span is at least this long, so that a group whose intervals all start and end at
/// one instant still has a grid.
const MIN_SPAN: f64 = 0.001;

/// `concurrency_peer_pearson(member, start, end, points)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ConcurrencyPeerPearson {
    signature: Signature,
}

impl Default for ConcurrencyPeerPearson {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// The grid's number of steps.
#[derive(Debug, Clone, Copy)]
struct Points(usize);

impl Points {
    fn parse(lits: &[Option<ScalarValue>]) -> Result<Self> {
        Ok(Self(Literals { func: FUNC, lits }.positive_int(3, "points", MAX_STEPS)?))
    }
}

/// A member's interval: its start, and its end (NaN: still running).
type Interval = (i64, f64, f64);

impl KeptSamples for Points {
    type Sample = Interval;

    /// The rows that count: member and start not NULL.
    fn read(&self, values: &[ArrayRef], mut f: impl FnMut(usize, Interval)) -> Result<()> {
        let Some(members) = values[0].as_primitive_opt::<Int64Type>() else {
            return Err(exec_error(FUNC, format!("member must be a 64-bit integer, got {}", values[0].data_type())));
        };
        let (starts, ends) = (to_f64(&values[1])?, to_f64(&values[2])?);
        for row in 0..members.len() {
            if members.is_valid(row) && starts.is_valid(row) {
                let end = if ends.is_valid(row) { ends.value(row) } else { f64::NAN };
                f(row, (members.value(row), starts.value(row), end));
            }
        }
        Ok(())
    }

    /// Each group's intervals, as three lists side by side (a NULL end for one still running).
    fn state(&self, groups: &[Vec<Interval>]) -> Vec<ArrayRef> {
        let offsets = OffsetBuffer::from_lengths(groups.iter().map(Vec::len));
        let list = |values: ArrayRef| -> ArrayRef {
            Arc::new(ListArray::new(list_item(values.data_type().clone()), offsets.clone(), values, None))
        };
        let all = || groups.iter().flatten();
        vec![
            list(Arc::new(all().map(|i| i.0).collect::<Int64Array>())),
            list(Arc::new(all().map(|i| i.1).collect::<Float64Array>())),
            list(Arc::new(all().map(|i| (!i.2.is_nan()).then_some(i.2)).collect::<Float64Array>())),
        ]
    }

    /// Only the values of the state's rows: a state is often a slice of a larger one.
    fn merge(&self, states: &[ArrayRef], mut f: impl FnMut(usize, Interval)) -> Result<()> {
        let [members, starts, ends] = lists_side_by_side(FUNC, states)?;
        let (Some(m), Some(s), Some(e)) = (
            members.values().as_primitive_opt::<Int64Type>(),
            starts.values().as_primitive_opt::<Float64Type>(),
            ends.values().as_primitive_opt::<Float64Type>(),
        ) else {
            return Err(exec_error(FUNC, "partial state is not lists of members, starts and ends"));
        };
        for (row, range) in members.value_offsets().windows(2).enumerate() {
            for value in range[0] as usize..range[1] as usize {
                if m.is_valid(value) && s.is_valid(value) {
                    let end = if e.is_valid(value) { e.value(value) } else { f64::NAN };
                    f(row, (m.value(value), s.value(value), end));
                }
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &mut [Vec<Interval>]) -> Result<ArrayRef> {
        let mut out = Similarity::default();
        for intervals in groups {
            out.group(self.0, intervals)?;
        }
        out.into_array()
    }
}

/// Each group's members, one after another.
#[derive(Default)]
struct Similarity {
    members: Vec<i64>,
    lowest: Vec<f64>,
    mean: Float64Builder,
    per_group: Vec<usize>,
    /// The difference arrays of a group's members, kept from group to group: a zeroed
    /// allocation of each group's would be zeroed by the kernel, page by page.
    delta: Vec<f64>,
}

impl Similarity {
    /// Appends one group's members, by member: the series over the group's span, as
    /// `concurrency_series((start - t0) / length * points, (end - t0) / length * points, 0,
    /// points, 1)` makes them, compared as `peer_pearson` compares them.
    fn group(&mut self, points: usize, intervals: &mut [Interval]) -> Result<()> {
        let before = self.members.len();
        intervals.sort_unstable_by_key(|i| i.0);
        let t0 = intervals.iter().map(|i| i.1).fold(f64::INFINITY, f64::min);
        let last = intervals.iter().map(|i| if i.2.is_nan() { i.1 } else { i.2 }).fold(f64::NEG_INFINITY, f64::max);
        let length = (last - t0).max(MIN_SPAN);
        let scaled = |t: f64| if t.is_nan() { f64::INFINITY } else { (t - t0) / length * points as f64 };
        let grid = Grid { from: 0.0, step: 1.0, steps: points };
        let members: Vec<&[Interval]> = intervals.chunk_by(|a, b| a.0 == b.0).collect();
        let delta = &mut self.delta;
        delta.clear();
        delta.resize(members.len() * (points + 1), 0.0);
        for (cells, member) in delta.chunks_exact_mut(points + 1).zip(&members) {
            for &(_, start, end) in *member {
                if let Some((first, stop)) = grid.covered(scaled(start), scaled(end)) {
                    cells[first] += 1.0;
                    cells[stop] -= 1.0;
                }
            }
        }
        let series: ArrayRef = Arc::new(running_sums(delta, points, members.len()));
        for (member, found) in members.iter().zip(peer_correlations(FUNC, &series)?) {
            // A member without peers (alone in its group) is left out, as peer_pearson's NULL.
            let Some((lowest, mean)) = found else { continue };
            self.members.push(member[0].0);
            self.lowest.push(lowest);
            self.mean.append_option(mean);
        }
        self.per_group.push(self.members.len() - before);
        Ok(())
    }

    fn into_array(mut self) -> Result<ArrayRef> {
        if self.members.len() > i32::MAX as usize {
            let rows = self.members.len();
            let message = format!("{rows} rows are more than one list array holds; aggregate fewer groups at once");
            return Err(exec_error(FUNC, message));
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(self.members)),
            Arc::new(Float64Array::from(self.lowest)),
            Arc::new(self.mean.finish()),
        ];
        let entries = StructArray::try_new(similarity_fields(), columns, None)?;
        Ok(Arc::new(ListArray::try_new(
            similarity_item(),
            OffsetBuffer::from_lengths(self.per_group),
            Arc::new(entries),
            None,
        )?))
    }
}

fn similarity_fields() -> Fields {
    Fields::from(vec![
        Field::new("member", DataType::Int64, false),
        Field::new("lowest_abs_r", DataType::Float64, false),
        Field::new("mean_abs_r", DataType::Float64, true),
    ])
}

fn similarity_item() -> FieldRef {
    Arc::new(Field::new_list_field(DataType::Struct(similarity_fields()), true))
}

fn state_fields(name: &str) -> Vec<FieldRef> {
    let list = |field: &str, t: DataType| {
        Arc::new(Field::new(format_state_name(name, field), DataType::List(list_item(t)), true))
    };
    vec![list("members", DataType::Int64), list("starts", DataType::Float64), list("ends", DataType::Float64)]
}

static CONCURRENCY_PEER_PEARSON_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_GENERAL,
        "The Kahuna M45 study in one aggregate over a peer group (a job): each member's (a host's) \
         intervals become its series of how many are active at each of `points` steps over the group's \
         span, from the earliest start t0 to the latest end (or start, where the end is NULL), at least \
         0.001 long: the series `concurrency_series((start - t0) / length * points, (end - t0) / length \
         * points, 0, points, 1)` grouped by member gives. Each member is then compared with the others \
         as `peer_pearson` compares them. Returns a list of `{member, lowest_abs_r, mean_abs_r}` ordered \
         by member; a member alone in its group is left out. Rows with a NULL member or start are \
         skipped; a NULL end is an interval still running. Only the intervals are kept between rows and \
         groups, never the series: over months of jobs, that is the difference between megabytes and \
         gigabytes.",
        "concurrency_peer_pearson(member, start, end, points)",
    )
    .with_sql_example(concat!(
        "SELECT r['member'] AS host, r['lowest_abs_r'] AS lowest, r['mean_abs_r'] AS mean\n",
        "FROM (SELECT unnest(concurrency_peer_pearson(h, s, e, 4)) AS r\n",
        "      FROM (VALUES (1, 0, 20), (2, 0, 20), (3, 20, 40), (4, 0, NULL)) AS v(h, s, e));\n",
        "-- 1 0 1\n",
        "-- 2 0 1\n",
        "-- 3 0 1\n",
        "-- 4 0 NULL   (4 runs from start to end: constant, its r undefined, so 0 for every peer)"
    ))
    .with_argument("member", "Integer column: whose interval it is (a host; map host names to ids and back).")
    .with_argument("start", "Numeric column: when the interval starts.")
    .with_argument("end", "Numeric column: when it ends (NULL: still running).")
    .with_argument("points", "Positive integer literal, at most 10,000,000: the steps of each series.")
    .build()
});

impl AggregateUDFImpl for ConcurrencyPeerPearson {
    fn name(&self) -> &str {
        FUNC
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(FUNC, t, 4, 4)?;
        require_integer(FUNC, 0, "member", &t[0])?;
        require_number(FUNC, 1, "start", &t[1])?;
        require_number(FUNC, 2, "end", &t[2])?;
        require_integer(FUNC, 3, "points", &t[3])?;
        Ok(vec![DataType::Int64, DataType::Float64, DataType::Float64, t[3].clone()])
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(similarity_item()))
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        Points::parse(&logical_literals(&params.args))?;
        udaf_default_schema_name(self, params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        Points::parse(&logical_literals(&params.args))?;
        udaf_default_window_function_schema_name(self, params)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(SampleAccumulator::new(Points::parse(&physical_literals(args.exprs))?)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(state_fields(args.name))
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(SampleGroups::new(Points::parse(&physical_literals(args.exprs))?)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&CONCURRENCY_PEER_PEARSON_DOC)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{ctx, ctx_skipping_partial_aggregation, query_err, strings};

    /// Random intervals of 3 groups (one of a single member), some still running, some NULL:
    /// the aggregate gives, for every member, what concurrency_series and peer_pearson give in
    /// SQL (the lowest |r| to the bit; the mean, a sum over pairs, to rounding).
    #[tokio::test]
    async fn agrees_with_concurrency_series_and_peer_pearson() {
        let data = "SELECT value AS i, value % 3 AS g, CASE WHEN value % 3 = 2 THEN 7 ELSE value * 7 % 5 END AS m, \
                    CAST(value * 37 % 101 AS DOUBLE) AS s, \
                    CASE WHEN value % 17 = 0 THEN NULL ELSE CAST(value * 37 % 101 + value * 13 % 29 AS DOUBLE) END AS e \
                    FROM generate_series(1, 400)";
        let fused = format!(
            "SELECT g, r['member'] AS m, r['lowest_abs_r'] AS lowest, r['mean_abs_r'] AS mean FROM \
             (SELECT g, unnest(concurrency_peer_pearson(m, s, e, 24)) AS r FROM ({data}) GROUP BY g)"
        );
        let sql = format!(
            "WITH d AS ({data}), span AS (SELECT g, min(s) AS t0, greatest(max(coalesce(e, s)) - min(s), 0.001) AS length FROM d GROUP BY g), \
             series AS (SELECT d.g, d.m, concurrency_series((d.s - span.t0) / span.length * 24, (d.e - span.t0) / span.length * 24, 0, 24, 1) AS x \
                        FROM d JOIN span ON d.g = span.g GROUP BY d.g, d.m), \
             windowed AS (SELECT g, m, peer_pearson(x) OVER (PARTITION BY g) AS p FROM series), \
             fused AS ({fused}) \
             SELECT f.g, f.m, f.lowest = w.p['lowest_abs_r'], abs(f.mean - w.p['mean_abs_r']) < 1e-12, round(f.lowest, 4) \
             FROM fused f FULL JOIN windowed w ON f.g = w.g AND f.m = w.m ORDER BY f.g, f.m"
        );
        for ctx in [ctx(1), ctx(4), ctx_skipping_partial_aggregation(4)] {
            let got = strings(&ctx, &sql).await;
            // Groups 0 and 1 have members 0..4 each; group 2's one member has no peers, and
            // peer_pearson gives it NULL, which the full join shows as a row of NULLs.
            assert_eq!(got.len(), 11, "{got:?}");
            assert!(got[..10].iter().all(|row| row.contains("|true|true|")), "{got:?}");
            assert!(got[10].starts_with("NULL|NULL|"), "{got:?}");
        }
    }

    /// Members 1 and 2 run alike (r = 1), member 3 the other way round (r = −1, |r| = 1); member
    /// 4's one interval spans the whole group (constant: r undefined, lowest 0, no mean). The
    /// span is [0, 40), 4 steps of 10; a NULL member and a NULL start are skipped.
    #[tokio::test]
    async fn hand_computed_members() {
        let rows = "(1, 0.0, 20.0), (2, 0.0, 20.0), (3, 20.0, 40.0), (4, 0.0, NULL), (NULL, 5.0, 6.0), (1, NULL, 9.0)";
        let sql = format!(
            "SELECT r['member'], r['lowest_abs_r'], r['mean_abs_r'] FROM (SELECT unnest(concurrency_peer_pearson(m, s, e, 4)) AS r \
             FROM (VALUES {rows}) AS v(m, s, e))"
        );
        let expected = ["1|0.0|1.0", "2|0.0|1.0", "3|0.0|1.0", "4|0.0|NULL"];
        assert_eq!(strings(&ctx(1), &sql).await, expected);
    }

    #[tokio::test]
    async fn planning_errors_name_the_argument() {
        let ctx = ctx(1);
        let err = query_err(&ctx, "SELECT concurrency_peer_pearson(1, 0, 1, 0)").await;
        assert!(
            err.contains("concurrency_peer_pearson: argument 4 (points) must be a positive integer literal"),
            "{err}"
        );
        let err = query_err(&ctx, "SELECT concurrency_peer_pearson('a', 0, 1, 4)").await;
        assert!(err.contains("concurrency_peer_pearson: argument 1 (member)"), "{err}");
        let err = query_err(&ctx, "SELECT concurrency_peer_pearson(1, 0, 1)").await;
        assert!(err.contains("concurrency_peer_pearson"), "{err}");
    }
}
