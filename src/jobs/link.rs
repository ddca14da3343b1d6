//! `memlife link`: typed links between a user's similar memories (seed 000: LLM-classified,
//! sparse, high-value links: conflicts, supersedes, causes, instance_of, invalidated_by,
//! motivated_by). Candidate pairs are each memory's nearest neighbours above `--min-score`;
//! every pair is judged once (`link.classify`), newer memory as source; a pair already judged
//! by an earlier run (audit log) is not asked again. `null` makes no link.
//!
//! A run looks only at what is new to it. Each memory whose pairs all have a verdict gets a
//! mark (`memories.link_mark`: a hash of its vector, model, `k` and threshold; a writer of a
//! new vector clears it), and the next run reads only the users with an unmarked live memory,
//! scores only the unmarked memories against the user's others (`logic::link::
//! fresh_neighbours`: the same pairs a pass over every memory gives them) and reads texts
//! only for the pairs it asks about. `--all` reads every user and compares every mark, for
//! new options or vectors written by hand.
//!
//! Online, the links are written when the run ends. With `--mode batch` the run submits one
//! Batch API request set per user and exits; `memlife batches poll` applies the results
//! through `LinkApplier`, exactly once.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde_json::Value;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::llm::batch::{Applier, ApplyEnv, BatchRecord};
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{CallMode, Item, LlmArgs, Outcome};
use crate::logic::link::{
    JudgedPair, LinkWrites, PairVerdict, candidate_pairs, fresh_neighbours, link_mark, plan_links,
};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{AUDIT_LOG, MEMORIES};
use crate::model::typed::EmbeddedMemory;
use crate::store::audit::AuditRow;
use crate::store::{Store, sql_string};

/// Typed links (conflicts, supersedes, causes, ...) between similar memories, judged by
/// the LLM layer (`link.classify`); `--mode batch` submits and exits.
#[derive(clap::Args, Debug, Clone)]
pub struct LinkArgs {
    /// Neighbours per memory considered.
    #[arg(long, default_value_t = 5)]
    pub k: usize,
    /// Look at every user's memories, not only the users with a memory `link` has not seen:
    /// after changing `--k`, `--min-score` or the thresholds, or writing vectors by hand.
    #[arg(long)]
    pub all: bool,
    /// Cosine similarity a pair needs to be judged. Default: the `link` threshold of the model
    /// that made the vectors (`[thresholds."MODEL"]`; 0.6 for all-MiniLM-L6-v2, the seeds'
    /// 0.75 for a model with no calibration).
    #[arg(long, allow_negative_numbers = true)]
    pub min_score: Option<f32>,
    /// The clock the run computes at (RFC 3339): the new links' timestamps and the superseded
    /// memories' `valid_until`; default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
    #[command(flatten)]
    pub llm: LlmArgs,
}

impl Job for LinkArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }

    fn applier() -> Option<Box<dyn Applier>> {
        Some(Box::new(LinkApplier))
    }
}

/// Users whose memories are read in one scan (and whose pairs' judgements and texts are
/// looked up together).
const USERS_PER_SCAN: usize = 64;

/// A memory as `link` first reads it: no text. Only the memories of the pairs it will judge
/// are read whole (`views_of`).
#[derive(serde::Deserialize)]
struct Linkable {
    id: String,
    user_id: String,
    created_at: i64,
    embedding_model: Option<String>,
    link_mark: Option<i64>,
}

/// One user's memories on the model most of them were embedded by (memories embedded by
/// another model are left out: their similarities mean nothing against these).
struct UserMemories {
    user: String,
    ids: Vec<String>,
    /// Creation times (RFC 3339), the pairs' order with `ids`.
    created: Vec<String>,
    marks: Vec<Option<i64>>,
    vectors: Vec<f32>,
    model: String,
    other_model: usize,
}

