//! `memlife traverse ID`: breadth-first over links in both directions (seed 000 "Link
//! Traversal"), each memory reached once at its shortest depth, so cycles end the walk
//! instead of looping. Each level is two indexed reads: the links touching the frontier, then
//! the memories at their other ends.
//!
//! A walk stays in the start memory's user's graph: it follows that user's links
//! (`links.user_id`) to that user's memories; a link of the user's to another user's memory is
//! counted, not followed. Walks from several starts in one process (`memlife traverse ID ID
//! ...`, `Walker::cached`) read each user's graph once, through the `user_id` indexes, and
//! walk it in memory.
//!
//! Heal-on-read (seed 000): a link whose other end is no longer a memory is dead. Dead links
//! met on the way are removed (each logged to `audit_log` as HEAL before the delete) and
//! counted in the report; `--no-heal` only reports them. Links to archived memories are
//! followed and the memories marked.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, bail};
use datafusion::prelude::{Expr, col, lit};
use serde::Serialize;
use serde_json::json;

use crate::app::App;
use crate::exit::ExitStatus;
use crate::model::schema::{LINKS, SHARES_ENTITY_PREFIX};
use crate::store::audit::AuditRow;
use crate::store::{Store, TableView};

/// Walk the link graph from one memory, both directions, breadth-first.
#[derive(clap::Args, Debug, Clone)]
pub struct TraverseArgs {
    /// The memories to start from: one walk each, in order (several walks share one read of
    /// each user's graph).
    #[arg(required = true, num_args = 1..)]
    pub ids: Vec<String>,
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
    /// The start's user's links to memories of other users: not followed.
    #[serde(skip_serializing_if = "is_zero")]
    pub links_to_other_users: usize,
    pub truncated: bool,
    pub duration_ms: f64,
}

struct Link {
    source: String,
    target: String,
    link_type: String,
    confidence: f64,
}

/// The walk's reader: the two tables opened once, and, for many walks in one process
/// (`Walker::cached`), each user's graph held in memory.
pub struct Walker {
    memories: TableView,
    links: TableView,
    cache: Option<tokio::sync::Mutex<GraphCache>>,
}

/// Users' graphs, valid for the tables' versions they were read at.
#[derive(Default)]
struct GraphCache {
    versions: (u64, u64),
    graphs: Vec<Arc<UserGraph>>,
}

/// What a walk reads of a memory and of a link.
#[derive(serde::Deserialize)]
struct Owner {
    user_id: String,
}

#[derive(serde::Deserialize)]
struct NodeRow {
    id: String,
    state: String,
    archived_at: Option<i64>,
    text: String,
}

#[derive(serde::Deserialize)]
struct EdgeRow {
    source_id: String,
    target_id: String,
    link_type: String,
    confidence: Option<f64>,
}

/// One user's links and memories, read in two scans: the walk then reads nothing else
/// (but the memories at the far end of a link to another user, or to no memory at all,
/// which it checks in the table as an uncached walk does).
struct UserGraph {
    user: String,
    /// id -> (state, archived, text).
    memories: HashMap<String, (String, bool, String)>,
    links: Vec<CachedLink>,
    /// Memory id -> the links touching it (indexes into `links`), either end.
    touching: HashMap<String, Vec<u32>>,
}

/// (state, archived, user) of a memory at a link's end.
type Ends = (String, bool, String);

struct CachedLink {
    source: String,
    target: String,
    link_type: String,
    confidence: Option<f64>,
}

impl UserGraph {
    /// The links touching `ids`, each once, as `Walker::links_of` reads them.
    fn links_of(&self, ids: &[String], filter: &LinkFilter) -> Vec<Link> {
        let mut seen: BTreeSet<u32> = BTreeSet::new();
        for id in ids {
            if let Some(list) = self.touching.get(id) {
                seen.extend(list.iter().copied());
            }
        }
        seen.into_iter()
            .map(|i| &self.links[i as usize])
            .filter(|l| filter.matches(&l.link_type, l.confidence))
            .map(|l| Link {
                source: l.source.clone(),
                target: l.target.clone(),
                link_type: l.link_type.clone(),
                confidence: l.confidence.unwrap_or(1.0),
            })
            .collect()
    }
}

impl Walker {
    pub async fn open(store: &Store) -> Result<Walker> {
        Ok(Walker {
            memories: store.open_view("memories").await?,
            links: store.open_view(LINKS.name).await?,
            cache: None,
        })
    }

