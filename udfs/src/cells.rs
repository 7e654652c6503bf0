//! The state of groups accumulators in flat buffers, so that GROUP BY over a million groups
//! allocates once, not once per group: groups that each hold the same number of `f64` cells (a
//! histogram's bins, a series' steps), `width` cells a group; and groups that keep their rows
//! until the end, each row tagged with its group ([`ByGroup`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, ListArray, StructArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::Result;
use datafusion::logical_expr::EmitTo;
use datafusion::logical_expr::utils::format_state_name;

use crate::args::{exec_error, list_item, list_row, to_f64_list};

/// Calls `f(row, cells)` for every non-NULL list in a state column, checking its width.
pub(crate) fn for_each_cells(
    func: &str,
    states: &ArrayRef,
    width: usize,
    mut f: impl FnMut(usize, &[f64]),
) -> Result<()> {
    let lists = to_f64_list(states)?;
    let mut scratch = Vec::new();
    for row in 0..lists.len() {
        if let Some(cells) = list_row(&lists, row, &mut scratch) {
            if cells.len() != width {
                return Err(exec_error(func, format!("partial state has {} values, expected {width}", cells.len())));
            }
            f(row, cells);
        }
    }
    Ok(())
}

/// Adds partial states (`states`) to their groups' cells in `cells` (`width` a group).
pub(crate) fn merge_into(
    func: &str,
    cells: &mut [f64],
    states: &ArrayRef,
    group_indices: &[usize],
    width: usize,
) -> Result<()> {
    for_each_cells(func, states, width, |row, h| {
        let start = group_indices[row] * width;
        cells[start..start + width].iter_mut().zip(h).for_each(|(c, x)| *c += x);
    })
}

/// Splits off the cells of the groups `emit_to` names; `cells` keeps the rest.
pub(crate) fn take_groups(cells: &mut Vec<f64>, emit_to: EmitTo, width: usize) -> (Vec<f64>, usize) {
    match emit_to {
        EmitTo::All => {
            let taken = std::mem::take(cells);
            let groups = taken.len() / width;
            (taken, groups)
        }
        EmitTo::First(n) => {
            let rest = cells.split_off(n * width);
            (std::mem::replace(cells, rest), n)
        }
    }
}

/// How many of `groups` groups `emit_to` emits.
pub(crate) fn emit_to_groups(emit_to: EmitTo, groups: usize) -> usize {
    match emit_to {
        EmitTo::All => groups,
        EmitTo::First(n) => n,
    }
}

/// Whether a row passes the aggregate's FILTER clause.
pub(crate) fn passes(filter: Option<&BooleanArray>, row: usize) -> bool {
    filter.is_none_or(|f| f.is_valid(row) && f.value(row))
}

/// The first `N` columns of a partial state whose rows each hold a group's values as `N` lists
/// side by side (values and their flags; members and their histograms; members, times and
/// bins), checked to be that.
pub(crate) fn lists_side_by_side<'a, const N: usize>(func: &str, states: &'a [ArrayRef]) -> Result<[&'a ListArray; N]> {
    let lists: Option<Vec<&ListArray>> = states.iter().take(N).map(|state| state.as_list_opt::<i32>()).collect();
    let Some(Ok(lists)) = lists.map(<[&ListArray; N]>::try_from) else {
        return Err(exec_error(func, format!("partial state is not {N} lists")));
    };
    if lists.windows(2).any(|pair| pair[0].value_offsets() != pair[1].value_offsets()) {
        return Err(exec_error(func, "partial state has mismatched lengths"));
    }
    Ok(lists)
}

/// Each value such a state's rows hold (an index into its lists' values), with the group its
/// row goes to; only those of its rows, for a state is often a slice of a larger one.
pub(crate) fn values_with_groups<'a>(
    offsets: &'a [i32],
    group_indices: &'a [usize],
) -> impl Iterator<Item = (usize, usize)> + 'a {
    group_indices
        .iter()
        .enumerate()
        .flat_map(|(row, &g)| (offsets[row] as usize..offsets[row + 1] as usize).map(move |value| (value, g)))
}

