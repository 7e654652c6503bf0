//! The members of a peer group (hosts), as the aggregates that compare them keep them: each
//! numbered once, so that a group's samples hold a number, not a copy of the name.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, ListArray, StringViewArray, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{HashMap, Result};

use crate::args::{arg_error, exec_error};

/// The type a member argument is coerced to, or an error naming argument `idx`.
pub(crate) fn member_type(func: &str, idx: usize, t: &DataType) -> Result<DataType> {
    if t.is_integer() || is_text(t) || *t == DataType::Null {
        Ok(MemberType::of(t).data_type())
    } else {
        Err(arg_error(func, idx, "member", format!("must be an integer or a string, got {t}")))
    }
}

pub(crate) fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// What a member is: an integer, or a string (a host name), given back as it came.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum MemberType {
    Integer,
    Text,
}

impl MemberType {
    pub(crate) fn of(t: &DataType) -> Self {
        if t.is_integer() || matches!(t, DataType::Null) { Self::Integer } else { Self::Text }
    }

    pub(crate) fn data_type(self) -> DataType {
        match self {
            Self::Integer => DataType::Int64,
            Self::Text => DataType::Utf8View,
        }
    }
}

/// The members one aggregate has seen, each numbered once by its bytes (an integer's
/// little-endian bytes, a string's UTF-8): a group's intervals then hold a number, not a copy.
#[derive(Debug)]
pub(crate) struct Members {
    /// The function that keeps them, named in errors.
    func: &'static str,
    ids: HashMap<Box<[u8]>, u32>,
    /// Strings of up to 12 bytes by their whole view (length and bytes): a host name is found
    /// without reading its bytes from a buffer or hashing a slice.
    short: HashMap<u128, u32>,
    keys: Vec<Box<[u8]>>,
}

impl Members {
    pub(crate) fn new(func: &'static str) -> Self {
        Self { func, ids: HashMap::default(), short: HashMap::default(), keys: Vec::new() }
    }

    /// The number of `key` (a member's bytes), numbering it if it is new.
    pub(crate) fn id(&mut self, key: &[u8]) -> Result<u32> {
        if let Some(&id) = self.ids.get(key) {
            return Ok(id);
        }
        let id = u32::try_from(self.keys.len())
            .map_err(|_| exec_error(self.func, "more than 2^32 members in one aggregate"))?;
        self.ids.insert(key.into(), id);
        self.keys.push(key.into());
        Ok(id)
    }

    /// Each row's member number (None: NULL), from a column of the member's type.
    pub(crate) fn ids(&mut self, column: &ArrayRef, kind: MemberType) -> Result<Vec<Option<u32>>> {
        let wrong =
            || exec_error(self.func, format!("member must be an integer or a string, got {}", column.data_type()));
        match kind {
            MemberType::Integer => {
                let values = column.as_primitive_opt::<Int64Type>().ok_or_else(wrong)?;
                values.iter().map(|v| v.map(|v| self.id(&v.to_le_bytes())).transpose()).collect()
            }
            MemberType::Text => {
                let values = column.as_string_view_opt().ok_or_else(wrong)?;
                (0..values.len())
                    .map(|row| values.is_valid(row).then(|| self.text_id(values, row)).transpose())
                    .collect()
            }
        }
    }

    fn text_id(&mut self, values: &StringViewArray, row: usize) -> Result<u32> {
        let view = values.views()[row];
        let len = view as u32;
        if len > 12 {
            return self.id(values.value(row).as_bytes());
        }
        // The length and the bytes; what pads them is not part of the key.
        let key = view & (u128::MAX >> (96 - 8 * len));
        if let Some(&id) = self.short.get(&key) {
            return Ok(id);
        }
        let id = self.id(values.value(row).as_bytes())?;
        self.short.insert(key, id);
        Ok(id)
    }

