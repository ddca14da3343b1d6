//! `memlife describe`: seed 002's nightly "Description Consolidation" for entities. Every
//! entity marked dirty (new, merged, given notes, or named by a new or changed memory) gets an updated short description from
//! its current description, its notes (oldest first) and the newest memories that name it,
//! through the `entity.describe` task of the LLM layer (role `fast` unless memlife.toml says
//! otherwise). With `--llm offline`, or when no provider gives a valid reply, the offline
//! rules of `llm::offline::describe` answer instead, and the report counts those fallbacks.
//!
//! The embedding is made again from the name, the description and the notes; the flag is
//! cleared. An entity whose description comes out as it was keeps its row and vector: only the
//! flag is cleared. Writes: the changed entities in one commit, then the flags of the
//! unchanged ones; each entity's old description goes to the audit log (DESCRIBE) first. A
//! run killed half-way leaves the rest dirty for the next. Online only: descriptions are short
//! and few per night (seed 002 estimates cents per thousand users), so no Batch API round.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use serde_json::json;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::embedders::{Embedded, EmbedderArgs};
use crate::llm::offline::{describe as offline_describe, entity_view_text};
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{CallMode, Item, LlmArgs};
use crate::logic::describe::{DescribePlan, Described, embedding_text, plan_descriptions};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{ENTITIES, MEMORY_ENTITIES};
use crate::model::typed::{EntityRow, MemoryEntityRow, ShownMemory};
use crate::store::sql_list;

