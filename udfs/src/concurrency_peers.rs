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

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Float64Builder, StringViewBuilder};
use datafusion::arrow::compute::cast;
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
use crate::members::{MemberType, Members, is_text, member_type};
use crate::series::{Grid, MAX_STEPS, WholeSeries, peer_correlations, running_sums};
use crate::ticks::{KeptSamples, SampleAccumulator, SampleGroups};

const FUNC: &str = "concurrency_peer_pearson";

/// A group's span is at least this long, so that a group whose intervals all start and end at
/// one instant still has a grid.
const MIN_SPAN: f64 = 0.001;

/// `concurrency_peer_pearson(member, start, end, points[, key])`.
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
fn points(lits: &[Option<ScalarValue>]) -> Result<usize> {
    Literals { func: FUNC, lits }.positive_int(3, "points", MAX_STEPS)
}

/// The last bytes of a key that an interval holds itself: at most seven, their count in the
/// eighth byte.
const SUFFIX_BYTES: usize = 7;

/// No key: an interval merged with no other.
const NO_KEY: u32 = u32::MAX;

/// The interval keys one aggregate has seen, split into all but their last [`SUFFIX_BYTES`]
/// (the prefix, numbered once) and those last bytes, which an interval holds itself. The task
/// attempts of one job differ only in their last few bytes, so a key takes 12 bytes of the
/// interval rather than a copy of its own (over the M45 history, 4.6 M keys of 36 bytes, most
/// of the memory the aggregate would touch). Equal keys split alike, so two keys are equal
/// exactly when their prefix numbers and last bytes are.
#[derive(Debug)]
struct Keys {
    prefixes: Members,
    /// The prefix numbered last: the next row's key most often shares it.
    last: Option<u32>,
}

impl Keys {
    fn new() -> Self {
        Self { prefixes: Members::new(FUNC), last: None }
    }

    /// The prefix number and last bytes of `key`.
    fn split(&mut self, key: &[u8]) -> Result<(u32, u64)> {
        let (prefix, suffix) = key.split_at(key.len().saturating_sub(SUFFIX_BYTES));
        let mut last = [0; 8];
        last[..suffix.len()].copy_from_slice(suffix);
        last[SUFFIX_BYTES] = suffix.len() as u8;
        Ok((self.number(prefix)?, u64::from_le_bytes(last)))
    }

    fn number(&mut self, prefix: &[u8]) -> Result<u32> {
        if let Some(last) = self.last.filter(|&last| self.prefixes.bytes(last) == prefix) {
            return Ok(last);
        }
        let number = self.prefixes.id(prefix)?;
        if number == NO_KEY {
            return Err(exec_error(FUNC, "more than 2^32 - 1 key prefixes in one aggregate"));
        }
        self.last = Some(number);
        Ok(number)
    }

    /// The key of a prefix number and last bytes, written over `bytes`.
    fn write(&self, prefix: u32, suffix: u64, bytes: &mut Vec<u8>) {
        let last = suffix.to_le_bytes();
        bytes.clear();
        bytes.extend_from_slice(self.prefixes.bytes(prefix));
        bytes.extend_from_slice(&last[..usize::from(last[SUFFIX_BYTES])]);
    }

    fn size(&self) -> usize {
        self.prefixes.size()
    }
}

/// A member's interval: its start, its end (NaN: still running), and its key (its prefix
/// number, [`NO_KEY`] for none, and its last bytes: see [`Keys`]).
#[derive(Debug, Clone, Copy)]
struct Interval {
    member: u32,
    prefix: u32,
    suffix: u64,
    start: f64,
    end: f64,
}

/// The grid's number of steps, the member's type, and the members and keys seen.
#[derive(Debug)]
struct Peers {
    points: usize,
    member_type: MemberType,
    members: Members,
    keys: Keys,
}

impl Peers {
    fn new(args: &AccumulatorArgs) -> Result<Self> {
        Ok(Self {
            points: points(&physical_literals(args.exprs))?,
            member_type: MemberType::of(args.expr_fields[0].data_type()),
            members: Members::new(FUNC),
            keys: Keys::new(),
        })
    }
}

