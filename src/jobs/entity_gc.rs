//! `memlife entity-gc` (monthly, seed 000): keeps the entity side of the graph clean.
//!
//! - Near-duplicate entities of a user are merged (`logic::entity_gc` says which and why): the
//!   survivor keeps the other names as aliases, takes over their `memory_entities` rows, and
//!   its `shares_entity` chain is rebuilt over all its memories; the merged entities go.
//! - An entity no live memory names is archived (`archived_at`); one archived for longer than
//!   the grace period (default 30 days, by `--now`) is deleted with its remaining
//!   `memory_entities` rows (those of archived memories). An archived entity a live memory
//!   names again is brought back.
//! - `memory_entities` rows of memories that no longer exist are dropped.
//!
//! Every merge, archive and deletion is written to `audit_log` (with the entity as it was and
//! the memories that named it) before any of them happens; each write is one Lance commit and
//! every step is an upsert or a delete of what the plan names, so a run killed at any point is
//! completed by the next: the merged entities are deleted last, and until then the same plan
//! is found again. `--dry-run` reports every merge and removal without writing.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde_json::json;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::logic::entity_gc::{GcEntity, GcPlan, StoredEntity, plan_gc, shares_entity_chain};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{ENTITIES, LINKS, MEMORY_ENTITIES, SHARES_ENTITY_PREFIX};
use crate::model::typed::{EntityRow, LinkRow, MemoryEntityRow};
use crate::store::audit::AuditRow;
use crate::store::{sql_list, sql_string, sql_timestamp};

