//! `memlife traverse ID`: breadth-first over links in both directions (seed 000 "Link
//! Traversal"), each memory reached once at its shortest depth, so cycles end the walk
//! instead of looping. Each level is two indexed reads: the links touching the frontier, then
//! the memories at their other ends.
//!
//! Heal-on-read (seed 000): a link whose other end is no longer a memory is dead. Dead links
//! met on the way are removed (each logged to `audit_log` as HEAL before the delete) and
//! counted in the report; `--no-heal` only reports them. Links to archived memories are
//! followed and the memories marked.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::time::Instant;

use anyhow::{Result, bail};
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Float64Type;
use datafusion::prelude::{Expr, col, lit};
use futures::TryStreamExt;
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use serde::Serialize;
use serde_json::json;

use crate::app::App;
use crate::exit::ExitStatus;
use crate::model::schema::{LINKS, SHARES_ENTITY_PREFIX};
use crate::store::Store;
use crate::store::audit::AuditRow;

/// Walk the link graph from one memory, both directions, breadth-first.
#[derive(clap::Args, Debug, Clone)]
pub struct TraverseArgs {
    /// The memory to start from.
    pub id: String,
    /// Links away from the start.
    #[arg(long, default_value_t = 2)]
    pub depth: usize,
    /// Follow only these link types (comma-separated; `shares_entity` means every
    /// `shares_entity:{Name}` link).
    #[arg(long, value_delimiter = ',')]
    pub types: Vec<String>,
    /// Follow only links at least this confident.
    #[arg(long, default_value_t = 0.0)]
    pub min_confidence: f64,
    /// Stop after this many memories (the start included); the report says it stopped.
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
    /// Report dead links without removing them.
    #[arg(long)]
    pub no_heal: bool,
}

/// One memory reached, with the link it was first reached by.
#[derive(Clone, Debug, Serialize)]
pub struct Reached {
    pub id: String,
    pub depth: usize,
    /// The link from the previous memory on the path (none for the start).
    pub link_type: Option<String>,
    /// `out` when the previous memory is the link's source, `in` when it is the target.
    pub direction: Option<&'static str>,
    pub confidence: Option<f64>,
    /// Memory ids from the start to this one.
    pub path: Vec<String>,
    pub state: String,
    pub archived: bool,
    pub text: String,
}

/// A link whose other end is not a memory.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeadLink {
    pub source_id: String,
    pub target_id: String,
    pub link_type: String,
    pub missing: String,
}

#[derive(Debug, Serialize)]
pub struct Traversal {
    pub start: String,
    pub depth: usize,
    pub memories: Vec<Reached>,
    pub links_followed: usize,
    pub archived_reached: usize,
    pub dead_links: Vec<DeadLink>,
    pub dead_links_removed: usize,
    pub truncated: bool,
    pub duration_ms: f64,
}

struct Link {
    source: String,
    target: String,
    link_type: String,
    confidence: f64,
}

/// The walk's reader: the two tables opened once.
pub struct Walker {
    memories: lancedb::Table,
    links: lancedb::Table,
}

impl Walker {
    pub async fn open(store: &Store) -> Result<Walker> {
        Ok(Walker {
            memories: store.table("memories").await?,
            links: store.table(LINKS.name).await?,
        })
    }

    /// The links touching `ids` (either end), filtered as `--types` and `--min-confidence`
    /// ask. The filter is a DataFusion expression, not SQL text: a level's list of up to 1000
    /// ids is not printed and parsed again on every read.
    async fn links_of(&self, ids: &[String], filter: &Option<Expr>) -> Result<Vec<Link>> {
        let mut out = Vec::new();
        for chunk in ids.chunks(1000) {
            let mut condition = id_in("source_id", chunk).or(id_in("target_id", chunk));
            if let Some(filter) = filter {
                condition = condition.and(filter.clone());
            }
            let batches: Vec<RecordBatch> = self
                .links
                .query()
                .only_if_expr(condition)
                .select(Select::columns(&[
                    "source_id",
                    "target_id",
                    "link_type",
                    "confidence",
                ]))
                .execute()
                .await?
                .try_collect()
                .await?;
            for batch in &batches {
                let sources = batch.column(0).as_string::<i32>();
                let targets = batch.column(1).as_string::<i32>();
                let types = batch.column(2).as_string::<i32>();
                let confidences = batch.column(3).as_primitive::<Float64Type>();
                for row in 0..batch.num_rows() {
                    out.push(Link {
                        source: sources.value(row).to_string(),
                        target: targets.value(row).to_string(),
                        link_type: types.value(row).to_string(),
                        confidence: if confidences.is_valid(row) {
                            confidences.value(row)
                        } else {
                            1.0
                        },
                    });
                }
            }
        }
        Ok(out)
    }

