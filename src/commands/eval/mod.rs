//! `memlife eval judge --pairs FILE`: measures a judge (the offline rules, or the providers of
//! memlife.toml) on hand-labelled cases, the way the jobs would ask it, and embeds both sides
//! of each pair to show which pairs would ever reach it at a given candidate threshold. Reads
//! no database and writes nothing.
//!
//! FILE is JSON Lines, one case per line, of any of these tasks:
//! - `integrate.classify`: `{"old": TEXT, "new": TEXT, "label":
//!   "DUPLICATE|SUPERSEDE|MERGE|COEXIST", "old_at": TS?, "new_at": TS?}`;
//! - `link.classify`: `{"a": TEXT, "b": TEXT, "link_type":
//!   "conflicts|supersedes|causes|instance_of|invalidated_by|motivated_by|null", "a_at": TS?,
//!   "b_at": TS?}` (a is the SOURCE, b the TARGET);
//! - `consolidate` (both passes, as the job runs them): `{"memories": [TEXT, ...], "label":
//!   "CONSOLIDATE|KEEP", "at": [TS, ...]?}`, the hub first; judged CONSOLIDATE when one approved
//!   proposal folds them all, PARTIAL when approved proposals fold some, KEEP otherwise;
//! - `consolidate.verify` (the second pass alone): `{"memories": [...], "proposal": TEXT,
//!   "label": "APPROVE|REJECT"}`;
//! - `refine`: `{"text": TEXT, "label": "SPLIT|TRIM|KEEP", "at": TS?}`.
//!
//! Any case may carry `source` (where the text comes from) and `note` (why the label). Without
//! timestamps the memories are a day apart in the order given (the newer side of a pair, `new`
//! or `a`, is the later). Cases are split into a dev half and a held-out half by a hash of their
//! texts (`logic::eval::Split`); both are reported.

pub mod entities;
pub mod integrate;
pub mod recall;
pub mod temporal;

use std::io::Write;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;

use crate::app::App;
use crate::embedders::{Embedded, Embedder, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{Item, LlmArgs, Outcome};
use crate::logic::eval::{
    EVAL_TASKS, Scores, SimilarityRow, Split, THRESHOLDS, is_destructive, labels_of, score_answers,
    similarity_table,
};
use crate::logic::similarity::dot;
use crate::model::encoding::{format_timestamp, parse_timestamp};
use crate::model::schema::MEMORY_KINDS;

#[derive(clap::Args, Clone, Debug)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(clap::Subcommand, Clone, Debug)]
pub enum EvalCommand {
    /// Score a judge on labelled cases (integrate.classify and link.classify pairs,
    /// consolidation sets, proposals to verify, memories to refine): confusion matrix,
    /// precision and recall, destructive errors, and the embedding similarity of each class.
    Judge(JudgeEvalArgs),
    /// Precision and recall of the offline entity extractor on synth truth or hand labels.
    Entities(entities::EntitiesEvalArgs),
    /// `memlife integrate` end to end (candidate retrieval plus judge) on labelled pairs:
    /// the confusion matrix of the operations it wrote, destructive errors listed.
    Integrate(integrate::IntegrateEvalArgs),
    /// Relative-date resolution on LoCoMo's temporal questions: accuracy, coverage, and
    /// every failure listed.
    Temporal(temporal::TemporalEvalArgs),
    /// What recall returns on LoCoMo conversations (observations as memories): hit@k,
    /// evidence recall@k and MRR for `recall` and plain cosine, overall and per category;
    /// `--maintain` runs the nightly jobs and scores again.
    Recall(recall::RecallEvalArgs),
}

#[derive(clap::Args, Clone, Debug)]
pub struct JudgeEvalArgs {
    /// JSON Lines of labelled cases (see `memlife eval judge --help` and EVALUATION.md).
    #[arg(long)]
    pub pairs: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
    /// Skip the similarity table (no embedder is loaded).
    #[arg(long)]
    pub no_similarity: bool,
    /// List every error, not only the first 40.
    #[arg(long)]
    pub all_errors: bool,
}

/// One labelled case, as read.
#[derive(Clone, Debug)]
struct Case {
    /// The eval task (`logic::eval::EVAL_TASKS`).
    task: &'static str,
    /// (text, created_at). integrate.classify: the older memory, then the newer fact;
    /// link.classify: the TARGET, then the SOURCE; consolidate and consolidate.verify: the
    /// memories, hub first; refine: the one memory.
    memories: Vec<(String, String)>,
    /// consolidate.verify: the proposal to approve or reject.
    proposal: Option<String>,
    /// The memories' kind (`kind` of a case; default fact): `episode` marks one event each.
    kind: String,
    label: String,
    split: Split,
    origin: String,
}

const DEFAULT_OLDER: &str = "2025-03-01T09:00:00Z";
const DEFAULT_NEWER: &str = "2025-03-02T09:00:00Z";

pub(super) fn text_field(
    row: &serde_json::Map<String, Value>,
    name: &str,
    at: &str,
) -> Result<String> {
    match row.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(_) => bail!("{at}: field {name} must be non-empty text"),
        None => bail!("{at}: field {name} is missing"),
    }
}

