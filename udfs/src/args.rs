//! Argument checks shared by every function: type checks at planning time, extraction of
//! literal-only parameters (from logical `Expr`s while planning, from physical expressions when
//! an accumulator or evaluator is built), and conversions of input arrays to `f64`.
//!
//! Every error names the function and the argument, 1-based, e.g.
//! `state_histogram: argument 4 (bins) must be a positive integer literal, got 0`.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, GenericListArray, ListArray, OffsetSizeTrait, RecordBatch,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, TimeUnit};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{Cast, ColumnarValue, Expr, TryCast};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{CastExpr, Literal};
use datafusion::physical_expr::utils::collect_columns;

/// A planning error that names the function and the (0-based here, 1-based in the message)
/// argument.
pub(crate) fn arg_error(func: &str, idx: usize, name: &str, msg: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Plan(format!("{func}: argument {} ({name}) {msg}", idx + 1))
}

/// A planning error about the number of arguments.
pub(crate) fn arity_error(func: &str, expected: &str, got: usize) -> DataFusionError {
    DataFusionError::Plan(format!("{func}: expects {expected}, got {got} argument(s)"))
}

/// An execution error raised while reading data, naming the function.
pub(crate) fn exec_error(func: &str, msg: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("{func}: {msg}"))
}

pub(crate) fn check_arity(func: &str, types: &[DataType], min: usize, max: usize) -> Result<()> {
    if types.len() < min || types.len() > max {
        let expected = if min == max { format!("{min} arguments") } else { format!("{min} to {max} arguments") };
        return Err(arity_error(func, &expected, types.len()));
    }
    Ok(())
}

/// Numbers (integers, floats, decimals) and NULL, which coerces to anything.
pub(crate) fn is_number(t: &DataType) -> bool {
    t.is_numeric() || matches!(t, DataType::Null)
}

pub(crate) fn require_number(func: &str, idx: usize, name: &str, t: &DataType) -> Result<()> {
    if is_number(t) { Ok(()) } else { Err(arg_error(func, idx, name, format!("must be a number, got {t}"))) }
}

pub(crate) fn require_integer(func: &str, idx: usize, name: &str, t: &DataType) -> Result<()> {
    if t.is_integer() || matches!(t, DataType::Null) {
        Ok(())
    } else {
        Err(arg_error(func, idx, name, format!("must be an integer, got {t}")))
    }
}

/// Histograms and series: a list (also large or fixed-size) of numbers, coerced to `List<Float64>`.
pub(crate) fn require_number_list(func: &str, idx: usize, name: &str, t: &DataType) -> Result<DataType> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) if is_number(f.data_type()) => {
            Ok(f64_list_type())
        }
        DataType::Null => Ok(f64_list_type()),
        _ => Err(arg_error(func, idx, name, format!("must be a list of numbers, got {t}"))),
    }
}

/// A window function's list argument: checked as [`require_number_list`] does, but left in its
/// own type. DataFusion evaluates a window function's arguments on each partition's slice of
/// the batch, and casting a sliced list converts the child values of the whole column, once per
/// partition: over many partitions, far more work than the function itself. The evaluator
/// converts its own slice ([`to_f64_list`]).
pub(crate) fn require_number_list_uncast(func: &str, idx: usize, name: &str, t: &DataType) -> Result<DataType> {
    let coerced = require_number_list(func, idx, name, t)?;
    Ok(if t == &DataType::Null { coerced } else { t.clone() })
}

/// A list's item field of type `t`, nullable (DataFusion's convention).
pub(crate) fn list_item(t: DataType) -> FieldRef {
    Arc::new(Field::new_list_field(t, true))
}

/// The type of every histogram and series: `List<Float64>` with nullable items (DataFusion's
/// convention for list literals, so `[1.0, 2.0]` in SQL has this exact type).
pub(crate) fn f64_list_type() -> DataType {
    DataType::List(list_item(DataType::Float64))
}

/// Builds a `List<Float64>` array of `rows` lists of `width` values each from a flat buffer.
pub(crate) fn fixed_width_list(values: Vec<f64>, width: usize, rows: usize) -> ListArray {
    debug_assert_eq!(values.len(), width * rows);
    ListArray::new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        OffsetBuffer::from_lengths(std::iter::repeat_n(width, rows)),
        Arc::new(Float64Array::from(values)),
        None,
    )
}

/// One list as a scalar, for `Accumulator::evaluate`/`state`.
pub(crate) fn list_scalar(values: Vec<f64>) -> ScalarValue {
    let width = values.len();
    ScalarValue::List(Arc::new(fixed_width_list(values, width, 1)))
}

