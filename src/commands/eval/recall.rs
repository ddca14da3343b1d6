//! `memlife eval recall --locomo FILE`: what an agent recalls, measured on real conversations.
//!
//! Each LoCoMo sample becomes one user of a fresh store: its observations become memories
//! (`created_at` the date of their session, `source` = `locomo:SAMPLE:D3:7`, the dialogue turn
//! they were drawn from), imported, embedded and read for entities through the real CLI, the
//! way a user's store is built. Questions of categories 1-4 (multi-hop, temporal, open-domain,
//! single-hop) count when one of their evidence turns has an observation. Each is asked
//! through `memlife recall`'s own function (read only, at the clock one day after the
//! conversation's last session) and through plain cosine over the same vectors (every live
//! memory of the user, exact), and both rankings are scored (`logic::recall_eval`: hit@k,
//! evidence recall@k, MRR), overall and per category.
//!
//! `--maintain` then runs the nightly jobs over the store, per user at that clock (link,
//! cluster, consolidate, refine, embed, entities, scores), and scores again: a memory made by
//! consolidating or splitting others stands for their turns; a superseded or archived one is
//! not recalled in standard mode, so its loss shows. The report has the live memories before
//! and after, each job's counts, and every supersession the jobs made, to be read.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use chrono::{NaiveDate, NaiveDateTime};
use serde::Serialize;
use serde_json::{Value, json};

