//! `duration_peer_scores`: Kahuna-WB's comparison (Kahuna §VI-A) in one aggregate over a peer
//! group (a job and state). Each member's durations, divided by the group's median, make its
//! histogram (as `state_histogram` with the 'log' scale makes it), which is smoothed (as
//! `kde_smooth`) and compared with the other members' (as `peer_score`).
//!
//! In SQL that is two medians, a join of every duration back to its group's median, a
//! histogram per (group, member) and a window over the group: over the M45 history, 4.6 M
//! durations joined and 950 K histograms sorted by group. Here a group keeps only its members'
//! durations, and scores them one group at a time.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Float64Builder, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunctionParams, WindowFunctionParams};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, GroupsAccumulator, Signature, Volatility,
    aggregate_doc_sections::DOC_SECTION_GENERAL, udaf_default_schema_name, udaf_default_window_function_schema_name,
};

use crate::args::{
    Literals, arg_error, check_arity, exec_error, logical_literals, physical_literals, require_integer, require_number,
    to_f64,
};
use crate::cells::{lists_of, lists_side_by_side, lists_state_fields, struct_list_item, struct_lists};
use crate::distance::Kde;
use crate::histogram::{Binner, MAX_BINS, ValueBinner};
use crate::members::{MemberType, Members, is_text, member_type};
use crate::peer::Distributions;
use crate::tick_peers::median;
use crate::ticks::{KeptSamples, SampleAccumulator, SampleGroups};

const FUNC: &str = "duration_peer_scores";

/// A group's median is taken as at least this, so that durations of zero still divide.
const MIN_MEDIAN: f64 = 0.001;

/// `duration_peer_scores(member, duration, lo, hi, bins, weight, bandwidth, min_samples,
/// threshold)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DurationPeerScores {
    signature: Signature,
}

impl Default for DurationPeerScores {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// The literal arguments, from `lo` on.
#[derive(Debug, Clone, Copy)]
struct Params {
    binner: ValueBinner,
    /// 'time': a duration weighs its ratio to the median; 'count': 1.
    by_time: bool,
    bandwidth: f64,
    min_samples: usize,
    threshold: f64,
}

impl Params {
    fn parse(lits: &[Option<ScalarValue>]) -> Result<Self> {
        let l = Literals { func: FUNC, lits };
        let lo = l.number(2, "lo", "a positive number literal", |lo| lo > 0.0)?;
        let hi = l.number(3, "hi", "a number literal greater than lo", |hi| hi > lo)?;
        let bins = l.positive_int(4, "bins", MAX_BINS)?;
        let by_time = match l.string(5, "weight", "'time' or 'count'")?.to_ascii_lowercase().as_str() {
            "time" => true,
            "count" => false,
            other => return Err(arg_error(FUNC, 5, "weight", format!("must be 'time' or 'count', got '{other}'"))),
        };
        Ok(Self {
            binner: ValueBinner::new(lo, hi, bins, true),
            by_time,
            bandwidth: l.number(6, "bandwidth", "a non-negative number literal", |x| x >= 0.0)?,
            min_samples: l.positive_int(7, "min_samples", u32::MAX as usize)?,
            threshold: l.number(8, "threshold", "a number literal", |_| true)?,
        })
    }
}

/// A member's duration.
type Duration = (u32, f64);

/// The parameters, the member's type, and the members seen.
#[derive(Debug)]
struct Peers {
    params: Params,
    member_type: MemberType,
    members: Members,
}

impl Peers {
    fn new(args: &AccumulatorArgs) -> Result<Self> {
        Ok(Self {
            params: Params::parse(&physical_literals(args.exprs))?,
            member_type: MemberType::of(args.expr_fields[0].data_type()),
            members: Members::new(FUNC),
        })
    }
}

impl KeptSamples for Peers {
    type Sample = Duration;

    /// The rows that count: member and duration not NULL.
    fn read(&mut self, values: &[ArrayRef], mut f: impl FnMut(usize, Duration)) -> Result<()> {
        let members = self.members.ids(&values[0], self.member_type)?;
        let durations = to_f64(&values[1])?;
        for (row, member) in members.into_iter().enumerate() {
            if let Some(member) = member.filter(|_| durations.is_valid(row)) {
                f(row, (member, durations.value(row)));
            }
        }
        Ok(())
    }