/// A scalar function's result: a scalar when every argument was one (constant folding calls
/// functions that way, on one row), the array otherwise.
pub(crate) fn scalar_or_array(args: &[ColumnarValue], out: ArrayRef) -> Result<ColumnarValue> {
    if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
    } else {
        Ok(ColumnarValue::Array(out))
    }
}

/// Casts any numeric array to `Float64`.
pub(crate) fn to_f64(array: &ArrayRef) -> Result<Float64Array> {
    Ok(cast(array, &DataType::Float64)?.as_primitive().clone())
}

/// Casts a list-of-numbers array (coerced at planning, except a window function's, and states
/// and literals can arrive in other list flavours) to `List<Float64>`.
pub(crate) fn to_f64_list(array: &ArrayRef) -> Result<ListArray> {
    if array.data_type() == &f64_list_type() {
        return Ok(array.as_list::<i32>().clone());
    }
    // A slice (a window partition's) is rebased on its own values first: a cast would convert
    // the values of the whole array it was sliced from.
    let own: ArrayRef = match array.data_type() {
        DataType::List(_) => Arc::new(on_own_values(array.as_list::<i32>())?),
        DataType::LargeList(_) => Arc::new(on_own_values(array.as_list::<i64>())?),
        // A fixed-size list's slice slices its values.
        _ => array.clone(),
    };
    Ok(cast(&own, &f64_list_type())?.as_list::<i32>().clone())
}

/// `list` over just the values its rows use, with no copy: the values sliced and the offsets
/// moved to start at 0.
pub(crate) fn on_own_values<O: OffsetSizeTrait>(list: &GenericListArray<O>) -> Result<GenericListArray<O>> {
    let offsets = list.offsets();
    let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
    if first.as_usize() == 0 && last.as_usize() == list.values().len() {
        return Ok(list.clone());
    }
    let (DataType::List(field) | DataType::LargeList(field)) = list.data_type() else { return Ok(list.clone()) };
    let values = list.values().slice(first.as_usize(), (last - first).as_usize());
    let offsets = OffsetBuffer::new(offsets.iter().map(|&o| o - first).collect());
    Ok(GenericListArray::try_new(field.clone(), offsets, values, list.nulls().cloned())?)
}

/// The values of row `row` of a `List<Float64>`, with NULL items read as 0 (the histogram
/// convention: an absent count is no count). Returns `None` for a NULL list.
pub(crate) fn list_row<'a>(list: &'a ListArray, row: usize, scratch: &'a mut Vec<f64>) -> Option<&'a [f64]> {
    if list.is_null(row) {
        return None;
    }
    let offsets = list.value_offsets();
    let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
    let values = list.values().as_primitive::<datafusion::arrow::datatypes::Float64Type>();
    let slice = &values.values()[start..end];
    match values.nulls() {
        Some(nulls) if nulls.slice(start, end - start).null_count() > 0 => {
            scratch.clear();
            scratch.extend((start..end).map(|i| if nulls.is_valid(i) { values.value(i) } else { 0.0 }));
            Some(scratch.as_slice())
        }
        _ => Some(slice),
    }
}

/// Timestamps (any unit) and numbers are both accepted where the functions take times: this
/// returns how many of the column's units make a second, or `None` for plain numbers (whose
/// unit is the caller's own).
pub(crate) fn units_per_second(t: &DataType) -> Option<f64> {
    match t {
        DataType::Timestamp(unit, _) => Some(match unit {
            TimeUnit::Second => 1.0,
            TimeUnit::Millisecond => 1e3,
            TimeUnit::Microsecond => 1e6,
            TimeUnit::Nanosecond => 1e9,
        }),
        _ => None,
    }
}

pub(crate) fn require_time(func: &str, idx: usize, name: &str, t: &DataType) -> Result<()> {
    if matches!(t, DataType::Timestamp(_, _)) || is_number(t) {
        Ok(())
    } else {
        Err(arg_error(func, idx, name, format!("must be a timestamp or a number, got {t}")))
    }
}

/// A time column as `f64` seconds (timestamps) or as its own numbers.
pub(crate) fn times_to_f64(array: &ArrayRef) -> Result<Float64Array> {
    match units_per_second(array.data_type()) {
        Some(per_second) => {
            let ints = cast(array, &DataType::Int64)?;
            let ints = ints.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            Ok(ints.unary(|v| v as f64 / per_second))
        }
        None => to_f64(array),
    }
}

