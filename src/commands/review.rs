//! `memlife review list|approve|reject|expire`: the queue of facts `memlife integrate` did not
//! apply because its judge was unsure (confidence under `[integrate] min_confidence`).
//!
//! - approve ID...: the judge's answer is applied as integrate would have applied it (a MERGE
//!   asks `integrate.merge` for the text now); refused when the candidate memory changed,
//!   was superseded or archived since the judge read it (reject keeps the fact instead);
//! - reject ID...: the fact is kept beside the memory (COEXIST: a new memory and a
//!   `related_to` link), the safe choice;
//! - expire: pending items past `expires_at` are rejected the same way (also done at the start
//!   of every `integrate` run), so no fact waits for ever and none is lost.
//!
//! Every decision is an audit row written before it is applied, under a `review` run.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Result, anyhow, bail};
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::embedders::{Embedder, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::jobs::integrate::{plan, resume, write_plans};
use crate::jobs::{ItemFailure, JobCtx, JobReport, JobScope, RunLog};
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{Item, LlmArgs};
use crate::logic::integrate::{Class, Decision};
use crate::model::encoding::{format_timestamp, parse_timestamp};
use crate::model::schema::{MEMORIES, REVIEW_QUEUE};
use crate::store::text_of;
use crate::store::{Store, json_rows, sql_list, sql_string, sql_timestamp};

const JOB: &str = "review";

#[derive(clap::Args, Debug, Clone)]
pub struct ReviewArgs {
    #[command(subcommand)]
    pub which: ReviewCommand,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ReviewCommand {
    /// The queue, oldest first.
    List {
        #[arg(long)]
        user: Option<String>,
        /// pending, approved, rejected, expired or all.
        #[arg(long, default_value = "pending")]
        status: String,
    },
    /// Apply the judge's answer for these items.
    Approve {
        #[arg(required = true)]
        ids: Vec<String>,
        #[arg(long)]
        now: Option<String>,
        #[command(flatten)]
        llm: LlmArgs,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Keep these facts beside the memory they were compared with (COEXIST).
    Reject {
        #[arg(required = true)]
        ids: Vec<String>,
        #[arg(long)]
        now: Option<String>,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Reject every pending item past its expiry.
    Expire {
        #[arg(long)]
        now: Option<String>,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verdict {
    Approve,
    Reject,
    Expire,
}

impl Verdict {
    fn status(self) -> &'static str {
        match self {
            Verdict::Approve => "approved",
            Verdict::Reject => "rejected",
            Verdict::Expire => "expired",
        }
    }
}

async fn items(store: &Store, filter: &str) -> Result<Vec<Map<String, Value>>> {
    Ok(json_rows(
        &store.scan(REVIEW_QUEUE.name, Some(filter)).await?,
    ))
}

/// Decides review items: one audit row each (written before anything is applied), the
/// plans applied, the items' status set. `merged` holds the merge texts of approved MERGEs.
#[allow(clippy::too_many_arguments)]
async fn settle(
    ctx: &JobCtx<'_>,
    embedder: &Embedder,
    run_id: &str,
    items: &[Map<String, Value>],
    verdict: Verdict,
    merged: &BTreeMap<String, String>,
    now: i64,
    job: &str,
    failures: &mut Vec<ItemFailure>,
) -> Result<u64> {
    let config = ctx.app.config().await?;
    let p = &config.integrate;
    let candidate_ids: Vec<String> = items.iter().map(|i| text_of(i, "candidate_id")).collect();
    let current: BTreeMap<String, Map<String, Value>> = ctx
        .store
        .rows_with_ids(
            "memories",
            &candidate_ids,
            Some(&format!(
                "archived_at IS NULL AND state <> 'archived' AND superseded_by IS NULL \
                 AND (valid_until IS NULL OR valid_until > {})",
                sql_timestamp(now)
            )),
            &MEMORIES.columns_except("embedding"),
        )
        .await?
        .into_iter()
        .map(|r| (text_of(&r, "id"), r))
        .collect();
    let fact_ids: Vec<String> = items.iter().map(|i| text_of(i, "fact_id")).collect();
    let settlement = crate::jobs::integrate::settlement_ids(&ctx.store, &fact_ids).await?;
    let mut plans = Vec::new();
    let mut settled = Vec::new();
    for (item, settlement_id) in items.iter().zip(&settlement) {
        let id = text_of(item, "id");
        let fact: Map<String, Value> = serde_json::from_str(&text_of(item, "fact"))
            .map_err(|e| anyhow!("review item {id}: its fact is not a JSON object: {e}"))?;
        let candidate = current
            .get(&text_of(item, "candidate_id"))
            .filter(|c| c["text"] == item["candidate_text"]);
        let confidence = item["confidence"].as_f64().unwrap_or(0.0);
        let decision = match verdict {
            Verdict::Approve => {
                let Some(class) = Class::parse(&text_of(item, "classification")) else {
                    bail!(
                        "review item {id}: unknown classification {}",
                        item["classification"]
                    );
                };
                if candidate.is_none() {
                    failures.push(ItemFailure {
                        item: id.clone(),
                        reason: "the memory it was compared with changed, was superseded or \
                                 archived since: not applied (reject it to keep the fact)"
                            .into(),
                    });
                    continue;
                }
                if class == Class::Merge && !merged.contains_key(&id) {
                    failures.push(ItemFailure {
                        item: id.clone(),
                        reason: "integrate.merge gave no text: not applied".into(),
                    });
                    continue;
                }
                Decision::Apply {
                    class,
                    candidate: 0,
                    confidence,
                    reasoning: format!("approved in review: {}", text_of(item, "reasoning")),
                }
            }
            Verdict::Reject | Verdict::Expire => Decision::Coexist {
                related: candidate.map(|_| 0),
                confidence,
                reasoning: if verdict == Verdict::Reject {
                    "rejected in review: kept beside the memory".into()
                } else {
                    "the review expired: kept beside the memory".into()
                },
            },
        };
        let plan = plan(
            run_id,
            settlement_id,
            &fact,
            &decision,
            candidate,
            merged.get(&id).map(String::as_str),
            p,
            now,
        );
        plans.push(plan);
        settled.push(id);
    }
    if settled.is_empty() {
        return Ok(0);
    }
    write_plans(&ctx.store, embedder, &plans, &BTreeMap::new(), now, job).await?;
    ctx.store
        .update_where(
            REVIEW_QUEUE.name,
            &format!("id IN ({}) AND status = 'pending'", sql_list(&settled)),
            &[
                ("status", sql_string(verdict.status())),
                ("decided_at", sql_timestamp(now)),
                ("decided_by_run", sql_string(run_id)),
            ],
        )
        .await?;
    Ok(settled.len() as u64)
}

/// Rejects pending items past their expiry (integrate calls it at the start of every run).
pub async fn expire(ctx: &JobCtx<'_>, embedder: &Embedder, run_id: &str, now: i64) -> Result<u64> {
    let mut filter = format!(
        "status = 'pending' AND expires_at <= {}",
        sql_timestamp(now)
    );
    if let Some(u) = &ctx.user {
        filter = format!("{filter} AND user_id = {}", sql_string(u));
    }
    let due = items(&ctx.store, &filter).await?;
    if due.is_empty() {
        return Ok(0);
    }
    let mut failures = Vec::new();
    settle(
        ctx,
        embedder,
        run_id,
        &due,
        Verdict::Expire,
        &BTreeMap::new(),
        now,
        "integrate",
        &mut failures,
    )
    .await
}

fn print_list(rows: &[Map<String, Value>], json: bool, out: &mut dyn Write) -> Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(rows)?)?;
        return Ok(());
    }
    if rows.is_empty() {
        writeln!(out, "review queue: nothing")?;
        return Ok(());
    }
    for r in rows {
        let fact: Map<String, Value> =
            serde_json::from_str(&text_of(r, "fact")).unwrap_or_default();
        writeln!(
            out,
            "{}  {}  {} ({:.2})  {}  expires {}\n  new:      {}\n  existing: {} {}\n  why:      {}",
            text_of(r, "id"),
            text_of(r, "user_id"),
            text_of(r, "classification"),
            r["confidence"].as_f64().unwrap_or(0.0),
            text_of(r, "status"),
            text_of(r, "expires_at"),
            text_of(&fact, "text"),
            text_of(r, "candidate_id"),
            text_of(r, "candidate_text"),
            text_of(r, "reasoning"),
        )?;
    }
    Ok(())
}

fn clock(now: Option<&String>) -> Result<i64> {
    match now {
        Some(t) => parse_timestamp(t).ok_or_else(|| anyhow!("--now: not an RFC 3339 time: {t}")),
        None => Ok(chrono::Utc::now().timestamp_micros()),
    }
}

pub async fn run(app: &App, args: &ReviewArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    match &args.which {
        ReviewCommand::List { user, status } => {
            let ctx = app.job_ctx(&JobScope::default(), None).await?;
            let mut filter = match status.as_str() {
                "all" => "true".to_string(),
                s if crate::model::schema::REVIEW_STATUSES.contains(&s) => {
                    format!("status = {}", sql_string(s))
                }
                s => {
                    bail!("--status: '{s}' is not one of pending, approved, rejected, expired, all")
                }
            };
            if let Some(u) = user {
                filter = format!("{filter} AND user_id = {}", sql_string(u));
            }
            let mut rows = items(&ctx.store, &filter).await?;
            rows.sort_by(|a, b| {
                text_of(a, "created_at")
                    .cmp(&text_of(b, "created_at"))
                    .then(text_of(a, "id").cmp(&text_of(b, "id")))
            });
            print_list(&rows, app.json, out)?;
            Ok(ExitStatus::Success)
        }
        ReviewCommand::Approve {
            ids,
            now,
            llm,
            embedder,
        } => {
            decide(
                app,
                ids,
                now.as_ref(),
                Verdict::Approve,
                Some(llm),
                embedder,
                out,
            )
            .await
        }
        ReviewCommand::Reject { ids, now, embedder } => {
            decide(app, ids, now.as_ref(), Verdict::Reject, None, embedder, out).await
        }
        ReviewCommand::Expire { now, embedder } => {
            decide(app, &[], now.as_ref(), Verdict::Expire, None, embedder, out).await
        }
    }
}

async fn decide(
    app: &App,
    ids: &[String],
    now: Option<&String>,
    verdict: Verdict,
    llm_args: Option<&LlmArgs>,
    embedder_args: &EmbedderArgs,
    out: &mut dyn Write,
) -> Result<ExitStatus> {
    let now_micros = clock(now)?;
    let ctx = app
        .job_ctx(&JobScope::default(), Some(&format_timestamp(now_micros)))
        .await?;
    let log = RunLog::start(
        &ctx,
        JOB,
        &json!({"verdict": verdict.status(), "ids": ids, "now": format_timestamp(now_micros)}),
    )
    .await?;
    let run_id = log.run_id().to_string();
    let mut report = JobReport::new(JOB, &ctx);
    let dim = ctx.store.embedding_dim();
    let embedder = app.embedder(embedder_args, dim, 16).await?;
    let resumed = resume(
        &ctx.store,
        &embedder,
        &crate::logic::shard::UserScope::All,
        now_micros,
        JOB,
    )
    .await?;
    if resumed > 0 {
        report.count("resumed", resumed);
    }
    let chosen = if verdict == Verdict::Expire {
        items(
            &ctx.store,
            &format!(
                "status = 'pending' AND expires_at <= {}",
                sql_timestamp(now_micros)
            ),
        )
        .await?
    } else {
        let found = items(&ctx.store, &format!("id IN ({})", sql_list(ids))).await?;
        for id in ids {
            match found.iter().find(|r| text_of(r, "id") == *id) {
                None => report.failures.push(ItemFailure {
                    item: id.clone(),
                    reason: "no such review item".into(),
                }),
                Some(r) if r["status"] != "pending" => report.failures.push(ItemFailure {
                    item: id.clone(),
                    reason: format!("already {}", text_of(r, "status")),
                }),
                Some(_) => {}
            }
        }
        found
            .into_iter()
            .filter(|r| r["status"] == "pending")
            .collect()
    };
    // Approved merges: the text is written now, by integrate.merge.
    let mut merged = BTreeMap::new();
    let mut llm_usage = None;
    if let Some(llm_args) = llm_args {
        let merges: Vec<&Map<String, Value>> = chosen
            .iter()
            .filter(|r| r["classification"] == "MERGE")
            .collect();
        if !merges.is_empty() {
            let llm = app.llm(llm_args).await?;
            let now_text = format_timestamp(now_micros);
            let work: Vec<Item> = merges
                .iter()
                .map(|r| {
                    let fact: Map<String, Value> =
                        serde_json::from_str(&text_of(r, "fact")).unwrap_or_default();
                    let candidate = MemoryView {
                        id: text_of(r, "candidate_id"),
                        kind: "fact".into(),
                        created_at: String::new(),
                        happens_at: None,
                        text: text_of(r, "candidate_text"),
                        dates: Vec::new(),
                        cluster: None,
                    };
                    Item {
                        custom_id: text_of(r, "id"),
                        input: TaskInput {
                            task: Task::IntegrateMerge,
                            memories: vec![candidate, MemoryView::from_row(&fact)],
                            proposal: None,
                            now: now_text.clone(),
                            question: None,
                        },
                    }
                })
                .collect();
            let outcomes = llm.run(work.clone()).await;
            for (item, outcome) in work.iter().zip(&outcomes) {
                if let (None, Some(Reply::Merge(m))) = (&outcome.failure, &outcome.reply)
                    && !m.text.trim().is_empty()
                {
                    merged.insert(item.custom_id.clone(), m.text.trim().to_string());
                }
            }
            llm_usage = Some(llm.usage(&outcomes));
        }
    }
    let settled = if ctx.dry_run {
        0
    } else {
        settle(
            &ctx,
            &embedder,
            &run_id,
            &chosen,
            verdict,
            &merged,
            now_micros,
            JOB,
            &mut report.failures,
        )
        .await?
    };
    report.count(verdict.status(), settled);
    report.llm = llm_usage;
    log.finish(&ctx, &mut report).await?;
    report.print(app.json, out)?;
    Ok(report.exit_status())
}