/// The rows of the groups being emitted, by group: group `g`'s are `order[starts[g]..starts[g + 1]]`,
/// in arrival order.
pub(crate) struct ByGroup {
    pub starts: Vec<usize>,
    pub order: Vec<usize>,
}

impl ByGroup {
    /// The rows of groups `0..n`, given each row's group (a counting sort).
    pub fn of(group_of: &[usize], n: usize) -> Self {
        let mut starts = vec![0; n + 1];
        for &g in group_of.iter().filter(|&&g| g < n) {
            starts[g + 1] += 1;
        }
        for g in 0..n {
            starts[g + 1] += starts[g];
        }
        let mut next = starts.clone();
        let mut order = vec![0; starts[n]];
        for (row, &g) in group_of.iter().enumerate().filter(|&(_, &g)| g < n) {
            order[next[g]] = row;
            next[g] += 1;
        }
        Self { starts, order }
    }

    /// Forgets the rows of groups `0..n` (emitted): the rows of the groups after stay, in
    /// order, their groups renumbered from 0.
    pub fn forget_first<T: Copy>(group_of: &mut Vec<usize>, rows: &mut Vec<T>, n: usize) {
        let kept: Vec<usize> = (0..group_of.len()).filter(|&row| group_of[row] >= n).collect();
        *rows = kept.iter().map(|&row| rows[row]).collect();
        *group_of = kept.iter().map(|&row| group_of[row] - n).collect();
    }

    /// The groups' sizes, as list offsets.
    pub fn lengths(&self) -> OffsetBuffer<i32> {
        OffsetBuffer::from_lengths(self.starts.windows(2).map(|w| w[1] - w[0]))
    }

    /// Each group's rows.
    pub fn groups(&self) -> impl Iterator<Item = &[usize]> {
        self.starts.windows(2).map(|w| &self.order[w[0]..w[1]])
    }
}

/// A partial state's columns, one list per group, side by side: `values[i]` holds every group's
/// values one group after another, `lengths` how many each group has.
pub(crate) fn lists_of(lengths: impl Iterator<Item = usize>, values: Vec<ArrayRef>) -> Vec<ArrayRef> {
    let offsets = OffsetBuffer::from_lengths(lengths);
    values
        .into_iter()
        .map(|values| -> ArrayRef {
            Arc::new(ListArray::new(list_item(values.data_type().clone()), offsets.clone(), values, None))
        })
        .collect()
}

/// One result row per group: the list of its rows, structs of `fields` made of `columns`, each
/// group `per_group` rows long (NULL, not an empty list, where `null_groups` is true). `func`
/// names the aggregate in errors.
pub(crate) fn struct_lists(
    func: &str,
    fields: Fields,
    columns: Vec<ArrayRef>,
    per_group: Vec<usize>,
    null_groups: Option<&[bool]>,
) -> Result<ArrayRef> {
    let rows: usize = per_group.iter().sum();
    if rows > i32::MAX as usize {
        let message = format!("{rows} rows are more than one list array holds; aggregate fewer groups at once");
        return Err(exec_error(func, message));
    }
    let item = struct_list_item(fields.clone());
    let entries = StructArray::try_new(fields, columns, None)?;
    let nulls = null_groups.map(|null| NullBuffer::from_iter(null.iter().map(|&null| !null)));
    Ok(Arc::new(ListArray::try_new(item, OffsetBuffer::from_lengths(per_group), Arc::new(entries), nulls)?))
}

/// The item of the lists [`struct_lists`] makes of `fields`: an aggregate's return type is a
/// list of it.
pub(crate) fn struct_list_item(fields: Fields) -> FieldRef {
    Arc::new(Field::new_list_field(DataType::Struct(fields), true))
}

/// The state fields of an aggregate whose state is lists side by side ([`lists_of`]), each
/// named and of its item type.
pub(crate) fn lists_state_fields(name: &str, lists: &[(&str, DataType)]) -> Vec<FieldRef> {
    lists
        .iter()
        .map(|(field, t)| {
            Arc::new(Field::new(format_state_name(name, field), DataType::List(list_item(t.clone())), true))
        })
        .collect()
}
