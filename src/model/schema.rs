//! The tables of a memlife database, described once: every column's type, whether input must
//! give it, the rule it is validated against and its default. Import, export, synth and the
//! store all derive from these specs, so a column is added in one place.
//!
//! This module is pure (arrow types only): no Lance, no I/O.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

/// The schema version this build writes. Opening a database with a newer version fails;
/// older versions are migrated in place by `store::migrate`.
pub const SCHEMA_VERSION: i64 = 13;

/// What each version added, for the migration in `store` (version 1 is the first).
/// 2: table `llm_batches`; column `runs.llm_usage`. 3: column `memories.salience_anchor`.
/// 4: table `clusters`. 5: table `entity_scans`; columns `entities.aliases`, `entities.archived_at`.
/// 6: column `entities.name_embedding`. 7: table `review_queue`. 8: column
/// `runs.table_versions`. 9: table `anchors`. 10: table `bench_runs`. 11: column
/// `memories.link_mark`. 12: columns `memories.entity_mark`, `memories.scores_due_at`. 13:
/// table `activations`.
pub const SCHEMA_HISTORY: &[(i64, &str)] = &[
    (2, "llm_batches table; runs.llm_usage column"),
    (3, "memories.salience_anchor column"),
    (4, "clusters table"),
    (
        5,
        "entity_scans table; entities.aliases, entities.archived_at columns",
    ),
    (6, "entities.name_embedding column"),
    (7, "review_queue table"),
    (8, "runs.table_versions column"),
    (9, "anchors table"),
    (10, "bench_runs table"),
    (11, "memories.link_mark column"),
    (12, "memories.entity_mark, memories.scores_due_at columns"),
    (13, "activations table"),
];

/// Embedding width used when `init` is not told otherwise (all-MiniLM-L6-v2).
pub const DEFAULT_EMBEDDING_DIM: usize = 384;

pub const MEMORY_KINDS: &[&str] = &[
    "fact",
    "episode",
    "narrative",
    "learning_pattern",
    "summary",
];
pub const MEMORY_STATES: &[&str] = &["candidate", "active", "core", "archived"];
pub const MEMORY_TIERS: &[&str] = &["hot", "warm", "cold", "archived"];
pub const TTL_POLICIES: &[&str] = &["decay", "keep_forever", "ephemeral"];
pub const SENSITIVITIES: &[&str] = &["low", "normal", "high"];
pub const LINK_ORIGINS: &[&str] = &["llm", "structural"];
/// The entity types (defined beside the extraction rules that choose among them).
pub use crate::logic::entities::ENTITY_TYPES;
pub const RUN_STATUSES: &[&str] = &["running", "done", "partial", "failed", "abandoned"];
pub const AUDIT_OPERATIONS: &[&str] = &[
    "ADD",
    "UPDATE",
    "DELETE",
    "MERGE",
    "SUPERSEDE",
    "NOOP",
    "ARCHIVE",
    "SPLIT",
    "LINK",
    "IMPORT",
    "BATCH_CLEANUP",
    "CONSOLIDATE",
    // A dead link removed by traversal's heal-on-read.
    "HEAL",
    // `memlife entity-gc` and `memlife describe`.
    "ENTITY_ARCHIVE",
    "ENTITY_DELETE",
    "ENTITY_MERGE",
    "DESCRIBE",
    // `memlife optimize`: a table's versions older than the retention window, removed.
    "PRUNE_VERSIONS",
    // `memlife prune`: a memory archived or deleted (classification ARCHIVE or DELETE),
    // logged with the row as it was and, for a deletion, its export file.
    "PRUNE",
    // `memlife sessions`: a session told as a narrative (the narrative as written).
    "NARRATE",
    // `memlife insights`: a cluster of narratives asked about (classification PATTERN, with
    // the pattern as written, or NONE).
    "INSIGHT",
    // `memlife anchor`: a user's profile anchor set (ORIGIN, RESET) or moved (UPDATE), with
    // the anchor as written; ANCHOR_DRIFT when its drift crosses a threshold (classification
    // warning or critical, confidence the drift).
    "ANCHOR",
    "ANCHOR_DRIFT",
    // `memlife distill`: a group of episodes asked about (APPLIED, with the episodes as they
    // were and the facts and archival to come, or NONE and why).
    "DISTILL",
    // `batches poll` applying an `entities --extractor llm --mode batch` request.
    "EXTRACT",
    // `memlife integrate`: a fact queued for review (its judge was unsure).
    "REVIEW",
    // `memlife undo`: one row per reverted decision, written before anything is reverted.
    "UNDO",
    // `integrate --mode batch`: a fact sent to the judge (its row and candidates), and each
    // answer of the batch as it came back.
    "SUBMIT",
    "JUDGE",
    // `memlife recall`: the memories a recall returned and the activation it wrote.
    "RECALL",
];
pub const REVIEW_STATUSES: &[&str] = &["pending", "approved", "rejected", "expired"];
/// The life of a Batch API submission (see `llm::batch`).
pub const BATCH_STATUSES: &[&str] = &[
    "submitting",
    "submitted",
    "ready",
    "applying",
    "applied",
    "failed",
];
/// Link types of seed 000 and seed 003. `shares_entity:<name>` is accepted as a family.
pub const LINK_TYPES: &[&str] = &[
    "conflicts",
    "supersedes",
    "causes",
    "instance_of",
    "invalidated_by",
    "motivated_by",
    "was_context_for",
    "related_to",
    "merged_into",
    "consolidates",
    "split_from",
];
pub const SHARES_ENTITY_PREFIX: &str = "shares_entity:";

