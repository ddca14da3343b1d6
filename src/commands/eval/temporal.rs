//! `memlife eval temporal --locomo FILE`: relative-date resolution (`logic::temporal`) on
//! LoCoMo's temporal questions (category 2). For each question, the time expressions of its
//! evidence turns are resolved against the date of the session they were said in; when
//! there are several, the one whose neighbouring words share most with the question is the
//! answer (then, an expression of the future for a question about the future, "when is ...
//! going to", and of the past otherwise; then an explicit one over a tense; then the nearest
//! to a word of the question). The gold answer is read as an interval (`temporal::parse_gold`: dates, months,
//! years, "the week before D", "the Sunday before D", "two weekends before D", "N years
//! ago"); answers that are durations or vague ("4 years", "a few years ago") are counted
//! apart. Accuracy: resolved answers that match the gold interval (`temporal::matches`);
//! coverage: questions with a dated gold answer that get a resolution at all. An expression
//! none of whose eight neighbours on either side the question names, in a turn that names two
//! of the question's words elsewhere, is taken to date something else: unresolved.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use chrono::NaiveDate;
use serde::Serialize;
use serde_json::Value;

use crate::exit::ExitStatus;
use crate::logic::temporal::{Resolution, matches, parse_gold, resolve};

#[derive(clap::Args, Clone, Debug)]
pub struct TemporalEvalArgs {
    /// LoCoMo conversations (a JSON array of samples with `conversation` and `qa`).
    #[arg(long)]
    pub locomo: PathBuf,
    /// List every question, not only the failures.
    #[arg(long)]
    pub all: bool,
}

#[derive(Serialize, Clone)]
struct Case {
    sample: String,
    question: String,
    gold: String,
    /// The gold answer as an interval, when it is one.
    gold_interval: Option<String>,
    /// The chosen resolution: expression and interval.
    expression: Option<String>,
    resolved: Option<String>,
    evidence: String,
    said_on: Option<String>,
    outcome: &'static str,
}

#[derive(Serialize, Default)]
struct Report {
    questions: usize,
    gold_not_a_date: usize,
    dated: usize,
    resolved: usize,
    correct: usize,
    accuracy: f64,
    coverage: f64,
    cases: Vec<Case>,
}

/// "1:56 pm on 8 May, 2023" -> 2023-05-08.
fn session_date(text: &str) -> Option<NaiveDate> {
    let date = text.rsplit(" on ").next()?.trim();
    NaiveDate::parse_from_str(&date.replace(',', ""), "%d %B %Y").ok()
}

/// Question words that say nothing of the event asked about.
const QUESTION_STOP: &[&str] = &[
    "when", "did", "does", "what", "which", "how", "long", "ago", "was", "were", "are", "the",
    "and", "for", "his", "her", "their", "with", "from", "that", "this", "have", "has", "had",
    "she", "they", "who", "where", "month", "year", "week", "day", "date", "time", "get", "got",
    "first", "last", "start", "started", "going", "plan", "planning",
];

fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2 && !QUESTION_STOP.contains(w))
        .map(str::to_string)
        .collect()
}

/// How many of the question's words the expression's neighbourhood names (its sentence, or
/// the fifteen words on either side, whichever names more), then how near the nearest one
/// stands.
fn closeness(question: &BTreeSet<String>, text: &str, r: &Resolution) -> (usize, i64) {
    // The tokens `temporal::resolve` counts words by (apostrophes inside words kept).
    let tokens: Vec<(usize, String)> = {
        let mut out = Vec::new();
        let mut sentence = 0;
        let mut word = String::new();
        for c in text.chars().chain(std::iter::once(' ')) {
            if c.is_alphanumeric() || c == '\'' {
                word.push(c);
                continue;
            }
            let w = word.trim_matches('\'').to_lowercase();
            if !w.is_empty() {
                out.push((sentence, w));
            }
            word.clear();
            if matches!(c, '.' | '!' | '?') {
                sentence += 1;
            }
        }
        out
    };
    // Words match on their first four letters ("apply" / "applied", "adopt" / "adoption").
    let stem = |w: &str| w.chars().take(4).collect::<String>();
    let asked: BTreeSet<String> = question.iter().map(|q| stem(q)).collect();
    let named = |w: &str| {
        w.split('\'')
            .any(|part| part.len() > 2 && asked.contains(&stem(part)))
    };
    let Some((sentence, _)) = tokens.get(r.word) else {
        return (0, i64::MIN);
    };
    let in_sentence = tokens
        .iter()
        .filter(|(s, w)| s == sentence && named(w))
        .count();
    let from = r.word.saturating_sub(15);
    let to = (r.word + 16).min(tokens.len());
    let near = tokens[from..to].iter().filter(|(_, w)| named(w)).count();
    // Ties go to the expression nearest a named word.
    let nearest = tokens
        .iter()
        .enumerate()
        .filter(|(_, (_, w))| named(w))
        .map(|(i, _)| (i as i64 - r.word as i64).abs())
        .min()
        .unwrap_or(i64::MAX);
    (in_sentence.max(near), -nearest)
}

