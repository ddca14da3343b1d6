//! `memlife distill`: seed 002's episodic-to-semantic consolidation. Episodes older than
//! `[distill] min_age_days` (7) whose salience fell under `max_salience` (0.2), live, not kept
//! forever and not emotional, are grouped per user by meaning, a shared entity counting toward
//! it (`logic::distill::groups`: every two episodes of a group alike). A group of at least
//! `min_episodes` (3) never asked about goes to the LLM layer (`semantic.distill`, role
//! `reasoning`), or to the offline judge's extractive fact (the episodes' sentences told once)
//! when no provider gives a valid reply. Each fact resting on two or more of the group's
//! episodes becomes a `fact` memory (source `distill`) holding them in
//! `consolidates_memory_ids`, with a `consolidates` link to each and their entity rows; the
//! episodes it rests on are archived (still queryable, out of default recall: "show me the
//! original conversation" stays possible). An episode no fact rests on stays as it was.
//!
//! Every group asked about is logged once (DISTILL: APPLIED with the episodes as they were and
//! the facts as they will be written, or NONE and why), before anything is written, keyed by
//! the group: a rerun does not ask again. Writes, each one Lance commit: the audit rows, the
//! facts with their vectors, their links and entity rows, the episodes archived. A run killed
//! after the audit rows is finished by the next run from the log.
//!
//! With `--mode batch` the groups go to the Batch API (one batch per user; a group whose
//! episodes wait in an earlier batch is not submitted again), and `memlife batches poll`
//! judges the answers and writes the facts through `DistillApplier`, logged first as an
//! online run logs them, at the clock of the run that submitted them.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, anyhow};
use serde_json::json;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::embedders::{Embedder, EmbedderArgs};
use crate::llm::batch::{Applier, ApplyEnv, BatchRecord};
use crate::llm::offline::distill as offline_distill;
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{CallMode, Item, LlmArgs, Outcome};
use crate::logic::distill::{
    DistilledFact, EpisodeRow, covered, fact_rows, group_key, groups, is_candidate, trusted,
};
use crate::model::clock::Clock;
use crate::model::encoding::{format_timestamp, parse_timestamp};
use crate::model::schema::{AUDIT_LOG, MEMORIES, MEMORY_ENTITIES};
use crate::model::typed::{LinkRow, MemoryEntityRow, MemoryRow, memories_from_json};
use crate::store::audit::AuditRow;
use crate::store::{Store, sql_list, sql_timestamp};

/// Old, fading episodes distilled into semantic facts (LLM `semantic.distill`, offline
/// fallback); the episodes the facts rest on archived.
#[derive(clap::Args, Debug, Clone)]
pub struct DistillArgs {
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    /// Episodes this many days old or older are ripe (default `[distill] min_age_days`, 7).
    #[arg(long)]
    pub min_age_days: Option<f64>,
    /// The cosine similarity every two episodes of a group reach (default `[distill]
    /// similarity`, else the embedding model's link threshold).
    #[arg(long)]
    pub similarity: Option<f32>,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for DistillArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }

    fn applier() -> Option<Box<dyn Applier>> {
        Some(Box::new(DistillApplier))
    }
}

/// A group's distillation as logged: its facts and the episodes to archive, at a time.
struct Planned {
    facts: Vec<MemoryRow>,
    archive: Vec<String>,
    archived_at: i64,
}

/// A group to ask about.
struct Asked {
    user: String,
    key: String,
    episodes: Vec<String>,
    item: Item,
}

/// Distillations a killed run logged whose episodes are not all archived yet, read back. Only
/// runs that did not finish are looked at: an episode of a finished distillation that was
/// revived since stays revived. One scan of the audit log, one of the runs, one of the
/// episodes.
async fn unfinished(store: &Store, now: i64) -> Result<Vec<Planned>> {
    let filter = crate::store::without_undone(
        store,
        "operation = 'DISTILL' AND classification = 'APPLIED'",
    )
    .await?;
    #[derive(serde::Deserialize)]
    struct Logged {
        id: String,
        run_id: String,
        after_state: Option<String>,
    }
    let rows: Vec<Logged> = store.scan_rows(AUDIT_LOG.name, Some(&filter)).await?;
    let runs: Vec<String> = rows.iter().map(|r| r.run_id.clone()).collect();
    let killed = super::killed_runs(store, &runs).await?;
    let mut logged = Vec::new();
    for row in rows.into_iter().filter(|r| killed.contains(&r.run_id)) {
        let after: serde_json::Value =
            serde_json::from_str(row.after_state.as_deref().unwrap_or("{}"))?;
        let archive = archive_of(&after);
        logged.push((row.id, after, archive));
    }
    let all: Vec<String> = logged.iter().flat_map(|(_, _, a)| a.clone()).collect();
    let live = store
        .ids_present(MEMORIES.name, &all, Some("archived_at IS NULL"))
        .await?;
    let mut planned = Vec::new();
    for (id, after, archive) in logged {
        if !archive.iter().any(|e| live.contains(e)) {
            continue;
        }
        planned.push(logged_plan(&id, &after, store.embedding_dim(), now)?);
    }
    Ok(planned)
}

