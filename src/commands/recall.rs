//! `memlife recall "QUERY" --user U`: a user's memories nearest the query, by mode (which
//! tiers: `logic::recall`), ranked by similarity, salience and recency, current facts only
//! unless `--history` or `--as-of`; each with the dates its text names (resolved against
//! when it was written, `logic::temporal`) and its successor when it has one. Every returned
//! memory is activated (seed 002: access_count, recall_frequency, last_accessed_at, salience +
//! the access boost, state and tier recomputed, the spacing interval) in one write per call,
//! unless `--no-activate`.
//!
//! The activation is logged first, as a `RECALL` audit row keyed by the user, the query, the
//! mode and the clock: a recall killed between the log and the write is finished by the same
//! recall at the same clock (`--now`), and a recall repeated at the same clock activates
//! nothing twice.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Result, anyhow, bail};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::embedders::{Embedded, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::logic::recall::{Candidate, Mode, rank, rank_score};
use crate::logic::scores::{ScoreInput, State, Ttl, on_access, score};
use crate::model::encoding::{format_timestamp, parse_timestamp};
use crate::model::schema::MEMORIES;
use crate::store::audit::{AuditRow, derived_id};
use crate::store::{
    Store, batch_from_json, json_rows, sql_list, sql_string, sql_timestamp, text_of,
};

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
    pub as_of: Option<String>,
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
    pub now: Option<String>,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

#[derive(Serialize)]
pub struct Recalled {
    rank: usize,
    id: String,
    score: f64,
    similarity: f64,
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
    notes: Vec<String>,
}

const COLUMNS: &[&str] = &[
    "id",
    "text",
    "kind",
    "tier",
    "state",
    "salience",
    "importance",
    "created_at",
    "last_accessed_at",
    "superseded_by",
    "_distance",
];

/// Columns the activation changes.
const ACTIVATED: &[&str] = &[
    "access_count",
    "recall_frequency",
    "last_accessed_at",
    "last_recall_interval_days",
    "decay_gradient",
    "salience",
    "salience_anchor",
    "state",
    "tier",
    "retention",
    "importance",
    "archived_at",
];

fn f64_of(row: &Map<String, Value>, field: &str) -> f64 {
    row.get(field).and_then(Value::as_f64).unwrap_or(0.0)
}

fn time_of(row: &Map<String, Value>, field: &str) -> Option<i64> {
    row.get(field)
        .and_then(Value::as_str)
        .and_then(parse_timestamp)
}

/// The activation of one memory row at `now`: the columns it changes.
fn activation(
    p: &crate::logic::scores::ScoreParams,
    row: &Map<String, Value>,
    now: i64,
) -> Result<Map<String, Value>> {
    let id = text_of(row, "id");
    let state = State::parse(&text_of(row, "state"))
        .ok_or_else(|| anyhow!("memory {id}: unknown state {:?}", row["state"]))?;
    let ttl = Ttl::parse(&text_of(row, "ttl_policy"))
        .ok_or_else(|| anyhow!("memory {id}: unknown ttl_policy {:?}", row["ttl_policy"]))?;
    let salience = f64_of(row, "salience");
    let mut m = ScoreInput {
        state,
        ttl,
        episodic: text_of(row, "kind") == "episode",
        confidence: f64_of(row, "confidence"),
        salience,
        salience_anchor: row
            .get("salience_anchor")
            .and_then(Value::as_f64)
            .unwrap_or(salience),
        access_count: row.get("access_count").and_then(Value::as_i64).unwrap_or(0),
        recall_frequency: row
            .get("recall_frequency")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        decay_gradient: f64_of(row, "decay_gradient"),
        created_at: time_of(row, "created_at").unwrap_or(now),
        last_accessed_at: time_of(row, "last_accessed_at"),
        archived_at: time_of(row, "archived_at"),
        emotional_salience: f64_of(row, "emotional_salience"),
        inbound_links: 0,
        last_recall_interval_days: f64_of(row, "last_recall_interval_days"),
    };
    let current = score(p, &m, now).salience;
    on_access(p, &mut m, current, now);
    let out = score(p, &m, now);
    let mut changed = Map::new();
    changed.insert("id".into(), json!(id));
    changed.insert("access_count".into(), json!(m.access_count));
    changed.insert("recall_frequency".into(), json!(m.recall_frequency));
    changed.insert("last_accessed_at".into(), json!(format_timestamp(now)));
    changed.insert(
        "last_recall_interval_days".into(),
        json!(m.last_recall_interval_days),
    );
    changed.insert("decay_gradient".into(), json!(m.decay_gradient));
    changed.insert("salience".into(), json!(out.salience));
    changed.insert("salience_anchor".into(), json!(m.salience_anchor));
    changed.insert("state".into(), json!(out.state.as_str()));
    changed.insert("tier".into(), json!(out.tier));
    changed.insert("retention".into(), json!(out.retention));
    changed.insert("importance".into(), json!(out.importance));
    changed.insert(
        "archived_at".into(),
        json!(out.archived_at.map(format_timestamp)),
    );
    Ok(changed)
}

