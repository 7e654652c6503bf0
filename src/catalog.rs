//! The warehouse as a DataFusion session: every Delta table under its own name, so that
//! `WHERE date = …` and `WHERE cluster = …` prune partitions, with the peer-comparison
//! functions of `kahuna-udfs` loaded. Tables are read as of the last finished ingest run.
//!
//! A table is opened when a statement first names it, not when the session starts: a query
//! reads two or three of the warehouse's dozen tables, and opening one replays its Delta log.

use std::collections::{HashMap, HashSet, VecDeque};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use datafusion::catalog::{MemorySchemaProvider, SchemaProvider, TableProvider};
use datafusion::common::DataFusionError;
use datafusion::common::config::Dialect;
use datafusion::datasource::{ViewTable, source_as_provider};
use datafusion::execution::memory_pool::{FairSpillPool, MemoryLimit, TrackConsumersPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use deltalake::delta_datafusion::{DeltaScanConfig, DeltaScanNext};
use deltalake::kernel::LogicalFileView;
use futures::TryStreamExt as _;

use crate::cluster::files::{DataFile, FilesTable, SnapshotFiles};
use crate::ingest::addresses;
use crate::warehouse::Warehouse;
use crate::warehouse::stores::ObjectStores;
use crate::warehouse::tables::{Table, VIEWS};

pub async fn session(warehouse: &Warehouse) -> Result<SessionContext> {
    session_over(&Snapshot::take(warehouse).await?)
}

/// The statements of `sql` in the grammar of every session: scripts, saved queries and the
/// shell are parsed here, before the session plans them (`DFParser::parse_sql` would take
/// the generic grammar whatever the session says).
pub fn parse(sql: &str) -> Result<VecDeque<Statement>> {
    Ok(DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {})?)
}

/// `statement` planned in `ctx`, refused when it would write a warehouse table: those are
/// written by `kahuna ingest` (every line accounted for) and by the diagnoses' recording, never
/// by a statement of a session, which would write around both. In a [`ReadOnly`] session only
/// queries and the session's own tables and views are planned.
pub async fn plan(ctx: &SessionContext, statement: Statement) -> Result<LogicalPlan> {
    let state = ctx.state();
    let plan = state.statement_to_plan(statement).await?;
    if state.config().get_extension::<ReadOnly>().is_some() {
        ReadOnly::check(&plan)?;
    }
    if let LogicalPlan::Dml(dml) = &plan
        && source_as_provider(&dml.target).is_ok_and(|provider| provider.is::<DeltaScanNext>())
    {
        bail!(
            "table {} is the warehouse's and takes no {}: copy it into a table of the session (CREATE TABLE mine AS SELECT …)",
            dml.table_name,
            dml.op
        );
    }
    Ok(plan)
}

/// Runs a planned statement. On a cluster, `CREATE TABLE … AS` is written by the executors, as
/// Parquet files in the session's folder, rather than collected here.
pub async fn execute(ctx: &SessionContext, plan: LogicalPlan) -> Result<DataFrame> {
    use datafusion::logical_expr::DdlStatement;
    let folder = ctx.state().config().get_extension::<crate::cluster::SessionTables>();
    match (plan, folder) {
        (LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)), Some(folder)) => {
            crate::cluster::create_table(ctx, create, &folder.0).await
        }
        (plan, _) => {
            let created = match &plan {
                LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => Some(create.name.clone()),
                _ => None,
            };
            let frame = ctx.execute_logical_plan(plan).await?;
            if let Some(name) = created {
                split_batches(ctx, name).await?;
            }
            Ok(frame)
        }
    }
}

