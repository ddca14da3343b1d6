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

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::app::App;
use crate::embedders::EmbedderArgs;
use crate::exit::ExitStatus;
use crate::jobs::integrate::resume;
use crate::jobs::review_queue::ReviewItem;
use crate::jobs::review_queue::{Verdict, fact_row, queued, settle};
use crate::jobs::{ItemFailure, JobReport, JobScope, RunLog};
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{Item, LlmArgs};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::store::{sql_list, sql_string, sql_timestamp};

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
        now: Option<Clock>,
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
        now: Option<Clock>,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Reject every pending item past its expiry.
    Expire {
        #[arg(long)]
        now: Option<Clock>,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
}

fn print_list(rows: &[ReviewItem], json: bool, out: &mut dyn Write) -> Result<()> {
    if json {
        let rows: Vec<Value> = rows.iter().map(ReviewItem::to_json).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    if rows.is_empty() {
        writeln!(out, "review queue: nothing")?;
        return Ok(());
    }
    for r in rows {
        writeln!(
            out,
            "{}  {}  {} ({:.2})  {}  expires {}\n  new:      {}\n  existing: {} {}\n  why:      {}",
            r.id,
            r.user_id,
            r.classification,
            r.confidence,
            r.status,
            r.expires_at.map(format_timestamp).unwrap_or_default(),
            r.fact_text(),
            r.candidate_id,
            r.candidate_text,
            r.reasoning.as_deref().unwrap_or(""),
        )?;
    }
    Ok(())
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
            let mut rows = queued(&ctx.store, &filter).await?;
            rows.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
            print_list(&rows, app.json, out)?;
            Ok(ExitStatus::Success)
        }
        ReviewCommand::Approve {
            ids,
            now,
            llm,
            embedder,
        } => apply_verdict(app, ids, *now, Verdict::Approve, Some(llm), embedder, out).await,
        ReviewCommand::Reject { ids, now, embedder } => {
            apply_verdict(app, ids, *now, Verdict::Reject, None, embedder, out).await
        }
        ReviewCommand::Expire { now, embedder } => {
            apply_verdict(app, &[], *now, Verdict::Expire, None, embedder, out).await
        }
    }
}

async fn apply_verdict(
    app: &App,
    ids: &[String],
    now: Option<Clock>,
    verdict: Verdict,
    llm_args: Option<&LlmArgs>,
    embedder_args: &EmbedderArgs,
    out: &mut dyn Write,
) -> Result<ExitStatus> {
    let now = Clock::or_now(now);
    let now_micros = now.micros();
    let ctx = app.job_ctx(&JobScope::default(), Some(now)).await?;
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
        queued(
            &ctx.store,
            &format!(
                "status = 'pending' AND expires_at <= {}",
                sql_timestamp(now_micros)
            ),
        )
        .await?
    } else {
        let found = queued(&ctx.store, &format!("id IN ({})", sql_list(ids))).await?;
        for id in ids {
            match found.iter().find(|r| r.id == *id) {
                None => report.failures.push(ItemFailure {
                    item: id.clone(),
                    reason: "no such review item".into(),
                }),
                Some(r) if r.status != "pending" => report.failures.push(ItemFailure {
                    item: id.clone(),
                    reason: format!("already {}", r.status),
                }),
                Some(_) => {}
            }
        }
        found
            .into_iter()
            .filter(|r| r.status == "pending")
            .collect()
    };
    // Approved merges: the text is written now, by integrate.merge.
    let mut merged = BTreeMap::new();
    let mut llm_usage = None;
    if let Some(llm_args) = llm_args {
        let merges: Vec<&ReviewItem> = chosen
            .iter()
            .filter(|r| r.classification == "MERGE")
            .collect();
        if !merges.is_empty() {
            let llm = app.llm(llm_args).await?;
            let now_text = format_timestamp(now_micros);
            let dim = ctx.store.embedding_dim();
            let work: Vec<Item> = merges
                .iter()
                .map(|r| {
                    let fact = fact_row(r, dim, now_micros)?;
                    let candidate = MemoryView {
                        id: r.candidate_id.clone(),
                        kind: "fact".into(),
                        created_at: String::new(),
                        happens_at: None,
                        text: r.candidate_text.clone(),
                        dates: Vec::new(),
                        cluster: None,
                    };
                    Ok(Item {
                        custom_id: r.id.clone(),
                        input: TaskInput {
                            task: Task::IntegrateMerge,
                            memories: vec![candidate, MemoryView::from_memory(&fact)],
                            proposal: None,
                            now: now_text.clone(),
                            question: None,
                        },
                    })
                })
                .collect::<Result<_>>()?;
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
