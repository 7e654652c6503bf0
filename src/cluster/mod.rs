//! Beyond one machine: the warehouse's SQL on [Apache Ballista](https://datafusion.apache.org/ballista/).
//!
//! `kahuna scheduler` and `kahuna executor` are Ballista's scheduler and executor with Kahuna's
//! functions registered and Kahuna's codec ([`codec::KahunaCodec`]); `--engine
//! ballista://host:port` plans a statement in the client, over the warehouse as of its last
//! finished ingest, and runs it on the cluster. Warehouse tables travel as the Parquet files of
//! their snapshot ([`files::FilesTable`]): every executor reads the warehouse's folder, so it
//! must be on a disk they share.

pub mod codec;
pub mod files;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};
use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::{create_scheduler, start_grpc_service_with_listener};
use datafusion::arrow::array::AsArray as _;
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::datasource::file_format::format_as_file_type;
use datafusion::datasource::file_format::parquet::ParquetFormatFactory;
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::logical_expr::{CreateMemoryTable, LogicalPlanBuilder};
use datafusion::object_store::path::Path as ObjectPath;
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};

use codec::KahunaCodec;
use futures::TryStreamExt as _;

use crate::warehouse::Warehouse;
use crate::warehouse::stores::ObjectStores;

/// Executors pull their tasks from the scheduler: one port each, and nothing for the scheduler
/// to call back. Both sides must agree.
pub const POLICY: TaskSchedulingPolicy = TaskSchedulingPolicy::PullStaged;

/// Seconds between an executor's heartbeats, and after which the scheduler gives up on a
/// silent one and runs its tasks elsewhere (Ballista's defaults, 60 and 180, would hold a query
/// three minutes on a killed executor).
const HEARTBEAT_SECONDS: u64 = 2;
const EXECUTOR_TIMEOUT_SECONDS: u64 = 10;

/// The largest message between client, scheduler and executors (Ballista's default is 16 MB):
/// a plan names every file of the tables it reads, and months of a warehouse are thousands.
pub const MESSAGE_BYTES: u32 = 256 << 20;

/// The folder of a cluster session's own tables, in the warehouse (which every executor
/// reads), removed with the session: a session config extension.
#[derive(Debug, Clone)]
pub struct SessionTables(pub Arc<SessionFolder>);

impl datafusion::common::config::ConfigExtension for SessionTables {
    const PREFIX: &'static str = "kahuna_session_tables";
}

impl datafusion::common::config::ExtensionOptions for SessionTables {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
    fn cloned(&self) -> Box<dyn datafusion::common::config::ExtensionOptions> {
        Box::new(self.clone())
    }
    fn set(&mut self, key: &str, _value: &str) -> datafusion::common::Result<()> {
        datafusion::common::config_err!("{key} cannot be set")
    }
    fn entries(&self) -> Vec<datafusion::common::config::ConfigEntry> {
        Vec::new()
    }
}

/// `.session-…` in the warehouse, in a folder or an object store alike.
#[derive(Debug)]
pub struct SessionFolder {
    warehouse: Warehouse,
    name: String,
    tables_made: AtomicUsize,
}

impl SessionFolder {
    pub fn new(warehouse: &Warehouse) -> SessionFolder {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let name = format!(".session-{:x}-{nanos:x}", std::process::id());
        SessionFolder { warehouse: warehouse.clone(), name, tables_made: AtomicUsize::new(0) }
    }

    /// A folder of its own for table `table`, in the warehouse's store.
    fn for_table(&self, table: &str) -> ObjectPath {
        let made = self.tables_made.fetch_add(1, Ordering::Relaxed);
        ObjectPath::from(self.name.as_str()).join(format!("{}-{made}", table.replace(['/', '\\'], "_")))
    }
}

impl Drop for SessionFolder {
    /// The session's tables go with it. A store is asked on a thread of its own, with a
    /// runtime of its own: a session may end inside another runtime, or after it.
    fn drop(&mut self) {
        let warehouse = self.warehouse.clone();
        let folder = ObjectPath::from(self.name.as_str());
        let removed = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(warehouse.remove(&folder))
        });
        if let Ok(Err(e)) = removed.join() {
            eprintln!("warning: the session's tables in {}/{} were not all removed: {e:#}", self.warehouse, self.name);
        }
    }
}

