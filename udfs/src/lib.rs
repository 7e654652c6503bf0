//! Peer-comparison functions for DataFusion: the SQL side of SALSA, Ganesha and Kahuna.
//!
//! ```no_run
//! # async fn example() -> datafusion::error::Result<()> {
//! let mut ctx = datafusion::prelude::SessionContext::new();
//! kahuna_udfs::register_all(&mut ctx)?;
//! ctx.sql("SELECT jsd_sqrt([1, 0], [0, 1])").await?.show().await?;
//! # Ok(())
//! # }
//! ```
//!
//! One module per family; this file lists every function once.

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

mod aggregate_once;
mod alarm;
mod args;
mod cells;
mod concurrency_peers;
mod distance;
mod duration_peers;
mod gmm;
mod histogram;
mod members;
mod peer;
mod series;
mod tick_peers;
mod ticks;

use std::sync::{Arc, OnceLock};

use datafusion::common::Result;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF, WindowUDF};

pub use aggregate_once::AggregateOnce;

/// The numeric kernels behind the SQL functions, for Rust callers and the benchmarks.
pub mod kernels {
    pub use crate::distance::{jsd_sqrt_normalised, jsd_sqrt_raw, normalise};
    pub use crate::gmm::{Model, fit};
    pub use crate::peer::count_far_peers;
}

/// One accessor per function, as DataFusion's own function crates have: the function made
/// once and shared.
macro_rules! accessor {
    ($accessor:ident, $kind:ident, $new:ident, $make:expr, $name:literal) => {
        #[doc = concat!("`", $name, "`, made once and shared.")]
        pub fn $accessor() -> Arc<$kind> {
            static FUNCTION: OnceLock<Arc<$kind>> = OnceLock::new();
            Arc::clone(FUNCTION.get_or_init(|| Arc::new($kind::$new($make))))
        }
    };
}

accessor!(jsd_sqrt_udf, ScalarUDF, new_from_impl, distance::JsdSqrt::default(), "jsd_sqrt");
accessor!(kde_smooth_udf, ScalarUDF, new_from_impl, distance::KdeSmooth::default(), "kde_smooth");
accessor!(pearson_udf, ScalarUDF, new_from_impl, series::Pearson::default(), "pearson");
accessor!(gmm_classify_udf, ScalarUDF, new_from_impl, gmm::GmmClassify::default(), "gmm_classify");
accessor!(
    state_histogram_udaf,
    AggregateUDF,
    new_from_impl,
    histogram::BinnedHistogram::state_histogram(),
    "state_histogram"
);
accessor!(
    label_histogram_udaf,
    AggregateUDF,
    new_from_impl,
    histogram::BinnedHistogram::label_histogram(),
    "label_histogram"
);
accessor!(
    decayed_histogram_udaf,
    AggregateUDF,
    new_from_impl,
    histogram::DecayedHistogram::default(),
    "decayed_histogram"
);
accessor!(tick_histograms_udaf, AggregateUDF, new_from_impl, ticks::TickHistograms::default(), "tick_histograms");
accessor!(
    tick_peer_scores_udaf,
    AggregateUDF,
    new_from_impl,
    tick_peers::TickPeerScores::default(),
    "tick_peer_scores"
);
accessor!(
    concurrency_series_udaf,
    AggregateUDF,
    new_from_impl,
    series::ConcurrencySeries::default(),
    "concurrency_series"
);
accessor!(
    concurrency_peer_pearson_udaf,
    AggregateUDF,
    new_from_impl,
    concurrency_peers::ConcurrencyPeerPearson::default(),
    "concurrency_peer_pearson"
);
accessor!(
    duration_peer_scores_udaf,
    AggregateUDF,
    new_from_impl,
    duration_peers::DurationPeerScores::default(),
    "duration_peer_scores"
);
accessor!(gmm_fit_udaf, AggregateUDF, new_from_impl, gmm::GmmFit::default(), "gmm_fit");
accessor!(peer_scores_udaf, AggregateUDF, new_from_impl, peer::PeerScores::default(), "peer_scores");
accessor!(longest_run_udaf, AggregateUDF, new_from_impl, alarm::LongestRun::default(), "longest_run");
accessor!(indict_udwf, WindowUDF, new_from_impl, peer::PeerComparison::indict(), "indict");
accessor!(peer_score_udwf, WindowUDF, new_from_impl, peer::PeerComparison::peer_score(), "peer_score");
accessor!(peer_pearson_udwf, WindowUDF, new_from_impl, series::PeerPearson::default(), "peer_pearson");
accessor!(consecutive_udwf, WindowUDF, new_from_impl, alarm::Consecutive::default(), "consecutive");
accessor!(ewma_udwf, WindowUDF, new_from_impl, alarm::Ewma::default(), "ewma");