/// How a column is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Str,
    F64,
    I64,
    Bool,
    /// Microseconds since the epoch, UTC.
    Timestamp,
    StrList,
    /// Fixed-size list of f32 whose width is the database's embedding dimension.
    Embedding,
    /// Entity notes: a list of {text, added_at, expires_at}.
    Notes,
}

/// What a value must satisfy besides its type.
#[derive(Clone, Copy, Debug)]
pub enum Rule {
    Free,
    OneOf(&'static [&'static str]),
    UnitInterval,
    NonNegative,
    LinkType,
    NonEmpty,
}

/// What a missing or null input value becomes.
#[derive(Clone, Copy, Debug)]
pub enum Fallback {
    /// Stays null (the column is nullable).
    Null,
    F64(f64),
    I64(i64),
    Bool(bool),
    Str(&'static str),
    /// The import's clock reading, one per run.
    Now,
    /// The value of another column of the same row (resolved after it).
    SameAs(&'static str),
    EmptyList,
    /// A UUID v5 derived from the row's content, so re-importing an id-less file upserts.
    DerivedId,
    /// Input must give it: a missing value rejects the row.
    Required,
}

#[derive(Clone, Copy, Debug)]
pub struct FieldSpec {
    pub name: &'static str,
    pub kind: Kind,
    pub rule: Rule,
    pub default: Fallback,
}

impl FieldSpec {
    /// Whether the stored column may hold nulls.
    pub fn nullable(&self) -> bool {
        matches!(self.default, Fallback::Null)
    }
}

const fn field(name: &'static str, kind: Kind, rule: Rule, default: Fallback) -> FieldSpec {
    FieldSpec {
        name,
        kind,
        rule,
        default,
    }
}

#[derive(Debug)]
pub struct TableSpec {
    pub name: &'static str,
    pub fields: &'static [FieldSpec],
    /// Columns whose values identify a row: imports upsert on them.
    pub key: &'static [&'static str],
    /// Columns that content-derived ids are computed from.
    pub id_basis: &'static [&'static str],
}