/// The users (in scope) with a live memory `link` has not looked at (no `link_mark`): a
/// new memory, or a new vector (every writer of one clears the mark). Reads one small
/// column, not the vectors.
async fn users_with_unmarked(ctx: &JobCtx<'_>) -> Result<Vec<String>> {
    super::users_with_memories_where(ctx, "link_mark IS NULL AND state != 'archived'").await
}

/// The memories of `users` (not archived, with a vector), user by user, in one scan.
async fn load(ctx: &JobCtx<'_>, users: &[String]) -> Result<Vec<UserMemories>> {
    let filter = format!(
        "user_id IN ({}) AND state != 'archived'",
        crate::store::sql_list(users)
    );
    let (rows, vectors) = ctx
        .store
        .scan_rows_with_vectors::<Linkable>("memories", &filter, "embedding")
        .await?;
    let dim = ctx.store.embedding_dim();
    let mut by_user: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        by_user.entry(row.user_id.as_str()).or_default().push(i);
    }
    let mut out = Vec::new();
    for (user, positions) in by_user {
        let (model, other_model) = super::main_model(
            positions
                .iter()
                .map(|&i| rows[i].embedding_model.as_deref()),
        );
        let mut memories = UserMemories {
            user: user.to_string(),
            ids: Vec::new(),
            created: Vec::new(),
            marks: Vec::new(),
            vectors: Vec::new(),
            model,
            other_model,
        };
        for i in positions {
            let row = &rows[i];
            if row.embedding_model.as_deref().unwrap_or("") != memories.model {
                continue;
            }
            memories
                .vectors
                .extend_from_slice(&vectors[i * dim..(i + 1) * dim]);
            memories.ids.push(row.id.clone());
            memories.created.push(format_timestamp(row.created_at));
            memories.marks.push(row.link_mark);
        }
        out.push(memories);
    }
    Ok(out)
}

/// Of the candidate pairs, those judged before (by any run not undone), as (source,
/// target); failed judgements do not count. Looked up by the pairs' targets (`audit_log`'s
/// index on `target_id`), so the cost follows the night's pairs, not the log's length.
async fn judged_pairs(
    store: &Store,
    pairs: &BTreeSet<(String, String)>,
) -> Result<BTreeSet<(String, String)>> {
    let targets: BTreeSet<&str> = pairs.iter().map(|(_, t)| t.as_str()).collect();
    #[derive(serde::Deserialize)]
    struct Judged {
        source_ids: Vec<String>,
    }
    let mut judged = BTreeSet::new();
    let targets: Vec<&str> = targets.into_iter().collect();
    // Pairs judged by runs `memlife undo` reverted are judged again (the undone runs are
    // read once, not per chunk).
    let judged_by_live_runs =
        crate::store::without_undone(store, "operation = 'LINK' AND classification != 'FAILED'")
            .await?;
    for chunk in targets.chunks(512) {
        let filter = format!(
            "target_id IN ({}) AND ({judged_by_live_runs})",
            crate::store::sql_list(chunk)
        );
        for row in store
            .scan_rows::<Judged>(AUDIT_LOG.name, Some(&filter))
            .await?
        {
            if let [source, target] = row.source_ids.as_slice() {
                let pair = (source.clone(), target.clone());
                if pairs.contains(&pair) {
                    judged.insert(pair);
                }
            }
        }
    }
    Ok(judged)
}

/// Pairs of `user` in link batches not yet applied (submitted, ready, being applied, or failed
/// and waiting for `batches retry`), as (source, target).
async fn pairs_in_pending_batches(store: &Store, user: &str) -> Result<BTreeSet<(String, String)>> {
    let filter = format!(
        "job = {} AND user_id = {} AND status IN ('submitting', 'submitted', 'ready', 'applying', 'failed')",
        sql_string(JobName::Link.as_str()),
        sql_string(user)
    );
    let mut pairs = BTreeSet::new();
    for record in crate::llm::batch::records(store, &filter).await? {
        for item in crate::llm::batch::items_of(&record)? {
            if let [source, target] = item.input.memories.as_slice() {
                pairs.insert((source.id.clone(), target.id.clone()));
            }
        }
    }
    Ok(pairs)
}

