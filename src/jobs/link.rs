//! `memlife link`: typed links between a user's similar memories (seed 000: LLM-classified,
//! sparse, high-value links: conflicts, supersedes, causes, instance_of, invalidated_by,
//! motivated_by). Candidate pairs are each memory's nearest neighbours above `--min-score`;
//! every pair is judged once (`link.classify`), newer memory as source; a pair already judged
//! by an earlier run (audit log) is not asked again. `null` makes no link.
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
use crate::logic::link::{JudgedPair, LinkWrites, PairVerdict, candidate_pairs, plan_links};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::AUDIT_LOG;
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

struct UserMemories {
    views: Vec<MemoryView>,
    vectors: Vec<f32>,
    /// The model that made the vectors (the user's most common one; memories embedded by
    /// another model are left out, their similarities mean nothing against these).
    model: String,
    other_model: usize,
}

async fn load(ctx: &JobCtx<'_>, user: &str) -> Result<UserMemories> {
    let filter = format!("user_id = {} AND state != 'archived'", sql_string(user));
    let (rows, vectors) = ctx
        .store
        .scan_rows_with_vectors::<EmbeddedMemory>("memories", &filter, "embedding")
        .await?;
    let dim = ctx.store.embedding_dim();
    let (model, other_model) = super::main_model(rows.iter().map(|r| r.embedding_model.as_deref()));
    let mut out = UserMemories {
        views: Vec::new(),
        vectors: Vec::new(),
        other_model,
        model,
    };
    for (row, vector) in rows.into_iter().zip(vectors.chunks_exact(dim)) {
        if row.embedding_model.as_deref().unwrap_or("") != out.model {
            continue;
        }
        out.vectors.extend_from_slice(vector);
        out.views.push(MemoryView::from_shown(row.shown()));
    }
    Ok(out)
}

/// Pairs judged before (by any run), as (source, target); failed judgements do not count.
async fn judged_pairs(store: &Store, user: &str) -> Result<BTreeSet<(String, String)>> {
    // Pairs judged by runs `memlife undo` reverted are judged again.
    let filter = crate::store::without_undone(
        store,
        &format!(
            "operation = 'LINK' AND user_id = {} AND classification != 'FAILED'",
            sql_string(user)
        ),
    )
    .await?;
    #[derive(serde::Deserialize)]
    struct Judged {
        source_ids: Vec<String>,
    }
    let mut pairs = BTreeSet::new();
    for row in store
        .scan_rows::<Judged>(AUDIT_LOG.name, Some(&filter))
        .await?
    {
        if let [source, target] = row.source_ids.as_slice() {
            pairs.insert((source.clone(), target.clone()));
        }
    }
    Ok(pairs)
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

/// The requests for the candidate pairs (`logic::link::candidate_pairs`): source newer than
/// target, most similar first, without those judged before.
fn candidate_items(
    memories: &UserMemories,
    dim: usize,
    args: &LinkArgs,
    min_score: f32,
    judged: &BTreeSet<(String, String)>,
    now: &str,
) -> Vec<Item> {
    let neighbours = super::all_pairs_neighbours(&memories.vectors, dim, args.k);
    let order: Vec<(&str, &str)> = memories
        .views
        .iter()
        .map(|v| (v.created_at.as_str(), v.id.as_str()))
        .collect();
    candidate_pairs(&neighbours, &order, min_score, judged)
        .into_iter()
        .map(|(s, t)| Item {
            custom_id: format!("{}|{}", memories.views[s].id, memories.views[t].id),
            input: TaskInput {
                task: Task::LinkClassify,
                memories: vec![memories.views[s].clone(), memories.views[t].clone()],
                proposal: None,
                now: now.to_string(),
                question: None,
            },
        })
        .collect()
}

/// Writes links and audit rows for judged pairs. Keys are derived from `origin_key` (the run
/// or the batch) and the pair, so writing the same outcomes twice changes nothing.
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
    store.write_audit(&audit).await?;
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

pub async fn run(ctx: &JobCtx<'_>, args: &LinkArgs) -> Result<JobReport> {
    let llm = &ctx.app.llm(&args.llm).await?;
    let config = ctx.app.config().await?;
    let chain_min = config.integrate.min_confidence;
    let params = serde_json::json!({"k": args.k, "min_score": args.min_score, "mode": format!("{:?}", llm.mode).to_lowercase(), "chain_min_confidence": chain_min});
    let log = RunLog::start(ctx, JobName::Link.as_str(), &params).await?;
    let mut report = JobReport::new(JobName::Link.as_str(), ctx);
    let now = format_timestamp(ctx.now.timestamp_micros());
    let mut all_outcomes = Vec::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let dim = ctx.store.embedding_dim();
    let mut thresholds_noted = BTreeSet::new();
    for user in super::users_of(ctx, "memories").await? {
        let memories = load(ctx, &user).await?;
        if memories.other_model > 0 {
            *counts.entry("skipped_other_model".into()).or_default() += memories.other_model as u64;
            report.notes.push(format!(
                "user {user}: {} memories embedded by another model than {} were left out \
                 (`memlife embed --all` puts them on one model)",
                memories.other_model, memories.model
            ));
        }
        if memories.views.len() < 2 {
            continue;
        }
        let min_score = match args.min_score {
            Some(score) => score,
            None => {
                let (thresholds, source) = config.thresholds_for(&memories.model);
                if thresholds_noted.insert(memories.model.clone()) {
                    report.notes.push(format!(
                        "pairs judged from cosine similarity {} ({} threshold of {}; --min-score overrides)",
                        thresholds.link,
                        source.label(),
                        memories.model
                    ));
                }
                thresholds.link
            }
        };
        let mut judged = judged_pairs(&ctx.store, &user).await?;
        // Pairs waiting in a submitted batch are not submitted again.
        judged.extend(pairs_in_pending_batches(&ctx.store, &user).await?);
        let items = candidate_items(&memories, dim, args, min_score, &judged, &now);
        *counts.entry("users".into()).or_default() += 1;
        *counts.entry("pairs_to_judge".into()).or_default() += items.len() as u64;
        if items.is_empty() || (ctx.dry_run && llm.mode == CallMode::Batch) {
            continue;
        }
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
                        chain_min,
                    )
                    .await?;
                    for (k, v) in written {
                        *counts.entry(k).or_default() += v;
                    }
                }
                all_outcomes.extend(outcomes);
            }
            CallMode::Batch => {
                log.submit_batches(
                    ctx,
                    llm,
                    &user,
                    (Task::LinkClassify, &items, "pairs"),
                    &mut counts,
                    &mut report.notes,
                )
                .await?;
            }
        }
    }
    report.counts = counts;
    if llm.mode == CallMode::Online {
        report.llm = Some(llm.usage(&all_outcomes));
    }
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
