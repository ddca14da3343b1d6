//! `memlife eval judge --pairs FILE`: measures a judge (the offline rules, or the providers of
//! memlife.toml) on hand-labelled pairs of memories, the way the jobs would ask it, and embeds
//! both sides to show which pairs would ever reach it at a given candidate threshold. Reads
//! no database and writes nothing.
//!
//! FILE is JSON Lines, one pair per line, of either task:
//! `{"old": TEXT, "new": TEXT, "label": "DUPLICATE|SUPERSEDE|MERGE|COEXIST", "old_at": TS?,
//! "new_at": TS?}` for `integrate.classify`, or `{"a": TEXT, "b": TEXT, "link_type":
//! "conflicts|supersedes|causes|instance_of|invalidated_by|motivated_by|null", "a_at": TS?,
//! "b_at": TS?}` for `link.classify` (a is the SOURCE, b the TARGET). Both may carry `source`
//! (where the text comes from) and `note` (why the label). Without timestamps the newer side
//! (`new`, `a`) is dated a day after the other. Pairs are split into a dev half and a
//! held-out half by a hash of their texts (`logic::eval::Split`); both are reported.

use std::io::Write;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;

use crate::app::App;
use crate::embedders::{Embedded, Embedder, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{Item, LlmArgs};
use crate::logic::eval::{
    INTEGRATE_LABELS, LINK_LABELS, Scores, SimilarityRow, Split, THRESHOLDS, is_destructive, score,
    similarity_table,
};
use crate::logic::similarity::dot;
use crate::model::encoding::parse_timestamp;

#[derive(clap::Args, Clone, Debug)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(clap::Subcommand, Clone, Debug)]
pub enum EvalCommand {
    /// Score a judge on labelled pairs: confusion matrix, precision and recall, destructive
    /// errors, and the embedding similarity of each class.
    Judge(JudgeEvalArgs),
}

#[derive(clap::Args, Clone, Debug)]
pub struct JudgeEvalArgs {
    /// JSON Lines of labelled pairs (see `memlife eval judge --help` and EVALUATION.md).
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

/// One labelled pair, as read.
#[derive(Clone, Debug)]
struct Pair {
    task: Task,
    /// The older memory (integrate: EXISTING) or the TARGET (link).
    first: String,
    first_at: String,
    /// The newer fact (integrate: NEW) or the SOURCE (link).
    second: String,
    second_at: String,
    label: String,
    split: Split,
    origin: String,
}

const DEFAULT_OLDER: &str = "2025-03-01T09:00:00Z";
const DEFAULT_NEWER: &str = "2025-03-02T09:00:00Z";

fn text_field(row: &serde_json::Map<String, Value>, name: &str, at: &str) -> Result<String> {
    match row.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(_) => bail!("{at}: field {name} must be non-empty text"),
        None => bail!("{at}: field {name} is missing"),
    }
}

fn time_field(
    row: &serde_json::Map<String, Value>,
    name: &str,
    at: &str,
    default: &str,
) -> Result<String> {
    match row.get(name) {
        None | Some(Value::Null) => Ok(default.to_string()),
        Some(Value::String(s)) => {
            if parse_timestamp(s).is_none() {
                bail!("{at}: field {name} is not an RFC 3339 timestamp: {s}");
            }
            Ok(s.clone())
        }
        Some(_) => bail!("{at}: field {name} must be an RFC 3339 timestamp"),
    }
}

fn read_pairs(path: &std::path::Path) -> Result<Vec<Pair>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read pairs file {}", path.display()))?;
    let mut pairs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = format!("{} line {}", path.display(), n + 1);
        if line.trim().is_empty() {
            continue;
        }
        let row: serde_json::Map<String, Value> =
            serde_json::from_str(line).with_context(|| format!("{at}: not a JSON object"))?;
        let (task, fields, names): (Task, &[&str], [&str; 5]) = if row.contains_key("old") {
            (
                Task::IntegrateClassify,
                INTEGRATE_LABELS,
                ["old", "new", "label", "old_at", "new_at"],
            )
        } else if row.contains_key("a") {
            (
                Task::LinkClassify,
                LINK_LABELS,
                ["b", "a", "link_type", "b_at", "a_at"],
            )
        } else {
            bail!("{at}: a pair has either old/new/label or a/b/link_type");
        };
        for key in row.keys() {
            if !names.contains(&key.as_str()) && key != "source" && key != "note" {
                bail!("{at}: unknown field {key}");
            }
        }
        let first = text_field(&row, names[0], &at)?;
        let second = text_field(&row, names[1], &at)?;
        let label = text_field(&row, names[2], &at)?;
        let label = if task == Task::IntegrateClassify {
            label.to_uppercase()
        } else {
            label.to_lowercase()
        };
        if !fields.contains(&label.as_str()) {
            bail!(
                "{at}: field {} is {label}; expected one of {}",
                names[2],
                fields.join(", ")
            );
        }
        let first_at = time_field(&row, names[3], &at, DEFAULT_OLDER)?;
        let second_at = time_field(&row, names[4], &at, DEFAULT_NEWER)?;
        let origin = row
            .get("source")
            .and_then(Value::as_str)
            .map_or_else(|| path.display().to_string(), str::to_string);
        pairs.push(Pair {
            task,
            split: Split::of(&first, &second),
            first,
            first_at,
            second,
            second_at,
            label,
            origin,
        });
    }
    Ok(pairs)
}

