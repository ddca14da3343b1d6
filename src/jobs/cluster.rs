//! `memlife cluster`: finds each user's groups of memories that may be one memory (seed 000
//! hub clustering; seed 001 full clustering), for `memlife consolidate` to judge. Rules in
//! `logic::cluster`; the similarity threshold is the embedding model's `cluster` threshold
//! (`[thresholds."MODEL"]`, 0.75 for all-MiniLM-L6-v2) unless `--threshold` says otherwise.
//! Writes one `clusters` row per cluster, a group of users' in one Lance commit; reads nothing
//! it writes, so a rerun simply finds the clusters again under a new run id (consolidate
//! reads each user's latest finished run).

use std::collections::BTreeMap;

use anyhow::{Result, anyhow};
use rayon::prelude::*;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::logic::cluster::{
    Cluster, ClusterParams, Member, PairSignals, assign, connected_hubs, describe_clusters, hubs,
    layered, never_recalled, scored_pairs, shared_names, signature, specific_terms,
};
use crate::logic::similarity::{SelfMatch, top_k};
use crate::model::clock::Clock;
use crate::model::schema::{CLUSTERS, LINKS, SHARES_ENTITY_PREFIX};
use crate::model::typed::{ClusterRow, cluster_batch};
use crate::store::sql_list;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterMode {
    /// Clusters grow from hub memories (important and used, or well linked; for a user
    /// nobody has recalled from yet, the best connected).
    Hubs,
    /// Complete linkage over every pair of neighbours and every pair naming one rare entity,
    /// in two rounds (a memory joins at most two clusters).
    Full,
}

impl ClusterMode {
    fn as_str(self) -> &'static str {
        match self {
            ClusterMode::Hubs => "hubs",
            ClusterMode::Full => "full",
        }
    }
}

/// Groups of similar memories around hubs (or all memories with `--mode full`), the
/// candidates of `memlife consolidate`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    #[arg(long, value_enum, default_value = "hubs")]
    pub mode: ClusterMode,
    /// Cosine similarity a memory needs to the cluster's seed. Default: the `cluster`
    /// threshold of the model that made the vectors (0.75 for all-MiniLM-L6-v2).
    #[arg(long, allow_negative_numbers = true)]
    pub threshold: Option<f32>,
    /// The clock the run computes at (RFC 3339): the clusters' `created_at`; default the current
    /// time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for ClusterArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

/// One user's live, embedded memories of their main embedding model.
#[derive(Default)]
struct UserMemories {
    members: Vec<Member>,
    texts: Vec<String>,
    vectors: Vec<f32>,
    model: String,
}

/// Users are read and clustered in groups of about this many live memories: one scan per
/// group instead of one per user (a store of many small users would otherwise pay a full
/// scan of the user column per user), with the group's vectors in memory at once.
const GROUP_ROWS: usize = 200_000;

const LIVE: &str = "state != 'archived' AND archived_at IS NULL AND embedding IS NOT NULL";

/// Live embedded memories per user (the user in scope, or every user), in user order.
async fn live_counts(ctx: &JobCtx<'_>) -> Result<BTreeMap<String, usize>> {
    let filter = ctx.user_filter_and(LIVE);
    let mut counts = BTreeMap::new();
    #[derive(serde::Deserialize)]
    struct Owner {
        user_id: String,
    }
    for row in ctx
        .store
        .scan_rows::<Owner>("memories", Some(&filter))
        .await?
    {
        *counts.entry(row.user_id).or_default() += 1;
    }
    Ok(counts)
}

/// Users in consecutive groups of at most `GROUP_ROWS` memories (a larger user alone).
fn groups(counts: &BTreeMap<String, usize>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut rows = 0;
    for (user, &n) in counts {
        if out.is_empty() || rows + n > GROUP_ROWS {
            out.push(Vec::new());
            rows = 0;
        }
        rows += n;
        if let Some(last) = out.last_mut() {
            last.push(user.clone());
        }
    }
    out
}

/// What clustering reads of a memory (its vector beside it).
#[derive(serde::Deserialize)]
struct Row {
    id: String,
    text: String,
    importance: f64,
    access_count: i64,
    embedding_model: Option<String>,
    user_id: String,
}

