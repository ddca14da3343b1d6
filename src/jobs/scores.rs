//! `memlife scores [--now T] [--all]`: the daily bulk recalculation (seed 000's
//! `recalculate_temporal_scores` and `bulk_recalculate_scores`) of memories that are not
//! archived, plus archived ones that were re-accessed or are keep_forever (they may revive):
//! salience decay, lifecycle state, TTL, retention and tier, importance; then the removal of
//! expired entity notes (seed 002 "Note Cleanup").
//!
//! A run recomputes the memories that are due (`memories.scores_due_at` passed or null), those
//! that links dated between the last run's clock and its own point at, and those with a
//! recall's activation pending (`store::activations`, dated by its clock at the latest): it
//! writes the activation onto the row in the same column update, then removes it. The first
//! run, new `[scores]` parameters, an earlier clock or `--all` recompute every one (`Pass`). Each
//! recomputed memory gets the clock until which a run would leave it as it is, to within
//! `[scores] due_tolerance` (`logic::scores::next_due`); writers of score inputs clear it.
//! That clock is brought forward by a fraction drawn from the memory's id and the clock
//! (`logic::scores::spread_due`; anywhere before it for a memory that had no date or on a
//! full pass, in its second half for one at the `due_max_days` horizon), so that memories
//! recomputed together do not come due together again.
//!
//! Columnar: Lance reads the needed columns in batches, each batch is computed in parallel
//! (rayon) by the pure functions of `scores`, and only rows whose values change are written
//! back, as key + changed columns, in one merge-insert commit. Memories archived by this run
//! are written to the audit log first (one commit), then the scores (one commit): a run killed
//! in between leaves audit rows for archivals the next run performs again, to the same state.
//! Archiving never deletes: archived memories stay in the table, queryable.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, ListArray, RecordBatch,
    RecordBatchIterator, StringArray, TimestampMicrosecondArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{Field, Float64Type, Int64Type, Schema, TimestampMicrosecondType};
use rayon::prelude::*;

