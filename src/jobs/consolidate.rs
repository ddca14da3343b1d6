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
//!    the earliest `created_at`, `last_accessed_at` the last telling or use of any member, the
//!    furthest state a member reached, tags united, access counts summed, `consolidates_memory_ids`,
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
use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

use super::{ItemFailure, Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::embedders::{Embedded, Embedder, EmbedderArgs};
use crate::llm::batch::{Applier, ApplyEnv, BatchRecord};
use crate::llm::tasks::{MemoryView, ProposedGroup, Reply, Task, TaskInput};
use crate::llm::{CallMode, Item, LlmArgs, Outcome};
use crate::logic::cluster::signature;
use crate::logic::consolidate::{self as consolidation, ApprovedGroup, LinkEnds};
use crate::logic::shard::UserScope;
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{AUDIT_LOG, MEMORIES, MEMORY_ENTITIES};
use crate::model::typed::{LinkRow, MemoryEntityRow, MemoryRow, memories_from_json};
use crate::store::audit::{AuditRow, derived_id};
use crate::store::{Store, sql_list, sql_string, sql_timestamp};

/// Two-pass LLM consolidation of the latest clusters (`memlife cluster`): propose, verify,
/// then apply each approved group as a new memory that takes over the members' links.
#[derive(clap::Args, Debug, Clone)]
pub struct ConsolidateArgs {
    /// The clock the run computes at (RFC 3339): the consolidated memory's `updated_at` and
    /// the members' `archived_at`; default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
    /// Pass 1 asks about several small clusters of a user in one request until it holds at
    /// least this many memories (1: one request per cluster). Most clusters are pairs; one
    /// request each would cost a call per two or three memories.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=200))]
    pub memories_per_call: u64,
}

impl Job for ConsolidateArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }

    fn applier() -> Option<Box<dyn Applier>> {
        Some(Box::new(ConsolidateApplier))
    }
}

/// A cluster as `clusters` recorded it, or several of one user asked about in one request
/// (`pack`): then `parts` holds each cluster's size, in member order.
struct Candidate {
    user: String,
    member_ids: Vec<String>,
    signature: String,
    parts: Vec<usize>,
}

/// The cluster signature of memory rows (their ids and texts).
fn rows_signature(members: &[MemoryRow]) -> String {
    let keyed: Vec<(&str, &str)> = members
        .iter()
        .map(|m| (m.id.as_str(), m.text.as_str()))
        .collect();
    signature(&keyed)
}

/// Packs each user's clusters, in order, into requests of at least `per_call` memories
/// (`logic::consolidate::pack`). A pack's signature is that of all its members, so a pack of
/// one cluster keeps the cluster's.
fn pack(
    clusters: Vec<(Candidate, Vec<MemoryRow>)>,
    per_call: usize,
) -> Vec<(Candidate, Vec<MemoryRow>)> {
    let keys: Vec<(&str, &[String])> = clusters
        .iter()
        .map(|(c, _)| (c.user.as_str(), c.member_ids.as_slice()))
        .collect();
    let packs = consolidation::pack(&keys, per_call);
    let mut clusters: Vec<Option<(Candidate, Vec<MemoryRow>)>> =
        clusters.into_iter().map(Some).collect();
    packs
        .into_iter()
        .map(|indexes| {
            let mut parts = Vec::new();
            let (mut user, mut member_ids, mut members) = (String::new(), Vec::new(), Vec::new());
            for i in indexes {
                let (cluster, rows) = clusters[i].take().expect("each cluster in one pack");
                parts.push(cluster.member_ids.len());
                user = cluster.user;
                member_ids.extend(cluster.member_ids);
                members.extend(rows);
            }
            let signature = rows_signature(&members);
            let row = Candidate {
                user,
                member_ids,
                signature,
                parts,
            };
            (row, members)
        })
        .collect()
}

