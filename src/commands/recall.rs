//! `memlife recall "QUERY" --user U`: a user's memories nearest the query, by mode (which
//! tiers: `logic::recall`), ranked by similarity, salience and recency, current facts only
//! unless `--history` or `--as-of`; each with the dates its text names (resolved against
//! when it was written, `logic::temporal`) and its successor when it has one. Every returned
//! memory is activated (seed 002: access_count, recall_frequency, last_accessed_at, salience +
//! the access boost, state and tier recomputed, the spacing interval) in one write per call,
//! unless `--no-activate`. The activation is written as pending (`store::activations`): the
//! next `scores` run writes it onto the memory row, and until then a recall of the same
//! memory counts on from it. Rewriting the row whole at each recall cost the store a
//! fragment rewrite for every fifth of its rows recalled.
//!
//! The activation is logged first, as a `RECALL` audit row keyed by the user, the query, the
//! mode and the clock: a recall killed between the log and the write is finished by the same
//! recall at the same clock (`--now`), and a recall repeated at the same clock activates
//! nothing twice.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Result, anyhow, bail};
use arrow::array::{Array, AsArray, RecordBatch};
use serde::Serialize;
use serde_json::json;

use crate::app::App;
use crate::embedders::{Embedded, Embedder, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::logic::recall::{Mode, RecallCandidate, Signals, parts, rank, rank_score};
use crate::logic::scores::{ScoreInput, State, Ttl, on_access, score};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::typed::MemoryRow;
use crate::store::activations::{Activation, Pending};
use crate::store::audit::{AuditRow, derived_id};
use crate::store::{Store, sql_list, sql_string, sql_timestamp};

#[derive(clap::Args, Debug, Clone)]
pub struct RecallArgs {
    /// What to recall, in words.
    pub query: String,
    /// Whose memories.
    #[arg(long)]
    pub user: String,
    /// reflexive: hot only; standard: hot and warm; deep: and cold; exhaustive: and archived.
    #[arg(long, value_enum, default_value = "standard")]
    pub mode: Mode,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// What was true at this time (RFC 3339): versions valid then, written by then.
    #[arg(long)]
    pub as_of: Option<Clock>,
    /// Superseded versions too.
    #[arg(long)]
    pub history: bool,
    /// Read only: activate nothing.
    #[arg(long)]
    pub no_activate: bool,
    /// Answer the question (a ReasonedAnswer); on by itself for date questions ("when did",
    /// "what date", "how long ago", "what day"). Offline: from the dates the recalled
    /// memories name.
    #[arg(long)]
    pub reason: bool,
    /// Who answers with --reason: offline (the rules) or providers (the recall.answer task's
    /// role in memlife.toml). Default: llm.judge of the config.
    #[arg(long = "llm", value_enum)]
    pub judge: Option<crate::llm::JudgeKind>,
    /// The recall's clock (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    /// Show each signal's part in each result's score (similarity, lexical, entity, time,
    /// salience, recency: weight x signal, summing to the score).
    #[arg(long)]
    pub explain: bool,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

#[derive(Serialize)]
pub struct Recalled {
    rank: usize,
    pub id: String,
    score: f64,
    similarity: f64,
    /// Each signal's part in the score (`--explain`).
    #[serde(skip_serializing_if = "Option::is_none")]
    explain: Option<Signals>,
    tier: String,
    state: String,
    #[serde(skip)]
    kind: String,
    text: String,
    created_at: String,
    /// The dates the text names, resolved against when it was written.
    when: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    superseded_by: Option<String>,
}

#[derive(Serialize)]
pub struct Report {
    query: String,
    user: String,
    mode: Mode,
    now: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    as_of: Option<String>,
    pub memories: Vec<Recalled>,
    pub activated: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<crate::logic::recall::ReasonedAnswer>,
    pub notes: Vec<String>,
    /// Every candidate ranked: id, session, signals unweighted (what `eval recall` tunes on).
    #[serde(skip)]
    pub pool: Vec<(String, Option<String>, Signals)>,
    /// The candidates' pending activations (`store::activations`), read once for ranking and
    /// counted on by the activation.
    #[serde(skip)]
    pending: std::collections::HashMap<String, Activation>,
}

/// A candidate memory's columns as a search reads them (with its vector, and `_distance` or
/// `_score`, beside them). The archive and validity columns are read for the live terms a
/// search checks itself (`Live`).
#[derive(serde::Deserialize)]
struct Candidate {
    id: String,
    text: String,
    kind: String,
    tier: String,
    state: String,
    salience: Option<f64>,
    importance: Option<f64>,
    created_at: Option<i64>,
    last_accessed_at: Option<i64>,
    happens_at: Option<i64>,
    superseded_by: Option<String>,
    session_id: Option<String>,
    #[allow(dead_code)]
    archived_at: Option<i64>,
    #[allow(dead_code)]
    valid_until: Option<i64>,
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// A candidate memory as read, with its similarity and lexical signal.
struct Found {
    id: String,
    text: String,
    kind: String,
    tier: String,
    state: String,
    salience: f64,
    created_at: i64,
    last_access: Option<i64>,
    happens_at: Option<i64>,
    superseded_by: Option<String>,
    session: Option<String>,
    similarity: f64,
    /// The cosine of the focused query (`logic::recall::focused_query`); the cosine itself
    /// until one is embedded.
    focused: f64,
    lexical: f64,
    /// The memory's vector, unit length (empty when it has none).
    vector: Vec<f32>,
    /// The dates the text names, resolved against when it was written.
    resolved: Vec<crate::logic::temporal::Resolution>,
}

impl Found {
    fn of(r: Candidate) -> Found {
        let created_at = r.created_at.unwrap_or(0);
        let said = chrono::DateTime::from_timestamp_micros(created_at)
            .map(|d| d.date_naive())
            .unwrap_or_default();
        Found {
            resolved: crate::logic::temporal::resolve(&r.text, said),
            id: r.id,
            text: r.text,
            kind: r.kind,
            tier: r.tier,
            state: r.state,
            salience: r.salience.or(r.importance).unwrap_or(0.0),
            created_at,
            last_access: r.last_accessed_at,
            happens_at: r.happens_at,
            superseded_by: r.superseded_by,
            session: r.session_id,
            similarity: 0.0,
            focused: 0.0,
            lexical: 0.0,
            vector: Vec::new(),
        }
    }

    /// The days the memory is about: when it happens, the dates its text names, else the day
    /// it was written.
    fn dates(&self) -> Vec<(chrono::NaiveDate, chrono::NaiveDate)> {
        let day = |t: i64| {
            chrono::DateTime::from_timestamp_micros(t)
                .map(|d| d.date_naive())
                .unwrap_or_default()
        };
        let mut out: Vec<_> = self
            .resolved
            .iter()
            .filter(|r| !r.implied)
            .map(|r| (r.start, r.end))
            .collect();
        if let Some(h) = self.happens_at {
            out.push((day(h), day(h)));
        }
        if out.is_empty() {
            out.push((day(self.created_at), day(self.created_at)));
        }
        out
    }
}

/// A recall's filter: the user's memories of the query's model in some tiers, live unless
/// exhaustive, current unless `--history`, or as they were at `--as-of`. `full` holds every
/// term. When `live` is set, `indexed` holds the terms Lance answers from the scalar and bitmap
/// indexes (user, model, tier, state) and each search applies the `live` terms itself to the
/// rows it returns: the terms on nullable columns no index serves (`archived_at`,
/// `superseded_by`, `valid_until`), which Lance would otherwise read for every row of the
/// table before searching (BENCHMARKS.md, recall at 100k).
struct Filter {
    full: String,
    indexed: String,
    live: Option<Live>,
}

/// The terms of a `Filter` a search checks on the rows it returns.
#[derive(Clone, Copy, Debug)]
struct Live {
    /// `archived_at IS NULL`.
    unarchived: bool,
    /// `superseded_by IS NULL AND (valid_until IS NULL OR valid_until > t)`.
    current_at: Option<i64>,
}

impl Filter {
    /// A filter applied whole, before the search.
    fn whole(full: String) -> Filter {
        Filter {
            indexed: full.clone(),
            full,
            live: None,
        }
    }
}

fn filter(args: &RecallArgs, model: &str, tiers: &[&str], now: i64, as_of: Option<i64>) -> Filter {
    let tiers: Vec<String> = tiers.iter().map(|t| t.to_string()).collect();
    let mut indexed = format!(
        "user_id = {} AND embedding_model = {} AND tier IN ({})",
        sql_string(&args.user),
        sql_string(model),
        sql_list(&tiers)
    );
    let unarchived = !args.mode.archived();
    if unarchived {
        indexed.push_str(" AND state <> 'archived'");
    }
    let mut full = indexed.clone();
    if unarchived {
        full.push_str(" AND archived_at IS NULL");
    }
    match as_of {
        Some(t) => {
            full.push_str(&format!(
                " AND created_at <= {t} AND (valid_from IS NULL OR valid_from <= {t}) \
                 AND (valid_until IS NULL OR valid_until > {t})",
                t = sql_timestamp(t)
            ));
            return Filter::whole(full);
        }
        None if !args.history => full.push_str(&format!(
            " AND superseded_by IS NULL AND (valid_until IS NULL OR valid_until > {})",
            sql_timestamp(now)
        )),
        None => {}
    }
    let live = Live {
        unarchived,
        current_at: (!args.history).then_some(now),
    };
    Filter {
        full,
        indexed,
        live: (live.unarchived || live.current_at.is_some()).then_some(live),
    }
}

/// Which rows of `batch` pass `live`.
fn live_mask(batch: &RecordBatch, live: Live) -> Result<arrow::array::BooleanArray> {
    use arrow::datatypes::TimestampMicrosecondType;
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| anyhow!("the search returned no {name} column"))
    };
    let archived = column("archived_at")?;
    let superseded = column("superseded_by")?;
    let until = column("valid_until")?;
    let until = until
        .as_primitive_opt::<TimestampMicrosecondType>()
        .ok_or_else(|| anyhow!("memories.valid_until is not a timestamp in microseconds"))?;
    Ok((0..batch.num_rows())
        .map(|i| {
            let unarchived = !live.unarchived || archived.is_null(i);
            let current = live.current_at.is_none_or(|now| {
                superseded.is_null(i) && (until.is_null(i) || until.value(i) > now)
            });
            Some(unarchived && current)
        })
        .collect())
}

/// The `pool` best rows of a search under `filter`: with `live` terms, the search runs under
/// the indexed terms for twice the pool and the live terms are checked on what it returns;
/// when fewer than `pool` pass and there may be more, it runs again under the full filter.
/// `by` is the column that orders the results (`_distance` ascending, `_score` descending).
async fn search_live<F, Fut>(
    filter: &Filter,
    pool: usize,
    by: (&str, bool),
    search: F,
) -> Result<Vec<RecordBatch>>
where
    F: Fn(String, usize) -> Fut,
    Fut: std::future::Future<Output = crate::store::Result<Vec<RecordBatch>>>,
{
    let Some(live) = filter.live else {
        return Ok(search(filter.full.clone(), pool).await?);
    };
    let fetch = pool * 2;
    let batches = search(filter.indexed.clone(), fetch).await?;
    let Some(first) = batches.first() else {
        return Ok(batches);
    };
    let all = arrow::compute::concat_batches(&first.schema(), &batches)?;
    let kept = arrow::compute::filter_record_batch(&all, &live_mask(&all, live)?)?;
    if kept.num_rows() < pool && all.num_rows() >= fetch {
        return Ok(search(filter.full.clone(), pool).await?);
    }
    let (column, descending) = by;
    let key = kept
        .column_by_name(column)
        .ok_or_else(|| anyhow!("the search returned no {column} column"))?;
    let order = arrow::compute::sort_to_indices(
        key,
        Some(arrow::compute::SortOptions {
            descending,
            nulls_first: false,
        }),
        Some(pool),
    )?;
    Ok(vec![arrow::compute::take_record_batch(&kept, &order)?])
}

/// `v` scaled to unit length (empty when it is all zeros), as `rows_and_vectors` gives
/// memories' vectors: their cosine is then a dot product.
fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    } else {
        v.clear();
    }
    v
}