impl TableSpec {
    pub fn field(&self, name: &str) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name == name)
    }

    pub fn position(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// Every column name but `skip` (`MEMORIES.columns_except("embedding")`: a row to read as
    /// JSON without its vector).
    pub fn columns_except(&self, skip: &str) -> Vec<&'static str> {
        self.fields
            .iter()
            .map(|f| f.name)
            .filter(|n| *n != skip)
            .collect()
    }

    /// The Arrow schema of the table for a database with the given embedding width.
    pub fn arrow_schema(&self, embedding_dim: usize) -> SchemaRef {
        let fields: Vec<Field> = self
            .fields
            .iter()
            .map(|f| Field::new(f.name, data_type(f.kind, embedding_dim), f.nullable()))
            .collect();
        Arc::new(Schema::new(fields))
    }
}

pub fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

pub fn note_fields() -> Fields {
    Fields::from(vec![
        Field::new("text", DataType::Utf8, false),
        Field::new("added_at", timestamp_type(), false),
        Field::new("expires_at", timestamp_type(), true),
    ])
}

pub fn data_type(kind: Kind, embedding_dim: usize) -> DataType {
    match kind {
        Kind::Str => DataType::Utf8,
        Kind::F64 => DataType::Float64,
        Kind::I64 => DataType::Int64,
        Kind::Bool => DataType::Boolean,
        Kind::Timestamp => timestamp_type(),
        Kind::StrList => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        Kind::Embedding => DataType::FixedSizeList(
            Arc::new(Field::new("item", DataType::Float32, true)),
            embedding_dim as i32,
        ),
        Kind::Notes => DataType::List(Arc::new(Field::new(
            "item",
            DataType::Struct(note_fields()),
            true,
        ))),
    }
}

use Fallback as D;
use Kind as K;
use Rule as R;

pub static MEMORIES: TableSpec = TableSpec {
    name: "memories",
    key: &["id"],
    id_basis: &["user_id", "text", "created_at"],
    fields: &[
        field("id", K::Str, R::NonEmpty, D::DerivedId),
        field("user_id", K::Str, R::NonEmpty, D::Required),
        field("text", K::Str, R::NonEmpty, D::Required),
        field("kind", K::Str, R::OneOf(MEMORY_KINDS), D::Str("fact")),
        field("session_id", K::Str, R::Free, D::Null),
        field("source", K::Str, R::Free, D::Null),
        field("embedding", K::Embedding, R::Free, D::Null),
        field("embedding_model", K::Str, R::Free, D::Null),
        field("importance", K::F64, R::UnitInterval, D::F64(0.5)),
        field("salience", K::F64, R::UnitInterval, D::F64(0.5)),
        field("confidence", K::F64, R::UnitInterval, D::F64(0.8)),
        field("emotional_salience", K::F64, R::UnitInterval, D::F64(0.0)),
        field("retention", K::F64, R::UnitInterval, D::F64(1.0)),
        field(
            "state",
            K::Str,
            R::OneOf(MEMORY_STATES),
            D::Str("candidate"),
        ),
        field("tier", K::Str, R::OneOf(MEMORY_TIERS), D::Str("hot")),
        field("access_count", K::I64, R::NonNegative, D::I64(0)),
        field("recall_frequency", K::I64, R::NonNegative, D::I64(0)),
        field("last_accessed_at", K::Timestamp, R::Free, D::Null),
        field(
            "last_recall_interval_days",
            K::F64,
            R::NonNegative,
            D::F64(0.0),
        ),
        field("decay_gradient", K::F64, R::NonNegative, D::F64(1.0)),
        field(
            "ttl_policy",
            K::Str,
            R::OneOf(TTL_POLICIES),
            D::Str("decay"),
        ),
        field(
            "sensitivity",
            K::Str,
            R::OneOf(SENSITIVITIES),
            D::Str("normal"),
        ),
        field("created_at", K::Timestamp, R::Free, D::Now),
        field("updated_at", K::Timestamp, R::Free, D::SameAs("created_at")),
        field("happens_at", K::Timestamp, R::Free, D::Null),
        field("expires_at", K::Timestamp, R::Free, D::Null),
        field("valid_from", K::Timestamp, R::Free, D::SameAs("created_at")),
        field("valid_until", K::Timestamp, R::Free, D::Null),
        field("superseded_by", K::Str, R::Free, D::Null),
        field("supersession_chain_id", K::Str, R::Free, D::Null),
        field("archived_at", K::Timestamp, R::Free, D::Null),
        field("consolidates_memory_ids", K::StrList, R::Free, D::EmptyList),
        field("tags", K::StrList, R::Free, D::EmptyList),
        field(
            "refinement_rejection_count",
            K::I64,
            R::NonNegative,
            D::I64(0),
        ),
        field("last_refined_at", K::Timestamp, R::Free, D::Null),
        // Salience at the last access (or creation): the scores job decays from it, so
        // reruns never compound (v3; null means "the stored salience", adopted on first run).
        field("salience_anchor", K::F64, R::UnitInterval, D::Null),
        // What `link` last found this memory's neighbours with: a hash of its vector, model
        // and the link options (v11; null: not yet, so the next `link` looks at it).
        field("link_mark", K::I64, R::Free, D::Null),
        // Which extractor `entities` last read this memory's text with (`entities::
        // entity_mark`; v12; null: not yet, so the next `entities` reads it). A writer of a
        // new text leaves it null.
        field("entity_mark", K::I64, R::Free, D::Null),
        // Until when `scores` need not recompute this memory (`logic::scores::next_due`; v12;
        // null: at the next run). A writer of a score input leaves it null.
        field("scores_due_at", K::Timestamp, R::Free, D::Null),
    ],
};

