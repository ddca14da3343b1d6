//! Rows as the jobs decide on them: plain Rust types, one per table row, with no Arrow in
//! them. `model::typed` reads them from Arrow batches (by column name) and writes them back.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A time as rows show it in JSON (audit states, reports): RFC 3339, UTC, to the
/// microsecond where it has them.
pub fn format_timestamp(micros: i64) -> String {
    match DateTime::<Utc>::from_timestamp_micros(micros) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        None => micros.to_string(),
    }
}

/// A stable id for an audit row (or any row) from the text that identifies what it records.
pub fn derived_id(text: &str) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, text.as_bytes()).to_string()
}

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
    /// What `link` last found the memory's neighbours with (`link::link_mark`); null: not
    /// yet. A writer that gives the memory another vector leaves it null.
    pub link_mark: Option<i64>,
    /// Which extractor `entities` last read the memory's text with; null: not yet. A writer
    /// that gives the memory another text leaves it null.
    pub entity_mark: Option<i64>,
    /// Until when `scores` need not recompute the memory; null: at its next run. A writer of
    /// a score input (an access, a new text, a restore) leaves it null.
    pub scores_due_at: Option<i64>,
}

impl MemoryRow {
    /// Not archived: neither its state nor its archive time says so.
    pub fn is_live(&self) -> bool {
        self.archived_at.is_none() && self.state != "archived"
    }

    /// A new memory of `user_id` saying `text`, written at `created_at`, with every other
    /// column as the table's defaults give it (`model::schema::MEMORIES`; a test in
    /// `model::typed` keeps the two equal). Its id is the caller's to give.
    pub fn new(user_id: &str, text: &str, created_at: i64) -> MemoryRow {
        MemoryRow {
            id: String::new(),
            user_id: user_id.to_string(),
            text: text.to_string(),
            kind: "fact".into(),
            importance: 0.5,
            salience: 0.5,
            confidence: 0.8,
            emotional_salience: 0.0,
            retention: 1.0,
            state: "candidate".into(),
            tier: "hot".into(),
            decay_gradient: 1.0,
            ttl_policy: "decay".into(),
            sensitivity: "normal".into(),
            created_at,
            updated_at: created_at,
            valid_from: created_at,
            ..MemoryRow::default()
        }
    }

    /// The row as audit states hold it: every column (the vector null), times as RFC 3339
    /// text; what `model::typed::memory_from_json` reads back.
    pub fn to_json(&self) -> Value {
        let time = |t: Option<i64>| t.map(format_timestamp);
        json!({
            "id": self.id,
            "user_id": self.user_id,
            "text": self.text,
            "kind": self.kind,
            "session_id": self.session_id,
            "source": self.source,
            "embedding": Value::Null,
            "embedding_model": self.embedding_model,
            "importance": self.importance,
            "salience": self.salience,
            "confidence": self.confidence,
            "emotional_salience": self.emotional_salience,
            "retention": self.retention,
            "state": self.state,
            "tier": self.tier,
            "access_count": self.access_count,
            "recall_frequency": self.recall_frequency,
            "last_accessed_at": time(self.last_accessed_at),
            "last_recall_interval_days": self.last_recall_interval_days,
            "decay_gradient": self.decay_gradient,
            "ttl_policy": self.ttl_policy,
            "sensitivity": self.sensitivity,
            "created_at": format_timestamp(self.created_at),
            "updated_at": format_timestamp(self.updated_at),
            "happens_at": time(self.happens_at),
            "expires_at": time(self.expires_at),
            "valid_from": format_timestamp(self.valid_from),
            "valid_until": time(self.valid_until),
            "superseded_by": self.superseded_by,
            "supersession_chain_id": self.supersession_chain_id,
            "archived_at": time(self.archived_at),
            "consolidates_memory_ids": self.consolidates_memory_ids,
            "tags": self.tags,
            "refinement_rejection_count": self.refinement_rejection_count,
            "last_refined_at": time(self.last_refined_at),
            "salience_anchor": self.salience_anchor,
            "link_mark": self.link_mark,
            "entity_mark": self.entity_mark,
            "scores_due_at": time(self.scores_due_at),
        })
    }
}

/// One row of `audit_log`: what was decided, by which run, about which memories, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRow {
    /// Derived from what the row records (`derived_id`), so writing it twice changes nothing.
    pub id: String,
    pub run_id: String,
    pub user_id: Option<String>,
    /// One of the table's operations (`model::schema::AUDIT_OPERATIONS`).
    pub operation: &'static str,
    pub source_ids: Vec<String>,
    pub target_id: Option<String>,
    pub classification: Option<String>,
    pub confidence: Option<f64>,
    pub reasoning: Option<String>,
    pub before_state: Option<String>,
    pub after_state: Option<String>,
    /// Microseconds since the epoch, UTC.
    pub created_at: i64,
}