fn check_time(value: &str, name: &str, at: &str) -> Result<String> {
    if parse_timestamp(value).is_none() {
        bail!("{at}: field {name} is not an RFC 3339 timestamp: {value}");
    }
    Ok(value.to_string())
}

fn time_field(
    row: &serde_json::Map<String, Value>,
    name: &str,
    at: &str,
    default: &str,
) -> Result<String> {
    match row.get(name) {
        None | Some(Value::Null) => Ok(default.to_string()),
        Some(Value::String(s)) => check_time(s, name, at),
        Some(_) => bail!("{at}: field {name} must be an RFC 3339 timestamp"),
    }
}

/// A list of texts (`memories`) or of timestamps (`at`).
fn string_list(row: &serde_json::Map<String, Value>, name: &str, at: &str) -> Result<Vec<String>> {
    let Some(Value::Array(values)) = row.get(name) else {
        bail!("{at}: field {name} must be a list of text");
    };
    values
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
            _ => bail!("{at}: field {name}[{i}] must be non-empty text"),
        })
        .collect()
}

/// The shape of a case line: its task, the fields it may have, and the field holding its label.
fn shape_of(
    row: &serde_json::Map<String, Value>,
) -> Option<(&'static str, &'static [&'static str], &'static str)> {
    if row.contains_key("old") {
        Some((
            "integrate.classify",
            &["old", "new", "label", "old_at", "new_at"],
            "label",
        ))
    } else if row.contains_key("a") {
        Some((
            "link.classify",
            &["a", "b", "link_type", "a_at", "b_at"],
            "link_type",
        ))
    } else if row.contains_key("memories") && row.contains_key("proposal") {
        Some((
            "consolidate.verify",
            &["memories", "proposal", "label", "at", "kind"],
            "label",
        ))
    } else if row.contains_key("memories") {
        Some(("consolidate", &["memories", "label", "at", "kind"], "label"))
    } else if row.contains_key("text") {
        Some(("refine", &["text", "label", "at"], "label"))
    } else {
        None
    }
}

fn read_cases(path: &std::path::Path) -> Result<Vec<Case>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read pairs file {}", path.display()))?;
    let mut cases = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = format!("{} line {}", path.display(), n + 1);
        if line.trim().is_empty() {
            continue;
        }
        let row: serde_json::Map<String, Value> =
            serde_json::from_str(line).with_context(|| format!("{at}: not a JSON object"))?;
        let Some((task, names, label_field)) = shape_of(&row) else {
            bail!(
                "{at}: a case has old/new/label (integrate.classify), a/b/link_type \
                 (link.classify), memories/label (consolidate), memories/proposal/label \
                 (consolidate.verify) or text/label (refine)"
            );
        };
        for key in row.keys() {
            if !names.contains(&key.as_str()) && key != "source" && key != "note" {
                bail!("{at}: unknown field {key}");
            }
        }
        let label = text_field(&row, label_field, &at)?;
        let label = if task == "link.classify" {
            label.to_lowercase()
        } else {
            label.to_uppercase()
        };
        // A consolidation's gold is all or nothing; PARTIAL is only ever judged.
        let allowed: Vec<&str> = labels_of(task)
            .iter()
            .copied()
            .filter(|l| !(task == "consolidate" && *l == "PARTIAL"))
            .collect();
        if !allowed.contains(&label.as_str()) {
            bail!(
                "{at}: field {label_field} is {label}; expected one of {}",
                allowed.join(", ")
            );
        }
        let (memories, proposal) = match task {
            "integrate.classify" => (
                vec![
                    (
                        text_field(&row, "old", &at)?,
                        time_field(&row, "old_at", &at, DEFAULT_OLDER)?,
                    ),
                    (
                        text_field(&row, "new", &at)?,
                        time_field(&row, "new_at", &at, DEFAULT_NEWER)?,
                    ),
                ],
                None,
            ),
            "link.classify" => (
                vec![
                    (
                        text_field(&row, "b", &at)?,
                        time_field(&row, "b_at", &at, DEFAULT_OLDER)?,
                    ),
                    (
                        text_field(&row, "a", &at)?,
                        time_field(&row, "a_at", &at, DEFAULT_NEWER)?,
                    ),
                ],
                None,
            ),
            "refine" => (
                vec![(
                    text_field(&row, "text", &at)?,
                    time_field(&row, "at", &at, DEFAULT_OLDER)?,
                )],
                None,
            ),
            _ => {
                let texts = string_list(&row, "memories", &at)?;
                if texts.len() < 2 {
                    bail!("{at}: field memories needs at least two memories");
                }
                // Without times the memories are a day apart, in the order given.
                let times = if row.contains_key("at") {
                    let times = string_list(&row, "at", &at)?;
                    if times.len() != texts.len() {
                        bail!(
                            "{at}: field at has {} timestamps for {} memories",
                            times.len(),
                            texts.len()
                        );
                    }
                    times
                        .iter()
                        .map(|t| check_time(t, "at", &at))
                        .collect::<Result<Vec<_>>>()?
                } else {
                    let first = parse_timestamp(DEFAULT_OLDER).unwrap_or_default();
                    (0..texts.len() as i64)
                        .map(|day| format_timestamp(first + day * 86_400_000_000))
                        .collect()
                };
                let proposal = match task {
                    "consolidate.verify" => Some(text_field(&row, "proposal", &at)?),
                    _ => None,
                };
                (texts.into_iter().zip(times).collect(), proposal)
            }
        };
        let joined: Vec<&str> = memories.iter().map(|(t, _)| t.as_str()).collect();
        let split = match (task, memories.as_slice()) {
            // Pairs keep the split they always had.
            ("integrate.classify" | "link.classify", [first, second]) => {
                Split::of(&first.0, &second.0)
            }
            _ => Split::of(&joined.join("\n"), proposal.as_deref().unwrap_or("")),
        };
        let origin = row
            .get("source")
            .and_then(Value::as_str)
            .map_or_else(|| path.display().to_string(), str::to_string);
        let kind = match row.get("kind") {
            None => "fact".to_string(),
            Some(Value::String(k)) if MEMORY_KINDS.contains(&k.as_str()) => k.clone(),
            Some(other) => bail!("{at}: field kind must be one of {MEMORY_KINDS:?}, not {other}"),
        };
        cases.push(Case {
            task,
            memories,
            proposal,
            kind,
            label,
            split,
            origin,
        });
    }
    Ok(cases)
}