/// The clusters of each user's latest finished `cluster` run that covered them.
async fn latest_clusters(ctx: &JobCtx<'_>) -> Result<Vec<Candidate>> {
    #[derive(serde::Deserialize)]
    struct ClusterRun {
        run_id: String,
        user_id: Option<String>,
        started_at: i64,
        params: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Cluster {
        user_id: String,
        member_ids: Option<Vec<String>>,
        signature: String,
    }
    let runs = ctx
        .store
        .scan_rows::<ClusterRun>(
            "runs",
            Some("job = 'cluster' AND status = 'done' AND dry_run = false"),
        )
        .await?;
    // Each run's users: one (`--user`), a shard (`--shard`, in its params), or all.
    let mut runs: Vec<(i64, UserScope, String)> = runs
        .into_iter()
        .map(|r| {
            let params: Value = r
                .params
                .as_deref()
                .and_then(|p| serde_json::from_str(p).ok())
                .unwrap_or(Value::Null);
            let scope = match (r.user_id, params["shard"].as_str()) {
                (Some(user), _) => UserScope::One(user),
                (None, Some(shard)) => shard.parse().map_or(UserScope::All, UserScope::Shard),
                (None, None) => UserScope::All,
            };
            (r.started_at, scope, r.run_id)
        })
        .collect();
    // Newest first: for each user, the first run whose scope covers them.
    runs.sort_by_key(|r| std::cmp::Reverse(r.0));
    // Each user's latest run, then one scan of the clusters per run (not per user).
    let mut users_of_run: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for user in super::users_of(ctx, "memories").await? {
        if let Some((_, _, run_id)) = runs.iter().find(|(_, scope, _)| scope.contains(&user)) {
            users_of_run.entry(run_id.clone()).or_default().insert(user);
        }
    }
    let mut out = Vec::new();
    for (run_id, users) in users_of_run {
        let filter = format!("run_id = {}", sql_string(&run_id));
        for cluster in ctx
            .store
            .scan_rows::<Cluster>("clusters", Some(&filter))
            .await?
        {
            if users.contains(&cluster.user_id) {
                out.push(Candidate {
                    user: cluster.user_id,
                    member_ids: cluster.member_ids.unwrap_or_default(),
                    signature: cluster.signature,
                    parts: Vec::new(),
                });
            }
        }
    }
    // In user order, as before (the order clusters are proposed and logged in).
    out.sort_by(|a, b| a.user.cmp(&b.user));
    Ok(out)
}

/// Users per scan when reading several users' rows: a store of many small users pays one
/// scan per this many users, not one per user.
const USERS_PER_SCAN: usize = 256;

/// Rows of `table` of the given users, as `T`s: one scan per `USERS_PER_SCAN` users.
async fn rows_of_users<'a, T: serde::de::DeserializeOwned>(
    store: &Store,
    table: &str,
    users: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<T>> {
    let users: Vec<String> = users.into_iter().map(str::to_string).collect();
    let mut out = Vec::new();
    for chunk in users.chunks(USERS_PER_SCAN) {
        let filter = format!("user_id IN ({})", sql_list(chunk));
        out.extend(store.scan_rows::<T>(table, Some(&filter)).await?);
    }
    Ok(out)
}

/// The users' memories (their vectors left out), by id, with recalls' pending activations
/// written on (a consolidated memory sums its members' access counts).
async fn users_rows<'a>(
    store: &Store,
    users: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeMap<String, MemoryRow>> {
    let mut rows = rows_of_users::<MemoryRow>(store, "memories", users).await?;
    store.with_pending_activations(&mut rows).await?;
    Ok(rows.into_iter().map(|r| (r.id.clone(), r)).collect())
}

/// Signatures of clusters whose proposal was declined or rejected before, per user.
async fn remembered(store: &Store) -> Result<BTreeSet<String>> {
    let filter = crate::store::without_undone(
        store,
        "operation = 'CONSOLIDATE' AND classification IN ('REJECTED', 'NOT_PROPOSED')",
    )
    .await?;
    #[derive(serde::Deserialize)]
    struct Judged {
        target_id: Option<String>,
    }
    let out = store
        .scan_rows::<Judged>(AUDIT_LOG.name, Some(&filter))
        .await?
        .into_iter()
        .filter_map(|r| Some(r.target_id?.strip_prefix("cluster:")?.to_string()))
        .collect();
    Ok(out)
}

/// Steps 2 to 5 for a set of plans with disjoint members, each step one commit for all of
/// them; every step checks what is already done, so plans written by a killed run complete
/// here.
type Planned = (ApprovedGroup, MemoryRow, i64);

/// The consolidated memories not written yet, embedded fresh, in one commit; how many.
async fn create_memories(
    store: &Store,
    embedder: Option<&Embedder>,
    plans: &[Planned],
    now: i64,
    phases: &mut BTreeMap<String, u64>,
) -> Result<u64> {
    let new_ids: Vec<String> = plans.iter().map(|(p, ..)| p.new_id.clone()).collect();
    let existing = store.ids_present(MEMORIES.name, &new_ids, None).await?;
    let missing: Vec<&Planned> = plans
        .iter()
        .filter(|(p, ..)| !existing.contains(&p.new_id))
        .collect();
    if !missing.is_empty() {
        let embedder =
            embedder.ok_or_else(|| anyhow!("no embedder for the consolidated memories"))?;
        let texts: Vec<&str> = missing.iter().map(|(p, ..)| p.text.as_str()).collect();
        let (mut rows, mut vectors) = (Vec::new(), Vec::new());
        let started = Instant::now();
        let embedded = embedder.embed(&texts).await?;
        phase(phases, "embed", started);
        for ((_, memory, _), embedded) in missing.iter().zip(embedded) {
            match embedded {
                Embedded::Vector { values, .. } => vectors.push(Some(values)),
                Embedded::Refused(why) => {
                    bail!("the embedder refused a consolidated text: {why}")
                }
            }
            rows.push(MemoryRow {
                embedding_model: Some(embedder.model_name().to_string()),
                link_mark: None,
                entity_mark: None,
                scores_due_at: None,
                ..memory.clone()
            });
        }
        store.upsert_memories(&rows, &vectors, now).await?;
        return Ok(rows.len() as u64);
    }
    Ok(0)
}

/// Every link touching a member moves to its consolidated memory (the strongest of links that
/// become one), beside a `consolidates` link from it to each member; the old links go after.
/// A member's own `consolidates` links (it consolidated others before) stay with it.
/// Returns the links moved.
async fn move_links(
    store: &Store,
    plans: &[Planned],
    holder: &BTreeMap<&str, &str>,
    now: i64,
) -> Result<u64> {
    let new_ids: Vec<String> = plans.iter().map(|(p, ..)| p.new_id.clone()).collect();
    let all_members: Vec<String> = holder.keys().map(|m| m.to_string()).collect();
    let list = sql_list(&all_members);
    // A member that is itself a consolidation keeps its own `consolidates` links: they say
    // what it was made of, and stay with it (archived, it still holds its members).
    let touching = format!(
        "(source_id IN ({list}) OR target_id IN ({list})) \
         AND NOT (link_type = 'consolidates' AND source_id IN ({}, {list}))",
        sql_list(&new_ids)
    );
    let old_links: Vec<LinkRow> = store.scan_rows("links", Some(&touching)).await?;
    let ends: Vec<LinkEnds> = old_links
        .iter()
        .map(|link| LinkEnds {
            source: &link.source_id,
            target: &link.target_id,
            link_type: &link.link_type,
            confidence: link.confidence,
        })
        .collect();
    let mut links: Vec<LinkRow> = consolidation::relink(&ends, holder)
        .into_iter()
        .map(|moved| LinkRow {
            source_id: moved.source.to_string(),
            target_id: moved.target.to_string(),
            ..old_links[moved.from].clone()
        })
        .collect();
    links.extend(consolidation::provenance_links(
        plans.iter().map(|(g, ..)| g),
        now,
    ));
    store.upsert_links(&links, now).await?;
    crate::crash::point("consolidate.after-links");
    if !old_links.is_empty() {
        store.delete_where("links", &touching).await?;
    }
    Ok(old_links.len() as u64)
}

/// The members' entity rows move to their consolidated memory.
async fn move_entity_rows(store: &Store, holder: &BTreeMap<&str, &str>, list: &str) -> Result<()> {
    let filter = format!("memory_id IN ({list})");
    let entity_rows = store
        .scan_rows::<MemoryEntityRow>(MEMORY_ENTITIES.name, Some(&filter))
        .await?;
    if !entity_rows.is_empty() {
        let pairs: Vec<(&str, &str)> = entity_rows
            .iter()
            .map(|r| (r.memory_id.as_str(), r.entity_id.as_str()))
            .collect();
        let rows: Vec<MemoryEntityRow> = consolidation::moved_entity_rows(&pairs, holder)
            .into_iter()
            .map(|(from, memory)| MemoryEntityRow {
                memory_id: memory.to_string(),
                ..entity_rows[from].clone()
            })
            .collect();
        store.upsert_memory_entities(&rows).await?;
        store.delete_where(MEMORY_ENTITIES.name, &filter).await?;
    }
    Ok(())
}

/// Archives the members, at the time each plan's audit row recorded; how many.
async fn archive_members(store: &Store, plans: &[Planned]) -> Result<u64> {
    let by_time = consolidation::archive_times(plans.iter().map(|(g, _, at)| (g, *at)));
    let mut archived = 0;
    for (at, members) in by_time {
        archived += store
            .update_where(
                "memories",
                &format!("id IN ({}) AND archived_at IS NULL", sql_list(&members)),
                &[
                    ("state", "'archived'".to_string()),
                    ("tier", "'archived'".to_string()),
                    // A new input to `scores` (a kept-forever memory revives at once).
                    ("scores_due_at", "NULL".to_string()),
                    ("archived_at", sql_timestamp(at)),
                    ("updated_at", sql_timestamp(at)),
                ],
            )
            .await?;
    }
    Ok(archived)
}

async fn apply(
    store: &Store,
    embedder: Option<&Embedder>,
    plans: &[Planned],
    now: i64,
    phases: &mut BTreeMap<String, u64>,
) -> Result<BTreeMap<&'static str, u64>> {
    let mut counts = BTreeMap::new();
    if plans.is_empty() {
        return Ok(counts);
    }
    // 2. The consolidated memories, embedded fresh (those not written yet).
    let created = create_memories(store, embedder, plans, now, phases).await?;
    if created > 0 {
        counts.insert("memories_created", created);
    }
    crate::crash::point("consolidate.after-memory");
    // 3. Links: every link touching a member moves to its consolidated memory.
    let holder = consolidation::holders(plans.iter().map(|(g, ..)| g));
    counts.insert("links_moved", move_links(store, plans, &holder, now).await?);
    // 4. Entity rows.
    let members: Vec<String> = holder.keys().map(|m| m.to_string()).collect();
    move_entity_rows(store, &holder, &sql_list(&members)).await?;
    // 5. Archive the members, at the time each plan's audit row recorded.
    let archived = archive_members(store, plans).await?;
    counts.insert("memories_archived", archived);
    Ok(counts)
}