    /// Each group's durations, as two lists side by side.
    fn state(&self, groups: &[Vec<Duration>]) -> Vec<ArrayRef> {
        let all = || groups.iter().flatten();
        let columns = vec![
            self.members.column(all().map(|d| d.0), self.member_type),
            Arc::new(all().map(|d| d.1).collect::<Float64Array>()) as ArrayRef,
        ];
        lists_of(groups.iter().map(Vec::len), columns)
    }

    /// Only the values of the state's rows: a state is often a slice of a larger one.
    fn merge(&mut self, states: &[ArrayRef], mut f: impl FnMut(usize, Duration)) -> Result<()> {
        let [members, durations] = lists_side_by_side(FUNC, states)?;
        let Some(d) = durations.values().as_primitive_opt::<Float64Type>() else {
            return Err(exec_error(FUNC, "partial state is not lists of members and durations"));
        };
        self.members.each_in_lists(members, self.member_type, |row, value, member| {
            if d.is_valid(value) {
                f(row, (member, d.value(value)));
            }
            Ok(())
        })
    }

    fn evaluate(&self, groups: &mut [Vec<Duration>]) -> Result<ArrayRef> {
        let ranks = self.members.ranks(self.member_type);
        let mut out = Scores::new(&self.params);
        for durations in groups {
            out.group(&self.params, &ranks, durations);
        }
        out.into_array(&self.members, self.member_type)
    }

    fn apart(&self) -> Self {
        Self { params: self.params, member_type: self.member_type, members: Members::new(FUNC) }
    }