/// A session's `CREATE TABLE … AS` keeps the batches its plan made, and a window function's are
/// whole partitions (DataFusion's `WindowAggExec` concatenates its input): a sort that later
/// reads one under a memory limit must reserve all of it at once, and fails rather than spill.
/// Batches longer than the session's batch size are copied into batches of that size, each
/// holding only its own values (a slice would still hold, and count, the whole).
async fn split_batches(ctx: &SessionContext, name: datafusion::common::TableReference) -> Result<()> {
    use datafusion::arrow::array::{Array as _, AsArray as _, UInt32Array};
    use datafusion::arrow::compute::take_record_batch;
    use datafusion::arrow::datatypes::DataType;
    let provider = ctx.table_provider(name).await?;
    let Some(table) = provider.downcast_ref::<datafusion::catalog::MemTable>() else { return Ok(()) };
    let size = ctx.state().config().batch_size();
    for partition in &table.batches {
        let mut batches = partition.write().await;
        if batches.iter().all(|batch| batch.num_rows() <= size) {
            continue;
        }
        let mut split = Vec::with_capacity(batches.len());
        for batch in batches.drain(..) {
            if batch.num_rows() <= size {
                split.push(batch);
                continue;
            }
            for start in (0..batch.num_rows()).step_by(size) {
                let end = (start + size).min(batch.num_rows());
                let piece = take_record_batch(&batch, &UInt32Array::from_iter_values(start as u32..end as u32))?;
                // `take` copies a view array's views, not the buffers they point into.
                let columns = piece
                    .columns()
                    .iter()
                    .map(|column| match column.data_type() {
                        DataType::Utf8View => Arc::new(column.as_string_view().gc()) as _,
                        DataType::BinaryView => Arc::new(column.as_binary_view().gc()) as _,
                        _ => column.clone(),
                    })
                    .collect();
                split.push(datafusion::arrow::record_batch::RecordBatch::try_new(piece.schema(), columns)?);
            }
        }
        *batches = split;
    }
    Ok(())
}

/// The mark of a session that may change nothing outside itself (those of `kahuna serve`): it
/// reads, and makes and drops tables and views of its own, kept in memory and gone with it.
pub struct ReadOnly;

impl ReadOnly {
    /// Every node of `plan` is checked: `EXPLAIN ANALYZE` runs the statement it explains.
    pub fn check(plan: &LogicalPlan) -> Result<()> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        use datafusion::logical_expr::DdlStatement;
        let mut refused = None;
        plan.apply_with_subqueries(|node| {
            refused = match node {
                LogicalPlan::Ddl(
                    DdlStatement::CreateMemoryTable(_)
                    | DdlStatement::CreateView(_)
                    | DdlStatement::DropTable(_)
                    | DdlStatement::DropView(_),
                ) => None,
                LogicalPlan::Ddl(ddl) => Some(ddl.name().to_string()),
                LogicalPlan::Dml(dml) => Some(format!("{} into {}", dml.op, dml.table_name)),
                LogicalPlan::Copy(_) => Some("COPY".to_string()),
                LogicalPlan::Statement(statement) => Some(statement.name().to_string()),
                _ => None,
            };
            Ok(if refused.is_some() { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
        })?;
        match refused {
            Some(refused) => bail!(
                "{refused} is refused: the warehouse is served read-only (a statement may read, and make tables and views of its own session)"
            ),
            None => Ok(()),
        }
    }
}

const SORT_IN_PLACE_BYTES: usize = 128 << 20;

/// The fewest partitions of each stage of a statement run on a Ballista cluster.
const CLUSTER_PARTITIONS: usize = 16;

/// A fresh session (its own views and `CREATE TABLE`s) over tables already opened by others.
pub fn session_over(snapshot: &Snapshot) -> Result<SessionContext> {
    session_in(snapshot, SessionConfig::new(), snapshot.tables.runtime.clone())
}

/// [`session_over`] whose operators share at most `memory` bytes, spilling to disk where they
/// can (`kahuna diagnose --memory-limit`).
pub fn session_limited(snapshot: &Snapshot, memory: usize) -> Result<SessionContext> {
    session_in(snapshot, SessionConfig::new(), limited_runtime(snapshot, memory)?)
}

/// [`session_limited`] for a server's client: [`ReadOnly`] too.
pub fn session_bounded(snapshot: &Snapshot, memory: usize) -> Result<SessionContext> {
    session_in(snapshot, SessionConfig::new().with_extension(Arc::new(ReadOnly)), limited_runtime(snapshot, memory)?)
}

fn limited_runtime(snapshot: &Snapshot, memory: usize) -> Result<Arc<RuntimeEnv>> {
    let pool = TrackConsumersPool::new(FairSpillPool::new(memory), NonZeroUsize::new(3).expect("3 > 0"));
    Ok(RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(pool))
        .with_object_store_registry(snapshot.tables.runtime.object_store_registry.clone())
        .build_arc()?)
}