fn views(case: &Case) -> Vec<MemoryView> {
    case.memories
        .iter()
        .enumerate()
        .map(|(i, (text, at))| MemoryView {
            id: format!("m{}", i + 1),
            kind: case.kind.clone(),
            created_at: at.clone(),
            happens_at: None,
            text: text.clone(),
            dates: Vec::new(),
            cluster: None,
        })
        .collect()
}

/// The first call a case needs.
fn first_item(i: usize, case: &Case, now: &str) -> Item {
    let mut memories = views(case);
    let task = match case.task {
        "integrate.classify" => Task::IntegrateClassify,
        "link.classify" => {
            // SOURCE then TARGET.
            memories.reverse();
            Task::LinkClassify
        }
        "consolidate" => Task::ConsolidatePropose,
        "consolidate.verify" => Task::ConsolidateVerify,
        _ => Task::Refine,
    };
    Item {
        custom_id: format!("case-{i}"),
        input: TaskInput {
            task,
            memories,
            proposal: case.proposal.clone(),
            now: now.to_string(),
            question: None,
        },
    }
}

/// What the judge decided on one case.
struct Judged {
    label: String,
    confidence: Option<f64>,
    reasoning: String,
    /// The text it would write: the approved consolidation, a refinement's parts.
    output: Option<String>,
    failed: bool,
}