/// Which of `ids` are live memories (not archived).
async fn live_ids(store: &Store, ids: &[String]) -> Result<BTreeSet<String>> {
    Ok(store
        .ids_present(MEMORIES.name, ids, Some("archived_at IS NULL"))
        .await?)
}

/// Approved consolidations whose members are not all archived yet (a killed run's). Reads
/// only the ids and members of past consolidations, then the full log rows of unfinished ones.
async fn unfinished(store: &Store, now: i64) -> Result<Vec<Planned>> {
    // Approvals of runs `memlife undo` reverted stay reverted.
    let approved = &crate::store::without_undone(
        store,
        "operation = 'CONSOLIDATE' AND classification = 'APPROVED'",
    )
    .await?;
    #[derive(serde::Deserialize)]
    struct Head {
        id: String,
        source_ids: Option<Vec<String>>,
    }
    let heads = store
        .scan_rows::<Head>(AUDIT_LOG.name, Some(approved))
        .await?;
    let members: Vec<String> = heads
        .iter()
        .flat_map(|r| r.source_ids.iter().flatten().cloned())
        .collect();
    let live = live_ids(store, &members).await?;
    let pending: Vec<String> = heads
        .into_iter()
        .filter(|r| r.source_ids.iter().flatten().any(|m| live.contains(m)))
        .map(|r| r.id)
        .collect();
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    #[derive(serde::Deserialize)]
    struct Approved {
        id: String,
        user_id: Option<String>,
        target_id: Option<String>,
        source_ids: Option<Vec<String>>,
        confidence: Option<f64>,
        after_state: Option<String>,
    }
    let filter = format!("{approved} AND id IN ({})", sql_list(&pending));
    let mut out = Vec::new();
    for row in store
        .scan_rows::<Approved>(AUDIT_LOG.name, Some(&filter))
        .await?
    {
        let after: Value = serde_json::from_str(row.after_state.as_deref().unwrap_or("{}"))?;
        let memory = memories_from_json(&[after["memory"].clone()], store.embedding_dim(), now)
            .map_err(|e| anyhow!("audit row {}: its memory does not read: {e}", row.id))?
            .remove(0);
        let archived_at = after["archived_at"]
            .as_str()
            .and_then(crate::model::encoding::parse_timestamp)
            .ok_or_else(|| anyhow!("audit row {} lacks after_state.archived_at", row.id))?;
        out.push((
            ApprovedGroup {
                key: String::new(),
                texts: BTreeMap::new(),
                user: row.user_id.unwrap_or_default(),
                new_id: row.target_id.unwrap_or_default(),
                text: memory.text.clone(),
                members: row.source_ids.unwrap_or_default(),
                signature: String::new(),
                confidence: row.confidence.unwrap_or(0.0),
                reasoning: String::new(),
            },
            memory,
            archived_at,
        ));
    }
    Ok(out)
}