/// What the judge is shown of the memories `ids`, read whole in one scan.
async fn views_of(store: &Store, ids: &BTreeSet<&str>) -> Result<BTreeMap<String, MemoryView>> {
    let mut views = BTreeMap::new();
    let ids: Vec<&str> = ids.iter().copied().collect();
    for chunk in ids.chunks(1024) {
        let filter = format!("id IN ({})", crate::store::sql_list(chunk));
        for row in store
            .scan_rows::<EmbeddedMemory>("memories", Some(&filter))
            .await?
        {
            views.insert(row.id.clone(), MemoryView::from_shown(row.shown()));
        }
    }
    Ok(views)
}

/// One user's night: the candidate pairs with a memory new to `link` (source newer than
/// target, most similar first, `logic::link::fresh_neighbours`), before judged ones are
/// left out, and each new memory's mark as this run computes it.
struct UserPlan {
    pairs: Vec<(String, String)>,
    /// (memory id, mark, whether a mark is stored) of the memories new to `link`.
    fresh: Vec<(String, i64, bool)>,
}

fn plan_user(memories: &UserMemories, dim: usize, k: usize, min_score: f32) -> UserPlan {
    let marks: Vec<i64> = memories
        .vectors
        .chunks_exact(dim)
        .map(|v| link_mark(v, &memories.model, k, min_score))
        .collect();
    let fresh: Vec<bool> = marks
        .iter()
        .zip(&memories.marks)
        .map(|(mark, stored)| *stored != Some(*mark))
        .collect();
    let neighbours = fresh_neighbours(&memories.vectors, dim, &fresh, (k, min_score), || {
        super::all_pairs_neighbours(&memories.vectors, dim, k)
    });
    let order: Vec<(&str, &str)> = memories
        .created
        .iter()
        .zip(&memories.ids)
        .map(|(c, id)| (c.as_str(), id.as_str()))
        .collect();
    let pairs = candidate_pairs(&neighbours, &order, min_score, &BTreeSet::new())
        .into_iter()
        .map(|(s, t)| (memories.ids[s].clone(), memories.ids[t].clone()))
        .collect();
    UserPlan {
        pairs,
        fresh: (0..marks.len())
            .filter(|&i| fresh[i])
            .map(|i| {
                (
                    memories.ids[i].clone(),
                    marks[i],
                    memories.marks[i].is_some(),
                )
            })
            .collect(),
    }
}

/// The request for one pair (`None` when a memory of it is gone since it was read).
fn item_for(
    views: &BTreeMap<String, MemoryView>,
    (s, t): &(String, String),
    now: &str,
) -> Option<Item> {
    Some(Item {
        custom_id: format!("{s}|{t}"),
        input: TaskInput {
            task: Task::LinkClassify,
            memories: vec![views.get(s)?.clone(), views.get(t)?.clone()],
            proposal: None,
            now: now.to_string(),
            question: None,
        },
    })
}