/// The cosine of two unit-length vectors (0 when either is empty).
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.is_empty() || b.is_empty() {
        0.0
    } else {
        f64::from(crate::logic::similarity::dot(a, b))
    }
}

/// The candidates of one recall: the `pool` nearest by cosine and the `pool` best by BM25
/// (Lance's full-text search on `text`), and when the query names a time the `pool` nearest
/// of the memories written or happening then, each with both signals. The searches run
/// concurrently.
async fn candidates(
    store: &Store,
    query: &str,
    vector: &[f32],
    filter: Filter,
    pool: usize,
    nprobes: usize,
    asked_times: &[(chrono::NaiveDate, chrono::NaiveDate)],
) -> Result<Vec<Found>> {
    let began = std::time::Instant::now();
    let query_unit = unit(vector.to_vec());
    let columns = crate::model::typed::columns_of::<Candidate>();
    let mut near_columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut text_columns = near_columns.clone();
    near_columns.extend(["embedding", "_distance"]);
    text_columns.extend(["embedding", "_score"]);
    let timed = (!asked_times.is_empty()).then(|| {
        let micros = |d: chrono::NaiveDate| {
            d.and_time(chrono::NaiveTime::MIN)
                .and_utc()
                .timestamp_micros()
        };
        let within: Vec<String> = asked_times
            .iter()
            .map(|(s, e)| {
                let (s, e) = (
                    sql_timestamp(micros(*s)),
                    sql_timestamp(micros(*e + chrono::Duration::days(1))),
                );
                format!(
                    "(created_at >= {s} AND created_at < {e}) OR (happens_at >= {s} AND happens_at < {e})"
                )
            })
            .collect();
        let within = within.join(" OR ");
        Filter {
            full: format!("{} AND ({within})", filter.full),
            indexed: format!("{} AND ({within})", filter.indexed),
            live: filter.live,
        }
    });
    let nearest = |filter: String, limit: usize| {
        store.nearest_rows(
            "memories",
            vector.to_vec(),
            limit,
            nprobes,
            filter,
            &near_columns,
        )
    };
    let (near, near_timed, lexical) = tokio::try_join!(
        async {
            let began = std::time::Instant::now();
            let rows = search_live(&filter, pool, ("_distance", false), nearest).await;
            tracing::debug!(
                ms = began.elapsed().as_secs_f64() * 1e3,
                "recall vector search"
            );
            rows
        },
        async {
            match &timed {
                Some(timed) => search_live(timed, pool, ("_distance", false), nearest).await,
                None => Ok(Vec::new()),
            }
        },
        async {
            let began = std::time::Instant::now();
            let rows = search_live(&filter, pool, ("_score", true), |filter, limit| {
                store.text_search_rows("memories", "text", query, limit, filter, &text_columns)
            })
            .await;
            tracing::debug!(
                ms = began.elapsed().as_secs_f64() * 1e3,
                "recall text search"
            );
            rows
        },
    )?;
    let searched_ms = began.elapsed().as_secs_f64() * 1e3;
    let near: Vec<Hit> = rows_and_vectors(&near)?
        .into_iter()
        .chain(rows_and_vectors(&near_timed)?)
        .collect();
    let mut found: Vec<Found> = Vec::with_capacity(near.len() * 2);
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    for (r, v, distance) in near {
        if at.contains_key(&r.id) {
            continue;
        }
        let mut f = Found::of(r);
        // The exact cosine where the vector was read: through an IVF_PQ index `_distance`
        // is the compressed vectors' approximation.
        f.similarity = if v.is_empty() {
            1.0 - distance
        } else {
            cosine(&query_unit, &v)
        };
        f.focused = f.similarity;
        f.vector = v;
        at.insert(f.id.clone(), found.len());
        found.push(f);
    }
    for (r, v, _) in rows_and_vectors(&lexical)? {
        if let std::collections::btree_map::Entry::Vacant(slot) = at.entry(r.id.clone()) {
            let mut f = Found::of(r);
            f.similarity = cosine(&query_unit, &v);
            f.focused = f.similarity;
            f.vector = v;
            slot.insert(found.len());
            found.push(f);
        }
    }
    // The lexical signal: the query's words each memory holds, weighted by their rarity among
    // the candidates (BM25 chose some of them; its table-wide weights rank worse here).
    let texts: Vec<&str> = found.iter().map(|f| f.text.as_str()).collect();
    let overlap = crate::logic::recall::rare_overlap(query, &texts);
    for (f, o) in found.iter_mut().zip(overlap) {
        f.lexical = o;
    }
    tracing::debug!(
        searched_ms,
        read_ms = began.elapsed().as_secs_f64() * 1e3 - searched_ms,
        candidates = found.len(),
        "recall candidates"
    );
    Ok(found)
}

