//! `tick_peer_scores`: SALSA's peer comparison over time (§8, Algorithm 1) in one aggregate
//! over a peer group. Each member's samples make its decayed histograms at regular ticks (as
//! `tick_histograms` makes them), each is smoothed (as `kde_smooth`) and compared at its tick
//! with the other members' (as `peer_scores`).
//!
//! Those three in SQL give the same numbers (for members that are not NULL, which this one
//! skips): `tick_histograms` grouped by member, `kde_smooth`, then `peer_scores` grouped by
//! (peer group, tick). But every (member, tick) histogram then goes from one GROUP BY to the
//! other (on the M45 day, 540 K 12-bin lists): copied into partial states, hash-partitioned and
//! concatenated, which costs more than the comparison itself. Here only the samples cross
//! partitions.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Float64Builder, Int64Array};
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
};
use crate::cells::{lists_of, lists_side_by_side, struct_list_item, struct_lists};
use crate::distance::Kde;
use crate::histogram::samples_state_fields;
use crate::peer::Distributions;
use crate::ticks::{
    KeptSamples, Sample, SampleAccumulator, SampleGroups, TickParams, Window, by_time, samples, with_tick_arguments,
};

const FUNC: &str = "tick_peer_scores";

/// `member`, then `tick_histograms`' arguments from `bin` to `alpha`, then these two.
const BIN_AT: usize = 1;
const BANDWIDTH_AT: usize = 8;
const THRESHOLD_AT: usize = 9;

/// `tick_peer_scores(member, bin, bins, ts, step, memory, lambda, alpha, bandwidth, threshold)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TickPeerScores {
    signature: Signature,
}

impl Default for TickPeerScores {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

#[derive(Debug, Clone, Copy)]
struct Params {
    ticks: TickParams,
    bandwidth: f64,
    threshold: f64,
}

impl Params {
    fn parse(lits: &[Option<ScalarValue>]) -> Result<Self> {
        let l = Literals { func: FUNC, lits };
        Ok(Self {
            ticks: TickParams::parse(FUNC, lits, BIN_AT)?,
            bandwidth: l.number(BANDWIDTH_AT, "bandwidth", "a non-negative number literal", |x| x >= 0.0)?,
            threshold: l.number(THRESHOLD_AT, "threshold", "a number literal", |_| true)?,
        })
    }
}

/// A member's sample.
type MemberSample = (i64, Sample);

/// The members, then the times and bins as `tick_histograms` keeps them.
fn state_fields(name: &str) -> Vec<FieldRef> {
    let members =
        Arc::new(Field::new(format_state_name(name, "members"), DataType::List(list_item(DataType::Int64)), true));
    std::iter::once(members).chain(samples_state_fields(name)).collect()
}

impl KeptSamples for Params {
    type Sample = MemberSample;

    /// The rows that count: member, bin and ts not NULL, ts finite.
    fn read(&mut self, values: &[ArrayRef], mut f: impl FnMut(usize, MemberSample)) -> Result<()> {
        let Some(members) = values[0].as_primitive_opt::<Int64Type>() else {
            return Err(exec_error(FUNC, format!("member must be a 64-bit integer, got {}", values[0].data_type())));
        };
        samples(&self.ticks, &values[BIN_AT..], |row, sample| {
            if members.is_valid(row) {
                f(row, (members.value(row), sample));
            }
        })
    }

    /// Each group's samples, as three lists side by side.
    fn state(&self, groups: &[Vec<MemberSample>]) -> Vec<ArrayRef> {
        let all = || groups.iter().flatten();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(all().map(|s| s.0).collect::<Int64Array>()),
            Arc::new(all().map(|s| s.1.0).collect::<Float64Array>()),
            Arc::new(all().map(|s| f64::from(s.1.1)).collect::<Float64Array>()),
        ];
        lists_of(groups.iter().map(Vec::len), columns)
    }