/// The functions as expressions, for the DataFrame API: `jsd_sqrt(col("p"), col("q"))`. A
/// function with optional or repeated arguments takes them as a list, in SQL's order. Window
/// functions give the window expression; `.partition_by(…)` and `.order_by(…)` of
/// [`ExprFunctionExt`](datafusion::logical_expr::ExprFunctionExt) complete it.
pub mod expr_fn {
    use datafusion::logical_expr::Expr;

    macro_rules! expr_fn {
        ($name:ident, $accessor:ident, [$($arg:ident),*]) => {
            #[doc = concat!("`", stringify!($name), "(", stringify!($($arg),*), ")`.")]
            pub fn $name($($arg: Expr),*) -> Expr {
                super::$accessor().call(vec![$($arg),*])
            }
        };
        ($name:ident, $accessor:ident, args) => {
            #[doc = concat!("`", stringify!($name), "(…)`, its arguments in SQL's order.")]
            pub fn $name(args: Vec<Expr>) -> Expr {
                super::$accessor().call(args)
            }
        };
    }

    expr_fn!(jsd_sqrt, jsd_sqrt_udf, [p, q]);
    expr_fn!(kde_smooth, kde_smooth_udf, [hist, bandwidth_bins]);
    expr_fn!(pearson, pearson_udf, [a, b]);
    expr_fn!(gmm_classify, gmm_classify_udf, args);
    expr_fn!(state_histogram, state_histogram_udaf, args);
    expr_fn!(label_histogram, label_histogram_udaf, args);
    expr_fn!(decayed_histogram, decayed_histogram_udaf, args);
    expr_fn!(tick_histograms, tick_histograms_udaf, args);
    expr_fn!(tick_peer_scores, tick_peer_scores_udaf, args);
    expr_fn!(duration_peer_scores, duration_peer_scores_udaf, args);
    expr_fn!(concurrency_series, concurrency_series_udaf, [start, end, from, to, step]);
    expr_fn!(concurrency_peer_pearson, concurrency_peer_pearson_udaf, [member, start, end, points]);
    expr_fn!(gmm_fit, gmm_fit_udaf, args);
    expr_fn!(peer_scores, peer_scores_udaf, [member, hist, threshold]);
    expr_fn!(longest_run, longest_run_udaf, [flag, ord]);
    expr_fn!(indict, indict_udwf, [hist, threshold]);
    expr_fn!(peer_score, peer_score_udwf, [hist, threshold]);
    expr_fn!(peer_pearson, peer_pearson_udwf, [series]);
    expr_fn!(consecutive, consecutive_udwf, [flag]);
    expr_fn!(ewma, ewma_udwf, [x, alpha]);
}

/// The scalar functions: `jsd_sqrt`, `kde_smooth`, `pearson`, `gmm_classify`.
pub fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    vec![jsd_sqrt_udf(), kde_smooth_udf(), pearson_udf(), gmm_classify_udf()]
}

/// The aggregate functions: `state_histogram`, `label_histogram`, `decayed_histogram`,
/// `tick_histograms`, `concurrency_series`, `concurrency_peer_pearson`, `gmm_fit`, `peer_scores`,
/// `tick_peer_scores`, `duration_peer_scores`, `longest_run`, in the order of the README's
/// reference, which follows this list: `tick_peer_scores` and `duration_peer_scores` after the
/// functions they combine.
pub fn aggregate_functions() -> Vec<Arc<AggregateUDF>> {
    vec![
        state_histogram_udaf(),
        label_histogram_udaf(),
        decayed_histogram_udaf(),
        tick_histograms_udaf(),
        concurrency_series_udaf(),
        concurrency_peer_pearson_udaf(),
        gmm_fit_udaf(),
        peer_scores_udaf(),
        tick_peer_scores_udaf(),
        duration_peer_scores_udaf(),
        longest_run_udaf(),
    ]
}