/// `CREATE TABLE name AS query` on a cluster: the executors write the query's rows as Parquet
/// (`COPY … TO`) into a folder of the session's, and the session's table is those files. The
/// rows never pass through the client, which would otherwise hold every saved table of a
/// diagnosis (millions of rows over a history) in its memory.
pub async fn create_table(
    ctx: &SessionContext,
    create: CreateMemoryTable,
    folder: &SessionFolder,
) -> Result<DataFrame> {
    let name = create.name.table().to_string();
    if ctx.table_exist(create.name.clone())? {
        if create.if_not_exists {
            return no_rows(ctx);
        }
        if !create.or_replace {
            bail!("table {name} already exists");
        }
        ctx.deregister_table(create.name.clone())?;
    }
    let schema = Arc::new(create.input.schema().as_arrow().clone());
    let written = folder.for_table(&name);
    let (store_url, warehouse_folder) = folder.warehouse.store_url_and_folder()?;
    let root = [warehouse_folder.as_str(), written.as_ref()].into_iter().filter(|part| !part.is_empty());
    let root = root.collect::<Vec<_>>().join("/");
    let file_type = format_as_file_type(Arc::new(ParquetFormatFactory::new()));
    let copy = LogicalPlanBuilder::copy_to(
        Arc::unwrap_or_clone(create.input),
        format!("{}/{root}/", store_url.strip_suffix('/').unwrap_or(&store_url)),
        file_type,
        Default::default(),
        Vec::new(),
    )?
    .build()?;
    let counted = ctx.execute_logical_plan(copy).await?.collect().await?;
    let rows: u64 = counted
        .iter()
        .filter_map(|batch| batch.column(0).as_primitive_opt::<UInt64Type>())
        .flat_map(|counts| counts.iter().flatten())
        .sum();
    let store = folder.warehouse.store();
    let listed: Vec<_> = store.list(Some(&written)).try_collect().await?;
    let mut data = Vec::new();
    let mut rows_in_files = 0;
    for file in listed {
        let metadata = DFParquetMetadata::new(store.as_ref(), &file)
            .fetch_metadata()
            .await
            .with_context(|| format!("{}/{}: as written for table {name}", folder.warehouse, file.location))?;
        rows_in_files += metadata.file_metadata().num_rows() as u64;
        data.push(files::DataFile {
            path: file.location.filename().unwrap_or_default().to_string(),
            size: file.size,
            partition_values: Vec::new(),
        });
    }
    // A task run again after its executor was lost leaves a second file of the same rows.
    if rows_in_files != rows {
        bail!(
            "table {name}: its files hold {rows_in_files} rows for {rows} written (a task written twice after an executor was lost?): run the statement again"
        );
    }
    let files = files::SnapshotFiles { store: store_url, root, partition_columns: Vec::new(), files: data };
    ctx.register_table(create.name, Arc::new(files::FilesTable::new(files, schema)?))?;
    no_rows(ctx)
}

/// What `CREATE TABLE` answers: nothing.
fn no_rows(ctx: &SessionContext) -> Result<DataFrame> {
    Ok(DataFrame::new(ctx.state(), LogicalPlanBuilder::empty(false).build()?))
}

/// `host:port` of `ballista://host:port` (or of `df://…`, Ballista's own scheme).
pub fn scheduler_address(engine: &str) -> Result<String> {
    let Some(address) = engine.strip_prefix("ballista://").or_else(|| engine.strip_prefix("df://")) else {
        bail!("{engine}: not an engine; give ballista://host:port (a `kahuna scheduler`)");
    };
    let address = address.trim_end_matches('/');
    if address.rsplit_once(':').is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err()) {
        bail!("{engine}: give ballista://host:port");
    }
    Ok(address.to_string())
}

/// The function registry of every Ballista session and task, DataFusion's and Kahuna's, and
/// Kahuna's planning of its aggregates.
fn session_state(config: SessionConfig) -> datafusion::common::Result<datafusion::execution::SessionState> {
    let state = ballista_core::utils::default_session_builder(config)?;
    let mut state = datafusion::execution::SessionStateBuilder::new_from_existing(state)
        .with_physical_optimizer_rule(Arc::new(kahuna_udfs::AggregateOnce))
        .build();
    kahuna_udfs::register_all(&mut state)?;
    Ok(state)
}