    /// Only the values of the state's rows: a state is often a slice of a larger one.
    fn merge(&mut self, states: &[ArrayRef], mut f: impl FnMut(usize, MemberSample)) -> Result<()> {
        let [members, ts, bins] = lists_side_by_side(FUNC, states)?;
        let (Some(m), Some(t), Some(b)) = (
            members.values().as_primitive_opt::<Int64Type>(),
            ts.values().as_primitive_opt::<Float64Type>(),
            bins.values().as_primitive_opt::<Float64Type>(),
        ) else {
            return Err(exec_error(FUNC, "partial state is not lists of members, times and bins"));
        };
        for (row, range) in members.value_offsets().windows(2).enumerate() {
            for value in range[0] as usize..range[1] as usize {
                if m.is_valid(value) && t.is_valid(value) && b.is_valid(value) {
                    f(row, (m.value(value), self.ticks.sample(t.value(value), b.value(value) as i64)?));
                }
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &mut [Vec<MemberSample>]) -> Result<ArrayRef> {
        let mut out = Scores::new(self);
        for samples in groups {
            out.group(self, samples)?;
        }
        out.into_array()
    }

    fn apart(&self) -> Self {
        *self
    }
}

/// The median as DataFusion's `median` computes it (the mean of the middle two for an even
/// count), so that a query moved onto this function keeps its verdicts to the last bit.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    let len = values.len();
    let (low, &mut middle, _) = values.select_nth_unstable_by(len / 2, f64::total_cmp);
    match low.iter().copied().max_by(f64::total_cmp) {
        Some(below) if len.is_multiple_of(2) => (below + middle) / 2.0,
        _ => middle,
    }
}

/// Each group's rows, one after another: member `members[i]` at tick `ticks[i]`.
struct Scores {
    members: Vec<i64>,
    ticks: Vec<i64>,
    levels: Vec<f64>,
    scores: Float64Builder,
    hosts: Vec<i64>,
    peer_levels: Vec<f64>,
    per_group: Vec<usize>,
    kde: Kde,
    dists: Distributions,
}

impl Scores {
    fn new(params: &Params) -> Self {
        Self {
            members: Vec::new(),
            ticks: Vec::new(),
            levels: Vec::new(),
            scores: Float64Builder::new(),
            hosts: Vec::new(),
            peer_levels: Vec::new(),
            per_group: Vec::new(),
            kde: Kde::new(params.bandwidth),
            dists: Distributions::default(),
        }
    }

    /// Appends one group's rows, by tick and, within a tick, by member. All members' windows
    /// slide together, tick by tick, so that a tick's histograms are made, smoothed and
    /// compared while they are in the cache: made member by member first (as
    /// `tick_histograms` lays them out) and then read tick by tick, each would be a cache miss.
    fn group(&mut self, params: &Params, samples: &mut [MemberSample]) -> Result<()> {
        let before = self.members.len();
        samples.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(by_time(&a.1, &b.1)));
        let times: Vec<Sample> = samples.iter().map(|s| s.1).collect();
        let mut members = Vec::new();
        let mut start = 0;
        for member in samples.chunk_by(|a, b| a.0 == b.0) {
            members.push((member[0].0, start..start + member.len()));
            start += member.len();
        }
        let tick_params = &params.ticks;
        let mut windows = Vec::with_capacity(members.len());
        // Each member's next tick, earliest (then lowest member) first.
        let mut due = BinaryHeap::with_capacity(members.len());
        for (m, (_, range)) in members.iter().enumerate() {
            let mut window = Window::new(tick_params, &times[range.clone()]);
            if window.settle(tick_params, &times[range.clone()]) {
                due.push(Reverse((window.tick, m)));
            }
            windows.push(window);
        }
        let bins = tick_params.bins;
        let (mut hist, mut smoothed, mut at_tick, mut levels) = (vec![0.0; bins], Vec::new(), Vec::new(), Vec::new());
        while let Some(&Reverse((tick, _))) = due.peek() {
            self.dists.clear();
            at_tick.clear();
            levels.clear();
            while let Some(&Reverse((next, m))) = due.peek()
                && next == tick
            {
                due.pop();
                let own = &times[members[m].1.clone()];
                hist.fill(0.0);
                let level = windows[m].histogram(tick_params, own, &mut hist);
                self.kde.smooth(&hist, &mut smoothed);
                let counted = self
                    .dists
                    .push_raw(&smoothed)
                    .map_err(|had| exec_error(FUNC, format!("histograms of {had} and {} bins", smoothed.len())))?;
                at_tick.push((m, counted.then(|| self.dists.len() - 1), level));
                levels.push(level);
                windows[m].tick += 1;
                if windows[m].settle(tick_params, own) {
                    due.push(Reverse((windows[m].tick, m)));
                }
            }
            let far = self.dists.far_counts(params.threshold);
            let peers = self.dists.len().saturating_sub(1);
            let peer_level = median(&mut levels);
            for &(m, dist, level) in &at_tick {
                self.members.push(members[m].0);
                self.ticks.push(tick);
                self.levels.push(level);
                self.scores.append_option(dist.filter(|_| peers > 0).map(|d| far[d] as f64 / peers as f64));
                self.hosts.push(at_tick.len() as i64);
                self.peer_levels.push(peer_level);
            }
        }
        self.per_group.push(self.members.len() - before);
        Ok(())
    }