impl Judged {
    /// No trusted reply: the jobs would do the safe thing.
    fn safe(task: &str, failure: &str) -> Judged {
        Judged {
            label: match task {
                "integrate.classify" => "COEXIST",
                "link.classify" => "null",
                "consolidate.verify" => "REJECT",
                _ => "KEEP",
            }
            .into(),
            confidence: None,
            reasoning: format!("failed ({failure}); safe default"),
            output: None,
            failed: true,
        }
    }
}

fn judged_of(task: &str, outcome: &Outcome) -> Judged {
    let reply = match (&outcome.reply, &outcome.failure) {
        (Some(reply), None) => reply,
        (_, failure) => return Judged::safe(task, failure.as_deref().unwrap_or("no reply")),
    };
    let (label, confidence, reasoning, output) = match reply {
        Reply::Classify(r) => (
            format!("{:?}", r.classification).to_uppercase(),
            r.confidence,
            r.reasoning.clone(),
            None,
        ),
        Reply::Link(r) => (
            r.link_type.as_str().to_string(),
            r.confidence,
            r.reasoning.clone(),
            None,
        ),
        Reply::Verify(r) => (
            if r.approve { "APPROVE" } else { "REJECT" }.to_string(),
            r.confidence,
            r.reasoning.clone(),
            None,
        ),
        Reply::Refine(r) => (
            format!("{:?}", r.action).to_uppercase(),
            r.confidence,
            r.reasoning.clone(),
            (!r.parts.is_empty()).then(|| r.parts.join(" | ")),
        ),
        _ => return Judged::safe(task, "a reply of another task"),
    };
    Judged {
        label,
        confidence: Some(confidence),
        reasoning,
        output,
        failed: false,
    }
}

#[derive(Debug, Serialize)]
struct CaseError {
    split: Split,
    gold: String,
    judged: String,
    destructive: bool,
    confidence: Option<f64>,
    reasoning: String,
    /// The memories as the case gives them (integrate: older, newer; link: TARGET, SOURCE).
    texts: Vec<String>,
    /// consolidate.verify: the proposal judged.
    proposal: Option<String>,
    /// What the judge would have written.
    output: Option<String>,
    origin: String,
}

#[derive(Debug, Serialize)]
struct TaskReport {
    task: String,
    /// Cases of this task (pairs, sets of memories, or single memories).
    pairs: usize,
    /// Cases the judge could not answer (they count as the safe default).
    failed_calls: usize,
    dev: Scores,
    held_out: Scores,
    all: Scores,
    errors: Vec<CaseError>,
    similarity: Option<Vec<SimilarityRow>>,
}

#[derive(Debug, Serialize)]
struct EvalReport {
    judge: String,
    embedder: Option<String>,
    /// Destructive errors over every task and case (the target: none).
    destructive_errors: usize,
    /// Cases over every task, and those judged right.
    cases: usize,
    correct: usize,
    tasks: Vec<TaskReport>,
}

