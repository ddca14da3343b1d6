//! The memory database: a LanceDB connection (a local folder, `memory://`, or object storage)
//! holding the tables of `schema`. Opening checks the recorded schema version; writes go
//! through one Lance commit each, so a reader sees all of a write or none of it.
//!
//! **The only module that touches the database**: `Store` keeps its Lance tables private and
//! offers what the jobs need (scans, upserts, partial-column updates, conditional updates,
//! deletes); `sql` exposes the tables to DataFusion, `index` builds vector indexes, `audit`
//! writes the audit log.

pub mod activations;
pub mod audit;
pub mod index;
pub mod maintain;
pub mod sql;

use arrow::array::{Array, AsArray, RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow::datatypes::SchemaRef;
use futures::TryStreamExt;
use lancedb::Table;
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use std::collections::BTreeMap;

use crate::model::encoding::Cell;
use crate::model::rows::RowBuilder;
use crate::model::schema::{ALL_TABLES, LINKS, MEMORIES, META, SCHEMA_VERSION, TableSpec};
use crate::model::typed::{
    EntityRow, EntityScanRow, LinkRow, MemoryEntityRow, MemoryRow, ReviewItem,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "{uri} is not a memlife database (no memlife_meta table): run `memlife --db {uri} init`"
    )]
    NotInitialized { uri: String },
    #[error(
        "{uri} has schema version {found}, newer than this memlife supports ({supported}): upgrade memlife"
    )]
    NewerSchema {
        uri: String,
        found: i64,
        supported: i64,
    },
    #[error(
        "{uri} has schema version {found} and this memlife has no migration from it to {supported}"
    )]
    NoMigration {
        uri: String,
        found: i64,
        supported: i64,
    },
    #[error("table '{table}' lacks columns {columns:?} of schema version {version}")]
    MissingColumns {
        table: String,
        columns: Vec<String>,
        version: i64,
    },
    #[error("memlife_meta entry '{key}' is unreadable: '{value}'")]
    BadMeta { key: String, value: String },
    #[error("{uri}: this write needs a local or object-store Lance table, not a remote one")]
    NotNative { uri: String },
    #[error("no table named '{name}' (tables: {known})")]
    UnknownTable { name: String, known: String },
    #[error("audit row {id}: {reason}")]
    InvalidAudit { id: String, reason: String },
    /// Rows a job built that the table's rules refuse (the row and field named).
    #[error("{0}")]
    Rows(String),
    #[error(transparent)]
    Lance(#[from] lancedb::Error),
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
    #[error(transparent)]
    RowType(#[from] crate::model::typed::RowTypeError),
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// A commit lost to a concurrent writer even after Lance's own retries (merge-insert,
    /// update and delete retry conflicting commits ten times, re-evaluating their predicates).
    pub fn is_commit_conflict(&self) -> bool {
        matches!(
            self,
            StoreError::Lance(lancedb::Error::Lance {
                source: lance::Error::CommitConflict { .. }
                    | lance::Error::RetryableCommitConflict { .. }
                    | lance::Error::IncompatibleTransaction { .. },
            })
        )
    }
}

/// What one write changed.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct WriteStats {
    pub inserted: u64,
    pub updated: u64,
    pub version: u64,
}

/// An open memlife database.
#[derive(Clone)]
pub struct Store {
    uri: String,
    connection: lancedb::Connection,
    embedding_dim: usize,
    schema_version: i64,
}

impl Store {
    async fn connect(uri: &str) -> Result<lancedb::Connection> {
        Ok(lancedb::connect(&local_path_as_absolute(uri))
            .execute()
            .await?)
    }

    /// Creates the database and any missing table; checks the tables that exist. Idempotent:
    /// on an existing database it creates nothing and keeps the recorded embedding width.
    pub async fn init(uri: &str, embedding_dim: usize) -> Result<(Store, Vec<String>)> {
        let connection = Self::connect(uri).await?;
        let existing = connection.table_names().execute().await?;
        let mut created = Vec::new();
        let meta = read_meta(&connection, &existing).await?;
        let embedding_dim = match meta.get("embedding_dim") {
            Some(v) => parse_meta("embedding_dim", v)? as usize,
            None => embedding_dim,
        };
        let found = meta
            .get("schema_version")
            .map(|v| parse_meta("schema_version", v))
            .transpose()?;
        if let Some(found) = found {
            check_version(uri, found)?;
        }
        for spec in ALL_TABLES {
            if existing.iter().any(|n| n == spec.name) {
                continue;
            }
            connection
                .create_empty_table(spec.name, spec.arrow_schema(embedding_dim))
                .execute()
                .await?;
            created.push(spec.name.to_string());
        }
        let store = Store {
            uri: uri.to_string(),
            connection,
            embedding_dim,
            schema_version: SCHEMA_VERSION,
        };
        if let Some(found) = found.filter(|f| *f < SCHEMA_VERSION) {
            store.migrate(found).await?;
        }
        if meta.is_empty() {
            let now = chrono::Utc::now().to_rfc3339();
            store
                .write_meta(&[
                    ("schema_version", SCHEMA_VERSION.to_string()),
                    ("embedding_dim", embedding_dim.to_string()),
                    ("created_at", now),
                ])
                .await?;
        }
        store.check_columns().await?;
        Ok((store, created))
    }