/// How well each of the memories `filter` keeps answers `query` (embedded as `vector`), by
/// recall's own signals and weights (`[recall]`: cosine, the lexical signal, crowding; no time, and no
/// salience or recency, which the caller weighs itself), clamped to [0, 1]: the `limit` best
/// candidates of each source. `summaries inject --project` ranks summaries by it.
pub async fn relevance(
    store: &Store,
    params: &crate::logic::recall::RecallParams,
    query: &str,
    vector: &[f32],
    filter: &str,
    limit: usize,
) -> Result<BTreeMap<String, f64>> {
    let found = candidates(
        store,
        query,
        vector,
        Filter::whole(filter.to_string()),
        limit.max(1),
        params.nprobes,
        &[],
    )
    .await?;
    let crowding = crowding(&found, params);
    Ok(found
        .iter()
        .zip(crowding)
        .map(|(f, crowding)| {
            let c = RecallCandidate {
                similarity: f.similarity,
                focused: f.focused,
                lexical: f.lexical,
                entity: 0.0,
                time: 0.0,
                crowding,
                episode: 0.0,
                session: None,
                salience: 0.0,
                age_days: f64::INFINITY,
                created_at: f.created_at,
                id: f.id.clone(),
            };
            let score = rank_score(params, Mode::Deep, &c);
            (f.id.clone(), score.clamp(0.0, 1.0))
        })
        .collect())
}

