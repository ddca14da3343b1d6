//! `memlife consolidate`: two-pass consolidation of the clusters `memlife cluster` found (seed
//! 000 "Memory Consolidation"). Pass 1 (`consolidate.propose`, the reasoning role) proposes
//! groups of a cluster's memories and their consolidated text; pass 2 (`consolidate.verify`,
//! the fast role) approves or rejects each proposal. Only approved proposals are applied.
//!
//! Applying the approved groups of a run, in this order (each step one Lance commit for all
//! of them, each idempotent):
//! 1. the `CONSOLIDATE` audit rows: the members' rows and links before, the new memory after
//!    (logged before anything changes, so a killed run is finished by the next one);
//! 2. the consolidated memory: the proposal's text, importance the median of the members',
//!    the earliest `created_at`, tags united, access counts summed, `consolidates_memory_ids`,
//!    a fresh embedding;
//! 3. the links: every link touching a member moves to the new memory (links between members
//!    dropped, duplicates keep the highest confidence), plus a `consolidates` link from the
//!    new memory to each member; then the members' old links are deleted;
//! 4. the members' entity rows move the same way;
//! 5. the members are archived (`archived_at`; still queryable, out of active retrieval).
//!
//! A run first finishes any approved consolidation a killed run left half-applied (step 1
//! written, step 5 not). A proposal that pass 1 declines or pass 2 rejects is remembered (an
//! audit row keyed by the cluster's signature) and not asked again until the cluster changes;
//! a failed call is not remembered (the next run asks again).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, anyhow, bail};
use arrow::array::AsArray;
use serde_json::{Value, json};

