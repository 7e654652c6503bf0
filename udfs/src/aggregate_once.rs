//! [`AggregateOnce`]: a physical optimizer rule for the aggregates of this crate that keep
//! their rows until they are evaluated (`tick_histograms`, `tick_peer_scores`,
//! `concurrency_peer_pearson`, `duration_peer_scores`).
//!
//! DataFusion plans a grouped aggregate in two phases around the shuffle: each input partition
//! aggregates its rows into partial states, the states are repartitioned by the group keys, and
//! a final phase merges them. A partial state of these aggregates is the group's rows, so the
//! first phase shrinks nothing: it builds lists of every row, ships them, and the final phase
//! reads them again. Over the M45 history that was a fifth of `peer_correlation`'s CPU time.
//! The rule moves the shuffle below the aggregate: rows are repartitioned by the group keys
//! and aggregated once (`SinglePartitioned`), as DataFusion itself plans an aggregate whose
//! input is already partitioned by its keys.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_expr::physical_exprs_equal;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};

use crate::concurrency_peers::ConcurrencyPeerPearson;
use crate::duration_peers::DurationPeerScores;
use crate::tick_peers::TickPeerScores;
use crate::ticks::TickHistograms;

/// Rewrites `FinalPartitioned ← hash repartition ← Partial` into `SinglePartitioned ← hash
/// repartition` of the partial phase's input, where one of the aggregates keeps its rows.
/// Append it to a session's rules:
/// `SessionStateBuilder::new().with_default_features().with_physical_optimizer_rule(Arc::new(AggregateOnce))`.
#[derive(Debug, Default)]
pub struct AggregateOnce;

/// Whether the partial state of `function` is its input rows.
fn keeps_its_rows(function: &AggregateUDF) -> bool {
    let inner = function.inner();
    inner.is::<ConcurrencyPeerPearson>()
        || inner.is::<DurationPeerScores>()
        || inner.is::<TickPeerScores>()
        || inner.is::<TickHistograms>()
}

/// The plan aggregated once, or None where `plan` is not a final phase over a shuffle of a
/// partial phase of such an aggregate.
fn aggregated_once(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(last) = plan.downcast_ref::<AggregateExec>() else { return Ok(None) };
    let Some(shuffle) = last.input().downcast_ref::<RepartitionExec>() else { return Ok(None) };
    let Some(first) = shuffle.input().downcast_ref::<AggregateExec>() else { return Ok(None) };
    let Partitioning::Hash(keys, partitions) = shuffle.partitioning() else { return Ok(None) };
    let groups = first.group_expr();
    let same_groups = physical_exprs_equal(&groups.output_exprs(), keys)
        && physical_exprs_equal(&groups.output_exprs(), &last.group_expr().input_exprs());
    if *last.mode() != AggregateMode::FinalPartitioned
        || *first.mode() != AggregateMode::Partial
        || shuffle.preserve_order()
        || !groups.is_single()
        || groups.is_empty()
        || !same_groups
        || first.limit_options().is_some()
        // An ordering the partial phase needs would not survive the shuffle moved below it.
        || first.required_input_ordering().iter().any(Option::is_some)
        || !first.aggr_expr().iter().any(|aggregate| keeps_its_rows(aggregate.fun()))
    {
        return Ok(None);
    }
    let rows = Arc::new(RepartitionExec::try_new(
        Arc::clone(first.input()),
        Partitioning::Hash(groups.input_exprs(), *partitions),
    )?);
    let once = AggregateExec::try_new(
        AggregateMode::SinglePartitioned,
        groups.clone(),
        first.aggr_expr().to_vec(),
        first.filter_expr().to_vec(),
        rows,
        first.input_schema(),
    )?;
    Ok(Some(Arc::new(once.with_limit_options(last.limit_options()))))
}

impl PhysicalOptimizerRule for AggregateOnce {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|plan| {
            Ok(match aggregated_once(&plan)? {
                Some(once) => Transformed::yes(once),
                None => Transformed::no(plan),
            })
        })
        .data()
    }

    fn name(&self) -> &str {
        "AggregateOnce"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::AggregateOnce;
    use crate::test_util::{ctx, strings};

    fn ctx_aggregating_once(partitions: usize) -> SessionContext {
        let config = SessionConfig::new().with_target_partitions(partitions).with_batch_size(64);
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_physical_optimizer_rule(Arc::new(AggregateOnce))
            .build();
        let mut ctx = SessionContext::new_with_state(state);
        crate::register_all(&mut ctx).expect("register");
        ctx
    }

    const ROWS: &str = "SELECT value % 7 AS g, value % 5 AS m, CAST(value AS DOUBLE) AS s, \
                        CAST(value + value % 11 AS DOUBLE) AS e FROM generate_series(1, 2000)";

    /// A grouped aggregate with one of our functions (beside a FILTER and a `max`) is planned
    /// as one aggregate over rows repartitioned by its keys, and answers as the two phases do.
    #[tokio::test]
    async fn kept_rows_are_aggregated_once_with_the_same_answer() {
        let sql = format!(
            "SELECT g, max(s), concurrency_peer_pearson(m, s, e, 8) FILTER (WHERE m <> 3), \
             duration_peer_scores(m, e - s, 0.1, 10, 8, 'count', 1, 2, 0.5) FROM ({ROWS}) GROUP BY g ORDER BY g"
        );
        let once = ctx_aggregating_once(4);
        let plan = strings(&once, &format!("EXPLAIN {sql}")).await.join("\n");
        assert!(plan.contains("AggregateExec: mode=SinglePartitioned, gby=[g@0 as g]"), "{plan}");
        assert!(plan.contains("RepartitionExec: partitioning=Hash([g@0], 4)"), "{plan}");
        assert!(!plan.contains("mode=Partial"), "{plan}");
        let answer = strings(&once, &sql).await;
        assert_eq!(answer.len(), 7);
        assert_eq!(answer, strings(&ctx(4), &sql).await);
    }

    /// Aggregates whose partial states do shrink keep their two phases, and so does an
    /// aggregate that needs its input ordered (the shuffle would undo the order).
    #[tokio::test]
    async fn other_aggregates_keep_two_phases() {
        let once = ctx_aggregating_once(4);
        for aggregates in [
            "max(s), concurrency_series(s, e, 0, 2000, 100)",
            "concurrency_peer_pearson(m, s, e, 8), array_agg(m ORDER BY s)",
        ] {
            let sql = format!("SELECT g, {aggregates} FROM ({ROWS}) GROUP BY g ORDER BY g");
            let plan = strings(&once, &format!("EXPLAIN {sql}")).await.join("\n");
            assert!(plan.contains("mode=Partial") && plan.contains("mode=FinalPartitioned"), "{plan}");
            assert_eq!(strings(&once, &sql).await, strings(&ctx(4), &sql).await);
        }
    }
}