use crate::app::App;
use crate::commands::bench::harness::{Workdir, memlife};
use crate::commands::recall::{RecallArgs, recall};
use crate::embedders::{Embedded, Embedder, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::logic::recall::Mode;
use crate::logic::recall_eval::{Figures, Tally, canonical_turn, evidence_turns};
use crate::model::encoding::format_timestamp;
use crate::store::{Store, sql_string};

#[derive(clap::Args, Clone, Debug)]
pub struct RecallEvalArgs {
    /// LoCoMo conversations (a JSON array of samples with `conversation`, `observation` and
    /// `qa`), e.g. ../shared/data/locomo-dev.json.
    #[arg(long)]
    pub locomo: PathBuf,
    /// The cut-offs scored.
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,20")]
    pub k: Vec<usize>,
    /// The recall mode asked.
    #[arg(long, value_enum, default_value = "standard")]
    pub mode: Mode,
    /// Run the nightly jobs over the store, then score again.
    #[arg(long)]
    pub maintain: bool,
    /// List the questions whose evidence neither ranking returned within the largest k.
    #[arg(long)]
    pub misses: bool,
    /// Only these samples (by `sample_id`, comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub samples: Vec<String>,
    /// Keep the store in this folder (removed and rebuilt).
    #[arg(long)]
    pub keep: Option<PathBuf>,
    /// Score the store a previous `--keep` run left in that folder, as it is, instead of
    /// building it again (to compare rankings quickly; not with --maintain).
    #[arg(long, requires = "keep", conflicts_with = "maintain")]
    pub reuse: bool,
    /// Write every question's candidates with their signals (JSON Lines), to tune weights.
    #[arg(long)]
    pub candidates: Option<PathBuf>,
    /// Also tell the conversations as narratives: their dialogue turns as episodes of a second
    /// store, one narrative per session by `memlife sessions`, and the same questions asked of
    /// the narratives alone (each standing for its episodes' turns); reports the compression.
    #[arg(long, conflicts_with = "reuse")]
    pub narratives: bool,
    /// Also distill the conversations: their dialogue turns as episodes of a store of their
    /// own (embedded, entities read, scores at the clock), the questions asked of it before
    /// and after `memlife distill` at the clock (a fact stands for its episodes' turns).
    #[arg(long, conflicts_with = "reuse")]
    pub distill: bool,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

/// One observation as a memory.
struct Observation {
    id: String,
    text: String,
    created_at: i64,
    turns: Vec<String>,
    session: usize,
}

struct Question {
    user: String,
    text: String,
    category: u64,
    evidence: BTreeSet<String>,
}

/// One dialogue turn as an episode (`--narratives`).
struct Turn {
    id: String,
    text: String,
    created_at: i64,
    session: usize,
    turn: String,
}

struct Sample {
    id: String,
    observations: Vec<Observation>,
    turns: Vec<Turn>,
    /// One day after the last session: the clock of the jobs and the recalls.
    clock: i64,
}

const CATEGORIES: [(u64, &str); 4] = [
    (1, "multi-hop"),
    (2, "temporal"),
    (3, "open-domain"),
    (4, "single-hop"),
];

/// "1:56 pm on 8 May, 2023" -> that time, UTC.
fn session_time(text: &str) -> Option<i64> {
    let (time, date) = text.split_once(" on ")?;
    let date = NaiveDate::parse_from_str(&date.trim().replace(',', ""), "%d %B %Y").ok()?;
    let time = chrono::NaiveTime::parse_from_str(&time.trim().to_uppercase(), "%I:%M %p")
        .unwrap_or_default();
    Some(NaiveDateTime::new(date, time).and_utc().timestamp_micros())
}

fn read_locomo(
    path: &std::path::Path,
    only: &[String],
) -> Result<(Vec<Sample>, Vec<Question>, usize)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let data: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let items = data
        .as_array()
        .ok_or_else(|| anyhow!("{}: expected a JSON array of samples", path.display()))?;
    let (mut samples, mut questions, mut asked) = (Vec::new(), Vec::new(), 0usize);
    for (n, s) in items.iter().enumerate() {
        let at = format!("{} sample {}", path.display(), n + 1);
        let id = s["sample_id"]
            .as_str()
            .ok_or_else(|| anyhow!("{at}: no sample_id"))?
            .to_string();
        if !only.is_empty() && !only.contains(&id) {
            continue;
        }
        let conversation = s["conversation"]
            .as_object()
            .ok_or_else(|| anyhow!("{at} ({id}): no conversation"))?;
        let observation = s["observation"]
            .as_object()
            .ok_or_else(|| anyhow!("{at} ({id}): no observation"))?;
        let mut observations = Vec::new();
        let mut turns = Vec::new();
        let mut last = 0i64;
        for session in 1.. {
            let Some(when) = conversation.get(&format!("session_{session}_date_time")) else {
                break;
            };
            let when = when.as_str().and_then(session_time).ok_or_else(|| {
                anyhow!("{at} ({id}): session_{session}_date_time {when} is not a date")
            })?;
            last = last.max(when);
            // The session's turns a minute apart (LoCoMo dates sessions, not turns).
            let said = conversation.get(&format!("session_{session}"));
            for (i, t) in said
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let (Some(speaker), Some(text)) = (t["speaker"].as_str(), t["text"].as_str())
                else {
                    continue;
                };
                let Some(turn) = t["dia_id"].as_str().and_then(canonical_turn) else {
                    continue;
                };
                if text.trim().is_empty() {
                    continue;
                }
                turns.push(Turn {
                    id: uuid::Uuid::new_v5(
                        &uuid::Uuid::NAMESPACE_OID,
                        format!("locomo-turn|{id}|{turn}").as_bytes(),
                    )
                    .to_string(),
                    text: format!("{speaker}: {}", text.trim()),
                    created_at: when + i as i64 * 60_000_000,
                    session,
                    turn,
                });
            }
            let Some(by_speaker) = observation
                .get(&format!("session_{session}_observation"))
                .and_then(Value::as_object)
            else {
                continue;
            };
            for (speaker, facts) in by_speaker {
                for (i, fact) in facts.as_array().into_iter().flatten().enumerate() {
                    let (Some(text), Some(dia)) = (fact[0].as_str(), fact.get(1)) else {
                        bail!(
                            "{at} ({id}): session_{session}_observation {speaker}[{i}] is not [text, dia_id]"
                        );
                    };
                    let turns: Vec<String> = match dia {
                        Value::Array(list) => list
                            .iter()
                            .filter_map(Value::as_str)
                            .filter_map(canonical_turn)
                            .collect(),
                        other => other.as_str().map(evidence_turns).unwrap_or_default(),
                    };
                    if text.trim().is_empty() {
                        continue;
                    }
                    observations.push(Observation {
                        id: uuid::Uuid::new_v5(
                            &uuid::Uuid::NAMESPACE_OID,
                            format!("locomo|{id}|{session}|{speaker}|{i}").as_bytes(),
                        )
                        .to_string(),
                        text: text.trim().to_string(),
                        created_at: when,
                        turns,
                        session,
                    });
                }
            }
        }
        let observed: BTreeSet<&String> = observations.iter().flat_map(|o| &o.turns).collect();
        for q in s["qa"].as_array().into_iter().flatten() {
            let category = q["category"].as_u64().unwrap_or(0);
            if !(1..=4).contains(&category) {
                continue;
            }
            asked += 1;
            let evidence: BTreeSet<String> = q["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .flat_map(evidence_turns)
                .filter(|t| observed.contains(t))
                .collect();
            if evidence.is_empty() {
                continue;
            }
            questions.push(Question {
                user: id.clone(),
                text: q["question"].as_str().unwrap_or_default().to_string(),
                category,
                evidence,
            });
        }
        samples.push(Sample {
            id,
            observations,
            turns,
            clock: last + 86_400_000_000,
        });
    }
    if samples.is_empty() {
        bail!("{}: no sample to evaluate", path.display());
    }
    Ok((samples, questions, asked))
}

#[derive(Serialize)]
struct Side {
    recall: Figures,
    cosine: Figures,
}

#[derive(Serialize)]
struct Scored {
    /// Memories the recalls could return (live, current), over all users.
    live_memories: usize,
    overall: Side,
    per_category: BTreeMap<String, Side>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    misses: Vec<Value>,
}

/// What each memory stands for: its own turns, and those of the memories it was made from.
async fn turns_of(
    store: &Store,
    own: &BTreeMap<String, Vec<String>>,
) -> Result<BTreeMap<String, BTreeSet<String>>> {
    #[derive(serde::Deserialize)]
    struct MadeOf {
        id: String,
        consolidates_memory_ids: Option<Vec<String>>,
    }
    let made_of: BTreeMap<String, Vec<String>> = store
        .scan_rows::<MadeOf>("memories", None)
        .await?
        .into_iter()
        .map(|r| (r.id, r.consolidates_memory_ids.unwrap_or_default()))
        .collect();
    Ok(crate::logic::recall_eval::units_of(own, &made_of))
}

/// The live, current memories of a user with their vectors (plain cosine's candidates).
async fn live_vectors(store: &Store, user: &str, clock: i64) -> Result<Vec<(String, Vec<f32>)>> {
    let filter = format!(
        "user_id = {} AND embedding IS NOT NULL AND archived_at IS NULL AND state <> 'archived' \
         AND superseded_by IS NULL AND (valid_until IS NULL OR valid_until > {})",
        sql_string(user),
        crate::store::sql_timestamp(clock)
    );
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    let (rows, vectors) = store
        .scan_rows_with_vectors::<Id>("memories", &filter, "embedding")
        .await?;
    let dim = store.embedding_dim();
    Ok(rows
        .into_iter()
        .zip(vectors.chunks_exact(dim))
        .map(|(r, v)| (r.id, v.to_vec()))
        .collect())
}

#[allow(clippy::too_many_arguments)]
async fn score_store(
    app: &App,
    store: &Store,
    args: &RecallEvalArgs,
    samples: &[Sample],
    questions: &[Question],
    vectors: &[Vec<f32>],
    embedder: &Embedder,
    model: &str,
    own: &BTreeMap<String, Vec<String>>,
    texts: &BTreeMap<String, String>,
    mut dump: Option<&mut std::fs::File>,
) -> Result<Scored> {
    let config = app.config().await?;
    let units = turns_of(store, own).await?;
    let kmax = args.k.iter().copied().max().unwrap_or(10);
    let clock: BTreeMap<&str, i64> = samples.iter().map(|s| (s.id.as_str(), s.clock)).collect();
    let mut live: BTreeMap<&str, Vec<(String, Vec<f32>)>> = BTreeMap::new();
    for s in samples {
        live.insert(&s.id, live_vectors(store, &s.id, s.clock).await?);
    }
    let (mut all_r, mut all_c) = (Tally::default(), Tally::default());
    let mut per: BTreeMap<u64, (Tally, Tally)> = BTreeMap::new();
    let mut misses = Vec::new();
    let none = BTreeSet::new();
    for (q, vector) in questions.iter().zip(vectors) {
        let now = clock[q.user.as_str()];
        let recall_args = RecallArgs {
            query: q.text.clone(),
            user: q.user.clone(),
            mode: args.mode,
            k: kmax,
            as_of: None,
            history: false,
            no_activate: true,
            reason: false,
            judge: None,
            now: None,
            explain: false,
            embedder: Default::default(),
        };
        let report = recall(
            store,
            config,
            &recall_args,
            model,
            vector.clone(),
            Some(embedder),
            now,
        )
        .await?;
        let recalled: Vec<BTreeSet<String>> = report
            .memories
            .iter()
            .map(|m| units.get(&m.id).cloned().unwrap_or_default())
            .collect();
        // Plain cosine: every live memory of the user, exact.
        let mut by_cosine: Vec<(f64, &str)> = live[q.user.as_str()]
            .iter()
            .map(|(id, v)| (crate::logic::similarity::dot(vector, v) as f64, id.as_str()))
            .collect();
        by_cosine.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        let cosine: Vec<BTreeSet<String>> = by_cosine
            .iter()
            .take(kmax)
            .map(|(_, id)| units.get(*id).cloned().unwrap_or_else(|| none.clone()))
            .collect();
        all_r.add(&recalled, &q.evidence, &args.k);
        all_c.add(&cosine, &q.evidence, &args.k);
        let (r, c) = per.entry(q.category).or_default();
        r.add(&recalled, &q.evidence, &args.k);
        c.add(&cosine, &q.evidence, &args.k);
        if let Some(file) = dump.as_deref_mut() {
            let pool: Vec<Value> = report
                .pool
                .iter()
                .map(|(id, session, s)| {
                    json!({"id": id, "session": session,
                           "evidence": units.get(id).map(|u| u.intersection(&q.evidence).cloned().collect::<Vec<_>>()).unwrap_or_default(),
                           "signals": s})
                })
                .collect();
            writeln!(
                file,
                "{}",
                json!({"user": q.user, "question": q.text, "category": q.category,
                       "evidence": q.evidence, "notes": report.notes, "pool": pool})
            )?;
        }
        let hit =
            |results: &[BTreeSet<String>]| results.iter().any(|u| !u.is_disjoint(&q.evidence));
        if args.misses && (!hit(&recalled) || !hit(&cosine)) {
            let show = |ids: Vec<&str>| -> Vec<Value> {
                ids.into_iter()
                    .take(3)
                    .map(|id| json!({"id": id, "turns": units.get(id), "text": texts.get(id)}))
                    .collect()
            };
            misses.push(json!({
                "user": q.user, "question": q.text, "category": q.category,
                "evidence": q.evidence,
                "recall_found": hit(&recalled), "cosine_found": hit(&cosine),
                "recall_top3": show(report.memories.iter().map(|m| m.id.as_str()).collect()),
                "cosine_top3": show(by_cosine.iter().map(|(_, id)| *id).collect()),
            }));
        }
    }
    let name = |c: u64| {
        CATEGORIES
            .iter()
            .find(|(n, _)| *n == c)
            .map_or("other", |(_, name)| name)
    };
    Ok(Scored {
        live_memories: live.values().map(Vec::len).sum(),
        overall: Side {
            recall: all_r.figures(),
            cosine: all_c.figures(),
        },
        per_category: per
            .iter()
            .map(|(c, (r, cos))| {
                (
                    format!("{c} {}", name(*c)),
                    Side {
                        recall: r.figures(),
                        cosine: cos.figures(),
                    },
                )
            })
            .collect(),
        misses,
    })
}

/// The nightly jobs over one user at its clock, in order; each job's report.
/// `maintain` for every sample: each job's counts and status per user.
fn maintain_all(
    db: &str,
    samples: &[Sample],
    forward: &[String],
) -> Result<BTreeMap<String, Vec<Value>>> {
    let mut jobs: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for s in samples {
        for (job, r) in maintain(db, s, forward)? {
            jobs.entry(job)
                .or_default()
                .push(json!({"user": s.id, "counts": r["counts"], "status": r["status"]}));
        }
    }
    Ok(jobs)
}

fn maintain(db: &str, sample: &Sample, forward: &[String]) -> Result<Vec<(String, Value)>> {
    let now = format_timestamp(sample.clock);
    let mut reports = Vec::new();
    let jobs: &[(&str, &[&str])] = &[
        ("link", &["--llm", "offline"]),
        ("cluster", &[]),
        ("consolidate", &["--llm", "offline"]),
        ("refine", &["--llm", "offline"]),
        ("embed", &[]),
        ("entities", &[]),
        ("scores", &[]),
    ];
    for (job, extra) in jobs {
        let mut a: Vec<&str> = vec!["--db", db, "--json", job, "--user", &sample.id];
        if matches!(*job, "consolidate" | "refine" | "scores") {
            a.extend(["--now", &now]);
        }
        a.extend(extra.iter());
        if matches!(*job, "consolidate" | "embed" | "refine" | "entities") {
            a.extend(forward.iter().map(String::as_str));
        }
        let (report, _) = memlife(&a)?;
        reports.push((job.to_string(), report));
    }
    Ok(reports)
}

pub async fn run(app: &App, args: &RecallEvalArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    if args.k.is_empty() || args.k.contains(&0) {
        bail!("--k takes cut-offs of at least 1, e.g. 1,5,10,20");
    }
    let (samples, questions, asked) = read_locomo(&args.locomo, &args.samples)?;
    let config = app.config().await?;
    let path = args.keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("memlife-eval-recall-{}", std::process::id()))
    });
    let reuse = args.reuse && path.join("db").exists();
    if !reuse {
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    }
    let work = Workdir {
        path,
        keep: args.keep.is_some(),
    };
    let db = work.path.join("db").to_string_lossy().into_owned();
    let file = work.path.join("memories.jsonl");
    let mut lines = String::new();
    let mut own: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    for s in &samples {
        for o in &s.observations {
            lines.push_str(
                &json!({"id": o.id, "user_id": s.id, "text": o.text, "kind": "fact",
                        "created_at": format_timestamp(o.created_at),
                        "session_id": format!("{}:session_{}", s.id, o.session),
                        "source": format!("locomo:{}:{}", s.id, o.turns.join(","))})
                .to_string(),
            );
            lines.push('\n');
            own.insert(o.id.clone(), o.turns.clone());
            texts.insert(o.id.clone(), o.text.clone());
        }
    }
    if !reuse {
        std::fs::write(&file, lines).with_context(|| format!("writing {}", file.display()))?;
    }
    // Flags the jobs that embed are given, so they embed like this process.
    let mut forward: Vec<String> = Vec::new();
    if let Some(kind) = &args.embedder.embedder {
        forward.push("--embedder".into());
        forward.push(format!("{kind:?}").to_lowercase());
    }
    if let Some(dir) = &args.embedder.model_dir {
        forward.push("--model-dir".into());
        forward.push(dir.to_string_lossy().into_owned());
    }
    let mut base: Vec<String> = vec!["--db".into(), db.clone(), "--json".into()];
    if let Some(c) = &config.source {
        base.push("--config".into());
        base.push(c.to_string_lossy().into_owned());
    }
    let cli = |extra: &[&str], fwd: bool| -> Result<Value> {
        let mut a: Vec<&str> = base.iter().map(String::as_str).collect();
        a.extend(extra);
        if fwd {
            a.extend(forward.iter().map(String::as_str));
        }
        Ok(memlife(&a)?.0)
    };
    if !reuse {
        cli(&["init"], false)?;
        cli(&["import", &file.to_string_lossy()], false)?;
        cli(&["embed"], true)?;
        cli(&["entities"], true)?;
    }
    let store = Store::open(&db).await?;
    let embedder: Embedder = app
        .embedder(&args.embedder, store.embedding_dim(), 64)
        .await?;
    let model = embedder.model_name();
    let raw = embed_texts(
        &embedder,
        &questions
            .iter()
            .map(|q| q.text.as_str())
            .collect::<Vec<_>>(),
    )
    .await?;
    let mut dump = match &args.candidates {
        Some(p) => {
            Some(std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?)
        }
        None => None,
    };
    let before = score_store(
        app,
        &store,
        args,
        &samples,
        &questions,
        &raw,
        &embedder,
        &model,
        &own,
        &texts,
        dump.as_mut(),
    )
    .await?;
    let mut report = json!({
        "file": args.locomo.display().to_string(),
        "samples": samples.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
        "observations": own.len(),
        "questions_asked": asked,
        "questions_counted": questions.len(),
        "mode": args.mode,
        "embedding_model": model,
        "k": args.k,
        "before": before,
    });
    if args.maintain {
        let jobs = maintain_all(&db, &samples, &forward)?;
        let store = Store::open(&db).await?;
        let after = score_store(
            app, &store, args, &samples, &questions, &raw, &embedder, &model, &own, &texts, None,
        )
        .await?;
        let chains = supersessions(&store).await?;
        report["jobs"] = json!(jobs);
        report["supersessions"] = json!(chains);
        report["after"] = json!(after);
    }
    // memlife on another database of this evaluation, with its config (and embedder flags).
    let at = |db: &str, extra: &[&str], fwd: bool| -> Result<Value> {
        let mut a: Vec<&str> = vec!["--db", db, "--json"];
        a.extend(base.iter().skip(3).map(String::as_str));
        a.extend(extra);
        if fwd {
            a.extend(forward.iter().map(String::as_str));
        }
        Ok(memlife(&a)?.0)
    };
    let side = (&samples[..], &questions[..], &raw[..]);
    if args.narratives {
        let told = narrative_side(app, args, side, (&embedder, &model), &work.path, &at).await?;
        report["narratives"] = told;
    }
    if args.distill {
        report["distill"] =
            distill_side(app, args, side, (&embedder, &model), &work.path, &at).await?;
    }
    print(app.json, &report, args, out)?;
    Ok(ExitStatus::Success)
}

