//! Turning alarms into indictments over an ordered window: `consecutive(flag)` (SALSA indicts
//! after 20 consecutive alarms) and `ewma(x, alpha)` (Ganesha's exponentially weighted alarm
//! count). Both read the partition in its ORDER BY order in one pass; the frame is ignored.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    Documentation, PartitionEvaluator, Signature, Volatility, WindowUDFImpl,
    window_doc_sections::DOC_SECTION_ANALYTICAL,
};

use crate::args::{Literals, arg_error, check_arity, exec_error, is_number, physical_literals, require_number, to_f64};

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

static CONSECUTIVE_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_ANALYTICAL,
        "The length of the current run of true flags: 0 on a false or NULL flag, otherwise one more \
         than the previous row's value, in the window's ORDER BY order (SALSA indicts a node after \
         20 consecutive alarms). The frame is ignored.",
        "consecutive(flag) OVER (PARTITION BY host ORDER BY t)",
    )
    .with_sql_example(
        "SELECT host, t, consecutive(alarm) OVER (PARTITION BY host ORDER BY t) >= 20 AS indicted FROM alarms",
    )
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
        match t[0] {
            DataType::Boolean | DataType::Null => Ok(vec![DataType::Boolean]),
            ref other => Err(arg_error(self.name(), 0, "flag", format!("must be a boolean, got {other}"))),
        }
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
        "Exponentially weighted moving average in the window's ORDER BY order: the first non-NULL \
         x, then alpha * x + (1 - alpha) * previous. NULL x keeps the previous value (NULL before \
         the first); NaN and infinities propagate. Booleans count as 0/1, so ewma(alarm, a) is \
         Ganesha's weighted alarm count. The frame is ignored.",
        "ewma(x, alpha) OVER (PARTITION BY host ORDER BY t)",
    )
    .with_sql_example("SELECT host, t, ewma(alarm, 0.1) OVER (PARTITION BY host ORDER BY t) FROM alarms")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{ctx, query_err, strings};
    use datafusion::arrow::array::BooleanArray;
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
}
