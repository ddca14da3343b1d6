//! `memlife sessions`: seed 004's session consolidator. A session (the memories sharing a
//! `session_id`) that has ended (no new memory for `[sessions] gap_minutes`, 30) and has no
//! narrative yet is told as one `narrative` memory through the LLM layer (`session.narrate`:
//! summary, key interactions, emotional arc, unresolved threads; role `fast`), or by the
//! offline judge's extractive narrative when no provider gives a valid reply (counted, and the
//! reason noted). The narrative holds the session's memories in `consolidates_memory_ids`:
//! that is their mark; they are never deleted or archived here (prune later archives a
//! narrative's episodes instead of deleting them). The report gives the compression: memories
//! told per narrative (seed 004 aims at 10:1).
//!
//! One narrative per session: its id is derived from the user and the session, so a rerun
//! finds it written and tells nothing twice. Writes, each one Lance commit: the NARRATE audit
//! rows (the narrative as it will be written), then the narratives with their vectors. A run
//! killed between the two leaves its sessions untold, and the next run tells them (the audit
//! row is keyed by the narrative, so it is written once).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, anyhow, bail};
use serde_json::json;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::embedders::{Embedded, EmbedderArgs};
use crate::llm::offline::narrate as offline_narrate;
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{CallMode, Item, LlmArgs};
use crate::logic::sessions::{
    EndedSession, NarrativeParts, SessionMemory, compression, ended_sessions, narrative_id,
    narrative_row,
};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::MEMORIES;
use crate::model::typed::MemoryRow;
use crate::store::audit::AuditRow;