impl Interval {
    /// The interval of a row, its key's prefix numbered in `keys`.
    fn new(keys: &mut Keys, member: u32, key: Option<&str>, start: f64, end: Option<f64>) -> Result<Self> {
        let (prefix, suffix) = key.map_or(Ok((NO_KEY, 0)), |key| keys.split(key.as_bytes()))?;
        Ok(Self { member, prefix, suffix, start, end: end.unwrap_or(f64::NAN) })
    }
}

impl KeptSamples for Peers {
    type Sample = Interval;

    /// The rows that count: member and start not NULL.
    fn read(&mut self, values: &[ArrayRef], mut f: impl FnMut(usize, Interval)) -> Result<()> {
        let members = self.members.ids(&values[0], self.member_type)?;
        let (starts, ends) = (to_f64(&values[1])?, to_f64(&values[2])?);
        let keys = values.get(4).map(|keys| cast(keys, &DataType::Utf8View)).transpose()?;
        let keys = keys.as_ref().map(|keys| keys.as_string_view());
        for (row, member) in members.into_iter().enumerate() {
            if let Some(member) = member.filter(|_| starts.is_valid(row)) {
                let key = keys.filter(|keys| keys.is_valid(row)).map(|keys| keys.value(row));
                let end = ends.is_valid(row).then(|| ends.value(row));
                f(row, Interval::new(&mut self.keys, member, key, starts.value(row), end)?);
            }
        }
        Ok(())
    }

    /// Each group's intervals, as four lists side by side (a NULL end for one still running, a
    /// NULL key for one without).
    fn state(&self, groups: &[Vec<Interval>]) -> Vec<ArrayRef> {
        let all = || groups.iter().flatten();
        let mut keys = StringViewBuilder::with_capacity(groups.iter().map(Vec::len).sum());
        let mut key = Vec::new();
        for interval in all() {
            if interval.prefix == NO_KEY {
                keys.append_null();
            } else {
                self.keys.write(interval.prefix, interval.suffix, &mut key);
                keys.append_value(String::from_utf8_lossy(&key));
            }
        }
        let columns: Vec<ArrayRef> = vec![
            self.members.column(all().map(|i| i.member), self.member_type),
            Arc::new(all().map(|i| i.start).collect::<Float64Array>()),
            Arc::new(all().map(|i| (!i.end.is_nan()).then_some(i.end)).collect::<Float64Array>()),
            Arc::new(keys.finish()),
        ];
        lists_of(groups.iter().map(Vec::len), columns)
    }

    /// Only the values of the state's rows: a state is often a slice of a larger one.
    fn merge(&mut self, states: &[ArrayRef], mut f: impl FnMut(usize, Interval)) -> Result<()> {
        let [members, starts, ends, keys] = lists_side_by_side(FUNC, states)?;
        let (Some(s), Some(e), Some(k)) = (
            starts.values().as_primitive_opt::<Float64Type>(),
            ends.values().as_primitive_opt::<Float64Type>(),
            keys.values().as_string_view_opt(),
        ) else {
            return Err(exec_error(FUNC, "partial state is not lists of members, starts, ends and keys"));
        };
        let keys = &mut self.keys;
        self.members.each_in_lists(members, self.member_type, |row, value, member| {
            if s.is_valid(value) {
                let key = k.is_valid(value).then(|| k.value(value));
                let end = e.is_valid(value).then(|| e.value(value));
                f(row, Interval::new(keys, member, key, s.value(value), end)?);
            }
            Ok(())
        })
    }