use super::{ItemFailure, Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::logic::scores::{
    NEVER_DUE, ScoreInput, ScoreOutput, ScoreParams, State, Transition, Ttl, next_due, score,
    spread_due,
};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{ENTITIES, MEMORIES, timestamp_type};
use crate::store::activations::Activation;
use crate::store::audit::AuditRow;
use crate::store::sql_string;

/// Daily score recalculation: salience decay, lifecycle states, TTL policies, retention
/// and tiers, importance; expired entity notes removed. Idempotent for a given --now.
#[derive(clap::Args, Debug, Clone)]
pub struct ScoresArgs {
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    /// Recompute every memory not archived for good, due or not (as the first run, a run with
    /// new `[scores]` parameters, and a run at a clock before the last one's do).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for ScoresArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

const READ_COLUMNS: &[&str] = &[
    "id",
    "user_id",
    "kind",
    "state",
    "ttl_policy",
    "confidence",
    "salience",
    "salience_anchor",
    "access_count",
    "recall_frequency",
    "decay_gradient",
    "created_at",
    "last_accessed_at",
    "archived_at",
    "emotional_salience",
    "last_recall_interval_days",
    "importance",
    "retention",
    "tier",
    "scores_due_at",
];

/// One scanned batch's results: the rows to write and what happened.
struct Computed {
    update: Option<RecordBatch>,
    archived: Vec<(String, String, String, f64)>,
    transitions: BTreeMap<&'static str, u64>,
    tiers: BTreeMap<&'static str, u64>,
    rows: u64,
    /// Archived rows read only to be given a due date of never (not counted in `rows`).
    left_archived: u64,
    /// Rows whose value differs, per column of `UPDATE_COLUMNS`.
    column_changes: [u64; UPDATE_COLUMNS.len()],
    /// Rows that could not be scored (an unknown state or TTL policy), left as they are.
    failures: Vec<ItemFailure>,
}

fn f64s<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a Float64Array> {
    batch
        .column_by_name(name)
        .with_context(|| format!("memories has no column {name}"))
        .map(|c| c.as_primitive::<Float64Type>())
}

fn i64s<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a arrow::array::Int64Array> {
    batch
        .column_by_name(name)
        .with_context(|| format!("memories has no column {name}"))
        .map(|c| c.as_primitive::<Int64Type>())
}

fn strings<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    Ok(batch
        .column_by_name(name)
        .with_context(|| format!("memories has no column {name}"))?
        .as_string::<i32>())
}

fn times<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a TimestampMicrosecondArray> {
    Ok(batch
        .column_by_name(name)
        .with_context(|| format!("memories has no column {name}"))?
        .as_primitive::<TimestampMicrosecondType>())
}

fn opt_time(a: &TimestampMicrosecondArray, i: usize) -> Option<i64> {
    a.is_valid(i).then(|| a.value(i))
}

/// Computes one batch of memories at `now`: `batch` as `stored` holds it with its pending
/// activations written on (`with_activations`); what differs from `stored` is written. Due
/// dates are spread (`logic::scores::spread_due`) so memories recomputed together do not all
/// come due on the same later night: that of a memory that had none, or of every memory on a
/// full pass (`full`), anywhere before its exact date; one at the horizon, in the horizon's
/// second half.
fn compute(
    params: &ScoreParams,
    stored: &RecordBatch,
    batch: &RecordBatch,
    inbound: &HashMap<&str, u64>,
    now: i64,
    full: bool,
) -> Result<Computed> {
    let ids = strings(batch, "id")?;
    let users = strings(batch, "user_id")?;
    let kinds = strings(batch, "kind")?;
    let states = strings(batch, "state")?;
    let ttls = strings(batch, "ttl_policy")?;
    let tiers_old = strings(batch, "tier")?;
    let confidence = f64s(batch, "confidence")?;
    let salience = f64s(batch, "salience")?;
    let anchor = f64s(batch, "salience_anchor")?;
    let emotional = f64s(batch, "emotional_salience")?;
    let gradient = f64s(batch, "decay_gradient")?;
    let interval = f64s(batch, "last_recall_interval_days")?;
    let importance_old = f64s(batch, "importance")?;
    let retention_old = f64s(batch, "retention")?;
    let access = i64s(batch, "access_count")?;
    let recalls = i64s(batch, "recall_frequency")?;
    let created = times(batch, "created_at")?;
    let accessed = times(batch, "last_accessed_at")?;
    let archived_old = times(batch, "archived_at")?;

    let due_old = times(batch, "scores_due_at")?;
    let (before, input) = (Stored::of(stored)?, Stored::of(batch)?);
    let outputs: Vec<Result<Scored, String>> = (0..batch.num_rows())
        .into_par_iter()
        .map(|i| {
            let state = State::parse(states.value(i))
                .ok_or_else(|| format!("unknown state {:?}", states.value(i)))?;
            let ttl = Ttl::parse(ttls.value(i))
                .ok_or_else(|| format!("unknown ttl_policy {:?}", ttls.value(i)))?;
            // A memory never scored adopts its stored salience as the anchor.
            let salience_anchor = if anchor.is_valid(i) {
                anchor.value(i)
            } else {
                salience.value(i)
            };
            let reaccessed =
                opt_time(accessed, i) > opt_time(archived_old, i) && archived_old.is_valid(i);
            if state == State::Archived && ttl != Ttl::KeepForever && !reaccessed {
                // Stays archived, as it is (a run over every memory does not read it): only
                // its due date is written, so the next runs pass it by.
                let kept = ScoreOutput {
                    salience: salience.value(i),
                    state,
                    retention: retention_old.value(i),
                    tier: stored_tier(tiers_old.value(i)),
                    importance: importance_old.value(i),
                    archived_at: opt_time(archived_old, i),
                    transition: None,
                };
                return Ok((kept, salience_anchor, NEVER_DUE));
            }
            let input = ScoreInput {
                state,
                ttl,
                episodic: kinds.value(i) == "episode",
                confidence: confidence.value(i),
                salience: salience.value(i),
                salience_anchor,
                access_count: access.value(i),
                recall_frequency: recalls.value(i),
                decay_gradient: gradient.value(i),
                created_at: created.value(i),
                last_accessed_at: opt_time(accessed, i),
                archived_at: opt_time(archived_old, i),
                emotional_salience: emotional.value(i),
                inbound_links: inbound.get(ids.value(i)).copied().unwrap_or(0),
                last_recall_interval_days: interval.value(i),
            };
            let out = score(params, &input, now);
            let due = next_due(params, &input, &out, salience_anchor, now);
            let first = full || !due_old.is_valid(i);
            let due = spread_due(params, ids.value(i), now, due, first);
            Ok((out, salience_anchor, due))
        })
        .collect();

    let mut changed = Vec::new();
    let mut computed = Computed {
        update: None,
        archived: Vec::new(),
        transitions: BTreeMap::new(),
        tiers: BTreeMap::new(),
        rows: batch.num_rows() as u64,
        left_archived: 0,
        column_changes: [0; UPDATE_COLUMNS.len()],
        failures: Vec::new(),
    };
    let mut kept = Vec::new();
    for (i, output) in outputs.into_iter().enumerate() {
        let (out, used_anchor, due) = match output {
            Ok(computed_row) => computed_row,
            Err(reason) => {
                computed.failures.push(ItemFailure {
                    item: format!("memory {}", ids.value(i)),
                    reason,
                });
                continue;
            }
        };
        if due == NEVER_DUE && out.transition.is_none() {
            computed.rows -= 1;
            computed.left_archived += 1;
        } else {
            *computed.tiers.entry(out.tier).or_default() += 1;
        }
        if let Some(t) = out.transition {
            *computed.transitions.entry(t.name()).or_default() += 1;
            if matches!(t, Transition::Archived | Transition::Expired) {
                computed.archived.push((
                    ids.value(i).to_string(),
                    users.value(i).to_string(),
                    t.name().to_string(),
                    out.salience,
                ));
            }
        }
        // In the order of UPDATE_COLUMNS.
        let column_differs =
            before.differs(&input, i, &out, used_anchor, due, opt_time(due_old, i));
        for (count, differs) in computed.column_changes.iter_mut().zip(column_differs) {
            *count += u64::from(differs);
        }
        if column_differs.contains(&true) {
            changed.push(i as u32);
            kept.push((out, used_anchor, due));
        }
    }
    if changed.is_empty() {
        return Ok(computed);
    }
    computed.update = Some(update_batch(batch, changed, &kept)?);
    Ok(computed)
}

/// The values of a batch `compute` compares its results with: as stored, and as read with
/// the pending activations written on.
struct Stored<'a> {
    salience: &'a Float64Array,
    anchor: &'a Float64Array,
    state: &'a StringArray,
    tier: &'a StringArray,
    retention: &'a Float64Array,
    importance: &'a Float64Array,
    archived_at: &'a TimestampMicrosecondArray,
    access: &'a arrow::array::Int64Array,
    recalls: &'a arrow::array::Int64Array,
    accessed: &'a TimestampMicrosecondArray,
    interval: &'a Float64Array,
    gradient: &'a Float64Array,
}