/// Adds the time since `since` to phase `name`.
fn phase(phases: &mut BTreeMap<String, u64>, name: &str, since: Instant) {
    *phases.entry(name.to_string()).or_default() += since.elapsed().as_millis() as u64;
}

/// Adds to a count; a count that stays zero is not reported.
fn add(counts: &mut BTreeMap<String, u64>, name: &str, value: u64) {
    if value > 0 {
        *counts.entry(name.to_string()).or_default() += value;
    }
}

/// The custom id of a cluster's pass-1 item; its groups' pass-2 items add `-group-{g}`.
fn cluster_item_id(signature: &str) -> String {
    format!("cluster-{signature}")
}

/// The cluster signature a pass-1 or pass-2 custom id carries.
fn signature_of(custom_id: &str) -> &str {
    let rest = custom_id.strip_prefix("cluster-").unwrap_or(custom_id);
    rest.split("-group-").next().unwrap_or(rest)
}

/// Where a set of answers comes from: the run that asked, the key their audit rows derive
/// from (the run online, the batch in batch mode), the user and the time they are applied.
struct Origin<'a> {
    run_id: &'a str,
    key: &'a str,
    user: &'a str,
    now: i64,
}

impl Origin<'_> {
    /// The audit row every item leaves, keyed by the origin and the item: `memlife check`
    /// finds an applied batch's rows by it.
    fn row(&self, custom_id: &str) -> AuditRow {
        let mut row = AuditRow::new(
            self.run_id,
            "CONSOLIDATE",
            &format!("{}|{custom_id}", self.key),
            self.now,
        );
        row.user_id = Some(self.user.to_string());
        row
    }
}

fn propose_item(cluster: &Candidate, members: &[MemoryRow], now: &str) -> Item {
    let mut memories: Vec<MemoryView> = members.iter().map(MemoryView::from_memory).collect();
    if cluster.parts.len() > 1 {
        let numbers = cluster
            .parts
            .iter()
            .enumerate()
            .flat_map(|(k, &n)| std::iter::repeat_n(k + 1, n));
        for (m, k) in memories.iter_mut().zip(numbers) {
            m.cluster = Some(k);
        }
    }
    Item {
        custom_id: cluster_item_id(&cluster.signature),
        input: TaskInput {
            task: Task::ConsolidatePropose,
            memories,
            proposal: None,
            now: now.to_string(),
            question: None,
        },
    }
}

/// Pass 1's answer about one cluster or pack (its item), as its audit rows: PROPOSED with the
/// groups, NOT_PROPOSED (remembered: it is not asked about again until it changes) or FAILED
/// (asked again by the next run); and for a pack, one NOT_PROPOSED row per cluster in it that
/// no proposed group touches, so that cluster is not asked about again when the pack's other
/// clusters change. Returns the rows and the groups to verify.
fn read_proposal(
    origin: &Origin<'_>,
    item: &Item,
    outcome: &Outcome,
    counts: &mut BTreeMap<String, u64>,
    failures: &mut Vec<ItemFailure>,
) -> (Vec<AuditRow>, Vec<ProposedGroup>) {
    let (row, groups) = read_pack_proposal(origin, item, outcome, counts, failures);
    let mut rows = vec![row];
    if outcome.failure.is_some() {
        return (rows, groups);
    }
    let touched: BTreeSet<&str> = groups
        .iter()
        .flat_map(|g| g.memory_ids.iter().map(String::as_str))
        .collect();
    let mut parts: BTreeMap<usize, Vec<&MemoryView>> = BTreeMap::new();
    for m in &item.input.memories {
        if let Some(k) = m.cluster {
            parts.entry(k).or_default().push(m);
        }
    }
    if parts.len() < 2 {
        return (rows, groups);
    }
    for members in parts.values() {
        if members.iter().any(|m| touched.contains(m.id.as_str())) {
            continue;
        }
        let keyed: Vec<(&str, &str)> = members
            .iter()
            .map(|m| (m.id.as_str(), m.text.as_str()))
            .collect();
        let sig = signature(&keyed);
        let mut row = origin.row(&format!("{}-declined-{sig}", item.custom_id));
        row.source_ids = members.iter().map(|m| m.id.clone()).collect();
        row.target_id = Some(format!("cluster:{sig}"));
        row.classification = Some("NOT_PROPOSED".into());
        row.reasoning = Some("pass 1 proposed nothing for this cluster of the request".into());
        rows.push(row);
    }
    (rows, groups)
}