/// memlife run on a database (`db`, the arguments, whether the embedder flags go along).
type MemlifeAt<'a> = dyn Fn(&str, &[&str], bool) -> Result<Value> + 'a;

/// Scores a store of narratives, each standing for the turns `own` gives its episodes.
async fn score_narratives(
    app: &App,
    args: &RecallEvalArgs,
    store: &Store,
    (samples, questions, raw): (&[Sample], &[Question], &[Vec<f32>]),
    (embedder, model): (&Embedder, &str),
    own: &BTreeMap<String, Vec<String>>,
) -> Result<Scored> {
    let none = BTreeMap::new();
    score_store(
        app, store, args, samples, questions, raw, embedder, model, own, &none, None,
    )
    .await
}

/// The samples' dialogue turns as episode rows (JSON Lines), and each episode's turn; `read`:
/// each turn as accessed once when it was said (the agent read it in the conversation), so
/// `scores` decays it as a used memory rather than keeping a never-read candidate's salience.
fn turn_rows(samples: &[Sample], read: bool) -> (String, BTreeMap<String, Vec<String>>) {
    let mut lines = String::new();
    let mut own: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in samples {
        for t in &s.turns {
            let row = json!({"id": t.id, "user_id": s.id, "text": t.text, "kind": "episode",
                "created_at": format_timestamp(t.created_at),
                "session_id": format!("{}:session_{}", s.id, t.session),
                "source": format!("locomo:{}:{}", s.id, t.turn)});
            let mut row = row;
            if read {
                row["state"] = json!("active");
                row["access_count"] = json!(1);
                row["last_accessed_at"] = json!(format_timestamp(t.created_at));
            }
            lines.push_str(&(row.to_string() + "\n"));
            own.insert(t.id.clone(), vec![t.turn.clone()]);
        }
    }
    (lines, own)
}