/// A session over `snapshot` (taken with [`Snapshot::take_as_files`]) whose statements are
/// planned here and run on the Ballista cluster of the scheduler at `scheduler` (`host:port`).
pub async fn session_on_cluster(snapshot: &Snapshot, scheduler: &str) -> Result<SessionContext> {
    use ballista::prelude::SessionContextExt as _;
    use ballista_core::config::{BALLISTA_ADAPTIVE_PLANNER_ENABLED, BALLISTA_CLIENT_GRPC_MAX_MESSAGE_SIZE};
    use ballista_core::extension::SessionConfigExt as _;
    if !snapshot.tables.as_files {
        bail!("a snapshot for a cluster names its tables' files: take it with Snapshot::take_as_files");
    }
    // Ballista connects at the first statement, and waits 20 s for an answer: ask now.
    let unanswered = |reason: String| anyhow::anyhow!("no Ballista scheduler answers at {scheduler}: {reason}");
    tokio::time::timeout(std::time::Duration::from_secs(5), tokio::net::TcpStream::connect(scheduler))
        .await
        .map_err(|_| unanswered("no answer in 5 s".into()))?
        .map_err(|e| unanswered(e.to_string()))?;
    let runtime = snapshot.tables.runtime.clone();
    let tables = crate::cluster::SessionTables(Arc::new(crate::cluster::SessionFolder::new(snapshot.warehouse())));
    // Ballista 55 holds each shuffle partition another executor wrote whole in the reading
    // executor's memory: at one partition per client core, a whole-history stage's partitions
    // are gigabytes each (docs/cluster.md). DATAFUSION_EXECUTION_TARGET_PARTITIONS, where
    // set, decides.
    let mut config = SessionConfig::from_env()?;
    if std::env::var_os("DATAFUSION_EXECUTION_TARGET_PARTITIONS").is_none() {
        let partitions = CLUSTER_PARTITIONS.max(config.target_partitions());
        config = config.with_target_partitions(partitions);
    }
    let config = configured(config, &runtime)
        .with_extension(Arc::new(tables.clone()))
        .upgrade_for_ballista()
        .set_usize(BALLISTA_CLIENT_GRPC_MAX_MESSAGE_SIZE, crate::cluster::MESSAGE_BYTES as usize)
        // Ballista 55's adaptive planner answers a LEFT JOIN whose right side comes out empty
        // with no rows, or replans it without end; the static planner answers it right.
        .set_bool(BALLISTA_ADAPTIVE_PLANNER_ENABLED, false)
        .with_ballista_logical_extension_codec(Arc::new(crate::cluster::codec::KahunaCodec::default()));
    let state = session_state(config, runtime);
    // Ballista replaces the state's functions with DataFusion's: Kahuna's are added after.
    let ctx = SessionContext::remote_with_state(&format!("df://{scheduler}"), state).await?;
    with_warehouse(ctx, snapshot, Some(tables))
}

fn session_in(snapshot: &Snapshot, config: SessionConfig, runtime: Arc<RuntimeEnv>) -> Result<SessionContext> {
    let config = configured(config, &runtime);
    // The snapshot's object stores: its Delta tables registered theirs there.
    with_warehouse(SessionContext::new_with_state(session_state(config, runtime)), snapshot, None)
}

/// DataFusion's planning, with Kahuna's aggregates that keep their rows aggregated once.
fn session_state(config: SessionConfig, runtime: Arc<RuntimeEnv>) -> SessionState {
    SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(kahuna_udfs::AggregateOnce))
        .build()
}

