//! Typed rows: a job reads a projection of a table as a Rust type whose fields name the
//! columns. The column list is derived from the type (`columns_of`), and batches become rows
//! by column name (`rows_of`), never by position or through JSON maps.
//!
//! Arrow types map to field types as serde_arrow maps them: `Utf8` to `String`, timestamps
//! to `i64` microseconds, `FixedSizeList<Float32>` to `Vec<f32>`, nullable columns to
//! `Option`. Columns a batch has beyond the type's fields are ignored.

use arrow::array::RecordBatch;
use serde::de::DeserializeOwned;

pub use crate::logic::rows::{
    AnchorRow, BatchRecord, ClusterRow, EntityRow, EntityScanRow, LinkRow, MemoryEntityRow,
    MemoryRow, ReviewItem,
};
pub use crate::logic::targets::HistoryRow;
use crate::model::encoding::Cell;
use crate::model::rows::RowBuilder;
use crate::model::schema::{
    ANCHORS, BENCH_RUNS, CLUSTERS, ENTITIES, ENTITY_SCANS, Kind, LINKS, LLM_BATCHES, MEMORIES,
    MEMORY_ENTITIES, REVIEW_QUEUE, TableSpec,
};
use serde_arrow::schema::{SchemaLike, TracingOptions};

/// A batch that does not hold the rows a type expects: a column missing or of another type.
#[derive(Debug, thiserror::Error)]
#[error("rows of {table} do not read as {row}: {reason}")]
pub struct RowTypeError {
    pub table: String,
    pub row: &'static str,
    pub reason: String,
}

/// The columns a row type reads: its fields' names, in declaration order.
pub fn columns_of<T: DeserializeOwned>() -> Vec<String> {
    let fields = Vec::<arrow::datatypes::FieldRef>::from_type::<T>(
        TracingOptions::default().allow_null_fields(true),
    )
    // A row type is a struct of plain fields, fixed at compile time: tracing it fails only
    // for a type that is not one, a programming error every read of it would show at once.
    .unwrap_or_else(|e| panic!("{} is not a row type: {e}", std::any::type_name::<T>()));
    fields.iter().map(|f| f.name().clone()).collect()
}

/// The rows of `batches` (read from `table`) as `T`s.
pub fn rows_of<T: DeserializeOwned>(
    table: &str,
    batches: &[RecordBatch],
) -> Result<Vec<T>, RowTypeError> {
    let mut rows = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    // Only `T`'s columns: serde skips a column `T` lacks value by value, and a vector column
    // read beside the rows (`scan_rows_with_vectors`) cost 384 skipped floats a row (a third
    // of an integrate run's time, session 32).
    let wanted = columns_of::<T>();
    for batch in batches {
        let keep: Vec<usize> = (0..batch.num_columns())
            .filter(|&i| wanted.iter().any(|w| w == batch.schema().field(i).name()))
            .collect();
        let projected;
        let batch = match keep.len() == batch.num_columns() {
            true => batch,
            false => {
                projected = batch.project(&keep).map_err(|e| RowTypeError {
                    table: table.to_string(),
                    row: std::any::type_name::<T>(),
                    reason: e.to_string(),
                })?;
                &projected
            }
        };
        let part: Vec<T> = serde_arrow::from_record_batch(batch).map_err(|e| RowTypeError {
            table: table.to_string(),
            row: std::any::type_name::<T>(),
            reason: e.to_string(),
        })?;
        rows.extend(part);
    }
    Ok(rows)
}

/// The vectors of `column` (a fixed-size list of f32) of every row of `batches`, one after
/// another: `dim` floats per row. Read column-wise, not row by row (a clustering scan holds up
/// to 200k of them); a null vector is an error, so scans filter on `column IS NOT NULL`.
pub fn vectors_of(
    table: &str,
    batches: &[RecordBatch],
    column: &str,
    dim: usize,
) -> Result<Vec<f32>, RowTypeError> {
    use arrow::array::{Array, AsArray};
    let error = |reason: String| RowTypeError {
        table: table.to_string(),
        row: "vectors",
        reason,
    };
    let mut out =
        Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum::<usize>() * dim);
    for batch in batches {
        let list = batch
            .column_by_name(column)
            .and_then(|c| c.as_fixed_size_list_opt())
            .ok_or_else(|| error(format!("no fixed-size list column {column}")))?;
        if list.value_length() as usize != dim {
            return Err(error(format!(
                "{column} holds vectors of {} floats, not {dim}",
                list.value_length()
            )));
        }
        if list.null_count() > 0 {
            return Err(error(format!(
                "{column} is null in {} rows",
                list.null_count()
            )));
        }
        let values = list
            .values()
            .as_primitive_opt::<arrow::datatypes::Float32Type>()
            .ok_or_else(|| error(format!("{column} does not hold f32 values")))?;
        let start = list.offset() * dim;
        out.extend_from_slice(&values.values()[start..start + list.len() * dim]);
    }
    Ok(out)
}