    /// The user of each dead link (for its HEAL audit row), read only when there are any.
    async fn users_of(&self, dead: &BTreeSet<DeadLink>) -> Result<BTreeMap<DeadLink, String>> {
        let mut out = BTreeMap::new();
        let sources: Vec<String> = dead
            .iter()
            .map(|d| d.source_id.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for chunk in sources.chunks(1000) {
            let batches: Vec<RecordBatch> = self
                .links
                .query()
                .only_if_expr(id_in("source_id", chunk))
                .select(Select::columns(&[
                    "source_id",
                    "target_id",
                    "link_type",
                    "user_id",
                ]))
                .execute()
                .await?
                .try_collect()
                .await?;
            for batch in &batches {
                let sources = batch.column(0).as_string::<i32>();
                let targets = batch.column(1).as_string::<i32>();
                let types = batch.column(2).as_string::<i32>();
                let users = batch.column(3).as_string::<i32>();
                for row in 0..batch.num_rows() {
                    if let Some(d) = dead.iter().find(|d| {
                        d.source_id == sources.value(row)
                            && d.target_id == targets.value(row)
                            && d.link_type == types.value(row)
                    }) {
                        out.insert(d.clone(), users.value(row).to_string());
                    }
                }
            }
        }
        Ok(out)
    }

    /// id -> (state, archived) of the memories among `ids`: what tells a live end from a
    /// dead one. Texts are read apart (`texts_of`), only for the memories a walk returns.
    async fn memories_of(&self, ids: &[String]) -> Result<HashMap<String, (String, bool)>> {
        let mut out = HashMap::new();
        for chunk in ids.chunks(1000) {
            let batches: Vec<RecordBatch> = self
                .memories
                .query()
                .only_if_expr(id_in("id", chunk))
                .select(Select::columns(&["id", "state", "archived_at"]))
                .execute()
                .await?
                .try_collect()
                .await?;
            for batch in &batches {
                let ids = batch.column(0).as_string::<i32>();
                let states = batch.column(1).as_string::<i32>();
                let archived = batch.column(2);
                for row in 0..batch.num_rows() {
                    let state = states.value(row).to_string();
                    let is_archived = archived.is_valid(row) || state == "archived";
                    out.insert(ids.value(row).to_string(), (state, is_archived));
                }
            }
        }
        Ok(out)
    }

    /// id -> text of the memories among `ids`.
    async fn texts_of(&self, ids: &[String]) -> Result<HashMap<String, String>> {
        let mut out = HashMap::new();
        for chunk in ids.chunks(1000) {
            let batches: Vec<RecordBatch> = self
                .memories
                .query()
                .only_if_expr(id_in("id", chunk))
                .select(Select::columns(&["id", "text"]))
                .execute()
                .await?
                .try_collect()
                .await?;
            for batch in &batches {
                let ids = batch.column(0).as_string::<i32>();
                let texts = batch.column(1).as_string::<i32>();
                for row in 0..batch.num_rows() {
                    out.insert(ids.value(row).to_string(), texts.value(row).to_string());
                }
            }
        }
        Ok(out)
    }

    /// The walk itself; dead links are collected, not removed (see `heal`).
    pub async fn walk(&self, args: &TraverseArgs) -> Result<(Traversal, Vec<(DeadLink, String)>)> {
        let started = Instant::now();
        let start = self.memories_of(std::slice::from_ref(&args.id)).await?;
        let Some((state, archived)) = start.get(&args.id).cloned() else {
            bail!(
                "memory {} not found (memlife sql \"SELECT id FROM memories ...\" lists them)",
                args.id
            );
        };
        let filter = link_filter(args);
        let mut reached = vec![Reached {
            id: args.id.clone(),
            depth: 0,
            link_type: None,
            direction: None,
            confidence: None,
            path: vec![args.id.clone()],
            state,
            archived,
            text: String::new(),
        }];
        let mut index: HashMap<String, usize> = HashMap::from([(args.id.clone(), 0)]);
        let mut dead: BTreeSet<DeadLink> = BTreeSet::new();
        let mut frontier = vec![args.id.clone()];
        let mut followed = 0;
        let mut truncated = false;
        for depth in 1..=args.depth {
            if frontier.is_empty() || truncated {
                break;
            }
            let in_frontier: BTreeSet<&str> = frontier.iter().map(String::as_str).collect();
            let mut links = self.links_of(&frontier, &filter).await?;
            // Best link first, so a memory reached by several is reached by the strongest.
            links.sort_by(|a, b| {
                b.confidence.total_cmp(&a.confidence).then_with(|| {
                    (&a.source, &a.target, &a.link_type).cmp(&(&b.source, &b.target, &b.link_type))
                })
            });
            // (link, from, to, direction) for each end of a link in the frontier.
            let mut steps = Vec::new();
            for (l, link) in links.iter().enumerate() {
                if in_frontier.contains(link.source.as_str()) {
                    steps.push((l, link.source.as_str(), link.target.as_str(), "out"));
                }
                if in_frontier.contains(link.target.as_str()) {
                    steps.push((l, link.target.as_str(), link.source.as_str(), "in"));
                }
            }
            let unknown: Vec<String> = steps
                .iter()
                .map(|s| s.2)
                .filter(|to| !index.contains_key(*to))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(str::to_string)
                .collect();
            let found = self.memories_of(&unknown).await?;
            let mut next = Vec::new();
            for (l, from, to, direction) in steps {
                let link = &links[l];
                if !index.contains_key(to) && !found.contains_key(to) {
                    dead.insert(DeadLink {
                        source_id: link.source.clone(),
                        target_id: link.target.clone(),
                        link_type: link.link_type.clone(),
                        missing: to.to_string(),
                    });
                    continue;
                }
                followed += 1;
                if index.contains_key(to) {
                    continue; // reached already, at this depth or nearer: a cycle ends here
                }
                if reached.len() >= args.limit {
                    truncated = true;
                    continue;
                }
                let (state, archived) = found[to].clone();
                let mut path = reached[index[from]].path.clone();
                path.push(to.to_string());
                index.insert(to.to_string(), reached.len());
                reached.push(Reached {
                    id: to.to_string(),
                    depth,
                    link_type: Some(link.link_type.clone()),
                    direction: Some(direction),
                    confidence: Some(link.confidence),
                    path,
                    state,
                    archived,
                    text: String::new(),
                });
                next.push(to.to_string());
            }
            frontier = next;
        }
        let ids: Vec<String> = reached.iter().map(|r| r.id.clone()).collect();
        let mut texts = self.texts_of(&ids).await?;
        for r in &mut reached {
            r.text = texts.remove(&r.id).unwrap_or_default();
        }
        let archived_reached = reached.iter().skip(1).filter(|r| r.archived).count();
        let mut users = if dead.is_empty() {
            BTreeMap::new()
        } else {
            self.users_of(&dead).await?
        };
        let dead: Vec<(DeadLink, String)> = dead
            .into_iter()
            .map(|d| {
                let user = users.remove(&d).unwrap_or_default();
                (d, user)
            })
            .collect();
        Ok((
            Traversal {
                start: args.id.clone(),
                depth: args.depth,
                memories: reached,
                links_followed: followed,
                archived_reached,
                dead_links: dead.iter().map(|(d, _)| d.clone()).collect(),
                dead_links_removed: 0,
                truncated,
                duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            },
            dead,
        ))
    }
}

/// `column IN (ids)` as a DataFusion expression.
fn id_in(column: &str, ids: &[String]) -> Expr {
    col(column).in_list(ids.iter().map(|id| lit(id.as_str())).collect(), false)
}

/// The condition on links that `--types` and `--min-confidence` ask for.
fn link_filter(args: &TraverseArgs) -> Option<Expr> {
    let mut parts: Vec<Expr> = Vec::new();
    if !args.types.is_empty() {
        let family = SHARES_ENTITY_PREFIX.trim_end_matches(':');
        let exact: Vec<Expr> = args
            .types
            .iter()
            .filter(|t| t.as_str() != family)
            .map(|t| lit(t.as_str()))
            .collect();
        let mut any = Vec::new();
        if !exact.is_empty() {
            any.push(col("link_type").in_list(exact, false));
        }
        if args.types.iter().any(|t| t == family) {
            any.push(col("link_type").like(lit(format!("{SHARES_ENTITY_PREFIX}%"))));
        }
        parts.extend(any.into_iter().reduce(Expr::or));
    }
    if args.min_confidence > 0.0 {
        parts.push(col("confidence").gt_eq(lit(args.min_confidence)));
    }
    parts.into_iter().reduce(Expr::and)
}

/// Removes dead links: each one's HEAL audit row first (with the link as it was), then the
/// links in one delete. A run killed between the two leaves the links, which the next walk
/// finds dead again; the audit row's id derives from the link, so it is not written twice.
pub async fn heal(store: &Store, dead: &[(DeadLink, String)]) -> Result<usize> {
    if dead.is_empty() {
        return Ok(0);
    }
    let run_id = uuid::Uuid::new_v4().to_string();
    let now = chrono::Utc::now().timestamp_micros();
    let rows: Vec<AuditRow> = dead
        .iter()
        .map(|(d, user)| {
            let key = format!("{}|{}|{}", d.source_id, d.target_id, d.link_type);
            let mut row = AuditRow::new(&run_id, "HEAL", &key, now);
            row.user_id = Some(user.clone());
            row.source_ids = vec![d.source_id.clone()];
            row.target_id = Some(d.target_id.clone());
            row.classification = Some(d.link_type.clone());
            row.reasoning = Some(format!("memory {} no longer exists", d.missing));
            row.before_state = Some(
                json!({"source_id": d.source_id, "target_id": d.target_id,
                       "link_type": d.link_type})
                .to_string(),
            );
            row
        })
        .collect();
    store.write_audit(&rows).await?;
    crate::crash::point("traverse.after-audit");
    let keys: Vec<(&str, &str, &str)> = dead
        .iter()
        .map(|(d, _)| {
            (
                d.source_id.as_str(),
                d.target_id.as_str(),
                d.link_type.as_str(),
            )
        })
        .collect();
    store.delete_links(&keys).await?;
    Ok(dead.len())
}

pub async fn run(app: &App, args: &TraverseArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let store = app.store().await?;
    let walker = Walker::open(store).await?;
    let (mut traversal, dead) = walker.walk(args).await?;
    if !args.no_heal {
        traversal.dead_links_removed = heal(store, &dead).await?;
    }
    if app.json {
        serde_json::to_writer_pretty(&mut *out, &traversal)?;
        writeln!(out)?;
        return Ok(ExitStatus::Success);
    }
    writeln!(
        out,
        "traverse {} (depth {}): {} memories, {} links followed, {} archived reached{}",
        traversal.start,
        traversal.depth,
        traversal.memories.len(),
        traversal.links_followed,
        traversal.archived_reached,
        if traversal.truncated {
            format!(" (stopped at --limit {})", args.limit)
        } else {
            String::new()
        }
    )?;
    writeln!(
        out,
        "{:<5} {:<38} {:<24} {:<4} {:<5} {:<10} text",
        "depth", "id", "link", "dir", "conf", "state"
    )?;
    for r in &traversal.memories {
        let mut text: String = r.text.chars().take(60).collect();
        if r.text.chars().count() > 60 {
            text.push_str("...");
        }
        writeln!(
            out,
            "{:<5} {:<38} {:<24} {:<4} {:<5} {:<10} {text}",
            r.depth,
            r.id,
            r.link_type.as_deref().unwrap_or("-"),
            r.direction.unwrap_or("-"),
            r.confidence.map_or("-".into(), |c| format!("{c:.2}")),
            if r.archived {
                "archived"
            } else {
                r.state.as_str()
            },
        )?;
    }
    if !traversal.dead_links.is_empty() {
        let verb = if args.no_heal {
            "found (not removed: --no-heal)"
        } else {
            "removed"
        };
        writeln!(out, "dead links {verb}: {}", traversal.dead_links.len())?;
        for d in &traversal.dead_links {
            writeln!(
                out,
                "  {} -> {} ({}): memory {} no longer exists",
                d.source_id, d.target_id, d.link_type, d.missing
            )?;
        }
    }
    Ok(ExitStatus::Success)
}
