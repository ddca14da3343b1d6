//! `memlife entities`: the entity side of the graph (seed 000 entity links, seed 002 entity
//! nodes). Named entities are read from live memories by the rule-based extractor of
//! `logic::entities`, matched to the user's existing entities (normalised name and type, then
//! the embedding of the name), and written as `entities` rows, `memory_entities` rows and
//! structural `shares_entity:{Name}` links.
//!
//! Links stay sparse on purpose: a memory is linked to the (at most `--links-per-memory`)
//! memories naming the same entity just before it in time (created_at, then id), newer as
//! source. Every memory naming an entity is so reachable from every other through the chain,
//! and a name in a thousand memories makes three thousand links, not half a million.
//!
//! Only new or changed memories are read on a rerun: `entity_scans` records the hash of the
//! text each memory was read with, and only users with a live memory not marked as read by
//! the current extractor (`memories.entity_mark`, cleared by every writer of a new text) are
//! read at all. A changed memory's old entity rows and entity links are
//! removed before its new ones are written. Writes, each one Lance commit: unlink changed
//! memories, entities, memory_entities, links, then the scans last, so a run killed at any
//! point is redone whole by the next (every write is an upsert on its key).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use rayon::prelude::*;
use serde_json::{Value, json};

use super::{Job, JobCtx, JobName, JobReport, JobScope, Phases, RunLog};
use crate::embedders::{Embedded, Embedder, EmbedderArgs};
use crate::llm::batch::{Applier, ApplyEnv, BatchRecord};
use crate::llm::tasks::{EXTRACT_BATCH, ExtractedMemory, MemoryView, Reply, Task, TaskInput};
use crate::llm::{CallMode, Item, LlmArgs, Outcome};
use crate::logic::entities::{Mention, believed_names, extract, normalise_name};
use crate::logic::entity_writes::{
    EntityPlan, Known, Names, ReadMemory, Resolved, memory_entity_pairs, resolve_by_name,
    shares_entity_links,
};
use crate::logic::hash::fnv1a;
use crate::logic::similarity::dot;
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{
    ENTITIES, ENTITY_SCANS, ENTITY_TYPES, LINKS, MEMORY_ENTITIES, SHARES_ENTITY_PREFIX,
};
use crate::model::typed::{EntityRow, EntityScanRow, LinkRow, MemoryEntityRow};
use crate::store::audit::AuditRow;
use crate::store::{Store, sql_list, sql_string};

/// Named entities of memories: `entities`, `memory_entities` and `shares_entity:{Name}` links.
#[derive(clap::Args, Debug, Clone)]
pub struct EntitiesArgs {
    /// Earlier memories naming the same entity that each memory is linked to.
    #[arg(long, default_value_t = 3)]
    pub links_per_memory: usize,
    /// Cosine similarity of two names' embeddings (same type) for a new name to be taken as
    /// an existing entity (its alias). Above 1 switches the embedding match off.
    #[arg(long, default_value_t = 0.92)]
    pub name_match: f32,
    /// Read every live memory again, not only new or changed ones.
    #[arg(long)]
    pub all: bool,
    /// Who reads the names: the documented rules (offline), or the `entities.extract` task of
    /// the LLM layer (`--llm providers`; the rules read what it gives no valid reply for).
    #[arg(long, value_enum, default_value_t = Extractor::Rules)]
    pub extractor: Extractor,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
    /// The clock the run computes at (RFC 3339): the new entities' and links' timestamps; default
    /// the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Extractor {
    Rules,
    Llm,
}

impl Extractor {
    /// The name its readings are recorded under (`entity_scans.extractor`).
    fn name(self) -> &'static str {
        match self {
            Extractor::Rules => RULES_EXTRACTOR,
            Extractor::Llm => LLM_EXTRACTOR,
        }
    }
}

impl Job for EntitiesArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }

    fn applier() -> Option<Box<dyn Applier>> {
        Some(Box::new(EntitiesApplier))
    }
}

/// `entity_scans.extractor` of a memory the LLM read (`--extractor llm`).
pub const LLM_EXTRACTOR: &str = "llm-v1";

/// The extractor's name in `entity_scans.extractor`: a change of rules reads everything again.
pub const RULES_EXTRACTOR: &str = "rules-v2";

const LIVE: &str = "state != 'archived' AND archived_at IS NULL";

#[derive(serde::Deserialize)]
struct Memory {
    id: String,
    #[serde(rename = "user_id")]
    user: String,
    text: String,
    created_at: i64,
    entity_mark: Option<i64>,
}

impl Memory {
    fn read(&self) -> ReadMemory<'_> {
        ReadMemory {
            id: &self.id,
            user: &self.user,
            created_at: self.created_at,
        }
    }
}