impl<'a> Stored<'a> {
    fn of(batch: &'a RecordBatch) -> Result<Stored<'a>> {
        Ok(Stored {
            salience: f64s(batch, "salience")?,
            anchor: f64s(batch, "salience_anchor")?,
            state: strings(batch, "state")?,
            tier: strings(batch, "tier")?,
            retention: f64s(batch, "retention")?,
            importance: f64s(batch, "importance")?,
            archived_at: times(batch, "archived_at")?,
            access: i64s(batch, "access_count")?,
            recalls: i64s(batch, "recall_frequency")?,
            accessed: times(batch, "last_accessed_at")?,
            interval: f64s(batch, "last_recall_interval_days")?,
            gradient: f64s(batch, "decay_gradient")?,
        })
    }

    /// Which of `UPDATE_COLUMNS` (in its order) row `i` changes: its computed scores and
    /// due date against these stored values, and the access columns of `input`.
    fn differs(
        &self,
        input: &Stored,
        i: usize,
        out: &ScoreOutput,
        anchor: f64,
        due: i64,
        due_old: Option<i64>,
    ) -> [bool; UPDATE_COLUMNS.len()] {
        [
            out.salience != self.salience.value(i),
            !self.anchor.is_valid(i) || self.anchor.value(i) != anchor.clamp(0.0, 1.0),
            out.state.as_str() != self.state.value(i),
            out.tier != self.tier.value(i),
            out.retention != self.retention.value(i),
            out.importance != self.importance.value(i),
            out.archived_at != opt_time(self.archived_at, i),
            Some(due) != due_old,
            input.access.value(i) != self.access.value(i),
            input.recalls.value(i) != self.recalls.value(i),
            opt_time(input.accessed, i) != opt_time(self.accessed, i),
            input.interval.value(i) != self.interval.value(i),
            input.gradient.value(i) != self.gradient.value(i),
        ]
    }
}

/// The key and every update column of the changed rows (`changed`: their row numbers in
/// `batch`), with their new values: the scores computed (`kept`), and the access columns as
/// `batch` holds them (its pending activations written on).
fn update_batch(batch: &RecordBatch, changed: Vec<u32>, kept: &[Scored]) -> Result<RecordBatch> {
    let take = arrow::array::UInt32Array::from(changed);
    let taken = |name: &str| arrow::compute::take(batch.column_by_name(name).unwrap(), &take, None);
    let id_column = taken("id")?;
    let mut columns: Vec<ArrayRef> = vec![
        id_column,
        Arc::new(Float64Array::from_iter_values(
            kept.iter().map(|(o, ..)| o.salience),
        )),
        Arc::new(Float64Array::from_iter_values(
            kept.iter().map(|(_, a, _)| a.clamp(0.0, 1.0)),
        )),
        Arc::new(StringArray::from_iter_values(
            kept.iter().map(|(o, ..)| o.state.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            kept.iter().map(|(o, ..)| o.tier),
        )),
        Arc::new(Float64Array::from_iter_values(
            kept.iter().map(|(o, ..)| o.retention),
        )),
        Arc::new(Float64Array::from_iter_values(
            kept.iter().map(|(o, ..)| o.importance),
        )),
        Arc::new(
            TimestampMicrosecondArray::from(
                kept.iter().map(|(o, ..)| o.archived_at).collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(kept.iter().map(|(.., due)| *due))
                .with_timezone("UTC"),
        ),
    ];
    for name in &UPDATE_COLUMNS[ACCESS_COLUMNS..] {
        columns.push(taken(name)?);
    }
    Ok(RecordBatch::try_new(update_schema(), columns)?)
}

/// The columns scores writes, besides the key `id`: those it computes, then (from
/// `ACCESS_COLUMNS` on) those only a pending activation changes.
const UPDATE_COLUMNS: [&str; 13] = [
    "salience",
    "salience_anchor",
    "state",
    "tier",
    "retention",
    "importance",
    "archived_at",
    "scores_due_at",
    "access_count",
    "recall_frequency",
    "last_accessed_at",
    "last_recall_interval_days",
    "decay_gradient",
];
const ACCESS_COLUMNS: usize = 8;

/// `batch` with the pending activations of its memories written on (those newer than what
/// the row holds), as scores reads a memory: the inputs of its scores, and the access
/// columns it writes back.
fn with_activations(
    batch: &RecordBatch,
    pending: &HashMap<&str, &Activation>,
) -> Result<RecordBatch> {
    let ids = strings(batch, "id")?;
    let accessed = times(batch, "last_accessed_at")?;
    let mut found = Vec::new();
    for i in 0..batch.num_rows() {
        if let Some(a) = pending.get(ids.value(i))
            && a.newer_than(opt_time(accessed, i))?
        {
            found.push((i, *a));
        }
    }
    if found.is_empty() {
        return Ok(batch.clone());
    }
    let mut rows: Vec<Option<&Activation>> = vec![None; batch.num_rows()];
    for (i, a) in &found {
        rows[*i] = Some(a);
    }
    let f64_column = |name: &str, get: fn(&Activation) -> f64| -> Result<ArrayRef> {
        let old = f64s(batch, name)?;
        Ok(Arc::new(Float64Array::from_iter((0..rows.len()).map(
            |i| {
                rows[i]
                    .map(get)
                    .or_else(|| old.is_valid(i).then(|| old.value(i)))
            },
        ))))
    };
    let i64_column = |name: &str, get: fn(&Activation) -> i64| -> Result<ArrayRef> {
        let old = i64s(batch, name)?;
        Ok(Arc::new(arrow::array::Int64Array::from_iter(
            (0..rows.len()).map(|i| {
                rows[i]
                    .map(get)
                    .or_else(|| old.is_valid(i).then(|| old.value(i)))
            }),
        )))
    };
    let str_column = |name: &str, get: fn(&Activation) -> &str| -> Result<ArrayRef> {
        let old = strings(batch, name)?;
        Ok(Arc::new(StringArray::from_iter((0..rows.len()).map(|i| {
            rows[i]
                .map(get)
                .or_else(|| old.is_valid(i).then(|| old.value(i)))
        }))))
    };
    let time_column = |name: &str, activated: bool| -> Result<ArrayRef> {
        let old = times(batch, name)?;
        let mut out = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            out.push(match row {
                Some(a) if activated => Some(a.accessed_at()?),
                Some(a) => a.archived_at()?,
                None => opt_time(old, i),
            });
        }
        Ok(Arc::new(
            TimestampMicrosecondArray::from(out).with_timezone_opt(old.timezone()),
        ))
    };
    let replaced: Vec<(&str, ArrayRef)> = vec![
        (
            "access_count",
            i64_column("access_count", |a| a.access_count)?,
        ),
        (
            "recall_frequency",
            i64_column("recall_frequency", |a| a.recall_frequency)?,
        ),
        ("last_accessed_at", time_column("last_accessed_at", true)?),
        ("archived_at", time_column("archived_at", false)?),
        (
            "last_recall_interval_days",
            f64_column("last_recall_interval_days", |a| a.last_recall_interval_days)?,
        ),
        (
            "decay_gradient",
            f64_column("decay_gradient", |a| a.decay_gradient)?,
        ),
        ("salience", f64_column("salience", |a| a.salience)?),
        (
            "salience_anchor",
            f64_column("salience_anchor", |a| a.salience_anchor)?,
        ),
        ("importance", f64_column("importance", |a| a.importance)?),
        ("retention", f64_column("retention", |a| a.retention)?),
        ("state", str_column("state", |a| a.state.as_str())?),
        ("tier", str_column("tier", |a| a.tier.as_str())?),
    ];
    let schema = batch.schema();
    let mut columns = batch.columns().to_vec();
    for (name, column) in replaced {
        let index = schema.index_of(name)?;
        columns[index] = column;
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// A memory's scores at the run's clock, the salience anchor they decay from, and until
/// when they hold (`logic::scores::next_due`).
type Scored = (ScoreOutput, f64, i64);

/// A stored tier as the static name `ScoreOutput` holds (an unknown one reads as archived:
/// only archived memories are kept as they are).
fn stored_tier(tier: &str) -> &'static str {
    crate::model::schema::MEMORY_TIERS
        .iter()
        .find(|t| **t == tier)
        .copied()
        .unwrap_or("archived")
}

fn update_schema() -> Arc<Schema> {
    let field = |name: &str| {
        let spec = MEMORIES.field(name).expect("memories column");
        Field::new(
            name,
            crate::model::schema::data_type(spec.kind, 0),
            spec.nullable(),
        )
    };
    let names = std::iter::once("id").chain(UPDATE_COLUMNS);
    Arc::new(Schema::new(names.map(field).collect::<Vec<_>>()))
}

/// The update batches cut to the key and the columns some row changes. Lance's column update
/// rewrites a written column for every row of each fragment it touches, and salience decays
/// every day while state, tier and the anchor rarely move: writing only the changed columns
/// keeps the daily run from rewriting (and the retention window from keeping) the others.
fn changed_columns_only(
    updates: Vec<RecordBatch>,
    changes: &[u64; UPDATE_COLUMNS.len()],
) -> Result<Vec<RecordBatch>> {
    let keep: Vec<usize> = std::iter::once(0)
        .chain(
            (0..UPDATE_COLUMNS.len())
                .filter(|&c| changes[c] > 0)
                .map(|c| c + 1),
        )
        .collect();
    updates
        .iter()
        .map(|batch| Ok(batch.project(&keep)?))
        .collect()
}

/// The links' targets (of the user in scope), in batches, and the memories links made from
/// `since` to `now` point at: one scan of the links' targets and clocks. A link dated after
/// `now` (written by a job at another clock) is new to the first run whose clock passes its
/// date. What the targets count for is counted later, only for the memories read
/// (`inbound_counts`).
async fn links_in(
    ctx: &JobCtx<'_>,
    since: Option<i64>,
    now: i64,
) -> Result<(Vec<RecordBatch>, Vec<String>)> {
    let filter = ctx
        .user
        .as_ref()
        .map(|u| format!("user_id = {}", sql_string(u)));
    let batches = ctx
        .store
        .scan_columns("links", filter.as_deref(), &["target_id", "created_at"])
        .await?;
    let mut targets = std::collections::BTreeSet::new();
    if let Some(since) = since {
        for batch in &batches {
            let ids = strings(batch, "target_id")?;
            let made = times(batch, "created_at")?;
            for i in 0..batch.num_rows() {
                if made.is_valid(i) && (since..=now).contains(&made.value(i)) {
                    targets.insert(ids.value(i).to_string());
                }
            }
        }
    }
    Ok((batches, targets.into_iter().collect()))
}

/// Inbound links of each memory of `memories` (its importance counts them), from the links'
/// targets (`links_in`). Only the memories read are counted: on a due pass a few thousand,
/// where the links point at every memory of the store (counting them all, keys copied, took
/// 8.6 ms of `scores` on day 366 of `bench year`, 3.1 ms on day 2).
fn inbound_counts<'a>(
    memories: &'a [RecordBatch],
    links: &[RecordBatch],
) -> Result<HashMap<&'a str, u64>> {
    let mut counts: HashMap<&str, u64> =
        HashMap::with_capacity(memories.iter().map(|b| b.num_rows()).sum());
    for batch in memories {
        let ids = strings(batch, "id")?;
        counts.extend((0..batch.num_rows()).map(|i| (ids.value(i), 0)));
    }
    for batch in links {
        let targets = strings(batch, "target_id")?;
        for i in 0..batch.num_rows() {
            if let Some(n) = counts.get_mut(targets.value(i)) {
                *n += 1;
            }
        }
    }
    Ok(counts)
}

/// Drops entity notes whose `expires_at` has passed; returns (entities changed, notes removed).
async fn clean_notes(ctx: &JobCtx<'_>, now: i64) -> Result<(u64, u64)> {
    let filter = ctx.user_filter_and("notes IS NOT NULL");
    let batches = ctx
        .store
        .scan_columns(ENTITIES.name, Some(&filter), &["id", "notes"])
        .await?;
    let mut updates = Vec::new();
    let (mut entities, mut removed) = (0u64, 0u64);
    for batch in &batches {
        let notes = batch
            .column_by_name("notes")
            .context("entity rows without notes")?
            .as_list::<i32>();
        let values = notes.values().as_struct();
        let expires = values
            .column_by_name("expires_at")
            .context("entity notes have no expires_at")?
            .as_primitive::<TimestampMicrosecondType>();
        // One pass: the notes kept of the rows that lose some, and those rows' new offsets.
        let offsets_in = notes.value_offsets();
        let mut keep = vec![false; values.len()];
        let mut rows = Vec::new();
        let mut offsets = vec![0i32];
        for row in (0..batch.num_rows()).filter(|&r| notes.is_valid(r)) {
            let range = offsets_in[row] as usize..offsets_in[row + 1] as usize;
            let live = |j: usize| expires.is_null(j) || expires.value(j) > now;
            let kept = range.clone().filter(|&j| live(j)).count();
            if kept < range.len() {
                removed += (range.len() - kept) as u64;
                range.for_each(|j| keep[j] = live(j));
                rows.push(row as u32);
                offsets.push(offsets.last().unwrap() + kept as i32);
            }
        }
        if rows.is_empty() {
            continue;
        }
        entities += rows.len() as u64;
        let take = arrow::array::UInt32Array::from(rows.clone());
        let filtered = arrow::compute::filter(notes.values(), &BooleanArray::from(keep))?;
        let field = match ENTITIES
            .arrow_schema(0)
            .field_with_name("notes")?
            .data_type()
        {
            arrow::datatypes::DataType::List(f) => f.clone(),
            _ => unreachable!("notes is a list"),
        };
        let list = ListArray::try_new(field, OffsetBuffer::new(offsets.into()), filtered, None)?;
        let ids = arrow::compute::take(
            batch
                .column_by_name("id")
                .context("entity rows without id")?,
            &take,
            None,
        )?;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", arrow::datatypes::DataType::Utf8, false),
            ENTITIES.arrow_schema(0).field_with_name("notes")?.clone(),
            Field::new("updated_at", timestamp_type(), false),
        ]));
        let updated =
            Arc::new(TimestampMicrosecondArray::from(vec![now; rows.len()]).with_timezone("UTC"))
                as ArrayRef;
        updates.push(RecordBatch::try_new(
            schema,
            vec![ids, Arc::new(list), updated],
        )?);
    }
    if !updates.is_empty() && !ctx.dry_run {
        let schema = updates[0].schema();
        let reader = RecordBatchIterator::new(updates.into_iter().map(Ok), schema);
        ctx.store
            .update_columns(&ENTITIES, Box::new(reader))
            .await?;
    }
    Ok((entities, removed))
}

