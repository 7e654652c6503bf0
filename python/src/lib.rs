//! `kahuna._kahuna`: the functions of `kahuna-udfs` and Kahuna warehouses as the FFI objects
//! that PyPI's `datafusion` registers (`ctx.register_udf`, `ctx.catalog().register_schema`).
//! The Python side (`python/kahuna/__init__.py`) wraps them for users.
//!
//! A foreign session lends a table its config and registry, not its runtime: Delta scans find
//! their object stores in the runtime of the session that opened them, and plans through the
//! FFI execute with a task context of a default runtime. So this library plans and runs every
//! scan of a warehouse with the session `kahuna sql` would use ([`OwnSession`], [`OwnTask`]),
//! and the caller's session sees one leaf that yields its batches.

use std::fmt;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext, TaskContextProvider};
use datafusion::logical_expr::{AggregateUDF, Expr, ScalarUDF, TableProviderFilterPushDown, WindowUDF};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion::prelude::SessionContext;
use datafusion_ffi::schema_provider::FFI_SchemaProvider;
use datafusion_ffi::udaf::FFI_AggregateUDF;
use datafusion_ffi::udf::FFI_ScalarUDF;
use datafusion_ffi::udwf::FFI_WindowUDF;
use kahuna::catalog::{Snapshot, session_over};
use kahuna::warehouse::Warehouse;
use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// Opens snapshots and runs the warehouse's scans: delta-rs reads through tokio, and the
/// caller's runtime is in another library.
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("kahuna")
        .enable_all()
        .build()
        .expect("a tokio runtime for Kahuna's scans")
});

/// `work` run on this library's runtime, awaited from the caller's.
async fn on_own_runtime<T: Send + 'static>(work: impl Future<Output = Result<T>> + Send + 'static) -> Result<T> {
    RUNTIME.spawn(work).await.map_err(|e| DataFusionError::External(Box::new(e)))?
}

/// A kind of function of `kahuna-udfs` as datafusion-python takes it: `$getter` gives its FFI
/// capsule, which `datafusion.udf(...)`, `udaf(...)` or `udwf(...)` reads.
macro_rules! exported {
    ($class:ident, $udf:ty, $ffi:ty, $getter:ident, $capsule:literal) => {
        #[pyclass(frozen, module = "kahuna._kahuna")]
        struct $class(Arc<$udf>);

        #[pymethods]
        impl $class {
            #[getter]
            fn name(&self) -> &str {
                self.0.name()
            }

            fn $getter<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
                PyCapsule::new_with_value(py, <$ffi>::from(Arc::clone(&self.0)), $capsule)
            }
        }
    };
}

exported!(ScalarFunction, ScalarUDF, FFI_ScalarUDF, __datafusion_scalar_udf__, c"datafusion_scalar_udf");
exported!(AggregateFunction, AggregateUDF, FFI_AggregateUDF, __datafusion_aggregate_udf__, c"datafusion_aggregate_udf");
exported!(WindowFunction, WindowUDF, FFI_WindowUDF, __datafusion_window_udf__, c"datafusion_window_udf");

/// Every function of `kahuna-udfs`: scalar, then aggregate, then window functions.
#[pyfunction]
fn functions(py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
    let scalar = kahuna_udfs::scalar_functions().into_iter().map(|f| Py::new(py, ScalarFunction(f)).map(Py::into_any));
    let aggregate =
        kahuna_udfs::aggregate_functions().into_iter().map(|f| Py::new(py, AggregateFunction(f)).map(Py::into_any));
    let window = kahuna_udfs::window_functions().into_iter().map(|f| Py::new(py, WindowFunction(f)).map(Py::into_any));
    scalar.chain(aggregate).chain(window).collect()
}

/// The major version of DataFusion's FFI this library speaks: PyPI's `datafusion` of the same
/// major version loads its objects.
#[pyfunction]
fn datafusion_major() -> u64 {
    datafusion_ffi::version()
}

/// A warehouse as of its last finished ingest runs, as `kahuna sql` reads it: its tables and
/// views as one schema for `ctx.catalog().register_schema(...)`.
#[pyclass(frozen, name = "Warehouse", module = "kahuna._kahuna")]
struct PyWarehouse {
    session: SessionContext,
    path: String,
}