/// Each candidate's crowding among the others (`logic::recall::crowding_of`).
fn crowding(found: &[Found], params: &crate::logic::recall::RecallParams) -> Vec<f64> {
    let vectors: Vec<&[f32]> = found.iter().map(|f| f.vector.as_slice()).collect();
    crate::logic::recall::crowding_of(&vectors, params.crowding_neighbours)
}

/// A candidate as a search returned it: its row, its vector (unit length; empty when it has
/// none) and its `_distance` (0 when the search gave none).
type Hit = (Candidate, Vec<f32>, f64);

fn rows_and_vectors(batches: &[arrow::array::RecordBatch]) -> Result<Vec<Hit>> {
    let rows = crate::model::typed::rows_of::<Candidate>("memories", batches)?;
    let vectors = crate::model::typed::optional_vectors_of("memories", batches, "embedding")?;
    let mut distances = Vec::with_capacity(rows.len());
    for batch in batches {
        let column = batch
            .column_by_name("_distance")
            .and_then(|c| c.as_primitive_opt::<arrow::datatypes::Float32Type>());
        distances.extend((0..batch.num_rows()).map(|i| match column {
            Some(d) if d.is_valid(i) => f64::from(d.value(i)),
            _ => 0.0,
        }));
    }
    Ok(rows
        .into_iter()
        .zip(vectors)
        .zip(distances)
        .map(|((r, v), d)| (r, unit(v.unwrap_or_default()), d))
        .collect())
}

/// The user's live entities whose name or an alias the query names: (id, name).
async fn named_entities(store: &Store, user: &str, query: &str) -> Result<Vec<(String, String)>> {
    #[derive(serde::Deserialize)]
    struct Named {
        id: String,
        name: String,
        aliases: Option<Vec<String>>,
    }
    let filter = format!("user_id = {} AND archived_at IS NULL", sql_string(user));
    let rows: Vec<Named> = store.scan_rows("entities", Some(&filter)).await?;
    let mut names: Vec<(usize, &str)> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        names.push((i, r.name.as_str()));
        for alias in r.aliases.iter().flatten() {
            names.push((i, alias.as_str()));
        }
    }
    let texts: Vec<&str> = names.iter().map(|(_, n)| *n).collect();
    let mut out: Vec<(String, String)> = Vec::new();
    for hit in crate::logic::recall::named_in(query, &texts) {
        let r = &rows[names[hit].0];
        if !out.iter().any(|(x, _)| *x == r.id) {
            out.push((r.id.clone(), r.name.clone()));
        }
    }
    Ok(out)
}