/// Live memories of a store.
async fn live_memories(store: &Store) -> Result<u64> {
    Ok(store
        .count_rows(
            "memories",
            Some("archived_at IS NULL AND state <> 'archived'"),
        )
        .await? as u64)
}

/// `--distill`: the samples' dialogue turns as episodes of a store of their own (`turns-db`:
/// imported as read once when said, embedded, entities read, `scores` at the latest sample's clock so old turns
/// fade), the questions asked of it, then `memlife distill` at that clock and the questions
/// asked again: a fact stands for the turns of the episodes it holds, an archived episode is
/// not recalled.
async fn distill_side(
    app: &App,
    args: &RecallEvalArgs,
    (samples, questions, raw): (&[Sample], &[Question], &[Vec<f32>]),
    (embedder, model): (&Embedder, &str),
    work: &std::path::Path,
    cli: &MemlifeAt<'_>,
) -> Result<Value> {
    let db = work.join("turns-db").to_string_lossy().into_owned();
    let episodes = work.join("turns.jsonl");
    let (lines, own) = turn_rows(samples, true);
    std::fs::write(&episodes, lines).with_context(|| format!("writing {}", episodes.display()))?;
    let clock = format_timestamp(samples.iter().map(|s| s.clock).max().unwrap_or_default());
    let _ = std::fs::remove_dir_all(&db);
    cli(&db, &["init"], false)?;
    cli(&db, &["import", &episodes.to_string_lossy()], false)?;
    cli(&db, &["embed"], true)?;
    cli(&db, &["entities"], true)?;
    let scores = cli(&db, &["scores", "--now", &clock], false)?;
    let none = BTreeMap::new();
    let store = Store::open(&db).await?;
    let live_before = live_memories(&store).await?;
    let before = score_store(
        app, &store, args, samples, questions, raw, embedder, model, &own, &none, None,
    )
    .await?;
    let distilled = cli(&db, &["distill", "--now", &clock], true)?;
    let store = Store::open(&db).await?;
    let live_after = live_memories(&store).await?;
    let after = score_store(
        app, &store, args, samples, questions, raw, embedder, model, &own, &none, None,
    )
    .await?;
    Ok(json!({
        "episodes": own.len(),
        "scores": scores["counts"],
        "live_before": live_before,
        "live_after": live_after,
        "distill": distilled["counts"],
        "before": before,
        "after": after,
    }))
}