/// The live, embedded memories of a group of users, each user's of their main model: one
/// scan of the memories and one of the links for the whole group.
async fn load(ctx: &JobCtx<'_>, users: &[String]) -> Result<BTreeMap<String, UserMemories>> {
    let filter = format!("user_id IN ({}) AND {LIVE}", sql_list(users));
    let (rows, vectors) = ctx
        .store
        .scan_rows_with_vectors::<Row>("memories", &filter, "embedding")
        .await?;
    let inbound = inbound_links(ctx, users).await?;
    // Each user's main model first (similarities are only meaningful within one model).
    let mut models: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for row in &rows {
        *models
            .entry(&row.user_id)
            .or_default()
            .entry(row.embedding_model.as_deref().unwrap_or(""))
            .or_default() += 1;
    }
    let main: BTreeMap<String, String> = models
        .iter()
        .map(|(user, counts)| {
            (
                user.to_string(),
                crate::logic::entity_writes::most_used(counts),
            )
        })
        .collect();
    let dim = ctx.store.embedding_dim();
    let mut out: BTreeMap<String, UserMemories> = BTreeMap::new();
    for (row, vector) in rows.iter().zip(vectors.chunks_exact(dim)) {
        let Some(model) = main.get(&row.user_id) else {
            continue;
        };
        if row.embedding_model.as_deref().unwrap_or("") != model {
            continue;
        }
        let memories = out
            .entry(row.user_id.clone())
            .or_insert_with(|| UserMemories {
                model: model.clone(),
                ..UserMemories::default()
            });
        memories.members.push(Member {
            inbound_links: inbound
                .get(&(row.user_id.clone(), row.id.clone()))
                .copied()
                .unwrap_or(0),
            id: row.id.clone(),
            importance: row.importance,
            access_count: row.access_count,
        });
        memories.texts.push(row.text.clone());
        memories.vectors.extend_from_slice(vector);
    }
    Ok(out)
}

/// Inbound links per (user, memory) of a group of users, entity links (`shares_entity:*`)
/// excluded.
async fn inbound_links(
    ctx: &JobCtx<'_>,
    users: &[String],
) -> Result<BTreeMap<(String, String), i64>> {
    let filter = format!(
        "user_id IN ({}) AND link_type NOT LIKE '{}%'",
        sql_list(users),
        SHARES_ENTITY_PREFIX
    );
    let mut counts = BTreeMap::new();
    #[derive(serde::Deserialize)]
    struct Inbound {
        user_id: String,
        target_id: String,
    }
    for row in ctx
        .store
        .scan_rows::<Inbound>(LINKS.name, Some(&filter))
        .await?
    {
        *counts.entry((row.user_id, row.target_id)).or_default() += 1;
    }
    Ok(counts)
}

/// One user's clusters (and, in hub mode, how many hubs seeded them).
fn cluster_user(
    memories: &UserMemories,
    threshold: f32,
    mode: ClusterMode,
    params: &ClusterParams,
    dim: usize,
) -> (usize, Vec<Cluster>) {
    let neighbours_k = 2 * params.max_size;
    let (hub_count, groups) = match mode {
        // Nobody has recalled from this user yet: hubs are the well-connected memories.
        ClusterMode::Hubs if never_recalled(&memories.members) => {
            let neighbours = super::all_pairs_neighbours(&memories.vectors, dim, neighbours_k);
            let hub_rows = connected_hubs(&memories.members, &neighbours, threshold, params);
            (
                hub_rows.len(),
                assign(&hub_rows, &neighbours, threshold, params),
            )
        }
        ClusterMode::Hubs => {
            let hub_rows = hubs(&memories.members, params);
            let queries: Vec<f32> = hub_rows
                .iter()
                .flat_map(|&r| memories.vectors[r * dim..(r + 1) * dim].iter().copied())
                .collect();
            let self_rows: Vec<u32> = hub_rows.iter().map(|&r| r as u32).collect();
            let found = top_k(
                &queries,
                &memories.vectors,
                dim,
                neighbours_k,
                SelfMatch::Rows(&self_rows),
            );
            let mut neighbours = vec![Vec::new(); memories.members.len()];
            for (&row, list) in hub_rows.iter().zip(found) {
                neighbours[row] = list;
            }
            (
                hub_rows.len(),
                assign(&hub_rows, &neighbours, threshold, params),
            )
        }
        ClusterMode::Full => {
            let neighbours = super::all_pairs_neighbours(&memories.vectors, dim, neighbours_k);
            let texts: Vec<&str> = memories.texts.iter().map(String::as_str).collect();
            let terms = specific_terms(&texts, params.term_share);
            let names = shared_names(&texts, params.entity_max_memories);
            let signals = PairSignals {
                vectors: &memories.vectors,
                dim,
                terms: &terms,
                names: &names,
            };
            let pairs = scored_pairs(&neighbours, &signals, threshold, params);
            let groups = layered(
                memories.members.len(),
                &pairs,
                params.max_size,
                params.layers,
            )
            .into_iter()
            .filter(|g| g.len() >= params.min_size)
            .collect();
            (0, groups)
        }
    };
    let clusters = describe_clusters(groups, &memories.vectors, dim);
    (hub_count, clusters)
}