fn text_hash(text: &str) -> String {
    format!("{:016x}", fnv1a(&[text]))
}

/// The run's users (`JobCtx::user_filter`), joined with `rest`.
pub(super) fn scope_filter(ctx: &JobCtx<'_>, rest: Option<&str>) -> Option<String> {
    user_filter(ctx.user_filter().as_deref(), rest)
}

/// A predicate on `user_id` (none: every user), joined with `rest`.
fn user_filter(users: Option<&str>, rest: Option<&str>) -> Option<String> {
    match (users.map(str::to_string), rest) {
        (Some(u), Some(r)) => Some(format!("{u} AND {r}")),
        (Some(u), None) => Some(u),
        (None, Some(r)) => Some(r.to_string()),
        (None, None) => None,
    }
}

async fn live_memories(store: &Store, users: Option<&str>) -> Result<Vec<Memory>> {
    let filter = user_filter(users, Some(LIVE));
    let mut out: Vec<Memory> = store.scan_rows("memories", filter.as_deref()).await?;
    out.sort_by(|a, b| (&a.user, a.created_at, &a.id).cmp(&(&b.user, b.created_at, &b.id)));
    Ok(out)
}

/// The live memories of the users read and their last scans, each read timed.
async fn read_users(
    store: &Store,
    users: Option<&str>,
    phases: &mut Phases,
) -> Result<(Vec<Memory>, BTreeMap<String, (String, String)>)> {
    let memories = live_memories(store, users).await?;
    phases.lap("memories");
    let scanned = scans(store, users).await?;
    phases.lap("scans");
    Ok((memories, scanned))
}

/// memory id -> (text hash, extractor) of the last read.
async fn scans(store: &Store, users: Option<&str>) -> Result<BTreeMap<String, (String, String)>> {
    let filter = user_filter(users, None);
    #[derive(serde::Deserialize)]
    struct Scan {
        memory_id: String,
        text_hash: String,
        extractor: String,
    }
    let rows: Vec<Scan> = store
        .scan_rows(ENTITY_SCANS.name, filter.as_deref())
        .await?;
    let out = rows
        .into_iter()
        .map(|r| (r.memory_id, (r.text_hash, r.extractor)))
        .collect();
    Ok(out)
}

/// The users' entities (archived ones too: a name seen again brings its entity back).
async fn known_entities(
    store: &Store,
    users: Option<&str>,
) -> Result<BTreeMap<String, Vec<Known>>> {
    let filter = user_filter(users, None);
    #[derive(serde::Deserialize)]
    struct Entity {
        id: String,
        user_id: String,
        name: String,
        entity_type: String,
        aliases: Option<Vec<String>>,
    }
    let mut out: BTreeMap<String, Vec<Known>> = BTreeMap::new();
    for row in store
        .scan_rows::<Entity>(ENTITIES.name, filter.as_deref())
        .await?
    {
        let aliases = row.aliases.unwrap_or_default();
        let known = Known::new(row.id, row.name, row.entity_type, &aliases);
        out.entry(row.user_id).or_default().push(known);
    }
    Ok(out)
}

/// `memory_entities` rows of the users in scope: (memory id, entity id, user id).
pub(super) async fn memberships(
    store: &Store,
    users: Option<&str>,
) -> Result<Vec<(String, String, String)>> {
    let filter = user_filter(users, None);
    #[derive(serde::Deserialize)]
    struct Membership {
        memory_id: String,
        entity_id: String,
        user_id: String,
    }
    let rows: Vec<Membership> = store
        .scan_rows(MEMORY_ENTITIES.name, filter.as_deref())
        .await?;
    let out = rows
        .into_iter()
        .map(|r| (r.memory_id, r.entity_id, r.user_id))
        .collect();
    Ok(out)
}

/// The name vectors of the users' entities made by `model`: (entity id, type, vector) by user.
async fn entity_vectors(
    store: &Store,
    users: &[String],
    model: &str,
) -> Result<BTreeMap<String, Vec<(String, String, Vec<f32>)>>> {
    let mut out: BTreeMap<String, Vec<(String, String, Vec<f32>)>> = BTreeMap::new();
    if users.is_empty() {
        return Ok(out);
    }
    let dim = store.embedding_dim();
    let filter = format!(
        "user_id IN ({}) AND embedding_model = {}",
        sql_list(users),
        sql_string(model)
    );
    #[derive(serde::Deserialize)]
    struct Named {
        id: String,
        user_id: String,
        entity_type: String,
    }
    let (rows, vectors) = store
        .scan_rows_with_vectors::<Named>(ENTITIES.name, &filter, "name_embedding")
        .await?;
    for (row, vector) in rows.into_iter().zip(vectors.chunks_exact(dim)) {
        out.entry(row.user_id)
            .or_default()
            .push((row.id, row.entity_type, vector.to_vec()));
    }
    Ok(out)
}