/// `--narratives`: the samples' dialogue turns as episodes of a second store (`told`), one
/// narrative per session told by `memlife sessions` at the latest sample's clock, exported
/// and imported alone into a third (`narratives`), and the questions asked of it: a narrative
/// stands for the turns of the episodes it holds. `cli(db, args, forward)` runs memlife.
async fn narrative_side(
    app: &App,
    args: &RecallEvalArgs,
    (samples, questions, raw): (&[Sample], &[Question], &[Vec<f32>]),
    (embedder, model): (&Embedder, &str),
    work: &std::path::Path,
    cli: &MemlifeAt<'_>,
) -> Result<Value> {
    let told = work.join("told-db").to_string_lossy().into_owned();
    let alone = work.join("narratives-db").to_string_lossy().into_owned();
    let (episodes, parquet) = (work.join("episodes.jsonl"), work.join("narratives.parquet"));
    let (lines, own) = turn_rows(samples, false);
    std::fs::write(&episodes, lines).with_context(|| format!("writing {}", episodes.display()))?;
    let clock = samples.iter().map(|s| s.clock).max().unwrap_or_default();
    let (_, _) = (
        std::fs::remove_dir_all(&told),
        std::fs::remove_dir_all(&alone),
    );
    cli(&told, &["init"], false)?;
    cli(&told, &["import", &episodes.to_string_lossy()], false)?;
    let report = cli(
        &told,
        &["sessions", "--now", &format_timestamp(clock)],
        true,
    )?;
    let narratives = report["counts"]["narratives"].as_u64().unwrap_or(0);
    let out = parquet.to_string_lossy();
    cli(
        &told,
        &["export", "--where", "kind = 'narrative'", "-o", &out],
        false,
    )?;
    cli(&alone, &["init"], false)?;
    cli(&alone, &["import", &out], false)?;
    let store = Store::open(&alone).await?;
    let (made, asked) = ((embedder, model), (samples, questions, raw));
    let scored = score_narratives(app, args, &store, asked, made, &own).await?;
    // Strictly: a narrative stands only for the turns whose words it kept (the turn's first
    // 40 characters, speaker included, in its text); a paraphrase keeps none by this measure.
    #[derive(serde::Deserialize)]
    struct Told {
        text: String,
        consolidates_memory_ids: Option<Vec<String>>,
    }
    let said: BTreeMap<&str, &str> = samples
        .iter()
        .flat_map(|s| s.turns.iter().map(|t| (t.id.as_str(), t.text.as_str())))
        .collect();
    let mut kept: BTreeMap<String, Vec<String>> = own.keys().map(|k| (k.clone(), vec![])).collect();
    for n in store.scan_rows::<Told>("memories", None).await? {
        for member in n.consolidates_memory_ids.iter().flatten() {
            let words: String = said
                .get(member.as_str())
                .unwrap_or(&"")
                .chars()
                .take(40)
                .collect();
            if !words.is_empty() && n.text.contains(&words) {
                kept.insert(member.clone(), own.get(member).cloned().unwrap_or_default());
            }
        }
    }
    let literal = score_narratives(app, args, &store, asked, made, &kept).await?;
    let turns = own.len();
    let kept_turns = kept.values().filter(|t| !t.is_empty()).count();
    Ok(json!({
        "episodes": turns,
        "narratives": narratives,
        "compression": if narratives == 0 { 0.0 } else { turns as f64 / narratives as f64 },
        "offline_fallbacks": report["counts"]["offline_fallbacks"],
        "turns_kept_word_for_word": kept_turns,
        "scored": scored,
        "scored_kept_words": literal,
    }))
}

