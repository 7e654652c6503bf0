//! Peer-comparison functions for DataFusion: the SQL side of SALSA, Ganesha and Kahuna.
//!
//! ```no_run
//! # async fn example() -> datafusion::error::Result<()> {
//! let ctx = datafusion::prelude::SessionContext::new();
//! kahuna_udfs::register_all(&ctx);
//! ctx.sql("SELECT jsd_sqrt([1, 0], [0, 1])").await?.show().await?;
//! # Ok(())
//! # }
//! ```
//!
//! One module per family; this file lists every function once.

mod alarm;
mod args;
mod cells;
mod distance;
mod gmm;
mod histogram;
mod peer;
mod series;
mod tick_peers;
mod ticks;

use datafusion::logical_expr::{AggregateUDF, ScalarUDF, WindowUDF};
use datafusion::prelude::SessionContext;

/// The numeric kernels behind the SQL functions, for Rust callers and the benchmarks.
pub mod kernels {
    pub use crate::distance::{jsd_sqrt_normalised, jsd_sqrt_raw, normalise};
    pub use crate::gmm::{Model, fit};
    pub use crate::peer::count_far_peers;
}

/// The scalar functions: `jsd_sqrt`, `kde_smooth`, `pearson`, `gmm_classify`.
pub fn scalar_functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(distance::JsdSqrt::default()),
        ScalarUDF::new_from_impl(distance::KdeSmooth::default()),
        ScalarUDF::new_from_impl(series::Pearson::default()),
        ScalarUDF::new_from_impl(gmm::GmmClassify::default()),
    ]
}

/// The aggregate functions: `state_histogram`, `label_histogram`, `decayed_histogram`,
/// `tick_histograms`, `tick_peer_scores`, `concurrency_series`, `gmm_fit`, `peer_scores`,
/// `longest_run`.
pub fn aggregate_functions() -> Vec<AggregateUDF> {
    vec![
        AggregateUDF::new_from_impl(histogram::BinnedHistogram::state_histogram()),
        AggregateUDF::new_from_impl(histogram::BinnedHistogram::label_histogram()),
        AggregateUDF::new_from_impl(histogram::DecayedHistogram::default()),
        AggregateUDF::new_from_impl(ticks::TickHistograms::default()),
        AggregateUDF::new_from_impl(tick_peers::TickPeerScores::default()),
        AggregateUDF::new_from_impl(series::ConcurrencySeries::default()),
        AggregateUDF::new_from_impl(gmm::GmmFit::default()),
        AggregateUDF::new_from_impl(peer::PeerScores::default()),
        AggregateUDF::new_from_impl(alarm::LongestRun::default()),
    ]
}

/// The window functions: `indict`, `peer_score`, `peer_pearson`, `consecutive`, `ewma`.
pub fn window_functions() -> Vec<WindowUDF> {
    vec![
        WindowUDF::new_from_impl(peer::PeerComparison::indict()),
        WindowUDF::new_from_impl(peer::PeerComparison::peer_score()),
        WindowUDF::new_from_impl(series::PeerPearson::default()),
        WindowUDF::new_from_impl(alarm::Consecutive::default()),
        WindowUDF::new_from_impl(alarm::Ewma::default()),
    ]
}

/// Registers every function of this crate with `ctx`.
pub fn register_all(ctx: &SessionContext) {
    scalar_functions().into_iter().for_each(|f| ctx.register_udf(f));
    aggregate_functions().into_iter().for_each(|f| ctx.register_udaf(f));
    window_functions().into_iter().for_each(|f| ctx.register_udwf(f));
}

#[cfg(test)]
pub(crate) mod test_util {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::Float64Type;
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// Uniform numbers in [0, 1) from a xorshift generator: test data that is the same on
    /// every run.
    pub fn uniform(mut seed: u64) -> impl FnMut() -> f64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A context with our functions, `partitions` target partitions and small batches, so that
    /// multi-partition plans really split the rows.
    pub fn ctx(partitions: usize) -> SessionContext {
        let config = SessionConfig::new().with_target_partitions(partitions).with_batch_size(64);
        let ctx = SessionContext::new_with_config(config);
        super::register_all(&ctx);
        ctx
    }