pub static LINKS: TableSpec = TableSpec {
    name: "links",
    key: &["source_id", "target_id", "link_type"],
    id_basis: &[],
    fields: &[
        field("source_id", K::Str, R::NonEmpty, D::Required),
        field("target_id", K::Str, R::NonEmpty, D::Required),
        field("user_id", K::Str, R::NonEmpty, D::Required),
        field("link_type", K::Str, R::LinkType, D::Required),
        field("confidence", K::F64, R::UnitInterval, D::F64(1.0)),
        field("reasoning", K::Str, R::Free, D::Null),
        field(
            "origin",
            K::Str,
            R::OneOf(LINK_ORIGINS),
            D::Str("structural"),
        ),
        field("created_at", K::Timestamp, R::Free, D::Now),
    ],
};

pub static ENTITIES: TableSpec = TableSpec {
    name: "entities",
    key: &["id"],
    id_basis: &["user_id", "name", "entity_type"],
    fields: &[
        field("id", K::Str, R::NonEmpty, D::DerivedId),
        field("user_id", K::Str, R::NonEmpty, D::Required),
        field("name", K::Str, R::NonEmpty, D::Required),
        field(
            "entity_type",
            K::Str,
            R::OneOf(ENTITY_TYPES),
            D::Str("other"),
        ),
        field("description", K::Str, R::Free, D::Null),
        field("notes", K::Notes, R::Free, D::EmptyList),
        field("is_dirty", K::Bool, R::Free, D::Bool(false)),
        field("embedding", K::Embedding, R::Free, D::Null),
        field("embedding_model", K::Str, R::Free, D::Null),
        field("created_at", K::Timestamp, R::Free, D::Now),
        field("updated_at", K::Timestamp, R::Free, D::SameAs("created_at")),
        field(
            "last_seen_at",
            K::Timestamp,
            R::Free,
            D::SameAs("created_at"),
        ),
        // Other names the entity went by, kept when near-duplicates are merged (v5).
        field("aliases", K::StrList, R::Free, D::EmptyList),
        // Set when no live memory names the entity any more; deleted after a grace period (v5).
        field("archived_at", K::Timestamp, R::Free, D::Null),
        // The vector of the name alone, what `memlife entities` matches new names against;
        // `embedding` is of the name and description (`memlife describe`, seed 002) (v6).
        field("name_embedding", K::Embedding, R::Free, D::Null),
    ],
};