fn item(i: usize, pair: &Pair, now: &str) -> Item {
    let view = |id: &str, text: &str, at: &str| MemoryView {
        id: id.to_string(),
        kind: "fact".into(),
        created_at: at.to_string(),
        happens_at: None,
        text: text.to_string(),
    };
    let first = view("first", &pair.first, &pair.first_at);
    let second = view("second", &pair.second, &pair.second_at);
    // integrate.classify: EXISTING then NEW; link.classify: SOURCE then TARGET.
    let memories = match pair.task {
        Task::IntegrateClassify => vec![first, second],
        _ => vec![second, first],
    };
    Item {
        custom_id: format!("pair-{i}"),
        input: TaskInput {
            task: pair.task,
            memories,
            proposal: None,
            now: now.to_string(),
        },
    }
}

#[derive(Debug, Serialize)]
struct PairError {
    split: Split,
    gold: String,
    judged: String,
    destructive: bool,
    confidence: Option<f64>,
    reasoning: String,
    /// The older memory (integrate) or the TARGET (link).
    first: String,
    /// The newer fact (integrate) or the SOURCE (link).
    second: String,
    origin: String,
}

#[derive(Debug, Serialize)]
struct TaskReport {
    task: String,
    pairs: usize,
    /// Items the judge could not answer (they count as the safe default).
    failed_calls: usize,
    dev: Scores,
    held_out: Scores,
    all: Scores,
    errors: Vec<PairError>,
    similarity: Option<Vec<SimilarityRow>>,
}

#[derive(Debug, Serialize)]
struct EvalReport {
    judge: String,
    embedder: Option<String>,
    tasks: Vec<TaskReport>,
}

pub async fn run(app: &App, args: &EvalArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    match &args.command {
        EvalCommand::Judge(args) => judge(app, args, out).await,
    }
}

