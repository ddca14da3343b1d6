//! `memlife batches poll|retry|cleanup|list`: the scheduled side of the Batch API path
//! (seed 000: poll every minute, retry every six hours, clean up daily). Each command that
//! changes something writes a `runs` row; a poll that finds nothing to do writes none, so a
//! cron entry every minute does not flood the table.

use std::io::Write;

use anyhow::Result;

use crate::app::App;
use crate::config::Config;
use crate::embedders::{Embedder, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::jobs::JobCtx;
use crate::jobs::{ItemFailure, JobName, JobReport, JobScope, RunLog};
use crate::llm::batch::{self, Applier, ApplyEnv, PollOptions};
use crate::llm::{CallMode, JudgeKind, Llm, LlmArgs};
use crate::store::Store;

/// OpenAI Batch API submissions: apply finished ones, resubmit failed ones, clean up.
#[derive(clap::Args, Debug)]
pub struct BatchesArgs {
    #[command(subcommand)]
    pub which: BatchesCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum BatchesCommand {
    /// Check running batches; apply finished ones exactly once (cron: every minute).
    Poll {
        /// Take over a claim older than this (its poller is presumed dead); default
        /// llm.apply_lease_secs of the config.
        #[arg(long)]
        lease_secs: Option<u64>,
        /// The embedder of jobs whose results carry new texts (consolidate, refine).
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Resubmit failed or expired batches, and submissions stuck before reaching the provider.
    Retry {
        #[arg(long, default_value_t = 3600)]
        stuck_after_secs: u64,
    },
    /// Delete applied and failed batch records (and their remote files) older than N days;
    /// default llm.batch_retention_days of the config.
    Cleanup {
        #[arg(long)]
        older_than_days: Option<u32>,
    },
    /// The batch records, newest last.
    List,
}

/// The names these commands' runs carry in `runs.job` (and their locks).
pub(crate) const POLL: &str = "batches.poll";
const RETRY: &str = "batches.retry";
const CLEANUP: &str = "batches.cleanup";

/// The applier of the job that submitted a batch, by the name recorded with it.
fn applier_of(job: &str) -> Option<Box<dyn Applier>> {
    JobName::parse(job).and_then(JobName::applier)
}

fn providers(config: &Config) -> Result<Llm> {
    Llm::new(
        config,
        &LlmArgs {
            judge: Some(JudgeKind::Providers),
            mode: Some(CallMode::Online),
        },
    )
}

pub async fn run(app: &App, args: &BatchesArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let ctx = app.job_ctx(&JobScope::default(), None).await?;
    match &args.which {
        BatchesCommand::Poll {
            lease_secs,
            embedder,
        } => poll(app, &ctx, *lease_secs, embedder, out).await,
        BatchesCommand::Retry { stuck_after_secs } => {
            retry(app, &ctx, *stuck_after_secs, out).await
        }
        BatchesCommand::Cleanup { older_than_days } => {
            cleanup(app, &ctx, *older_than_days, out).await
        }
        BatchesCommand::List => list(&ctx.store, app.json, out).await,
    }
}

/// `batches poll`: checks running batches and applies finished ones exactly once.
async fn poll(
    app: &App,
    ctx: &JobCtx<'_>,
    lease_secs: Option<u64>,
    embedder: &EmbedderArgs,
    out: &mut dyn Write,
) -> Result<ExitStatus> {
    let (json, config, store) = (app.json, app.config().await?, &ctx.store);
    let pending = batch::records(store, "status IN ('submitted', 'ready', 'applying')").await?;
    let mut report = JobReport::new(POLL, ctx);
    if pending.is_empty() {
        // A poll killed after its last batch was applied left a `running` row.
        RunLog::reap_abandoned(ctx, POLL).await?;
        report.notes.push("no batch to poll".into());
        report.print(json, out)?;
        return Ok(ExitStatus::Success);
    }
    let llm = providers(config)?;
    let log = RunLog::start(ctx, POLL, &serde_json::json!({"lease_secs": lease_secs})).await?;
    let options = PollOptions {
        lease_secs: lease_secs.unwrap_or(config.llm.apply_lease_secs),
    };
    let dim = store.embedding_dim();
    let make_embedder = || Embedder::from_args(embedder, &config.embedder, dim, 16);
    let env = ApplyEnv {
        store,
        llm: &llm,
        embedder: &make_embedder,
    };
    let polled = batch::poll(&env, &applier_of, &options).await?;
    for (name, value) in [
        ("checked", polled.checked),
        ("still_running", polled.still_running),
        ("became_ready", polled.became_ready),
        ("failed_remotely", polled.failed_remotely),
        ("applied", polled.applied),
        (
            "skipped_claimed_elsewhere",
            polled.skipped_claimed_elsewhere,
        ),
        ("items_applied", polled.items_applied),
        ("items_failed", polled.items_failed),
    ] {
        report.count(name, value);
    }
    for (k, v) in &polled.counts {
        report.count(k, *v);
    }
    for error in &polled.errors {
        report.failures.push(ItemFailure {
            item: "batch".into(),
            reason: error.clone(),
        });
    }
    if polled.applied > 0 {
        report.llm = Some(polled.usage);
    }
    log.finish(ctx, &mut report).await?;
    report.print(json, out)?;
    Ok(report.exit_status())
}

/// `batches retry`: resubmits failed, expired and stuck batches.
async fn retry(
    app: &App,
    ctx: &JobCtx<'_>,
    stuck_after_secs: u64,
    out: &mut dyn Write,
) -> Result<ExitStatus> {
    let (json, config, store) = (app.json, app.config().await?, &ctx.store);
    let llm = providers(config)?;
    let log = RunLog::start(
        ctx,
        RETRY,
        &serde_json::json!({"stuck_after_secs": stuck_after_secs}),
    )
    .await?;
    let mut report = JobReport::new(RETRY, ctx);
    let resubmitted = batch::retry(store, &llm, stuck_after_secs).await?;
    report.count("resubmitted", resubmitted.len() as u64);
    for r in &resubmitted {
        report.notes.push(format!(
            "batch {} resubmitted as {} (attempt {})",
            r.batch_key,
            r.remote_batch_id.as_deref().unwrap_or("?"),
            r.attempts
        ));
    }
    let still_failed = batch::records(store, "status = 'failed'").await?;
    for r in still_failed {
        report.failures.push(ItemFailure {
            item: r.batch_key,
            reason: r.error.unwrap_or_default(),
        });
    }
    log.finish(ctx, &mut report).await?;
    report.print(json, out)?;
    Ok(report.exit_status())
}

/// `batches cleanup`: deletes old applied and failed batch records and their remote files.
async fn cleanup(
    app: &App,
    ctx: &JobCtx<'_>,
    older_than_days: Option<u32>,
    out: &mut dyn Write,
) -> Result<ExitStatus> {
    let (json, config, store) = (app.json, app.config().await?, &ctx.store);
    let days = older_than_days.unwrap_or(config.llm.batch_retention_days);
    let log = RunLog::start(ctx, CLEANUP, &serde_json::json!({"older_than_days": days})).await?;
    let mut report = JobReport::new(CLEANUP, ctx);
    let llm = if config.roles.is_empty() {
        Llm::new(config, &LlmArgs::default())?
    } else {
        providers(config)?
    };
    let (records, files) = batch::cleanup(store, &llm, log.run_id(), days).await?;
    report.count("records_deleted", records);
    report.count("remote_files_deleted", files);
    log.finish(ctx, &mut report).await?;
    report.print(json, out)?;
    Ok(report.exit_status())
}

/// `batches list`: the batch records, newest last (writes nothing).
async fn list(store: &Store, json: bool, out: &mut dyn Write) -> Result<ExitStatus> {
    let records = batch::records(store, "batch_key IS NOT NULL").await?;
    if json {
        let rows: Vec<serde_json::Value> = records
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.remove("items");
                }
                v
            })
            .collect();
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
        return Ok(ExitStatus::Success);
    }
    writeln!(
        out,
        "{:<36}  {:<6} {:<10} {:<12} {:>5}  {:<9} updated_at",
        "batch_key", "job", "provider", "status", "items", "attempts"
    )?;
    for r in &records {
        writeln!(
            out,
            "{:<36}  {:<6} {:<10} {:<12} {:>5}  {:<9} {}",
            r.batch_key,
            r.job,
            r.provider,
            r.status,
            r.request_count,
            r.attempts,
            crate::model::encoding::format_timestamp(r.updated_at)
        )?;
    }
    if records.is_empty() {
        writeln!(out, "(no batch records)")?;
    }
    Ok(ExitStatus::Success)
}