fn read_pack_proposal(
    origin: &Origin<'_>,
    item: &Item,
    outcome: &Outcome,
    counts: &mut BTreeMap<String, u64>,
    failures: &mut Vec<ItemFailure>,
) -> (AuditRow, Vec<ProposedGroup>) {
    let signature = signature_of(&item.custom_id);
    let mut row = origin.row(&item.custom_id);
    row.source_ids = item.input.memories.iter().map(|m| m.id.clone()).collect();
    row.target_id = Some(format!("cluster:{signature}"));
    if let Some(failure) = &outcome.failure {
        failures.push(ItemFailure {
            item: format!("cluster {signature}"),
            reason: format!("consolidate.propose: {failure}"),
        });
        row.classification = Some("FAILED".into());
        row.reasoning = Some(failure.to_string());
        return (row, Vec::new());
    }
    match &outcome.reply {
        Some(Reply::Propose(reply)) if !reply.groups.is_empty() => {
            add(counts, "groups_proposed", reply.groups.len() as u64);
            row.classification = Some("PROPOSED".into());
            row.reasoning = Some(
                reply
                    .groups
                    .iter()
                    .map(|g| g.reasoning.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            );
            row.after_state = Some(json!({ "groups": reply.groups }).to_string());
            (row, reply.groups.clone())
        }
        _ => {
            add(counts, "clusters_not_proposed", 1);
            row.classification = Some("NOT_PROPOSED".into());
            row.reasoning = Some("pass 1 proposed no consolidation".into());
            (row, Vec::new())
        }
    }
}

/// Pass 2's items for the groups pass 1 proposed for a cluster (its pass-1 item).
fn verify_items(cluster_item: &Item, groups: &[ProposedGroup]) -> Vec<Item> {
    groups
        .iter()
        .enumerate()
        .map(|(g, group)| Item {
            custom_id: format!("{}-group-{g}", cluster_item.custom_id),
            input: TaskInput {
                task: Task::ConsolidateVerify,
                memories: cluster_item
                    .input
                    .memories
                    .iter()
                    .filter(|m| group.memory_ids.contains(&m.id))
                    .cloned()
                    .collect(),
                proposal: Some(group.text.clone()),
                now: cluster_item.input.now.clone(),
                question: None,
            },
        })
        .collect()
}

/// What pass 1 said about a cluster, for reading pass 2's verdicts on it.
struct Proposal {
    members: Vec<String>,
    /// Pass 1's reasoning per proposed text.
    reasoning: BTreeMap<String, String>,
}

/// Pass 2's verdict on one group: the plan to apply, or its audit row (REJECTED, remembered
/// by the cluster's signature; FAILED, asked again later).
fn read_verdict(
    origin: &Origin<'_>,
    item: &Item,
    proposal: &Proposal,
    outcome: &Outcome,
    counts: &mut BTreeMap<String, u64>,
    failures: &mut Vec<ItemFailure>,
) -> std::result::Result<ApprovedGroup, Box<AuditRow>> {
    let signature = signature_of(&item.custom_id).to_string();
    let text = item.input.proposal.clone().unwrap_or_default();
    let first = proposal.reasoning.get(&text).cloned().unwrap_or_default();
    let mut row = Box::new(origin.row(&item.custom_id));
    row.source_ids = proposal.members.clone();
    row.target_id = Some(format!("cluster:{signature}"));
    if let Some(failure) = &outcome.failure {
        failures.push(ItemFailure {
            item: format!("cluster {signature}"),
            reason: format!("consolidate.verify: {failure}"),
        });
        row.classification = Some("FAILED".into());
        row.reasoning = Some(failure.to_string());
        return Err(row);
    }
    let verdict = match &outcome.reply {
        Some(Reply::Verify(verdict)) if verdict.approve => verdict,
        other => {
            add(counts, "groups_rejected", 1);
            let why = match other {
                Some(Reply::Verify(v)) => v.reasoning.clone(),
                _ => "no verdict".into(),
            };
            row.classification = Some("REJECTED".into());
            row.reasoning = Some(format!("pass 2 rejected: {why}; pass 1: {first}"));
            return Err(row);
        }
    };
    add(counts, "groups_approved", 1);
    let mut members: Vec<String> = item.input.memories.iter().map(|m| m.id.clone()).collect();
    members.sort();
    Ok(ApprovedGroup {
        key: format!("{}|{}", origin.key, item.custom_id),
        user: origin.user.to_string(),
        new_id: derived_id(&format!("consolidated|{}|{text}", members.join("|"))),
        members,
        texts: item
            .input
            .memories
            .iter()
            .map(|m| (m.id.clone(), m.text.clone()))
            .collect(),
        text,
        signature,
        confidence: verdict.confidence,
        reasoning: format!("pass 1: {first}; pass 2: {}", verdict.reasoning),
    })
}

/// Writes `rows` and each plan's audit row (APPROVED with the members and links before and
/// the new memory after, or STALE when a member was archived or changed since the judge read
/// it) in one commit, then applies the approved ones. Rows already in the log (a batch
/// applied again after a crash) are kept as they are, and their approved plans finished.
#[allow(clippy::too_many_arguments)]
async fn commit(
    store: &Store,
    embedder: Option<&Embedder>,
    run_id: &str,
    plans: Vec<ApprovedGroup>,
    mut rows: Vec<AuditRow>,
    now_micros: i64,
    counts: &mut BTreeMap<String, u64>,
    phases: &mut BTreeMap<String, u64>,
) -> Result<()> {
    let started = Instant::now();
    let keys: Vec<String> = plans
        .iter()
        .map(|p| item_key_id(run_id, &p.key))
        .chain(rows.iter().map(|r| r.id.clone()))
        .collect();
    let logged = store.audit_ids_present(&keys).await?;
    rows.retain(|r| !logged.contains(&r.id));
    let (done, plans): (Vec<ApprovedGroup>, Vec<ApprovedGroup>) = plans
        .into_iter()
        .partition(|p| logged.contains(&item_key_id(run_id, &p.key)));
    let users: BTreeSet<&str> = plans.iter().map(|p| p.user.as_str()).collect();
    let rows_by_id = users_rows(store, users.iter().copied()).await?;
    let mut links_of_user: BTreeMap<String, Vec<LinkRow>> =
        users.iter().map(|u| (u.to_string(), Vec::new())).collect();
    for link in rows_of_users::<LinkRow>(store, "links", users.iter().copied()).await? {
        links_of_user
            .entry(link.user_id.clone())
            .or_default()
            .push(link);
    }
    // Each plan's members as read now: the group folds when all are there, live, with the
    // texts the judge read, and none went into an earlier group of the run (full mode's layers).
    let judged =
        consolidation::judge_groups(run_id, plans, &rows_by_id, &links_of_user, now_micros);
    add(counts, "groups_stale", judged.stale);
    add(counts, "groups_overlapping", judged.overlapping);
    rows.extend(judged.audit);
    let mut ready: Vec<Planned> = judged
        .ready
        .into_iter()
        .map(|(group, memory)| (group, memory, now_micros))
        .collect();
    store.write_audit(&rows).await?;
    crate::crash::point("consolidate.after-audit");
    phase(phases, "log", started);
    if !done.is_empty() {
        let again: BTreeSet<&str> = done.iter().map(|p| p.new_id.as_str()).collect();
        ready.extend(
            unfinished(store, now_micros)
                .await?
                .into_iter()
                .filter(|(p, ..)| again.contains(p.new_id.as_str())),
        );
    }
    add(counts, "consolidated", ready.len() as u64);
    let started = Instant::now();
    let before = phases.get("embed").copied().unwrap_or(0);
    for (k, v) in apply(store, embedder, &ready, now_micros, phases).await? {
        add(counts, k, v);
    }
    // The apply phase is the writes; the embedding of the new memories is its own phase.
    let embedded = phases.get("embed").copied().unwrap_or(0) - before;
    let applied = (started.elapsed().as_millis() as u64).saturating_sub(embedded);
    *phases.entry("apply".into()).or_default() += applied;
    Ok(())
}

/// The id of the audit row keyed `key` (see `item_row`).
fn item_key_id(run_id: &str, key: &str) -> String {
    AuditRow::new(run_id, "CONSOLIDATE", key, 0).id
}

/// The latest clusters whose members are all live and unchanged, that were not declined
/// before and are not waiting in a batch, with their members' rows.
async fn candidates(
    ctx: &JobCtx<'_>,
    per_call: usize,
    counts: &mut BTreeMap<String, u64>,
) -> Result<Vec<(Candidate, Vec<MemoryRow>)>> {
    let declined = remembered(&ctx.store).await?;
    // Memories in consolidation batches of either round not applied yet.
    let pending =
        crate::llm::batch::memories_in_pending(&ctx.store, JobName::Consolidate.as_str()).await?;
    let mut candidates = Vec::new();
    let clusters = latest_clusters(ctx).await?;
    let users: BTreeSet<&str> = clusters.iter().map(|c| c.user.as_str()).collect();
    let rows = users_rows(&ctx.store, users).await?;
    for cluster in clusters {
        add(counts, "clusters", 1);
        let members: Vec<MemoryRow> = cluster
            .member_ids
            .iter()
            .filter_map(|id| rows.get(id).cloned())
            .collect();
        if members.len() != cluster.member_ids.len() || !members.iter().all(MemoryRow::is_live) {
            add(counts, "clusters_stale", 1);
            continue;
        }
        if rows_signature(&members) != cluster.signature {
            add(counts, "clusters_changed", 1);
            continue;
        }
        if declined.contains(&cluster.signature) {
            add(counts, "clusters_declined_before", 1);
            continue;
        }
        if cluster.member_ids.iter().any(|id| pending.contains(id)) {
            add(counts, "clusters_in_pending_batches", 1);
            continue;
        }
        candidates.push((cluster, members));
    }
    // Several small clusters per pass-1 request; a pack declined before is not asked again.
    let packed: Vec<(Candidate, Vec<MemoryRow>)> = pack(candidates, per_call)
        .into_iter()
        .filter(|(pack, _)| {
            let again = declined.contains(&pack.signature);
            if again {
                add(counts, "packs_declined_before", 1);
            }
            !again
        })
        .collect();
    add(counts, "requests", packed.len() as u64);
    Ok(packed)
}

pub async fn run(ctx: &JobCtx<'_>, args: &ConsolidateArgs) -> Result<JobReport> {
    let llm = ctx.app.llm(&args.llm).await?;
    let batch = llm.mode == CallMode::Batch;
    let params = json!({"mode": if batch { "batch" } else { "online" }, "now": now_param(ctx)});
    let log = RunLog::start(ctx, JobName::Consolidate.as_str(), &params).await?;
    let run_id = log.run_id().to_string();
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
        let pending: Vec<Planned> = unfinished(&ctx.store, now_micros)
            .await?
            .into_iter()
            .filter(|(plan, ..)| ctx.scope.contains(&plan.user))
            .collect();
        add(&mut counts, "resumed", pending.len() as u64);
        for (k, v) in apply(
            &ctx.store,
            Some(&embedder),
            &pending,
            now_micros,
            &mut report.phases_ms,
        )
        .await?
        {
            add(&mut counts, k, v);
        }
    }

    let started = Instant::now();
    let candidates = candidates(ctx, args.memories_per_call as usize, &mut counts).await?;
    report.phase("select", started);
    let items: Vec<Item> = candidates
        .iter()
        .map(|(cluster, members)| propose_item(cluster, members, &now))
        .collect();

    if batch {
        // Pass 1 goes out as one Batch API request set per user; `batches poll` applies it by
        // submitting pass 2, and the poll after that applies the approved groups.
        add(&mut counts, "items_to_submit", items.len() as u64);
        if !ctx.dry_run {
            let items = candidates.iter().map(|(c, _)| c.user.clone()).zip(items);
            log.submit_batches_by_user(
                ctx,
                &llm,
                (Task::ConsolidatePropose, items, "clusters (pass 1)"),
                &mut counts,
                &mut report.notes,
            )
            .await?;
        }
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }

    // Pass 1: proposals.
    let started = Instant::now();
    let proposals = llm.run(items.clone()).await;
    report.phase("propose", started);
    let mut rows = Vec::new();
    let mut verify = Vec::new();
    let mut proposed: BTreeMap<String, (String, Proposal)> = BTreeMap::new();
    for (((cluster, _), item), outcome) in candidates.iter().zip(&items).zip(&proposals) {
        let origin = Origin {
            run_id: &run_id,
            key: &run_id,
            user: &cluster.user,
            now: now_micros,
        };
        let (pack_rows, groups) =
            read_proposal(&origin, item, outcome, &mut counts, &mut report.failures);
        rows.extend(pack_rows);
        proposed.insert(
            cluster.signature.clone(),
            (
                cluster.user.clone(),
                Proposal {
                    members: cluster.member_ids.clone(),
                    reasoning: groups
                        .iter()
                        .map(|g| (g.text.clone(), g.reasoning.clone()))
                        .collect(),
                },
            ),
        );
        verify.extend(verify_items(item, &groups));
    }
    // Pass 2: one verification per proposed group.
    let started = Instant::now();
    let verdicts = llm.run(verify.clone()).await;
    report.phase("verify", started);
    let mut plans = Vec::new();
    for (item, outcome) in verify.iter().zip(&verdicts) {
        let (user, proposal) = &proposed[signature_of(&item.custom_id)];
        let origin = Origin {
            run_id: &run_id,
            key: &run_id,
            user,
            now: now_micros,
        };
        match read_verdict(
            &origin,
            item,
            proposal,
            outcome,
            &mut counts,
            &mut report.failures,
        ) {
            Ok(plan) => plans.push(plan),
            Err(row) => rows.push(*row),
        }
    }
    if !ctx.dry_run {
        // Every answer and plan is on record (one commit) before anything changes.
        commit(
            &ctx.store,
            Some(&embedder),
            &run_id,
            plans,
            rows,
            now_micros,
            &mut counts,
            &mut report.phases_ms,
        )
        .await?;
    }
    report.counts = counts;
    report.llm = Some(llm.usage(&[proposals, verdicts].concat()));
    log.finish(ctx, &mut report).await?;
    Ok(report)
}