    /// Opens an initialised database, refusing unknown newer schema versions.
    pub async fn open(uri: &str) -> Result<Store> {
        let connection = Self::connect(uri).await?;
        let existing = connection.table_names().execute().await?;
        if !existing.iter().any(|n| n == META.name) {
            return Err(StoreError::NotInitialized {
                uri: uri.to_string(),
            });
        }
        let meta = read_meta(&connection, &existing).await?;
        let version = parse_meta(
            "schema_version",
            meta.get("schema_version").map_or("", String::as_str),
        )?;
        check_version(uri, version)?;
        let embedding_dim = parse_meta(
            "embedding_dim",
            meta.get("embedding_dim").map_or("", String::as_str),
        )? as usize;
        let store = Store {
            uri: uri.to_string(),
            connection,
            embedding_dim,
            schema_version: version,
        };
        if version < SCHEMA_VERSION {
            store.migrate(version).await?;
            return Ok(Store {
                schema_version: SCHEMA_VERSION,
                ..store
            });
        }
        Ok(store)
    }

    /// Brings an older database to `SCHEMA_VERSION` in place: creates the tables it lacks and
    /// adds the columns it lacks (all null), then records the version. Every step checks
    /// before it acts, so a migration killed half-way is finished by the next open.
    async fn migrate(&self, from: i64) -> Result<()> {
        let existing = self.table_names().await?;
        let mut created = Vec::new();
        for spec in ALL_TABLES {
            if !existing.iter().any(|n| n == spec.name) {
                self.connection
                    .create_empty_table(spec.name, spec.arrow_schema(self.embedding_dim))
                    .execute()
                    .await?;
                created.push(format!("{}{}", TABLE_CREATED, spec.name));
                continue;
            }
            let table = self.table(spec.name).await?;
            let schema = table.schema().await?;
            let wanted = spec.arrow_schema(self.embedding_dim);
            let missing: Vec<arrow::datatypes::Field> = wanted
                .fields()
                .iter()
                .filter(|f| schema.field_with_name(f.name()).is_err())
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect();
            if !missing.is_empty() {
                let added = std::sync::Arc::new(arrow::datatypes::Schema::new(missing));
                table
                    .add_columns()
                    .transform(lancedb::table::NewColumnTransform::AllNulls(added))
                    .execute()
                    .await?;
            }
        }
        tracing::info!(uri = %self.uri, from, to = SCHEMA_VERSION, "schema migrated");
        // When each new table appeared: runs recorded before it lack its version, and undo
        // then knows they cannot have written it.
        let now = chrono::Utc::now().to_rfc3339();
        let mut entries: Vec<(&str, String)> =
            created.iter().map(|k| (k.as_str(), now.clone())).collect();
        entries.push(("schema_version", SCHEMA_VERSION.to_string()));
        self.write_meta(&entries).await
    }