/// Every session's settings: information schema, PostgreSQL's grammar, sorts sized to the memory.
fn configured(config: SessionConfig, runtime: &RuntimeEnv) -> SessionConfig {
    let mut config = config.with_information_schema(true);
    // PostgreSQL's grammar, not the generic one: that one takes a trailing comma in a select
    // list, so `SELECT host, cluster FROM …` would end at the comma (CLUSTER opens Hive's
    // `CLUSTER BY`), and every warehouse table has a `cluster` column. [`parse`] uses it too.
    config.options_mut().sql_parser.dialect = Dialect::PostgreSQL;
    // A sort's input up to this size (per partition of the plan) is concatenated and sorted in
    // one piece rather than batch by batch and then merged: one sort of the whole partition
    // avoids merging many small sorted runs (SALSA's peer statement sorts its 12-bin lists
    // this way). It holds one more copy of up to 128 MB per partition being sorted: a session
    // with a memory limit keeps DataFusion's 1 MB, with which sorts spill.
    match runtime.memory_pool.memory_limit() {
        MemoryLimit::Finite(limit) => {
            // Each sort sets this much aside to merge what it spilled: 10 MB by default, more
            // than a small limit shares out to the sorts of a plan.
            let execution = &mut config.options_mut().execution;
            execution.sort_spill_reservation_bytes = execution.sort_spill_reservation_bytes.min(limit / 16);
        }
        MemoryLimit::Infinite => config.options_mut().execution.sort_in_place_threshold_bytes = SORT_IN_PLACE_BYTES,
        MemoryLimit::Unknown => {}
    }
    config
}

/// `ctx` with Kahuna's functions and the warehouse's tables as its default schema.
fn with_warehouse(
    mut ctx: SessionContext,
    snapshot: &Snapshot,
    cluster_tables: Option<crate::cluster::SessionTables>,
) -> Result<SessionContext> {
    kahuna_udfs::register_all(&mut ctx)?;
    let schema = WarehouseSchema {
        tables: snapshot.tables.clone(),
        session_tables: MemorySchemaProvider::new(),
        cluster_tables,
    };
    let options = ctx.state().config().options().catalog.clone();
    let catalog = ctx
        .catalog(&options.default_catalog)
        .ok_or_else(|| anyhow::anyhow!("the session has no catalog {}", options.default_catalog))?;
    catalog.register_schema(&options.default_schema, Arc::new(schema))?;
    Ok(ctx)
}

/// The warehouse as of its last finished ingest runs, each table opened at most once however
/// many sessions read it (`kahuna eval` runs thousands of short queries; opening `states`
/// replays its Delta log, which would cost more than a small cluster's query). Writes after
/// the snapshot was taken are not seen: take a new one.
#[derive(Clone)]
pub struct Snapshot {
    tables: Arc<OpenedTables>,
}

impl Snapshot {
    /// The warehouse as of now; a warehouse made by an older version first gets the tables it
    /// lacks, made from what it holds.
    pub async fn take(warehouse: &Warehouse) -> Result<Snapshot> {
        Self::take_opening(warehouse, false).await
    }

    /// [`Snapshot::take`] for [`session_on_cluster`]: each table is the list of its snapshot's
    /// Parquet files, which a Ballista cluster can plan and read.
    pub async fn take_as_files(warehouse: &Warehouse) -> Result<Snapshot> {
        Self::take_opening(warehouse, true).await
    }

    async fn take_opening(warehouse: &Warehouse, as_files: bool) -> Result<Snapshot> {
        let tables = OpenedTables {
            warehouse: warehouse.clone(),
            present: Mutex::new(warehouse.table_names().await?.into_iter().collect()),
            completed: warehouse.completed_ingests().await?,
            runtime: RuntimeEnvBuilder::new()
                .with_object_store_registry(Arc::new(ObjectStores::default()))
                .build_arc()?,
            opened: Mutex::new(HashMap::new()),
            as_files,
        };
        let snapshot = Snapshot { tables: Arc::new(tables) };
        if addresses::needs_backfill(warehouse).await? {
            addresses::backfill(warehouse, &session_over(&snapshot)?)
                .await
                .with_context(|| format!("cannot make the addresses table of {warehouse} from its logs"))?;
            snapshot.forget(Table::Addresses.name());
        }
        Ok(snapshot)
    }