pub async fn run(app: &App, args: &EvalArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    match &args.command {
        EvalCommand::Judge(args) => judge(app, args, out).await,
        EvalCommand::Entities(args) => entities::run(args, app.json, out),
        EvalCommand::Integrate(args) => {
            integrate::run(args, app.json, out).map(|()| ExitStatus::Success)
        }
        EvalCommand::Temporal(args) => temporal::run(args, app.json, out),
        EvalCommand::Recall(args) => recall::run(app, args, out).await,
    }
}

/// The two-pass consolidation of each `consolidate` case: the proposals of pass 1 are checked
/// by pass 2 (one verify call per proposed group), as `memlife consolidate` will.
async fn consolidate_second_pass(
    llm: &crate::llm::Llm,
    cases: &[Case],
    first: &[Outcome],
    now: &str,
) -> (Vec<Option<Judged>>, Vec<Outcome>) {
    let mut items = Vec::new();
    // (case, group memory ids, group text, propose reasoning)
    let mut groups: Vec<(usize, Vec<String>, String, String)> = Vec::new();
    for (i, case) in cases
        .iter()
        .enumerate()
        .filter(|(_, c)| c.task == "consolidate")
    {
        let Some(Reply::Propose(reply)) = &first[i].reply else {
            continue;
        };
        let all = views(case);
        for group in &reply.groups {
            let members: Vec<MemoryView> = all
                .iter()
                .filter(|m| group.memory_ids.contains(&m.id))
                .cloned()
                .collect();
            items.push(Item {
                custom_id: format!("case-{i}-group-{}", groups.len()),
                input: TaskInput {
                    task: Task::ConsolidateVerify,
                    memories: members,
                    proposal: Some(group.text.clone()),
                    now: now.to_string(),
                    question: None,
                },
            });
            groups.push((
                i,
                group.memory_ids.clone(),
                group.text.clone(),
                group.reasoning.clone(),
            ));
        }
    }
    let second = if items.is_empty() {
        Vec::new()
    } else {
        llm.run(items).await
    };
    let mut judged: Vec<Option<Judged>> = cases.iter().map(|_| None).collect();
    for (i, case) in cases
        .iter()
        .enumerate()
        .filter(|(_, c)| c.task == "consolidate")
    {
        if let Some(failure) = &first[i].failure {
            judged[i] = Some(Judged::safe(case.task, failure));
            continue;
        }
        let mut covered = std::collections::BTreeSet::new();
        let mut one_covers_all = false;
        let mut reasons = Vec::new();
        let mut output = None;
        for ((_, ids, text, why), outcome) in
            groups.iter().zip(&second).filter(|((c, ..), _)| *c == i)
        {
            let approved = matches!(&outcome.reply, Some(Reply::Verify(v)) if v.approve);
            let verdict = match &outcome.reply {
                Some(Reply::Verify(v)) => v.reasoning.clone(),
                _ => format!(
                    "verify failed ({})",
                    outcome.failure.as_deref().unwrap_or("no reply")
                ),
            };
            reasons.push(format!(
                "{} proposed [{}]: {why}; {}",
                if approved { "approved" } else { "rejected" },
                ids.join(", "),
                verdict
            ));
            if approved {
                covered.extend(ids.iter().cloned());
                one_covers_all |= ids.len() >= case.memories.len();
                output = Some(text.clone());
            }
        }
        let label = if one_covers_all {
            "CONSOLIDATE"
        } else if covered.is_empty() {
            "KEEP"
        } else {
            "PARTIAL"
        };
        judged[i] = Some(Judged {
            label: label.into(),
            confidence: None,
            reasoning: if reasons.is_empty() {
                "nothing proposed".into()
            } else {
                reasons.join(" / ")
            },
            output,
            failed: false,
        });
    }
    (judged, second)
}