fn now_param(ctx: &JobCtx<'_>) -> String {
    format_timestamp(ctx.now.timestamp_micros())
}

/// Applies `consolidate` batches for `batches poll`: a pass-1 batch is recorded and its
/// proposals go out as the pass-2 batch (under a key derived from the pass-1 batch, so a
/// poll applying it twice submits pass 2 once); a pass-2 batch is applied like the verdicts
/// of an online run.
pub struct ConsolidateApplier;

#[async_trait::async_trait]
impl Applier for ConsolidateApplier {
    async fn apply(
        &self,
        env: &ApplyEnv<'_>,
        record: &BatchRecord,
        items: &[Item],
        outcomes: &[Outcome],
    ) -> Result<BTreeMap<String, u64>> {
        let mut counts = BTreeMap::new();
        let mut failures = Vec::new();
        let user = record.user_id.clone().unwrap_or_default();
        let now = super::batch_clock(record, items)?;
        let origin = Origin {
            run_id: &record.run_id,
            key: &record.batch_key,
            user: &user,
            now,
        };
        match Task::from_name(&record.task) {
            Some(Task::ConsolidatePropose) => {
                let mut rows = Vec::new();
                let mut verify = Vec::new();
                for (item, outcome) in items.iter().zip(outcomes) {
                    let (pack_rows, groups) =
                        read_proposal(&origin, item, outcome, &mut counts, &mut failures);
                    rows.extend(pack_rows);
                    verify.extend(verify_items(item, &groups));
                }
                // Rows already written by an earlier attempt keep their time.
                let logged = env
                    .store
                    .audit_ids_present(&rows.iter().map(|r| r.id.clone()).collect::<Vec<_>>())
                    .await?;
                rows.retain(|r| !logged.contains(&r.id));
                env.store.write_audit(&rows).await?;
                crate::crash::point("consolidate.batch.after-proposals");
                if !verify.is_empty() {
                    let key = derived_id(&format!("consolidate.verify|{}", record.batch_key));
                    let exists = !crate::llm::batch::records(
                        env.store,
                        &format!("batch_key = {}", sql_string(&key)),
                    )
                    .await?
                    .is_empty();
                    if !exists {
                        match crate::llm::batch::submit_keyed(
                            env.store,
                            env.llm,
                            key,
                            JobName::Consolidate.as_str(),
                            &record.run_id,
                            record.user_id.as_deref(),
                            Task::ConsolidateVerify,
                            &verify,
                        )
                        .await
                        {
                            Ok(_) => {
                                add(&mut counts, "verify_items_submitted", verify.len() as u64)
                            }
                            // The record is kept as failed: `batches retry` resubmits it.
                            Err(e) => {
                                tracing::warn!(
                                    "submitting pass 2 of batch {}: {e:#}",
                                    record.batch_key
                                );
                                add(&mut counts, "verify_submissions_failed", 1);
                            }
                        }
                    }
                }
            }
            Some(Task::ConsolidateVerify) => {
                let proposals = proposals_of(env.store, items).await?;
                let mut rows = Vec::new();
                let mut plans = Vec::new();
                for (item, outcome) in items.iter().zip(outcomes) {
                    let empty = Proposal {
                        members: Vec::new(),
                        reasoning: BTreeMap::new(),
                    };
                    let proposal = proposals
                        .get(signature_of(&item.custom_id))
                        .unwrap_or(&empty);
                    match read_verdict(&origin, item, proposal, outcome, &mut counts, &mut failures)
                    {
                        Ok(plan) => plans.push(plan),
                        Err(row) => rows.push(*row),
                    }
                }
                let embedder = if plans.is_empty() {
                    None
                } else {
                    Some((env.embedder)()?)
                };
                let mut phases = BTreeMap::new();
                commit(
                    env.store,
                    embedder.as_ref(),
                    &record.run_id,
                    plans,
                    rows,
                    now,
                    &mut counts,
                    &mut phases,
                )
                .await?;
                for (name, ms) in phases {
                    add(&mut counts, &format!("{name}_ms"), ms);
                }
            }
            _ => bail!(
                "batch {}: consolidate does not apply task {}",
                record.batch_key,
                record.task
            ),
        }
        for failure in failures {
            tracing::warn!("{}: {}", failure.item, failure.reason);
        }
        Ok(counts)
    }