#[pymethods]
impl PyWarehouse {
    #[new]
    fn new(py: Python<'_>, path: String) -> PyResult<Self> {
        let is_folder = !path.contains("://");
        if is_folder && !std::path::Path::new(&path).is_dir() {
            return Err(PyFileNotFoundError::new_err(format!("no warehouse at {path}: `kahuna ingest` makes one")));
        }
        let opened = py.detach(|| {
            RUNTIME.block_on(async {
                let warehouse = Warehouse::at(&path).await?;
                let tables = warehouse.table_names().await?;
                anyhow::Ok((warehouse, tables))
            })
        });
        let cannot = |e: anyhow::Error| {
            PyRuntimeError::new_err(format!("cannot read the warehouse at {path}: {}", kahuna::error_message(&e)))
        };
        let (warehouse, tables) = opened.map_err(cannot)?;
        if tables.is_empty() {
            return Err(PyValueError::new_err(format!(
                "{path} is not a Kahuna warehouse: it holds no Delta table (`kahuna ingest` makes them)"
            )));
        }
        let session = py
            .detach(|| RUNTIME.block_on(async { session_over(&Snapshot::take(&warehouse).await?) }))
            .map_err(cannot)?;
        Ok(PyWarehouse { session, path })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The warehouse's tables and views, sorted.
    fn table_names(&self) -> Vec<String> {
        let mut names = self.schema().map(|schema| schema.table_names()).unwrap_or_default();
        names.sort();
        names
    }

    fn __repr__(&self) -> String {
        format!("kahuna.Warehouse({:?})", self.path)
    }

    /// The schema for the calling session (`_session`), with this warehouse's session for the
    /// filters a caller pushes into a scan: the FFI holds a session weakly, and a caller's may
    /// be dropped while its DataFrames are still read (`connect(path).sql(...)`).
    fn __datafusion_schema_provider__<'py>(
        &self,
        py: Python<'py>,
        _session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let inner = self.schema().ok_or_else(|| PyRuntimeError::new_err("the warehouse session has no schema"))?;
        let session = Arc::new(self.session.clone());
        let tasks: Arc<dyn TaskContextProvider> = Arc::clone(&session) as _;
        let schema = Arc::new(OwnSchema { inner, state: self.session.state(), _session: session });
        let provider = FFI_SchemaProvider::new(schema, Some(RUNTIME.handle().clone()), &tasks, None);
        PyCapsule::new_with_value(py, provider, c"datafusion_schema_provider")
    }
}

impl PyWarehouse {
    fn schema(&self) -> Option<Arc<dyn SchemaProvider>> {
        let options = self.session.state().config().options().catalog.clone();
        self.session.catalog(&options.default_catalog)?.schema(&options.default_schema)
    }
}

/// The warehouse's schema, each table planned and run by the warehouse's own session.
struct OwnSchema {
    inner: Arc<dyn SchemaProvider>,
    state: SessionState,
    /// Held for the FFI's weak reference to it, while the schema lives.
    _session: Arc<SessionContext>,
}

impl fmt::Debug for OwnSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnSchema").field("inner", &self.inner).finish_non_exhaustive()
    }
}

#[async_trait]
impl SchemaProvider for OwnSchema {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        // Opening a Delta table asks tokio for the current runtime: see `OwnSession::scan`.
        let (inner, name) = (Arc::clone(&self.inner), name.to_string());
        let table = on_own_runtime(async move { inner.table(&name).await }).await?;
        Ok(table.map(|inner| Arc::new(OwnSession { inner, state: self.state.clone() }) as Arc<dyn TableProvider>))
    }

    fn register_table(&self, name: String, table: Arc<dyn TableProvider>) -> Result<Option<Arc<dyn TableProvider>>> {
        self.inner.register_table(name, table)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        self.inner.deregister_table(name)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// A table scanned with its warehouse's session, whatever session asks.
#[derive(Debug)]
struct OwnSession {
    inner: Arc<dyn TableProvider>,
    state: SessionState,
}

#[async_trait]
impl TableProvider for OwnSession {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        _caller: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // On this library's runtime: delta-rs asks tokio for the current one, and the caller
        // polls from its own (another copy of tokio, which this one cannot see).
        let (inner, state) = (Arc::clone(&self.inner), self.state.clone());
        let (projection, filters) = (projection.cloned(), filters.to_vec());
        on_own_runtime(async move {
            let plan = inner.scan(&state, projection.as_ref(), &filters, limit).await?;
            Ok(Arc::new(OwnTask { plan, task: state.task_ctx() }) as Arc<dyn ExecutionPlan>)
        })
        .await
    }
}

/// A plan run with its own task context (its warehouse's runtime and object stores), shown to
/// the caller as a leaf.
#[derive(Debug)]
struct OwnTask {
    plan: Arc<dyn ExecutionPlan>,
    task: Arc<TaskContext>,
}

impl DisplayAs for OwnTask {
    fn fmt_as(&self, format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "KahunaWarehouseExec: ")?;
        self.plan.fmt_as(format, f)
    }
}

impl ExecutionPlan for OwnTask {
    fn name(&self) -> &str {
        "KahunaWarehouseExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.plan.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal("KahunaWarehouseExec has no children".to_string()))
        }
    }

    fn execute(&self, partition: usize, _caller: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        self.plan.execute(partition, Arc::clone(&self.task))
    }
}

#[pymodule]
fn _kahuna(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<ScalarFunction>()?;
    module.add_class::<AggregateFunction>()?;
    module.add_class::<WindowFunction>()?;
    module.add_class::<PyWarehouse>()?;
    module.add_function(wrap_pyfunction!(functions, module)?)?;
    module.add_function(wrap_pyfunction!(datafusion_major, module)?)?;
    Ok(())
}