/// The vectors of `column` (a fixed-size list of f32) row by row, `None` where null: for reads
/// of a few rows whose vectors may not be written yet (a whole row read to be written back).
pub fn optional_vectors_of(
    table: &str,
    batches: &[RecordBatch],
    column: &str,
) -> Result<Vec<Option<Vec<f32>>>, RowTypeError> {
    use arrow::array::{Array, AsArray};
    let error = |reason: String| RowTypeError {
        table: table.to_string(),
        row: "vectors",
        reason,
    };
    let mut out = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for batch in batches {
        let list = batch
            .column_by_name(column)
            .and_then(|c| c.as_fixed_size_list_opt())
            .ok_or_else(|| error(format!("no fixed-size list column {column}")))?;
        let values = list
            .values()
            .as_primitive_opt::<arrow::datatypes::Float32Type>()
            .ok_or_else(|| error(format!("{column} does not hold f32 values")))?;
        let dim = list.value_length() as usize;
        for i in 0..list.len() {
            let start = (list.offset() + i) * dim;
            out.push(
                list.is_valid(i)
                    .then(|| values.values()[start..start + dim].to_vec()),
            );
        }
    }
    Ok(out)
}

/// The input cell of `memories` column `name` in `row` (`vector` for `embedding`).
fn memory_cell<'a>(row: &'a MemoryRow, vector: Option<&'a [f32]>, name: &str) -> Cell<'a> {
    let (text, time) = (text_cell, time_cell);
    let list = |v: &'a [String]| Cell::StrList(v.iter().map(|s| Some(s.as_str())).collect());
    match name {
        "id" => Cell::Str(&row.id),
        "user_id" => Cell::Str(&row.user_id),
        "text" => Cell::Str(&row.text),
        "kind" => Cell::Str(&row.kind),
        "session_id" => text(&row.session_id),
        "source" => text(&row.source),
        "embedding" => vector.map_or(Cell::Null, Cell::Floats),
        // A model is recorded beside a vector only (`check`: a memory without one names none).
        "embedding_model" if vector.is_none() => Cell::Null,
        "embedding_model" => text(&row.embedding_model),
        "importance" => Cell::F64(row.importance),
        "salience" => Cell::F64(row.salience),
        "confidence" => Cell::F64(row.confidence),
        "emotional_salience" => Cell::F64(row.emotional_salience),
        "retention" => Cell::F64(row.retention),
        "state" => Cell::Str(&row.state),
        "tier" => Cell::Str(&row.tier),
        "access_count" => Cell::I64(row.access_count),
        "recall_frequency" => Cell::I64(row.recall_frequency),
        "last_accessed_at" => time(row.last_accessed_at),
        "last_recall_interval_days" => Cell::F64(row.last_recall_interval_days),
        "decay_gradient" => Cell::F64(row.decay_gradient),
        "ttl_policy" => Cell::Str(&row.ttl_policy),
        "sensitivity" => Cell::Str(&row.sensitivity),
        "created_at" => Cell::Timestamp(row.created_at),
        "updated_at" => Cell::Timestamp(row.updated_at),
        "happens_at" => time(row.happens_at),
        "expires_at" => time(row.expires_at),
        "valid_from" => Cell::Timestamp(row.valid_from),
        "valid_until" => time(row.valid_until),
        "superseded_by" => text(&row.superseded_by),
        "supersession_chain_id" => text(&row.supersession_chain_id),
        "archived_at" => time(row.archived_at),
        "consolidates_memory_ids" => list(&row.consolidates_memory_ids),
        "tags" => list(&row.tags),
        "refinement_rejection_count" => Cell::I64(row.refinement_rejection_count),
        "last_refined_at" => time(row.last_refined_at),
        "salience_anchor" => row.salience_anchor.map_or(Cell::Null, Cell::F64),
        "link_mark" => row.link_mark.map_or(Cell::Null, Cell::I64),
        "entity_mark" => row.entity_mark.map_or(Cell::Null, Cell::I64),
        "scores_due_at" => time(row.scores_due_at),
        _ => Cell::Missing,
    }
}

/// Typed rows of `spec` as one batch of the table's schema, each validated as an imported
/// row is (`RowBuilder`): `cell(index, row, column)` gives a row's input cells, `named(row)`
/// how an error names the row.
fn batch_of<'r, T>(
    spec: &'static TableSpec,
    (embedding_dim, now): (usize, i64),
    rows: &'r [T],
    cell: impl Fn(usize, &'r T, &str) -> Cell<'r>,
    named: impl Fn(&T) -> String,
) -> Result<RecordBatch, String> {
    let mut builder = RowBuilder::new(spec, embedding_dim, now);
    for (index, row) in rows.iter().enumerate() {
        builder
            .append(|_, name| cell(index, row, name))
            .map_err(|e| format!("{} row {index} ({}): {e}", spec.name, named(row)))?;
    }
    builder.finish().map_err(|e| e.to_string())
}

fn text_cell(v: &Option<String>) -> Cell<'_> {
    v.as_deref().map_or(Cell::Null, Cell::Str)
}