/// Memories whose archival at clock `now` is already in the audit log: a run at the same clock
/// that was killed between its audit append and its score update logged them. Only an earlier
/// run at this very clock can have logged them: `runs` (the `scores` runs started before
/// this one) says whether there is one, and the audit log (which grows with every archival)
/// is read only then. A run of the same scope holds its lock, so none starts in between.
async fn archivals_logged_at(
    ctx: &JobCtx<'_>,
    runs: &[ScoresRun],
    now: i64,
) -> Result<std::collections::HashSet<String>> {
    let mut logged = std::collections::HashSet::new();
    let clock = format!("\"now\":\"{}\"", format_timestamp(now));
    if !runs.iter().any(|r| r.params.contains(&clock)) {
        return Ok(logged);
    }
    let filter = format!(
        "operation = 'ARCHIVE' AND created_at = {}",
        crate::store::sql_timestamp(now)
    );
    for batch in ctx
        .store
        .scan_columns(
            crate::model::schema::AUDIT_LOG.name,
            Some(&filter),
            &["target_id"],
        )
        .await?
    {
        let ids = strings(&batch, "target_id")?;
        logged.extend((0..batch.num_rows()).map(|i| ids.value(i).to_string()));
    }
    Ok(logged)
}

/// The audit rows of this run's archivals (a first run over a large store can archive
/// hundreds of thousands of memories; the shared writer builds them column by column).
fn archive_audit_rows(
    run_id: &str,
    now: i64,
    archived: &[(String, String, String, f64)],
    params: &ScoreParams,
) -> Vec<AuditRow> {
    archived
        .iter()
        .map(|(id, user, why, salience)| {
            // Keyed by the memory and the clock, not the run: a rerun at the same clock after
            // a crash finds these rows instead of writing them again.
            let mut row = AuditRow::new(run_id, "ARCHIVE", &format!("{id}|{now}"), now);
            row.user_id = Some(user.clone());
            row.source_ids = vec![id.clone()];
            row.target_id = Some(id.clone());
            row.classification = Some(why.clone());
            row.reasoning = Some(if why == "expired" {
                "ephemeral ttl_policy deadline reached".to_string()
            } else {
                format!("salience {salience:.4} below {}", params.archive_salience)
            });
            row
        })
        .collect()
}