use super::{ItemFailure, Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::embedders::{Embedded, EmbedderArgs};
use crate::llm::tasks::{MemoryView, ProposedGroup, Reply, Task, TaskInput};
use crate::llm::{Item, LlmArgs, Mode};
use crate::logic::cluster::signature;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{AUDIT_LOG, LINKS, MEMORIES, MEMORY_ENTITIES};
use crate::store::audit::{AuditRow, derived_id};
use crate::store::{Store, batch_from_json, json_rows, sql_string, sql_timestamp};

/// Two-pass LLM consolidation of the latest clusters (`memlife cluster`): propose, verify,
/// then apply each approved group as a new memory that takes over the members' links.
#[derive(clap::Args, Debug, Clone)]
pub struct ConsolidateArgs {
    /// The clock the run computes at (RFC 3339): the consolidated memory's `updated_at` and
    /// the members' `archived_at`; default the current time.
    #[arg(long)]
    pub now: Option<String>,
    #[command(flatten)]
    pub scope: JobScope,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

impl Job for ConsolidateArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<&str> {
        self.now.as_deref()
    }
}

/// A cluster as `clusters` recorded it.
struct ClusterRow {
    user: String,
    member_ids: Vec<String>,
    signature: String,
}

/// One approved group, ready to apply.
struct Plan {
    user: String,
    new_id: String,
    members: Vec<String>,
    text: String,
    signature: String,
    confidence: f64,
    reasoning: String,
}

/// The clusters of each user's latest finished `cluster` run that covered them.
async fn latest_clusters(ctx: &JobCtx<'_>) -> Result<Vec<ClusterRow>> {
    let runs = json_rows(
        &ctx.store
            .scan_columns(
                "runs",
                Some("job = 'cluster' AND status = 'done' AND dry_run = false"),
                &["run_id", "user_id", "started_at"],
            )
            .await?,
    );
    let mut runs: Vec<(String, Option<String>, String)> = runs
        .into_iter()
        .map(|r| {
            (
                r["started_at"].as_str().unwrap_or("").to_string(),
                r["user_id"].as_str().map(str::to_string),
                r["run_id"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    // Newest first: for each user, the first run whose scope covers them.
    runs.sort_by(|a, b| b.0.cmp(&a.0));
    let mut out = Vec::new();
    for user in super::users_of(ctx, "memories").await? {
        let Some((_, _, run_id)) = runs
            .iter()
            .find(|(_, scope, _)| scope.as_deref().is_none_or(|s| s == user))
        else {
            continue;
        };
        let filter = format!(
            "run_id = {} AND user_id = {}",
            sql_string(run_id),
            sql_string(&user)
        );
        for row in json_rows(
            &ctx.store
                .scan_columns(
                    "clusters",
                    Some(&filter),
                    &["member_ids", "signature", "seed_id"],
                )
                .await?,
        ) {
            out.push(ClusterRow {
                user: user.clone(),
                member_ids: row["member_ids"]
                    .as_array()
                    .map(|ids| {
                        ids.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
                signature: row["signature"].as_str().unwrap_or("").to_string(),
            });
        }
    }
    Ok(out)
}

fn id_list(ids: &[String]) -> String {
    ids.iter()
        .map(|id| sql_string(id))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A user's memories as JSON objects (embedding left out), by id: one scan per user.
async fn user_rows(store: &Store, user: &str) -> Result<BTreeMap<String, Value>> {
    let columns: Vec<&str> = MEMORIES
        .fields
        .iter()
        .map(|f| f.name)
        .filter(|n| *n != "embedding")
        .collect();
    let filter = format!("user_id = {}", sql_string(user));
    Ok(json_rows(
        &store
            .scan_columns("memories", Some(&filter), &columns)
            .await?,
    )
    .into_iter()
    .map(|r| (r["id"].as_str().unwrap_or("").to_string(), Value::Object(r)))
    .collect())
}

/// Signatures of clusters whose proposal was declined or rejected before, per user.
async fn remembered(store: &Store) -> Result<BTreeSet<String>> {
    let filter = "operation = 'CONSOLIDATE' AND classification IN ('REJECTED', 'NOT_PROPOSED')";
    let mut out = BTreeSet::new();
    for batch in store
        .scan_columns(AUDIT_LOG.name, Some(filter), &["target_id"])
        .await?
    {
        let targets = batch.column(0).as_string::<i32>();
        for row in 0..batch.num_rows() {
            if let Some(sig) = targets.value(row).strip_prefix("cluster:") {
                out.insert(sig.to_string());
            }
        }
    }
    Ok(out)
}

fn view(row: &Value) -> MemoryView {
    row.as_object()
        .map(MemoryView::from_row)
        .unwrap_or_else(|| MemoryView::from_row(&serde_json::Map::new()))
}

fn is_live(row: &Value) -> bool {
    row["archived_at"].is_null() && row["state"].as_str() != Some("archived")
}

/// The consolidated memory's row (without its embedding) from the members' rows.
fn new_memory(plan: &Plan, members: &[&Value], now: &str) -> Value {
    let mut importance: Vec<f64> = members
        .iter()
        .filter_map(|m| m["importance"].as_f64())
        .collect();
    importance.sort_by(f64::total_cmp);
    let median = match importance.len() {
        0 => 0.5,
        n if n % 2 == 1 => importance[n / 2],
        n => (importance[n / 2 - 1] + importance[n / 2]) / 2.0,
    };
    let earliest = |field: &str| {
        members
            .iter()
            .filter_map(|m| m[field].as_str())
            .min()
            .map(str::to_string)
    };
    let tags: BTreeSet<&str> = members
        .iter()
        .flat_map(|m| m["tags"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    let kinds: BTreeSet<&str> = members.iter().filter_map(|m| m["kind"].as_str()).collect();
    let max = |field: &str, default: f64| {
        members
            .iter()
            .filter_map(|m| m[field].as_f64())
            .fold(None, |acc: Option<f64>, v| {
                Some(acc.map_or(v, |a| a.max(v)))
            })
            .unwrap_or(default)
    };
    let min = |field: &str, default: f64| {
        members
            .iter()
            .filter_map(|m| m[field].as_f64())
            .fold(None, |acc: Option<f64>, v| {
                Some(acc.map_or(v, |a| a.min(v)))
            })
            .unwrap_or(default)
    };
    let sum = |field: &str| {
        members
            .iter()
            .filter_map(|m| m[field].as_i64())
            .sum::<i64>()
    };
    json!({
        "id": plan.new_id,
        "user_id": plan.user,
        "text": plan.text,
        "kind": if kinds.len() == 1 { kinds.iter().next().copied().unwrap_or("fact") } else { "fact" },
        "source": "consolidate",
        "importance": median,
        "salience": max("salience", 0.5),
        "confidence": min("confidence", 0.8),
        "retention": max("retention", 1.0),
        "state": "active",
        "tier": "hot",
        "access_count": sum("access_count"),
        "recall_frequency": sum("recall_frequency"),
        "last_accessed_at": members.iter().filter_map(|m| m["last_accessed_at"].as_str()).max(),
        "created_at": earliest("created_at"),
        "updated_at": now,
        "valid_from": earliest("valid_from"),
        "tags": tags,
        "consolidates_memory_ids": plan.members,
    })
}

/// Steps 2 to 5 for a set of plans with disjoint members, each step one commit for all of
/// them; every step checks what is already done, so plans written by a killed run complete
/// here.
async fn apply(
    ctx: &JobCtx<'_>,
    embedder: &crate::embedders::Embedder,
    plans: &[(Plan, Value, i64)],
) -> Result<BTreeMap<&'static str, u64>> {
    let mut counts = BTreeMap::new();
    if plans.is_empty() {
        return Ok(counts);
    }
    let store = &ctx.store;
    let dim = store.embedding_dim();
    let now = ctx.now.timestamp_micros();
    // 2. The consolidated memories, embedded fresh (those not written yet).
    let new_ids: Vec<String> = plans.iter().map(|(p, ..)| p.new_id.clone()).collect();
    let existing: BTreeSet<String> = json_rows(
        &store
            .scan_columns(
                "memories",
                Some(&format!("id IN ({})", id_list(&new_ids))),
                &["id"],
            )
            .await?,
    )
    .into_iter()
    .filter_map(|r| r["id"].as_str().map(str::to_string))
    .collect();
    let missing: Vec<&(Plan, Value, i64)> = plans
        .iter()
        .filter(|(p, ..)| !existing.contains(&p.new_id))
        .collect();
    if !missing.is_empty() {
        let texts: Vec<&str> = missing.iter().map(|(p, ..)| p.text.as_str()).collect();
        let mut rows = Vec::new();
        for ((_, memory, _), embedded) in missing.iter().zip(embedder.embed(&texts).await?) {
            let mut row = memory.clone();
            match embedded {
                Embedded::Vector { values, .. } => {
                    row["embedding"] = json!(values);
                    row["embedding_model"] = json!(embedder.model_name());
                }
                Embedded::Refused(why) => {
                    bail!("the embedder refused a consolidated text: {why}")
                }
            }
            rows.push(row);
        }
        let batch = batch_from_json(&MEMORIES, dim, now, &rows).map_err(|e| anyhow!(e))?;
        store.upsert_batch(&MEMORIES, batch).await?;
        counts.insert("memories_created", rows.len() as u64);
    }
    crate::crash::point("consolidate.after-memory");
    // 3. Links: every link touching a member moves to its consolidated memory.
    let holder: BTreeMap<&str, &str> = plans
        .iter()
        .flat_map(|(p, ..)| {
            p.members
                .iter()
                .map(move |m| (m.as_str(), p.new_id.as_str()))
        })
        .collect();
    let all_members: Vec<String> = holder.keys().map(|m| m.to_string()).collect();
    let list = id_list(&all_members);
    let touching = format!(
        "(source_id IN ({list}) OR target_id IN ({list})) AND NOT (link_type = 'consolidates' AND source_id IN ({}))",
        id_list(&new_ids)
    );
    let old_links = json_rows(&store.scan("links", Some(&touching)).await?);
    let mut moved: BTreeMap<(String, String, String), Value> = BTreeMap::new();
    for link in &old_links {
        let end = |field: &str| {
            let id = link[field].as_str().unwrap_or("");
            holder.get(id).copied().unwrap_or(id).to_string()
        };
        let (source, target) = (end("source_id"), end("target_id"));
        if source == target {
            continue; // a link between members of one consolidation
        }
        let key = (
            source.clone(),
            target.clone(),
            link["link_type"].as_str().unwrap_or("").to_string(),
        );
        let confidence = link["confidence"].as_f64().unwrap_or(0.0);
        let keep = moved
            .get(&key)
            .is_none_or(|kept| kept["confidence"].as_f64().unwrap_or(0.0) < confidence);
        if keep {
            let mut row = link.clone();
            row.insert("source_id".into(), json!(source));
            row.insert("target_id".into(), json!(target));
            moved.insert(key, Value::Object(row));
        }
    }
    let mut rows: Vec<Value> = moved.into_values().collect();
    let created = format_timestamp(now);
    for (plan, ..) in plans {
        for member in &plan.members {
            rows.push(json!({
                "source_id": plan.new_id, "target_id": member, "user_id": plan.user,
                "link_type": "consolidates", "confidence": plan.confidence,
                "reasoning": "consolidated into the source", "origin": "llm", "created_at": created,
            }));
        }
    }
    let batch = batch_from_json(&LINKS, dim, now, &rows).map_err(|e| anyhow!(e))?;
    store.upsert_batch(&LINKS, batch).await?;
    crate::crash::point("consolidate.after-links");
    if !old_links.is_empty() {
        store.delete_where("links", &touching).await?;
    }
    counts.insert("links_moved", old_links.len() as u64);
    // 4. Entity rows.
    let entity_rows = json_rows(
        &store
            .scan("memory_entities", Some(&format!("memory_id IN ({list})")))
            .await?,
    );
    if !entity_rows.is_empty() {
        let moved: BTreeMap<(String, String), Value> = entity_rows
            .iter()
            .map(|r| {
                let memory = holder
                    .get(r["memory_id"].as_str().unwrap_or(""))
                    .copied()
                    .unwrap_or("");
                let entity = r["entity_id"].as_str().unwrap_or("").to_string();
                (
                    (memory.to_string(), entity.clone()),
                    json!({"memory_id": memory, "entity_id": entity, "user_id": r["user_id"]}),
                )
            })
            .collect();
        let rows: Vec<Value> = moved.into_values().collect();
        let batch = batch_from_json(&MEMORY_ENTITIES, dim, now, &rows).map_err(|e| anyhow!(e))?;
        store.upsert_batch(&MEMORY_ENTITIES, batch).await?;
        store
            .delete_where("memory_entities", &format!("memory_id IN ({list})"))
            .await?;
    }
    // 5. Archive the members, at the time each plan's audit row recorded.
    let mut by_time: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (plan, _, at) in plans {
        by_time
            .entry(*at)
            .or_default()
            .extend(plan.members.iter().cloned());
    }
    let mut archived = 0;
    for (at, members) in by_time {
        archived += store
            .update_where(
                "memories",
                &format!("id IN ({}) AND archived_at IS NULL", id_list(&members)),
                &[
                    ("state", "'archived'".to_string()),
                    ("tier", "'archived'".to_string()),
                    ("archived_at", sql_timestamp(at)),
                    ("updated_at", sql_timestamp(at)),
                ],
            )
            .await?;
    }
    counts.insert("memories_archived", archived);
    Ok(counts)
}

/// Which of `ids` are live memories (not archived): one scan per thousand ids.
async fn live_ids(store: &Store, ids: &[String]) -> Result<BTreeSet<String>> {
    let mut live = BTreeSet::new();
    for chunk in ids.chunks(1000) {
        let filter = format!("archived_at IS NULL AND id IN ({})", id_list(chunk));
        live.extend(
            json_rows(
                &store
                    .scan_columns("memories", Some(&filter), &["id"])
                    .await?,
            )
            .into_iter()
            .filter_map(|r| r["id"].as_str().map(str::to_string)),
        );
    }
    Ok(live)
}

fn string_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Approved consolidations whose members are not all archived yet (a killed run's). Reads
/// only the ids and members of past consolidations, then the full log rows of unfinished ones.
async fn unfinished(store: &Store) -> Result<Vec<(Plan, Value, i64)>> {
    let approved = "operation = 'CONSOLIDATE' AND classification = 'APPROVED'";
    let heads = json_rows(
        &store
            .scan_columns(AUDIT_LOG.name, Some(approved), &["id", "source_ids"])
            .await?,
    );
    let members: Vec<String> = heads
        .iter()
        .flat_map(|r| string_list(&r["source_ids"]))
        .collect();
    let live = live_ids(store, &members).await?;
    let pending: Vec<String> = heads
        .iter()
        .filter(|r| {
            string_list(&r["source_ids"])
                .iter()
                .any(|m| live.contains(m))
        })
        .filter_map(|r| r["id"].as_str().map(str::to_string))
        .collect();
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let filter = format!("{approved} AND id IN ({})", id_list(&pending));
    let mut out = Vec::new();
    for row in json_rows(&store.scan(AUDIT_LOG.name, Some(&filter)).await?) {
        let after: Value = serde_json::from_str(row["after_state"].as_str().unwrap_or("{}"))?;
        let memory = after["memory"].clone();
        let archived_at = after["archived_at"]
            .as_str()
            .and_then(crate::model::encoding::parse_timestamp)
            .ok_or_else(|| anyhow!("audit row {} lacks after_state.archived_at", row["id"]))?;
        out.push((
            Plan {
                user: row["user_id"].as_str().unwrap_or("").to_string(),
                new_id: row["target_id"].as_str().unwrap_or("").to_string(),
                text: memory["text"].as_str().unwrap_or("").to_string(),
                members: string_list(&row["source_ids"]),
                signature: String::new(),
                confidence: row["confidence"].as_f64().unwrap_or(0.0),
                reasoning: String::new(),
            },
            memory,
            archived_at,
        ));
    }
    Ok(out)
}

/// Adds to a count; a count that stays zero is not reported.
fn add(counts: &mut BTreeMap<String, u64>, name: &str, value: u64) {
    if value > 0 {
        *counts.entry(name.to_string()).or_default() += value;
    }
}

pub async fn run(ctx: &JobCtx<'_>, args: &ConsolidateArgs) -> Result<JobReport> {
    let llm = ctx.app.llm(&args.llm).await?;
    if llm.mode == Mode::Batch {
        bail!(
            "consolidate --mode batch is not available yet: run it online (the Batch API \
             rounds of consolidation are an open part of issue 13)"
        );
    }
    let params = json!({"mode": "online", "now": now_param(ctx)});
    let log = RunLog::start(ctx, JobName::Consolidate.as_str(), &params).await?;
    let mut report = JobReport::new(JobName::Consolidate.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let embedder = ctx
        .app
        .embedder(&args.embedder, ctx.store.embedding_dim(), 16)
        .await?;
    let now_micros = ctx.now.timestamp_micros();
    let now = format_timestamp(now_micros);

    // A killed run's approved consolidations are finished first.
    if !ctx.dry_run {
        let pending: Vec<(Plan, Value, i64)> = unfinished(&ctx.store)
            .await?
            .into_iter()
            .filter(|(plan, ..)| ctx.user.as_deref().is_none_or(|u| u == plan.user))
            .collect();
        add(&mut counts, "resumed", pending.len() as u64);
        for (k, v) in apply(ctx, &embedder, &pending).await? {
            add(&mut counts, k, v);
        }
    }

    // Candidates: the latest clusters whose members are all live and unchanged, and that
    // were not declined before.
    let declined = remembered(&ctx.store).await?;
    let mut candidates: Vec<(ClusterRow, Vec<Value>)> = Vec::new();
    let mut rows: BTreeMap<String, Value> = BTreeMap::new();
    let mut loaded_users = BTreeSet::new();
    for cluster in latest_clusters(ctx).await? {
        add(&mut counts, "clusters", 1);
        if loaded_users.insert(cluster.user.clone()) {
            rows.extend(user_rows(&ctx.store, &cluster.user).await?);
        }
        let members: Vec<Value> = cluster
            .member_ids
            .iter()
            .filter_map(|id| rows.get(id).cloned())
            .collect();
        if members.len() != cluster.member_ids.len() || !members.iter().all(is_live) {
            add(&mut counts, "clusters_stale", 1);
            continue;
        }
        let keyed: Vec<(&str, &str)> = members
            .iter()
            .map(|m| {
                (
                    m["id"].as_str().unwrap_or(""),
                    m["text"].as_str().unwrap_or(""),
                )
            })
            .collect();
        if signature(&keyed) != cluster.signature {
            add(&mut counts, "clusters_changed", 1);
            continue;
        }
        if declined.contains(&cluster.signature) {
            add(&mut counts, "clusters_declined_before", 1);
            continue;
        }
        candidates.push((cluster, members));
    }

    // Pass 1: proposals.
    let items: Vec<Item> = candidates
        .iter()
        .enumerate()
        .map(|(i, (_, members))| Item {
            custom_id: format!("cluster-{i}"),
            input: TaskInput {
                task: Task::ConsolidatePropose,
                memories: members.iter().map(view).collect(),
                proposal: None,
                now: now.clone(),
            },
        })
        .collect();
    let proposals = llm.run(items).await;
    // Pass 2: one verification per proposed group.
    let mut groups: Vec<(usize, ProposedGroup)> = Vec::new();
    let mut declined_rows = Vec::new();
    for (i, outcome) in proposals.iter().enumerate() {
        let (cluster, _) = &candidates[i];
        if let Some(failure) = &outcome.failure {
            report.failures.push(ItemFailure {
                item: format!("cluster {}", cluster.signature),
                reason: format!("consolidate.propose: {failure}"),
            });
            continue;
        }
        match &outcome.reply {
            Some(Reply::Propose(reply)) if !reply.groups.is_empty() => {
                add(&mut counts, "groups_proposed", reply.groups.len() as u64);
                groups.extend(reply.groups.iter().cloned().map(|g| (i, g)));
            }
            _ => {
                add(&mut counts, "clusters_not_proposed", 1);
                declined_rows.push(decline(
                    log.run_id(),
                    cluster,
                    "NOT_PROPOSED",
                    "pass 1 proposed no consolidation",
                    now_micros,
                ));
            }
        }
    }
    let items: Vec<Item> = groups
        .iter()
        .enumerate()
        .map(|(g, (i, group))| {
            let (_, members) = &candidates[*i];
            Item {
                custom_id: format!("group-{g}"),
                input: TaskInput {
                    task: Task::ConsolidateVerify,
                    memories: members
                        .iter()
                        .filter(|m| group.memory_ids.iter().any(|id| m["id"] == json!(id)))
                        .map(view)
                        .collect(),
                    proposal: Some(group.text.clone()),
                    now: now.clone(),
                },
            }
        })
        .collect();
    let verdicts = llm.run(items).await;
    let mut plans = Vec::new();
    for ((i, group), outcome) in groups.iter().zip(&verdicts) {
        let (cluster, _) = &candidates[*i];
        if let Some(failure) = &outcome.failure {
            report.failures.push(ItemFailure {
                item: format!("cluster {}", cluster.signature),
                reason: format!("consolidate.verify: {failure}"),
            });
            continue;
        }
        let Some(Reply::Verify(verdict)) = &outcome.reply else {
            continue;
        };
        if !verdict.approve {
            add(&mut counts, "groups_rejected", 1);
            declined_rows.push(decline(
                log.run_id(),
                cluster,
                "REJECTED",
                &format!(
                    "pass 2 rejected: {}; pass 1: {}",
                    verdict.reasoning, group.reasoning
                ),
                now_micros,
            ));
            continue;
        }
        add(&mut counts, "groups_approved", 1);
        let mut members = group.memory_ids.clone();
        members.sort();
        plans.push(Plan {
            user: cluster.user.clone(),
            new_id: derived_id(&format!(
                "consolidated|{}|{}",
                members.join("|"),
                group.text
            )),
            members,
            text: group.text.clone(),
            signature: cluster.signature.clone(),
            confidence: verdict.confidence,
            reasoning: format!("pass 1: {}; pass 2: {}", group.reasoning, verdict.reasoning),
        });
    }
    if ctx.dry_run {
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }
    ctx.store.write_audit(&declined_rows).await?;

    // Apply: every plan's audit row first (one commit), then the changes, step by step.
    let users: BTreeSet<&str> = plans.iter().map(|p| p.user.as_str()).collect();
    let mut rows_by_id: BTreeMap<String, Value> = BTreeMap::new();
    let mut links_of_user: BTreeMap<String, Vec<serde_json::Map<String, Value>>> = BTreeMap::new();
    for user in users {
        rows_by_id.extend(user_rows(&ctx.store, user).await?);
        links_of_user.insert(
            user.to_string(),
            json_rows(
                &ctx.store
                    .scan("links", Some(&format!("user_id = {}", sql_string(user))))
                    .await?,
            ),
        );
    }
    let mut ready = Vec::new();
    let mut audit = Vec::new();
    for plan in plans {
        let members: Vec<&Value> = plan
            .members
            .iter()
            .filter_map(|id| rows_by_id.get(id))
            .collect();
        if members.len() != plan.members.len() || !members.iter().all(|m| is_live(m)) {
            add(&mut counts, "groups_stale", 1);
            continue;
        }
        let memory = new_memory(&plan, &members, &now);
        let links: Vec<&serde_json::Map<String, Value>> = links_of_user
            .get(&plan.user)
            .into_iter()
            .flatten()
            .filter(|l| {
                [&l["source_id"], &l["target_id"]].iter().any(|end| {
                    plan.members
                        .iter()
                        .any(|m| end.as_str() == Some(m.as_str()))
                })
            })
            .collect();
        let mut row = AuditRow::new(log.run_id(), "CONSOLIDATE", &plan.new_id, now_micros);
        row.user_id = Some(plan.user.clone());
        row.source_ids = plan.members.clone();
        row.target_id = Some(plan.new_id.clone());
        row.classification = Some("APPROVED".into());
        row.confidence = Some(plan.confidence.clamp(0.0, 1.0));
        row.reasoning = Some(plan.reasoning.clone());
        row.before_state = Some(
            json!({"signature": plan.signature, "memories": members, "links": links}).to_string(),
        );
        row.after_state = Some(json!({"memory": memory, "archived_at": now}).to_string());
        audit.push(row);
        ready.push((plan, memory, now_micros));
    }
    ctx.store.write_audit(&audit).await?;
    crate::crash::point("consolidate.after-audit");
    add(&mut counts, "consolidated", ready.len() as u64);
    for (k, v) in apply(ctx, &embedder, &ready).await? {
        add(&mut counts, k, v);
    }
    report.counts = counts;
    report.llm = Some(llm.usage(&[proposals, verdicts].concat()));
    log.finish(ctx, &mut report).await?;
    Ok(report)
}

fn now_param(ctx: &JobCtx<'_>) -> String {
    format_timestamp(ctx.now.timestamp_micros())
}

/// The audit row that remembers a declined cluster by its signature.
fn decline(
    run_id: &str,
    cluster: &ClusterRow,
    classification: &str,
    reasoning: &str,
    now: i64,
) -> AuditRow {
    let target = format!("cluster:{}", cluster.signature);
    let mut row = AuditRow::new(
        run_id,
        "CONSOLIDATE",
        &format!("{target}|{classification}"),
        now,
    );
    row.user_id = Some(cluster.user.clone());
    row.source_ids = cluster.member_ids.clone();
    row.target_id = Some(target);
    row.classification = Some(classification.to_string());
    row.reasoning = Some(reasoning.to_string());
    row
}