async fn judge(app: &App, args: &JudgeEvalArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    if args.pairs.is_empty() {
        bail!("--pairs FILE is required (JSON Lines of labelled pairs)");
    }
    let mut pairs = Vec::new();
    for path in &args.pairs {
        pairs.extend(read_pairs(path)?);
    }
    if pairs.is_empty() {
        bail!("no pairs in {:?}", args.pairs);
    }
    let llm = app.llm(&args.llm).await?;
    let now = "2026-01-01T00:00:00Z";
    let items: Vec<Item> = pairs
        .iter()
        .enumerate()
        .map(|(i, p)| item(i, p, now))
        .collect();
    let outcomes = llm.run(items).await;
    let usage = llm.usage(&outcomes);
    let embedder = if args.no_similarity {
        None
    } else {
        let config = app.config().await?;
        Some(Embedder::native(&args.embedder, &config.embedder, 64)?)
    };
    let similarities = match &embedder {
        None => None,
        Some(embedder) => Some(pair_similarities(embedder, &pairs).await?),
    };

    let mut tasks = Vec::new();
    for (task, labels) in [
        (Task::IntegrateClassify, INTEGRATE_LABELS),
        (Task::LinkClassify, LINK_LABELS),
    ] {
        let name = task.name();
        let mut judged: Vec<(usize, String, Option<f64>, String, bool)> = Vec::new();
        for (i, _) in pairs.iter().enumerate().filter(|(_, p)| p.task == task) {
            let outcome = &outcomes[i];
            let (label, confidence, reasoning) = match &outcome.reply {
                Some(Reply::Classify(r)) => (
                    format!("{:?}", r.classification).to_uppercase(),
                    Some(r.confidence),
                    r.reasoning.clone(),
                ),
                Some(Reply::Link(r)) => (
                    r.link_type.as_str().to_string(),
                    Some(r.confidence),
                    r.reasoning.clone(),
                ),
                // No trusted reply: the jobs would do the safe thing.
                _ => (
                    if task == Task::IntegrateClassify {
                        "COEXIST".into()
                    } else {
                        "null".into()
                    },
                    None,
                    String::new(),
                ),
            };
            let reasoning = match &outcome.failure {
                Some(f) => format!("failed ({f}); safe default"),
                None => reasoning,
            };
            judged.push((i, label, confidence, reasoning, outcome.failure.is_some()));
        }
        if judged.is_empty() {
            continue;
        }
        let scores_of = |split: Option<Split>| {
            let outcomes: Vec<(&str, &str)> = judged
                .iter()
                .filter(|(i, ..)| split.is_none_or(|s| pairs[*i].split == s))
                .map(|(i, label, ..)| (pairs[*i].label.as_str(), label.as_str()))
                .collect();
            score(name, labels, &outcomes)
        };
        let mut errors: Vec<PairError> = judged
            .iter()
            .filter(|(i, label, ..)| pairs[*i].label != *label)
            .map(|(i, label, confidence, reasoning, _)| {
                let p = &pairs[*i];
                PairError {
                    split: p.split,
                    gold: p.label.clone(),
                    judged: label.clone(),
                    destructive: is_destructive(name, &p.label, label),
                    confidence: *confidence,
                    reasoning: reasoning.clone(),
                    first: p.first.clone(),
                    second: p.second.clone(),
                    origin: p.origin.clone(),
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
        let similarity = similarities.as_ref().map(|s| {
            let rows: Vec<(&str, f32)> = judged
                .iter()
                .map(|(i, ..)| (pairs[*i].label.as_str(), s[*i]))
                .collect();
            similarity_table(labels, &rows)
        });
        tasks.push(TaskReport {
            task: name.to_string(),
            pairs: judged.len(),
            failed_calls: judged.iter().filter(|j| j.4).count(),
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

/// The cosine similarity of each pair's two texts (vectors are unit length).
async fn pair_similarities(embedder: &Embedder, pairs: &[Pair]) -> Result<Vec<f32>> {
    let texts: Vec<&str> = pairs
        .iter()
        .flat_map(|p| [p.first.as_str(), p.second.as_str()])
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
    Ok(vectors.chunks(2).map(|v| dot(&v[0], &v[1])).collect())
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
        let labels = if task.task == "link.classify" {
            LINK_LABELS
        } else {
            INTEGRATE_LABELS
        };
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
                write!(out, "{:>7.1}", t)?;
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
                    write!(out, "{:>7.2}", share)?;
                }
                writeln!(out)?;
            }
        }
        let shown = if all_errors { task.errors.len() } else { 40 };
        writeln!(out, "  errors ({}):", task.errors.len())?;
        for e in task.errors.iter().take(shown) {
            writeln!(
                out,
                "    [{}]{} gold {} judged {} ({}): {:?} -> {:?}; {}",
                e.split.as_str(),
                if e.destructive { " DESTRUCTIVE" } else { "" },
                e.gold,
                e.judged,
                two_places(e.confidence),
                e.first,
                e.second,
                e.reasoning
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