    fn into_array(mut self) -> Result<ArrayRef> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(self.members)),
            Arc::new(Int64Array::from(self.ticks)),
            Arc::new(Float64Array::from(self.levels)),
            Arc::new(self.scores.finish()),
            Arc::new(Int64Array::from(self.hosts)),
            Arc::new(Float64Array::from(self.peer_levels)),
        ];
        struct_lists(FUNC, score_fields(), columns, self.per_group, None)
    }
}

fn score_fields() -> Fields {
    Fields::from(vec![
        Field::new("member", DataType::Int64, false),
        Field::new("tick", DataType::Int64, false),
        Field::new("level", DataType::Float64, false),
        Field::new("score", DataType::Float64, true),
        Field::new("hosts", DataType::Int64, false),
        Field::new("peer_level", DataType::Float64, false),
    ])
}

static TICK_PEER_SCORES_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    let doc = Documentation::builder(
        DOC_SECTION_GENERAL,
        "SALSA's peer comparison over time in one aggregate over `GROUP BY` the peer group: each \
         member's `tick_histograms`, each smoothed by `kde_smooth(hist, bandwidth)` and scored at its \
         tick as `peer_scores(member, hist, threshold)` scores the members of a `GROUP BY group, tick`. \
         A list of `{member, tick, level, score, hosts, peer_level}` ordered by tick, then member, one \
         for each tick at which a member's histogram holds a sample: `level` is the member's mean bin at \
         the tick, `score` the share of the tick's other members whose smoothed histogram is farther \
         (`jsd_sqrt`) than `threshold` (NULL without such peers), `hosts` the members with a histogram at \
         the tick and `peer_level` the median of their levels (as `median` computes it). Rows with a \
         NULL member are skipped, and others as `tick_histograms` skips them. The same numbers, to the \
         bit, as those steps in SQL, without handing every member's histogram at every tick from one \
         GROUP BY to the next: on a day of the M45 cluster that was 540 K 12-bin lists, copied into \
         partial states, hash-partitioned and concatenated, and took more time than the comparison \
         (SALSA's whole query in one `kahuna sql -f`: 0.67 → 0.38 CPU-s). The accumulator keeps the \
         group's samples (24 bytes each); the members' windows slide along the ticks together, so that a \
         tick's histograms are compared while they are in the cache. A group is scored on one thread: a \
         peer group of a day's ticks is one task.",
        "tick_peer_scores(member, bin, bins, ts, step, memory, lambda, alpha, bandwidth, threshold)",
    )
    .with_sql_example(concat!(
        "SELECT s['tick'] AS tick, s['member'] AS member, s['score'] AS score, s['hosts'] AS hosts\n",
        "FROM (SELECT unnest(tick_peer_scores(m, b, 2, t, 10, 2, 0, 0, 0, 0.5)) AS s\n",
        "      FROM (VALUES (1, 0, 3), (2, 0, 5), (3, 1, 8), (3, 1, 15)) AS v(m, b, t))\n",
        "ORDER BY tick, member;\n",
        "-- 1 1 0.5 3   (one of its two peers is far: member 3, whose samples sit in bin 1)\n",
        "-- 1 2 0.5 3   (the same)\n",
        "-- 1 3 1 3     (both its peers are far)\n",
        "-- 2 1 0.5 3\n",
        "-- 2 2 0.5 3\n",
        "-- 2 3 1 3\n",
        "-- 3 3 NULL 1  (alone at tick 3: no peers)"
    ))
    .with_argument("member", "Integer column: who the sample belongs to (a host, a series).");
    with_tick_arguments(doc)
        .with_argument("alpha", "Non-negative number literal: the lull correction (0: plain exponential decay).")
        .with_argument(
            "bandwidth",
            "Non-negative number literal: the kernel's standard deviation in bins (0: no smoothing).",
        )
        .with_argument("threshold", "Number literal: the distance above which two members' histograms differ.")
        .build()
});