/// The activation of one memory row at `now`: the columns it changes.
fn activation(
    p: &crate::logic::scores::ScoreParams,
    row: &MemoryRow,
    now: i64,
) -> Result<Activation> {
    let id = &row.id;
    let state = State::parse(&row.state)
        .ok_or_else(|| anyhow!("memory {id}: unknown state {:?}", row.state))?;
    let ttl = Ttl::parse(&row.ttl_policy)
        .ok_or_else(|| anyhow!("memory {id}: unknown ttl_policy {:?}", row.ttl_policy))?;
    let mut m = ScoreInput {
        state,
        ttl,
        episodic: row.kind == "episode",
        confidence: row.confidence,
        salience: row.salience,
        salience_anchor: row.salience_anchor.unwrap_or(row.salience),
        access_count: row.access_count,
        recall_frequency: row.recall_frequency,
        decay_gradient: row.decay_gradient,
        created_at: row.created_at,
        last_accessed_at: row.last_accessed_at,
        archived_at: row.archived_at,
        emotional_salience: row.emotional_salience,
        inbound_links: 0,
        last_recall_interval_days: row.last_recall_interval_days,
    };
    let current = score(p, &m, now).salience;
    on_access(p, &mut m, current, now);
    let out = score(p, &m, now);
    Ok(Activation {
        id: id.clone(),
        access_count: m.access_count,
        recall_frequency: m.recall_frequency,
        last_accessed_at: format_timestamp(now),
        last_recall_interval_days: m.last_recall_interval_days,
        decay_gradient: m.decay_gradient,
        salience: out.salience,
        salience_anchor: m.salience_anchor,
        state: out.state.as_str().to_string(),
        tier: out.tier.to_string(),
        retention: out.retention,
        importance: out.importance,
        archived_at: out.archived_at.map(format_timestamp),
    })
}

/// Writes logged activations as pending (`store::activations`), in one commit, for `scores`
/// to write onto the memories: rows activated at this clock already (by this recall or
/// another), and rows gone since, are left alone.
async fn defer(
    store: &Store,
    rows: &[MemoryRow],
    changes: &[Activation],
    recall_id: &str,
    now: i64,
) -> Result<usize> {
    let by_id: BTreeMap<&str, &MemoryRow> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut pending = Vec::new();
    for change in changes {
        let Some(row) = by_id.get(change.id.as_str()) else {
            continue; // gone since: nothing to activate
        };
        if row.last_accessed_at == Some(now)
            || pending.iter().any(|p: &Pending| p.memory_id == change.id)
        {
            continue;
        }
        pending.push(Pending {
            memory_id: change.id.clone(),
            user_id: row.user_id.clone(),
            recall_id: recall_id.to_string(),
            recalled_at: now,
            activation: change.clone(),
        });
    }
    store
        .defer_activations(&pending)
        .await
        .map_err(|e| anyhow!("activation rows: {e}"))?;
    Ok(pending.len())
}

/// Candidates as their pending activations leave them (`store::activations`): a memory
/// recalled since the last `scores` run ranks by its boosted salience and its last access.
async fn with_pending(store: &Store, found: &mut [Found], report: &mut Report) -> Result<()> {
    let ids: Vec<String> = found.iter().map(|f| f.id.clone()).collect();
    report.pending = store.pending_activations_of(&ids).await?;
    for f in found.iter_mut() {
        if let Some(a) = report.pending.get(&f.id)
            && a.newer_than(f.last_access)?
        {
            f.salience = a.salience;
            f.last_access = Some(a.accessed_at()?);
        }
    }
    Ok(())
}

/// The memory rows of `ids` as they stand with their pending activations (read for ranking,
/// `Report::pending`) written on.
async fn activated_rows(
    store: &Store,
    ids: &[String],
    pending: &std::collections::HashMap<String, Activation>,
) -> Result<Vec<MemoryRow>> {
    let (mut rows, _) = store.memories_with_ids(ids, None, false).await?;
    crate::store::activations::write_pending(&mut rows, pending)?;
    Ok(rows)
}

pub async fn run(app: &App, args: &RecallArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let store = app.store().await?;
    let config = app.config().await?;
    let now = Clock::or_now(args.now).micros();
    if args.k == 0 {
        bail!("--k must be at least 1");
    }
    let embedder = app
        .embedder(&args.embedder, store.embedding_dim(), 16)
        .await?;
    let model = embedder.model_name();
    let vector = match embedder.embed(&[args.query.as_str()]).await?.pop() {
        Some(Embedded::Vector { values, .. }) => values,
        Some(Embedded::Refused(why)) => bail!("the embedder refused the query: {why}"),
        None => bail!("the embedder returned nothing for the query"),
    };
    let llm = crate::llm::Llm::new(
        config,
        &crate::llm::LlmArgs {
            judge: args.judge,
            mode: Some(crate::llm::CallMode::Online),
        },
    )?;
    let mut report = recall(store, config, args, &model, vector, Some(&embedder), now).await?;
    if args.reason || crate::logic::recall::is_date_question(&args.query) {
        reason(&llm, &mut report, now).await;
    }
    print(app.json, &report, out)?;
    Ok(ExitStatus::Success)
}

