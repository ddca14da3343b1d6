//! Recalls' activations waiting for `scores` (`schema::ACTIVATIONS`): a recall writes the
//! activation of each memory it returns here, one small row per memory; the next `scores`
//! run writes the pending ones onto their memories in its own column update and removes
//! them. A memory row is thus never rewritten whole for being recalled: such a rewrite
//! deleted the old row from its fragment, and compaction later rewrote the fragment,
//! vectors and all, for its deleted rows.

use std::collections::HashMap;

use anyhow::{Result, anyhow};
use arrow::array::RecordBatchIterator;
use serde::{Deserialize, Serialize};

use super::{Store, sql_list};
use crate::model::encoding::parse_timestamp;
use crate::model::schema::ACTIVATIONS;
use crate::model::typed::MemoryRow;

/// What an activation changes in a memory row, as the RECALL audit row logs it (fields in
/// the order the log has always had them; timestamps as RFC 3339 text): absolute values, so
/// writing one twice writes the same row.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Activation {
    pub access_count: i64,
    pub archived_at: Option<String>,
    pub decay_gradient: f64,
    pub id: String,
    pub importance: f64,
    pub last_accessed_at: String,
    pub last_recall_interval_days: f64,
    pub recall_frequency: i64,
    pub retention: f64,
    pub salience: f64,
    pub salience_anchor: f64,
    pub state: String,
    pub tier: String,
}

impl Activation {
    fn time(&self, t: &str) -> Result<i64> {
        parse_timestamp(t).ok_or_else(|| anyhow!("memory {}: bad time {t:?}", self.id))
    }

    /// When the activation happened (the recall's clock).
    pub fn accessed_at(&self) -> Result<i64> {
        self.time(&self.last_accessed_at)
    }

    pub fn archived_at(&self) -> Result<Option<i64>> {
        self.archived_at
            .as_deref()
            .map(|t| self.time(t))
            .transpose()
    }

    /// The activation written onto `row`.
    pub fn onto(&self, row: &mut MemoryRow) -> Result<()> {
        row.access_count = self.access_count;
        row.archived_at = self.archived_at()?;
        row.decay_gradient = self.decay_gradient;
        row.importance = self.importance;
        row.last_accessed_at = Some(self.accessed_at()?);
        row.last_recall_interval_days = self.last_recall_interval_days;
        row.recall_frequency = self.recall_frequency;
        row.retention = self.retention;
        row.salience = self.salience;
        row.salience_anchor = Some(self.salience_anchor);
        row.state = self.state.clone();
        row.tier = self.tier.clone();
        Ok(())
    }

    /// Whether this activation is newer than what `row` holds: a memory row written after
    /// the recall (by a job that had read the pending activation, or a recall at a later
    /// clock folded since) is not rolled back.
    pub fn newer_than(&self, last_accessed_at: Option<i64>) -> Result<bool> {
        Ok(last_accessed_at.is_none_or(|at| self.accessed_at().is_ok_and(|mine| mine > at)))
    }
}

/// Writes each row's pending activation (from `pending`, by memory id) onto it where the
/// activation is newer than the row.
pub fn write_pending<'a>(
    rows: impl IntoIterator<Item = &'a mut MemoryRow>,
    pending: &HashMap<String, Activation>,
) -> Result<()> {
    for row in rows {
        if let Some(a) = pending.get(&row.id)
            && a.newer_than(row.last_accessed_at)?
        {
            a.onto(row)?;
        }
    }
    Ok(())
}

/// One pending activation, as `activations` holds it.
#[derive(Debug, Clone)]
pub struct Pending {
    pub memory_id: String,
    pub user_id: String,
    /// The RECALL audit row that logged it.
    pub recall_id: String,
    pub recalled_at: i64,
    pub activation: Activation,
}

#[derive(Deserialize)]
struct PendingRow {
    memory_id: String,
    user_id: String,
    recall_id: String,
    recalled_at: i64,
    activation: String,
}

impl Store {
    /// The pending activations matching `filter` (SQL over `activations`; all when none).
    pub async fn pending_activations(&self, filter: Option<&str>) -> Result<Vec<Pending>> {
        let rows: Vec<PendingRow> = self.scan_rows(ACTIVATIONS.name, filter).await?;
        rows.into_iter()
            .map(|r| {
                let activation = serde_json::from_str(&r.activation).map_err(|e| {
                    anyhow!(
                        "activations row of memory {}: unreadable activation: {e}",
                        r.memory_id
                    )
                })?;
                Ok(Pending {
                    memory_id: r.memory_id,
                    user_id: r.user_id,
                    recall_id: r.recall_id,
                    recalled_at: r.recalled_at,
                    activation,
                })
            })
            .collect()
    }

    /// The pending activations of these memories, by memory id.
    pub async fn pending_activations_of(
        &self,
        ids: &[String],
    ) -> Result<HashMap<String, Activation>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let filter = format!("memory_id IN ({})", sql_list(ids));
        Ok(self
            .pending_activations(Some(&filter))
            .await?
            .into_iter()
            .map(|p| (p.memory_id, p.activation))
            .collect())
    }

    /// Writes the pending activations of `rows` onto them (those newer than what a row
    /// holds): the rows as the next `scores` run will leave their access columns.
    pub async fn with_pending_activations<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a mut MemoryRow>,
    ) -> Result<()> {
        let rows: Vec<&mut MemoryRow> = rows.into_iter().collect();
        let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        // Past a few hundred ids, reading every pending row beats an IN list this long.
        let pending = if ids.len() <= 500 {
            self.pending_activations_of(&ids).await?
        } else {
            self.pending_activations(None)
                .await?
                .into_iter()
                .map(|p| (p.memory_id, p.activation))
                .collect()
        };
        write_pending(rows, &pending)
    }

    /// Writes activations as pending, in one commit (each replaces its memory's older one).
    pub async fn defer_activations(&self, rows: &[Pending]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let json: Vec<serde_json::Value> = rows
            .iter()
            .map(|p| {
                serde_json::json!({
                    "memory_id": p.memory_id,
                    "user_id": p.user_id,
                    "recall_id": p.recall_id,
                    "recalled_at": crate::model::encoding::format_timestamp(p.recalled_at),
                    "activation": serde_json::to_string(&p.activation)
                        .expect("an activation serialises"),
                })
            })
            .collect();
        let batch = super::batch_from_json(&ACTIVATIONS, self.embedding_dim(), 0, &json)
            .map_err(|e| anyhow!("activations: {e}"))?;
        let schema = batch.schema();
        let reader = RecordBatchIterator::new([Ok(batch)], schema);
        self.merge_rows(&ACTIVATIONS, Box::new(reader)).await?;
        Ok(())
    }

    /// Removes the activations `scores` wrote onto their memories, in one commit per 10,000
    /// (each removal stands alone: a row left by a cut run is written again, to the same
    /// values, and removed by the next): a row another recall replaced since (another
    /// `recall_id`) stays pending.
    pub async fn remove_activations(&self, folded: &[Pending]) -> Result<()> {
        for chunk in folded.chunks(10_000) {
            let mut memories: Vec<&str> = chunk.iter().map(|p| p.memory_id.as_str()).collect();
            let mut recalls: Vec<&str> = chunk.iter().map(|p| p.recall_id.as_str()).collect();
            memories.sort_unstable();
            memories.dedup();
            recalls.sort_unstable();
            recalls.dedup();
            let predicate = format!(
                "memory_id IN ({}) AND recall_id IN ({})",
                sql_list(&memories),
                sql_list(&recalls)
            );
            self.delete_where(ACTIVATIONS.name, &predicate).await?;
        }
        Ok(())
    }
}
