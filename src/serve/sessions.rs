//! The sessions a server hands its clients: each over the warehouse as of its last finished
//! ingest run, read-only and bounded in memory.

use std::sync::Arc;

use anyhow::Result;
use async_trait::async_trait;
use datafusion::execution::context::SessionState;
use datafusion::prelude::SessionContext;
use datafusion_flight_sql_server::session::SessionStateProvider;
use tokio::sync::Mutex;
use tonic::{Request, Status};

use crate::catalog::{self, Snapshot};
use crate::warehouse::Warehouse;

pub struct Sessions {
    warehouse: Warehouse,
    memory_per_query: usize,
    /// The snapshot of the warehouse and the newest commit of each table it was taken at.
    current: Mutex<Option<(Versions, Snapshot)>>,
}

type Versions = Vec<(String, Option<u64>)>;

impl Sessions {
    pub fn new(warehouse: Warehouse, memory_per_query: usize) -> Sessions {
        Sessions { warehouse, memory_per_query, current: Mutex::new(None) }
    }

    /// The warehouse as of now: the snapshot taken before, unless a table has had a commit since
    /// (an ingest, a diagnosis recorded, a compaction). A snapshot already handed out stays as
    /// it was, so a long query reads the files of the versions it started with.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let mut current = self.current.lock().await;
        let versions = self.warehouse.versions().await?;
        if let Some((seen, snapshot)) = current.as_ref()
            && *seen == versions
        {
            return Ok(snapshot.clone());
        }
        let snapshot = Snapshot::take(&self.warehouse).await?;
        *current = Some((versions, snapshot.clone()));
        Ok(snapshot)
    }

    pub async fn session(&self) -> Result<SessionContext> {
        catalog::session_bounded(&self.snapshot().await?, self.memory_per_query)
    }
}

/// [`Sessions`] as `datafusion-flight-sql-server` asks for them, once a call.
pub struct Provider(pub Arc<Sessions>);

#[async_trait]
impl SessionStateProvider for Provider {
    async fn new_context(&self, _request: &Request<()>) -> Result<SessionState, Status> {
        let session = self.0.session().await.map_err(|e| Status::unavailable(crate::error_message(&e)))?;
        Ok(session.state())
    }
}