/// Monthly entity garbage collection: merge near-duplicates, archive entities no live memory
/// names, delete them after a grace period.
#[derive(clap::Args, Debug, Clone)]
pub struct EntityGcArgs {
    /// Days an entity stays archived before it is deleted.
    #[arg(long, default_value_t = 30)]
    pub grace_days: i64,
    /// Also merge entities of one type whose name embeddings are at least this similar.
    #[arg(long)]
    pub merge_similarity: Option<f32>,
    /// Do not merge; only archive and delete.
    #[arg(long)]
    pub no_merge: bool,
    /// Earlier memories naming the entity each memory is linked to (as `memlife entities`).
    #[arg(long, default_value_t = 3)]
    pub links_per_memory: usize,
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for EntityGcArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

/// The report lists this many actions; `audit_log` holds every one.
const LISTED: usize = 200;

struct Entity {
    id: String,
    user: String,
    name: String,
    entity_type: String,
    aliases: Vec<String>,
    archived_at: Option<i64>,
    vector: Option<Vec<f32>>,
}

/// A memory as the GC sees it: when it was made, and whether it is live.
struct MemoryInfo {
    created_at: i64,
    live: bool,
}

fn user_filter(ctx: &JobCtx<'_>) -> Option<String> {
    super::entities::scope_filter(ctx, None)
}

async fn load_entities(ctx: &JobCtx<'_>, with_vectors: bool) -> Result<Vec<Entity>> {
    /// An entity row as the GC reads it; `WithVector` adds the vector merging by similarity
    /// compares.
    #[derive(serde::Deserialize)]
    struct Row {
        id: String,
        user_id: String,
        name: String,
        entity_type: String,
        aliases: Option<Vec<String>>,
        archived_at: Option<i64>,
    }
    #[derive(serde::Deserialize)]
    struct WithVector {
        id: String,
        user_id: String,
        name: String,
        entity_type: String,
        aliases: Option<Vec<String>>,
        archived_at: Option<i64>,
        embedding: Option<Vec<f32>>,
    }
    let entity = |r: Row, vector: Option<Vec<f32>>| Entity {
        id: r.id,
        user: r.user_id,
        name: r.name,
        entity_type: r.entity_type,
        aliases: r.aliases.unwrap_or_default(),
        archived_at: r.archived_at,
        vector,
    };
    let filter = user_filter(ctx);
    let mut out: Vec<Entity> = if with_vectors {
        let rows: Vec<WithVector> = ctx
            .store
            .scan_rows(ENTITIES.name, filter.as_deref())
            .await?;
        rows.into_iter()
            .map(|r| {
                let row = Row {
                    id: r.id,
                    user_id: r.user_id,
                    name: r.name,
                    entity_type: r.entity_type,
                    aliases: r.aliases,
                    archived_at: r.archived_at,
                };
                entity(row, r.embedding)
            })
            .collect()
    } else {
        let rows: Vec<Row> = ctx
            .store
            .scan_rows(ENTITIES.name, filter.as_deref())
            .await?;
        rows.into_iter().map(|r| entity(r, None)).collect()
    };
    out.sort_by(|a, b| (&a.user, &a.id).cmp(&(&b.user, &b.id)));
    Ok(out)
}

async fn load_memories(ctx: &JobCtx<'_>) -> Result<BTreeMap<String, MemoryInfo>> {
    #[derive(serde::Deserialize)]
    struct Row {
        id: String,
        state: String,
        archived_at: Option<i64>,
        created_at: i64,
    }
    let rows: Vec<Row> = ctx
        .store
        .scan_rows("memories", user_filter(ctx).as_deref())
        .await?;
    let out = rows
        .into_iter()
        .map(|r| {
            let live = r.state != "archived" && r.archived_at.is_none();
            (
                r.id,
                MemoryInfo {
                    created_at: r.created_at,
                    live,
                },
            )
        })
        .collect();
    Ok(out)
}

/// The whole entity rows of `ids`, by id.
async fn full_rows(ctx: &JobCtx<'_>, ids: &BTreeSet<&str>) -> Result<BTreeMap<String, EntityRow>> {
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    Ok(ctx
        .store
        .rows_with_ids::<EntityRow>(ENTITIES.name, &ids, None)
        .await?
        .into_iter()
        .map(|row| (row.id.clone(), row))
        .collect())
}

/// An entity row for the audit log: everything but the vectors (re-made from the name), with
/// the memories that named it.
fn snapshot(row: Option<&EntityRow>, memories: &[&str]) -> String {
    let mut row = row.map_or_else(|| json!({}), EntityRow::to_json);
    row["memory_ids"] = json!(memories);
    row.to_string()
}

fn link_type(name: &str) -> String {
    format!("{SHARES_ENTITY_PREFIX}{name}")
}

pub async fn run(ctx: &JobCtx<'_>, args: &EntityGcArgs) -> Result<JobReport> {
    let params = json!({
        "grace_days": args.grace_days,
        "merge_similarity": args.merge_similarity,
        "no_merge": args.no_merge,
        "links_per_memory": args.links_per_memory,
        "now": format_timestamp(ctx.now.timestamp_micros()),
    });
    let log = RunLog::start(ctx, JobName::EntityGc.as_str(), &params).await?;
    let mut report = JobReport::new(JobName::EntityGc.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let now = ctx.now.timestamp_micros();
    let grace_cutoff = now - args.grace_days * 86_400_000_000;

    let entities = load_entities(ctx, args.merge_similarity.is_some() && !args.no_merge).await?;
    let memories = load_memories(ctx).await?;
    let memberships =
        super::entities::memberships(&ctx.store, ctx.user_filter().as_deref()).await?;
    counts.insert("entities".into(), entities.len() as u64);

    // Rows naming a memory that no longer exists.
    let orphan_rows: Vec<&(String, String, String)> = memberships
        .iter()
        .filter(|(m, _, _)| !memories.contains_key(m))
        .collect();
    counts.insert("orphan_memory_entities".into(), orphan_rows.len() as u64);
    let mut named_by: BTreeMap<&str, Vec<&str>> = BTreeMap::new(); // entity -> existing memories
    for (m, e, _) in &memberships {
        if memories.contains_key(m) {
            named_by.entry(e.as_str()).or_default().push(m.as_str());
        }
    }
    let live_refs = |id: &str| {
        named_by
            .get(id)
            .map_or(0, |ms| ms.iter().filter(|m| memories[**m].live).count())
    };
    let stored: Vec<StoredEntity> = entities
        .iter()
        .map(|e| StoredEntity {
            entity: GcEntity {
                id: e.id.clone(),
                name: e.name.clone(),
                entity_type: e.entity_type.clone(),
                aliases: e.aliases.clone(),
                references: live_refs(&e.id),
            },
            user: e.user.clone(),
            archived_at: e.archived_at,
            vector: e.vector.clone(),
        })
        .collect();
    let plan = plan_gc(
        &stored,
        (!args.no_merge).then_some(args.merge_similarity),
        grace_cutoff,
    );
    counts.insert("merged".into(), plan.merges.len() as u64);
    counts.insert("archived".into(), plan.archive.len() as u64);
    counts.insert("revived".into(), plan.revive.len() as u64);
    counts.insert("deleted".into(), plan.delete.len() as u64);
    let listed = listing(&entities, &plan);
    let total = listed.len();
    report.notes.extend(listed.into_iter().take(LISTED));
    if total > LISTED {
        report.notes.push(format!(
            "... and {} more (audit_log has every one)",
            total - LISTED
        ));
    }

    if ctx.dry_run {
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }

    // The audit rows, before anything changes.
    let touched: BTreeSet<&str> = plan
        .merged()
        .iter()
        .chain(plan.absorbed.keys())
        .chain(&plan.delete)
        .map(|&i| entities[i].id.as_str())
        .collect();
    let rows = full_rows(ctx, &touched).await?;
    let mut audit = audit_rows(&entities, &plan, &rows, &named_by, args, log.run_id(), now);
    // A rerun after a crash keeps the rows the first run wrote (the rule that found a merge
    // may read differently once the survivor holds the merged name as an alias).
    let ids: Vec<String> = audit.iter().map(|r| r.id.clone()).collect();
    let present = ctx.store.audit_ids_present(&ids).await?;
    audit.retain(|r| !present.contains(&r.id));
    for chunk in audit.chunks(20_000) {
        ctx.store.write_audit(chunk).await?;
    }
    crate::crash::point("entity-gc.after-audit");

    // Merges: survivors with the merged names as aliases, their memory_entities rows, the
    // rebuilt chains, then the merged entities' own rows.
    if !plan.merges.is_empty() {
        let links =
            apply_merges(ctx, &entities, &plan, &rows, &memberships, &memories, args).await?;
        counts.insert("links_rewritten".into(), links.0);
        counts.insert("links_removed".into(), links.1);
    }
    apply_lifecycle(ctx, &entities, &plan, &orphan_rows, now).await?;
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}

/// One line per action of `plan`, for the report.
fn listing(entities: &[Entity], plan: &GcPlan) -> Vec<String> {
    let (merges, to_archive, to_revive, to_delete) =
        (&plan.merges, &plan.archive, &plan.revive, &plan.delete);
    let mut listed = Vec::new();
    for &(s, m, rule) in merges {
        listed.push(format!(
            "merge: {} '{}' ({}) into '{}' ({}), rule {rule}",
            entities[m].user,
            entities[m].name,
            entities[m].entity_type,
            entities[s].name,
            entities[s].entity_type
        ));
    }
    for (verb, list) in [
        ("archive", to_archive),
        ("revive", to_revive),
        ("delete", to_delete),
    ] {
        for &i in list {
            listed.push(format!(
                "{verb}: {} '{}' ({})",
                entities[i].user, entities[i].name, entities[i].entity_type
            ));
        }
    }
    listed
}

/// The audit rows of `plan`, written before anything changes: each merge with the merged
/// entity's row, each archival, each deletion with the deleted row.
#[allow(clippy::too_many_arguments)]
fn audit_rows(
    entities: &[Entity],
    plan: &GcPlan,
    rows: &BTreeMap<String, EntityRow>,
    named_by: &BTreeMap<&str, Vec<&str>>,
    args: &EntityGcArgs,
    run_id: &str,
    now: i64,
) -> Vec<AuditRow> {
    let (merges, to_archive, to_delete) = (&plan.merges, &plan.archive, &plan.delete);
    let refs_of = |id: &str| named_by.get(id).cloned().unwrap_or_default();
    let mut audit = Vec::new();
    for &(s, m, rule) in merges {
        let (e, into) = (&entities[m], &entities[s]);
        let mut row = AuditRow::new(
            run_id,
            "ENTITY_MERGE",
            &format!("{}|{}", e.id, into.id),
            now,
        );
        row.user_id = Some(e.user.clone());
        row.source_ids = vec![e.id.clone()];
        row.target_id = Some(into.id.clone());
        row.classification = Some(rule.to_string());
        row.reasoning = Some(format!(
            "'{}' and '{}' name the same {} (rule {rule})",
            e.name, into.name, into.entity_type
        ));
        row.before_state = Some(snapshot(rows.get(&e.id), &refs_of(&e.id)));
        row.after_state = Some(json!({"merged_into": into.id, "name": into.name}).to_string());
        audit.push(row);
    }
    for (operation, list) in [("ENTITY_ARCHIVE", to_archive), ("ENTITY_DELETE", to_delete)] {
        for &i in list {
            let e = &entities[i];
            let mut row = AuditRow::new(
                run_id,
                operation,
                &format!("{}|{}", e.id, e.archived_at.unwrap_or(0)),
                now,
            );
            row.user_id = Some(e.user.clone());
            row.source_ids = vec![e.id.clone()];
            row.classification = Some(e.entity_type.clone());
            row.reasoning = Some(if operation == "ENTITY_ARCHIVE" {
                format!("no live memory names '{}'", e.name)
            } else {
                format!(
                    "'{}' archived for more than {} days and named by no live memory",
                    e.name, args.grace_days
                )
            });
            row.before_state = Some(if operation == "ENTITY_DELETE" {
                snapshot(rows.get(&e.id), &refs_of(&e.id))
            } else {
                json!({"archived_at": null}).to_string()
            });
            audit.push(row);
        }
    }
    audit
}

/// Applies the merges of `plan`: survivors with the merged names as aliases, their
/// memory_entities rows, the rebuilt chains, then the merged entities' own rows. Returns the
/// links rewritten and removed.
async fn apply_merges(
    ctx: &JobCtx<'_>,
    entities: &[Entity],
    plan: &GcPlan,
    rows: &BTreeMap<String, EntityRow>,
    memberships: &[(String, String, String)],
    memories: &BTreeMap<String, MemoryInfo>,
    args: &EntityGcArgs,
) -> Result<(u64, u64)> {
    let now = ctx.now.timestamp_micros();
    let (merges, absorbed, merged) = (&plan.merges, &plan.absorbed, plan.merged());
    let mut survivor_rows = Vec::new();
    for &s in absorbed.keys() {
        let Some(row) = rows.get(&entities[s].id).cloned() else {
            continue;
        };
        let mut aliases = entities[s].aliases.clone();
        let mut notes = row.notes.clone();
        let mut description = row.description.clone();
        for &m in &absorbed[&s] {
            let e = &entities[m];
            for name in std::iter::once(&e.name).chain(&e.aliases) {
                if *name != entities[s].name && !aliases.contains(name) {
                    aliases.push(name.clone());
                }
            }
            if let Some(other) = rows.get(&e.id) {
                for note in &other.notes {
                    if !notes.contains(note) {
                        notes.push(note.clone());
                    }
                }
                if description.is_none() {
                    description = other.description.clone();
                }
            }
        }
        survivor_rows.push(EntityRow {
            aliases,
            notes,
            description,
            // The description is reconsidered by `memlife describe` with the merged notes.
            is_dirty: true,
            updated_at: now,
            ..row
        });
    }
    ctx.store.upsert_entities(&survivor_rows, now).await?;

    let into: BTreeMap<&str, usize> = merges
        .iter()
        .map(|&(s, m, _)| (entities[m].id.as_str(), s))
        .collect();
    let moved: Vec<MemoryEntityRow> = memberships
        .iter()
        .filter(|(mem, _, _)| memories.contains_key(mem))
        .filter_map(|(mem, e, user)| {
            into.get(e.as_str()).map(|&s| MemoryEntityRow {
                memory_id: mem.clone(),
                entity_id: entities[s].id.clone(),
                user_id: user.clone(),
            })
        })
        .collect();
    for chunk in moved.chunks(50_000) {
        ctx.store.upsert_memory_entities(chunk).await?;
    }
    crate::crash::point("entity-gc.after-survivors");
    let links = rebuild_chains(ctx, entities, plan, memberships, memories, args).await?;
    crate::crash::point("entity-gc.after-links");
    let gone: Vec<String> = merged.iter().map(|&m| entities[m].id.clone()).collect();
    delete_entities(ctx, &gone).await?;
    crate::crash::point("entity-gc.after-merges");
    Ok(links)
}

/// Deletes entities and their `memory_entities` rows, a thousand at a time.
async fn delete_entities(ctx: &JobCtx<'_>, ids: &[String]) -> Result<()> {
    for chunk in ids.chunks(1000) {
        let list = sql_list(chunk);
        ctx.store
            .delete_where(MEMORY_ENTITIES.name, &format!("entity_id IN ({list})"))
            .await?;
        ctx.store
            .delete_where(ENTITIES.name, &format!("id IN ({list})"))
            .await?;
    }
    Ok(())
}

/// Archives and revives (one commit each), then deletes, the entities `plan` names, and
/// removes the `memory_entities` rows of memories that no longer exist.
async fn apply_lifecycle(
    ctx: &JobCtx<'_>,
    entities: &[Entity],
    plan: &GcPlan,
    orphan_rows: &[&(String, String, String)],
    now: i64,
) -> Result<()> {
    let (to_archive, to_revive, to_delete) = (&plan.archive, &plan.revive, &plan.delete);
    let stamp = sql_timestamp(now);
    for (list, value) in [(&to_archive, stamp.as_str()), (&to_revive, "NULL")] {
        let ids: Vec<String> = list.iter().map(|&i| entities[i].id.clone()).collect();
        for chunk in ids.chunks(1000) {
            ctx.store
                .update_where(
                    ENTITIES.name,
                    &format!("id IN ({})", sql_list(chunk)),
                    &[
                        ("archived_at", value.to_string()),
                        ("updated_at", stamp.clone()),
                    ],
                )
                .await?;
        }
    }
    crate::crash::point("entity-gc.after-archive");
    let ids: Vec<String> = to_delete.iter().map(|&i| entities[i].id.clone()).collect();
    delete_entities(ctx, &ids).await?;
    let orphans: Vec<String> = orphan_rows
        .iter()
        .map(|(m, _, _)| m.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for chunk in orphans.chunks(1000) {
        ctx.store
            .delete_where(
                MEMORY_ENTITIES.name,
                &format!("memory_id IN ({})", sql_list(chunk)),
            )
            .await?;
    }
    Ok(())
}

/// The chains of every entity of the users whose names a merge touched, from the memberships
/// as they are after the merge (a name shared by two entities of different types keeps both
/// entities' links); the stale links of those names removed. Returns (written, removed).
async fn rebuild_chains(
    ctx: &JobCtx<'_>,
    entities: &[Entity],
    plan: &GcPlan,
    memberships: &[(String, String, String)],
    memories: &BTreeMap<String, MemoryInfo>,
    args: &EntityGcArgs,
) -> Result<(u64, u64)> {
    let now = ctx.now.timestamp_micros();
    let (merges, merged) = (&plan.merges, plan.merged());
    let into: BTreeMap<&str, usize> = merges
        .iter()
        .map(|&(s, m, _)| (entities[m].id.as_str(), s))
        .collect();

    // Chains of every entity of the users whose names a merge touched, from the
    // memberships as they are after the merge (a name shared by two entities of different
    // types keeps both entities' links).
    let mut members: BTreeMap<&str, Vec<(i64, String)>> = BTreeMap::new();
    for (mem, e, _) in memberships {
        let Some(info) = memories.get(mem) else {
            continue;
        };
        if !info.live {
            continue;
        }
        let owner = into
            .get(e.as_str())
            .map_or(e.as_str(), |&s| entities[s].id.as_str());
        members
            .entry(owner)
            .or_default()
            .push((info.created_at, mem.clone()));
    }
    let mut affected: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new(); // user -> names
    for &(s, m, _) in merges {
        let names = affected.entry(entities[s].user.as_str()).or_default();
        names.insert(entities[s].name.as_str());
        names.insert(entities[m].name.as_str());
    }
    let mut wanted: BTreeSet<(String, String, String)> = BTreeSet::new();
    let mut users_of_link: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for (i, e) in entities.iter().enumerate() {
        if merged.contains(&i)
            || !affected
                .get(e.user.as_str())
                .is_some_and(|n| n.contains(e.name.as_str()))
        {
            continue;
        }
        let Some(list) = members.get_mut(e.id.as_str()) else {
            continue;
        };
        list.sort();
        list.dedup();
        for (a, b) in shares_entity_chain(list, args.links_per_memory) {
            let key = (list[a].1.clone(), list[b].1.clone(), link_type(&e.name));
            users_of_link.insert(key.clone(), e.user.clone());
            wanted.insert(key);
        }
    }
    let rows: Vec<LinkRow> = wanted
        .iter()
        .map(|k| LinkRow::structural((&k.0, &k.1, &users_of_link[k]), &k.2, now))
        .collect();
    for chunk in rows.chunks(50_000) {
        ctx.store.upsert_links(chunk, now).await?;
    }
    // Stale links of the touched names: what the merged entities' chains had.
    let mut stale = Vec::new();
    for (user, names) in &affected {
        let types: Vec<String> = names.iter().map(|n| link_type(n)).collect();
        let filter = format!(
            "user_id = {} AND link_type IN ({})",
            sql_string(user),
            sql_list(&types)
        );
        #[derive(serde::Deserialize)]
        struct Link {
            source_id: String,
            target_id: String,
            link_type: String,
        }
        for link in ctx
            .store
            .scan_rows::<Link>(LINKS.name, Some(&filter))
            .await?
        {
            let key = (link.source_id, link.target_id, link.link_type);
            if !wanted.contains(&key) {
                stale.push(key);
            }
        }
    }
    let keys: Vec<(&str, &str, &str)> = stale
        .iter()
        .map(|(s, t, ty)| (s.as_str(), t.as_str(), ty.as_str()))
        .collect();
    ctx.store.delete_links(&keys).await?;
    Ok((rows.len() as u64, stale.len() as u64))
}