/// The day `text` was said (the session of the evidence turn it is).
fn r_anchor(said: &[(NaiveDate, String)], text: &str) -> NaiveDate {
    said.iter()
        .find(|(_, t)| t == text)
        .map(|(d, _)| *d)
        .unwrap_or(NaiveDate::MIN)
}

/// Each turn of a conversation by dialogue id: its session's date and its text.
fn turns_of(
    conv: &serde_json::Map<String, Value>,
) -> BTreeMap<String, (Option<NaiveDate>, String)> {
    let mut turns: BTreeMap<String, (Option<NaiveDate>, String)> = BTreeMap::new();
    for (key, value) in conv {
        let Some(session) = key.strip_prefix("session_") else {
            continue;
        };
        let Some(list) = value.as_array() else {
            continue;
        };
        let date = conv
            .get(&format!("session_{session}_date_time"))
            .and_then(Value::as_str)
            .and_then(session_date);
        for t in list {
            if let (Some(dia), Some(text)) = (t["dia_id"].as_str(), t["text"].as_str()) {
                turns.insert(dia.to_string(), (date, text.to_string()));
            }
        }
    }
    turns
}

/// The expression of the evidence turns (`said`: each with the day it was said) that best
/// answers `question`: one its neighbours name, of the future when the question asks about
/// it, explicit before implied, nearest the question's words.
fn best_expression(
    question: &str,
    said: &[(NaiveDate, String)],
) -> Option<(crate::logic::temporal::Resolution, String)> {
    let q: BTreeSet<String> = words(question).into_iter().collect();
    let lower = question.to_lowercase();
    let future = [
        "will ",
        "going to",
        "planning",
        "plan to",
        "when is ",
        "when are ",
    ]
    .iter()
    .any(|m| lower.contains(m));
    said.iter()
        .flat_map(|(d, t)| resolve(t, *d).into_iter().map(move |r| (r, t)))
        .enumerate()
        .max_by_key(|(i, (r, t))| {
            let (named, nearest) = closeness(&q, t, r);
            // A question about the future wants an expression of the future.
            let ahead = r.start > r_anchor(said, t);
            (
                named,
                ahead == future,
                !r.implied,
                nearest,
                std::cmp::Reverse(*i),
            )
        })
        .map(|(_, (r, t))| (r, t.clone()))
        // An expression none of whose neighbours the question names, in a turn that
        // names the question's subject elsewhere, dates something else.
        .filter(|(r, t)| {
            let stem = |w: &str| w.chars().take(4).collect::<String>();
            let asked: BTreeSet<String> = q.iter().map(|w| stem(w)).collect();
            closeness(&q, t, r).0 > 0
                || words(t).iter().filter(|w| asked.contains(&stem(w))).count() < 2
        })
}