    fn keys_size(&self) -> usize {
        self.members.size()
    }
}

/// Each group's members, one after another.
struct Scores {
    members: Vec<u32>,
    samples: Vec<i64>,
    medians: Vec<f64>,
    peer_medians: Vec<f64>,
    slowdowns: Vec<f64>,
    peers: Vec<i64>,
    scores: Float64Builder,
    per_group: Vec<usize>,
    /// Groups without a duration: NULL, not an empty list.
    empty: Vec<bool>,
    kde: Kde,
    dists: Distributions,
    hist: Vec<f64>,
    smoothed: Vec<f64>,
    scratch: Vec<f64>,
}

impl Scores {
    fn new(params: &Params) -> Self {
        Self {
            members: Vec::new(),
            samples: Vec::new(),
            medians: Vec::new(),
            peer_medians: Vec::new(),
            slowdowns: Vec::new(),
            peers: Vec::new(),
            scores: Float64Builder::new(),
            per_group: Vec::new(),
            empty: Vec::new(),
            kde: Kde::new(params.bandwidth),
            dists: Distributions::default(),
            hist: Vec::new(),
            smoothed: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Appends one group's members with `min_samples` durations or more, in order: each
    /// member's median, its mean ratio to the group's median (over all the group's durations),
    /// and the share of the other members whose histograms are farther than the threshold.
    fn group(&mut self, params: &Params, ranks: &[u32], durations: &mut [Duration]) {
        let before = self.members.len();
        self.empty.push(durations.is_empty());
        // By member, then by duration: a member's sum is then the same whatever order the rows came in.
        durations.sort_unstable_by(|a, b| ranks[a.0 as usize].cmp(&ranks[b.0 as usize]).then(a.1.total_cmp(&b.1)));
        self.scratch.clear();
        self.scratch.extend(durations.iter().map(|d| d.1));
        let peer_median = if durations.is_empty() { f64::NAN } else { median(&mut self.scratch) };
        let scale = peer_median.max(MIN_MEDIAN);
        let bins = params.binner.bins();
        self.dists.clear();
        let mut compared = Vec::new();
        for member in durations.chunk_by(|a, b| a.0 == b.0).filter(|m| m.len() >= params.min_samples) {
            self.hist.clear();
            self.hist.resize(bins, 0.0);
            let mut sum = 0.0;
            for &(_, ms) in member {
                let ratio = ms / scale;
                sum += ratio;
                if !ratio.is_nan() {
                    self.hist[params.binner.bin(ratio)] += if params.by_time { ratio.max(0.0) } else { 1.0 };
                }
            }
            self.kde.smooth(&self.hist, &mut self.smoothed);
            // Every histogram of the group has `bins` bins: push_raw's width check cannot fail.
            let counted = matches!(self.dists.push_raw(&self.smoothed), Ok(true));
            self.scratch.clear();
            self.scratch.extend(member.iter().map(|d| d.1));
            self.members.push(member[0].0);
            self.samples.push(member.len() as i64);
            self.medians.push(median(&mut self.scratch));
            self.peer_medians.push(peer_median);
            self.slowdowns.push(sum / member.len() as f64);
            compared.push(counted.then(|| self.dists.len() - 1));
        }
        let far = self.dists.far_counts(params.threshold);
        let others = self.dists.len().saturating_sub(1);
        for distribution in compared.iter() {
            self.peers.push(compared.len() as i64 - 1);
            self.scores.append_option(distribution.filter(|_| others > 0).map(|d| far[d] as f64 / others as f64));
        }
        self.per_group.push(self.members.len() - before);
    }

    fn into_array(mut self, members: &Members, member_type: MemberType) -> Result<ArrayRef> {
        let columns: Vec<ArrayRef> = vec![
            members.column(self.members.into_iter(), member_type),
            Arc::new(Int64Array::from(self.samples)),
            Arc::new(Float64Array::from(self.medians)),
            Arc::new(Float64Array::from(self.peer_medians)),
            Arc::new(Float64Array::from(self.slowdowns)),
            Arc::new(Int64Array::from(self.peers)),
            Arc::new(self.scores.finish()),
        ];
        struct_lists(FUNC, score_fields(member_type), columns, self.per_group, Some(&self.empty))
    }
}

fn score_fields(member_type: MemberType) -> Fields {
    Fields::from(vec![
        Field::new("member", member_type.data_type(), false),
        Field::new("samples", DataType::Int64, false),
        Field::new("median", DataType::Float64, false),
        Field::new("peer_median", DataType::Float64, false),
        Field::new("slowdown", DataType::Float64, false),
        Field::new("peers", DataType::Int64, false),
        Field::new("score", DataType::Float64, true),
    ])
}

fn state_fields(name: &str, member_type: MemberType) -> Vec<FieldRef> {
    lists_state_fields(name, &[("members", member_type.data_type()), ("durations", DataType::Float64)])
}

static DURATION_PEER_SCORES_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_GENERAL,
        "Kahuna-WB's peer comparison in one aggregate over a peer group (a job's states of one kind): \
         each member's (a host's) durations are divided by the median of the whole group's durations \
         (at least 0.001), binned as `state_histogram(ratio, lo, hi, bins, 'log', w)` bins them, with \
         w = `greatest(ratio, 0)` for `weight` 'time' or 1 for 'count', smoothed as `kde_smooth(hist, \
         bandwidth)` smooths them, and compared with the other members' as `peer_score(hist, threshold)` \
         over the group compares them. Members with fewer than `min_samples` durations take no part. \
         Returns a list of `{member, samples, median, peer_median, slowdown, peers, score}` ordered by \
         member: its durations, their median, the group's median (as `median` computes both), the mean \
         of its ratios, the other members taking part, and the share of those (whose histogram is a \
         distribution) farther than `threshold` (NULL without any). A group without durations gives \
         NULL. Rows with a NULL member or duration are skipped. Only the durations are kept between \
         rows and groups, never a histogram, and no duration is joined back to its group's median.",
        "duration_peer_scores(member, duration, lo, hi, bins, weight, bandwidth, min_samples, threshold)",
    )
    .with_sql_example(concat!(
        "SELECT s['member'] AS host, s['samples'] AS n, s['slowdown'] AS slowdown, s['score'] AS score\n",
        "FROM (SELECT unnest(duration_peer_scores(h, ms, 0.1, 10, 8, 'count', 0, 2, 0.5)) AS s\n",
        "      FROM (VALUES ('a', 10), ('a', 10), ('b', 10), ('b', 10), ('c', 40), ('c', 40), ('d', 5)) AS v(h, ms));\n",
        "-- a 2 1 0.5   (the median is 10: a's ratios are 1, in the bin of b's; c is far)\n",
        "-- b 2 1 0.5\n",
        "-- c 2 4 1     (ratios of 4, far from both peers)"
    ))
    .with_argument("member", "Integer or string column: whose duration it is (a host), given back as it came.")
    .with_argument("duration", "Numeric column: how long the state took.")
    .with_argument("lo", "Positive number literal: the smallest ratio binned (smaller ones count in the first bin).")
    .with_argument("hi", "Number literal greater than lo: the largest ratio binned (larger ones count in the last bin).")
    .with_argument("bins", "Positive integer literal, at most 65,536: log-spaced bins from lo to hi.")
    .with_argument("weight", "'time' (a duration weighs its ratio) or 'count' (each weighs 1).")
    .with_argument("bandwidth", "Non-negative number literal: the smoothing kernel's width, in bins (0: none).")
    .with_argument("min_samples", "Positive integer literal: the durations a member needs to take part.")
    .with_argument("threshold", "Number literal: the distance beyond which two histograms differ.")
    .build()
});