    fn evaluate(&self, groups: &mut [Vec<Interval>]) -> Result<ArrayRef> {
        let ids = self.members.in_order(self.member_type);
        let ranks = crate::members::inverse(&ids);
        let (mut out, mut by_member) = (Similarity::default(), ByMember::new(ranks.len()));
        for intervals in groups {
            // Members by rank while the group is ordered and compared; by number again after,
            // as a window evaluates a group again.
            intervals.iter_mut().for_each(|i| i.member = ranks[i.member as usize]);
            by_member.order(intervals);
            merge_keyed(intervals);
            let compared = out.group(self.points, intervals, &ids);
            intervals.iter_mut().for_each(|i| i.member = ids[i.member as usize]);
            compared?;
        }
        out.into_array(&self.members, self.member_type)
    }

    fn apart(&self) -> Self {
        Self { points: self.points, member_type: self.member_type, members: Members::new(FUNC), keys: Keys::new() }
    }

    fn keys_size(&self) -> usize {
        self.members.size() + self.keys.size()
    }

    fn keep_keys_of(&mut self, kept: &mut [Vec<Interval>]) {
        let mut keys = Keys::new();
        for interval in kept.iter_mut().flatten().filter(|i| i.prefix != NO_KEY) {
            let prefix = self.keys.prefixes.bytes(interval.prefix);
            interval.prefix = keys.number(prefix).expect("fewer prefixes than were numbered before");
        }
        self.keys = keys;
    }
}

/// Puts a group's intervals (their members as ranks) in order of member by counting, then each
/// member's in order of key (keyless last), so that the intervals of one key lie together. A
/// group has at most a few hundred members of a few intervals each: cheaper than sorting it.
struct ByMember {
    /// Indexed by rank: a member's intervals in the group, then where its next one goes.
    places: Vec<usize>,
    members: Vec<u32>,
    ordered: Vec<Interval>,
}

impl ByMember {
    fn new(members: usize) -> Self {
        Self { places: vec![0; members], members: Vec::new(), ordered: Vec::new() }
    }

    fn order(&mut self, intervals: &mut [Interval]) {
        self.members.clear();
        for interval in intervals.iter() {
            let count = &mut self.places[interval.member as usize];
            if *count == 0 {
                self.members.push(interval.member);
            }
            *count += 1;
        }
        self.members.sort_unstable();
        let mut next = 0;
        for &member in &self.members {
            let count = std::mem::replace(&mut self.places[member as usize], next);
            next += count;
        }
        self.ordered.clear();
        self.ordered.extend_from_slice(intervals);
        for interval in intervals.iter() {
            let place = &mut self.places[interval.member as usize];
            self.ordered[*place] = *interval;
            *place += 1;
        }
        self.members.iter().for_each(|&member| self.places[member as usize] = 0);
        intervals.copy_from_slice(&self.ordered);
        for one_member in intervals.chunk_by_mut(|a, b| a.member == b.member).filter(|run| run.len() > 1) {
            one_member.sort_unstable_by_key(|i| (u128::from(i.prefix) << 64) | u128::from(i.suffix));
        }
    }
}

/// Makes the intervals of one member and key (lying together) one interval, from the earliest
/// start to the latest end (NaN only if no part has ended).
fn merge_keyed(intervals: &mut Vec<Interval>) {
    intervals.dedup_by(|later, kept| {
        let same = later.member == kept.member
            && later.prefix == kept.prefix
            && later.suffix == kept.suffix
            && kept.prefix != NO_KEY;
        if same {
            kept.start = kept.start.min(later.start);
            kept.end = if kept.end.is_nan() { later.end } else { kept.end.max(later.end) };
        }
        same
    });
}

/// Each group's members, one after another.
#[derive(Default)]
struct Similarity {
    members: Vec<u32>,
    lowest: Vec<f64>,
    mean: Float64Builder,
    per_group: Vec<usize>,
    /// Groups without an interval: NULL, not an empty list.
    empty: Vec<bool>,
    /// The difference arrays of a group's members, kept from group to group: a zeroed
    /// allocation of each group's would be zeroed by the kernel, page by page.
    delta: Vec<i32>,
}

