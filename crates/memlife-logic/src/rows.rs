//! Rows as the jobs decide on them: plain Rust types, one per table row, with no Arrow in
//! them. `model::typed` reads them from Arrow batches (by column name) and writes them back.

use serde::{Deserialize, Serialize};

/// A whole `memories` row but its vector: every column, so a row read, changed and written
/// back loses nothing. Timestamps are microseconds since the epoch, UTC. A tidy test in
/// `model::typed` keeps the fields equal to the table's columns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryRow {
    pub id: String,
    pub user_id: String,
    pub text: String,
    pub kind: String,
    pub session_id: Option<String>,
    pub source: Option<String>,
    pub embedding_model: Option<String>,
    pub importance: f64,
    pub salience: f64,
    pub confidence: f64,
    pub emotional_salience: f64,
    pub retention: f64,
    pub state: String,
    pub tier: String,
    pub access_count: i64,
    pub recall_frequency: i64,
    pub last_accessed_at: Option<i64>,
    pub last_recall_interval_days: f64,
    pub decay_gradient: f64,
    pub ttl_policy: String,
    pub sensitivity: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub happens_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub valid_from: i64,
    pub valid_until: Option<i64>,
    pub superseded_by: Option<String>,
    pub supersession_chain_id: Option<String>,
    pub archived_at: Option<i64>,
    pub consolidates_memory_ids: Vec<String>,
    pub tags: Vec<String>,
    pub refinement_rejection_count: i64,
    pub last_refined_at: Option<i64>,
    pub salience_anchor: Option<f64>,
}
