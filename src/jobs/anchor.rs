//! `memlife anchor`: seed 004's temporal continuity anchor. Per user, a profile anchor (an
//! embedding in the `anchors` table): its origin is the mean of the user's narratives when
//! first computed; each run moves the live anchor toward the mean of the narratives created
//! since (`[anchor] update_weight_new`, 0.1: 90% current, 10% new) and measures its drift from
//! the origin as cosine distance (`logic::anchor`). Drift above `drift_warning` (0.2) or
//! `drift_critical` (0.4) is logged as an ANCHOR_DRIFT event when it crosses into that level;
//! the report names the users above each level.
//! The origin is never moved by a run: `--reset-origin --user U` (the manual approval seed
//! 004 asks for) sets it anew from all of the user's narratives, logged (classification
//! RESET). It runs in `nightly` after consolidation, as seed 004 places it.
//!
//! Writes, each one Lance commit: the ANCHOR audit rows (the anchor as it will be written,
//! keyed by user and its newest narrative, so a rerun writes the same rows) with the drift
//! events, then the anchors. A run killed between the two leaves the anchors as they were,
//! and the next run takes the same step.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use serde_json::json;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::logic::anchor::{AnchorStep, step};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{ANCHORS, MEMORIES};
use crate::model::typed::{AnchorRow, anchor_batch};
use crate::store::audit::AuditRow;
use crate::store::sql_timestamp;