/// Which text of each memory `memlife entities` last read, so a rerun reads only new or
/// changed memories (v5).
pub static ENTITY_SCANS: TableSpec = TableSpec {
    name: "entity_scans",
    key: &["memory_id"],
    id_basis: &[],
    fields: &[
        field("memory_id", K::Str, R::NonEmpty, D::Required),
        field("user_id", K::Str, R::NonEmpty, D::Required),
        // FNV-1a of the text read (hex).
        field("text_hash", K::Str, R::NonEmpty, D::Required),
        // "rules" or the model of the `entities.extract` role.
        field("extractor", K::Str, R::NonEmpty, D::Required),
        field("entity_count", K::I64, R::NonNegative, D::I64(0)),
        field("scanned_at", K::Timestamp, R::Free, D::Now),
    ],
};

pub static MEMORY_ENTITIES: TableSpec = TableSpec {
    name: "memory_entities",
    key: &["memory_id", "entity_id"],
    id_basis: &[],
    fields: &[
        field("memory_id", K::Str, R::NonEmpty, D::Required),
        field("entity_id", K::Str, R::NonEmpty, D::Required),
        field("user_id", K::Str, R::NonEmpty, D::Required),
    ],
};

pub static RUNS: TableSpec = TableSpec {
    name: "runs",
    key: &["run_id"],
    id_basis: &["job", "started_at"],
    fields: &[
        field("run_id", K::Str, R::NonEmpty, D::DerivedId),
        field("job", K::Str, R::NonEmpty, D::Required),
        field("user_id", K::Str, R::Free, D::Null),
        field("started_at", K::Timestamp, R::Free, D::Now),
        field("finished_at", K::Timestamp, R::Free, D::Null),
        field("status", K::Str, R::OneOf(RUN_STATUSES), D::Str("running")),
        field("dry_run", K::Bool, R::Free, D::Bool(false)),
        field("params", K::Str, R::Free, D::Str("{}")),
        field("counts", K::Str, R::Free, D::Str("{}")),
        field("items_failed", K::I64, R::NonNegative, D::I64(0)),
        field("duration_ms", K::I64, R::NonNegative, D::Null),
        field("error", K::Str, R::Free, D::Null),
        // Calls, tokens, retries, failures and estimated cost per provider (JSON; v2).
        field("llm_usage", K::Str, R::Free, D::Null),
        // The version of every table when the run started and when it finished (JSON
        // {"before": {table: version}, "after": {...}}; v8): what `memlife undo` diffs.
        field("table_versions", K::Str, R::Free, D::Null),
    ],
};

/// One submission to the OpenAI Batch API, so `batches poll` applies its results later,
/// exactly once, and `batches retry` can resubmit it from `items`.
pub static LLM_BATCHES: TableSpec = TableSpec {
    name: "llm_batches",
    key: &["batch_key"],
    id_basis: &["run_id", "task", "submitted_at"],
    fields: &[
        field("batch_key", K::Str, R::NonEmpty, D::DerivedId),
        field("job", K::Str, R::NonEmpty, D::Required),
        field("run_id", K::Str, R::NonEmpty, D::Required),
        field("user_id", K::Str, R::Free, D::Null),
        field("task", K::Str, R::NonEmpty, D::Required),
        field("provider", K::Str, R::NonEmpty, D::Required),
        field("model", K::Str, R::Free, D::Null),
        field(
            "status",
            K::Str,
            R::OneOf(BATCH_STATUSES),
            D::Str("submitting"),
        ),
        field("remote_batch_id", K::Str, R::Free, D::Null),
        field("input_file_id", K::Str, R::Free, D::Null),
        field("output_file_id", K::Str, R::Free, D::Null),
        field("error_file_id", K::Str, R::Free, D::Null),
        field("request_count", K::I64, R::NonNegative, D::I64(0)),
        // The submitted items (JSON), to validate replies against and to resubmit.
        field("items", K::Str, R::Free, D::Str("[]")),
        field("attempts", K::I64, R::NonNegative, D::I64(1)),
        field("submitted_at", K::Timestamp, R::Free, D::Now),
        field("updated_at", K::Timestamp, R::Free, D::Now),
        field("claimed_at", K::Timestamp, R::Free, D::Null),
        field("claim_token", K::Str, R::Free, D::Null),
        field("applied_at", K::Timestamp, R::Free, D::Null),
        field("error", K::Str, R::Free, D::Null),
        field("counts", K::Str, R::Free, D::Null),
    ],
};

