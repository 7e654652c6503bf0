//! The warehouse as a DataFusion session: every Delta table registered under its own name, so
//! that `WHERE date = …` and `WHERE cluster = …` prune partitions, with the peer-comparison
//! functions of `kahuna-udfs` loaded. Tables are read as of the last finished ingest run.

use anyhow::{Context, Result};
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::warehouse::Warehouse;

pub async fn session(warehouse: &Warehouse) -> Result<SessionContext> {
    let config = SessionConfig::new().with_information_schema(true);
    let ctx = SessionContext::new_with_config(config);
    kahuna_udfs::register_all(&ctx);
    let completed = warehouse.completed_ingests().await?;
    for name in warehouse.table_names() {
        let Some(table) = warehouse.open_visible(&name, &completed).await? else { continue };
        table.update_datafusion_session(&ctx.state())?;
        let provider = table.table_provider().await.with_context(|| format!("cannot read table {name}"))?;
        ctx.register_table(name.as_str(), provider)?;
    }
    Ok(ctx)
}