async fn judge(app: &App, args: &JudgeEvalArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    if args.pairs.is_empty() {
        bail!("--pairs FILE is required (JSON Lines of labelled cases)");
    }
    let mut cases = Vec::new();
    for path in &args.pairs {
        cases.extend(read_cases(path)?);
    }
    if cases.is_empty() {
        bail!("no cases in {:?}", args.pairs);
    }
    let llm = app.llm(&args.llm).await?;
    let now = "2026-01-01T00:00:00Z";
    let items: Vec<Item> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| first_item(i, c, now))
        .collect();
    let outcomes = llm.run(items).await;
    let (mut second_pass, second_outcomes) =
        consolidate_second_pass(&llm, &cases, &outcomes, now).await;
    let usage = llm.usage(&[outcomes.as_slice(), second_outcomes.as_slice()].concat());
    let embedder = if args.no_similarity {
        None
    } else {
        let config = app.config().await?;
        Some(Embedder::native(&args.embedder, &config.embedder, 64)?)
    };
    let similarities = match &embedder {
        None => None,
        Some(embedder) => Some(pair_similarities(embedder, &cases).await?),
    };

    let mut tasks = Vec::new();
    for (task, labels) in EVAL_TASKS {
        let judged: Vec<(usize, Judged)> = cases
            .iter()
            .enumerate()
            .filter(|(_, c)| c.task == *task)
            .map(|(i, c)| {
                let j = second_pass[i]
                    .take()
                    .unwrap_or_else(|| judged_of(c.task, &outcomes[i]));
                (i, j)
            })
            .collect();
        if judged.is_empty() {
            continue;
        }
        let scores_of = |split: Option<Split>| {
            let outcomes: Vec<(&str, &str)> = judged
                .iter()
                .filter(|(i, _)| split.is_none_or(|s| cases[*i].split == s))
                .map(|(i, j)| (cases[*i].label.as_str(), j.label.as_str()))
                .collect();
            score_answers(task, labels, &outcomes)
        };
        let mut errors: Vec<CaseError> = judged
            .iter()
            .filter(|(i, j)| cases[*i].label != j.label)
            .map(|(i, j)| {
                let c = &cases[*i];
                CaseError {
                    split: c.split,
                    gold: c.label.clone(),
                    judged: j.label.clone(),
                    destructive: is_destructive(task, &c.label, &j.label),
                    confidence: j.confidence,
                    reasoning: j.reasoning.clone(),
                    texts: c.memories.iter().map(|(t, _)| t.clone()).collect(),
                    proposal: c.proposal.clone(),
                    output: j.output.clone(),
                    origin: c.origin.clone(),
                }
            })
            .collect();
        // Destructive errors first, then by split and gold label.
        errors.sort_by(|a, b| {
            b.destructive
                .cmp(&a.destructive)
                .then(a.split.cmp(&b.split))
                .then(a.gold.cmp(&b.gold))
        });
        let similarity = similarities.as_ref().and_then(|s| {
            let rows: Vec<(&str, f32)> = judged
                .iter()
                .filter_map(|(i, _)| Some((cases[*i].label.as_str(), s[*i]?)))
                .collect();
            (!rows.is_empty()).then(|| similarity_table(labels, &rows))
        });
        tasks.push(TaskReport {
            task: task.to_string(),
            pairs: judged.len(),
            failed_calls: judged.iter().filter(|(_, j)| j.failed).count(),
            dev: scores_of(Some(Split::Dev)),
            held_out: scores_of(Some(Split::HeldOut)),
            all: scores_of(None),
            errors,
            similarity,
        });
    }
    let report = EvalReport {
        judge: usage.judge.clone(),
        embedder: embedder.as_ref().map(Embedder::model_name),
        destructive_errors: tasks.iter().map(|t| t.all.destructive_errors).sum(),
        cases: tasks.iter().map(|t| t.all.pairs).sum(),
        correct: tasks.iter().map(|t| t.all.correct).sum(),
        tasks,
    };
    if app.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        write_text(&report, args.all_errors, out)?;
    }
    Ok(ExitStatus::Success)
}