/// A distillation as its APPLIED audit row `id` logged it (`after`: the facts to write, the
/// episodes to archive and when).
fn logged_plan(id: &str, after: &serde_json::Value, dim: usize, now: i64) -> Result<Planned> {
    let facts: Vec<serde_json::Value> = after["facts"].as_array().cloned().unwrap_or_default();
    let facts = memories_from_json(&facts, dim, now)
        .map_err(|e| anyhow!("audit row {id}: its facts do not read: {e}"))?;
    let archived_at = after["archived_at"]
        .as_str()
        .and_then(parse_timestamp)
        .ok_or_else(|| anyhow!("audit row {id} lacks after_state.archived_at"))?;
    Ok(Planned {
        facts,
        archive: archive_of(after),
        archived_at,
    })
}

/// The episodes an APPLIED audit row's `after_state` archives.
fn archive_of(after: &serde_json::Value) -> Vec<String> {
    after["archive"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Each of `ids`'s entity rows, by memory.
async fn entity_rows(
    store: &Store,
    ids: &[String],
) -> Result<BTreeMap<String, Vec<MemoryEntityRow>>> {
    let mut out: BTreeMap<String, Vec<MemoryEntityRow>> = BTreeMap::new();
    for chunk in ids.chunks(1000) {
        let filter = format!("memory_id IN ({})", sql_list(chunk));
        for row in store
            .scan_rows::<MemoryEntityRow>(MEMORY_ENTITIES.name, Some(&filter))
            .await?
        {
            out.entry(row.memory_id.clone()).or_default().push(row);
        }
    }
    Ok(out)
}

/// The groups to ask about, user by user, and the candidates read.
async fn plan(
    ctx: &JobCtx<'_>,
    p: &crate::logic::distill::DistillParams,
    report: &mut JobReport,
    counts: &mut BTreeMap<String, u64>,
) -> Result<(Vec<Asked>, BTreeMap<String, EpisodeRow>)> {
    let config = ctx.app.config().await?;
    let now = ctx.now.timestamp_micros();
    let ripe_before = now - (p.min_age_days * 86_400_000_000.0) as i64;
    let filter = ctx.user_filter_and(&format!(
        "kind = 'episode' AND archived_at IS NULL AND superseded_by IS NULL \
         AND salience < {} AND created_at <= {}",
        p.max_salience,
        sql_timestamp(ripe_before)
    ));
    let (rows, vectors) = ctx
        .store
        .scan_rows_with_vectors::<EpisodeRow>(MEMORIES.name, &filter, "embedding")
        .await?;
    let dim = ctx.store.embedding_dim();
    let (model, other_model) = super::main_model(rows.iter().map(|r| r.embedding_model.as_deref()));
    if other_model > 0 {
        counts.insert("skipped_other_model".into(), other_model as u64);
    }
    let mut by_user: BTreeMap<String, (Vec<EpisodeRow>, Vec<f32>)> = BTreeMap::new();
    for (row, v) in rows.into_iter().zip(vectors.chunks_exact(dim)) {
        if !is_candidate(&row, p, now) || row.embedding_model.as_deref().unwrap_or("") != model {
            continue;
        }
        let (list, flat) = by_user.entry(row.user_id.clone()).or_default();
        list.push(row);
        flat.extend_from_slice(v);
    }
    let candidates: usize = by_user.values().map(|(l, _)| l.len()).sum();
    counts.insert("episodes_ripe".into(), candidates as u64);
    if candidates == 0 {
        return Ok((Vec::new(), BTreeMap::new()));
    }
    let threshold = p
        .similarity
        .unwrap_or_else(|| config.thresholds_for(&model).0.link);
    report.notes.push(format!(
        "episodes grouped at cosine similarity {threshold} ({}), +{} a shared entity",
        if p.similarity.is_some() {
            "--similarity or [distill] similarity".to_string()
        } else {
            format!("the link threshold of {model}")
        },
        p.entity_bonus
    ));
    let ids: Vec<String> = by_user
        .values()
        .flat_map(|(l, _)| l.iter().map(|r| r.id.clone()))
        .collect();
    let entities = entity_rows(&ctx.store, &ids).await?;
    let asked = super::asked_before(&ctx.store, "DISTILL").await?;
    let now_text = format_timestamp(now);
    let mut out = Vec::new();
    let mut episodes = BTreeMap::new();
    for (user, (list, flat)) in by_user {
        let named: Vec<BTreeSet<String>> = list
            .iter()
            .map(|r| {
                entities
                    .get(&r.id)
                    .into_iter()
                    .flatten()
                    .map(|e| e.entity_id.clone())
                    .collect()
            })
            .collect();
        for mut group in groups(&flat, dim, &named, threshold, p) {
            *counts.entry("groups".into()).or_default() += 1;
            group.sort_by(|&a, &b| {
                (list[a].created_at, &list[a].id).cmp(&(list[b].created_at, &list[b].id))
            });
            let members: Vec<&str> = group.iter().map(|&i| list[i].id.as_str()).collect();
            let key = group_key(&user, &members);
            if asked.contains(&key) {
                *counts.entry("groups_asked_before".into()).or_default() += 1;
                continue;
            }
            let memories: Vec<MemoryView> = group
                .iter()
                .map(|&i| {
                    let e = &list[i];
                    MemoryView::of(&e.id, &e.kind, e.created_at, &e.text)
                })
                .collect();
            out.push(Asked {
                user: user.clone(),
                key: key.clone(),
                episodes: members.iter().map(|s| s.to_string()).collect(),
                item: Item {
                    custom_id: key,
                    input: TaskInput {
                        task: Task::SemanticDistill,
                        memories,
                        proposal: None,
                        now: now_text.clone(),
                        question: None,
                    },
                },
            });
        }
        for row in list {
            episodes.insert(row.id.clone(), row);
        }
    }
    Ok((out, episodes))
}

/// The facts an outcome gives and its confidence: the provider's, or the offline judge's
/// where it gave no valid reply (then the reason).
fn facts_from(item: &Item, outcome: &Outcome) -> (Vec<DistilledFact>, f64, Option<String>) {
    let (reply, why) = match (&outcome.reply, &outcome.failure) {
        (Some(Reply::Distill(r)), None) => (r.clone(), None),
        (_, failure) => (
            offline_distill(&item.input.memories),
            Some(failure.clone().unwrap_or_else(|| "no reply".into())),
        ),
    };
    let facts = reply
        .facts
        .iter()
        .map(|f| DistilledFact {
            text: f.text.clone(),
            source_ids: f.source_ids.clone(),
        })
        .collect();
    (facts, reply.confidence, why)
}

/// A group asked about: its user, its key, its episodes (oldest first).
struct Group<'a> {
    user: &'a str,
    key: &'a str,
    episodes: &'a [String],
}

/// One group's answer judged: its DISTILL audit row (APPLIED with the episodes as they were
/// and the facts as they will be written, or NONE and why) and the distillation to write, if
/// any fact is trusted. Fallbacks and groups kept as episodes are counted and noted.
fn judge(
    run_id: &str,
    g: &Group<'_>,
    (item, outcome): (&Item, &Outcome),
    by_id: &BTreeMap<&str, &EpisodeRow>,
    now: i64,
    (notes, counts): (&mut Vec<String>, &mut BTreeMap<String, u64>),
) -> (AuditRow, Option<Planned>) {
    let (facts, confidence, why) = facts_from(item, outcome);
    if let Some(why) = why {
        *counts.entry("offline_fallbacks".into()).or_default() += 1;
        notes.push(format!(
            "group {} of {}: offline fact ({why})",
            g.key, g.user
        ));
    }
    let group: Vec<&str> = g.episodes.iter().map(String::as_str).collect();
    let (kept, refused) = trusted(&facts, &group);
    let mut row = AuditRow::new(run_id, "DISTILL", g.key, now);
    row.user_id = Some(g.user.to_string());
    row.target_id = Some(g.key.to_string());
    row.source_ids = g.episodes.to_vec();
    row.confidence = Some(confidence);
    if kept.is_empty() {
        *counts.entry("groups_kept_as_episodes".into()).or_default() += 1;
        let why = if refused.is_empty() {
            "nothing generalises".to_string()
        } else {
            refused.join("; ")
        };
        notes.push(format!("group {} of {}: no fact ({why})", g.key, g.user));
        row.classification = Some("NONE".into());
        row.reasoning = Some(why);
        return (row, None);
    }
    let facts = fact_rows(g.user, g.key, &kept, by_id, confidence, now);
    let archive: Vec<String> = covered(&group, &kept)
        .into_iter()
        .map(str::to_string)
        .collect();
    let before: Vec<serde_json::Value> = group
        .iter()
        .filter_map(|id| by_id.get(id))
        .map(|e| json!({"id": e.id, "text": e.text, "salience": e.salience}))
        .collect();
    row.classification = Some("APPLIED".into());
    row.reasoning = (!refused.is_empty()).then(|| refused.join("; "));
    row.before_state = Some(json!({"episodes": before}).to_string());
    row.after_state = Some(
        json!({
            "facts": facts.iter().map(MemoryRow::to_json).collect::<Vec<_>>(),
            "archive": archive,
            "archived_at": format_timestamp(now),
        })
        .to_string(),
    );
    let planned = Planned {
        facts,
        archive,
        archived_at: now,
    };
    (row, Some(planned))
}

/// Where `apply` gets its embedder, made only when some fact is new: the job's arguments, or
/// the poll's.
enum EmbedderFrom<'a, 'b> {
    Job(&'a JobCtx<'b>, &'a EmbedderArgs),
    Poll(&'a (dyn Fn() -> Result<Embedder> + Send + Sync)),
}

impl EmbedderFrom<'_, '_> {
    async fn make(&self) -> Result<Embedder> {
        match self {
            EmbedderFrom::Job(ctx, args) => {
                ctx.app.embedder(args, ctx.store.embedding_dim(), 16).await
            }
            EmbedderFrom::Poll(make) => make(),
        }
    }
}

/// Writes planned distillations: facts (embedded; those not written yet), their links and
/// entity rows, then the episodes archived. Returns (facts written, episodes archived).
async fn apply(
    store: &Store,
    embedder: EmbedderFrom<'_, '_>,
    plans: &[Planned],
    now: i64,
) -> Result<(u64, u64)> {
    let all_facts: Vec<&MemoryRow> = plans.iter().flat_map(|p| &p.facts).collect();
    let ids: Vec<String> = all_facts.iter().map(|f| f.id.clone()).collect();
    let present = store.ids_present(MEMORIES.name, &ids, None).await?;
    let new: Vec<&MemoryRow> = all_facts
        .iter()
        .copied()
        .filter(|f| !present.contains(&f.id))
        .collect();
    if !new.is_empty() {
        let embedder = embedder.make().await?;
        super::embed_and_write(store, &embedder, &new, now).await?;
    }
    crate::crash::point("distill.after-facts");
    let mut links = Vec::new();
    for fact in &all_facts {
        for episode in &fact.consolidates_memory_ids {
            links.push(LinkRow {
                source_id: fact.id.clone(),
                target_id: episode.clone(),
                user_id: fact.user_id.clone(),
                link_type: "consolidates".into(),
                confidence: fact.confidence,
                reasoning: Some("distilled from the episode".into()),
                origin: "structural".into(),
                created_at: fact.updated_at,
            });
        }
    }
    let episodes: Vec<String> = all_facts
        .iter()
        .flat_map(|f| f.consolidates_memory_ids.iter().cloned())
        .collect();
    let named = entity_rows(store, &episodes).await?;
    let mut entity_rows_of_facts = BTreeMap::new();
    for fact in &all_facts {
        for episode in &fact.consolidates_memory_ids {
            for row in named.get(episode).into_iter().flatten() {
                entity_rows_of_facts.insert(
                    (fact.id.clone(), row.entity_id.clone()),
                    MemoryEntityRow {
                        memory_id: fact.id.clone(),
                        ..row.clone()
                    },
                );
            }
        }
    }
    store.upsert_links(&links, now).await?;
    let rows: Vec<MemoryEntityRow> = entity_rows_of_facts.into_values().collect();
    if !rows.is_empty() {
        store.upsert_memory_entities(&rows).await?;
    }
    crate::crash::point("distill.after-links");
    let mut archived = 0;
    for plan in plans {
        archived += store
            .update_where(
                MEMORIES.name,
                &format!(
                    "id IN ({}) AND archived_at IS NULL",
                    sql_list(&plan.archive)
                ),
                &[
                    ("state", "'archived'".to_string()),
                    ("tier", "'archived'".to_string()),
                    // A new input to `scores` (a kept-forever memory revives at once).
                    ("scores_due_at", "NULL".to_string()),
                    ("archived_at", sql_timestamp(plan.archived_at)),
                    ("updated_at", sql_timestamp(plan.archived_at)),
                ],
            )
            .await?;
    }
    Ok((new.len() as u64, archived))
}

/// Batch mode: distillations a killed run logged are finished, and the groups not waiting in
/// an earlier batch are submitted, one batch per user; `batches poll` writes their facts
/// (`DistillApplier`).
async fn submit(
    ctx: &JobCtx<'_>,
    args: &DistillArgs,
    log: &RunLog,
    llm: &crate::llm::Llm,
    (asked, resumed): (&[Asked], &[Planned]),
    report: &mut JobReport,
    counts: &mut BTreeMap<String, u64>,
) -> Result<()> {
    if !resumed.is_empty() && !ctx.dry_run {
        let from = EmbedderFrom::Job(ctx, &args.embedder);
        let now = ctx.now.timestamp_micros();
        let (facts, archived) = apply(&ctx.store, from, resumed, now).await?;
        counts.insert("facts_created".into(), facts);
        counts.insert("episodes_archived".into(), archived);
    }
    let requests = asked
        .iter()
        .map(|a| (a.user.clone(), a.item.clone()))
        .collect();
    let task = (
        Task::SemanticDistill,
        requests,
        "groups",
        "groups_in_pending_batches",
    );
    let asked = log
        .submit_unless_pending(ctx, llm, task, counts, &mut report.notes)
        .await?;
    counts.insert("groups_asked".into(), asked as u64);
    Ok(())
}

/// Applies `distill` batches for `batches poll`: each group's answer judged as an online run
/// judges it, against the group's episodes still in the store, logged (DISTILL) before its
/// facts, links and entity rows are written and its episodes archived, at the clock of the
/// run that submitted it. Applying the same batch again writes nothing twice: the facts' ids
/// derive from the group, links and entity rows are upserts, and only live episodes are
/// archived.
pub struct DistillApplier;

#[async_trait::async_trait]
impl Applier for DistillApplier {
    async fn apply(
        &self,
        env: &ApplyEnv<'_>,
        record: &BatchRecord,
        items: &[Item],
        outcomes: &[Outcome],
    ) -> Result<BTreeMap<String, u64>> {
        let store = env.store;
        let now = super::batch_clock(record, items)?;
        // An earlier attempt at this batch logged some groups: those are finished as logged,
        // not judged again against episodes it may have archived already.
        let keys = self.result_keys(record, items);
        #[derive(serde::Deserialize)]
        struct Logged {
            id: String,
            classification: Option<String>,
            after_state: Option<String>,
        }
        let logged: BTreeMap<String, Logged> = store
            .rows_with_ids::<Logged>(AUDIT_LOG.name, &keys, None)
            .await?
            .into_iter()
            .map(|row| (row.id.clone(), row))
            .collect();
        let ids: Vec<String> = items
            .iter()
            .zip(&keys)
            .filter(|(_, key)| !logged.contains_key(*key))
            .flat_map(|(i, _)| i.input.memories.iter().map(|m| m.id.clone()))
            .collect();
        let live = "archived_at IS NULL AND superseded_by IS NULL";
        let episodes: Vec<EpisodeRow> =
            store.rows_with_ids(MEMORIES.name, &ids, Some(live)).await?;
        let by_id: BTreeMap<&str, &EpisodeRow> =
            episodes.iter().map(|e| (e.id.as_str(), e)).collect();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut notes = Vec::new();
        let mut audit = Vec::new();
        let mut plans = Vec::new();
        for ((item, outcome), key) in items.iter().zip(outcomes).zip(&keys) {
            if let Some(row) = logged.get(key) {
                if row.classification.as_deref() == Some("APPLIED") {
                    let after: serde_json::Value =
                        serde_json::from_str(row.after_state.as_deref().unwrap_or("{}"))?;
                    plans.push(logged_plan(key, &after, store.embedding_dim(), now)?);
                }
                continue;
            }
            // The group's episodes still live and current, oldest first as submitted: one
            // archived or superseded since the submission is left out of the group.
            let members: Vec<String> = item
                .input
                .memories
                .iter()
                .filter(|m| by_id.contains_key(m.id.as_str()))
                .map(|m| m.id.clone())
                .collect();
            let user = record.user_id.as_deref().unwrap_or_default();
            let group = Group {
                user,
                key: &item.custom_id,
                episodes: &members,
            };
            let (row, planned) = judge(
                &record.run_id,
                &group,
                (item, outcome),
                &by_id,
                now,
                (&mut notes, &mut counts),
            );
            audit.push(row);
            plans.extend(planned);
        }
        store.write_audit(&audit).await?;
        crate::crash::point("distill.after-audit");
        counts.insert("groups_distilled".into(), plans.len() as u64);
        if !plans.is_empty() {
            let (facts, archived) =
                apply(store, EmbedderFrom::Poll(env.embedder), &plans, now).await?;
            counts.insert("facts_created".into(), facts);
            counts.insert("episodes_archived".into(), archived);
        }
        Ok(counts)
    }

    fn result_keys(&self, record: &BatchRecord, items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|item| AuditRow::new(&record.run_id, "DISTILL", &item.custom_id, 0).id)
            .collect()
    }
}

pub async fn run(ctx: &JobCtx<'_>, args: &DistillArgs) -> Result<JobReport> {
    let config = ctx.app.config().await?;
    let mut p = config.distill.clone();
    if let Some(days) = args.min_age_days {
        p.min_age_days = days;
    }
    if args.similarity.is_some() {
        p.similarity = args.similarity;
    }
    p.validate()
        .map_err(|e| anyhow!("--min-age-days or --similarity: {e}"))?;
    let now = ctx.now.timestamp_micros();
    let log = RunLog::start(ctx, JobName::Distill.as_str(), &json!({"distill": p})).await?;
    let mut report = JobReport::new(JobName::Distill.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let llm = ctx.app.llm(&args.llm).await?;
    let mut plans = unfinished(&ctx.store, now).await?;
    if !plans.is_empty() {
        counts.insert("resumed".into(), plans.len() as u64);
    }
    let (asked, episodes) = plan(ctx, &p, &mut report, &mut counts).await?;
    if llm.mode == CallMode::Batch {
        submit(
            ctx,
            args,
            &log,
            &llm,
            (&asked, &plans),
            &mut report,
            &mut counts,
        )
        .await?;
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }
    counts.insert("groups_asked".into(), asked.len() as u64);
    let items: Vec<Item> = asked.iter().map(|a| a.item.clone()).collect();
    let outcomes = if items.is_empty() {
        Vec::new()
    } else {
        llm.run(items).await
    };
    if !outcomes.is_empty() {
        report.llm = Some(llm.usage(&outcomes));
    }
    let by_id: BTreeMap<&str, &EpisodeRow> =
        episodes.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut audit = Vec::new();
    counts.insert("offline_fallbacks".into(), 0);
    for (a, outcome) in asked.iter().zip(&outcomes) {
        let group = Group {
            user: &a.user,
            key: &a.key,
            episodes: &a.episodes,
        };
        let (row, planned) = judge(
            log.run_id(),
            &group,
            (&a.item, outcome),
            &by_id,
            now,
            (&mut report.notes, &mut counts),
        );
        audit.push(row);
        plans.extend(planned);
    }
    let fresh = plans.len() - counts.get("resumed").copied().unwrap_or(0) as usize;
    counts.insert("groups_distilled".into(), fresh as u64);
    if ctx.dry_run {
        for plan in plans.iter().take(20) {
            for fact in &plan.facts {
                report.notes.push(format!(
                    "{} ({}, from {} episodes): {}",
                    fact.id,
                    fact.user_id,
                    fact.consolidates_memory_ids.len(),
                    fact.text
                ));
            }
        }
    } else {
        ctx.store.write_audit(&audit).await?;
        crate::crash::point("distill.after-audit");
        if !plans.is_empty() {
            let from = EmbedderFrom::Job(ctx, &args.embedder);
            let (facts, archived) = apply(&ctx.store, from, &plans, now).await?;
            counts.insert("facts_created".into(), facts);
            counts.insert("episodes_archived".into(), archived);
        }
    }
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