/// The window functions: `indict`, `peer_score`, `peer_pearson`, `consecutive`, `ewma`.
pub fn window_functions() -> Vec<Arc<WindowUDF>> {
    vec![indict_udwf(), peer_score_udwf(), peer_pearson_udwf(), consecutive_udwf(), ewma_udwf()]
}

/// Registers every function of this crate with `registry`: a `SessionContext`, a
/// `SessionState`, or any other DataFusion host's registry (a Ballista executor's).
pub fn register_all(registry: &mut dyn FunctionRegistry) -> Result<()> {
    for function in scalar_functions() {
        registry.register_udf(function)?;
    }
    for function in aggregate_functions() {
        registry.register_udaf(function)?;
    }
    for function in window_functions() {
        registry.register_udwf(function)?;
    }
    Ok(())
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
        let mut ctx = SessionContext::new_with_config(config);
        super::register_all(&mut ctx).expect("register");
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
        let mut ctx = SessionContext::new_with_config(config);
        super::register_all(&mut ctx).expect("register");
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
    use datafusion::prelude::SessionContext;

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
        assert_eq!(count, 20);
    }

    #[tokio::test]
    async fn registered_functions_are_callable() {
        let ctx = test_util::ctx(1);
        let got = test_util::f64_column(&ctx, "SELECT jsd_sqrt([1, 0], [0, 1])").await;
        assert_eq!(got, [Some(1.0)]);
    }

    /// The DataFrame API gives what SQL gives: a scalar, an aggregate with an optional
    /// argument, and a window function over a partition.
    #[tokio::test]
    async fn expression_functions_build_the_same_queries_as_sql() {
        use datafusion::functions_nested::expr_fn::make_array;
        use datafusion::logical_expr::{ExprFunctionExt as _, col, lit};
        let ctx = test_util::ctx(1);
        let frame = ctx
            .sql("SELECT * FROM (VALUES ('a', 5.0, 1.0), ('a', 50.0, 0.0), ('b', 500.0, 1.0)) AS t(host, ms, flag)")
            .await
            .unwrap();
        let distance = frame
            .clone()
            .select(vec![
                expr_fn::jsd_sqrt(make_array(vec![lit(1.0), lit(0.0)]), make_array(vec![lit(0.0), lit(1.0)]))
                    .alias("d"),
            ])
            .unwrap()
            .limit(0, Some(1))
            .unwrap();
        let hist = frame
            .clone()
            .aggregate(
                vec![],
                vec![expr_fn::state_histogram(vec![col("ms"), lit(1.0), lit(1000.0), lit(3), lit("log")]).alias("h")],
            )
            .unwrap();
        let runs = frame
            .select(vec![
                col("host"),
                expr_fn::consecutive(col("flag").eq(lit(1.0)))
                    .partition_by(vec![col("host")])
                    .order_by(vec![col("ms").sort(true, true)])
                    .build()
                    .unwrap()
                    .alias("run"),
            ])
            .unwrap()
            .sort(vec![col("host").sort(true, true), col("run").sort(true, true)])
            .unwrap();
        let text = |batches: Vec<datafusion::arrow::array::RecordBatch>| {
            datafusion::arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string()
        };
        assert!(text(distance.collect().await.unwrap()).contains("| 1.0 |"));
        assert!(text(hist.collect().await.unwrap()).contains("[1.0, 1.0, 1.0]"));
        let runs = text(runs.collect().await.unwrap());
        assert_eq!(
            runs.lines()
                .filter(|l| l.starts_with("| a"))
                .map(|l| l.split('|').nth(2).unwrap().trim())
                .collect::<Vec<_>>(),
            ["0", "1"],
            "{runs}"
        );
    }

    /// Any registry takes the functions: here a `SessionState`'s.
    #[tokio::test]
    async fn register_all_fills_any_function_registry() {
        let mut state = datafusion::execution::SessionStateBuilder::new().with_default_features().build();
        register_all(&mut state).unwrap();
        let ctx = SessionContext::new_with_state(state);
        let got = test_util::f64_column(&ctx, "SELECT jsd_sqrt([1, 0], [1, 0])").await;
        assert_eq!(got, [Some(0.0)]);
        let got = test_util::f64_column(&ctx, "SELECT round(pearson([1, 2, 3], [3, 2, 1]), 12)").await;
        assert_eq!(got, [Some(-1.0)]);
    }
}