/// Writes links and audit rows for judged pairs. Keys are derived from `origin_key` and the
/// pair: an online run's own id (`run_id`: new keys, appended) or a batch's key (merged, so
/// applying the same results twice changes nothing).
pub async fn write_outcomes(
    store: &Store,
    run_id: &str,
    user: Option<&str>,
    origin_key: &str,
    items: &[Item],
    outcomes: &[Outcome],
    chain_min_confidence: f64,
) -> Result<BTreeMap<String, u64>> {
    // The clock of the run that built the items (a batch applied late writes the times an
    // online run at that clock would).
    let now = items
        .first()
        .and_then(|i| crate::model::encoding::parse_timestamp(&i.input.now))
        .unwrap_or_else(|| chrono::Utc::now().timestamp_micros());
    let pairs: Vec<JudgedPair> = items
        .iter()
        .zip(outcomes)
        .map(|(item, outcome)| JudgedPair {
            source: item.input.memories[0].id.clone(),
            target: item.input.memories[1].id.clone(),
            key: audit_key(origin_key, item),
            verdict: match (&outcome.failure, &outcome.reply) {
                (Some(reason), _) => PairVerdict::Failed(reason.clone()),
                (None, Some(Reply::Link(r))) => PairVerdict::Typed {
                    link_type: r.link_type.as_str().to_string(),
                    confidence: r.confidence,
                    reasoning: r.reasoning.clone(),
                },
                (None, _) => PairVerdict::Failed("reply of another task".into()),
            },
            served_by: outcome.served_by.clone(),
        })
        .collect();
    let LinkWrites {
        links,
        chains,
        audit,
        mut counts,
    } = plan_links((run_id, user), &pairs, chain_min_confidence, now);
    // The links first, then the audit rows: an audit row marks a pair judged (the next run
    // skips it), so it must not exist before the pair's link does. A crash between the two
    // commits leaves links without audit rows; the next run judges those pairs again and
    // writes the same links (keyed by pair and type) and the missing audit rows.
    if !links.is_empty() {
        store.upsert_links(&links, now).await?;
    }
    crate::crash::point("link.after-links");
    // `supersedes` links become supersession chains, as integrate makes them, when the judge
    // is as sure as integrate needs to be to apply a supersession (`integrate.min_confidence`):
    // a less sure one stays a link, counted, and changes no memory's validity.
    let (chained, notes) = super::integrate::chain_supersessions(store, &chains).await?;
    if chained > 0 {
        *counts.entry("supersessions_chained".into()).or_default() += chained;
    }
    // An expected outcome, counted in the report; each pair is named at MEMLIFE_LOG=info.
    for note in notes {
        tracing::info!("{note}");
        *counts
            .entry("supersessions_left_as_links".into())
            .or_default() += 1;
    }
    crate::crash::point("link.after-chains");
    if origin_key == run_id {
        // An online run's: the keys derive from its own run id (new with every run) and its
        // pairs (each written once), so none can be in the log. Appended, without the merge's
        // lookup of every key in `audit_log.id`'s index (a random key a page: every page, 15
        // ms of `link` on day 366 of `bench year`, 9 on day 2).
        store.append_audit(&audit).await?;
    } else {
        // A batch's: a poll killed half-way applies the same results again, to the same keys.
        store.write_audit(&audit).await?;
    }
    Ok(counts)
}

/// The confidence a `supersedes` link needs to become a chain, as the submitting run set it
/// (`integrate.min_confidence` then; 0.8 for runs that did not record it).
fn chain_min_confidence(params: &Value) -> f64 {
    params
        .get("chain_min_confidence")
        .and_then(Value::as_f64)
        .unwrap_or(0.8)
}

/// What an audit row of a judged pair derives its id from: the run or batch, and the pair.
fn audit_key(origin_key: &str, item: &Item) -> String {
    format!("{origin_key}|{}", item.custom_id)
}

/// Applies `link` batches for `batches poll`.
pub struct LinkApplier;

#[async_trait::async_trait]
impl Applier for LinkApplier {
    async fn apply(
        &self,
        env: &ApplyEnv<'_>,
        record: &BatchRecord,
        items: &[Item],
        outcomes: &[Outcome],
    ) -> Result<BTreeMap<String, u64>> {
        write_outcomes(
            env.store,
            &record.run_id,
            record.user_id.as_deref(),
            &record.batch_key,
            items,
            outcomes,
            chain_min_confidence(&crate::store::run_params(env.store, &record.run_id).await?),
        )
        .await
    }

    fn result_keys(&self, record: &BatchRecord, items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|item| {
                AuditRow::new(
                    &record.run_id,
                    "LINK",
                    &audit_key(&record.batch_key, item),
                    0,
                )
                .id
            })
            .collect()
    }
}