/// The value of a logical argument when it is a literal (possibly negated or cast, which is how
/// `-1.5` and coerced literals reach us), `None` otherwise.
pub(crate) fn logical_literal(expr: &Expr) -> Option<ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Some(value.clone()),
        Expr::Negative(inner) => logical_literal(inner)?.arithmetic_negate().ok(),
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
            logical_literal(expr)?.cast_to(field.data_type()).ok()
        }
        _ => None,
    }
}

pub(crate) fn logical_literals(args: &[Expr]) -> Vec<Option<ScalarValue>> {
    args.iter().map(logical_literal).collect()
}

/// The value of a physical argument when it is a literal, `None` otherwise.
pub(crate) fn physical_literal(expr: &Arc<dyn PhysicalExpr>) -> Option<ScalarValue> {
    if let Some(lit) = expr.downcast_ref::<Literal>() {
        return Some(lit.value().clone());
    }
    if let Some(cast_expr) = expr.downcast_ref::<CastExpr>() {
        return physical_literal(cast_expr.expr())?.cast_to(cast_expr.cast_type()).ok();
    }
    // An expression of ours that reads a column is no constant; finding that out by evaluating
    // it would cost an error for every accumulator made.
    if !collect_columns(expr).is_empty() {
        return None;
    }
    // A host that loads these functions through DataFusion's FFI (PyPI's `datafusion`) hands
    // over its own expressions, not our `Literal`: one that gives a scalar from a batch
    // without columns reads none, so it is a constant.
    let no_columns = RecordBatch::new_empty(Arc::new(Schema::empty()));
    match expr.evaluate(&no_columns) {
        Ok(ColumnarValue::Scalar(value)) => Some(value),
        _ => None,
    }
}

pub(crate) fn physical_literals(args: &[Arc<dyn PhysicalExpr>]) -> Vec<Option<ScalarValue>> {
    args.iter().map(physical_literal).collect()
}

/// Reads literal-only parameters of one function call; `lits[i]` is `None` when argument `i`
/// is not a literal.
pub(crate) struct Literals<'a> {
    pub func: &'a str,
    pub lits: &'a [Option<ScalarValue>],
}