fn time_cell<'a>(v: Option<i64>) -> Cell<'a> {
    v.map_or(Cell::Null, Cell::Timestamp)
}

/// `memories` rows and their vectors (`None`: no vector) as one batch of the table's schema.
pub fn memory_batch(
    rows: &[MemoryRow],
    vectors: &[Option<Vec<f32>>],
    embedding_dim: usize,
    now: i64,
) -> Result<RecordBatch, String> {
    let cell = |index: usize, row, name: &str| {
        memory_cell(row, vectors.get(index).and_then(|v| v.as_deref()), name)
    };
    batch_of(&MEMORIES, (embedding_dim, now), rows, cell, |r| {
        r.id.clone()
    })
}

/// `links` rows as one batch of the table's schema.
pub fn link_batch(rows: &[LinkRow], now: i64) -> Result<RecordBatch, String> {
    let named = |r: &LinkRow| format!("{} -> {} {}", r.source_id, r.target_id, r.link_type);
    batch_of(&LINKS, (0, now), rows, |_, r, n| link_cell(r, n), named)
}

fn link_cell<'a>(row: &'a LinkRow, name: &str) -> Cell<'a> {
    match name {
        "source_id" => Cell::Str(&row.source_id),
        "target_id" => Cell::Str(&row.target_id),
        "user_id" => Cell::Str(&row.user_id),
        "link_type" => Cell::Str(&row.link_type),
        "confidence" => Cell::F64(row.confidence),
        "reasoning" => text_cell(&row.reasoning),
        "origin" => Cell::Str(&row.origin),
        "created_at" => Cell::Timestamp(row.created_at),
        _ => Cell::Missing,
    }
}

/// `entities` rows, with their vectors, as one batch of the table's schema.
pub fn entity_batch(
    rows: &[EntityRow],
    embedding_dim: usize,
    now: i64,
) -> Result<RecordBatch, String> {
    let named = |r: &EntityRow| format!("{} '{}'", r.id, r.name);
    let cell = |_, r, n: &str| entity_cell(r, n);
    batch_of(&ENTITIES, (embedding_dim, now), rows, cell, named)
}

fn entity_cell<'a>(row: &'a EntityRow, name: &str) -> Cell<'a> {
    let vector = |v: &'a Option<Vec<f32>>| v.as_deref().map_or(Cell::Null, Cell::Floats);
    match name {
        "id" => Cell::Str(&row.id),
        "user_id" => Cell::Str(&row.user_id),
        "name" => Cell::Str(&row.name),
        "entity_type" => Cell::Str(&row.entity_type),
        "description" => text_cell(&row.description),
        "notes" => Cell::Notes(&row.notes),
        "is_dirty" => Cell::Bool(row.is_dirty),
        "embedding" => vector(&row.embedding),
        "embedding_model" => text_cell(&row.embedding_model),
        "created_at" => Cell::Timestamp(row.created_at),
        "updated_at" => Cell::Timestamp(row.updated_at),
        "last_seen_at" => Cell::Timestamp(row.last_seen_at),
        "aliases" => Cell::StrList(row.aliases.iter().map(|a| Some(a.as_str())).collect()),
        "archived_at" => time_cell(row.archived_at),
        "name_embedding" => vector(&row.name_embedding),
        _ => Cell::Missing,
    }
}

/// `memory_entities` rows as one batch of the table's schema.
pub fn memory_entity_batch(rows: &[MemoryEntityRow]) -> Result<RecordBatch, String> {
    fn cell<'a>(r: &'a MemoryEntityRow, name: &str) -> Cell<'a> {
        match name {
            "memory_id" => Cell::Str(&r.memory_id),
            "entity_id" => Cell::Str(&r.entity_id),
            "user_id" => Cell::Str(&r.user_id),
            _ => Cell::Missing,
        }
    }
    let named = |r: &MemoryEntityRow| format!("{} names {}", r.memory_id, r.entity_id);
    batch_of(&MEMORY_ENTITIES, (0, 0), rows, |_, r, n| cell(r, n), named)
}

/// `entity_scans` rows as one batch of the table's schema.
pub fn entity_scan_batch(rows: &[EntityScanRow]) -> Result<RecordBatch, String> {
    fn cell<'a>(r: &'a EntityScanRow, name: &str) -> Cell<'a> {
        match name {
            "memory_id" => Cell::Str(&r.memory_id),
            "user_id" => Cell::Str(&r.user_id),
            "text_hash" => Cell::Str(&r.text_hash),
            "extractor" => Cell::Str(&r.extractor),
            "entity_count" => Cell::I64(r.entity_count),
            "scanned_at" => Cell::Timestamp(r.scanned_at),
            _ => Cell::Missing,
        }
    }
    let named = |r: &EntityScanRow| r.memory_id.clone();
    batch_of(&ENTITY_SCANS, (0, 0), rows, |_, r, n| cell(r, n), named)
}