    /// A walker for many walks: the first walk from a user's memory reads the user's whole
    /// graph (two scans through the `user_id` indexes), and later walks in that user's graph
    /// read nothing until a table's version changes.
    pub async fn cached(store: &Store) -> Result<Walker> {
        let mut walker = Walker::open(store).await?;
        walker.cache = Some(tokio::sync::Mutex::new(GraphCache::default()));
        Ok(walker)
    }

    /// The graph holding `start`, read when no cached graph holds it; None without a cache
    /// or when `start` is not a memory.
    async fn graph_for(&self, start: &str) -> Result<Option<Arc<UserGraph>>> {
        let Some(cache) = &self.cache else {
            return Ok(None);
        };
        let versions = (self.links.version().await?, self.memories.version().await?);
        let mut cache = cache.lock().await;
        if cache.versions != versions {
            cache.graphs.clear();
            cache.versions = versions;
        }
        if let Some(g) = cache.graphs.iter().find(|g| g.memories.contains_key(start)) {
            return Ok(Some(g.clone()));
        }
        let owners: Vec<Owner> = self.memories.rows_where(col("id").eq(lit(start))).await?;
        let Some(user) = owners.into_iter().next().map(|o| o.user_id) else {
            return Ok(None);
        };
        let graph = Arc::new(self.load(&user).await?);
        cache.graphs.push(graph.clone());
        Ok(Some(graph))
    }

    /// Reads one user's graph.
    async fn load(&self, user: &str) -> Result<UserGraph> {
        let mine = col("user_id").eq(lit(user));
        let rows: Vec<NodeRow> = self.memories.rows_where(mine.clone()).await?;
        let mut memories = HashMap::with_capacity(rows.len());
        for row in rows {
            let is_archived = row.archived_at.is_some() || row.state == "archived";
            memories.insert(row.id, (row.state, is_archived, row.text));
        }
        let rows: Vec<EdgeRow> = self.links.rows_where(mine).await?;
        let mut links = Vec::with_capacity(rows.len());
        let mut touching: HashMap<String, Vec<u32>> = HashMap::new();
        for row in rows {
            let i = links.len() as u32;
            touching.entry(row.source_id.clone()).or_default().push(i);
            if row.target_id != row.source_id {
                touching.entry(row.target_id.clone()).or_default().push(i);
            }
            links.push(CachedLink {
                source: row.source_id,
                target: row.target_id,
                link_type: row.link_type,
                confidence: row.confidence,
            });
        }
        Ok(UserGraph {
            user: user.to_string(),
            memories,
            links,
            touching,
        })
    }

    /// Opens the tables again and forgets the cached graphs: after a write (a heal) the next
    /// walk reads the tables as they are now, not as this walker first opened them.
    pub async fn reopen(&mut self, store: &Store) -> Result<()> {
        self.memories = store.open_view("memories").await?;
        self.links = store.open_view(LINKS.name).await?;
        if let Some(cache) = &self.cache {
            *cache.lock().await = GraphCache::default();
        }
        Ok(())
    }

    /// id -> (state, archived, user) of `ids`: from the graph where it holds them, else the
    /// table.
    async fn states_of(
        &self,
        graph: &Option<Arc<UserGraph>>,
        ids: &[String],
    ) -> Result<HashMap<String, Ends>> {
        let Some(g) = graph else {
            return self.memories_of(ids).await;
        };
        let mut out = HashMap::with_capacity(ids.len());
        let mut elsewhere = Vec::new();
        for id in ids {
            match g.memories.get(id) {
                Some((state, archived, _)) => {
                    out.insert(id.clone(), (state.clone(), *archived, g.user.clone()));
                }
                None => elsewhere.push(id.clone()),
            }
        }
        if !elsewhere.is_empty() {
            out.extend(self.memories_of(&elsewhere).await?);
        }
        Ok(out)
    }

    /// The links touching `ids` (either end), filtered as `--types` and `--min-confidence`
    /// ask. The filter is a DataFusion expression, not SQL text: a level's list of up to 1000
    /// ids is not printed and parsed again on every read.
    async fn links_of(&self, ids: &[String], filter: &LinkFilter, user: &str) -> Result<Vec<Link>> {
        let filter = filter.expr();
        let mut out = Vec::new();
        for chunk in ids.chunks(1000) {
            let mut condition = id_in("source_id", chunk)
                .or(id_in("target_id", chunk))
                .and(col("user_id").eq(lit(user)));
            if let Some(filter) = &filter {
                condition = condition.and(filter.clone());
            }
            let rows: Vec<EdgeRow> = self.links.rows_where(condition).await?;
            out.extend(rows.into_iter().map(|row| Link {
                source: row.source_id,
                target: row.target_id,
                link_type: row.link_type,
                confidence: row.confidence.unwrap_or(1.0),
            }));
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
            #[derive(serde::Deserialize)]
            struct OwnedLink {
                source_id: String,
                target_id: String,
                link_type: String,
                user_id: String,
            }
            let rows: Vec<OwnedLink> = self.links.rows_where(id_in("source_id", chunk)).await?;
            for row in rows {
                if let Some(d) = dead.iter().find(|d| {
                    d.source_id == row.source_id
                        && d.target_id == row.target_id
                        && d.link_type == row.link_type
                }) {
                    out.insert(d.clone(), row.user_id);
                }
            }
        }
        Ok(out)
    }

