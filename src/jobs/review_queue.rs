//! The review queue's settlement: items decided (approved, rejected, expired) are written as
//! integrate would have written them, one audit row each before anything is applied. Used by
//! `memlife review` (a person deciding) and by `integrate` (expiring what waited too long).

use std::collections::BTreeMap;

use anyhow::{Result, anyhow, bail};
use serde_json::Value;

use super::integrate::{plan, write_plans};
use super::{ItemFailure, JobCtx};
use crate::embedders::Embedder;
use crate::logic::integrate::{Class, Decision};
pub use crate::logic::rows::ReviewItem;
use crate::model::schema::REVIEW_QUEUE;
use crate::model::typed::MemoryRow;
use crate::store::{Store, sql_list, sql_string, sql_timestamp};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    Approve,
    Reject,
    Expire,
}

impl Verdict {
    pub fn status(self) -> &'static str {
        match self {
            Verdict::Approve => "approved",
            Verdict::Reject => "rejected",
            Verdict::Expire => "expired",
        }
    }
}

/// The review queue's rows that `filter` keeps.
pub async fn queued(store: &Store, filter: &str) -> Result<Vec<ReviewItem>> {
    Ok(store.scan_rows(REVIEW_QUEUE.name, Some(filter)).await?)
}

/// Decides review items: one audit row each (written before anything is applied), the
/// plans applied, the items' status set. `merged` holds the merge texts of approved MERGEs.
#[allow(clippy::too_many_arguments)]
pub async fn settle(
    ctx: &JobCtx<'_>,
    embedder: &Embedder,
    run_id: &str,
    items: &[ReviewItem],
    verdict: Verdict,
    merged: &BTreeMap<String, String>,
    now: i64,
    job: &str,
    failures: &mut Vec<ItemFailure>,
) -> Result<u64> {
    let config = ctx.app.config().await?;
    let p = &config.integrate;
    let candidate_ids: Vec<String> = items.iter().map(|i| i.candidate_id.clone()).collect();
    let live = format!(
        "archived_at IS NULL AND state <> 'archived' AND superseded_by IS NULL \
         AND (valid_until IS NULL OR valid_until > {})",
        sql_timestamp(now)
    );
    let (current, _) = ctx
        .store
        .memories_with_ids(&candidate_ids, Some(&live), false)
        .await?;
    let current: BTreeMap<String, MemoryRow> =
        current.into_iter().map(|r| (r.id.clone(), r)).collect();
    let fact_ids: Vec<String> = items.iter().map(|i| i.fact_id.clone()).collect();
    let settlement = crate::jobs::integrate::settlement_ids(&ctx.store, &fact_ids).await?;
    let mut plans = Vec::new();
    let mut settled = Vec::new();
    for (item, settlement_id) in items.iter().zip(&settlement) {
        let id = item.id.clone();
        let fact = fact_row(item, ctx.store.embedding_dim(), now)?;
        let candidate = current
            .get(&item.candidate_id)
            .filter(|c| item.candidate_text == c.text);
        let confidence = item.confidence;
        let decision = match verdict {
            Verdict::Approve => {
                let Some(class) = Class::parse(&item.classification) else {
                    bail!(
                        "review item {id}: unknown classification {:?}",
                        item.classification
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
                    reasoning: format!(
                        "approved in review: {}",
                        item.reasoning.as_deref().unwrap_or("")
                    ),
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
    let due = queued(&ctx.store, &filter).await?;
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

/// The fact a review item holds, read as the memory row integrate would write (`(dim, now)`
/// as the table's defaults need them).
pub fn fact_row(item: &ReviewItem, dim: usize, now: i64) -> Result<MemoryRow> {
    let id = &item.id;
    let fact: Value = serde_json::from_str(&item.fact)
        .map_err(|e| anyhow!("review item {id}: its fact is not a JSON object: {e}"))?;
    Ok(crate::model::typed::memories_from_json(&[fact], dim, now)
        .map_err(|e| anyhow!("review item {id}: its fact: {e}"))?
        .remove(0))
}