impl AuditRow {
    /// A row of `operation` by `run_id` whose id derives from `key` (unique per operation).
    pub fn new(run_id: &str, operation: &'static str, key: &str, created_at: i64) -> AuditRow {
        AuditRow {
            id: derived_id(&format!("{}|{key}", operation.to_ascii_lowercase())),
            run_id: run_id.to_string(),
            user_id: None,
            operation,
            source_ids: Vec::new(),
            target_id: None,
            classification: None,
            confidence: None,
            reasoning: None,
            before_state: None,
            after_state: None,
            created_at,
        }
    }
}

/// One row of `review_queue`: a fact the judge was unsure about, waiting for a person (or
/// its expiry). Timestamps are microseconds since the epoch, UTC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewItem {
    pub id: String,
    pub run_id: String,
    pub user_id: String,
    pub fact_id: String,
    /// The fact's memory row as JSON (`MemoryRow::to_json`).
    pub fact: String,
    pub candidate_id: String,
    /// The candidate's text when the judge read it: approval refuses if it changed.
    pub candidate_text: String,
    pub classification: String,
    pub confidence: f64,
    pub reasoning: Option<String>,
    pub status: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub decided_at: Option<i64>,
    pub decided_by_run: Option<String>,
}

impl ReviewItem {
    /// The item as `memlife review list --json` shows it (times as RFC 3339 text).
    pub fn to_json(&self) -> Value {
        let time = |t: Option<i64>| t.map(format_timestamp);
        json!({
            "id": self.id,
            "run_id": self.run_id,
            "user_id": self.user_id,
            "fact_id": self.fact_id,
            "fact": self.fact,
            "candidate_id": self.candidate_id,
            "candidate_text": self.candidate_text,
            "classification": self.classification,
            "confidence": self.confidence,
            "reasoning": self.reasoning,
            "status": self.status,
            "created_at": format_timestamp(self.created_at),
            "expires_at": time(self.expires_at),
            "decided_at": time(self.decided_at),
            "decided_by_run": self.decided_by_run,
        })
    }

    /// The fact's text (empty when its JSON is unreadable).
    pub fn fact_text(&self) -> String {
        serde_json::from_str::<Value>(&self.fact)
            .ok()
            .and_then(|f| f["text"].as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// One row of `links`: a typed edge between two memories of a user. Timestamps are
/// microseconds since the epoch, UTC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkRow {
    pub source_id: String,
    pub target_id: String,
    pub user_id: String,
    pub link_type: String,
    pub confidence: f64,
    pub reasoning: Option<String>,
    /// "llm" (a judge's) or "structural" (derived from the store).
    pub origin: String,
    pub created_at: i64,
}

impl LinkRow {
    /// A link a judge made, its confidence clamped to [0, 1].
    pub fn judged(
        (source, target, user): (&str, &str, &str),
        link_type: &str,
        confidence: f64,
        reasoning: &str,
        created_at: i64,
    ) -> LinkRow {
        LinkRow {
            source_id: source.to_string(),
            target_id: target.to_string(),
            user_id: user.to_string(),
            link_type: link_type.to_string(),
            confidence: confidence.clamp(0.0, 1.0),
            reasoning: Some(reasoning.to_string()),
            origin: "llm".into(),
            created_at,
        }
    }

    /// A link the store's own structure implies (confidence 1, no reasoning).
    pub fn structural(ends: (&str, &str, &str), link_type: &str, created_at: i64) -> LinkRow {
        LinkRow {
            reasoning: None,
            origin: "structural".into(),
            ..LinkRow::judged(ends, link_type, 1.0, "", created_at)
        }
    }

    /// The link as audit states hold it (the time as RFC 3339 text).
    pub fn to_json(&self) -> Value {
        json!({
            "source_id": self.source_id, "target_id": self.target_id, "user_id": self.user_id,
            "link_type": self.link_type, "confidence": self.confidence,
            "reasoning": self.reasoning, "origin": self.origin,
            "created_at": format_timestamp(self.created_at),
        })
    }
}

/// A note on an entity (seed 002): a dated remark, dropped by `memlife scores` once it
/// expires. Timestamps are microseconds since the epoch, UTC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Note {
    pub text: String,
    pub added_at: i64,
    pub expires_at: Option<i64>,
}

/// A whole `entities` row with its two vectors (`None` where not yet made): read, changed and
/// written back whole. Timestamps are microseconds since the epoch, UTC. A test in
/// `model::typed` keeps the fields equal to the table's columns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EntityRow {
    pub id: String,
    pub user_id: String,
    pub name: String,
    pub entity_type: String,
    pub description: Option<String>,
    pub notes: Vec<Note>,
    pub is_dirty: bool,
    /// Of the name, the description and the notes (`memlife describe`).
    pub embedding: Option<Vec<f32>>,
    pub embedding_model: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_seen_at: i64,
    pub aliases: Vec<String>,
    pub archived_at: Option<i64>,
    /// Of the name alone: what `memlife entities` matches new names against.
    pub name_embedding: Option<Vec<f32>>,
}