/// `llm_batches` records as one batch of the table's schema.
pub fn batch_record_batch(records: &[BatchRecord]) -> Result<RecordBatch, String> {
    fn cell<'a>(r: &'a BatchRecord, name: &str) -> Cell<'a> {
        match name {
            "batch_key" => Cell::Str(&r.batch_key),
            "job" => Cell::Str(&r.job),
            "run_id" => Cell::Str(&r.run_id),
            "user_id" => text_cell(&r.user_id),
            "task" => Cell::Str(&r.task),
            "provider" => Cell::Str(&r.provider),
            "model" => text_cell(&r.model),
            "status" => Cell::Str(&r.status),
            "remote_batch_id" => text_cell(&r.remote_batch_id),
            "input_file_id" => text_cell(&r.input_file_id),
            "output_file_id" => text_cell(&r.output_file_id),
            "error_file_id" => text_cell(&r.error_file_id),
            "request_count" => Cell::I64(r.request_count),
            "items" => Cell::Str(&r.items),
            "attempts" => Cell::I64(r.attempts),
            "submitted_at" => Cell::Timestamp(r.submitted_at),
            "updated_at" => Cell::Timestamp(r.updated_at),
            "claimed_at" => time_cell(r.claimed_at),
            "claim_token" => text_cell(&r.claim_token),
            "applied_at" => time_cell(r.applied_at),
            "error" => text_cell(&r.error),
            "counts" => text_cell(&r.counts),
            _ => Cell::Missing,
        }
    }
    let named = |r: &BatchRecord| r.batch_key.clone();
    batch_of(&LLM_BATCHES, (0, 0), records, |_, r, n| cell(r, n), named)
}

/// `anchors` rows, each with its origin and live vectors, as one batch of the table's schema.
pub fn anchor_batch(
    rows: &[(AnchorRow, Vec<f32>, Vec<f32>)],
    embedding_dim: usize,
) -> Result<RecordBatch, String> {
    fn cell<'a>(r: &'a (AnchorRow, Vec<f32>, Vec<f32>), name: &str) -> Cell<'a> {
        let (row, origin, live) = r;
        match name {
            "user_id" => Cell::Str(&row.user_id),
            "embedding_model" => Cell::Str(&row.embedding_model),
            "origin" => Cell::Floats(origin),
            "live" => Cell::Floats(live),
            "origin_at" => Cell::Timestamp(row.origin_at),
            "updated_at" => Cell::Timestamp(row.updated_at),
            "drift" => Cell::F64(row.drift),
            "narratives" => Cell::I64(row.narratives),
            "last_narrative_at" => Cell::Timestamp(row.last_narrative_at),
            _ => Cell::Missing,
        }
    }
    let named = |r: &(AnchorRow, Vec<f32>, Vec<f32>)| r.0.user_id.clone();
    batch_of(
        &ANCHORS,
        (embedding_dim, 0),
        rows,
        |_, r, n| cell(r, n),
        named,
    )
}

/// `bench_runs` rows as one batch of the table's schema (ids derived from run and target).
pub fn bench_run_batch(rows: &[HistoryRow]) -> Result<RecordBatch, String> {
    fn cell<'a>(r: &'a HistoryRow, name: &str) -> Cell<'a> {
        let number = |v: Option<f64>| v.map_or(Cell::Null, Cell::F64);
        match name {
            "run_id" => Cell::Str(&r.run_id),
            "target" => Cell::Str(&r.target),
            "title" => Cell::Str(&r.title),
            "command" => Cell::Str(&r.command),
            "figure" => Cell::Str(&r.figure),
            "bound_text" => Cell::Str(&r.bound_text),
            "bound" => number(r.bound),
            "value" => number(r.value),
            "unit" => Cell::Str(&r.unit),
            "status" => Cell::Str(&r.status),
            "reason" => text_cell(&r.reason),
            "seconds" => Cell::F64(r.seconds),
            "quick" => Cell::Bool(r.quick),
            "cpu" => Cell::Str(&r.cpu),
            "kernel" => Cell::Str(&r.kernel),
            "profile" => Cell::Str(&r.profile),
            "commit" => Cell::Str(&r.commit),
            "created_at" => Cell::Timestamp(r.created_at),
            _ => Cell::Missing,
        }
    }
    let named = |r: &HistoryRow| format!("{} of run {}", r.target, r.run_id);
    batch_of(&BENCH_RUNS, (0, 0), rows, |_, r, n| cell(r, n), named)
}

