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
//! With `--mode batch` the sessions' requests go to the Batch API (one batch per user) and
//! `memlife batches poll` writes their narratives through `SessionsApplier`, at the clock of
//! the run that submitted them; a session whose memories wait in a batch is not submitted
//! again.
//!
//! One narrative per session: its id is derived from the user and the session, so a rerun
//! finds it written and tells nothing twice. Writes, each one Lance commit: the NARRATE audit
//! rows (the narrative as it will be written), then the narratives with their vectors. A run
//! killed between the two leaves its sessions untold, and the next run tells them (the audit
//! row is keyed by the narrative, so it is written once).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde_json::json;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::embedders::{Embedder, EmbedderArgs};
use crate::llm::batch::{Applier, ApplyEnv, BatchRecord};
use crate::llm::offline::narrate as offline_narrate;
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{CallMode, Item, LlmArgs, Outcome};
use crate::logic::sessions::{
    EndedSession, NarrativeParts, SessionMemory, compression, ended_sessions, narrative_id,
    narrative_row,
};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::MEMORIES;
use crate::model::typed::MemoryRow;
use crate::store::audit::AuditRow;
use crate::store::{Store, sql_list};

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

    fn applier() -> Option<Box<dyn Applier>> {
        Some(Box::new(SessionsApplier))
    }
}

fn view(m: &SessionMemory) -> MemoryView {
    MemoryView::of(&m.id, &m.kind, m.created_at, &m.text)
}

fn parts_of(r: &crate::llm::tasks::NarrateReply) -> NarrativeParts {
    NarrativeParts {
        summary: r.summary.clone(),
        key_interactions: r.key_interactions.clone(),
        emotional_arc: r.emotional_arc.clone(),
        unresolved_threads: r.unresolved_threads.clone(),
    }
}

/// The request telling session `s`, at the run's clock `now`.
fn item_of(s: &EndedSession<'_>, now: &str) -> Item {
    Item {
        custom_id: s.narrative_id.clone(),
        input: TaskInput {
            task: Task::SessionNarrate,
            memories: s.memories.iter().map(|m| view(m)).collect(),
            proposal: None,
            now: now.to_string(),
            question: None,
        },
    }
}

/// A session's narrative parts from the LLM layer's outcome, or the offline judge's
/// extractive narrative where it gave no valid reply (or an empty summary), with the reason.
fn parts_from(item: &Item, outcome: &Outcome) -> (NarrativeParts, Option<String>) {
    let why = match (&outcome.reply, &outcome.failure) {
        (Some(Reply::Narrate(r)), None) if !r.summary.trim().is_empty() => {
            return (parts_of(r), None);
        }
        (_, Some(failure)) => failure.clone(),
        (Some(_), None) => "an empty summary".to_string(),
        (None, None) => "no reply".to_string(),
    };
    (parts_of(&offline_narrate(&item.input.memories)), Some(why))
}