impl EntityRow {
    /// A new entity of `user_id`, seen first at `created_at`, marked dirty so that `memlife
    /// describe` writes its description; its id is the caller's to give.
    pub fn new(user_id: &str, name: &str, entity_type: &str, created_at: i64) -> EntityRow {
        EntityRow {
            user_id: user_id.to_string(),
            name: name.to_string(),
            entity_type: entity_type.to_string(),
            is_dirty: true,
            created_at,
            updated_at: created_at,
            last_seen_at: created_at,
            ..EntityRow::default()
        }
    }

    /// The notes, oldest first.
    pub fn notes_oldest_first(&self) -> Vec<&Note> {
        let mut notes: Vec<&Note> = self.notes.iter().collect();
        notes.sort_by_key(|n| n.added_at);
        notes
    }

    /// The row as the audit log holds it: every column but the two vectors, times as RFC
    /// 3339 text.
    pub fn to_json(&self) -> Value {
        let time = |t: Option<i64>| t.map(format_timestamp);
        let notes: Vec<Value> = self
            .notes
            .iter()
            .map(|n| {
                json!({"text": n.text, "added_at": format_timestamp(n.added_at),
                       "expires_at": time(n.expires_at)})
            })
            .collect();
        json!({
            "id": self.id,
            "user_id": self.user_id,
            "name": self.name,
            "entity_type": self.entity_type,
            "description": self.description,
            "notes": notes,
            "is_dirty": self.is_dirty,
            "embedding_model": self.embedding_model,
            "created_at": format_timestamp(self.created_at),
            "updated_at": format_timestamp(self.updated_at),
            "last_seen_at": format_timestamp(self.last_seen_at),
            "aliases": self.aliases,
            "archived_at": time(self.archived_at),
        })
    }
}

/// One row of `memory_entities`: a memory names an entity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MemoryEntityRow {
    pub memory_id: String,
    pub entity_id: String,
    pub user_id: String,
}

/// One row of `entity_scans`: which text of a memory `memlife entities` last read, with what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EntityScanRow {
    pub memory_id: String,
    pub user_id: String,
    /// FNV-1a of the text read (hex).
    pub text_hash: String,
    /// "rules" or the model of the `entities.extract` role.
    pub extractor: String,
    pub entity_count: i64,
    pub scanned_at: i64,
}

/// One row of `anchors`: a user's profile anchor (`memlife anchor`), its vectors read and
/// written beside the row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnchorRow {
    pub user_id: String,
    pub embedding_model: String,
    pub origin_at: i64,
    pub updated_at: i64,
    pub drift: f64,
    pub narratives: i64,
    pub last_narrative_at: i64,
}

/// Serialises microseconds as RFC 3339 text (what JSON output shows of a row's times).
fn as_rfc3339<S: serde::Serializer>(micros: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_timestamp(*micros))
}

fn as_rfc3339_opt<S: serde::Serializer>(micros: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match micros {
        Some(t) => s.serialize_str(&format_timestamp(*t)),
        None => s.serialize_none(),
    }
}

/// One row of `llm_batches`: a submission to a provider's Batch API and where it stands.
/// Timestamps are microseconds since the epoch, UTC (RFC 3339 text when serialised to JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchRecord {
    pub batch_key: String,
    pub job: String,
    pub run_id: String,
    pub user_id: Option<String>,
    pub task: String,
    pub provider: String,
    pub model: Option<String>,
    pub status: String,
    pub remote_batch_id: Option<String>,
    pub input_file_id: Option<String>,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub request_count: i64,
    /// The submitted items (JSON).
    pub items: String,
    pub attempts: i64,
    #[serde(serialize_with = "as_rfc3339")]
    pub submitted_at: i64,
    #[serde(serialize_with = "as_rfc3339")]
    pub updated_at: i64,
    #[serde(serialize_with = "as_rfc3339_opt")]
    pub claimed_at: Option<i64>,
    pub claim_token: Option<String>,
    #[serde(serialize_with = "as_rfc3339_opt")]
    pub applied_at: Option<i64>,
    pub error: Option<String>,
    pub counts: Option<String>,
}

/// One row of `clusters`: a group of near-duplicate memories a `memlife cluster` run found,
/// the candidates of `memlife consolidate`. Timestamps are microseconds since the epoch, UTC.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterRow {
    /// Empty in a row to write: the table derives it from the run and the signature.
    pub cluster_id: String,
    pub run_id: String,
    pub user_id: String,
    /// "hubs" or "full".
    pub mode: String,
    /// The hub (or full-mode seed) the cluster grew from; first of `member_ids`.
    pub seed_id: String,
    pub member_ids: Vec<String>,
    /// Pairwise cosine similarities of the members, upper triangle row by row (JSON).
    pub similarities: String,
    /// Mean pairwise similarity: how tight the cluster is.
    pub confidence: Option<f64>,
    pub threshold: Option<f64>,
    /// Hash of the members' ids and texts.
    pub signature: String,
    pub created_at: i64,
}