    pub fn warehouse(&self) -> &Warehouse {
        &self.tables.warehouse
    }

    /// Drops `table`, and the views over it, from the tables opened: sessions made after a
    /// write to it read it as it is now, and the rest stay as they were opened.
    pub fn forget(&self, table: &str) {
        if let Ok(mut opened) = self.tables.opened.lock() {
            opened.retain(|name, _| name != table && view_of(name).is_none_or(|(of, _)| of.name() != table));
        }
        if let Ok(mut present) = self.tables.present.lock() {
            present.insert(table.to_string());
        }
    }
}

struct OpenedTables {
    warehouse: Warehouse,
    /// The warehouse's tables, listed once: SQL asks often, and an object store lists slowly.
    present: Mutex<HashSet<String>>,
    completed: HashSet<String>,
    runtime: Arc<RuntimeEnv>,
    opened: Mutex<HashMap<String, Arc<dyn TableProvider>>>,
    /// Tables as their files' list ([`FilesTable`]) rather than delta-rs' scan.
    as_files: bool,
}

/// The default schema: the warehouse's Delta tables, opened on first use, and the tables a
/// session creates itself (`CREATE TABLE … AS`), kept in memory.
struct WarehouseSchema {
    tables: Arc<OpenedTables>,
    session_tables: MemorySchemaProvider,
    /// On a cluster, the folder of the session's own tables, held for the session's life.
    cluster_tables: Option<crate::cluster::SessionTables>,
}

impl std::fmt::Debug for WarehouseSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarehouseSchema").field("warehouse", &self.tables.warehouse.to_string()).finish_non_exhaustive()
    }
}

impl OpenedTables {
    /// Table names are folder names: nothing that could leave the warehouse's folder. A view
    /// is there when the table it reads is.
    fn warehouse_has(&self, name: &str) -> bool {
        let plain = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let table = view_of(name).map_or(name, |(table, _)| table.name());
        plain && self.present.lock().is_ok_and(|present| present.contains(table))
    }