/// Each member's number of active intervals at each step, from its difference array of
/// `steps + 1` cells: None where a count is too large for [`WholeSeries`]. A count lies between
/// 0 and the member's number of intervals, so only where that is larger are the counts checked.
fn counts(delta: &[i32], steps: usize, most_intervals: usize) -> Option<Vec<i16>> {
    let largest = WholeSeries::largest(steps);
    let each_member = || delta.chunks_exact(steps + 1).map(|cells| &cells[..steps]);
    if most_intervals as i64 > largest {
        let mut running = each_member().flat_map(|cells| {
            cells.iter().scan(0i32, |active, &d| {
                *active += d;
                Some(i64::from(*active).abs())
            })
        });
        if running.any(|count| count > largest) {
            return None;
        }
    }
    let mut counts = Vec::with_capacity(steps * delta.len() / (steps + 1));
    for cells in each_member() {
        let mut active = 0i32;
        counts.extend(cells.iter().map(|&d| {
            active += d;
            active as i16
        }));
    }
    Some(counts)
}

impl Similarity {
    /// Appends one group's members, in the order of its intervals (ordered, their members as
    /// ranks, whose member numbers are `ids`): the series over
    /// the group's span, as `concurrency_series((start - t0) / length * points, (end - t0) /
    /// length * points, 0, points, 1)` makes them, compared as `peer_pearson` compares them.
    fn group(&mut self, points: usize, intervals: &[Interval], ids: &[u32]) -> Result<()> {
        let before = self.members.len();
        self.empty.push(intervals.is_empty());
        let t0 = intervals.iter().map(|i| i.start).fold(f64::INFINITY, f64::min);
        let last =
            intervals.iter().map(|i| if i.end.is_nan() { i.start } else { i.end }).fold(f64::NEG_INFINITY, f64::max);
        let length = (last - t0).max(MIN_SPAN);
        let scaled = |t: f64| if t.is_nan() { f64::INFINITY } else { (t - t0) / length * points as f64 };
        let grid = Grid { from: 0.0, step: 1.0, steps: points };
        let members: Vec<&[Interval]> = intervals.chunk_by(|a, b| a.member == b.member).collect();
        let delta = &mut self.delta;
        delta.clear();
        delta.resize(members.len() * (points + 1), 0);
        for (cells, member) in delta.chunks_exact_mut(points + 1).zip(&members) {
            for interval in *member {
                if let Some((first, stop)) = grid.covered(scaled(interval.start), scaled(interval.end)) {
                    cells[first] += 1;
                    cells[stop] -= 1;
                }
            }
        }
        // A member without peers (alone in its group) is left out, as peer_pearson's NULL.
        let found = if members.len() < 2 {
            vec![]
        } else if let Some(counts) = counts(delta, points, members.iter().map(|m| m.len()).max().unwrap_or(0)) {
            WholeSeries::new(counts, points, members.len()).peer_correlations()
        } else {
            let delta: Vec<f64> = delta.iter().map(|&d| f64::from(d)).collect();
            let series: ArrayRef = Arc::new(running_sums(&delta, points, members.len()));
            peer_correlations(FUNC, &series)?.into_iter().flatten().collect()
        };
        for (member, (lowest, mean)) in members.iter().zip(found) {
            self.members.push(ids[member[0].member as usize]);
            self.lowest.push(lowest);
            self.mean.append_option(mean);
        }
        self.per_group.push(self.members.len() - before);
        Ok(())
    }

    fn into_array(mut self, members: &Members, member_type: MemberType) -> Result<ArrayRef> {
        let columns: Vec<ArrayRef> = vec![
            members.column(self.members.into_iter(), member_type),
            Arc::new(Float64Array::from(self.lowest)),
            Arc::new(self.mean.finish()),
        ];
        struct_lists(FUNC, similarity_fields(member_type), columns, self.per_group, Some(&self.empty))
    }
}

fn similarity_fields(member_type: MemberType) -> Fields {
    Fields::from(vec![
        Field::new("member", member_type.data_type(), false),
        Field::new("lowest_abs_r", DataType::Float64, false),
        Field::new("mean_abs_r", DataType::Float64, true),
    ])
}