pub async fn run(ctx: &JobCtx<'_>, args: &EntitiesArgs) -> Result<JobReport> {
    let params = json!({
        "links_per_memory": args.links_per_memory,
        "name_match": args.name_match,
        "all": args.all,
        "extractor": args.extractor,
    });
    let current = args.extractor.name();
    let llm = match args.extractor {
        Extractor::Rules => None,
        Extractor::Llm => Some(ctx.app.llm(&args.llm).await?),
    };
    let batch = llm.as_ref().is_some_and(|l| l.mode == CallMode::Batch);
    let log = RunLog::start(ctx, JobName::Entities.as_str(), &params).await?;
    let mut report = JobReport::new(JobName::Entities.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mark = entity_mark(current);
    let mut phases = Phases::start();
    let Some(users) = users_to_read(ctx, args.all, mark).await? else {
        // No memory is new to this extractor: nothing is read.
        for name in ["users_read", "memories", "memories_read", "memories_marked"] {
            counts.insert(name.into(), 0);
        }
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    };
    let user = users.as_deref();
    phases.lap("users");
    let (memories, scanned) = read_users(&ctx.store, user, &mut phases).await?;
    let read_users: BTreeSet<&str> = memories.iter().map(|m| m.user.as_str()).collect();
    counts.insert("users_read".into(), read_users.len() as u64);
    counts.insert("memories".into(), memories.len() as u64);
    let (settled, mut marks) = settled(&memories, &scanned, current, mark);
    let mut changed: Vec<usize> = (0..memories.len())
        .filter(|&i| args.all || !settled[i])
        .collect();
    if batch {
        drop_pending(ctx, &memories, &mut changed, &mut counts).await?;
    }
    counts.insert("memories_read".into(), changed.len() as u64);
    if changed.is_empty() || batch {
        mark_read(ctx, &marks, &mut counts).await?;
    }
    if changed.is_empty() {
        report.notes.push(phases.note());
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }
    let now_text = format_timestamp(ctx.now.timestamp_micros());
    if let (Some(llm), true) = (&llm, batch) {
        // Batch mode: the requests go to the Batch API; `batches poll` writes the readings.
        let requests = extract_items(&memories, &changed, &now_text);
        counts.insert("requests".into(), requests.len() as u64);
        if !ctx.dry_run {
            log.submit_batches_by_user(
                ctx,
                llm,
                (
                    Task::EntitiesExtract,
                    requests.into_iter().map(|(user, item, _)| (user, item)),
                    "requests",
                ),
                &mut counts,
                &mut report.notes,
            )
            .await?;
        }
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }

    let known = known_entities(&ctx.store, user).await?;
    phases.lap("entities");
    let mut mentions = rules_mentions(&memories, &known, &changed);
    phases.lap("rules");
    // Which extractor read each changed memory (recorded in entity_scans).
    let mut read_by = vec![RULES_EXTRACTOR; changed.len()];
    if let Some(llm) = &llm {
        let requests = extract_items(&memories, &changed, &now_text);
        let outcomes = llm
            .run(requests.iter().map(|(_, item, _)| item.clone()).collect())
            .await;
        report.llm = Some(llm.usage(&outcomes));
        let by_id: BTreeMap<&str, &Outcome> =
            outcomes.iter().map(|o| (o.custom_id.as_str(), o)).collect();
        let mut fallbacks = 0;
        for (_, item, positions) in &requests {
            let outcome = by_id.get(item.custom_id.as_str()).copied();
            if !take_reply(
                outcome,
                positions,
                &memories,
                &changed,
                &mut mentions,
                &mut read_by,
            ) {
                fallbacks += positions.len() as u64;
                report.notes.push(format!(
                    "{} memories read by the rules instead: {}",
                    positions.len(),
                    outcome
                        .and_then(|o| o.failure.as_deref())
                        .unwrap_or("no reply")
                ));
            }
        }
        counts.insert("llm_fallbacks".into(), fallbacks);
    }

    let config = ctx.app.config().await?;
    let dim = ctx.store.embedding_dim();
    let make_embedder = || Embedder::from_args(&args.embedder, &config.embedder, dim, 64);
    let writer = Writer {
        store: &ctx.store,
        users: user,
        now: ctx.now.timestamp_micros(),
        dry_run: ctx.dry_run,
        links_per_memory: args.links_per_memory,
        name_match: args.name_match,
        embedder: &make_embedder,
    };
    let reading = Reading {
        memories: &memories,
        scanned: &scanned,
        known: &known,
        changed: &changed,
        mentions: &mentions,
        read_by: &read_by,
    };
    write_readings(&writer, &reading, &mut counts, &mut phases).await?;
    marks.extend(
        changed
            .iter()
            .zip(&read_by)
            .filter(|&(&i, by)| *by == current && !settled[i])
            .filter(|&(&i, _)| memories[i].entity_mark != Some(mark))
            .map(|(&i, _)| (memories[i].id.clone(), Some(mark))),
    );
    mark_read(ctx, &marks, &mut counts).await?;
    phases.lap("marks");
    report.notes.push(phases.note());
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}

/// Which `memories` were last read, as their text is now, by the `current` extractor; and
/// the marks to write (of those not yet marked so: a run writes only the marks that change).
fn settled(
    memories: &[Memory],
    scanned: &BTreeMap<String, (String, String)>,
    current: &str,
    mark: i64,
) -> (Vec<bool>, Vec<(String, Option<i64>)>) {
    let settled: Vec<bool> = memories
        .par_iter()
        .map(|m| {
            scanned.get(&m.id).is_some_and(|(hash, extractor)| {
                extractor == current && *hash == text_hash(&m.text)
            })
        })
        .collect();
    let marks = (0..memories.len())
        .filter(|&i| settled[i] && memories[i].entity_mark != Some(mark))
        .map(|i| (memories[i].id.clone(), Some(mark)))
        .collect();
    (settled, marks)
}

/// Memories waiting in a submitted batch are not submitted again.
async fn drop_pending(
    ctx: &JobCtx<'_>,
    memories: &[Memory],
    changed: &mut Vec<usize>,
    counts: &mut BTreeMap<String, u64>,
) -> Result<()> {
    let pending =
        crate::llm::batch::memories_in_pending(&ctx.store, JobName::Entities.as_str()).await?;
    let before = changed.len();
    changed.retain(|&i| !pending.contains(&memories[i].id));
    let held = (before - changed.len()) as u64;
    counts.insert("memories_in_pending_batches".into(), held);
    Ok(())
}

/// `memories.entity_mark` of a memory whose text `extractor` read.
pub fn entity_mark(extractor: &str) -> i64 {
    fnv1a(&["entities", extractor]) as i64
}

/// The users a run reads, as a predicate on `user_id` (`None`: every user of the run's
/// scope): with `all`, the run's scope; else the users with a live memory not marked as read
/// by this extractor (`mark`). `Ok(None)`: no such user.
async fn users_to_read(ctx: &JobCtx<'_>, all: bool, mark: i64) -> Result<Option<Option<String>>> {
    if all {
        return Ok(Some(ctx.user_filter()));
    }
    let unread = format!("(entity_mark IS NULL OR entity_mark != {mark}) AND {LIVE}");
    let users = super::users_with_memories_where(ctx, &unread).await?;
    Ok((!users.is_empty()).then(|| Some(format!("user_id IN ({})", sql_list(&users)))))
}

/// Writes the marks of the memories read (one commit; none in a dry run).
async fn mark_read(
    ctx: &JobCtx<'_>,
    marks: &[(String, Option<i64>)],
    counts: &mut BTreeMap<String, u64>,
) -> Result<()> {
    let marked = match ctx.dry_run || marks.is_empty() {
        true => 0,
        false => {
            ctx.store
                .set_i64_column(&crate::model::schema::MEMORIES, "entity_mark", marks)
                .await?;
            crate::crash::point("entities.after-marks");
            marks.len()
        }
    };
    counts.insert("memories_marked".into(), marked as u64);
    Ok(())
}

/// The rules' reading (`logic::entities::extract`) of the `changed` memories, with the names
/// believed at a sentence start: existing entities' names and aliases, and what any of the
/// user's live memories establishes (only users with something to read are looked at).
fn rules_mentions(
    memories: &[Memory],
    known: &BTreeMap<String, Vec<Known>>,
    changed: &[usize],
) -> Vec<Vec<Mention>> {
    let readers: BTreeSet<&str> = changed.iter().map(|&i| memories[i].user.as_str()).collect();
    let mut texts: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for m in memories
        .iter()
        .filter(|m| readers.contains(m.user.as_str()))
    {
        texts
            .entry(m.user.as_str())
            .or_default()
            .push(m.text.as_str());
    }
    let believed: BTreeMap<&str, BTreeSet<String>> = texts
        .par_iter()
        .map(|(user, list)| {
            let keys: BTreeSet<String> = known
                .get(*user)
                .into_iter()
                .flatten()
                .flat_map(|e| e.keys.iter().cloned())
                .collect();
            (*user, believed_names(list, &keys))
        })
        .collect();
    let empty = BTreeSet::new();
    changed
        .par_iter()
        .map(|&i| {
            let m = &memories[i];
            extract(&m.text, believed.get(m.user.as_str()).unwrap_or(&empty))
        })
        .collect()
}

/// Where and how a reading is written: by the job's own run, or by `batches poll` applying
/// a batch the job submitted.
struct Writer<'a> {
    store: &'a Store,
    /// The run's users, as a predicate on `user_id` (none: every user).
    users: Option<&'a str>,
    now: i64,
    dry_run: bool,
    links_per_memory: usize,
    name_match: f32,
    /// Made on first use (only new names are embedded).
    embedder: &'a (dyn Fn() -> Result<Embedder> + Send + Sync),
}