    /// As [`ctx`], but DataFusion skips partial aggregation from the first row, so aggregates
    /// go through `GroupsAccumulator::convert_to_state`.
    pub fn ctx_skipping_partial_aggregation(partitions: usize) -> SessionContext {
        let config = SessionConfig::new()
            .with_target_partitions(partitions)
            .with_batch_size(64)
            .set_usize("datafusion.execution.skip_partial_aggregation_probe_rows_threshold", 0)
            .set_str("datafusion.execution.skip_partial_aggregation_probe_ratio_threshold", "0");
        let ctx = SessionContext::new_with_config(config);
        super::register_all(&ctx);
        ctx
    }

    async fn batches(ctx: &SessionContext, sql: &str) -> Vec<datafusion::arrow::array::RecordBatch> {
        ctx.sql(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Each row as its values joined by `|`, NULL as `NULL`.
    pub async fn strings(ctx: &SessionContext, sql: &str) -> Vec<String> {
        let options = FormatOptions::default().with_null("NULL");
        let mut out = Vec::new();
        for batch in batches(ctx, sql).await {
            let formatters: Vec<_> =
                batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap()).collect();
            for row in 0..batch.num_rows() {
                out.push(formatters.iter().map(|f| f.value(row).to_string()).collect::<Vec<_>>().join("|"));
            }
        }
        out
    }

    /// The first column, a Float64.
    pub async fn f64_column(ctx: &SessionContext, sql: &str) -> Vec<Option<f64>> {
        batches(ctx, sql)
            .await
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Float64Type>().iter().collect::<Vec<_>>())
            .collect()
    }

    /// The first column, a `List<Float64>`.
    pub async fn f64_lists(ctx: &SessionContext, sql: &str) -> Vec<Option<Vec<f64>>> {
        let mut out = Vec::new();
        for batch in batches(ctx, sql).await {
            let lists = batch.column(0).as_list::<i32>();
            for row in 0..lists.len() {
                out.push(lists.is_valid(row).then(|| {
                    lists.value(row).as_primitive::<Float64Type>().iter().map(|v| v.unwrap_or(f64::NAN)).collect()
                }));
            }
        }
        out
    }

    /// The error of planning or running `sql`.
    pub async fn query_err(ctx: &SessionContext, sql: &str) -> String {
        let result = match ctx.sql(sql).await {
            Ok(df) => df.collect().await.map(|_| ()),
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => panic!("{sql} succeeded"),
            Err(e) => e.to_string(),
        }
    }

    pub fn assert_lists_close(a: &[Option<Vec<f64>>], b: &[Option<Vec<f64>>], tolerance: f64, context: &str) {
        assert_eq!(a.len(), b.len(), "{context}");
        for (x, y) in a.iter().zip(b) {
            match (x, y) {
                (Some(x), Some(y)) => {
                    assert_eq!(x.len(), y.len(), "{context}");
                    for (u, v) in x.iter().zip(y) {
                        assert!((u - v).abs() <= tolerance * (1.0 + u.abs()), "{context}: {x:?} vs {y:?}");
                    }
                }
                (None, None) => {}
                _ => panic!("{context}: {x:?} vs {y:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_documented() {
        let mut names = Vec::new();
        for f in scalar_functions() {
            assert!(f.documentation().is_some(), "{}", f.name());
            names.push(f.name().to_string());
        }
        for f in aggregate_functions() {
            assert!(f.documentation().is_some(), "{}", f.name());
            names.push(f.name().to_string());
        }
        for f in window_functions() {
            assert!(f.documentation().is_some(), "{}", f.name());
            names.push(f.name().to_string());
        }
        let count = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count, "duplicate function names: {names:?}");
        assert_eq!(count, 18);
    }

    #[tokio::test]
    async fn registered_functions_are_callable() {
        let ctx = test_util::ctx(1);
        let got = test_util::f64_column(&ctx, "SELECT jsd_sqrt([1, 0], [0, 1])").await;
        assert_eq!(got, [Some(1.0)]);
    }
}