/// One recall with the query embedded already (`model` made `vector`), at clock `now`.
/// `embedder` (the one that made `vector`) embeds the focused query when the query names
/// what most candidates carry; without it the focused signal is the cosine itself.
/// The report's pool (every candidate's signals) and its memories in ranked `order`, with
/// each signal's part when `--explain` asks.
fn fill_report(
    report: &mut Report,
    params: &crate::logic::recall::RecallParams,
    args: &RecallArgs,
    found: &[Found],
    ranked: &[RecallCandidate],
    order: &[usize],
) {
    report.pool = ranked
        .iter()
        .map(|c| {
            (
                c.id.clone(),
                c.session.clone(),
                Signals {
                    similarity: c.similarity,
                    focused: c.focused,
                    lexical: c.lexical,
                    entity: c.entity,
                    time: c.time,
                    crowding: c.crowding,
                    episode: c.episode,
                    salience: c.salience,
                    recency: (-c.age_days.max(0.0) / params.recency_days).exp(),
                },
            )
        })
        .collect();
    for (n, &i) in order.iter().enumerate() {
        let f = &found[i];
        let c = &ranked[i];
        let when = f
            .resolved
            .iter()
            .map(|x| format!("{}: {}", x.expression, x.label()))
            .collect();
        report.memories.push(Recalled {
            rank: n + 1,
            id: f.id.clone(),
            score: round4(rank_score(params, args.mode, c)),
            similarity: round4(c.similarity),
            explain: args.explain.then(|| {
                let p = parts(params, args.mode, c);
                Signals {
                    similarity: round4(p.similarity),
                    focused: round4(p.focused),
                    lexical: round4(p.lexical),
                    entity: round4(p.entity),
                    time: round4(p.time),
                    crowding: round4(p.crowding),
                    episode: round4(p.episode),
                    salience: round4(p.salience),
                    recency: round4(p.recency),
                }
            }),
            tier: f.tier.clone(),
            state: f.state.clone(),
            kind: f.kind.clone(),
            text: f.text.clone(),
            created_at: format_timestamp(f.created_at),
            when,
            superseded_by: f.superseded_by.clone(),
        });
    }
}

/// Each candidate's cosine to the focused query (`logic::recall::focused_query`), when the
/// query has one.
async fn focus(
    embedder: &Embedder,
    params: &crate::logic::recall::RecallParams,
    query: &str,
    found: &mut [Found],
    report: &mut Report,
) -> Result<()> {
    let texts: Vec<&str> = found.iter().map(|f| f.text.as_str()).collect();
    if let Some(focused) = crate::logic::recall::focused_query(query, &texts, params.focused_share)
    {
        match embedder.embed(&[focused.as_str()]).await?.pop() {
            Some(Embedded::Vector { values, .. }) => {
                let v = unit(values);
                for f in found.iter_mut() {
                    f.focused = cosine(&v, &f.vector);
                }
                report.notes.push(format!("focused query: {focused:?}"));
            }
            _ => report
                .notes
                .push("the focused query was not embedded: the cosine stands in".into()),
        }
    }
    Ok(())
}

/// What the ranking weighs for each candidate: its signals (the share of the query's named
/// entities it names, whether it is about a time the query asks), crowding, salience, age.
fn ranking_inputs(
    found: &[Found],
    crowding: &[f64],
    (named, naming): (&[(String, String)], &BTreeMap<String, usize>),
    asked_times: &[(chrono::NaiveDate, chrono::NaiveDate)],
    now: i64,
) -> Vec<RecallCandidate> {
    found
        .iter()
        .zip(crowding)
        .map(|(f, &crowding)| RecallCandidate {
            similarity: f.similarity,
            focused: f.focused,
            lexical: f.lexical,
            entity: if named.is_empty() {
                0.0
            } else {
                naming.get(&f.id).copied().unwrap_or(0) as f64 / named.len() as f64
            },
            time: if asked_times.is_empty() {
                0.0
            } else {
                let about = f.dates();
                f64::from(
                    about
                        .iter()
                        .any(|(s, e)| asked_times.iter().any(|(qs, qe)| s <= qe && qs <= e)),
                )
            },
            crowding,
            episode: 0.0,
            session: f.session.clone(),
            salience: f.salience,
            age_days: (now - f.last_access.unwrap_or(f.created_at)) as f64 / 86_400e6,
            created_at: f.created_at,
            id: f.id.clone(),
        })
        .collect()
}

/// How many of the `named` entities each memory of `user` names.
async fn naming_counts(
    store: &Store,
    user: &str,
    named: &[(String, String)],
) -> Result<BTreeMap<String, usize>> {
    let mut naming: BTreeMap<String, usize> = BTreeMap::new();
    if named.is_empty() {
        return Ok(naming);
    }
    #[derive(serde::Deserialize, PartialEq, Eq, PartialOrd, Ord)]
    struct Naming {
        memory_id: String,
        entity_id: String,
    }
    let filter = format!(
        "user_id = {} AND entity_id IN ({})",
        sql_string(user),
        sql_list(&named.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>())
    );
    let pairs: std::collections::BTreeSet<Naming> = store
        .scan_rows::<Naming>("memory_entities", Some(&filter))
        .await?
        .into_iter()
        .collect();
    let pairs = pairs.into_iter().map(|n| (n.memory_id, n.entity_id));
    for (memory, _) in pairs {
        *naming.entry(memory).or_default() += 1;
    }
    Ok(naming)
}