fn state_fields(name: &str, member_type: MemberType) -> Vec<FieldRef> {
    lists_state_fields(
        name,
        &[
            ("members", member_type.data_type()),
            ("starts", DataType::Float64),
            ("ends", DataType::Float64),
            ("keys", DataType::Utf8View),
        ],
    )
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
         by member; a member alone in its group is left out, and a group without an interval gives NULL \
         (so that `coalesce` can choose between two sources, as `FILTER` clauses split them). With a `key` (a task attempt), the rows of \
         one member and key are one interval, from their earliest start to their latest end, as \
         `min(start)`, `max(end)` grouped by member and key would make it. Rows with a NULL member or \
         start are skipped; a NULL end is an interval still running; a NULL key is an interval of its \
         own. Only the intervals are kept between rows and groups, never the series: over months of \
         jobs, that is the difference between megabytes and gigabytes.",
        "concurrency_peer_pearson(member, start, end, points[, key])",
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
    .with_argument("member", "Integer or string column: whose interval it is (a host), given back as it came.")
    .with_argument("start", "Numeric column: when the interval starts.")
    .with_argument("end", "Numeric column: when it ends (NULL: still running).")
    .with_argument("points", "Positive integer literal, at most 10,000,000: the steps of each series.")
    .with_argument("key", "Optional string column: rows of one member with the same key are one interval.")
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
        check_arity(FUNC, t, 4, 5)?;
        let member = member_type(FUNC, 0, &t[0])?;
        require_number(FUNC, 1, "start", &t[1])?;
        require_number(FUNC, 2, "end", &t[2])?;
        require_integer(FUNC, 3, "points", &t[3])?;
        let mut coerced = vec![member, DataType::Float64, DataType::Float64, t[3].clone()];
        if let Some(key) = t.get(4) {
            if !(is_text(key) || *key == DataType::Null) {
                return Err(arg_error(FUNC, 4, "key", format!("must be a string, got {key}")));
            }
            coerced.push(DataType::Utf8View);
        }
        Ok(coerced)
    }

    fn return_type(&self, t: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(struct_list_item(similarity_fields(MemberType::of(&t[0])))))
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        points(&logical_literals(&params.args))?;
        udaf_default_schema_name(self, params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        points(&logical_literals(&params.args))?;
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
        Some(&CONCURRENCY_PEER_PEARSON_DOC)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StringViewArray};
    use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

    use super::{Keys, Peers};
    use crate::members::{MemberType, Members};
    use crate::test_util::{ctx, ctx_skipping_partial_aggregation, query_err, strings};
    use crate::ticks::SampleGroups;

    fn accumulator() -> SampleGroups<Peers> {
        let kind =
            Peers { points: 8, member_type: MemberType::Text, members: Members::new(super::FUNC), keys: Keys::new() };
        SampleGroups::new(kind)
    }

    /// `rows` rows: 5 hosts, a 100-byte key per row (two rows per key), keys of different
    /// prefixes.
    fn rows(rows: usize) -> Vec<ArrayRef> {
        let hosts: StringViewArray = (0..rows).map(|i| Some(format!("host-{}", i % 5))).collect();
        let keys: StringViewArray = (0..rows).map(|i| Some(format!("{:x<100}", i / 2))).collect();
        vec![
            Arc::new(hosts),
            Arc::new((0..rows).map(|i| i as f64).collect::<Float64Array>()),
            Arc::new((0..rows).map(|i| i as f64 + 3.0).collect::<Float64Array>()),
            Arc::new(Int64Array::from(vec![8; rows])),
            Arc::new(keys),
        ]
    }

    /// Keys of every length from 0 to 20 bytes, some of multi-byte characters: each splits into
    /// a prefix number and last bytes that give it back, and two keys split alike exactly when
    /// they are equal.
    #[test]
    fn keys_split_and_come_back() {
        let words = ["", "a", "é", "abc\0", "abc", "attempt_0001_m_", "ü€", "\0"];
        let mut all = Vec::new();
        for first in words {
            for second in words {
                for third in ["", "x", "0000", "00123_0", "ä0000000"] {
                    all.push(format!("{first}{second}{third}"));
                }
            }
        }
        let mut keys = Keys::new();
        let split: Vec<(u32, u64)> = all.iter().map(|key| keys.split(key.as_bytes()).unwrap()).collect();
        let mut back = Vec::new();
        for (key, &(prefix, suffix)) in all.iter().zip(&split) {
            keys.write(prefix, suffix, &mut back);
            assert_eq!(back, key.as_bytes());
        }
        for (a, split_a) in all.iter().zip(&split) {
            for (b, split_b) in all.iter().zip(&split) {
                assert_eq!(a == b, split_a == split_b, "{a:?} {b:?}");
            }
        }
    }

    /// A partial aggregate that emits its first groups early (under a memory limit) gives their
    /// keys' memory back, and the groups it keeps still find theirs.
    #[test]
    fn groups_emitted_early_take_their_keys_with_them() {
        let (early, late) = (rows(2000), rows(40));
        let mut both = accumulator();
        both.update_batch(&early, &[0; 2000], None, 1).unwrap();
        both.update_batch(&late, &[1; 40], None, 2).unwrap();
        let before = both.size();
        both.state(EmitTo::First(1)).unwrap();
        // 980 of the 1000 keys, of 100 bytes and prefixes of their own, went with the first group.
        assert!(before - both.size() > 200_000, "{before} -> {}", both.size());
        let mut alone = accumulator();
        alone.update_batch(&late, &[0; 40], None, 1).unwrap();
        assert_eq!(both.evaluate(EmitTo::All).unwrap().as_ref(), alone.evaluate(EmitTo::All).unwrap().as_ref());
    }

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

    /// String members and keys: the rows of one member and key are the interval `min(start)`,
    /// `max(end)` grouped by member and key makes (several rows share a key here, some with a
    /// NULL end, some with a NULL key, which stay intervals of their own), and members come back
    /// as the strings they were, in order.
    #[tokio::test]
    async fn rows_of_one_key_are_one_interval() {
        let data = "SELECT value % 3 AS g, 'host-' || CAST(value * 7 % 5 AS VARCHAR) AS m, \
                    CASE WHEN value % 11 = 0 THEN NULL ELSE 'attempt-' || CAST(value % 13 AS VARCHAR) END AS k, \
                    CAST(value * 37 % 101 AS DOUBLE) AS s, \
                    CASE WHEN value % 17 = 0 THEN NULL ELSE CAST(value * 37 % 101 + value * 13 % 29 AS DOUBLE) END AS e \
                    FROM generate_series(1, 400)";
        let keyed = format!(
            "SELECT g, r['member'] AS m, r['lowest_abs_r'] AS lowest, r['mean_abs_r'] AS mean FROM \
             (SELECT g, unnest(concurrency_peer_pearson(m, s, e, 24, k)) AS r FROM ({data}) GROUP BY g)"
        );
        let by_sql = format!(
            "SELECT g, r['member'] AS m, r['lowest_abs_r'] AS lowest, r['mean_abs_r'] AS mean FROM \
             (SELECT g, unnest(concurrency_peer_pearson(m, s, e, 24)) AS r FROM \
              (SELECT g, m, min(s) AS s, max(e) AS e FROM ({data}) WHERE k IS NOT NULL GROUP BY g, m, k \
               UNION ALL SELECT g, m, s, e FROM ({data}) WHERE k IS NULL) GROUP BY g)"
        );
        let sql = format!(
            "SELECT k.g, k.m, k.lowest = q.lowest, abs(k.mean - q.mean) < 1e-12, round(k.lowest, 4) \
             FROM ({keyed}) k FULL JOIN ({by_sql}) q ON k.g = q.g AND k.m = q.m ORDER BY k.g, k.m"
        );
        let ordered = format!(
            "SELECT g, l[1]['member'], l[2]['member'], l[5]['member'], cardinality(l) FROM \
             (SELECT g, concurrency_peer_pearson(m, s, e, 24, k) AS l FROM ({data}) GROUP BY g) ORDER BY g"
        );
        for ctx in [ctx(1), ctx(4), ctx_skipping_partial_aggregation(4)] {
            let got = strings(&ctx, &sql).await;
            assert_eq!(got.len(), 15, "{got:?}");
            assert!(got.iter().all(|row| row.contains("|true|true|")), "{got:?}");
            let ends = "|host-0|host-1|host-4|5";
            assert_eq!(strings(&ctx, &ordered).await, [format!("0{ends}"), format!("1{ends}"), format!("2{ends}")]);
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

    /// As a window over a growing frame, each row's value is the aggregate of the rows up to
    /// it: a group evaluated again after more rows (members first seen out of order, a key
    /// seen twice) gives what a group of those rows gives.
    #[tokio::test]
    async fn growing_window_equals_the_aggregate_of_each_frame() {
        let rows = "(1, 3, 0.0, 20.0, 'a'), (2, 1, 20.0, 40.0, 'b'), (3, 2, 0.0, 20.0, 'c'), (4, 1, 0.0, 10.0, 'd'), \
                    (5, 3, 30.0, 35.0, 'a'), (6, 2, 25.0, 40.0, NULL)";
        let sql = format!(
            "WITH v AS (SELECT * FROM (VALUES {rows}) AS v(i, m, s, e, k)), \
             w AS (SELECT i, concurrency_peer_pearson(m, s, e, 8, k) OVER (ORDER BY i ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS l FROM v), \
             a AS (SELECT f.i, concurrency_peer_pearson(r.m, r.s, r.e, 8, r.k) AS l FROM v f JOIN v r ON r.i <= f.i GROUP BY f.i) \
             SELECT w.i, w.l = a.l, cardinality(w.l) FROM w JOIN a ON w.i = a.i ORDER BY w.i"
        );
        let expected = ["1|true|0", "2|true|2", "3|true|3", "4|true|3", "5|true|3", "6|true|3"];
        assert_eq!(strings(&ctx(1), &sql).await, expected);
    }

    /// A group without an interval (all its rows left out by a FILTER) is NULL, so that
    /// `coalesce` can fall back to another source; a group of one member is an empty list.
    #[tokio::test]
    async fn no_interval_is_null_one_member_is_empty() {
        let sql = "SELECT g, concurrency_peer_pearson(m, s, e, 4) FILTER (WHERE m > 1) IS NULL, \
                   cardinality(concurrency_peer_pearson(m, s, e, 4)) \
                   FROM (VALUES (1, 1, 0.0, 1.0), (2, 1, 0.0, 2.0), (2, 2, 1.0, 2.0)) AS v(g, m, s, e) GROUP BY g ORDER BY g";
        assert_eq!(strings(&ctx(1), sql).await, ["1|true|0", "2|false|2"]);
    }

    #[tokio::test]
    async fn planning_errors_name_the_argument() {
        let ctx = ctx(1);
        let err = query_err(&ctx, "SELECT concurrency_peer_pearson(1, 0, 1, 0)").await;
        assert!(
            err.contains("concurrency_peer_pearson: argument 4 (points) must be a positive integer literal"),
            "{err}"
        );
        let err = query_err(&ctx, "SELECT concurrency_peer_pearson(true, 0, 1, 4)").await;
        assert!(err.contains("concurrency_peer_pearson: argument 1 (member) must be an integer or a string"), "{err}");
        let err = query_err(&ctx, "SELECT concurrency_peer_pearson('a', 0, 1, 4, 5)").await;
        assert!(err.contains("concurrency_peer_pearson: argument 5 (key) must be a string"), "{err}");
        let err = query_err(&ctx, "SELECT concurrency_peer_pearson(1, 0, 1)").await;
        assert!(err.contains("concurrency_peer_pearson"), "{err}");
    }
}