    /// Calls `f(row, value, member)` for each member that is not NULL in each row of a partial
    /// state's lists of members (`value` its place in the lists' values). Only the values of the
    /// state's rows are read: a state is often a slice of a larger one.
    pub(crate) fn each_in_lists(
        &mut self,
        lists: &ListArray,
        kind: MemberType,
        mut f: impl FnMut(usize, usize, u32) -> Result<()>,
    ) -> Result<()> {
        let offsets = lists.value_offsets();
        let first = offsets[0] as usize;
        let used = lists.values().slice(first, offsets[offsets.len() - 1] as usize - first);
        let ids = self.ids(&used, kind)?;
        for (row, range) in offsets.windows(2).enumerate() {
            for value in range[0] as usize..range[1] as usize {
                if let Some(member) = ids[value - first] {
                    f(row, value, member)?;
                }
            }
        }
        Ok(())
    }

    /// The members of `ids` as a column of the member's type.
    pub(crate) fn column(&self, ids: impl Iterator<Item = u32>, kind: MemberType) -> ArrayRef {
        let key = |id: u32| &*self.keys[id as usize];
        match kind {
            MemberType::Integer => {
                Arc::new(ids.map(|id| i64::from_le_bytes(key(id).try_into().expect("8 bytes"))).collect::<Int64Array>())
            }
            MemberType::Text => {
                // Each member's string once, then its view for each id (a view of a long string
                // points into the one buffer).
                let names: StringViewArray = self.keys.iter().map(|k| Some(String::from_utf8_lossy(k))).collect();
                take(&names, &ids.collect::<UInt32Array>(), None).expect("member ids are in range")
            }
        }
    }

    /// The bytes numbered `id`.
    pub(crate) fn bytes(&self, id: u32) -> &[u8] {
        &self.keys[id as usize]
    }

    /// The member ids in order of their members (integers by value, strings by bytes).
    pub(crate) fn in_order(&self, kind: MemberType) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.keys.len() as u32).collect();
        match kind {
            MemberType::Integer => order.sort_unstable_by_key(|&id| {
                i64::from_le_bytes(self.keys[id as usize][..].try_into().expect("8 bytes"))
            }),
            MemberType::Text => order.sort_unstable_by(|&a, &b| self.keys[a as usize].cmp(&self.keys[b as usize])),
        }
        order
    }

    /// Each member's place when the members are in order: [`Members::in_order`] inverted.
    pub(crate) fn ranks(&self, kind: MemberType) -> Vec<u32> {
        inverse(&self.in_order(kind))
    }

    pub(crate) fn size(&self) -> usize {
        let per_short = size_of::<u128>() + size_of::<u32>() + 1;
        self.keys.iter().map(|k| 2 * (k.len() + size_of::<Box<[u8]>>()) + size_of::<u32>()).sum::<usize>()
            + self.short.capacity() * per_short
    }
}

/// The permutation that undoes `permutation` (of `0..len`).
pub(crate) fn inverse(permutation: &[u32]) -> Vec<u32> {
    let mut inverse = vec![0; permutation.len()];
    for (place, &value) in permutation.iter().enumerate() {
        inverse[value as usize] = place as u32;
    }
    inverse
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, StringViewArray};

    use super::{MemberType, Members};

    /// Short strings (found by their view) and long ones (by their bytes) are numbered once
    /// each, in the order first seen, and come back as they were.
    #[test]
    fn members_are_numbered_once_and_given_back() {
        let names = ["r01n01", "", "twelve bytes", "thirteen byte", "r01n01", "r01n0", "thirteen byte", "twelve bytes"];
        let column: ArrayRef = Arc::new(names.iter().map(|n| Some(*n)).chain([None]).collect::<StringViewArray>());
        let mut members = Members::new("test");
        let ids = members.ids(&column, MemberType::Text).unwrap();
        assert_eq!(ids, [Some(0), Some(1), Some(2), Some(3), Some(0), Some(4), Some(3), Some(2), None]);
        let back = members.column(ids.iter().flatten().copied(), MemberType::Text);
        let expected: ArrayRef = Arc::new(names.iter().map(|n| Some(*n)).collect::<StringViewArray>());
        assert_eq!(back.as_ref(), expected.as_ref());
    }
}