/// Each user's profile anchor moved toward their new narratives; drift from the origin
/// measured and logged.
#[derive(clap::Args, Debug, Clone)]
pub struct AnchorArgs {
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    /// Set the user's origin anew from all their narratives (needs --user): the approval of
    /// a drift, or a move to another embedding model.
    #[arg(long, requires = "user")]
    pub reset_origin: bool,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for AnchorArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

/// What anchor reads of a narrative.
#[derive(serde::Deserialize)]
struct Narrative {
    user_id: String,
    created_at: i64,
    embedding_model: Option<String>,
}

/// The stored anchors by user, with their (origin, live) vectors.
async fn anchors(ctx: &JobCtx<'_>) -> Result<BTreeMap<String, (AnchorRow, Vec<f32>, Vec<f32>)>> {
    let dim = ctx.store.embedding_dim();
    let mut columns = crate::model::typed::columns_of::<AnchorRow>();
    columns.extend(["origin".to_string(), "live".to_string()]);
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let filter = ctx.user_filter_and("origin IS NOT NULL AND live IS NOT NULL");
    let batches = ctx
        .store
        .scan_columns(ANCHORS.name, Some(&filter), &columns)
        .await?;
    let rows: Vec<AnchorRow> = crate::model::typed::rows_of(ANCHORS.name, &batches)?;
    let origins = crate::model::typed::vectors_of(ANCHORS.name, &batches, "origin", dim)?;
    let lives = crate::model::typed::vectors_of(ANCHORS.name, &batches, "live", dim)?;
    Ok(rows
        .into_iter()
        .zip(origins.chunks_exact(dim).zip(lives.chunks_exact(dim)))
        .map(|(row, (o, l))| (row.user_id.clone(), (row, o.to_vec(), l.to_vec())))
        .collect())
}

/// One user's planned anchor, its audit rows, and what the report says of it.
struct Planned {
    row: (AnchorRow, Vec<f32>, Vec<f32>),
    audit: Vec<AuditRow>,
    step: AnchorStep,
}

#[allow(clippy::too_many_arguments)]
fn plan_user(
    run_id: &str,
    user: &str,
    stored: Option<&(AnchorRow, Vec<f32>, Vec<f32>)>,
    model: &str,
    new: (&[f32], usize, i64),
    p: &crate::logic::anchor::AnchorParams,
    reset: bool,
    now: i64,
) -> Option<Planned> {
    let (vectors, count, newest) = new;
    let dim = vectors.len() / count.max(1);
    let previous = stored.map(|(_, o, l)| (o.as_slice(), l.as_slice()));
    let s = step(if reset { None } else { previous }, vectors, dim, p)?;
    let (origin_at, narratives) = match stored {
        Some((row, _, _)) if !reset => (row.origin_at, row.narratives + count as i64),
        _ => (now, count as i64),
    };
    let row = AnchorRow {
        user_id: user.to_string(),
        embedding_model: model.to_string(),
        origin_at,
        updated_at: now,
        drift: s.drift,
        narratives,
        last_narrative_at: newest,
    };
    let key = format!("{user}|{}|{}", format_timestamp(newest), reset);
    let mut a = AuditRow::new(run_id, "ANCHOR", &key, now);
    a.user_id = Some(user.to_string());
    a.target_id = Some(user.to_string());
    a.classification = Some(
        match (reset, s.first) {
            (true, _) => "RESET",
            (false, true) => "ORIGIN",
            (false, false) => "UPDATE",
        }
        .to_string(),
    );
    a.confidence = Some(s.drift);
    a.before_state = stored.map(|(r, _, _)| serde_json::to_string(r).unwrap_or_default());
    a.after_state = Some(json!({"anchor": row, "moved": s.moved}).to_string());
    let mut audit = vec![a];
    // An event is logged when the drift crosses into a higher level, not every run it stays.
    let before = stored
        .filter(|_| !reset)
        .and_then(|(r, _, _)| p.event(r.drift));
    let level = |e: Option<&str>| match e {
        Some("critical") => 2,
        Some(_) => 1,
        None => 0,
    };
    if let Some(event) = s.event.filter(|e| level(Some(e)) > level(before)) {
        let mut e = AuditRow::new(run_id, "ANCHOR_DRIFT", &key, now);
        e.user_id = Some(user.to_string());
        e.target_id = Some(user.to_string());
        e.classification = Some(event.to_string());
        e.confidence = Some(s.drift);
        e.reasoning = Some(format!(
            "the anchor drifted {:.3} from its origin of {} ({} narratives since)",
            s.drift,
            format_timestamp(origin_at),
            count
        ));
        audit.push(e);
    }
    Some(Planned {
        row: (row, s.origin.clone(), s.live.clone()),
        audit,
        step: s,
    })
}

pub async fn run(ctx: &JobCtx<'_>, args: &AnchorArgs) -> Result<JobReport> {
    let config = ctx.app.config().await?;
    let p = &config.anchor;
    let now = ctx.now.timestamp_micros();
    let log = RunLog::start(
        ctx,
        JobName::Anchor.as_str(),
        &json!({"anchor": p, "reset_origin": args.reset_origin}),
    )
    .await?;
    let mut report = JobReport::new(JobName::Anchor.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let dim = ctx.store.embedding_dim();
    let stored = anchors(ctx).await?;
    let filter = ctx.user_filter_and(&format!(
        "kind = 'narrative' AND archived_at IS NULL AND created_at <= {}",
        sql_timestamp(now)
    ));
    let (narratives, vectors) = ctx
        .store
        .scan_rows_with_vectors::<Narrative>(MEMORIES.name, &filter, "embedding")
        .await?;
    let mut by_user: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, n) in narratives.iter().enumerate() {
        by_user.entry(n.user_id.as_str()).or_default().push(i);
    }
    if args.reset_origin && by_user.is_empty() {
        bail!("--reset-origin: the user has no embedded narrative to set the origin from");
    }
    let mut planned = Vec::new();
    for (user, rows) in &by_user {
        let stored_row = stored.get(*user);
        let reset = args.reset_origin;
        let model = match stored_row {
            Some((row, _, _)) if !reset => row.embedding_model.clone(),
            _ => {
                super::main_model(
                    rows.iter()
                        .map(|&i| narratives[i].embedding_model.as_deref()),
                )
                .0
            }
        };
        let since = match stored_row {
            Some((row, _, _)) if !reset => row.last_narrative_at,
            _ => i64::MIN,
        };
        let mut other_model = 0;
        let mut flat = Vec::new();
        let mut newest = since;
        let mut count = 0;
        for &i in rows {
            let n = &narratives[i];
            if n.created_at <= since {
                continue;
            }
            if n.embedding_model.as_deref().unwrap_or("") != model {
                other_model += 1;
                continue;
            }
            flat.extend_from_slice(&vectors[i * dim..(i + 1) * dim]);
            newest = newest.max(n.created_at);
            count += 1;
        }
        if other_model > 0 {
            *counts
                .entry("narratives_of_another_model".into())
                .or_default() += other_model;
            report.notes.push(format!(
                "user {user}: {other_model} new narratives embedded by another model than the \
                 anchor's {model} were left out (`memlife anchor --reset-origin --user {user}` \
                 sets the origin anew on one model)"
            ));
        }
        let Some(plan) = plan_user(
            log.run_id(),
            user,
            stored_row,
            &model,
            (&flat, count, newest),
            p,
            reset,
            now,
        ) else {
            continue;
        };
        *counts.entry("narratives_folded".into()).or_default() += count as u64;
        planned.push(plan);
    }
    counts.insert("users".into(), by_user.len() as u64);
    counts.insert("anchors_updated".into(), planned.len() as u64);
    let origins = planned.iter().filter(|p| p.step.first).count();
    counts.insert("origins_set".into(), origins as u64);
    for (event, name) in [
        ("warning", "drift_warnings"),
        ("critical", "drift_critical"),
    ] {
        let users: Vec<&str> = planned
            .iter()
            .filter(|p| p.step.event == Some(event))
            .map(|p| p.row.0.user_id.as_str())
            .collect();
        counts.insert(name.into(), users.len() as u64);
        if !users.is_empty() {
            report.notes.push(format!(
                "drift {event} (above {}): {}",
                if event == "warning" {
                    p.drift_warning
                } else {
                    p.drift_critical
                },
                users.join(", ")
            ));
        }
    }
    if let Some(max) = planned.iter().map(|p| p.step.drift).reduce(f64::max) {
        report
            .notes
            .push(format!("largest drift from origin {max:.3}"));
    }
    if let Some(max) = planned.iter().map(|p| p.step.moved).reduce(f64::max) {
        report.notes.push(format!("largest move this run {max:.3}"));
    }
    if !ctx.dry_run && !planned.is_empty() {
        let audit: Vec<AuditRow> = planned.iter().flat_map(|p| p.audit.clone()).collect();
        ctx.store.write_audit(&audit).await?;
        crate::crash::point("anchor.after-audit");
        let rows: Vec<(AnchorRow, Vec<f32>, Vec<f32>)> =
            planned.into_iter().map(|p| p.row).collect();
        let batch = anchor_batch(&rows, dim).map_err(anyhow::Error::msg)?;
        ctx.store.upsert_batch(&ANCHORS, batch).await?;
    }
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