/// `clusters` rows as one batch of the table's schema (an empty `cluster_id` derived).
pub fn cluster_batch(rows: &[ClusterRow]) -> Result<RecordBatch, String> {
    fn cell<'a>(r: &'a ClusterRow, name: &str) -> Cell<'a> {
        let list = |v: &'a [String]| Cell::StrList(v.iter().map(|s| Some(s.as_str())).collect());
        match name {
            "cluster_id" if r.cluster_id.is_empty() => Cell::Missing,
            "cluster_id" => Cell::Str(&r.cluster_id),
            "run_id" => Cell::Str(&r.run_id),
            "user_id" => Cell::Str(&r.user_id),
            "mode" => Cell::Str(&r.mode),
            "seed_id" => Cell::Str(&r.seed_id),
            "member_ids" => list(&r.member_ids),
            "similarities" => Cell::Str(&r.similarities),
            "confidence" => r.confidence.map_or(Cell::Null, Cell::F64),
            "threshold" => r.threshold.map_or(Cell::Null, Cell::F64),
            "signature" => Cell::Str(&r.signature),
            "created_at" => Cell::Timestamp(r.created_at),
            _ => Cell::Missing,
        }
    }
    let named = |r: &ClusterRow| format!("{} of {}", r.signature, r.user_id);
    batch_of(&CLUSTERS, (0, 0), rows, |_, r, n| cell(r, n), named)
}

/// Rows of `spec` as JSON objects (an audit state's, a review item's fact: times as RFC 3339
/// text) read as typed rows, validated and defaulted as imported rows are. Vector columns
/// are read as null: a logged row holds none, its writer gives them.
fn rows_from_json<T: DeserializeOwned>(
    spec: &'static TableSpec,
    values: &[serde_json::Value],
    embedding_dim: usize,
    now: i64,
) -> Result<Vec<T>, String> {
    let mut builder = RowBuilder::new(spec, embedding_dim, now);
    for (index, value) in values.iter().enumerate() {
        builder
            .append(|at, name| match value.get(name) {
                None => Cell::Missing,
                Some(_) if spec.fields[at].kind == Kind::Embedding => Cell::Null,
                Some(serde_json::Value::Null) => Cell::Null,
                Some(v) => Cell::Json(v),
            })
            .map_err(|e| format!("{} row {index}: {e}", spec.name))?;
    }
    let batch = builder.finish().map_err(|e| e.to_string())?;
    rows_of(spec.name, &[batch]).map_err(|e| e.to_string())
}

/// `memories` rows as JSON objects read as typed rows (`rows_from_json`).
pub fn memories_from_json(
    values: &[serde_json::Value],
    embedding_dim: usize,
    now: i64,
) -> Result<Vec<MemoryRow>, String> {
    rows_from_json(&MEMORIES, values, embedding_dim, now)
}

/// `review_queue` rows as JSON objects read as typed rows (`rows_from_json`).
pub fn review_items_from_json(
    values: &[serde_json::Value],
    now: i64,
) -> Result<Vec<ReviewItem>, String> {
    rows_from_json(&REVIEW_QUEUE, values, 0, now)
}

/// `review_queue` rows as one batch of the table's schema.
pub fn review_batch(items: &[ReviewItem], now: i64) -> Result<RecordBatch, String> {
    batch_of(
        &REVIEW_QUEUE,
        (0, now),
        items,
        |_, i, n| review_cell(i, n),
        |i| i.id.clone(),
    )
}

fn review_cell<'a>(item: &'a ReviewItem, name: &str) -> Cell<'a> {
    match name {
        "id" => Cell::Str(&item.id),
        "run_id" => Cell::Str(&item.run_id),
        "user_id" => Cell::Str(&item.user_id),
        "fact_id" => Cell::Str(&item.fact_id),
        "fact" => Cell::Str(&item.fact),
        "candidate_id" => Cell::Str(&item.candidate_id),
        "candidate_text" => Cell::Str(&item.candidate_text),
        "classification" => Cell::Str(&item.classification),
        "confidence" => Cell::F64(item.confidence),
        "reasoning" => text_cell(&item.reasoning),
        "status" => Cell::Str(&item.status),
        "created_at" => Cell::Timestamp(item.created_at),
        "expires_at" => time_cell(item.expires_at),
        "decided_at" => time_cell(item.decided_at),
        "decided_by_run" => text_cell(&item.decided_by_run),
        _ => Cell::Missing,
    }
}

/// `links` rows as JSON objects read as typed rows (`rows_from_json`).
pub fn links_from_json(values: &[serde_json::Value], now: i64) -> Result<Vec<LinkRow>, String> {
    rows_from_json(&LINKS, values, 0, now)
}

/// A run as the schedule, nightly and optimize read it: when it started and the options it
/// was started with (`runs.params`, JSON: `now` or `clock` hold the run's clock).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct RunStart {
    pub started_at: i64,
    pub params: Option<String>,
}

/// A run's options as `runs.params` holds them (`Null` when absent or unreadable).
fn run_params(params: Option<&str>) -> serde_json::Value {
    params
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or(serde_json::Value::Null)
}

impl RunStart {
    /// The run's options (`Null` when absent or unreadable).
    pub fn params(&self) -> serde_json::Value {
        run_params(self.params.as_deref())
    }

    /// The time an option holds (`now`, `clock`), when it holds one.
    pub fn time_param(&self, key: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        let params = self.params();
        let text = params[key].as_str()?;
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc))
    }
}

/// A run as `undo` reads it: which job, how it ended, its options and the table versions it
/// started and finished at (`runs.table_versions`, JSON).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub job: String,
    pub status: String,
    pub started_at: i64,
    pub params: Option<String>,
    pub table_versions: Option<String>,
}