/// What was read: the live memories in scope, their last scans, the known entities, and for
/// the `changed` ones (positions in `memories`) their mentions and who read them.
struct Reading<'a> {
    memories: &'a [Memory],
    scanned: &'a BTreeMap<String, (String, String)>,
    known: &'a BTreeMap<String, Vec<Known>>,
    changed: &'a [usize],
    mentions: &'a [Vec<Mention>],
    read_by: &'a [&'static str],
}

/// New names embedded (each distinct name once), and matched to the user's existing entities
/// of the same type by vector (`[entities] name_match`). Returns the name vectors by position
/// in `names.resolved` and the embedder's model.
async fn match_by_embedding(
    w: &Writer<'_>,
    known: &BTreeMap<String, Vec<Known>>,
    names: &mut Names,
    counts: &mut BTreeMap<String, u64>,
) -> Result<(BTreeMap<usize, Vec<f32>>, String)> {
    let Names {
        resolved,
        unmatched,
        ..
    } = names;
    let unmatched: Vec<usize> = unmatched.clone();
    let mut name_vectors: BTreeMap<usize, Vec<f32>> = BTreeMap::new();
    let mut model = String::new();
    if !unmatched.is_empty() {
        let embedder = (w.embedder)()?;
        model = embedder.model_name();
        // Users share names ("Python", "Google", "Mom"): each distinct name is embedded once.
        let texts: Vec<&str> = unmatched
            .iter()
            .map(|&r| resolved[r].name.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let vectors: BTreeMap<&str, Vec<f32>> = texts
            .iter()
            .zip(embedder.embed(&texts).await?)
            .filter_map(|(&text, embedded)| match embedded {
                Embedded::Vector { values, .. } => Some((text, values)),
                _ => None,
            })
            .collect();
        counts.insert("names_embedded".into(), vectors.len() as u64);
        for &r in &unmatched {
            if let Some(values) = vectors.get(resolved[r].name.as_str()) {
                name_vectors.insert(r, values.clone());
            }
        }
        if w.name_match <= 1.0 {
            let users: Vec<String> = unmatched
                .iter()
                .map(|&r| resolved[r].user.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let existing = entity_vectors(w.store, &users, &model).await?;
            for &r in &unmatched {
                let Some(vector) = name_vectors.get(&r) else {
                    continue;
                };
                let best = existing
                    .get(&resolved[r].user)
                    .into_iter()
                    .flatten()
                    .filter(|(_, t, _)| *t == resolved[r].entity_type)
                    .map(|(id, _, v)| (dot(vector, v), id))
                    .filter(|(score, _)| *score >= w.name_match)
                    .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(a.1)));
                if let Some((score, id)) = best {
                    let Some(k) = known
                        .get(&resolved[r].user)
                        .and_then(|ks| ks.iter().find(|k| k.id == *id))
                    else {
                        continue;
                    };
                    tracing::debug!(name = %resolved[r].name, entity = %k.name, score, model = %model, "name matched by embedding");
                    resolved[r] = Resolved::known_as(k, &resolved[r].user, &resolved[r].name);
                    *counts
                        .entry("entities_matched_by_embedding".into())
                        .or_default() += 1;
                }
            }
        }
    }
    Ok((name_vectors, model))
}