    fn result_keys(&self, record: &BatchRecord, items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|item| {
                item_key_id(
                    &record.run_id,
                    &format!("{}|{}", record.batch_key, item.custom_id),
                )
            })
            .collect()
    }
}

/// Pass 1's record of the clusters a pass-2 batch's items belong to, by signature: the
/// cluster's members and the reasoning of each proposed text.
async fn proposals_of(store: &Store, items: &[Item]) -> Result<BTreeMap<String, Proposal>> {
    let targets: BTreeSet<String> = items
        .iter()
        .map(|i| format!("cluster:{}", signature_of(&i.custom_id)))
        .collect();
    let list = targets
        .iter()
        .map(|t| sql_string(t))
        .collect::<Vec<_>>()
        .join(", ");
    let filter = format!(
        "operation = 'CONSOLIDATE' AND classification = 'PROPOSED' AND target_id IN ({list})"
    );
    #[derive(serde::Deserialize)]
    struct Proposed {
        target_id: Option<String>,
        source_ids: Option<Vec<String>>,
        after_state: Option<String>,
    }
    let mut out = BTreeMap::new();
    for row in store
        .scan_rows::<Proposed>(AUDIT_LOG.name, Some(&filter))
        .await?
    {
        let signature = row
            .target_id
            .as_deref()
            .unwrap_or("")
            .trim_start_matches("cluster:")
            .to_string();
        let after: Value =
            serde_json::from_str(row.after_state.as_deref().unwrap_or("{}")).unwrap_or_default();
        let reasoning = after["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| {
                (
                    g["text"].as_str().unwrap_or("").to_string(),
                    g["reasoning"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        out.insert(
            signature,
            Proposal {
                members: row.source_ids.unwrap_or_default(),
                reasoning,
            },
        );
    }
    Ok(out)
}