    /// id -> (state, archived) of the memories among `ids`: what tells a live end from a
    /// dead one. Texts are read apart (`texts_of`), only for the memories a walk returns.
    async fn memories_of(&self, ids: &[String]) -> Result<HashMap<String, Ends>> {
        let mut out = HashMap::new();
        for chunk in ids.chunks(1000) {
            #[derive(serde::Deserialize)]
            struct End {
                id: String,
                state: String,
                archived_at: Option<i64>,
                user_id: String,
            }
            let rows: Vec<End> = self.memories.rows_where(id_in("id", chunk)).await?;
            for row in rows {
                let is_archived = row.archived_at.is_some() || row.state == "archived";
                out.insert(row.id, (row.state, is_archived, row.user_id));
            }
        }
        Ok(out)
    }

    /// id -> text of the memories among `ids`.
    async fn texts_of(&self, ids: &[String]) -> Result<HashMap<String, String>> {
        let mut out = HashMap::new();
        for chunk in ids.chunks(1000) {
            #[derive(serde::Deserialize)]
            struct Text {
                id: String,
                text: String,
            }
            let rows: Vec<Text> = self.memories.rows_where(id_in("id", chunk)).await?;
            out.extend(rows.into_iter().map(|r| (r.id, r.text)));
        }
        Ok(out)
    }

    /// The walk itself; dead links are collected, not removed (see `heal`).
    /// Each reached memory's text: from the walk's graph when it holds it, else read.
    async fn fill_texts(
        &self,
        graph: Option<&Arc<UserGraph>>,
        reached: &mut [Reached],
    ) -> Result<()> {
        let ids: Vec<String> = reached
            .iter()
            .filter(|r| graph.is_none_or(|g| !g.memories.contains_key(&r.id)))
            .map(|r| r.id.clone())
            .collect();
        let mut texts = if ids.is_empty() {
            HashMap::new()
        } else {
            self.texts_of(&ids).await?
        };
        if let Some(g) = graph {
            for r in reached.iter() {
                if let Some((_, _, text)) = g.memories.get(&r.id) {
                    texts.insert(r.id.clone(), text.clone());
                }
            }
        }
        for r in reached {
            r.text = texts.remove(&r.id).unwrap_or_default();
        }
        Ok(())
    }

    /// The dead links met, each with the user whose link it is.
    async fn with_users(&self, dead: BTreeSet<DeadLink>) -> Result<Vec<(DeadLink, String)>> {
        let mut users = if dead.is_empty() {
            BTreeMap::new()
        } else {
            self.users_of(&dead).await?
        };
        Ok(dead
            .into_iter()
            .map(|d| {
                let user = users.remove(&d).unwrap_or_default();
                (d, user)
            })
            .collect())
    }