/// Activates the recalled memories (`logic::scores::on_access`), logged first as a RECALL
/// audit row keyed by user, query, mode, k and clock: the same recall at the same clock
/// finishes what it logged and adds nothing.
async fn activate(
    store: &Store,
    scores: &crate::logic::scores::ScoreParams,
    args: &RecallArgs,
    report: &mut Report,
    now: i64,
) -> Result<()> {
    let key = format!(
        "{}|{}|{:?}|{}|{}",
        args.user, args.query, args.mode, args.k, report.now
    );
    let id = derived_id(&format!("recall|{key}"));
    #[derive(serde::Deserialize)]
    struct Logged {
        after_state: Option<String>,
    }
    let logged = store
        .scan_rows::<Logged>("audit_log", Some(&format!("id = {}", sql_string(&id))))
        .await?;
    let ids: Vec<String> = report.memories.iter().map(|m| m.id.clone()).collect();
    let rows = activated_rows(store, &ids, &report.pending).await?;
    let changes: Vec<Activation> = if let Some(row) = logged.first() {
        // The same recall at the same clock: finish what it logged, add nothing.
        report
            .notes
            .push("this recall was logged at this clock already: not activated twice".into());
        #[derive(serde::Deserialize)]
        struct Logged {
            activated: Vec<Activation>,
        }
        let after = row.after_state.as_deref().unwrap_or("{}");
        serde_json::from_str::<Logged>(after)
            .map_err(|e| anyhow!("recall audit row {id}: unreadable activations: {e}"))?
            .activated
    } else {
        let changes = rows
            .iter()
            .map(|r| activation(scores, r, now))
            .collect::<Result<Vec<_>>>()?;
        let mut audit = AuditRow::new("recall", "RECALL", &key, now);
        audit.id = id.clone();
        audit.run_id = format!("recall-{}", &audit.id[..8]);
        audit.user_id = Some(args.user.clone());
        audit.source_ids = ids;
        audit.reasoning = Some(format!("recall {:?} ({:?} mode)", args.query, args.mode));
        audit.after_state = Some(json!({"activated": changes}).to_string());
        store.write_audit(&[audit]).await?;
        changes
    };
    crate::crash::point("recall.after-audit");
    report.activated = defer(store, &rows, &changes, &id, now).await?;
    crate::crash::point("recall.after-activation");
    // A recall a minute would otherwise leave a fragment a minute in each.
    for table in ["audit_log", "activations"] {
        store.merge_small_tail(table).await;
    }
    Ok(())
}