/// Which memories a run recomputes.
enum Pass {
    /// Every memory not archived for good, for the reason given.
    Full(&'static str),
    /// Those due (`scores_due_at` passed or null), and those links made since `since` (the
    /// clock of the last run of the same scope and parameters) point at: their importance
    /// counts inbound links.
    Due { since: i64 },
}

/// The last finished run of this scope decides: none, other parameters or a later clock
/// make a full pass. "Last" is the latest started: runs of one scope hold its lock, so they
/// follow one another, and each left the memories as its clock and parameters made them (a
/// run at a clock before its predecessor's passed over every memory).
fn choose_pass(
    ctx: &JobCtx<'_>,
    all: bool,
    params: &serde_json::Value,
    runs: &[ScoresRun],
) -> Pass {
    if all {
        return Pass::Full("--all");
    }
    let last = last_run_params(ctx, runs).and_then(|p| {
        let now = crate::model::encoding::parse_timestamp(p["now"].as_str()?)?;
        Some((now, p["params"] == params["params"]))
    });
    match last {
        None => Pass::Full("no earlier run of this scope"),
        Some((_, false)) => Pass::Full("new [scores] parameters"),
        Some((then, true)) if then > ctx.now.timestamp_micros() => {
            Pass::Full("a clock before the last run's")
        }
        Some((then, true)) => Pass::Due { since: then },
    }
}

/// A `scores` run as the pass choice and the archival check read it.
#[derive(serde::Deserialize)]
struct ScoresRun {
    started_at: i64,
    status: String,
    dry_run: Option<bool>,
    user_id: Option<String>,
    params: String,
}

/// Every `scores` run, latest started first, in one read of `runs` (by its `job` index):
/// what both the pass choice and the archival check ask, so the runs of every night before
/// are read once, not twice, and their options parsed only back to the last run of this
/// scope.
async fn scores_runs(ctx: &JobCtx<'_>) -> Result<Vec<ScoresRun>> {
    let filter = format!(
        "job = {}",
        crate::store::sql_string(JobName::Scores.as_str())
    );
    let mut runs: Vec<ScoresRun> = ctx
        .store
        .scan_rows(crate::model::schema::RUNS.name, Some(&filter))
        .await?;
    runs.sort_unstable_by_key(|r| std::cmp::Reverse(r.started_at));
    Ok(runs)
}

/// The parameters of the latest started finished (`done`, `partial`), not dry, `scores` run
/// of the context's scope; `runs` is latest first.
fn last_run_params(ctx: &JobCtx<'_>, runs: &[ScoresRun]) -> Option<serde_json::Value> {
    let scope = ctx.lock_scope();
    runs.iter()
        .filter(|r| matches!(r.status.as_str(), "done" | "partial"))
        .filter(|r| r.dry_run == Some(false))
        .filter(|r| r.user_id == ctx.user)
        .find_map(|r| {
            let params = serde_json::from_str::<serde_json::Value>(&r.params).ok()?;
            let of_scope =
                params.get("scope").is_some() && params["scope"].as_str() == scope.as_deref();
            of_scope.then_some(params)
        })
}

/// A due pass for links made to more memories than this reads every memory.
const DUE_LOOKUP_LIMIT: usize = 20_000;

/// The memories a run recomputes, batch by batch, the links' targets (`links_in`); and a note.
async fn read_memories(
    ctx: &JobCtx<'_>,
    pass: Pass,
    now: i64,
    activated: &[String],
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>, String)> {
    // Archived for good: not recomputed; read once, to be given a due date of never. A
    // memory with a pending activation is read whatever it holds.
    let mut kept = "(state != 'archived' OR ttl_policy = 'keep_forever' \
                OR last_accessed_at > archived_at OR scores_due_at IS NULL"
        .to_string();
    if activated.len() > DUE_LOOKUP_LIMIT {
        kept = "(true".into();
    } else if !activated.is_empty() {
        kept = format!("{kept} OR id IN ({})", crate::store::sql_list(activated));
    }
    kept.push(')');
    let kept = kept.as_str();
    let since = match pass {
        Pass::Full(_) => None,
        Pass::Due { since } => Some(since),
    };
    let t = Instant::now();
    let (links, mut targets) = links_in(ctx, since, now).await?;
    let links_ms = t.elapsed().as_millis();
    let linked = targets.len();
    targets.extend(activated.iter().cloned());
    let (filter, note) = match (pass, targets.len() > DUE_LOOKUP_LIMIT) {
        (Pass::Full(why), _) => (ctx.user_filter_and(kept), format!("every memory ({why})")),
        (Pass::Due { .. }, true) => (
            ctx.user_filter_and(kept),
            "every memory (many new links)".to_string(),
        ),
        (Pass::Due { since }, false) => {
            let mut due = format!(
                "scores_due_at IS NULL OR scores_due_at <= {}",
                crate::store::sql_timestamp(now)
            );
            if !targets.is_empty() {
                due = format!("{due} OR id IN ({})", crate::store::sql_list(&targets));
            }
            let note = format!(
                "memories due, pointed at by the {linked} links made since {}, or with \
                 one of the {} pending activations",
                format_timestamp(since),
                activated.len()
            );
            (ctx.user_filter_and(&format!("({due})")), note)
        }
    };
    let t = Instant::now();
    let batches = ctx
        .store
        .scan_columns(MEMORIES.name, Some(&filter), READ_COLUMNS)
        .await?;
    let note = format!(
        "{note}; links read in {links_ms} ms, memories in {} ms",
        t.elapsed().as_millis()
    );
    Ok((batches, links, note))
}

pub async fn run(ctx: &JobCtx<'_>, args: &ScoresArgs) -> Result<JobReport> {
    let params = &ctx.app.config().await?.scores;
    let now = ctx.now.timestamp_micros();
    let run_params = serde_json::json!({
        "now": format_timestamp(now),
        "params": params,
        "scope": ctx.lock_scope(),
    });
    let t = Instant::now();
    let runs = scores_runs(ctx).await?;
    let pass = choose_pass(ctx, args.all, &run_params, &runs);
    let chosen_ms = t.elapsed().as_millis();
    let full = matches!(pass, Pass::Full(_));
    let log = RunLog::start(ctx, JobName::Scores.as_str(), &run_params).await?;
    let mut report = JobReport::new(JobName::Scores.as_str(), ctx);
    let started = Instant::now();
    let pending = ctx
        .store
        .pending_activations(Some(&ctx.user_filter_and(&format!(
            "recalled_at <= {}",
            crate::store::sql_timestamp(now)
        ))))
        .await?;
    let activated: Vec<String> = pending.iter().map(|p| p.memory_id.clone()).collect();
    let by_memory: HashMap<&str, &Activation> = pending
        .iter()
        .map(|p| (p.memory_id.as_str(), &p.activation))
        .collect();
    let (batches, links, read_note) = read_memories(ctx, pass, now, &activated).await?;
    let inbound = inbound_counts(&batches, &links)?;
    drop(links);
    let read_at = started.elapsed();
    let mut compute_time = std::time::Duration::ZERO;
    let (mut updates, mut archived) = (Vec::new(), Vec::new());
    let (mut transitions, mut tiers): (BTreeMap<&str, u64>, BTreeMap<&str, u64>) =
        Default::default();
    let (mut processed, mut left_archived) = (0u64, 0u64);
    let mut column_changes = [0u64; UPDATE_COLUMNS.len()];
    for batch in &batches {
        let t = Instant::now();
        let input = with_activations(batch, &by_memory)?;
        let computed = compute(params, batch, &input, &inbound, now, full)?;
        compute_time += t.elapsed();
        processed += computed.rows;
        left_archived += computed.left_archived;
        for (total, n) in column_changes.iter_mut().zip(computed.column_changes) {
            *total += n;
        }
        for (k, v) in computed.transitions {
            *transitions.entry(k).or_default() += v;
        }
        for (k, v) in computed.tiers {
            *tiers.entry(k).or_default() += v;
        }
        archived.extend(computed.archived);
        report.failures.extend(computed.failures);
        updates.extend(computed.update);
    }
    let changed: u64 = updates.iter().map(|b| b.num_rows() as u64).sum();
    report.count("processed", processed);
    report.count("full_pass", u64::from(full));
    report.count("left_archived", left_archived);
    report.count("failed", report.failures.len() as u64);
    report.count("changed", changed);
    for (name, n) in UPDATE_COLUMNS.iter().zip(column_changes) {
        report.count(&format!("changed_{name}"), n);
    }
    for name in ["promoted", "made_core", "archived", "expired", "revived"] {
        report.count(name, transitions.get(name).copied().unwrap_or(0));
    }
    for tier in ["hot", "warm", "cold", "archived"] {
        report.count(
            &format!("tier_{tier}"),
            tiers.get(tier).copied().unwrap_or(0),
        );
    }
    if !ctx.dry_run {
        // Archivals are logged before they happen.
        let logged = if archived.is_empty() {
            Default::default()
        } else {
            archivals_logged_at(ctx, &runs, now).await?
        };
        archived.retain(|(id, ..)| !logged.contains(id));
        let audit = archive_audit_rows(log.run_id(), now, &archived, params);
        ctx.store.append_audit(&audit).await?;
        crate::crash::point("scores.after-audit");
        if !updates.is_empty() {
            let updates = changed_columns_only(updates, &column_changes)?;
            let schema = updates[0].schema();
            let reader = RecordBatchIterator::new(updates.into_iter().map(Ok), schema);
            ctx.store
                .update_columns(&MEMORIES, Box::new(reader))
                .await?;
            crate::crash::point("scores.after-update");
        }
        // Written (or older than the row): no longer pending. A memory that could not be
        // scored keeps its activation for the next run.
        let failed: std::collections::HashSet<&str> = report
            .failures
            .iter()
            .filter_map(|f| f.item.strip_prefix("memory "))
            .collect();
        let folded: Vec<_> = pending
            .iter()
            .filter(|p| !failed.contains(p.memory_id.as_str()))
            .cloned()
            .collect();
        ctx.store.remove_activations(&folded).await?;
        report.count("activations_written", folded.len() as u64);
        crate::crash::point("scores.after-activations");
    }
    let (entities, notes) = clean_notes(ctx, now).await?;
    report.count("entities_notes_cleaned", entities);
    report.count("notes_removed", notes);
    report.count("compute_ms", compute_time.as_millis() as u64);
    report
        .notes
        .push(format!("pass chosen in {chosen_ms} ms; read {read_note}"));
    report.notes.push(format!(
        "now = {}; compute {} ms of {} ms (read in {} ms)",
        format_timestamp(now),
        compute_time.as_millis(),
        started.elapsed().as_millis(),
        read_at.as_millis()
    ));
    log.finish(ctx, &mut report).await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(column: &str, values: &[&str]) -> RecordBatch {
        let schema = Schema::new(vec![Field::new(
            column,
            arrow::datatypes::DataType::Utf8,
            false,
        )]);
        let array: ArrayRef = Arc::new(StringArray::from(values.to_vec()));
        RecordBatch::try_new(Arc::new(schema), vec![array]).unwrap()
    }

    #[test]
    fn inbound_links_are_counted_for_the_memories_read_only() {
        let memories = [ids("id", &["a", "b"]), ids("id", &["c"])];
        let links = [
            ids("target_id", &["a", "x", "a"]),
            ids("target_id", &["c", "y", "a"]),
        ];
        let counts = inbound_counts(&memories, &links).unwrap();
        assert_eq!(counts.len(), 3, "{counts:?}");
        assert_eq!(counts["a"], 3);
        assert_eq!(counts["b"], 0);
        assert_eq!(counts["c"], 1);
        assert!(!counts.contains_key("x"));
    }
}