impl RunRecord {
    /// The run's options (`Null` when absent or unreadable).
    pub fn params(&self) -> serde_json::Value {
        run_params(self.params.as_deref())
    }
}

/// A memory as a judge is shown it (`MemoryView::from(ShownMemory)` in the LLM layer).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct ShownMemory {
    pub id: String,
    pub kind: String,
    pub created_at: i64,
    pub happens_at: Option<i64>,
    pub text: String,
}

/// A live memory, as link and integrate compare it with others (its vector read beside it by
/// `vectors_of`).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct EmbeddedMemory {
    pub id: String,
    pub user_id: String,
    pub kind: String,
    pub created_at: i64,
    pub happens_at: Option<i64>,
    pub text: String,
    pub embedding_model: Option<String>,
}

impl EmbeddedMemory {
    /// The part a judge is shown.
    pub fn shown(self) -> ShownMemory {
        ShownMemory {
            id: self.id,
            kind: self.kind,
            created_at: self.created_at,
            happens_at: self.happens_at,
            text: self.text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        FixedSizeListArray, StringArray, TimestampMicrosecondArray, types::Float32Type,
    };
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use serde::Deserialize;
    use std::sync::Arc;

    #[derive(Debug, Deserialize, PartialEq)]
    struct View {
        id: String,
        created_at: i64,
        happens_at: Option<i64>,
        embedding: Vec<f32>,
    }

    fn batch() -> RecordBatch {
        let utc = Some("UTC".into());
        let schema = Schema::new(vec![
            Field::new("extra", DataType::Utf8, true),
            Field::new(
                "embedding",
                DataType::new_fixed_size_list(DataType::Float32, 2, true),
                true,
            ),
            Field::new(
                "happens_at",
                DataType::Timestamp(TimeUnit::Microsecond, utc.clone()),
                true,
            ),
            Field::new(
                "created_at",
                DataType::Timestamp(TimeUnit::Microsecond, utc),
                false,
            ),
            Field::new("id", DataType::Utf8, false),
        ]);
        let vectors = FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
            vec![
                Some(vec![Some(1.0), Some(2.0)]),
                Some(vec![Some(3.0), Some(4.0)]),
            ],
            2,
        );
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from(vec![Some("x"), None])),
                Arc::new(vectors),
                Arc::new(TimestampMicrosecondArray::from(vec![Some(7), None]).with_timezone("UTC")),
                Arc::new(TimestampMicrosecondArray::from(vec![1, 2]).with_timezone("UTC")),
                Arc::new(StringArray::from(vec!["a", "b"])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn rows_are_read_by_column_name_whatever_the_order() {
        let rows: Vec<View> = rows_of("memories", &[batch()]).unwrap();
        assert_eq!(
            rows,
            vec![
                View {
                    id: "a".into(),
                    created_at: 1,
                    happens_at: Some(7),
                    embedding: vec![1.0, 2.0]
                },
                View {
                    id: "b".into(),
                    created_at: 2,
                    happens_at: None,
                    embedding: vec![3.0, 4.0]
                },
            ]
        );
    }

    #[test]
    fn vectors_are_read_by_column_name_one_row_after_another() {
        assert_eq!(
            vectors_of("memories", &[batch(), batch().slice(1, 1)], "embedding", 2).unwrap(),
            [1.0, 2.0, 3.0, 4.0, 3.0, 4.0]
        );
        let e = vectors_of("memories", &[batch()], "embedding", 3).unwrap_err();
        assert!(e.to_string().contains("vectors of 2 floats, not 3"), "{e}");
        assert!(vectors_of("memories", &[batch()], "text", 2).is_err());
    }

    #[test]
    fn a_memory_row_has_every_column_of_the_table_but_the_vector() {
        assert_eq!(
            columns_of::<MemoryRow>(),
            MEMORIES.columns_except("embedding")
        );
    }

    #[test]
    fn a_link_row_has_every_column_and_reads_back_from_its_json() {
        let names: Vec<&str> = LINKS.fields.iter().map(|f| f.name).collect();
        assert_eq!(columns_of::<LinkRow>(), names);
        let link = LinkRow::judged(("a", "b", "u"), "supersedes", 1.7, "newer", 5_000_000);
        assert_eq!(link.confidence, 1.0, "clamped");
        let back = links_from_json(&[link.to_json()], 0).unwrap();
        assert_eq!(back, vec![link.clone()]);
        let batch = link_batch(std::slice::from_ref(&link), 0).unwrap();
        assert_eq!(
            rows_of::<LinkRow>("links", &[batch]).unwrap(),
            vec![link.clone()]
        );
        let bad = LinkRow {
            link_type: "likes".into(),
            ..link
        };
        let e = link_batch(&[bad], 0).unwrap_err();
        assert!(
            e.contains("links row 0 (a -> b likes)") && e.contains("link_type"),
            "{e}"
        );
    }

    #[test]
    fn a_review_item_has_every_column_and_reads_back_from_its_json() {
        let names: Vec<&str> = REVIEW_QUEUE.fields.iter().map(|f| f.name).collect();
        assert_eq!(columns_of::<ReviewItem>(), names);
        let item = ReviewItem {
            id: "r1".into(),
            run_id: "run".into(),
            user_id: "u".into(),
            fact_id: "f1".into(),
            fact: "{}".into(),
            candidate_id: "m1".into(),
            candidate_text: String::new(),
            classification: "SUPERSEDE".into(),
            confidence: 0.6,
            reasoning: None,
            status: "pending".into(),
            created_at: 1_000_000,
            expires_at: Some(2_000_000),
            decided_at: None,
            decided_by_run: None,
        };
        assert_eq!(
            review_items_from_json(&[item.to_json()], 0).unwrap(),
            vec![item.clone()]
        );
        let batch = review_batch(std::slice::from_ref(&item), 0).unwrap();
        assert_eq!(
            rows_of::<ReviewItem>("review_queue", &[batch]).unwrap(),
            vec![item.clone()]
        );
        let bad = ReviewItem {
            status: "lost".into(),
            ..item
        };
        let e = review_batch(&[bad], 0).unwrap_err();
        assert!(
            e.contains("review_queue row 0 (r1)") && e.contains("status"),
            "{e}"
        );
    }

    #[test]
    fn a_new_memory_row_has_the_tables_defaults() {
        let given = serde_json::json!({
            "id": "m1", "user_id": "u", "text": "Ana moved.", "created_at": "2026-01-02T03:04:05Z"
        });
        let read = memories_from_json(&[given], 2, 0).unwrap();
        let created = crate::model::encoding::parse_timestamp("2026-01-02T03:04:05Z").unwrap();
        let new = MemoryRow {
            id: "m1".into(),
            ..MemoryRow::new("u", "Ana moved.", created)
        };
        assert_eq!(read, vec![new]);
    }

    #[test]
    fn a_memory_row_written_and_read_back_is_the_same_row() {
        let row = MemoryRow {
            id: "m1".into(),
            user_id: "u".into(),
            text: "Ana moved to Porto.".into(),
            kind: "fact".into(),
            session_id: Some(String::new()),
            embedding_model: Some("hash-lexical-v1".into()),
            importance: 0.7,
            salience: 0.6,
            confidence: 0.9,
            retention: 1.0,
            state: "active".into(),
            tier: "warm".into(),
            access_count: 3,
            last_accessed_at: Some(5_000_000),
            decay_gradient: 1.0,
            ttl_policy: "decay".into(),
            sensitivity: "normal".into(),
            created_at: 1_000_000,
            updated_at: 2_000_000,
            valid_from: 1_000_000,
            superseded_by: Some("m2".into()),
            consolidates_memory_ids: vec!["a".into(), "b".into()],
            tags: vec!["moves".into()],
            salience_anchor: Some(0.6),
            ..MemoryRow::default()
        };
        let batch = memory_batch(
            std::slice::from_ref(&row),
            &[Some(vec![0.5, 0.5])],
            2,
            9_000_000,
        )
        .unwrap();
        assert_eq!(batch.schema(), MEMORIES.arrow_schema(2));
        let back: Vec<MemoryRow> = rows_of("memories", std::slice::from_ref(&batch)).unwrap();
        assert_eq!(back, vec![row.clone()]);
        assert_eq!(
            optional_vectors_of("memories", &[batch], "embedding").unwrap(),
            vec![Some(vec![0.5, 0.5])]
        );
        let bad = MemoryRow {
            state: "asleep".into(),
            ..row
        };
        let e = memory_batch(&[bad], &[None], 2, 0).unwrap_err();
        assert!(
            e.contains("memories row 0 (m1)") && e.contains("state"),
            "{e}"
        );
    }

    #[test]
    fn an_entity_row_has_every_column_and_is_written_and_read_back_whole() {
        let names: Vec<&str> = ENTITIES.fields.iter().map(|f| f.name).collect();
        assert_eq!(columns_of::<EntityRow>(), names);
        let note = |text: &str, added_at| crate::logic::rows::Note {
            text: text.into(),
            added_at,
            expires_at: None,
        };
        let row = EntityRow {
            id: "e1".into(),
            description: Some("Ana's sister".into()),
            notes: vec![note("moved twice", 3_000_000), note("likes tea", 2_000_000)],
            embedding: Some(vec![0.25, 0.75]),
            aliases: vec!["Bea".into()],
            ..EntityRow::new("u", "Beatriz", "person", 1_000_000)
        };
        let batch = entity_batch(std::slice::from_ref(&row), 2, 9_000_000).unwrap();
        assert_eq!(batch.schema(), ENTITIES.arrow_schema(2));
        let back: Vec<EntityRow> = rows_of("entities", &[batch]).unwrap();
        assert_eq!(back, vec![row.clone()], "name_embedding stays None");
        let texts: Vec<&str> = row
            .notes_oldest_first()
            .iter()
            .map(|n| n.text.as_str())
            .collect();
        assert_eq!(texts, ["likes tea", "moved twice"]);
        assert!(row.to_json().get("embedding").is_none());
        let empty_note = EntityRow {
            notes: vec![note(" ", 0)],
            ..row.clone()
        };
        let e = entity_batch(&[empty_note], 2, 0).unwrap_err();
        assert!(
            e.contains("entities row 0 (e1 'Beatriz')") && e.contains("note 0"),
            "{e}"
        );
        let bad = EntityRow {
            entity_type: "planet".into(),
            ..row
        };
        assert!(
            entity_batch(&[bad], 2, 0)
                .unwrap_err()
                .contains("entity_type")
        );
    }

    #[test]
    fn entity_link_and_scan_rows_have_every_column() {
        let names =
            |spec: &TableSpec| -> Vec<&str> { spec.fields.iter().map(|f| f.name).collect() };
        assert_eq!(columns_of::<MemoryEntityRow>(), names(&MEMORY_ENTITIES));
        assert_eq!(columns_of::<EntityScanRow>(), names(&ENTITY_SCANS));
        let named = MemoryEntityRow {
            memory_id: "m".into(),
            entity_id: "e".into(),
            user_id: "u".into(),
        };
        let batch = memory_entity_batch(std::slice::from_ref(&named)).unwrap();
        assert_eq!(
            rows_of::<MemoryEntityRow>("memory_entities", &[batch]).unwrap(),
            [named]
        );
        let scan = EntityScanRow {
            memory_id: "m".into(),
            user_id: "u".into(),
            text_hash: "ab12".into(),
            extractor: "rules".into(),
            entity_count: -1,
            scanned_at: 7,
        };
        let e = entity_scan_batch(&[scan]).unwrap_err();
        assert!(
            e.contains("entity_scans row 0 (m)") && e.contains("entity_count"),
            "{e}"
        );
    }

    #[test]
    fn a_batch_record_has_every_column_and_shows_its_times_as_text() {
        let names: Vec<&str> = LLM_BATCHES.fields.iter().map(|f| f.name).collect();
        assert_eq!(columns_of::<BatchRecord>(), names);
        let record = BatchRecord {
            batch_key: "k".into(),
            job: "integrate".into(),
            run_id: "r".into(),
            task: "integrate.judge".into(),
            provider: "mock".into(),
            status: "submitted".into(),
            items: "[]".into(),
            attempts: 1,
            submitted_at: 1_000_000,
            updated_at: 2_000_000,
            claimed_at: Some(3_000_000),
            ..BatchRecord::default()
        };
        let batch = batch_record_batch(std::slice::from_ref(&record)).unwrap();
        assert_eq!(batch.schema(), LLM_BATCHES.arrow_schema(0));
        assert_eq!(
            rows_of::<BatchRecord>("llm_batches", &[batch]).unwrap(),
            std::slice::from_ref(&record)
        );
        let shown = serde_json::to_value(&record).unwrap();
        assert_eq!(shown["submitted_at"], "1970-01-01T00:00:01Z");
        assert_eq!(shown["applied_at"], serde_json::Value::Null);
        let bad = BatchRecord {
            status: "lost".into(),
            ..record
        };
        assert!(
            batch_record_batch(&[bad])
                .unwrap_err()
                .contains("llm_batches row 0 (k)")
        );
    }

    #[test]
    fn a_cluster_row_has_every_column_and_gets_its_id_from_the_table() {
        let names: Vec<&str> = CLUSTERS.fields.iter().map(|f| f.name).collect();
        assert_eq!(columns_of::<ClusterRow>(), names);
        let row = ClusterRow {
            run_id: "r".into(),
            user_id: "u".into(),
            mode: "hubs".into(),
            seed_id: "m1".into(),
            member_ids: vec!["m1".into(), "m2".into()],
            similarities: "[0.93]".into(),
            confidence: Some(0.93),
            threshold: Some(0.9),
            signature: "s1".into(),
            created_at: 5,
            ..ClusterRow::default()
        };
        let again = ClusterRow {
            signature: "s2".into(),
            ..row.clone()
        };
        let batch = cluster_batch(&[row.clone(), again]).unwrap();
        let back: Vec<ClusterRow> = rows_of("clusters", &[batch]).unwrap();
        assert!(!back[0].cluster_id.is_empty() && back[0].cluster_id != back[1].cluster_id);
        assert_eq!(
            ClusterRow {
                cluster_id: String::new(),
                ..back[0].clone()
            },
            row
        );
    }

    #[test]
    fn the_column_list_is_the_types_fields() {
        assert_eq!(
            columns_of::<View>(),
            ["id", "created_at", "happens_at", "embedding"]
        );
    }

    #[test]
    fn a_missing_column_names_the_table_and_the_type() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Wider {
            id: String,
            tier: String,
        }
        let e = rows_of::<Wider>("memories", &[batch()]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("rows of memories do not read as "),
            "{e}"
        );
        assert!(e.to_string().contains("Wider"), "{e}");
    }
}