/// Updated descriptions of dirty entities (LLM role `entity.describe`, offline fallback).
#[derive(clap::Args, Debug, Clone)]
pub struct DescribeArgs {
    /// Newest memories naming the entity shown with it.
    #[arg(long, default_value_t = 8)]
    pub memories: usize,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for DescribeArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

/// The memories naming each of `ids` (entity id to memory ids), and the live ones among them
/// as the LLM layer shows them.
async fn naming_memories(
    ctx: &JobCtx<'_>,
    ids: &[String],
) -> Result<(BTreeMap<String, Vec<String>>, BTreeMap<String, MemoryView>)> {
    let mut named: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for chunk in ids.chunks(1000) {
        let filter = format!("entity_id IN ({})", sql_list(chunk));
        for row in ctx
            .store
            .scan_rows::<MemoryEntityRow>(MEMORY_ENTITIES.name, Some(&filter))
            .await?
        {
            named.entry(row.entity_id).or_default().push(row.memory_id);
        }
    }
    let memory_ids: Vec<String> = named.values().flatten().cloned().collect();
    let live = "state != 'archived' AND archived_at IS NULL";
    let memories = ctx
        .store
        .rows_with_ids::<ShownMemory>("memories", &memory_ids, Some(live))
        .await?
        .into_iter()
        .map(|row| (row.id.clone(), MemoryView::from_shown(row)))
        .collect();
    Ok((named, memories))
}

/// The `entity.describe` request for one dirty entity: the entity, its description and notes,
/// then the newest `max` live memories naming it.
fn item_of(row: &EntityRow, facts: Vec<&MemoryView>, max: usize, clock: &str) -> Item {
    let id = row.id.clone();
    let view = |id: String, kind: &str, created_at: String, text: String| MemoryView {
        id,
        kind: kind.into(),
        created_at,
        happens_at: None,
        text,
        dates: Vec::new(),
        cluster: None,
    };
    let mut views = vec![view(
        id.clone(),
        "entity",
        format_timestamp(row.created_at),
        entity_view_text(&row.name, &row.entity_type),
    )];
    let description = row.description.clone().unwrap_or_default();
    if !description.trim().is_empty() {
        views.push(view(
            format!("{id}#description"),
            "description",
            format_timestamp(row.updated_at),
            description,
        ));
    }
    for (i, note) in row.notes_oldest_first().into_iter().enumerate() {
        let added = format_timestamp(note.added_at);
        views.push(view(
            format!("{id}#note{i}"),
            "note",
            added,
            note.text.clone(),
        ));
    }
    let mut facts = facts;
    facts.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    views.extend(facts.into_iter().take(max).cloned());
    Item {
        custom_id: id,
        input: TaskInput {
            task: Task::EntityDescribe,
            memories: views,
            proposal: None,
            now: clock.to_string(),
            question: None,
        },
    }
}

/// Writes the plan's changed descriptions: the DESCRIBE audit rows (the old description)
/// first, then the entities with their new description and vector, unflagged, in one commit
/// per 5,000.
async fn write_described(ctx: &JobCtx<'_>, args: &DescribeArgs, plan: DescribePlan) -> Result<()> {
    let now = ctx.now.timestamp_micros();
    let dim = ctx.store.embedding_dim();
    let embedder = ctx.app.embedder(&args.embedder, dim, 64).await?;
    let model = embedder.model_name();
    let texts: Vec<String> = plan.changed.iter().map(embedding_text).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = embedder.embed(&refs).await?;
    ctx.store.write_audit(&plan.audit).await?;
    crate::crash::point("describe.after-audit");
    let rows: Vec<EntityRow> = plan
        .changed
        .into_iter()
        .zip(vectors)
        .map(|(row, embedded)| match embedded {
            Embedded::Vector { values, .. } => EntityRow {
                embedding: Some(values),
                embedding_model: Some(model.to_string()),
                ..row
            },
            Embedded::Refused(_) => row,
        })
        .collect();
    for chunk in rows.chunks(5_000) {
        ctx.store.upsert_entities(chunk, now).await?;
    }
    crate::crash::point("describe.after-entities");
    Ok(())
}

pub async fn run(ctx: &JobCtx<'_>, args: &DescribeArgs) -> Result<JobReport> {
    let llm = ctx.app.llm(&args.llm).await?;
    if llm.mode == CallMode::Batch {
        bail!(
            "describe runs online only (--mode online): a night's descriptions are few and short"
        );
    }
    let params =
        json!({"memories": args.memories, "judge": format!("{:?}", llm.judge).to_lowercase()});
    let log = RunLog::start(ctx, JobName::Describe.as_str(), &params).await?;
    let mut report = JobReport::new(JobName::Describe.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let clock = format_timestamp(ctx.now.timestamp_micros());

    let filter = ctx.user_filter_and("is_dirty = true AND archived_at IS NULL");
    let mut dirty = ctx
        .store
        .scan_rows::<EntityRow>(ENTITIES.name, Some(&filter))
        .await?;
    dirty.sort_by(|a, b| a.id.cmp(&b.id));
    counts.insert("dirty".into(), dirty.len() as u64);
    if dirty.is_empty() {
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }

    // The newest memories naming each dirty entity.
    let ids: Vec<String> = dirty.iter().map(|r| r.id.clone()).collect();
    let (named, memories) = naming_memories(ctx, &ids).await?;
    let items: Vec<Item> = dirty
        .iter()
        .map(|row| {
            let facts = named
                .get(&row.id)
                .into_iter()
                .flatten()
                .filter_map(|m| memories.get(m))
                .collect();
            item_of(row, facts, args.memories, &clock)
        })
        .collect();
    let outcomes = llm.run(items.clone()).await;
    report.llm = Some(llm.usage(&outcomes));

    let mut described = Vec::with_capacity(dirty.len());
    for (row, (item, outcome)) in dirty.iter().zip(items.iter().zip(&outcomes)) {
        described.push(match (&outcome.reply, &outcome.failure) {
            (Some(Reply::Describe(r)), None) => Described {
                description: r.description.clone(),
                offline: false,
            },
            (_, failure) => {
                // No trusted reply: the offline rules answer, and the report says so.
                report.notes.push(format!(
                    "{}: offline description ({})",
                    row.name,
                    failure.as_deref().unwrap_or("no reply")
                ));
                Described {
                    description: offline_describe(&item.input.memories).description,
                    offline: true,
                }
            }
        });
    }
    let plan = plan_descriptions(log.run_id(), &dirty, &described, ctx.now.timestamp_micros());
    let unchanged = plan.unchanged.clone();
    counts.insert("described".into(), plan.changed.len() as u64);
    counts.insert("unchanged".into(), unchanged.len() as u64);
    counts.insert("offline_fallbacks".into(), plan.offline_fallbacks);

    if ctx.dry_run {
        for row in plan.changed.iter().take(50) {
            let new = row.description.as_deref().unwrap_or("");
            report.notes.push(format!("{}: {new}", row.name));
        }
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }
    if !plan.changed.is_empty() {
        write_described(ctx, args, plan).await?;
    }
    for chunk in unchanged.chunks(1000) {
        ctx.store
            .set_flag_where(
                &ENTITIES,
                &format!("id IN ({}) AND is_dirty", sql_list(chunk)),
                "is_dirty",
                false,
            )
            .await?;
    }
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