impl Literals<'_> {
    fn get(&self, idx: usize, name: &str, what: &str) -> Result<&ScalarValue> {
        match self.lits.get(idx) {
            Some(Some(v)) if !v.is_null() => Ok(v),
            Some(Some(_)) => Err(arg_error(self.func, idx, name, format!("must be {what}, got NULL"))),
            _ => Err(arg_error(self.func, idx, name, format!("must be {what}, got a non-literal expression"))),
        }
    }

    /// A positive integer literal no larger than `max`.
    pub fn positive_int(&self, idx: usize, name: &str, max: usize) -> Result<usize> {
        let what = format!("a positive integer literal (at most {max})");
        let v = self.get(idx, name, &what)?;
        if !v.data_type().is_integer() {
            return Err(arg_error(self.func, idx, name, format!("must be {what}, got {v}")));
        }
        match v.cast_to(&DataType::Int64)? {
            ScalarValue::Int64(Some(n)) if n >= 1 && n as u64 <= max as u64 => Ok(n as usize),
            _ => Err(arg_error(self.func, idx, name, format!("must be {what}, got {v}"))),
        }
    }

    /// Any integer literal (seeds).
    pub fn integer(&self, idx: usize, name: &str) -> Result<i64> {
        let v = self.get(idx, name, "an integer literal")?;
        match (v.data_type().is_integer(), v.cast_to(&DataType::Int64)?) {
            (true, ScalarValue::Int64(Some(n))) => Ok(n),
            _ => Err(arg_error(self.func, idx, name, format!("must be an integer literal, got {v}"))),
        }
    }

    /// A finite numeric literal accepted by `ok`, described by `what` in errors.
    pub fn number(&self, idx: usize, name: &str, what: &str, ok: impl Fn(f64) -> bool) -> Result<f64> {
        let v = self.get(idx, name, what)?;
        let x = if v.data_type().is_numeric() {
            match v.cast_to(&DataType::Float64)? {
                ScalarValue::Float64(Some(x)) => Some(x),
                _ => None,
            }
        } else {
            None
        };
        match x {
            Some(x) if x.is_finite() && ok(x) => Ok(x),
            _ => Err(arg_error(self.func, idx, name, format!("must be {what}, got {v}"))),
        }
    }

    /// A string literal.
    pub fn string(&self, idx: usize, name: &str, what: &str) -> Result<String> {
        let v = self.get(idx, name, what)?;
        match v.try_as_str() {
            Some(Some(s)) => Ok(s.to_string()),
            _ => Err(arg_error(self.func, idx, name, format!("must be {what}, got {v}"))),
        }
    }

    /// A time literal: a timestamp (as seconds) or a number.
    pub fn time(&self, idx: usize, name: &str) -> Result<f64> {
        let what = "a timestamp or number literal";
        let v = self.get(idx, name, what)?;
        let x = match units_per_second(&v.data_type()) {
            Some(per_second) => match v.cast_to(&DataType::Int64)? {
                ScalarValue::Int64(Some(n)) => Some(n as f64 / per_second),
                _ => None,
            },
            None if v.data_type().is_numeric() => match v.cast_to(&DataType::Float64)? {
                ScalarValue::Float64(Some(x)) => Some(x),
                _ => None,
            },
            None => None,
        };
        match x {
            Some(x) if x.is_finite() => Ok(x),
            _ => Err(arg_error(self.func, idx, name, format!("must be {what}, got {v}"))),
        }
    }

    /// A positive duration literal: an interval without months (as seconds) or a number.
    pub fn duration(&self, idx: usize, name: &str) -> Result<f64> {
        let what = "a positive number or interval literal (without months)";
        let v = self.get(idx, name, what)?;
        let x = match v {
            ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
                Some(i.days as f64 * 86_400.0 + i.nanoseconds as f64 / 1e9)
            }
            ScalarValue::IntervalDayTime(Some(i)) => Some(i.days as f64 * 86_400.0 + i.milliseconds as f64 / 1e3),
            v if v.data_type().is_numeric() => match v.cast_to(&DataType::Float64)? {
                ScalarValue::Float64(Some(x)) => Some(x),
                _ => None,
            },
            _ => None,
        };
        match x {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(arg_error(self.func, idx, name, format!("must be {what}, got {v}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::lit;

    /// A slice of another list type (a window partition's rows) is converted on its own values
    /// only: rows 1–2 of [[1, 2], [3], [4, 5, 6], [7]] as `List<Float32>` and `LargeList<Int64>`.
    #[test]
    fn a_sliced_list_converts_its_own_values() {
        use datafusion::arrow::array::{Float32Array, Int64Array, LargeListArray};
        let offsets = [0, 2, 3, 6, 7];
        let narrow = ListArray::new(
            Arc::new(Field::new_list_field(DataType::Float32, true)),
            OffsetBuffer::new(offsets.to_vec().into()),
            Arc::new(Float32Array::from(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])),
            None,
        );
        let large = LargeListArray::new(
            Arc::new(Field::new_list_field(DataType::Int64, true)),
            OffsetBuffer::new(offsets.map(|o| o as i64).to_vec().into()),
            Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5, 6, 7])),
            None,
        );
        for list in [Arc::new(narrow) as ArrayRef, Arc::new(large)] {
            let converted = to_f64_list(&list.slice(1, 2)).unwrap();
            assert_eq!(converted.values().len(), 4, "{:?}", list.data_type());
            let rows: Vec<Vec<f64>> =
                (0..2).map(|row| list_row(&converted, row, &mut Vec::new()).unwrap().to_vec()).collect();
            assert_eq!(rows, [vec![3.0], vec![4.0, 5.0, 6.0]]);
        }
    }

    #[test]
    fn literal_checks_name_function_and_argument() {
        let lits = logical_literals(&[lit(0i64), lit(2.5), lit("x")]);
        let l = Literals { func: "f", lits: &lits };
        let err = l.positive_int(0, "bins", 10).unwrap_err().to_string();
        assert!(err.contains("f: argument 1 (bins) must be a positive integer literal"), "{err}");
        assert!(l.positive_int(1, "bins", 10).is_err());
        assert_eq!(l.number(1, "lambda", "a number", |x| x > 0.0).unwrap(), 2.5);
        assert_eq!(l.string(2, "scale", "a string").unwrap(), "x");
        let err = l.integer(5, "seed").unwrap_err().to_string();
        assert!(err.contains("argument 6 (seed)") && err.contains("non-literal"), "{err}");
    }

    #[test]
    fn negative_literals_are_literals() {
        let lits = logical_literals(&[-lit(1.5)]);
        let l = Literals { func: "f", lits: &lits };
        assert_eq!(l.number(0, "lo", "a number", |_| true).unwrap(), -1.5);
    }
}