/// The report as text: the counts, then the cases by outcome.
fn print_report(report: &Report, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "temporal questions: {} ({} with a gold answer that is not a date or interval)",
        report.questions, report.gold_not_a_date
    )?;
    writeln!(
        out,
        "resolved {} of {} dated questions (coverage {:.1}%); {} correct (accuracy {:.1}%)",
        report.resolved,
        report.dated,
        report.coverage * 100.0,
        report.correct,
        report.accuracy * 100.0
    )?;
    for outcome in ["wrong", "unresolved", "gold not a date", "correct"] {
        let cases: Vec<&Case> = report
            .cases
            .iter()
            .filter(|c| c.outcome == outcome)
            .collect();
        if cases.is_empty() {
            continue;
        }
        writeln!(out, "\n{outcome} ({}):", cases.len())?;
        for c in cases {
            writeln!(
                out,
                "- [{}] {} gold {:?}{} | said {} | {} -> {} | {}",
                c.sample,
                c.question,
                c.gold,
                c.gold_interval
                    .as_deref()
                    .map(|g| format!(" ({g})"))
                    .unwrap_or_default(),
                c.said_on.as_deref().unwrap_or("?"),
                c.expression.as_deref().unwrap_or("-"),
                c.resolved.as_deref().unwrap_or("-"),
                c.evidence.chars().take(140).collect::<String>()
            )?;
        }
    }
    Ok(())
}

pub fn run(args: &TemporalEvalArgs, json: bool, out: &mut dyn Write) -> Result<ExitStatus> {
    let text = std::fs::read_to_string(&args.locomo)
        .with_context(|| format!("reading {}", args.locomo.display()))?;
    let samples: Vec<Value> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not a JSON array of LoCoMo samples",
            args.locomo.display()
        )
    })?;
    let mut report = Report::default();
    for (n, sample) in samples.iter().enumerate() {
        let id = sample["sample_id"]
            .as_str()
            .map_or_else(|| format!("#{n}"), str::to_string);
        let conv = sample["conversation"]
            .as_object()
            .ok_or_else(|| anyhow!("{}: sample {id} has no conversation", args.locomo.display()))?;
        let turns = turns_of(conv);
        for qa in sample["qa"].as_array().into_iter().flatten() {
            if qa["category"].as_i64() != Some(2) {
                continue;
            }
            report.questions += 1;
            let question = qa["question"].as_str().unwrap_or("").to_string();
            let gold = match &qa["answer"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            // Evidence ids, sometimes several in one string ("D8:6; D9:17").
            let evidence: Vec<String> = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .flat_map(|e| e.split([';', ',']).map(|x| x.trim().to_string()))
                .filter(|e| !e.is_empty())
                .collect();
            let said: Vec<(NaiveDate, String)> = evidence
                .iter()
                .filter_map(|e| turns.get(e))
                .filter_map(|(d, t)| d.map(|d| (d, t.clone())))
                .collect();
            let anchor = said.first().map(|(d, _)| *d);
            let gold_interval = anchor.and_then(|a| parse_gold(&gold, a));
            let mut case = Case {
                sample: id.clone(),
                question: question.clone(),
                gold: gold.clone(),
                gold_interval: gold_interval.map(|(s, e)| format!("{s}..{e}")),
                expression: None,
                resolved: None,
                evidence: said.first().map(|(_, t)| t.clone()).unwrap_or_default(),
                said_on: anchor.map(|d| d.to_string()),
                outcome: "",
            };
            let Some(gold_interval) = gold_interval else {
                report.gold_not_a_date += 1;
                case.outcome = "gold not a date";
                report.cases.push(case);
                continue;
            };
            report.dated += 1;
            let best = best_expression(&question, &said);
            let Some((r, t)) = best else {
                case.outcome = "unresolved";
                report.cases.push(case);
                continue;
            };
            report.resolved += 1;
            case.expression = Some(r.expression.clone());
            case.resolved = Some(r.label());
            case.evidence = t;
            if matches((r.start, r.end), gold_interval) {
                report.correct += 1;
                case.outcome = "correct";
            } else {
                case.outcome = "wrong";
            }
            report.cases.push(case);
        }
    }
    report.accuracy = report.correct as f64 / report.resolved.max(1) as f64;
    report.coverage = report.resolved as f64 / report.dated.max(1) as f64;
    if !args.all {
        report.cases.retain(|c| c.outcome != "correct");
    }
    if json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
        return Ok(ExitStatus::Success);
    }
    print_report(&report, out)?;
    Ok(ExitStatus::Success)
}