/// Runs a scheduler on `listen` until the process ends; `on_listening` is told the address
/// (port 0 takes a free one).
pub async fn scheduler(listen: SocketAddr, on_listening: impl FnOnce(SocketAddr)) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr()?;
    let config = SchedulerConfig {
        bind_host: address.ip().to_string(),
        bind_port: address.port(),
        scheduling_policy: POLICY,
        executor_timeout_seconds: EXECUTOR_TIMEOUT_SECONDS,
        no_executors_grace_period_seconds: EXECUTOR_TIMEOUT_SECONDS,
        override_session_builder: Some(Arc::new(session_state)),
        override_logical_codec: Some(Arc::new(KahunaCodec::default())),
        grpc_server_max_decoding_message_size: MESSAGE_BYTES,
        grpc_server_max_encoding_message_size: MESSAGE_BYTES,
        grpc_client_max_message_size: MESSAGE_BYTES,
        ..Default::default()
    };
    let config = Arc::new(config);
    let cluster = BallistaCluster::new_from_config(&config).await?;
    let scheduler = create_scheduler::<LogicalPlanNode, PhysicalPlanNode>(cluster, config).await?;
    on_listening(address);
    start_grpc_service_with_listener(listener, scheduler).await?;
    Ok(())
}

/// Each session's runtime on an executor: Ballista's (spill files in the work folder) with
/// object stores opened as plans name them (a warehouse on S3), shared by the sessions.
fn runtime_producer(work_dir: PathBuf) -> ballista_core::RuntimeProducer {
    let stores = Arc::new(ObjectStores::default());
    Arc::new(move |_| {
        let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_temp_file_path(work_dir.clone())
            .with_object_store_registry(stores.clone())
            .build()?;
        Ok(Arc::new(runtime))
    })
}

pub struct ExecutorOptions {
    /// `host:port` of the scheduler.
    pub scheduler: String,
    /// Where this executor serves its results (Arrow Flight) to the client and other executors.
    pub listen: SocketAddr,
    /// Tasks at once (0: one a core).
    pub tasks: usize,
    /// Shuffle files; a folder of its own under the system's temporary folder when None.
    pub work_dir: Option<PathBuf>,
}

/// Runs an executor of the scheduler at `options.scheduler` until the process ends.
pub async fn executor(options: ExecutorOptions) -> Result<()> {
    let (scheduler_host, scheduler_port) = match options.scheduler.rsplit_once(':') {
        Some((host, port)) => (host.to_string(), port.parse::<u16>().ok()),
        None => (options.scheduler.clone(), None),
    };
    let Some(scheduler_port) = scheduler_port else {
        bail!("{}: give the scheduler as host:port", options.scheduler);
    };
    // Kept for the process's life: Ballista's own fallback folder is removed at once.
    let scratch = tempfile::Builder::new().prefix("kahuna-executor-").tempdir()?;
    let work_dir = options.work_dir.unwrap_or_else(|| scratch.path().to_path_buf());
    let registry = BallistaFunctionRegistry::from(&session_state(SessionConfig::new())?);
    let config = ExecutorProcessConfig {
        bind_host: options.listen.ip().to_string(),
        external_host: Some(options.listen.ip().to_string()),
        port: options.listen.port(),
        scheduler_host,
        scheduler_port,
        vcores: options.tasks,
        task_scheduling_policy: POLICY,
        work_dir: Some(work_dir.display().to_string()),
        executor_heartbeat_interval_seconds: HEARTBEAT_SECONDS,
        override_function_registry: Some(Arc::new(registry)),
        override_runtime_producer: Some(runtime_producer(work_dir.clone())),
        override_logical_codec: Some(Arc::new(KahunaCodec::default())),
        grpc_max_decoding_message_size: MESSAGE_BYTES,
        grpc_max_encoding_message_size: MESSAGE_BYTES,
        ..Default::default()
    };
    start_executor_process(Arc::new(config))
        .await
        .with_context(|| format!("executor of the scheduler at {}", options.scheduler))?;
    drop(scratch);
    Ok(())
}