    /// When a migration created `table` (`None` for the tables a store was created with).
    pub async fn table_created_at(&self, table: &str) -> Result<Option<i64>> {
        #[derive(serde::Deserialize)]
        struct Entry {
            value: String,
        }
        let key = format!("{TABLE_CREATED}{table}");
        let rows: Vec<Entry> = self
            .scan_rows(META.name, Some(&format!("key = {}", sql_string(&key))))
            .await?;
        Ok(rows
            .first()
            .and_then(|e| crate::model::encoding::parse_timestamp(&e.value)))
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    pub fn embedding_dim(&self) -> usize {
        self.embedding_dim
    }

    pub fn schema_version(&self) -> i64 {
        self.schema_version
    }

    pub async fn table_names(&self) -> Result<Vec<String>> {
        Ok(self.connection.table_names().execute().await?)
    }

    /// A handle on one table (inside `store/` only: callers outside use `open_view`).
    async fn table(&self, name: &str) -> Result<Table> {
        match self.connection.open_table(name).execute().await {
            Ok(t) => Ok(t),
            Err(lancedb::Error::TableNotFound { .. }) => Err(StoreError::UnknownTable {
                name: name.to_string(),
                known: self.table_names().await?.join(", "),
            }),
            Err(e) => Err(e.into()),
        }
    }

    async fn check_columns(&self) -> Result<()> {
        for spec in ALL_TABLES {
            let table = self.table(spec.name).await?;
            let schema = table.schema().await?;
            let missing: Vec<String> = spec
                .fields
                .iter()
                .filter(|f| schema.field_with_name(f.name).is_err())
                .map(|f| f.name.to_string())
                .collect();
            if !missing.is_empty() {
                return Err(StoreError::MissingColumns {
                    table: spec.name.to_string(),
                    columns: missing,
                    version: SCHEMA_VERSION,
                });
            }
        }
        Ok(())
    }

    async fn write_meta(&self, entries: &[(&str, String)]) -> Result<()> {
        let mut builder = RowBuilder::new(&META, self.embedding_dim, 0);
        for (key, value) in entries {
            builder
                .append(|_, name| match name {
                    "key" => Cell::Text(key),
                    _ => Cell::Text(value),
                })
                .map_err(|e| arrow::error::ArrowError::InvalidArgumentError(e.to_string()))?;
        }
        let batch = builder.finish()?;
        self.upsert_batch(&META, batch).await?;
        Ok(())
    }

    pub async fn count_rows(&self, table: &str, filter: Option<&str>) -> Result<usize> {
        let table = self.table(table).await?;
        Ok(table.count_rows(filter.map(str::to_string)).await?)
    }

    /// Writes a stream of rows of `spec` in one commit: appended when the table is empty,
    /// else merged on the table's key (matching rows replaced, new rows inserted).
    pub async fn write_rows(
        &self,
        spec: &TableSpec,
        rows: Box<dyn RecordBatchReader + Send>,
    ) -> Result<WriteStats> {
        let table = self.table(spec.name).await?;
        if table.count_rows(None).await? == 0 {
            tracing::debug!(table = spec.name, "appending to an empty table");
            // Lance encodes and writes one stream per core; batches go round-robin.
            let streams = std::thread::available_parallelism().map_or(1, |n| n.get());
            // Vectors were checked for NaN and infinities by our own validation (rows.rs);
            // lancedb's second check is an unoptimised per-value scan that cost ~40% of a
            // 1M-row import's CPU.
            let result = table
                .add(rows)
                .write_parallelism(streams)
                .on_nan_vectors(lancedb::table::NaNVectorBehavior::Keep)
                .execute()
                .await?;
            return Ok(WriteStats {
                inserted: table.count_rows(None).await? as u64,
                updated: 0,
                version: result.version,
            });
        }
        self.merge_rows(spec, rows).await
    }

    /// Merges a stream of rows on the table's key in one commit: matching rows replaced, new
    /// rows inserted. Unlike `write_rows` it never takes the empty-table append path, so two
    /// writers racing to write the same first rows still match keys (Lance retries the
    /// conflicting commit against the other's rows).
    pub async fn merge_rows(
        &self,
        spec: &TableSpec,
        rows: Box<dyn RecordBatchReader + Send>,
    ) -> Result<WriteStats> {
        let table = self.table(spec.name).await?;
        tracing::debug!(table = spec.name, key = ?spec.key, "merging on the table's key");
        let mut merge = table.merge_insert(spec.key);
        merge
            .when_matched_update_all(None)
            .when_not_matched_insert_all();
        let result = merge.execute(rows).await?;
        Ok(WriteStats {
            inserted: result.num_inserted_rows,
            updated: result.num_updated_rows,
            version: result.version,
        })
    }

    /// Inserts, in one commit, the rows whose key the table does not hold; rows it holds stay
    /// as they are (a restore that must not roll a newer row back).
    pub async fn insert_missing_rows(
        &self,
        spec: &TableSpec,
        rows: Box<dyn RecordBatchReader + Send>,
    ) -> Result<WriteStats> {
        let table = self.table(spec.name).await?;
        let mut merge = table.merge_insert(spec.key);
        merge.when_not_matched_insert_all();
        let result = merge.execute(rows).await?;
        Ok(WriteStats {
            inserted: result.num_inserted_rows,
            updated: 0,
            version: result.version,
        })
    }

    /// Appends rows in one commit, without matching keys: for rows whose keys are new by
    /// construction (audit rows keyed by their run).
    pub async fn append(
        &self,
        spec: &TableSpec,
        rows: Box<dyn RecordBatchReader + Send>,
    ) -> Result<WriteStats> {
        let table = self.table(spec.name).await?;
        let result = table.add(rows).execute().await?;
        Ok(WriteStats {
            inserted: 0,
            updated: 0,
            version: result.version,
        })
    }

    /// Replaces some columns of existing rows, matched on the table's key, in one commit.
    /// The batches hold the key columns and the columns to replace; no row is inserted. Lance
    /// attaches new files for just these columns to the fragments holding the matched rows
    /// (`RewriteColumns`): the other columns, embeddings included, are neither read nor
    /// rewritten.
    pub async fn update_columns(
        &self,
        spec: &TableSpec,
        rows: Box<dyn RecordBatchReader + Send>,
    ) -> Result<WriteStats> {
        use lance::dataset::{
            MergeInsertBuilder, MergeInsertWriteMode, WhenMatched, WhenNotMatched,
        };
        let table = self.table(spec.name).await?;
        let dataset = table
            .dataset()
            .ok_or_else(|| StoreError::NotNative {
                uri: self.uri.clone(),
            })?
            .get()
            .await?;
        let keys = spec.key.iter().map(|k| k.to_string()).collect();
        let mut builder =
            MergeInsertBuilder::try_new(dataset, keys).map_err(lancedb::Error::from)?;
        builder
            .when_matched(WhenMatched::UpdateAll)
            .when_not_matched(WhenNotMatched::DoNothing)
            .write_mode(MergeInsertWriteMode::RewriteColumns);
        let job = builder.try_build().map_err(lancedb::Error::from)?;
        let (dataset, stats) = job
            .execute_reader(rows)
            .await
            .map_err(lancedb::Error::from)?;
        Ok(WriteStats {
            inserted: stats.num_inserted_rows,
            updated: stats.num_updated_rows,
            version: dataset.version().version,
        })
    }

    /// Sets an integer column of the rows keyed (`spec`'s single key column) by the first of
    /// each pair to the second, in one commit, as a column update (`update_columns`).
    pub async fn set_i64_column(
        &self,
        spec: &TableSpec,
        column: &str,
        values: &[(String, Option<i64>)],
    ) -> Result<WriteStats> {
        use arrow::array::{Int64Array, RecordBatch, RecordBatchIterator, StringArray};
        let full = spec.arrow_schema(self.embedding_dim());
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
            full.field_with_name(spec.key[0])?.clone(),
            full.field_with_name(column)?.clone(),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                std::sync::Arc::new(StringArray::from_iter_values(values.iter().map(|v| &v.0))),
                std::sync::Arc::new(Int64Array::from_iter(values.iter().map(|v| v.1))),
            ],
        )?;
        let reader = RecordBatchIterator::new([Ok(batch)], schema);
        self.update_columns(spec, Box::new(reader)).await
    }

    /// Sets a boolean column of the rows matching `predicate`, in one commit (none when no row
    /// matches), as a column update (`update_columns`): unlike `update_where`, which rewrites
    /// each matched row whole (an entity's two embeddings for one flag), only the column's
    /// files are written, and no row is deleted for compaction to rewrite later. Returns the
    /// rows set.
    pub async fn set_flag_where(
        &self,
        spec: &TableSpec,
        predicate: &str,
        column: &str,
        value: bool,
    ) -> Result<u64> {
        use arrow::array::BooleanArray;
        use arrow::datatypes::{DataType, Field, Schema};
        let nullable = spec.field(column).is_none_or(|f| f.nullable());
        let keys = self
            .scan_columns(spec.name, Some(predicate), spec.key)
            .await?;
        let mut batches = Vec::new();
        let mut schema = None;
        for batch in keys.into_iter().filter(|b| b.num_rows() > 0) {
            let mut fields: Vec<Field> = batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            fields.push(Field::new(column, DataType::Boolean, nullable));
            let s = std::sync::Arc::new(Schema::new(fields));
            let mut columns = batch.columns().to_vec();
            columns.push(std::sync::Arc::new(BooleanArray::from(vec![
                value;
                batch
                    .num_rows()
            ])));
            batches.push(RecordBatch::try_new(s.clone(), columns)?);
            schema = Some(s);
        }
        let Some(schema) = schema else {
            return Ok(0);
        };
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
        self.update_columns(spec, Box::new(reader)).await?;
        Ok(rows as u64)
    }

    /// Appends one in-memory batch in one commit, without matching keys (`append`): for rows
    /// whose keys are new by construction (a run's first row, an online run's audit rows).
    pub async fn append_batch(&self, spec: &TableSpec, batch: RecordBatch) -> Result<WriteStats> {
        let schema = batch.schema();
        let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
        self.append(spec, Box::new(reader)).await
    }

    /// Upserts one in-memory batch (run log, meta, links, audit rows, vectors) on the key.
    pub async fn upsert_batch(&self, spec: &TableSpec, batch: RecordBatch) -> Result<WriteStats> {
        let schema = batch.schema();
        let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
        self.merge_rows(spec, Box::new(reader)).await
    }

    /// The current version of every table (each commit makes one). A table that cannot be
    /// read is left out (and logged): the run's own work reports that table's error, and
    /// undo refuses what it cannot diff.
    pub async fn table_versions(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for spec in ALL_TABLES {
            let version = match self.table(spec.name).await {
                Ok(t) => t.version().await.map_err(StoreError::from),
                Err(e) => Err(e),
            };
            match version {
                Ok(v) => {
                    out.insert(spec.name.to_string(), v);
                }
                Err(e) => tracing::warn!(table = spec.name, "version not read: {e}"),
            }
        }
        out
    }

    /// One table opened once and read many times at the version it was opened at (a walk's
    /// reads), with typed filter expressions (DataFusion `Expr`, which Lance pushes down to its
    /// indexes like SQL text).
    pub async fn open_view(&self, name: &str) -> Result<TableView> {
        Ok(TableView(self.table(name).await?))
    }

    /// The current version of a table.
    pub async fn version_of(&self, name: &str) -> Result<u64> {
        Ok(self.table(name).await?.version().await?)
    }

    /// The column names a table had at `version`.
    pub async fn columns_at(&self, name: &str, version: u64) -> Result<Vec<String>> {
        let table = self.table(name).await?;
        table.checkout(version).await?;
        Ok(table
            .schema()
            .await?
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect())
    }

    /// Reads `columns` of a table as it was at `version` (optionally filtered); columns the
    /// version did not have yet are left out.
    pub async fn scan_at(
        &self,
        table: &str,
        version: u64,
        filter: Option<&str>,
        columns: &[&str],
    ) -> Result<Vec<RecordBatch>> {
        let table = self.table(table).await?;
        table.checkout(version).await?;
        let schema = table.schema().await?;
        let present: Vec<&str> = columns
            .iter()
            .copied()
            .filter(|c| schema.field_with_name(c).is_ok())
            .collect();
        let mut query = table.query().select(Select::columns(&present));
        if let Some(filter) = filter {
            query = query.only_if(filter);
        }
        Ok(query.execute().await?.try_collect().await?)
    }

    /// Reads a table (optionally filtered by a SQL predicate) as batches of every column.
    pub async fn scan(&self, table: &str, filter: Option<&str>) -> Result<Vec<RecordBatch>> {
        let table = self.table(table).await?;
        let mut query = table.query().select(Select::All);
        if let Some(filter) = filter {
            query = query.only_if(filter);
        }
        Ok(query.execute().await?.try_collect().await?)
    }

    /// Which of `ids` are rows of `table` (with `filter`, when given): one scan of the `id`
    /// column per 500 ids.
    pub async fn ids_present(
        &self,
        table: &str,
        ids: &[String],
        filter: Option<&str>,
    ) -> Result<std::collections::BTreeSet<String>> {
        #[derive(serde::Deserialize)]
        struct Id {
            id: String,
        }
        let mut found = std::collections::BTreeSet::new();
        for chunk in ids.chunks(500) {
            let condition = ids_condition(chunk, filter);
            let rows: Vec<Id> = self.scan_rows(table, Some(&condition)).await?;
            found.extend(rows.into_iter().map(|r| r.id));
        }
        Ok(found)
    }

    /// Rows of `table` whose `id` is one of `ids` and that match `filter`, as `T`s: a
    /// thousand ids per scan.
    pub async fn rows_with_ids<T: serde::de::DeserializeOwned>(
        &self,
        table: &str,
        ids: &[String],
        filter: Option<&str>,
    ) -> Result<Vec<T>> {
        let mut rows = Vec::new();
        for chunk in ids.chunks(1000) {
            let condition = ids_condition(chunk, filter);
            rows.extend(self.scan_rows::<T>(table, Some(&condition)).await?);
        }
        Ok(rows)
    }

    /// The whole `memories` rows whose `id` is one of `ids` (and that match `filter`), each
    /// with its vector when `vectors` (`None` where it has none): rows to change and write
    /// back (`upsert_memories`). A thousand ids per scan.
    pub async fn memories_with_ids(
        &self,
        ids: &[String],
        filter: Option<&str>,
        vectors: bool,
    ) -> Result<(Vec<MemoryRow>, Vec<Option<Vec<f32>>>)> {
        let mut columns = crate::model::typed::columns_of::<MemoryRow>();
        if vectors {
            columns.push("embedding".into());
        }
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        let (mut rows, mut vecs) = (Vec::new(), Vec::new());
        for chunk in ids.chunks(1000) {
            let condition = ids_condition(chunk, filter);
            let batches = self
                .scan_columns("memories", Some(&condition), &columns)
                .await?;
            rows.extend(crate::model::typed::rows_of::<MemoryRow>(
                "memories", &batches,
            )?);
            if vectors {
                vecs.extend(crate::model::typed::optional_vectors_of(
                    "memories",
                    &batches,
                    "embedding",
                )?);
            }
        }
        Ok((rows, vecs))
    }

    /// Writes whole `memories` rows (with their vectors, `None`: none) in one commit, merged
    /// on `id`: a row of an existing id replaces it.
    pub async fn upsert_memories(
        &self,
        rows: &[MemoryRow],
        vectors: &[Option<Vec<f32>>],
        now: i64,
    ) -> Result<WriteStats> {
        let batch = crate::model::typed::memory_batch(rows, vectors, self.embedding_dim(), now)
            .map_err(StoreError::Rows)?;
        self.upsert_batch(&MEMORIES, batch).await
    }

    /// Writes review items in one commit, merged on their id.
    pub async fn upsert_review_items(&self, items: &[ReviewItem], now: i64) -> Result<WriteStats> {
        let batch = crate::model::typed::review_batch(items, now).map_err(StoreError::Rows)?;
        self.upsert_batch(&crate::model::schema::REVIEW_QUEUE, batch)
            .await
    }

    /// Writes whole `entities` rows (with their vectors) in one commit, merged on their id.
    pub async fn upsert_entities(&self, rows: &[EntityRow], now: i64) -> Result<WriteStats> {
        let batch = crate::model::typed::entity_batch(rows, self.embedding_dim(), now)
            .map_err(StoreError::Rows)?;
        self.upsert_batch(&crate::model::schema::ENTITIES, batch)
            .await
    }

    /// Writes `memory_entities` rows in one commit, merged on (memory, entity).
    pub async fn upsert_memory_entities(&self, rows: &[MemoryEntityRow]) -> Result<WriteStats> {
        let batch = crate::model::typed::memory_entity_batch(rows).map_err(StoreError::Rows)?;
        self.upsert_batch(&crate::model::schema::MEMORY_ENTITIES, batch)
            .await
    }

    /// Writes `entity_scans` rows in one commit, merged on the memory id.
    pub async fn upsert_entity_scans(&self, rows: &[EntityScanRow]) -> Result<WriteStats> {
        let batch = crate::model::typed::entity_scan_batch(rows).map_err(StoreError::Rows)?;
        self.upsert_batch(&crate::model::schema::ENTITY_SCANS, batch)
            .await
    }

    /// Writes `links` rows in one commit, merged on their key (source, target, type).
    pub async fn upsert_links(&self, rows: &[LinkRow], now: i64) -> Result<WriteStats> {
        let batch = crate::model::typed::link_batch(rows, now).map_err(StoreError::Rows)?;
        self.upsert_batch(&LINKS, batch).await
    }

    /// The distinct `user_id`s of a table, sorted.
    pub async fn distinct_users(&self, table: &str) -> Result<Vec<String>> {
        #[derive(serde::Deserialize)]
        struct Owner {
            user_id: Option<String>,
        }
        let users: std::collections::BTreeSet<String> = self
            .scan_rows::<Owner>(table, None)
            .await?
            .into_iter()
            .filter_map(|r| r.user_id)
            .collect();
        Ok(users.into_iter().collect())
    }

    /// Reads some columns of a table (optionally filtered).
    pub async fn scan_columns(
        &self,
        table: &str,
        filter: Option<&str>,
        columns: &[&str],
    ) -> Result<Vec<RecordBatch>> {
        Ok(self
            .stream_columns(table, filter, columns)
            .await?
            .try_collect()
            .await?)
    }

    /// The rows of a table (optionally filtered) as `T`s: the columns read are `T`'s fields
    /// (`model::typed`).
    pub async fn scan_rows<T: serde::de::DeserializeOwned>(
        &self,
        table: &str,
        filter: Option<&str>,
    ) -> Result<Vec<T>> {
        let columns = crate::model::typed::columns_of::<T>();
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        let batches = self.scan_columns(table, filter, &columns).await?;
        Ok(crate::model::typed::rows_of(table, &batches)?)
    }

    /// Like `scan_rows`, with each row's vector (`vector_column`, filtered to be present)
    /// read beside it: the rows, and their vectors one after another.
    pub async fn scan_rows_with_vectors<T: serde::de::DeserializeOwned>(
        &self,
        table: &str,
        filter: &str,
        vector_column: &str,
    ) -> Result<(Vec<T>, Vec<f32>)> {
        let mut columns = crate::model::typed::columns_of::<T>();
        columns.push(vector_column.to_string());
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        let filter = format!("({filter}) AND {vector_column} IS NOT NULL");
        let batches = self.scan_columns(table, Some(&filter), &columns).await?;
        let rows = crate::model::typed::rows_of(table, &batches)?;
        let vectors =
            crate::model::typed::vectors_of(table, &batches, vector_column, self.embedding_dim())?;
        Ok((rows, vectors))
    }

    /// Streams some columns of a table (optionally filtered), batch by batch.
    pub async fn stream_columns(
        &self,
        table: &str,
        filter: Option<&str>,
        columns: &[&str],
    ) -> Result<lancedb::arrow::SendableRecordBatchStream> {
        let table = self.table(table).await?;
        let mut query = table.query().select(Select::columns(columns));
        if let Some(filter) = filter {
            query = query.only_if(filter);
        }
        Ok(query.execute().await?)
    }

    /// Sets columns of the rows matching `predicate` to SQL expressions, in one commit, and
    /// returns how many rows changed. The predicate is checked by the same commit that writes:
    /// a conditional update (`status = 'ready'` to `applying`) that another writer got to first
    /// changes no row. A commit lost to a concurrent writer is an error, not zero rows.
    pub async fn update_where(
        &self,
        table: &str,
        predicate: &str,
        columns: &[(&str, String)],
    ) -> Result<u64> {
        let table = self.table(table).await?;
        let mut update = table.update().only_if(predicate);
        for (name, expression) in columns {
            update = update.column(*name, expression.clone());
        }
        Ok(update.execute().await?.rows_updated)
    }

    /// Deletes the rows matching `predicate`, in one commit.
    pub async fn delete_where(&self, table: &str, predicate: &str) -> Result<()> {
        self.table(table).await?.delete(predicate).await?;
        Ok(())
    }

    /// Deletes links by their key (source_id, target_id, link_type), 200 to a commit.
    pub async fn delete_links(&self, keys: &[(&str, &str, &str)]) -> Result<()> {
        for chunk in keys.chunks(200) {
            let predicate = chunk
                .iter()
                .map(|(s, t, ty)| {
                    format!(
                        "(source_id = {} AND target_id = {} AND link_type = {})",
                        sql_string(s),
                        sql_string(t),
                        sql_string(ty)
                    )
                })
                .collect::<Vec<_>>()
                .join(" OR ");
            self.delete_where("links", &predicate).await?;
        }
        Ok(())
    }

    /// Merges the small fragments that many small commits leave into larger files, by
    /// `policy` (see `compact_table`). Returns
    /// false when a concurrent writer's commit preempted it (another shard's run, say): the
    /// fragments stay as they are, which only costs read speed until the next compaction
    /// (`memlife optimize`), so that is not an error.
    pub async fn compact(&self, table: &str, policy: &maintain::CompactionPolicy) -> Result<bool> {
        match self
            .compact_table(table, policy, &std::collections::HashSet::new())
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.is_commit_conflict() => {
                tracing::info!("compaction of {} left for later: {e}", self.uri);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// The stream behind `scan`, for tables too large to hold.
    pub async fn scan_stream(
        &self,
        table: &str,
        filter: Option<&str>,
    ) -> Result<(SchemaRef, lancedb::arrow::SendableRecordBatchStream)> {
        let table = self.table(table).await?;
        let schema = table.schema().await?;
        let mut query = table.query().select(Select::All);
        if let Some(filter) = filter {
            query = query.only_if(filter);
        }
        Ok((schema, query.execute().await?))
    }
}

/// A table as it was when `Store::open_view` opened it.
pub struct TableView(Table);

impl TableView {
    pub async fn version(&self) -> Result<u64> {
        Ok(self.0.version().await?)
    }

    /// The rows matching `filter`, as `T`s (the columns read are `T`'s fields).
    pub async fn rows_where<T: serde::de::DeserializeOwned>(
        &self,
        filter: datafusion::logical_expr::Expr,
    ) -> Result<Vec<T>> {
        let columns = crate::model::typed::columns_of::<T>();
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        let batches: Vec<RecordBatch> = self
            .0
            .query()
            .only_if_expr(filter)
            .select(Select::columns(&columns))
            .execute()
            .await?
            .try_collect()
            .await?;
        Ok(crate::model::typed::rows_of(self.0.name(), &batches)?)
    }
}

/// `id IN (ids)`, within `filter` when there is one.
fn ids_condition(ids: &[String], filter: Option<&str>) -> String {
    let condition = format!("id IN ({})", sql_list(ids));
    match filter {
        Some(filter) => format!("({filter}) AND {condition}"),
        None => condition,
    }
}

/// Quotes a value as a SQL string literal (for Lance filters and DataFusion alike).
pub fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// String literals as a SQL list (`'a', 'b'`), for `IN (...)`.
pub fn sql_list<S: AsRef<str>>(values: &[S]) -> String {
    values
        .iter()
        .map(AsRef::as_ref)
        .map(sql_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A UTC timestamp (microseconds) as a SQL timestamp literal.
/// A predicate on `user_id` selecting exactly `users` (none: a predicate no row meets, since
/// user ids are never empty).
pub fn users_in(users: &[String]) -> String {
    if users.is_empty() {
        "user_id = ''".to_string()
    } else {
        format!("user_id IN ({})", sql_list(users))
    }
}

pub fn sql_timestamp(micros: i64) -> String {
    let text = crate::model::encoding::format_timestamp(micros);
    format!("TIMESTAMP '{}'", text.trim_end_matches('Z'))
}

/// A URI without a scheme is a local folder: make it absolute. lancedb takes any URI that
/// starts with "db" (a folder named `db`, `dbfiles`, ...) for a LanceDB Cloud address.
fn local_path_as_absolute(uri: &str) -> String {
    if uri.contains("://") {
        return uri.to_string();
    }
    std::path::absolute(uri)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| uri.to_string())
}

fn check_version(uri: &str, found: i64) -> Result<()> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            uri: uri.to_string(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < 1 {
        return Err(StoreError::NoMigration {
            uri: uri.to_string(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

fn parse_meta(key: &str, value: &str) -> Result<i64> {
    value
        .trim()
        .parse::<i64>()
        .map_err(|_| StoreError::BadMeta {
            key: key.to_string(),
            value: value.to_string(),
        })
}

async fn read_meta(
    connection: &lancedb::Connection,
    existing: &[String],
) -> Result<BTreeMap<String, String>> {
    let mut meta = BTreeMap::new();
    if !existing.iter().any(|n| n == META.name) {
        return Ok(meta);
    }
    let table = connection.open_table(META.name).execute().await?;
    let batches: Vec<RecordBatch> = table
        .query()
        .select(Select::All)
        .execute()
        .await?
        .try_collect()
        .await?;
    for batch in batches {
        let (Some(keys), Some(values)) =
            (batch.column_by_name("key"), batch.column_by_name("value"))
        else {
            continue;
        };
        let (keys, values) = (keys.as_string::<i32>(), values.as_string::<i32>());
        for i in 0..batch.num_rows() {
            if !keys.is_null(i) && !values.is_null(i) {
                meta.insert(keys.value(i).to_string(), values.value(i).to_string());
            }
        }
    }
    Ok(meta)
}

/// The meta key under which a migration records when it created a table.
const TABLE_CREATED: &str = "table_created:";

/// Overwrites a meta entry; used by tests of version checks and by migrations.
pub async fn set_meta(store: &Store, key: &str, value: &str) -> Result<()> {
    store.write_meta(&[(key, value.to_string())]).await
}

/// Rows as JSON objects keyed by column name (timestamps as RFC 3339 text): the slow, simple
/// path for small control tables (runs, llm_batches), never for memories in bulk.
/// Runs `memlife undo` reverted from the tables' versions (their UNDO rows name them, written
/// before anything was reverted): what they logged no longer stands, so jobs that resume or
/// remember from the audit log leave it out.
pub async fn undone_runs(store: &Store) -> anyhow::Result<Vec<String>> {
    let filter = "operation = 'UNDO' AND classification LIKE 'REVERTED %' AND target_id IN \
                  ('memories', 'links', 'entities', 'memory_entities', 'clusters', \
                  'entity_scans', 'review_queue', 'anchors')";
    let mut runs: Vec<String> = json_rows(
        &store
            .scan_columns("audit_log", Some(filter), &["source_ids"])
            .await?,
    )
    .iter()
    .filter_map(|r| list_of(&r["source_ids"]).into_iter().next())
    .collect();
    runs.sort();
    runs.dedup();
    Ok(runs)
}

/// `filter` without the audit rows of undone runs.
pub async fn without_undone(store: &Store, filter: &str) -> anyhow::Result<String> {
    let undone = undone_runs(store).await?;
    Ok(if undone.is_empty() {
        filter.to_string()
    } else {
        format!("({filter}) AND run_id NOT IN ({})", sql_list(&undone))
    })
}

/// The options a run was started with (`runs.params`), `Null` when the run or its params
/// are gone: what a batch applier reads to apply with the submitting run's options.
pub async fn run_params(store: &Store, run_id: &str) -> anyhow::Result<serde_json::Value> {
    let filter = format!("run_id = {}", sql_string(run_id));
    #[derive(serde::Deserialize)]
    struct Run {
        params: Option<String>,
    }
    let runs: Vec<Run> = store.scan_rows("runs", Some(&filter)).await?;
    Ok(runs
        .into_iter()
        .filter_map(|r| r.params)
        .next_back()
        .and_then(|p| serde_json::from_str(&p).ok())
        .unwrap_or(serde_json::Value::Null))
}

pub fn json_rows(batches: &[RecordBatch]) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let mut rows = Vec::new();
    for batch in batches {
        let schema = batch.schema();
        for row in 0..batch.num_rows() {
            let mut object = serde_json::Map::new();
            for (field, column) in schema.fields().iter().zip(batch.columns()) {
                object.insert(
                    field.name().clone(),
                    crate::model::encoding::json_value(column.as_ref(), row),
                );
            }
            rows.push(object);
        }
    }
    rows
}

/// A text column of a `json_rows` row ("" when null or absent).
pub fn text_of(row: &serde_json::Map<String, serde_json::Value>, field: &str) -> String {
    row.get(field)
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// A timestamp column of a `json_rows` row, in microseconds.
pub fn time_of(row: &serde_json::Map<String, serde_json::Value>, field: &str) -> Option<i64> {
    row.get(field)
        .and_then(serde_json::Value::as_str)
        .and_then(crate::model::encoding::parse_timestamp)
}

/// A list-of-text value of a `json_rows` row (empty when null).
pub fn list_of(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Builds a batch of `spec` rows from JSON objects, validated like imported rows.
pub fn batch_from_json(
    spec: &'static TableSpec,
    embedding_dim: usize,
    now_micros: i64,
    rows: &[serde_json::Value],
) -> std::result::Result<RecordBatch, String> {
    let mut builder = RowBuilder::new(spec, embedding_dim, now_micros);
    for (index, row) in rows.iter().enumerate() {
        builder
            .append(|_, name| match row.get(name) {
                None => Cell::Missing,
                Some(serde_json::Value::Null) => Cell::Null,
                Some(value) => Cell::Json(value),
            })
            .map_err(|e| format!("{} row {index}: {e}", spec.name))?;
    }
    builder.finish().map_err(|e| e.to_string())
}