pub static AUDIT_LOG: TableSpec = TableSpec {
    name: "audit_log",
    key: &["id"],
    id_basis: &["run_id", "operation", "target_id", "created_at"],
    fields: &[
        field("id", K::Str, R::NonEmpty, D::DerivedId),
        field("run_id", K::Str, R::NonEmpty, D::Required),
        field("user_id", K::Str, R::Free, D::Null),
        field("operation", K::Str, R::OneOf(AUDIT_OPERATIONS), D::Required),
        field("source_ids", K::StrList, R::Free, D::EmptyList),
        field("target_id", K::Str, R::Free, D::Null),
        field("classification", K::Str, R::Free, D::Null),
        field("confidence", K::F64, R::UnitInterval, D::Null),
        field("reasoning", K::Str, R::Free, D::Null),
        field("before_state", K::Str, R::Free, D::Null),
        field("after_state", K::Str, R::Free, D::Null),
        field("created_at", K::Timestamp, R::Free, D::Now),
    ],
};

pub const CLUSTER_MODES: &[&str] = &["hubs", "full"];

/// The clusters a `memlife cluster` run found: candidates for `memlife consolidate`, which
/// reads those of each user's latest finished cluster run.
pub static CLUSTERS: TableSpec = TableSpec {
    name: "clusters",
    key: &["cluster_id"],
    // A memory may seed two clusters of one run (full mode's layers); the member set may not.
    id_basis: &["run_id", "signature"],
    fields: &[
        field("cluster_id", K::Str, R::NonEmpty, D::DerivedId),
        field("run_id", K::Str, R::NonEmpty, D::Required),
        field("user_id", K::Str, R::NonEmpty, D::Required),
        field("mode", K::Str, R::OneOf(CLUSTER_MODES), D::Str("hubs")),
        // The hub (or full-mode seed) the cluster grew from; first of `member_ids`.
        field("seed_id", K::Str, R::NonEmpty, D::Required),
        field("member_ids", K::StrList, R::Free, D::EmptyList),
        // Pairwise cosine similarities of the members, upper triangle row by row (JSON).
        field("similarities", K::Str, R::Free, D::Str("[]")),
        // Mean pairwise similarity: how tight the cluster is.
        field("confidence", K::F64, R::Free, D::Null),
        field("threshold", K::F64, R::Free, D::Null),
        // Hash of the members' ids and texts: a rejected proposal is not asked again until
        // it changes.
        field("signature", K::Str, R::NonEmpty, D::Required),
        field("created_at", K::Timestamp, R::Free, D::Now),
    ],
};

/// Database-level facts: schema version, embedding width, creation time.
/// Recalls' activations not yet written onto their memories, one row per memory: the
/// latest activation, as absolute values (`activation`: the JSON the `RECALL` audit row logs
/// for it). A recall writes here, not to `memories`: rewriting the activated rows whole
/// deleted them from the fragments they sat in, and compaction then rewrote those
/// fragments, vectors and all, for the deletions. `scores` folds the pending activations
/// into its nightly column update and removes them (v13).
pub static ACTIVATIONS: TableSpec = TableSpec {
    name: "activations",
    key: &["memory_id"],
    id_basis: &[],
    fields: &[
        field("memory_id", K::Str, R::NonEmpty, D::Required),
        field("user_id", K::Str, R::NonEmpty, D::Required),
        // The `RECALL` audit row that logged it.
        field("recall_id", K::Str, R::NonEmpty, D::Required),
        field("recalled_at", K::Timestamp, R::Free, D::Required),
        field("activation", K::Str, R::NonEmpty, D::Required),
    ],
};