    pub async fn walk(
        &self,
        start_id: &str,
        args: &TraverseArgs,
    ) -> Result<(Traversal, Vec<(DeadLink, String)>)> {
        let started = Instant::now();
        let graph = self.graph_for(start_id).await?;
        let start = self.states_of(&graph, &[start_id.to_string()]).await?;
        let Some((state, archived, user)) = start.get(start_id).cloned() else {
            bail!(
                "memory {} not found (memlife sql \"SELECT id FROM memories ...\" lists them)",
                start_id
            );
        };
        let filter = LinkFilter::of(args);
        let mut reached = vec![Reached {
            id: start_id.to_string(),
            depth: 0,
            link_type: None,
            direction: None,
            confidence: None,
            path: vec![start_id.to_string()],
            state,
            archived,
            text: String::new(),
        }];
        let mut index: HashMap<String, usize> = HashMap::from([(start_id.to_string(), 0)]);
        let mut dead: BTreeSet<DeadLink> = BTreeSet::new();
        let mut frontier = vec![start_id.to_string()];
        let mut followed = 0;
        let mut other_users = 0;
        let mut truncated = false;
        for depth in 1..=args.depth {
            if frontier.is_empty() || truncated {
                break;
            }
            let in_frontier: BTreeSet<&str> = frontier.iter().map(String::as_str).collect();
            let mut links = match &graph {
                Some(g) => g.links_of(&frontier, &filter),
                None => self.links_of(&frontier, &filter, &user).await?,
            };
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
            let found = self.states_of(&graph, &unknown).await?;
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
                if !index.contains_key(to) && found[to].2 != user {
                    other_users += 1;
                    continue; // another user's memory: a walk stays in its user's graph
                }
                followed += 1;
                if index.contains_key(to) {
                    continue; // reached already, at this depth or nearer: a cycle ends here
                }
                if reached.len() >= args.limit {
                    truncated = true;
                    continue;
                }
                let (state, archived, _) = found[to].clone();
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
        self.fill_texts(graph.as_ref(), &mut reached).await?;
        let archived_reached = reached.iter().skip(1).filter(|r| r.archived).count();
        let dead = self.with_users(dead).await?;
        Ok((
            Traversal {
                start: start_id.to_string(),
                depth: args.depth,
                memories: reached,
                links_followed: followed,
                archived_reached,
                dead_links: dead.iter().map(|(d, _)| d.clone()).collect(),
                dead_links_removed: 0,
                links_to_other_users: other_users,
                truncated,
                duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            },
            dead,
        ))
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `column IN (ids)` as a DataFusion expression.
fn id_in(column: &str, ids: &[String]) -> Expr {
    col(column).in_list(ids.iter().map(|id| lit(id.as_str())).collect(), false)
}

/// The links `--types` and `--min-confidence` let a walk follow: as a DataFusion expression
/// for the table, as a predicate for a cached graph (the same rule: a link without a
/// confidence passes only when no minimum is asked for).
struct LinkFilter {
    exact: Vec<String>,
    shares_entity: bool,
    min_confidence: f64,
}

impl LinkFilter {
    fn of(args: &TraverseArgs) -> LinkFilter {
        let family = SHARES_ENTITY_PREFIX.trim_end_matches(':');
        LinkFilter {
            exact: args
                .types
                .iter()
                .filter(|t| t.as_str() != family)
                .cloned()
                .collect(),
            shares_entity: args.types.iter().any(|t| t == family),
            min_confidence: args.min_confidence,
        }
    }

    fn any_type(&self) -> bool {
        self.exact.is_empty() && !self.shares_entity
    }

    fn matches(&self, link_type: &str, confidence: Option<f64>) -> bool {
        let typed = self.any_type()
            || self.exact.iter().any(|t| t == link_type)
            || (self.shares_entity && link_type.starts_with(SHARES_ENTITY_PREFIX));
        let confident =
            self.min_confidence <= 0.0 || confidence.is_some_and(|c| c >= self.min_confidence);
        typed && confident
    }

    fn expr(&self) -> Option<Expr> {
        let mut parts: Vec<Expr> = Vec::new();
        if !self.any_type() {
            let mut any = Vec::new();
            if !self.exact.is_empty() {
                let exact = self.exact.iter().map(|t| lit(t.as_str())).collect();
                any.push(col("link_type").in_list(exact, false));
            }
            if self.shares_entity {
                any.push(col("link_type").like(lit(format!("{SHARES_ENTITY_PREFIX}%"))));
            }
            parts.extend(any.into_iter().reduce(Expr::or));
        }
        if self.min_confidence > 0.0 {
            parts.push(col("confidence").gt_eq(lit(self.min_confidence)));
        }
        parts.into_iter().reduce(Expr::and)
    }
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
    // One walk reads level by level; several share each user's graph, read once.
    let mut walker = if args.ids.len() > 1 {
        Walker::cached(store).await?
    } else {
        Walker::open(store).await?
    };
    let mut walks = Vec::with_capacity(args.ids.len());
    for id in &args.ids {
        let (mut traversal, dead) = walker.walk(id, args).await?;
        if !args.no_heal && !dead.is_empty() {
            traversal.dead_links_removed = heal(store, &dead).await?;
            walker.reopen(store).await?;
        }
        walks.push(traversal);
    }
    if app.json {
        if let [one] = walks.as_slice() {
            serde_json::to_writer_pretty(&mut *out, one)?;
        } else {
            serde_json::to_writer_pretty(&mut *out, &walks)?;
        }
        writeln!(out)?;
        return Ok(ExitStatus::Success);
    }
    for traversal in &walks {
        print(args, traversal, out)?;
    }
    Ok(ExitStatus::Success)
}

fn print(args: &TraverseArgs, traversal: &Traversal, out: &mut dyn Write) -> Result<()> {
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
    Ok(())
}