/// `shares_entity` links of the changed memories' new reading
/// (`logic::entity_writes::shares_entity_links`), keyed by (source, target, link type), with
/// the user.
async fn entity_links(
    w: &Writer<'_>,
    r: &Reading<'_>,
    pairs: &BTreeSet<(String, String, String)>,
    resolved: &[Resolved],
) -> Result<BTreeMap<(String, String, String), String>> {
    // The changed memories' stored reading is replaced by this one.
    let changed: BTreeSet<&str> = r
        .changed
        .iter()
        .map(|&i| r.memories[i].id.as_str())
        .collect();
    let existing: Vec<(String, String)> = memberships(w.store, w.users)
        .await?
        .into_iter()
        .filter(|(memory, ..)| !changed.contains(memory.as_str()))
        .map(|(memory, entity, _)| (memory, entity))
        .collect();
    let memories: Vec<ReadMemory> = r.memories.iter().map(Memory::read).collect();
    let per = (SHARES_ENTITY_PREFIX, w.links_per_memory);
    Ok(shares_entity_links(
        &memories, &existing, pairs, resolved, per,
    ))
}

/// Writes the entities a run resolved (`EntityPlan::rows`): new ones whole, existing ones
/// again when they gain a type, aliases or come back from archive; then flags the existing
/// ones a new or changed memory names, for `memlife describe`.
async fn write_entities(
    w: &Writer<'_>,
    plan: &EntityPlan<'_>,
    vectors: (&BTreeMap<usize, Vec<f32>>, &str),
    pairs: &BTreeSet<(String, String, String)>,
    counts: &mut BTreeMap<String, u64>,
) -> Result<()> {
    let current: BTreeMap<String, EntityRow> = w
        .store
        .rows_with_ids::<EntityRow>(ENTITIES.name, &plan.existing_ids(), None)
        .await?
        .into_iter()
        .map(|row| (row.id.clone(), row))
        .collect();
    let rows = plan.rows(current, vectors, w.now);
    counts.insert("entities_written".into(), rows.len() as u64);
    for chunk in rows.chunks(10_000) {
        w.store.upsert_entities(chunk, w.now).await?;
    }
    // Existing entities named by a new or changed memory: `memlife describe` looks again.
    let named_again = plan.named_again(pairs);
    counts.insert("entities_marked_dirty".into(), named_again.len() as u64);
    for chunk in named_again.chunks(1000) {
        w.store
            .set_flag_where(
                &ENTITIES,
                &format!("id IN ({}) AND NOT is_dirty", sql_list(chunk)),
                "is_dirty",
                true,
            )
            .await?;
    }
    Ok(())
}