/// The cosine similarity of each pair's two texts (vectors are unit length); None for the
/// cases that are not pairs.
async fn pair_similarities(embedder: &Embedder, cases: &[Case]) -> Result<Vec<Option<f32>>> {
    let is_pair = |c: &Case| matches!(c.task, "integrate.classify" | "link.classify");
    let texts: Vec<&str> = cases
        .iter()
        .filter(|c| is_pair(c))
        .flat_map(|c| c.memories.iter().map(|(t, _)| t.as_str()))
        .collect();
    let mut vectors = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(64) {
        for (text, embedded) in chunk.iter().zip(embedder.embed(chunk).await?) {
            match embedded {
                Embedded::Vector { values, .. } => vectors.push(values),
                Embedded::Refused(why) => bail!("the embedder refused {text:?}: {why}"),
            }
        }
    }
    let mut scores = vectors.chunks(2).map(|v| dot(&v[0], &v[1]));
    Ok(cases
        .iter()
        .map(|c| if is_pair(c) { scores.next() } else { None })
        .collect())
}

fn two_places(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{:.2}", x))
}

fn write_scores(name: &str, labels: &[&str], s: &Scores, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "  {name}: {} pairs, accuracy {:.2}, destructive errors {} ({:.1}%)",
        s.pairs,
        s.accuracy,
        s.destructive_errors,
        s.destructive_error_rate * 100.0
    )?;
    write!(out, "    {:<15}", "gold \\ judged")?;
    for l in labels {
        write!(out, "{:>15}", l)?;
    }
    writeln!(out, "{:>8}{:>8}", "prec", "recall")?;
    for (gold, class) in labels.iter().zip(&s.classes) {
        write!(out, "    {:<15}", gold)?;
        for judged in labels {
            write!(out, "{:>15}", s.confusion[*gold][*judged])?;
        }
        writeln!(
            out,
            "{:>8}{:>8}",
            two_places(class.precision),
            two_places(class.recall)
        )?;
    }
    Ok(())
}

fn write_text(report: &EvalReport, all_errors: bool, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "judge: {}", report.judge)?;
    for task in &report.tasks {
        let labels = labels_of(&task.task);
        writeln!(
            out,
            "\n{}: {} pairs ({} calls failed, judged the safe way)",
            task.task, task.pairs, task.failed_calls
        )?;
        write_scores("held-out", labels, &task.held_out, out)?;
        write_scores("dev", labels, &task.dev, out)?;
        write_scores("all", labels, &task.all, out)?;
        if let (Some(rows), Some(model)) = (&task.similarity, &report.embedder) {
            writeln!(
                out,
                "  similarity ({model}): share of each class's pairs with cosine >= t"
            )?;
            write!(out, "    {:<15}{:>6}{:>8}", "class", "pairs", "median")?;
            for t in THRESHOLDS {
                write!(out, "{:>6}", format!("{t}"))?;
            }
            writeln!(out)?;
            for row in rows {
                write!(
                    out,
                    "    {:<15}{:>6}{:>8}",
                    row.label,
                    row.pairs,
                    row.median.map_or("-".into(), |m| format!("{m:.2}"))
                )?;
                for (_, share) in &row.reaching {
                    write!(out, "{:>6.2}", share)?;
                }
                writeln!(out)?;
            }
        }
        let shown = if all_errors { task.errors.len() } else { 40 };
        writeln!(out, "  errors ({}):", task.errors.len())?;
        for e in task.errors.iter().take(shown) {
            writeln!(
                out,
                "    [{}]{} gold {} judged {} ({}): {}{}; {}{}",
                e.split.as_str(),
                if e.destructive { " DESTRUCTIVE" } else { "" },
                e.gold,
                e.judged,
                two_places(e.confidence),
                e.texts
                    .iter()
                    .map(|t| format!("{t:?}"))
                    .collect::<Vec<_>>()
                    .join(" -> "),
                e.proposal
                    .as_ref()
                    .map(|p| format!(" proposal {p:?}"))
                    .unwrap_or_default(),
                e.reasoning,
                e.output
                    .as_ref()
                    .map(|o| format!(" => {o:?}"))
                    .unwrap_or_default()
            )?;
        }
        if task.errors.len() > shown {
            writeln!(
                out,
                "    ... {} more (--all-errors)",
                task.errors.len() - shown
            )?;
        }
    }
    Ok(())
}