/// Writes logged activations onto the current rows, in one commit (rows activated at this
/// clock already are left alone).
async fn apply(store: &Store, changes: &[Map<String, Value>], now: i64) -> Result<usize> {
    let ids: Vec<String> = changes.iter().map(|c| text_of(c, "id")).collect();
    let rows = store
        .rows_with_ids("memories", &ids, None, &MEMORIES.columns_except(""))
        .await?;
    let by_id: BTreeMap<String, Map<String, Value>> =
        rows.into_iter().map(|r| (text_of(&r, "id"), r)).collect();
    let mut out = Vec::new();
    for change in changes {
        let Some(row) = by_id.get(&text_of(change, "id")) else {
            continue; // gone since: nothing to activate
        };
        if time_of(row, "last_accessed_at") == Some(now) {
            continue;
        }
        let mut row = row.clone();
        for c in ACTIVATED {
            row.insert(
                c.to_string(),
                change.get(*c).cloned().unwrap_or(Value::Null),
            );
        }
        out.push(Value::Object(row));
    }
    if out.is_empty() {
        return Ok(0);
    }
    let batch = batch_from_json(&MEMORIES, store.embedding_dim(), now, &out)
        .map_err(|e| anyhow!("activation rows: {e}"))?;
    store.upsert_batch(&MEMORIES, batch).await?;
    Ok(out.len())
}

pub async fn run(app: &App, args: &RecallArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let store = app.store().await?;
    let config = app.config().await?;
    let now = match &args.now {
        Some(t) => parse_timestamp(t).ok_or_else(|| anyhow!("--now {t:?} is not RFC 3339"))?,
        None => chrono::Utc::now().timestamp_micros(),
    };
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
            mode: Some(crate::llm::Mode::Online),
        },
    )?;
    let mut report = recall(store, &config.scores, args, &model, vector, now).await?;
    if args.reason || crate::logic::recall::is_date_question(&args.query) {
        reason(&llm, &mut report, now).await;
    }
    print(app.json, &report, out)?;
    Ok(ExitStatus::Success)
}