async fn embed_texts(embedder: &Embedder, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
    let mut vectors = Vec::with_capacity(texts.len());
    for e in embedder.embed(texts).await? {
        match e {
            Embedded::Vector { values, .. } => vectors.push(values),
            Embedded::Refused(why) => bail!("the embedder refused a question: {why}"),
        }
    }
    Ok(vectors)
}

/// Every memory the jobs marked superseded, with its successor, to be read.
async fn supersessions(store: &Store) -> Result<Vec<Value>> {
    #[derive(serde::Deserialize)]
    struct Closed {
        user_id: String,
        text: String,
        superseded_by: Option<String>,
        valid_until: Option<i64>,
    }
    #[derive(serde::Deserialize)]
    struct Said {
        id: String,
        text: String,
    }
    let rows: Vec<Closed> = store
        .scan_rows(
            "memories",
            Some("superseded_by IS NOT NULL OR valid_until IS NOT NULL"),
        )
        .await?;
    let ids: Vec<String> = rows
        .iter()
        .filter_map(|r| r.superseded_by.clone())
        .collect();
    let successors: BTreeMap<String, String> = store
        .rows_with_ids::<Said>("memories", &ids, None)
        .await?
        .into_iter()
        .map(|r| (r.id, r.text))
        .collect();
    Ok(rows
        .iter()
        .map(|r| {
            let next = r.superseded_by.as_deref().and_then(|n| successors.get(n));
            json!({"user": r.user_id, "old": r.text, "new": next,
                   "valid_until": r.valid_until.map(format_timestamp)})
        })
        .collect())
}