pub static META: TableSpec = TableSpec {
    name: "memlife_meta",
    key: &["key"],
    id_basis: &[],
    fields: &[
        field("key", K::Str, R::NonEmpty, D::Required),
        field("value", K::Str, R::Free, D::Required),
    ],
};

/// Facts `memlife integrate` did not apply because its judge was unsure (confidence under
/// `integrate.min_confidence`): `memlife review` approves (the judge's answer is applied) or
/// rejects them (the fact is kept beside the memory, COEXIST); pending items expire after
/// `integrate.review_ttl_days` the same way as a rejection, so no fact is lost.
pub static REVIEW_QUEUE: TableSpec = TableSpec {
    name: "review_queue",
    key: &["id"],
    id_basis: &["fact_id"],
    fields: &[
        field("id", K::Str, R::NonEmpty, D::DerivedId),
        field("run_id", K::Str, R::NonEmpty, D::Required),
        field("user_id", K::Str, R::NonEmpty, D::Required),
        field("fact_id", K::Str, R::NonEmpty, D::Required),
        // The fact's memory row as JSON (no embedding).
        field("fact", K::Str, R::NonEmpty, D::Required),
        field("candidate_id", K::Str, R::NonEmpty, D::Required),
        // The candidate's text when the judge read it: approval refuses if it changed.
        field("candidate_text", K::Str, R::Free, D::Required),
        field("classification", K::Str, R::NonEmpty, D::Required),
        field("confidence", K::F64, R::UnitInterval, D::Required),
        field("reasoning", K::Str, R::Free, D::Null),
        field(
            "status",
            K::Str,
            R::OneOf(REVIEW_STATUSES),
            D::Str("pending"),
        ),
        field("created_at", K::Timestamp, R::Free, D::Now),
        field("expires_at", K::Timestamp, R::Free, D::Null),
        field("decided_at", K::Timestamp, R::Free, D::Null),
        field("decided_by_run", K::Str, R::Free, D::Null),
    ],
};

/// Each user's profile anchor (seed 004 "Temporal Continuity Anchor", `memlife anchor`): the
/// origin embedding (the mean of the user's narratives when first computed) and the live one,
/// moved toward each run's new narratives; its drift from the origin (v9).
pub static ANCHORS: TableSpec = TableSpec {
    name: "anchors",
    key: &["user_id"],
    id_basis: &[],
    fields: &[
        field("user_id", K::Str, R::NonEmpty, D::Required),
        field("embedding_model", K::Str, R::NonEmpty, D::Required),
        field("origin", K::Embedding, R::Free, D::Null),
        field("live", K::Embedding, R::Free, D::Null),
        field("origin_at", K::Timestamp, R::Free, D::Now),
        field("updated_at", K::Timestamp, R::Free, D::SameAs("origin_at")),
        // Cosine distance of the live anchor from the origin.
        field("drift", K::F64, R::Free, D::F64(0.0)),
        // Narratives folded in, and the creation time of the newest (the next run reads
        // narratives created after it).
        field("narratives", K::I64, R::NonNegative, D::I64(0)),
        field("last_narrative_at", K::Timestamp, R::Free, D::Required),
    ],
};

/// How each target of `benches/targets.toml` fared in each `memlife bench targets` run
/// (issue 38; v10): the figure, the bound, the status, and the CPU, SIMD kernel, build profile
/// and commit it came from, so `memlife sql` and `memlife report --html` follow a target
/// across runs and machines. Rows are `logic::targets::HistoryRow`.
pub static BENCH_RUNS: TableSpec = TableSpec {
    name: "bench_runs",
    key: &["id"],
    id_basis: &["run_id", "target"],
    fields: &[
        field("id", K::Str, R::NonEmpty, D::DerivedId),
        field("run_id", K::Str, R::NonEmpty, D::Required),
        field("target", K::Str, R::NonEmpty, D::Required),
        field("title", K::Str, R::Free, D::Required),
        field("command", K::Str, R::Free, D::Required),
        field("figure", K::Str, R::NonEmpty, D::Required),
        field("bound_text", K::Str, R::Free, D::Required),
        field("bound", K::F64, R::Free, D::Null),
        field("value", K::F64, R::Free, D::Null),
        field("unit", K::Str, R::Free, D::Str("")),
        field("status", K::Str, R::OneOf(BENCH_STATUSES), D::Required),
        field("reason", K::Str, R::Free, D::Null),
        field("seconds", K::F64, R::NonNegative, D::F64(0.0)),
        field("quick", K::Bool, R::Free, D::Bool(false)),
        field("cpu", K::Str, R::Free, D::Required),
        field("kernel", K::Str, R::Free, D::Required),
        field("profile", K::Str, R::Free, D::Required),
        field("commit", K::Str, R::Free, D::Required),
        field("created_at", K::Timestamp, R::Free, D::Now),
    ],
};