pub async fn recall(
    store: &Store,
    config: &crate::config::Config,
    args: &RecallArgs,
    model: &str,
    vector: Vec<f32>,
    embedder: Option<&Embedder>,
    now: i64,
) -> Result<Report> {
    let params = &config.recall;
    let as_of = args.as_of.map(Clock::micros);
    let today = chrono::DateTime::from_timestamp_micros(now)
        .map(|d| d.date_naive())
        .unwrap_or_default();
    // A time the query names, resolved against the recall's clock.
    let asked_times: Vec<(chrono::NaiveDate, chrono::NaiveDate)> =
        crate::logic::temporal::resolve(&args.query, today)
            .iter()
            .filter(|r| !r.implied)
            .map(|r| (r.start, r.end))
            .collect();
    let mut report = Report {
        query: args.query.clone(),
        user: args.user.clone(),
        mode: args.mode,
        now: format_timestamp(now),
        as_of: as_of.map(format_timestamp),
        memories: Vec::new(),
        activated: 0,
        answer: None,
        notes: Vec::new(),
        pool: Vec::new(),
        pending: Default::default(),
    };
    let pool = params.pool(args.k);
    let tiers: Vec<&str> = args.mode.tiers().to_vec();
    let gather = |tiers: &[&str]| {
        candidates(
            store,
            &args.query,
            &vector,
            filter(args, model, tiers, now, as_of),
            pool,
            params.nprobes,
            &asked_times,
        )
    };
    let mut found = if args.mode == Mode::Standard {
        // Widening: standard mode searches cold memories too when the query names a time
        // (what it asks about may have cooled since), when a cold memory is nearer the query
        // than the k-th nearest hot or warm one (it would compete for the results), or when no
        // hot or warm memory reaches the model's `recall` threshold (nothing strong where it
        // looked): `logic::recall::widen_reason`.
        // Hot, warm and cold are searched at once and the rules applied to what came back (a
        // hot or warm memory missing from it is farther than every cold one in it); only a
        // recall that stays in hot and warm searches them again, apart.
        let widen_below = f64::from(config.thresholds_for(model).0.recall);
        let wide_tiers = [tiers.as_slice(), &["cold"]].concat();
        let wide = gather(&wide_tiers).await?;
        let nearest = |cold: bool| {
            let mut s: Vec<f64> = wide
                .iter()
                .filter(|f| (f.tier == "cold") == cold)
                .map(|f| f.similarity)
                .collect();
            s.sort_by(|a, b| b.total_cmp(a));
            s
        };
        let (warm, cold) = (nearest(false), nearest(true));
        let at = |s: &[f64], i: usize| s.get(i).copied().unwrap_or(f64::MIN);
        let why = crate::logic::recall::widen_reason(
            !asked_times.is_empty(),
            (at(&warm, 0), at(&warm, args.k.max(1) - 1)),
            at(&cold, 0),
            widen_below,
            params.cold_margin,
        );
        match why {
            Some(why) => {
                report
                    .notes
                    .push(format!("widened to cold memories: {why}"));
                wide
            }
            None => gather(&tiers).await?,
        }
    } else {
        gather(&tiers).await?
    };
    with_pending(store, &mut found, &mut report).await?;
    // The focused query: without the names most candidates carry (the person the store is
    // about, say), embedded by the query's own embedder.
    if let (true, Some(embedder)) = (params.focused > 0.0, embedder) {
        focus(embedder, params, &args.query, &mut found, &mut report).await?;
    }
    // Entities the query names, and the memories naming them (read only when they count).
    let named = if params.entity > 0.0 {
        named_entities(store, &args.user, &args.query).await?
    } else {
        Vec::new()
    };
    let naming = naming_counts(store, &args.user, &named).await?;
    let ranking = std::time::Instant::now();
    let crowding = crowding(&found, params);
    let mut ranked = ranking_inputs(&found, &crowding, (&named, &naming), &asked_times, now);
    crate::logic::recall::fill_episodes(params, args.mode, &mut ranked);
    let order = rank(params, args.mode, &ranked, args.k);
    tracing::debug!(
        rank_ms = ranking.elapsed().as_secs_f64() * 1e3,
        pool = ranked.len(),
        "recall ranking"
    );
    fill_report(&mut report, params, args, &found, &ranked, &order);
    if !named.is_empty() {
        report.notes.push(format!(
            "the query names {}",
            named
                .iter()
                .map(|(_, n)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !args.no_activate && !report.memories.is_empty() {
        activate(store, &config.scores, args, &mut report, now).await?;
    }
    Ok(report)
}

/// Asks the `recall.answer` role for a ReasonedAnswer over the recalled memories (best first,
/// each with the dates its text names). A reply that fails validation, or no provider, leaves
/// the offline rules' answer (from the resolved dates), and the report says why.
pub async fn reason(llm: &crate::llm::Llm, report: &mut Report, now: i64) {
    use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
    if report.memories.is_empty() {
        report.notes.push("nothing recalled: no answer".into());
        return;
    }
    let input = TaskInput {
        task: Task::RecallAnswer,
        memories: report
            .memories
            .iter()
            .map(|m| MemoryView {
                id: m.id.clone(),
                kind: m.kind.clone(),
                created_at: m.created_at.clone(),
                happens_at: None,
                text: m.text.clone(),
                dates: m.when.clone(),
                cluster: None,
            })
            .collect(),
        proposal: None,
        now: format_timestamp(now),
        question: Some(report.query.clone()),
    };
    let item = crate::llm::Item {
        custom_id: "recall.answer".into(),
        input: input.clone(),
    };
    let outcome = llm.run(vec![item]).await.pop();
    let served = outcome.as_ref().and_then(|o| o.served_by.clone());
    match outcome {
        Some(crate::llm::Outcome {
            reply: Some(Reply::Answer(answer)),
            failure: None,
            ..
        }) => {
            report.answer = Some(answer);
            report.notes.push(match served.as_deref() {
                Some("offline") | None => {
                    "answered offline: from the dates the recalled memories name".into()
                }
                Some(p) => format!("answered by provider {p} (recall.answer)"),
            });
        }
        other => {
            let why = other
                .and_then(|o| o.failure)
                .unwrap_or_else(|| "no reply".into());
            report.answer = Some(crate::llm::offline::answer(&input));
            report.notes.push(format!(
                "the recall.answer role gave no answer that could be trusted ({why}): \
                 answered offline from the dates the recalled memories name"
            ));
        }
    }
}

fn print(json: bool, report: &Report, out: &mut dyn Write) -> Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, report)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "recall {:?} for {} ({} mode{}): {} memories, {} activated",
        report.query,
        report.user,
        format!("{:?}", report.mode).to_lowercase(),
        report
            .as_of
            .as_deref()
            .map(|t| format!(", as of {t}"))
            .unwrap_or_default(),
        report.memories.len(),
        report.activated
    )?;
    for m in &report.memories {
        writeln!(
            out,
            "{:>3}  {:.3}  {:<8} {:<36} {}",
            m.rank, m.score, m.tier, m.id, m.text
        )?;
        if !m.when.is_empty() {
            writeln!(out, "     when: {}", m.when.join("; "))?;
        }
        if let Some(s) = &m.superseded_by {
            writeln!(out, "     superseded by {s}")?;
        }
    }
    if let Some(a) = &report.answer {
        writeln!(
            out,
            "answer: {} (confidence {:.2}{}; from {})",
            a.answer,
            a.confidence,
            if a.requires_inference {
                ", inferred"
            } else {
                ""
            },
            a.source_memory_ids.join(", ")
        )?;
        for t in &a.temporal_resolutions {
            writeln!(
                out,
                "     \"{}\" in {} means {}",
                t.expression, t.memory_id, t.resolved
            )?;
        }
        writeln!(out, "     reasoning: {}", a.reasoning)?;
    }
    for n in &report.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}