fn print(json: bool, report: &Value, args: &RecallEvalArgs, out: &mut dyn Write) -> Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, report)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{}: {} observations as memories; {} questions of categories 1-4, {} count (an evidence turn has an observation); {} mode, {}",
        report["file"].as_str().unwrap_or_default(),
        report["observations"],
        report["questions_asked"],
        report["questions_counted"],
        report["mode"].as_str().unwrap_or_default(),
        report["embedding_model"].as_str().unwrap_or_default()
    )?;
    let table = |out: &mut dyn Write, title: &str, s: &Value| -> Result<()> {
        writeln!(out, "\n{title} ({} live memories)", s["live_memories"])?;
        let mut head = format!("{:<18} {:>5}", "", "n");
        for k in &args.k {
            head.push_str(&format!("  hit@{k:<2} rec@{k:<2}"));
        }
        head.push_str("    MRR");
        writeln!(out, "{head}")?;
        let mut rows: Vec<(String, &Value)> = vec![("all".into(), &s["overall"])];
        if let Some(per) = s["per_category"].as_object() {
            rows.extend(per.iter().map(|(c, v)| (c.clone(), v)));
        }
        for (name, side) in rows {
            for which in ["recall", "cosine"] {
                let f = &side[which];
                let mut line = format!("{:<18} {:>5}", format!("{name} {which}"), f["questions"]);
                for k in &args.k {
                    let key = k.to_string();
                    line.push_str(&format!(
                        "  {:>6.3} {:>6.3}",
                        f["hit"][&key].as_f64().unwrap_or(0.0),
                        f["evidence_recall"][&key].as_f64().unwrap_or(0.0)
                    ));
                }
                line.push_str(&format!("  {:>6.3}", f["mrr"].as_f64().unwrap_or(0.0)));
                writeln!(out, "{line}")?;
            }
        }
        for m in s["misses"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "miss ({}{}): [{} cat {}] {} evidence {}",
                if m["recall_found"] == true {
                    ""
                } else {
                    "recall"
                },
                if m["cosine_found"] == true {
                    ""
                } else {
                    " cosine"
                },
                m["user"].as_str().unwrap_or_default(),
                m["category"],
                m["question"].as_str().unwrap_or_default(),
                m["evidence"]
            )?;
            for r in m["recall_top3"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "    recall: {} {}",
                    r["turns"],
                    r["text"].as_str().unwrap_or_default()
                )?;
            }
        }
        Ok(())
    };
    table(out, "before maintenance", &report["before"])?;
    if let Some(jobs) = report["jobs"].as_object() {
        writeln!(out, "\nnightly jobs, counts per user:")?;
        for (job, users) in jobs {
            for u in users.as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "  {job:<12} {} {}",
                    u["user"].as_str().unwrap_or_default(),
                    u["counts"]
                )?;
            }
        }
        let chains = report["supersessions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        writeln!(out, "\nsupersessions made: {}", chains.len())?;
        for c in &chains {
            writeln!(
                out,
                "  [{}] {:?}\n      -> {:?}",
                c["user"].as_str().unwrap_or_default(),
                c["old"].as_str().unwrap_or_default(),
                c["new"].as_str().unwrap_or_default()
            )?;
        }
        table(out, "after maintenance", &report["after"])?;
    }
    if let Some(n) = report.get("narratives") {
        writeln!(
            out,
            "\nnarratives: {} dialogue turns as episodes, told in {} narratives (compression {:.1}:1, {} offline)",
            n["episodes"],
            n["narratives"],
            n["compression"].as_f64().unwrap_or(0.0),
            n["offline_fallbacks"]
        )?;
        table(
            out,
            "the narratives alone, each standing for its session's turns",
            &n["scored"],
        )?;
        writeln!(
            out,
            "\n{} of the turns kept word for word",
            n["turns_kept_word_for_word"]
        )?;
        let strict = "the narratives alone, each standing for the turns it kept word for word";
        table(out, strict, &n["scored_kept_words"])?;
    }
    if let Some(d) = report.get("distill") {
        writeln!(
            out,
            "\ndistill: {} dialogue turns as episodes; live memories {} before, {} after ({} facts, {} episodes archived)",
            d["episodes"],
            d["live_before"],
            d["live_after"],
            d["distill"]["facts_created"],
            d["distill"]["episodes_archived"]
        )?;
        table(out, "the turns before distill", &d["before"])?;
        table(out, "the turns after distill", &d["after"])?;
    }
    Ok(())
}