pub async fn run(ctx: &JobCtx<'_>, args: &ClusterArgs) -> Result<JobReport> {
    let config = ctx.app.config().await?;
    let params = &config.cluster;
    let log_params = serde_json::json!({
        "mode": args.mode.as_str(), "threshold": args.threshold, "cluster": params,
    });
    let log = RunLog::start(ctx, JobName::Cluster.as_str(), &log_params).await?;
    let mut report = JobReport::new(JobName::Cluster.as_str(), ctx);
    let dim = ctx.store.embedding_dim();
    let now = ctx.now.timestamp_micros();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut noted = std::collections::BTreeSet::new();
    for users in groups(&live_counts(ctx).await?) {
        let loaded = load(ctx, &users).await?;
        // Thresholds and notes in user order, then every user of the group clustered at once
        // (rayon across users; the all-pairs kernel is parallel within a user too).
        let mut work: Vec<(&String, &UserMemories, f32)> = Vec::new();
        for (user, memories) in &loaded {
            *counts.entry("users".into()).or_default() += 1;
            *counts.entry("memories".into()).or_default() += memories.members.len() as u64;
            if memories.members.len() < params.min_size {
                continue;
            }
            let threshold = match args.threshold {
                Some(t) => t,
                None => {
                    let (t, source) = config.thresholds_for(&memories.model);
                    if noted.insert(memories.model.clone()) {
                        report.notes.push(format!(
                            "cluster threshold {} ({} threshold of {}; --threshold overrides)",
                            t.cluster,
                            source.label(),
                            memories.model
                        ));
                    }
                    t.cluster
                }
            };
            work.push((user, memories, threshold));
        }
        let found: Vec<(usize, Vec<Cluster>)> = work
            .par_iter()
            .map(|&(_, memories, threshold)| {
                cluster_user(memories, threshold, args.mode, params, dim)
            })
            .collect();
        let mut rows: Vec<ClusterRow> = Vec::new();
        for (&(user, memories, threshold), (hub_count, clusters)) in work.iter().zip(&found) {
            if args.mode == ClusterMode::Hubs {
                *counts.entry("hubs".into()).or_default() += *hub_count as u64;
                if never_recalled(&memories.members) {
                    // Hubs by connections: this user has no access history.
                    *counts.entry("hubs_by_connections".into()).or_default() += *hub_count as u64;
                }
            }
            *counts.entry("clusters".into()).or_default() += clusters.len() as u64;
            // Memories in some cluster, and their memberships (full mode's layers let a memory
            // join more than one).
            let distinct: std::collections::BTreeSet<usize> = clusters
                .iter()
                .flat_map(|c| c.members.iter().copied())
                .collect();
            *counts.entry("clustered_memories".into()).or_default() += distinct.len() as u64;
            *counts.entry("memberships".into()).or_default() +=
                clusters.iter().map(|c| c.members.len() as u64).sum::<u64>();
            for c in clusters {
                let ids: Vec<&str> = c
                    .members
                    .iter()
                    .map(|&m| memories.members[m].id.as_str())
                    .collect();
                let keyed: Vec<(&str, &str)> = c
                    .members
                    .iter()
                    .map(|&m| (memories.members[m].id.as_str(), memories.texts[m].as_str()))
                    .collect();
                let rounded: Vec<f32> = c
                    .pairwise
                    .iter()
                    .map(|s| (*s * 1e4).round() / 1e4)
                    .collect();
                rows.push(ClusterRow {
                    run_id: log.run_id().to_string(),
                    user_id: user.to_string(),
                    mode: args.mode.as_str().to_string(),
                    seed_id: ids[0].to_string(),
                    member_ids: ids.iter().map(|s| s.to_string()).collect(),
                    similarities: serde_json::to_string(&rounded).unwrap_or_default(),
                    confidence: Some((c.confidence as f64 * 1e4).round() / 1e4),
                    // As written (0.9, not 0.8999999761581421): the shortest decimal of the f32.
                    threshold: threshold.to_string().parse().ok(),
                    signature: signature(&keyed),
                    created_at: now,
                    ..ClusterRow::default()
                });
            }
        }
        if rows.is_empty() || ctx.dry_run {
            continue;
        }
        let batch = cluster_batch(&rows).map_err(|e| anyhow!(e))?;
        crate::crash::point("cluster.before-write");
        ctx.store.upsert_batch(&CLUSTERS, batch).await?;
    }
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