/// What a run gathers over its groups of users.
#[derive(Default)]
struct Night {
    counts: BTreeMap<String, u64>,
    outcomes: Vec<Outcome>,
    thresholds_noted: BTreeSet<String>,
    /// (memory id, mark) of the memories whose every candidate pair is judged; `None` clears
    /// the stale mark of one whose pairs are not all judged yet.
    marks: Vec<(String, Option<i64>)>,
}

pub async fn run(ctx: &JobCtx<'_>, args: &LinkArgs) -> Result<JobReport> {
    let llm = &ctx.app.llm(&args.llm).await?;
    let config = ctx.app.config().await?;
    let chain_min = config.integrate.min_confidence;
    let params = serde_json::json!({"k": args.k, "min_score": args.min_score, "all": args.all, "mode": format!("{:?}", llm.mode).to_lowercase(), "chain_min_confidence": chain_min});
    let log = RunLog::start(ctx, JobName::Link.as_str(), &params).await?;
    let mut report = JobReport::new(JobName::Link.as_str(), ctx);
    let mut night = Night::default();
    let users = match args.all {
        true => super::users_of(ctx, "memories").await?,
        false => users_with_unmarked(ctx).await?,
    };
    for group in users.chunks(USERS_PER_SCAN) {
        link_users(
            ctx,
            args,
            (llm, config),
            &log,
            group,
            &mut night,
            &mut report,
        )
        .await?;
    }
    if !ctx.dry_run && !night.marks.is_empty() {
        ctx.store
            .set_i64_column(&MEMORIES, "link_mark", &night.marks)
            .await?;
        crate::crash::point("link.after-marks");
    }
    let marked = match ctx.dry_run {
        true => 0,
        false => night.marks.iter().filter(|m| m.1.is_some()).count(),
    };
    night.counts.insert("memories_marked".into(), marked as u64);
    report.counts = night.counts;
    if llm.mode == CallMode::Online {
        report.llm = Some(llm.usage(&night.outcomes));
    }
    log.finish(ctx, &mut report).await?;
    Ok(report)
}

/// The similarity a pair of `memories` needs: `--min-score`, else the threshold of the model
/// that made their vectors (noted once per model).
fn min_score_for(
    args: &LinkArgs,
    config: &crate::config::Config,
    model: &str,
    night: &mut Night,
    report: &mut JobReport,
) -> f32 {
    if let Some(score) = args.min_score {
        return score;
    }
    let (thresholds, source) = config.thresholds_for(model);
    if night.thresholds_noted.insert(model.to_string()) {
        report.notes.push(format!(
            "pairs judged from cosine similarity {} ({} threshold of {model}; --min-score overrides)",
            thresholds.link,
            source.label(),
        ));
    }
    thresholds.link
}

