//! A Delta table's snapshot as the plain Parquet files it names, with their partition values.
//!
//! delta-rs' scan has no wire form, so Ballista's scheduler could not plan it nor its executors
//! run it. The snapshot is resolved where the statement is planned (the client, as of the
//! last finished ingest) into this list; the scheduler turns it into DataFusion's own Parquet
//! scan, which DataFusion's protobuf carries to the executors. A session's own tables
//! (`CREATE TABLE … AS`) are written as Parquet files for the same scan
//! ([`super::create_table`]).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array as _, AsArray as _, RecordBatch};
use datafusion::arrow::datatypes::{FieldRef, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use serde::{Deserialize, Serialize};

/// What crosses the wire: the table's folder and its files, relative to it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotFiles {
    /// The object store the folder is in (`file:///`, `s3://bucket`).
    pub store: String,
    /// The table's folder in the store.
    pub root: String,
    pub partition_columns: Vec<String>,
    pub files: Vec<DataFile>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DataFile {
    /// Relative to the table's folder.
    pub path: String,
    pub size: u64,
    /// In `partition_columns`' order, as Delta writes them (text).
    pub partition_values: Vec<Option<String>>,
}

/// The files of a snapshot as a table: the schema is the Delta table's, partition columns
/// included, in its order.
#[derive(Debug)]
pub struct FilesTable {
    pub files: SnapshotFiles,
    schema: SchemaRef,
}

impl FilesTable {
    pub fn new(files: SnapshotFiles, schema: SchemaRef) -> Result<FilesTable> {
        for column in &files.partition_columns {
            schema.field_with_name(column)?;
        }
        Ok(FilesTable { files, schema })
    }

    fn partition_fields(&self) -> Vec<FieldRef> {
        let fields = self.files.partition_columns.iter();
        fields.map(|name| Arc::new(self.schema.field_with_name(name).expect("checked in new").clone())).collect()
    }

    fn partition_values(&self, file: &DataFile, partition_fields: &[FieldRef]) -> Result<Vec<ScalarValue>> {
        let values = file.partition_values.iter().zip(partition_fields).map(|(value, field)| {
            ScalarValue::Utf8(value.clone()).cast_to(field.data_type()).map_err(|e| {
                DataFusionError::Plan(format!("{}/{}: partition {}: {e}", self.files.root, file.path, field.name()))
            })
        });
        values.collect()
    }

    fn partitioned_file(&self, file: &DataFile, partition_fields: &[FieldRef]) -> Result<PartitionedFile> {
        let path = format!("{}/{}", self.files.root.trim_start_matches('/').trim_end_matches('/'), file.path);
        Ok(PartitionedFile::new(path, file.size).with_partition_values(self.partition_values(file, partition_fields)?))
    }

    fn is_partition(&self, name: &str) -> bool {
        self.files.partition_columns.iter().any(|c| c == name)
    }

    /// The files whose partition values pass the filters that read partition columns only
    /// (`date >= …`): a window of a few days reads those days' files, not the months'.
    fn files_passing(&self, session: &dyn Session, filters: &[Expr]) -> Result<Vec<&DataFile>> {
        let on_partitions = filters.iter().filter(|filter| {
            let columns = filter.column_refs();
            !columns.is_empty() && columns.iter().all(|c| self.is_partition(&c.name)) && !filter.is_volatile()
        });
        let Some(filter) = conjunction(on_partitions.cloned()) else {
            return Ok(self.files.files.iter().collect());
        };
        let fields = self.partition_fields();
        let mut columns: Vec<Vec<ScalarValue>> = vec![Vec::new(); fields.len()];
        for file in &self.files.files {
            for (column, value) in columns.iter_mut().zip(self.partition_values(file, &fields)?) {
                column.push(value);
            }
        }
        let schema = Arc::new(Schema::new(fields.clone()));
        let arrays = columns.into_iter().zip(&fields).map(|(values, field)| {
            if values.is_empty() {
                Ok(datafusion::arrow::array::new_empty_array(field.data_type()))
            } else {
                ScalarValue::iter_to_array(values)
            }
        });
        let batch = RecordBatch::try_new(Arc::clone(&schema), arrays.collect::<Result<_>>()?)?;
        let predicate = session.create_physical_expr(filter, &DFSchema::try_from(schema)?)?;
        let passed = predicate.evaluate(&batch)?.into_array(batch.num_rows())?;
        let passed = passed.as_boolean();
        Ok(self
            .files
            .files
            .iter()
            .enumerate()
            .filter(|(i, _)| passed.is_valid(*i) && passed.value(*i))
            .map(|(_, f)| f)
            .collect())
    }
}

#[async_trait]
impl TableProvider for FilesTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        // Used to choose files; every filter is still applied to the rows.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        session: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let partition_fields = self.partition_fields();
        let files = self.files_passing(session, filters)?;
        let file_fields: Vec<_> =
            self.schema.fields().iter().filter(|f| !self.is_partition(f.name())).cloned().collect();
        let file_schema = Arc::new(Schema::new(file_fields));
        // The scan's columns are the file's, then the partitions'; the table's are in Delta's order.
        let scan_index = |name: &str| match self.files.partition_columns.iter().position(|c| c == name) {
            Some(partition) => file_schema.fields().len() + partition,
            None => file_schema.index_of(name).expect("a file column"),
        };
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        let indices = projection.unwrap_or(&all).iter().map(|&i| scan_index(self.schema.field(i).name())).collect();
        // As many groups as the session has partitions, files split into byte ranges where they
        // are fewer: Ballista 55 reads the one partition of a narrower scan once for every
        // partition of a UNION ALL above it (rows doubled on 2 cores).
        let groups = session.config().target_partitions().max(1);
        let pieces = groups.div_ceil(files.len().max(1));
        let mut file_groups = vec![Vec::new(); groups];
        let mut slot = 0;
        for file in files {
            let whole = self.partitioned_file(file, &partition_fields)?;
            let step = file.size.div_ceil(pieces as u64).max(1);
            for start in (0..file.size.max(1)).step_by(step as usize).take(pieces) {
                let end = (start + step).min(file.size);
                file_groups[slot % groups].push(whole.clone().with_range(start as i64, end as i64));
                slot += 1;
            }
        }
        file_groups.truncate(slot.clamp(1, groups));
        let source = Arc::new(ParquetSource::new(
            TableSchema::builder(file_schema).with_table_partition_cols(partition_fields).build(),
        ));
        let config = FileScanConfigBuilder::new(ObjectStoreUrl::parse(&self.files.store)?, source)
            .with_file_groups(file_groups.into_iter().map(FileGroup::new).collect())
            .with_projection_indices(Some(indices))?
            .with_limit(limit)
            .build();
        Ok(DataSourceExec::from_data_source(config))
    }
}