impl AggregateUDFImpl for DurationPeerScores {
    fn name(&self) -> &str {
        FUNC
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(FUNC, t, 9, 9)?;
        let member = member_type(FUNC, 0, &t[0])?;
        require_number(FUNC, 1, "duration", &t[1])?;
        require_number(FUNC, 2, "lo", &t[2])?;
        require_number(FUNC, 3, "hi", &t[3])?;
        require_integer(FUNC, 4, "bins", &t[4])?;
        if !(is_text(&t[5]) || t[5] == DataType::Null) {
            return Err(arg_error(FUNC, 5, "weight", format!("must be 'time' or 'count', got {}", t[5])));
        }
        require_number(FUNC, 6, "bandwidth", &t[6])?;
        require_integer(FUNC, 7, "min_samples", &t[7])?;
        require_number(FUNC, 8, "threshold", &t[8])?;
        Ok([member, DataType::Float64].into_iter().chain(t[2..].iter().cloned()).collect())
    }

    fn return_type(&self, t: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(struct_list_item(score_fields(MemberType::of(&t[0])))))
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
        Ok(Box::new(SampleAccumulator::new(Peers::new(&args)?)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(state_fields(args.name, MemberType::of(args.input_fields[0].data_type())))
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(SampleGroups::new(Peers::new(&args)?)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DURATION_PEER_SCORES_DOC)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{ctx, ctx_skipping_partial_aggregation, query_err, strings};

    /// Random durations of 4 groups (one with a single member, one whose every member has
    /// fewer than 3), some NULL, some with a NULL member: for every member taking part, the
    /// aggregate gives what the medians, `state_histogram`, `kde_smooth` and `peer_score` give
    /// in SQL (the medians, counts and scores exactly; the mean ratio, a sum, to rounding).
    #[tokio::test]
    async fn agrees_with_the_steps_in_sql() {
        let data = "SELECT value % 4 AS g, \
                    CASE WHEN value % 4 = 3 THEN 'solo' WHEN value % 19 = 0 THEN NULL ELSE 'host-' || CAST(value * 7 % 9 AS VARCHAR) END AS m, \
                    CASE WHEN value % 23 = 0 THEN NULL ELSE CAST(value * 37 % 101 + (value % 9) * (value % 9) * 5 AS DOUBLE) END AS ms \
                    FROM generate_series(1, 600) WHERE value % 4 <> 2 OR value < 40";
        for (weight, bandwidth) in [("time", 1.0), ("count", 0.0)] {
            let fused = format!(
                "SELECT g, s['member'] AS m, s['samples'] AS n, s['median'] AS med, s['peer_median'] AS pm, \
                 s['slowdown'] AS slowdown, s['peers'] AS peers, s['score'] AS score FROM \
                 (SELECT g, unnest(duration_peer_scores(m, ms, 0.1, 10, 16, '{weight}', {bandwidth}, 3, 0.3)) AS s \
                  FROM ({data}) GROUP BY g)"
            );
            let steps = format!(
                "WITH d AS (SELECT * FROM ({data}) WHERE m IS NOT NULL AND ms IS NOT NULL), \
                 pm AS (SELECT g, median(ms) AS pm FROM d GROUP BY g), \
                 r AS (SELECT d.g, d.m, d.ms, pm.pm, d.ms / greatest(pm.pm, 0.001) AS ratio FROM d JOIN pm ON d.g = pm.g), \
                 h AS (SELECT g, m, count(*) AS n, median(ms) AS med, max(pm) AS pm, avg(ratio) AS slowdown, \
                       kde_smooth(state_histogram(ratio, 0.1, 10, 16, 'log', \
                                  CASE WHEN '{weight}' = 'count' THEN 1.0 ELSE greatest(ratio, 0.0) END), {bandwidth}) AS hist \
                       FROM r GROUP BY g, m HAVING count(*) >= 3) \
                 SELECT g, m, n, med, pm, slowdown, count(*) OVER (PARTITION BY g) - 1 AS peers, \
                        peer_score(hist, 0.3) OVER (PARTITION BY g) AS score FROM h"
            );
            let sql = format!(
                "SELECT f.g, f.m, f.n = s.n, f.med = s.med, f.pm = s.pm, abs(f.slowdown - s.slowdown) < 1e-12, \
                        f.peers = s.peers, f.score IS NOT DISTINCT FROM s.score, f.score \
                 FROM ({fused}) f FULL JOIN ({steps}) s ON f.g = s.g AND f.m = s.m ORDER BY f.g, f.m"
            );
            for ctx in [ctx(1), ctx(4), ctx_skipping_partial_aggregation(4)] {
                let got = strings(&ctx, &sql).await;
                // Groups 0 and 1 have 9 hosts each, 2 of 3 too few durations, 3 one member.
                assert_eq!(got.len(), 19, "{got:?}");
                assert!(got.iter().all(|row| row.contains("|true|true|true|true|true|true|")), "{got:?}");
                let scored = got.iter().filter(|row| !row.ends_with("|NULL")).count();
                assert_eq!(scored, 18, "{got:?}");
                assert!(got.iter().any(|row| !row.ends_with("|0.0") && !row.ends_with("|NULL")), "{got:?}");
            }
        }
    }

    /// A group whose rows a FILTER leaves out gives NULL; one whose members all have too few
    /// durations, an empty list.
    #[tokio::test]
    async fn no_durations_is_null_too_few_is_empty() {
        let sql = "SELECT g, cardinality(duration_peer_scores(m, ms, 0.1, 10, 8, 'count', 0, 2, 0.5) FILTER (WHERE ms > 1)) \
                   FROM (VALUES (1, 'a', 1), (2, 'a', 5), (2, 'b', 5)) AS v(g, m, ms) GROUP BY g ORDER BY g";
        assert_eq!(strings(&ctx(1), sql).await, ["1|NULL", "2|0"]);
    }

    /// An infinite duration weighs infinitely under 'time': its member's histogram is no
    /// distribution, so the member has no score and is nobody's peer, though it still counts in
    /// `peers`.
    #[tokio::test]
    async fn an_infinite_duration_leaves_its_member_unscored() {
        let sql = "SELECT s['member'], s['score'], s['peers'] FROM \
                   (SELECT unnest(duration_peer_scores(m, ms, 0.1, 10, 8, 'time', 0, 2, 0.5)) AS s \
                    FROM (VALUES ('a', 10.0), ('a', 10.0), ('b', 10.0), ('b', 10.0), ('c', 10.0), ('c', power(10.0, 400))) AS v(m, ms))";
        assert_eq!(strings(&ctx(1), sql).await, ["a|0.0|2", "b|0.0|2", "c|NULL|2"]);
    }

    #[tokio::test]
    async fn planning_errors_name_the_argument() {
        let ctx = ctx(1);
        let call = |args: &str| format!("SELECT duration_peer_scores({args})");
        let cases = [
            ("true, 1, 0.1, 10, 8, 'time', 1, 2, 0.5", "argument 1 (member) must be an integer or a string"),
            ("'a', 1, 0, 10, 8, 'time', 1, 2, 0.5", "argument 3 (lo) must be a positive number literal"),
            ("'a', 1, 0.1, 10, 8, 'often', 1, 2, 0.5", "argument 6 (weight) must be 'time' or 'count', got 'often'"),
            ("'a', 1, 0.1, 10, 8, 'time', -1, 2, 0.5", "argument 7 (bandwidth) must be a non-negative number literal"),
            ("'a', 1, 0.1, 10, 8, 'time', 1, 0, 0.5", "argument 8 (min_samples) must be a positive integer literal"),
        ];
        for (args, expected) in cases {
            let err = query_err(&ctx, &call(args)).await;
            assert!(err.contains(&format!("duration_peer_scores: {expected}")), "{err}");
        }
        let err = query_err(&ctx, &call("'a', 1, 0.1, 10, 8, 'time', 1, 2")).await;
        assert!(err.contains("duration_peer_scores"), "{err}");
    }
}