/// Resolves the mentions to entities and writes them, each step one commit: unlink the
/// changed memories' old rows, entities, memory_entities, links, then the scans.
async fn write_readings(
    w: &Writer<'_>,
    r: &Reading<'_>,
    counts: &mut BTreeMap<String, u64>,
    phases: &mut Phases,
) -> Result<()> {
    let Reading {
        memories,
        scanned,
        changed,
        mentions,
        read_by,
        ..
    } = *r;
    let now = w.now;
    counts.insert(
        "mentions".into(),
        mentions.iter().map(|m| m.len() as u64).sum(),
    );
    let read = changed.iter().zip(mentions);
    let mut names = resolve_by_name(
        read.clone()
            .map(|(&i, m)| (memories[i].user.as_str(), m.as_slice())),
        r.known,
    );
    if names.matched_by_name > 0 {
        counts.insert("entities_matched_by_name".into(), names.matched_by_name);
    }
    let (name_vectors, model) = if names.unmatched.is_empty() {
        (BTreeMap::new(), String::new())
    } else {
        match_by_embedding(w, r.known, &mut names, counts).await?
    };
    let pairs = memory_entity_pairs(
        read.map(|(&i, m)| (memories[i].read(), m.as_slice())),
        &names,
    );
    let resolved = names.resolved;
    let plan = EntityPlan::new(&resolved);
    counts.insert("entities_new".into(), plan.new_entities() as u64);
    counts.insert("memory_entities".into(), pairs.len() as u64);

    let links = entity_links(w, r, &pairs, &resolved).await?;
    counts.insert("links".into(), links.len() as u64);
    phases.lap("resolve");

    if w.dry_run {
        return Ok(());
    }

    // 1. The old reading of changed memories goes: their entity rows and entity links.
    let previously: Vec<String> = changed
        .iter()
        .map(|&i| memories[i].id.clone())
        .filter(|id| scanned.contains_key(id))
        .collect();
    for chunk in previously.chunks(1000) {
        let ids = sql_list(chunk);
        w.store
            .delete_where(MEMORY_ENTITIES.name, &format!("memory_id IN ({ids})"))
            .await?;
        w.store
            .delete_where(
                LINKS.name,
                &format!(
                    "link_type LIKE '{SHARES_ENTITY_PREFIX}%' AND (source_id IN ({ids}) OR target_id IN ({ids}))"
                ),
            )
            .await?;
    }
    crate::crash::point("entities.after-unlink");

    // 2. Entities.
    write_entities(w, &plan, (&name_vectors, &model), &pairs, counts).await?;
    crate::crash::point("entities.after-entities");

    // 3. memory_entities, 4. links, 5. the scans.
    let rows: Vec<MemoryEntityRow> = pairs
        .iter()
        .map(|(m, e, u)| MemoryEntityRow {
            memory_id: m.clone(),
            entity_id: e.clone(),
            user_id: u.clone(),
        })
        .collect();
    for chunk in rows.chunks(50_000) {
        w.store.upsert_memory_entities(chunk).await?;
    }
    let rows: Vec<LinkRow> = links
        .iter()
        .map(|((s, t, ty), u)| LinkRow::structural((s, t, u), ty, now))
        .collect();
    for chunk in rows.chunks(50_000) {
        w.store.upsert_links(chunk, now).await?;
    }
    crate::crash::point("entities.after-links");
    let mut per_memory: BTreeMap<&str, usize> = BTreeMap::new();
    for (m, _, _) in &pairs {
        *per_memory.entry(m.as_str()).or_default() += 1;
    }
    let rows: Vec<EntityScanRow> = changed
        .iter()
        .zip(read_by)
        .map(|(&i, extractor)| {
            let m = &memories[i];
            EntityScanRow {
                memory_id: m.id.clone(),
                user_id: m.user.clone(),
                text_hash: text_hash(&m.text),
                extractor: extractor.to_string(),
                entity_count: per_memory.get(m.id.as_str()).copied().unwrap_or(0) as i64,
                scanned_at: now,
            }
        })
        .collect();
    for chunk in rows.chunks(50_000) {
        w.store.upsert_entity_scans(chunk).await?;
    }
    phases.lap("writes");
    Ok(())
}

