//! The one writer of `audit_log`, used by every job: what was decided, by which run, about
//! which memories, and why. Rows are built column by column (a first `scores` run over a large
//! store archives hundreds of thousands of memories) and checked against the table's rules
//! before anything is written. Destructive steps append their rows before they act.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, ListBuilder, RecordBatch, StringArray, StringBuilder,
    TimestampMicrosecondArray,
};

use super::{Result, Store, StoreError, WriteStats};
use crate::model::schema::{AUDIT_LOG, AUDIT_OPERATIONS};

pub use crate::logic::rows::{AuditRow, derived_id};

/// Checks rows against `audit_log`'s rules and builds them into one batch.
pub fn audit_batch(rows: &[AuditRow], embedding_dim: usize) -> Result<RecordBatch> {
    for row in rows {
        let invalid = |reason: String| StoreError::InvalidAudit {
            id: row.id.clone(),
            reason,
        };
        if !AUDIT_OPERATIONS.contains(&row.operation) {
            return Err(invalid(format!("unknown operation {:?}", row.operation)));
        }
        if row.id.is_empty() || row.run_id.is_empty() {
            return Err(invalid("empty id or run_id".into()));
        }
        if let Some(c) = row.confidence
            && !(0.0..=1.0).contains(&c)
        {
            return Err(invalid(format!("confidence {c} outside [0, 1]")));
        }
    }
    let text = |f: fn(&AuditRow) -> Option<&str>| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<StringArray>())
    };
    let mut sources = ListBuilder::new(StringBuilder::new());
    for row in rows {
        for id in &row.source_ids {
            sources.values().append_value(id);
        }
        sources.append(true);
    }
    let schema = AUDIT_LOG.arrow_schema(embedding_dim);
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column: ArrayRef = match field.name().as_str() {
            "id" => text(|r| Some(&r.id)),
            "run_id" => text(|r| Some(&r.run_id)),
            "user_id" => text(|r| r.user_id.as_deref()),
            "operation" => text(|r| Some(r.operation)),
            "source_ids" => Arc::new(sources.finish()),
            "target_id" => text(|r| r.target_id.as_deref()),
            "classification" => text(|r| r.classification.as_deref()),
            "confidence" => Arc::new(rows.iter().map(|r| r.confidence).collect::<Float64Array>()),
            "reasoning" => text(|r| r.reasoning.as_deref()),
            "before_state" => text(|r| r.before_state.as_deref()),
            "after_state" => text(|r| r.after_state.as_deref()),
            "created_at" => Arc::new(
                TimestampMicrosecondArray::from_iter_values(rows.iter().map(|r| r.created_at))
                    .with_timezone("UTC"),
            ),
            other => {
                return Err(StoreError::InvalidAudit {
                    id: String::new(),
                    reason: format!("audit_log column {other} has no writer"),
                });
            }
        };
        columns.push(arrow::compute::cast(&column, field.data_type())?);
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

impl Store {
    /// Writes audit rows in one commit, merged on their ids: rewriting a row changes nothing.
    pub async fn write_audit(&self, rows: &[AuditRow]) -> Result<WriteStats> {
        if rows.is_empty() {
            return Ok(WriteStats::default());
        }
        let batch = audit_batch(rows, self.embedding_dim)?;
        self.upsert_batch(&AUDIT_LOG, batch).await
    }

    /// Which of `ids` are in `audit_log`.
    pub async fn audit_ids_present(
        &self,
        ids: &[String],
    ) -> Result<std::collections::BTreeSet<String>> {
        self.ids_present(AUDIT_LOG.name, ids, None).await
    }

    /// Appends audit rows in one commit without matching ids: for large sets of rows whose ids
    /// are new by construction (they derive from the run).
    pub async fn append_audit(&self, rows: &[AuditRow]) -> Result<WriteStats> {
        if rows.is_empty() {
            return Ok(WriteStats::default());
        }
        self.append_batch(&AUDIT_LOG, audit_batch(rows, self.embedding_dim)?)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};

    fn row(operation: &'static str) -> AuditRow {
        let mut row = AuditRow::new("run-1", operation, "m-1", 1_700_000_000_000_000);
        row.source_ids = vec!["m-1".into(), "m-2".into()];
        row.target_id = Some("m-2".into());
        row.confidence = Some(0.9);
        row
    }

    #[test]
    fn builds_every_column_of_the_table() {
        let batch = audit_batch(&[row("LINK"), row("ARCHIVE")], 8).unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema(), AUDIT_LOG.arrow_schema(8));
        let sources = batch.column_by_name("source_ids").unwrap().as_list::<i32>();
        assert_eq!(sources.value(1).len(), 2);
        assert!(batch.column_by_name("user_id").unwrap().is_null(0));
    }

    #[test]
    fn ids_derive_from_operation_and_key() {
        assert_eq!(row("LINK").id, row("LINK").id);
        assert_ne!(row("LINK").id, row("ARCHIVE").id);
    }

    #[test]
    fn refuses_rows_the_table_forbids() {
        assert!(audit_batch(&[row("FROBNICATE")], 8).is_err());
        let mut bad = row("LINK");
        bad.confidence = Some(1.5);
        let error = audit_batch(&[bad], 8).unwrap_err().to_string();
        assert!(error.contains("confidence 1.5"), "{error}");
    }
}