/// One recall with the query embedded already (`model` made `vector`), at clock `now`.
pub async fn recall(
    store: &Store,
    scores: &crate::logic::scores::ScoreParams,
    args: &RecallArgs,
    model: &str,
    vector: Vec<f32>,
    now: i64,
) -> Result<Report> {
    let as_of = match &args.as_of {
        Some(t) => {
            Some(parse_timestamp(t).ok_or_else(|| anyhow!("--as-of {t:?} is not RFC 3339"))?)
        }
        None => None,
    };
    let tiers: Vec<String> = args.mode.tiers().iter().map(|t| t.to_string()).collect();
    let mut filter = format!(
        "user_id = {} AND embedding_model = {} AND tier IN ({})",
        sql_string(&args.user),
        sql_string(model),
        sql_list(&tiers)
    );
    if !args.mode.archived() {
        filter.push_str(" AND archived_at IS NULL AND state <> 'archived'");
    }
    match as_of {
        Some(t) => filter.push_str(&format!(
            " AND created_at <= {t} AND (valid_from IS NULL OR valid_from <= {t}) \
             AND (valid_until IS NULL OR valid_until > {t})",
            t = sql_timestamp(t)
        )),
        None if !args.history => filter.push_str(&format!(
            " AND superseded_by IS NULL AND (valid_until IS NULL OR valid_until > {})",
            sql_timestamp(now)
        )),
        None => {}
    }
    // Ranking reorders the nearest: read a few times k of them.
    let found = json_rows(
        &store
            .nearest_rows("memories", vector, args.k * 5, &filter, COLUMNS)
            .await?,
    );
    let candidates: Vec<Candidate> = found
        .iter()
        .map(|r| {
            let salience = r
                .get("salience")
                .and_then(Value::as_f64)
                .or_else(|| r.get("importance").and_then(Value::as_f64))
                .unwrap_or(0.0);
            let since = time_of(r, "last_accessed_at")
                .or_else(|| time_of(r, "created_at"))
                .unwrap_or(now);
            Candidate {
                similarity: 1.0 - f64_of(r, "_distance"),
                salience,
                age_days: (now - since) as f64 / 86_400e6,
                created_at: time_of(r, "created_at").unwrap_or(0),
                id: text_of(r, "id"),
            }
        })
        .collect();
    let order = rank(&candidates, args.k);
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
    };
    for (n, &i) in order.iter().enumerate() {
        let r = &found[i];
        let created = time_of(r, "created_at").unwrap_or(now);
        let said = chrono::DateTime::from_timestamp_micros(created)
            .map(|d| d.date_naive())
            .unwrap_or_default();
        let when = crate::logic::temporal::resolve(&text_of(r, "text"), said)
            .iter()
            .map(|x| format!("{}: {}", x.expression, x.label()))
            .collect();
        report.memories.push(Recalled {
            rank: n + 1,
            id: text_of(r, "id"),
            score: (rank_score(&candidates[i]) * 1e4).round() / 1e4,
            similarity: (candidates[i].similarity * 1e4).round() / 1e4,
            tier: text_of(r, "tier"),
            state: text_of(r, "state"),
            kind: text_of(r, "kind"),
            text: text_of(r, "text"),
            created_at: format_timestamp(created),
            when,
            superseded_by: r
                .get("superseded_by")
                .and_then(Value::as_str)
                .map(str::to_string),
        });
    }
    if !args.no_activate && !report.memories.is_empty() {
        let key = format!(
            "{}|{}|{:?}|{}|{}",
            args.user, args.query, args.mode, args.k, report.now
        );
        let id = derived_id(&format!("recall|{key}"));
        let logged = json_rows(
            &store
                .scan_columns(
                    "audit_log",
                    Some(&format!("id = {}", sql_string(&id))),
                    &["after_state"],
                )
                .await?,
        );
        let changes: Vec<Map<String, Value>> = if let Some(row) = logged.first() {
            // The same recall at the same clock: finish what it logged, add nothing.
            report
                .notes
                .push("this recall was logged at this clock already: not activated twice".into());
            let after: Value = serde_json::from_str(row["after_state"].as_str().unwrap_or("{}"))?;
            after["activated"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_object().cloned())
                .collect()
        } else {
            let ids: Vec<String> = report.memories.iter().map(|m| m.id.clone()).collect();
            let rows = store
                .rows_with_ids(
                    "memories",
                    &ids,
                    None,
                    &MEMORIES.columns_except("embedding"),
                )
                .await?;
            let changes = rows
                .iter()
                .map(|r| activation(scores, r, now))
                .collect::<Result<Vec<_>>>()?;
            let mut audit = AuditRow::new("recall", "RECALL", &key, now);
            audit.id = id;
            audit.run_id = format!("recall-{}", &audit.id[..8]);
            audit.user_id = Some(args.user.clone());
            audit.source_ids = ids;
            audit.reasoning = Some(format!("recall {:?} ({:?} mode)", args.query, args.mode));
            audit.after_state = Some(json!({"activated": changes}).to_string());
            store.write_audit(&[audit]).await?;
            changes
        };
        crate::crash::point("recall.after-audit");
        report.activated = apply(store, &changes, now).await?;
        crate::crash::point("recall.after-activation");
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