impl AggregateUDFImpl for TickPeerScores {
    fn name(&self) -> &str {
        FUNC
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(FUNC, t, 10, 10)?;
        require_integer(FUNC, 0, "member", &t[0])?;
        TickParams::check_types(FUNC, t, BIN_AT)?;
        require_number(FUNC, BANDWIDTH_AT, "bandwidth", &t[BANDWIDTH_AT])?;
        require_number(FUNC, THRESHOLD_AT, "threshold", &t[THRESHOLD_AT])?;
        let mut out = t.to_vec();
        out[0] = DataType::Int64;
        out[BIN_AT] = DataType::Int64;
        Ok(out)
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(struct_list_item(score_fields())))
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        Params::parse(&logical_literals(&params.args))?;
        udaf_default_schema_name(self, params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        Params::parse(&logical_literals(&params.args))?;
        udaf_default_window_function_schema_name(self, params)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(SampleAccumulator::new(Params::parse(&physical_literals(args.exprs))?)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(state_fields(args.name))
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(SampleGroups::new(Params::parse(&physical_literals(args.exprs))?)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&TICK_PEER_SCORES_DOC)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{ctx, ctx_skipping_partial_aggregation, query_err, strings};

    /// Rows `(group, member, bin, t)` as a VALUES table named `v`.
    fn values(rows: &[(i64, Option<i64>, i64, f64)]) -> String {
        let rows: Vec<String> = rows
            .iter()
            .map(|(g, m, b, t)| {
                format!("({g}, {}, {b}, {t:?})", m.map_or("CAST(NULL AS BIGINT)".into(), |m| m.to_string()))
            })
            .collect();
        format!("(VALUES {}) AS v(g, m, b, t)", rows.join(", "))
    }

    /// Three members, step 10, memory 2, no decay or smoothing: a sample at t counts in ticks
    /// floor(t / 10) + 1 and + 2. Member 3 is in bin 1, the others in bin 0, so it is far
    /// (jsd_sqrt 1) from both and they from one of their two peers. At tick 3 member 3 is
    /// alone: no peers, no score. A NULL member is skipped; FILTER drops member 9.
    #[tokio::test]
    async fn hand_computed_ticks() {
        let data = values(&[
            (1, Some(1), 0, 3.0),
            (1, Some(2), 0, 5.0),
            (1, Some(3), 1, 8.0),
            (1, Some(3), 1, 15.0),
            (1, None, 1, 4.0),
            (1, Some(9), 1, 4.0),
        ]);
        let sql = format!(
            "SELECT s['tick'], s['member'], s['level'], s['score'], s['hosts'], s['peer_level'] FROM \
             (SELECT unnest(tick_peer_scores(m, b, 2, t, 10, 2, 0, 0, 0, 0.5) FILTER (WHERE m IS DISTINCT FROM 9)) AS s \
             FROM {data})"
        );
        let expected = [
            "1|1|0.0|0.5|3|0.0",
            "1|2|0.0|0.5|3|0.0",
            "1|3|1.0|1.0|3|0.0",
            "2|1|0.0|0.5|3|0.0",
            "2|2|0.0|0.5|3|0.0",
            "2|3|1.0|1.0|3|0.0",
            "3|3|1.0|NULL|1|1.0",
        ];
        for partitions in [1, 3] {
            assert_eq!(strings(&ctx(partitions), &sql).await, expected, "{partitions} partitions");
        }
    }

    /// The same numbers, to the bit, as the three steps it replaces in SQL: `tick_histograms`
    /// per member, `kde_smooth`, then `count`, `median` and `peer_scores` per (group, tick).
    /// Clustered random samples in three groups, one with 40 members at once (peer groups of
    /// 32 and more are bounded by a pivot, see `count_far_pairs`), over partitions that merge
    /// partial states and with rows as states.
    #[tokio::test]
    async fn same_as_tick_histograms_kde_smooth_and_peer_scores() {
        let mut uniform = crate::test_util::uniform(0x9e37_79b9_7f4a_7c15_u64);
        let mut rows = Vec::new();
        for (g, members) in [(1, 6), (2, 40), (3, 12)] {
            for m in 0..members {
                // Member 0 of each group runs slow: its bins sit higher.
                let slow = if m == 0 { 5.0 } else { 0.0 };
                for burst in 0..4 {
                    let start = burst as f64 * 300.0 + uniform() * 60.0;
                    for _ in 0..6 {
                        let bin = (uniform() * 6.0 + slow) as i64;
                        rows.push((g, Some(g * 100 + m), bin, start + uniform() * 90.0));
                    }
                }
            }
        }
        let data = values(&rows);
        let three_steps = format!(
            "WITH ticked AS (SELECT g, m, unnest(tick_histograms(b, 12, t, 5.0, 24, 0.02, 0.1)) AS h \
             FROM {data} GROUP BY g, m), \
             smoothed AS (SELECT g, m, h['tick'] AS tick, h['mean_bin'] AS level, kde_smooth(h['hist'], 1.0) AS dist FROM ticked), \
             compared AS (SELECT g, tick, count(*) AS hosts, median(level) AS peer_level, \
             unnest(peer_scores(named_struct('m', m, 'level', level), dist, 0.3)) AS p FROM smoothed GROUP BY g, tick) \
             SELECT g, p['member']['m'] AS m, tick, p['member']['level'] AS level, p['score'] AS score, hosts, peer_level FROM compared"
        );
        let one_pass = format!(
            "SELECT g, s['member'] AS m, s['tick'] AS tick, s['level'] AS level, s['score'] AS score, s['hosts'] AS hosts, \
             s['peer_level'] AS peer_level FROM \
             (SELECT g, unnest(tick_peer_scores(m, b, 12, t, 5.0, 24, 0.02, 0.1, 1.0, 0.3)) AS s FROM {data} GROUP BY g)"
        );
        // The group key last: DataFusion 55 keeps a GROUP BY's uniqueness through an unnest
        // (apache/datafusion#24787) and drops the ORDER BY keys after it.
        let ordered = |q: &str| format!("SELECT * FROM ({q}) ORDER BY m, tick, g");
        let expected = strings(&ctx(4), &ordered(&three_steps)).await;
        assert!(expected.len() > 2000, "{}", expected.len());
        let hosts = |row: &String| row.split('|').nth(5).and_then(|h| h.parse::<usize>().ok());
        assert_eq!(expected.iter().filter_map(hosts).max(), Some(40), "a tick with all 40 members");
        assert_eq!(strings(&ctx(4), &ordered(&one_pass)).await, expected);
        assert_eq!(strings(&ctx(1), &ordered(&one_pass)).await, expected, "one partition");
        assert_eq!(
            strings(&ctx_skipping_partial_aggregation(4), &ordered(&one_pass)).await,
            expected,
            "rows as states"
        );
    }

    #[tokio::test]
    async fn bad_arguments_fail_while_planning() {
        let ctx = ctx(1);
        let call =
            |args: &str| format!("SELECT tick_peer_scores({args}) FROM (VALUES (1, 0, 2.5, 'a')) AS v(m, b, t, name)");
        for (args, message) in [
            ("name, b, 12, t, 5, 24, 0.02, 0.1, 1, 0.5", "tick_peer_scores: argument 1 (member) must be an integer"),
            ("m, t, 12, t, 5, 24, 0.02, 0.1, 1, 0.5", "tick_peer_scores: argument 2 (bin) must be an integer"),
            (
                "m, b, 12, t, 0, 24, 0.02, 0.1, 1, 0.5",
                "tick_peer_scores: argument 5 (step) must be a positive number literal",
            ),
            (
                "m, b, 12, t, 5, 24, 0.02, 0.1, -1, 0.5",
                "tick_peer_scores: argument 9 (bandwidth) must be a non-negative number literal",
            ),
            (
                "m, b, 12, t, 5, 24, 0.02, 0.1, 1, t",
                "tick_peer_scores: argument 10 (threshold) must be a number literal, got a non-literal",
            ),
            ("m, b, 12, t, 5, 24, 0.02, 0.1, 1", "tick_peer_scores"),
        ] {
            let err = query_err(&ctx, &call(args)).await;
            assert!(err.contains(message), "{args}: {err}");
        }
    }

    /// A time whose tick would not be an exact integer is an error naming this function.
    #[tokio::test]
    async fn times_too_far_from_zero_are_an_error() {
        let sql = "SELECT tick_peer_scores(m, b, 2, t, 10, 2, 0.1, 0, 0, 0.5) FROM (VALUES (1, 0, 3e300), (2, 1, 12)) AS v(m, b, t)";
        let err = query_err(&ctx(1), sql).await;
        assert!(err.contains("tick_peer_scores: ts 3e300 is not within 2^53 steps of 10 from 0"), "{err}");
    }
}