/// The `entities.extract` requests for the `changed` memories: up to `EXTRACT_BATCH`
/// memories of one user each. Returns each request with its user and the positions in
/// `changed` it covers.
fn extract_items(
    memories: &[Memory],
    changed: &[usize],
    now: &str,
) -> Vec<(String, Item, Vec<usize>)> {
    let mut by_user: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (k, &i) in changed.iter().enumerate() {
        by_user
            .entry(memories[i].user.as_str())
            .or_default()
            .push(k);
    }
    let mut out = Vec::new();
    for (user, positions) in by_user {
        for chunk in positions.chunks(EXTRACT_BATCH) {
            let item = Item {
                custom_id: format!("extract-{}", out.len()),
                input: TaskInput {
                    task: Task::EntitiesExtract,
                    memories: chunk
                        .iter()
                        .map(|&k| {
                            let m = &memories[changed[k]];
                            MemoryView {
                                id: m.id.clone(),
                                kind: "fact".into(),
                                created_at: format_timestamp(m.created_at),
                                happens_at: None,
                                text: m.text.clone(),
                                dates: Vec::new(),
                                cluster: None,
                            }
                        })
                        .collect(),
                    proposal: None,
                    now: now.to_string(),
                    question: None,
                },
            };
            out.push((user.to_string(), item, chunk.to_vec()));
        }
    }
    out
}