    /// The warehouse's tables and the views over those it has.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.present.lock().map(|present| present.iter().cloned().collect()).unwrap_or_default();
        let views = VIEWS.iter().filter(|(_, table, _)| names.iter().any(|n| n == table.name()));
        names.extend(views.map(|(view, _, _)| view.to_string()).collect::<Vec<_>>());
        names.sort();
        names
    }

    fn cached(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.opened.lock().ok().and_then(|opened| opened.get(name).cloned())
    }

    async fn open(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if !self.warehouse_has(name) {
            return Ok(None);
        }
        if let Some((table, definition)) = view_of(name) {
            return self.open_view(name, table, definition).await;
        }
        let Some((table, unfinished)) = self.warehouse.open_visible(name, &self.completed).await? else {
            return Ok(None);
        };
        // Delta scans find their object store in the session's runtime.
        table.update_datafusion_session(&SessionStateBuilder::new().with_runtime_env(self.runtime.clone()).build())?;
        // Partition values plain, not dictionary-encoded: a GROUP BY or join on `cluster` then
        // keeps DataFusion's column-wise hashing, where one dictionary column would send the
        // whole key through the slower row format (Kahuna-WB's GROUP BYs among them).
        let config = DeltaScanConfig::new().with_wrap_partition_values(false);
        let mut scan = DeltaScanNext::new(table.snapshot()?.snapshot().clone(), config)?;
        let has_run_column = scan.schema().field_with_name("ingest_id").is_ok();
        // Files added by runs that have not finished, below runs that have, are left out.
        let hidden = |file: &LogicalFileView| {
            !has_run_column && file.object_store_path().filename().is_some_and(|name| unfinished.files.contains(name))
        };
        let mut provider: Arc<dyn TableProvider> = if self.as_files {
            let files: Vec<_> = table.get_active_add_actions_by_partitions(&[]).try_collect().await?;
            let (store, folder) = self.warehouse.store_url_and_folder()?;
            let partition_columns = table.snapshot()?.metadata().partition_columns().to_vec();
            let files = files.iter().filter(|file| !hidden(file)).map(|file| DataFile {
                path: file.object_store_path().to_string(),
                size: u64::try_from(file.size()).unwrap_or_default(),
                partition_values: {
                    let values = file.partition_values_map();
                    partition_columns.iter().map(|column| values.get(column).cloned().flatten()).collect()
                },
            });
            let files = SnapshotFiles {
                store,
                root: format!("{folder}/{name}"),
                partition_columns: partition_columns.clone(),
                files: files.collect(),
            };
            Arc::new(FilesTable::new(files, scan.schema())?)
        } else {
            if !unfinished.files.is_empty() && !has_run_column {
                let files: Vec<_> = table.get_active_add_actions_by_partitions(&[]).try_collect().await?;
                let visible =
                    files.iter().filter(|file| !hidden(file)).map(|file| file.object_store_path().to_string());
                scan = scan.with_file_paths(visible.collect::<Vec<_>>());
            }
            Arc::new(scan)
        };
        if !unfinished.runs.is_empty() && has_run_column {
            // Rows of runs that have not finished, below runs that have, are left out by their
            // `ingest_id`: a `states` file such a run rewrote still shows the rows of the others.
            let runs: Vec<String> = unfinished.runs.iter().map(|id| format!("'{}'", id.replace('\'', "''"))).collect();
            let definition = format!("SELECT * FROM {name} WHERE ingest_id NOT IN ({})", runs.join(", "));
            provider = planned_view(name, provider, &definition).await?;
        }
        if let Ok(mut opened) = self.opened.lock() {
            opened.insert(name.to_string(), provider.clone());
        }
        Ok(Some(provider))
    }

    /// A view, planned over its table's provider: the plan holds the provider itself, so the
    /// view reads in any session, and queries over it are optimised as one plan (filters on
    /// host, ts or date reach the table's scan).
    async fn open_view(&self, name: &str, table: Table, definition: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let Some(provider) = Box::pin(self.open(table.name())).await? else {
            return Ok(None);
        };
        let view = planned_view(table.name(), provider, definition).await?;
        if let Ok(mut opened) = self.opened.lock() {
            opened.insert(name.to_string(), view.clone());
        }
        Ok(Some(view))
    }
}

/// A view `definition` over `provider` registered as `table`, planned now: the plan holds the
/// provider itself, so the view reads in any session.
async fn planned_view(
    table: &str,
    provider: Arc<dyn TableProvider>,
    definition: &str,
) -> Result<Arc<dyn TableProvider>> {
    let planner = SessionContext::new();
    planner.register_table(table, provider)?;
    let plan = planner.sql(definition).await?.into_unoptimized_plan();
    Ok(Arc::new(ViewTable::new(plan, Some(definition.to_string()))))
}

fn view_of(name: &str) -> Option<(Table, &'static str)> {
    VIEWS.iter().find(|(view, _, _)| *view == name).map(|&(_, table, definition)| (table, definition))
}

#[async_trait]
impl SchemaProvider for WarehouseSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.tables.names();
        names.extend(self.session_tables.table_names());
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        if let Some(table) = self.session_tables.table(name).await? {
            return Ok(Some(table));
        }
        if let Some(table) = self.tables.cached(name) {
            return Ok(Some(table));
        }
        self.tables
            .open(name)
            .await
            .map_err(|e| DataFusionError::External(format!("cannot read table {name}: {e:#}").into()))
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        if self.tables.warehouse_has(&name) {
            return Err(DataFusionError::Plan(format!("{name} is a warehouse table; choose another name")));
        }
        if self.cluster_tables.is_some() && table.is::<datafusion::catalog::MemTable>() {
            return Err(DataFusionError::Plan(format!(
                "{name}: on a cluster, a table of the session is made by kahuna::catalog::execute (its rows written by the executors), not held in memory here"
            )));
        }
        self.session_tables.register_table(name, table)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        if self.tables.warehouse_has(name) {
            return Err(DataFusionError::Plan(format!("{name} is a warehouse table; it cannot be dropped from SQL")));
        }
        self.session_tables.deregister_table(name)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.session_tables.table_exist(name) || self.tables.warehouse_has(name)
    }
}