/// Each session's narrative parts: the LLM layer's, or the offline judge's where it gave no
/// valid reply (noted). With the run's usage.
async fn tell(
    llm: &crate::llm::Llm,
    items: &[Item],
    ended: &[EndedSession<'_>],
    report: &mut JobReport,
    counts: &mut BTreeMap<String, u64>,
) -> Vec<NarrativeParts> {
    let outcomes = llm.run(items.to_vec()).await;
    report.llm = Some(llm.usage(&outcomes));
    let mut out = Vec::with_capacity(ended.len());
    let mut fallbacks = 0;
    for ((s, item), outcome) in ended.iter().zip(items).zip(&outcomes) {
        let (parts, why) = parts_from(item, outcome);
        if let Some(why) = why {
            fallbacks += 1;
            report.notes.push(format!(
                "session {} of {}: offline narrative ({why})",
                s.session, s.user
            ));
        }
        out.push(parts);
    }
    counts.insert("offline_fallbacks".into(), fallbacks);
    out
}

/// The narratives logged, then embedded and written (see the module for the order).
async fn write(
    store: &Store,
    embedder: &Embedder,
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
    store.write_audit(&audit).await?;
    crate::crash::point("sessions.after-audit");
    let rows: Vec<&MemoryRow> = rows.iter().collect();
    super::embed_and_write(store, embedder, &rows, now).await
}

/// Applies `sessions` batches for `batches poll`: each item's narrative, from the provider's
/// reply or the offline judge's, told from the session's memories as they are now and written
/// as an online run writes it, at the submitting run's clock. A narrative already written (an
/// earlier attempt at the same batch) is not written again.
pub struct SessionsApplier;

#[async_trait::async_trait]
impl Applier for SessionsApplier {
    async fn apply(
        &self,
        env: &ApplyEnv<'_>,
        record: &BatchRecord,
        items: &[Item],
        outcomes: &[Outcome],
    ) -> Result<BTreeMap<String, u64>> {
        let store = env.store;
        let now = super::batch_clock(record, items)?;
        let ids: Vec<String> = items.iter().map(|i| i.custom_id.clone()).collect();
        let written = store.ids_present(MEMORIES.name, &ids, None).await?;
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        counts.insert("narratives_written_before".into(), written.len() as u64);
        let memory_ids: Vec<String> = items
            .iter()
            .filter(|i| !written.contains(&i.custom_id))
            .flat_map(|i| i.input.memories.iter().map(|m| m.id.clone()))
            .collect();
        if memory_ids.is_empty() {
            return Ok(counts);
        }
        let filter = format!("id IN ({})", sql_list(&memory_ids));
        let memories: Vec<SessionMemory> = store.scan_rows(MEMORIES.name, Some(&filter)).await?;
        let by_id: BTreeMap<&str, &SessionMemory> =
            memories.iter().map(|m| (m.id.as_str(), m)).collect();
        let mut rows = Vec::new();
        let mut gone = Vec::new();
        for (item, outcome) in items.iter().zip(outcomes) {
            if written.contains(&item.custom_id) {
                continue;
            }
            // The memories still in the store, in the order they were told.
            let told: Vec<&SessionMemory> = item
                .input
                .memories
                .iter()
                .filter_map(|m| by_id.get(m.id.as_str()).copied())
                .collect();
            let Some(first) = told.first() else {
                // Logged, so the batch's results are all on record (`check`): told of nothing.
                let mut a = AuditRow::new(&record.run_id, "NARRATE", &item.custom_id, now);
                a.classification = Some("GONE".into());
                a.source_ids = item.input.memories.iter().map(|m| m.id.clone()).collect();
                a.reasoning = Some("no memory of the session is in the store any more".into());
                gone.push(a);
                continue;
            };
            let session = EndedSession {
                user: &first.user_id,
                session: first.session_id.as_deref().unwrap_or_default(),
                narrative_id: item.custom_id.clone(),
                memories: told.clone(),
                left_out: 0,
            };
            let (parts, why) = parts_from(item, outcome);
            if why.is_some() {
                *counts.entry("offline_fallbacks".into()).or_default() += 1;
            }
            rows.push(narrative_row(&session, &parts, now));
        }
        if !gone.is_empty() {
            counts.insert("sessions_gone".into(), gone.len() as u64);
            store.write_audit(&gone).await?;
        }
        if !rows.is_empty() {
            let embedder = (env.embedder)()?;
            write(store, &embedder, &record.run_id, &rows, now).await?;
        }
        counts.insert("narratives".into(), rows.len() as u64);
        Ok(counts)
    }

    fn result_keys(&self, record: &BatchRecord, items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|item| AuditRow::new(&record.run_id, "NARRATE", &item.custom_id, 0).id)
            .collect()
    }
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
    let llm = ctx.app.llm(&args.llm).await?;
    let now_text = format_timestamp(now);
    if llm.mode == CallMode::Batch {
        let requests = ended
            .iter()
            .map(|s| (s.user.to_string(), item_of(s, &now_text)))
            .collect();
        log.submit_unless_pending(
            ctx,
            &llm,
            (
                Task::SessionNarrate,
                requests,
                "sessions",
                "sessions_in_pending_batches",
            ),
            &mut counts,
            &mut report.notes,
        )
        .await?;
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }
    let mut rows = Vec::new();
    if !ended.is_empty() {
        let items: Vec<Item> = ended.iter().map(|s| item_of(s, &now_text)).collect();
        let parts = tell(&llm, &items, &ended, &mut report, &mut counts).await;
        for (s, parts) in ended.iter().zip(&parts) {
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
            let embedder = ctx
                .app
                .embedder(&args.embedder, ctx.store.embedding_dim(), 16)
                .await?;
            write(&ctx.store, &embedder, log.run_id(), &rows, now).await?;
        }
    }
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