/// One group of users: their memories read in one scan, the pairs with a memory new to
/// `link` planned, the judged ones looked up together, the rest judged user by user.
async fn link_users(
    ctx: &JobCtx<'_>,
    args: &LinkArgs,
    (llm, config): (&crate::llm::Llm, &crate::config::Config),
    log: &RunLog,
    users: &[String],
    night: &mut Night,
    report: &mut JobReport,
) -> Result<()> {
    let dim = ctx.store.embedding_dim();
    let mut plans = Vec::new();
    let loaded = load(ctx, users).await?;
    *night.counts.entry("users_read".into()).or_default() += loaded.len() as u64;
    for memories in loaded {
        if memories.other_model > 0 {
            *night
                .counts
                .entry("skipped_other_model".into())
                .or_default() += memories.other_model as u64;
            report.notes.push(format!(
                "user {}: {} memories embedded by another model than {} were left out \
                 (`memlife embed --all` puts them on one model)",
                memories.user, memories.other_model, memories.model
            ));
        }
        if memories.ids.is_empty() {
            continue;
        }
        let min_score = min_score_for(args, config, &memories.model, night, report);
        let plan = plan_user(&memories, dim, args.k, min_score);
        if plan.fresh.is_empty() {
            continue;
        }
        *night.counts.entry("users".into()).or_default() += 1;
        *night
            .counts
            .entry("memories_new_to_link".into())
            .or_default() += plan.fresh.len() as u64;
        plans.push((memories.user, plan));
    }
    let candidates: BTreeSet<(String, String)> = plans
        .iter()
        .flat_map(|(_, p)| p.pairs.iter().cloned())
        .collect();
    let judged = match candidates.is_empty() {
        true => BTreeSet::new(),
        false => judged_pairs(&ctx.store, &candidates).await?,
    };
    let shown: BTreeSet<&str> = candidates
        .iter()
        .filter(|p| !judged.contains(*p))
        .flat_map(|(s, t)| [s.as_str(), t.as_str()])
        .collect();
    let views = views_of(&ctx.store, &shown).await?;
    let now = format_timestamp(ctx.now.timestamp_micros());
    for (user, plan) in plans {
        let open: Vec<&(String, String)> =
            plan.pairs.iter().filter(|p| !judged.contains(*p)).collect();
        // Pairs waiting in a submitted batch are not submitted again.
        let pending = match open.is_empty() {
            true => BTreeSet::new(),
            false => pairs_in_pending_batches(&ctx.store, &user).await?,
        };
        let items: Vec<Item> = open
            .iter()
            .filter(|p| !pending.contains(**p))
            .filter_map(|p| item_for(&views, p, &now))
            .collect();
        *night.counts.entry("pairs_to_judge".into()).or_default() += items.len() as u64;
        let mut resolved: BTreeSet<String> = BTreeSet::new();
        let nothing_to_ask = items.is_empty() || (ctx.dry_run && llm.mode == CallMode::Batch);
        if !nothing_to_ask {
            match llm.mode {
                CallMode::Online => {
                    let outcomes = llm.run(items.clone()).await;
                    for o in outcomes.iter().filter(|o| o.failure.is_some()) {
                        report.failures.push(super::ItemFailure {
                            item: o.custom_id.clone(),
                            reason: o.failure.clone().unwrap_or_default(),
                        });
                    }
                    if !ctx.dry_run {
                        let written = write_outcomes(
                            &ctx.store,
                            log.run_id(),
                            Some(&user),
                            log.run_id(),
                            &items,
                            &outcomes,
                            config.integrate.min_confidence,
                        )
                        .await?;
                        for (k, v) in written {
                            *night.counts.entry(k).or_default() += v;
                        }
                    }
                    for o in &outcomes {
                        if o.failure.is_none() && matches!(o.reply, Some(Reply::Link(_))) {
                            resolved.insert(o.custom_id.clone());
                        }
                    }
                    night.outcomes.extend(outcomes);
                }
                CallMode::Batch => {
                    log.submit_batches(
                        ctx,
                        llm,
                        &user,
                        (Task::LinkClassify, &items, "pairs"),
                        &mut night.counts,
                        &mut report.notes,
                    )
                    .await?;
                }
            }
        }
        // A memory is marked once every pair it is in has a verdict: one whose pair failed,
        // waits in a batch or could not be read is looked at again by the next run (a mark
        // it had, from another vector or other options, is cleared so that run finds it).
        let unresolved: BTreeSet<&str> = open
            .iter()
            .filter(|(s, t)| !resolved.contains(&format!("{s}|{t}")))
            .flat_map(|(s, t)| [s.as_str(), t.as_str()])
            .collect();
        for (id, mark, stored) in plan.fresh {
            match unresolved.contains(id.as_str()) {
                false => night.marks.push((id, Some(mark))),
                true if stored => night.marks.push((id, None)),
                true => {}
            }
        }
    }
    Ok(())
}