/// Takes a request's valid reply as the reading of its memories (`positions` in `changed`).
/// Returns false when there is no valid reply: the rules' reading stays.
fn take_reply(
    outcome: Option<&Outcome>,
    positions: &[usize],
    memories: &[Memory],
    changed: &[usize],
    mentions: &mut [Vec<Mention>],
    read_by: &mut [&'static str],
) -> bool {
    let Some(Outcome {
        reply: Some(Reply::Extract(reply)),
        failure: None,
        ..
    }) = outcome
    else {
        return false;
    };
    let by_id: BTreeMap<&str, &ExtractedMemory> =
        reply.memories.iter().map(|m| (m.id.as_str(), m)).collect();
    for &k in positions {
        let Some(found) = by_id.get(memories[changed[k]].id.as_str()) else {
            continue;
        };
        let mut seen = BTreeSet::new();
        mentions[k] = found
            .entities
            .iter()
            .filter(|e| seen.insert(normalise_name(e.name.trim())))
            .map(|e| Mention {
                name: e.name.trim().to_string(),
                entity_type: ENTITY_TYPES
                    .iter()
                    .find(|t| **t == e.entity_type)
                    .copied()
                    .unwrap_or("other"),
                strong: true,
            })
            .collect();
        read_by[k] = LLM_EXTRACTOR;
    }
    true
}

/// The options of the run that submitted a batch (`runs.params`), defaults where absent.
async fn submitted_options(store: &Store, run_id: &str) -> Result<(usize, f32)> {
    let params = crate::store::run_params(store, run_id).await?;
    let links = params
        .get("links_per_memory")
        .and_then(Value::as_u64)
        .unwrap_or(3) as usize;
    let name_match = params
        .get("name_match")
        .and_then(Value::as_f64)
        .unwrap_or(0.92) as f32;
    Ok((links, name_match))
}

/// What an EXTRACT audit row derives its id from: the batch and the request.
fn audit_key(batch_key: &str, item: &Item) -> String {
    format!("{batch_key}|{}", item.custom_id)
}

/// Applies `entities --extractor llm --mode batch` in `batches poll`. The batch's memories
/// still live with the text they were submitted with are read as the replies say (the rules
/// where a request has no valid reply) and written as an online run writes them, with the
/// submitting run's options and clock; memories changed or gone since are left to the next
/// run. One EXTRACT audit row per request, written last, marks the batch applied; a poll
/// killed before that applies the same replies again to the same keys.
pub struct EntitiesApplier;

#[async_trait::async_trait]
impl Applier for EntitiesApplier {
    async fn apply(
        &self,
        env: &ApplyEnv<'_>,
        record: &BatchRecord,
        items: &[Item],
        outcomes: &[Outcome],
    ) -> Result<BTreeMap<String, u64>> {
        let now = super::batch_clock(record, items)?;
        let (links_per_memory, name_match) = submitted_options(env.store, &record.run_id).await?;
        let users = record
            .user_id
            .as_deref()
            .map(|u| format!("user_id = {}", sql_string(u)));
        let user = users.as_deref();
        let memories = live_memories(env.store, user).await?;
        let scanned = scans(env.store, user).await?;
        let known = known_entities(env.store, user).await?;
        let position: BTreeMap<&str, usize> = memories
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.as_str(), i))
            .collect();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut changed = Vec::new();
        let mut requests: Vec<Vec<usize>> = Vec::new();
        for item in items {
            let mut positions = Vec::new();
            for m in &item.input.memories {
                match position.get(m.id.as_str()) {
                    Some(&i) if memories[i].text == m.text => {
                        positions.push(changed.len());
                        changed.push(i);
                    }
                    _ => {
                        *counts
                            .entry("memories_changed_since_submission".into())
                            .or_default() += 1
                    }
                }
            }
            requests.push(positions);
        }
        let mut mentions = rules_mentions(&memories, &known, &changed);
        let mut read_by = vec![RULES_EXTRACTOR; changed.len()];
        let by_id: BTreeMap<&str, &Outcome> =
            outcomes.iter().map(|o| (o.custom_id.as_str(), o)).collect();
        let mut audit = Vec::new();
        let mut fallbacks = 0;
        for (item, positions) in items.iter().zip(&requests) {
            let outcome = by_id.get(item.custom_id.as_str()).copied();
            let taken = take_reply(
                outcome,
                positions,
                &memories,
                &changed,
                &mut mentions,
                &mut read_by,
            );
            if !taken {
                fallbacks += positions.len() as u64;
            }
            let mut row = AuditRow::new(
                &record.run_id,
                "EXTRACT",
                &audit_key(&record.batch_key, item),
                now,
            );
            row.user_id = record.user_id.clone();
            row.source_ids = item.input.memories.iter().map(|m| m.id.clone()).collect();
            row.classification = Some(
                if taken {
                    LLM_EXTRACTOR
                } else {
                    RULES_EXTRACTOR
                }
                .to_string(),
            );
            row.reasoning = outcome.and_then(|o| o.failure.clone());
            row.after_state = Some(
                json!({"served_by": outcome.and_then(|o| o.served_by.clone()),
                       "memories_read": positions.len()})
                .to_string(),
            );
            audit.push(row);
        }
        counts.insert("memories_read".into(), changed.len() as u64);
        counts.insert("llm_fallbacks".into(), fallbacks);
        if !changed.is_empty() {
            let writer = Writer {
                store: env.store,
                users: user,
                now,
                dry_run: false,
                links_per_memory,
                name_match,
                embedder: env.embedder,
            };
            let reading = Reading {
                memories: &memories,
                scanned: &scanned,
                known: &known,
                changed: &changed,
                mentions: &mentions,
                read_by: &read_by,
            };
            write_readings(&writer, &reading, &mut counts, &mut Phases::start()).await?;
        }
        crate::crash::point("entities.batch.after-readings");
        env.store.write_audit(&audit).await?;
        Ok(counts)
    }

    fn result_keys(&self, record: &BatchRecord, items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|item| {
                AuditRow::new(
                    &record.run_id,
                    "EXTRACT",
                    &audit_key(&record.batch_key, item),
                    0,
                )
                .id
            })
            .collect()
    }
}