/// Sessions that ended, told as narratives (LLM `session.narrate`, offline fallback).
#[derive(clap::Args, Debug, Clone)]
pub struct SessionsArgs {
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

impl Job for SessionsArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

fn view(m: &SessionMemory) -> MemoryView {
    MemoryView {
        id: m.id.clone(),
        kind: m.kind.clone(),
        created_at: format_timestamp(m.created_at),
        happens_at: None,
        text: m.text.clone(),
        dates: Vec::new(),
        cluster: None,
    }
}

fn parts_of(r: &crate::llm::tasks::NarrateReply) -> NarrativeParts {
    NarrativeParts {
        summary: r.summary.clone(),
        key_interactions: r.key_interactions.clone(),
        emotional_arc: r.emotional_arc.clone(),
        unresolved_threads: r.unresolved_threads.clone(),
    }
}

/// Each session's narrative parts: the LLM layer's, or the offline judge's where it gave no
/// valid reply (noted). With the run's usage.
async fn tell(
    ctx: &JobCtx<'_>,
    args: &SessionsArgs,
    ended: &[EndedSession<'_>],
    report: &mut JobReport,
    counts: &mut BTreeMap<String, u64>,
) -> Result<Vec<NarrativeParts>> {
    let llm = ctx.app.llm(&args.llm).await?;
    if llm.mode == CallMode::Batch {
        bail!("sessions runs online (--mode online): its Batch API round is not built yet");
    }
    let now = format_timestamp(ctx.now.timestamp_micros());
    let items: Vec<Item> = ended
        .iter()
        .map(|s| Item {
            custom_id: s.narrative_id.clone(),
            input: TaskInput {
                task: Task::SessionNarrate,
                memories: s.memories.iter().map(|m| view(m)).collect(),
                proposal: None,
                now: now.clone(),
                question: None,
            },
        })
        .collect();
    let outcomes = llm.run(items.clone()).await;
    report.llm = Some(llm.usage(&outcomes));
    let mut out = Vec::with_capacity(ended.len());
    let mut fallbacks = 0;
    for ((s, item), outcome) in ended.iter().zip(&items).zip(&outcomes) {
        out.push(match (&outcome.reply, &outcome.failure) {
            (Some(Reply::Narrate(r)), None) => parts_of(r),
            (_, failure) => {
                fallbacks += 1;
                report.notes.push(format!(
                    "session {} of {}: offline narrative ({})",
                    s.session,
                    s.user,
                    failure.as_deref().unwrap_or("no reply")
                ));
                parts_of(&offline_narrate(&item.input.memories))
            }
        });
    }
    counts.insert("offline_fallbacks".into(), fallbacks);
    Ok(out)
}

/// The narratives logged, then embedded and written (see the module for the order).
async fn write(
    ctx: &JobCtx<'_>,
    args: &SessionsArgs,
    run_id: &str,
    rows: &[MemoryRow],
    now: i64,
) -> Result<()> {
    let mut audit = Vec::with_capacity(rows.len());
    for row in rows {
        let mut a = AuditRow::new(run_id, "NARRATE", &row.id, now);
        a.user_id = Some(row.user_id.clone());
        a.target_id = Some(row.id.clone());
        a.source_ids = row.consolidates_memory_ids.clone();
        a.after_state = Some(json!({"memory": row.to_json()}).to_string());
        audit.push(a);
    }
    ctx.store.write_audit(&audit).await?;
    crate::crash::point("sessions.after-audit");
    let dim = ctx.store.embedding_dim();
    let embedder = ctx.app.embedder(&args.embedder, dim, 16).await?;
    let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
    let mut vectors = Vec::with_capacity(rows.len());
    let mut written = Vec::with_capacity(rows.len());
    for (row, e) in rows.iter().zip(embedder.embed(&texts).await?) {
        let Embedded::Vector { values, .. } = e else {
            return Err(anyhow!("the embedder refused the narrative {}", row.id));
        };
        vectors.push(Some(values));
        written.push(MemoryRow {
            embedding_model: Some(embedder.model_name().to_string()),
            ..row.clone()
        });
    }
    ctx.store.upsert_memories(&written, &vectors, now).await?;
    Ok(())
}

pub async fn run(ctx: &JobCtx<'_>, args: &SessionsArgs) -> Result<JobReport> {
    let config = ctx.app.config().await?;
    let p = &config.sessions;
    let now = ctx.now.timestamp_micros();
    let log = RunLog::start(ctx, JobName::Sessions.as_str(), &json!({"sessions": p})).await?;
    let mut report = JobReport::new(JobName::Sessions.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let filter = ctx.user_filter_and("session_id IS NOT NULL");
    let memories: Vec<SessionMemory> = ctx.store.scan_rows(MEMORIES.name, Some(&filter)).await?;
    let sessions: BTreeSet<String> = memories
        .iter()
        .filter_map(|m| m.session_id.as_deref().map(|s| narrative_id(&m.user_id, s)))
        .collect();
    let ids: Vec<String> = sessions.into_iter().collect();
    let told = ctx.store.ids_present(MEMORIES.name, &ids, None).await?;
    counts.insert("sessions".into(), ids.len() as u64);
    counts.insert("sessions_told_before".into(), told.len() as u64);
    let ended = ended_sessions(&memories, &told, p, now);
    counts.insert("sessions_ended".into(), ended.len() as u64);
    let memories_told: usize = ended.iter().map(|s| s.memories.len()).sum();
    counts.insert("memories_told".into(), memories_told as u64);
    let left_out: usize = ended.iter().map(|s| s.left_out).sum();
    if left_out > 0 {
        counts.insert("memories_left_out".into(), left_out as u64);
    }
    if !ended.is_empty() {
        report.notes.push(format!(
            "compression {:.1}:1 ({memories_told} memories told in {} narratives)",
            compression(&ended),
            ended.len()
        ));
    }
    let mut rows = Vec::new();
    if !ended.is_empty() {
        let parts = tell(ctx, args, &ended, &mut report, &mut counts).await?;
        for (s, parts) in ended.iter().zip(&parts) {
            if parts.summary.trim().is_empty() {
                report.notes.push(format!(
                    "session {} of {}: nothing to tell",
                    s.session, s.user
                ));
                continue;
            }
            rows.push(narrative_row(s, parts, now));
        }
    }
    counts.insert("narratives".into(), rows.len() as u64);
    if ctx.dry_run {
        for row in rows.iter().take(20) {
            report
                .notes
                .push(format!("{} ({}): {}", row.id, row.user_id, row.text));
        }
    } else {
        if !rows.is_empty() {
            write(ctx, args, log.run_id(), &rows, now).await?;
        }
    }
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