pub const BENCH_STATUSES: &[&str] = &["held", "missed", "error", "refused", "skipped"];

/// The tables `memlife undo` puts back from their versions: the store's data. The others
/// are logs (`runs`, `audit_log`, `llm_batches`, `bench_runs`) and metadata (`memlife_meta`):
/// undo leaves them as they are, so their old versions repeat what the current one holds
/// and `optimize` keeps them only `[retention] keep_log_versions_days`.
pub static REVERTIBLE: &[&TableSpec] = &[
    &MEMORIES,
    &LINKS,
    &ENTITIES,
    &MEMORY_ENTITIES,
    &CLUSTERS,
    &ENTITY_SCANS,
    &REVIEW_QUEUE,
    &ANCHORS,
    &ACTIVATIONS,
];

/// Every table of the current schema version, in creation order.
pub static ALL_TABLES: &[&TableSpec] = &[
    &META,
    &MEMORIES,
    &LINKS,
    &ENTITIES,
    &MEMORY_ENTITIES,
    &RUNS,
    &AUDIT_LOG,
    &LLM_BATCHES,
    &CLUSTERS,
    &ENTITY_SCANS,
    &REVIEW_QUEUE,
    &ANCHORS,
    &BENCH_RUNS,
    &ACTIVATIONS,
];

/// Tables a user may load with `memlife import --table`.
pub static IMPORTABLE_TABLES: &[&TableSpec] = &[
    &MEMORIES,
    &LINKS,
    &ENTITIES,
    &MEMORY_ENTITIES,
    &RUNS,
    &AUDIT_LOG,
    // Benchmark histories of several machines merge into one store (`memlife export
    // --table bench_runs` there, import here).
    &BENCH_RUNS,
];

/// Checks a link type against the known set.
pub fn is_known_link_type(value: &str) -> bool {
    LINK_TYPES.contains(&value)
        || value
            .strip_prefix(SHARES_ENTITY_PREFIX)
            .is_some_and(|name| !name.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_same_as_points_to_an_earlier_column() {
        for table in ALL_TABLES {
            for (index, f) in table.fields.iter().enumerate() {
                if let Fallback::SameAs(other) = f.default {
                    let other_index = table.position(other).expect("SameAs target exists");
                    assert!(
                        other_index < index,
                        "{}.{} refers forward",
                        table.name,
                        f.name
                    );
                }
            }
            for key in table.key {
                assert!(table.field(key).is_some(), "{} key {key}", table.name);
            }
        }
    }

    #[test]
    fn memories_schema_has_a_fixed_size_embedding() {
        let schema = MEMORIES.arrow_schema(8);
        let embedding = schema.field_with_name("embedding").unwrap();
        assert_eq!(
            embedding.data_type(),
            &DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 8)
        );
        assert!(embedding.is_nullable());
        assert!(!schema.field_with_name("text").unwrap().is_nullable());
    }

    #[test]
    fn link_types_accept_the_shares_entity_family() {
        assert!(is_known_link_type("supersedes"));
        assert!(is_known_link_type("shares_entity:Max"));
        assert!(!is_known_link_type("shares_entity:"));
        assert!(!is_known_link_type("likes"));
    }
}
