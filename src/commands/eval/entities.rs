//! `memlife eval entities`: precision and recall of the offline entity extractor against
//! labelled text: synth's truth (`--memories` + `--truth`), or hand-labelled lines
//! (`--labels`: one JSON object per line, `{"user_id": "...", "text": "...", "entities":
//! [{"name": "...", "type": "person"}]}`; `user_id` optional). A mention is one (memory,
//! normalised name); it counts as found when the extractor names it for that memory, and as
//! typed when it gives the labelled type too.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use serde_json::Value;

use super::text_field;
use crate::exit::ExitStatus;
use crate::logic::entities::{normalise_name, read_user};

#[derive(clap::Args, Clone, Debug)]
pub struct EntitiesEvalArgs {
    /// Memories (JSON Lines with id, user_id, text), scored against `--truth`.
    #[arg(long, requires = "truth")]
    pub memories: Option<PathBuf>,
    /// The truth file `memlife synth` wrote beside the memories.
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Hand-labelled texts (see the command's doc).
    #[arg(long)]
    pub labels: Vec<PathBuf>,
    /// List every miss and every false name.
    #[arg(long)]
    pub errors: bool,
}

/// (memory key, normalised name) -> type.
type Gold = BTreeMap<(String, String), String>;

struct Text {
    key: String,
    user: String,
    text: String,
}

#[derive(Serialize, Default)]
struct Scores {
    source: String,
    texts: usize,
    gold_mentions: usize,
    found_mentions: usize,
    correct: usize,
    correct_typed: usize,
    precision: f64,
    recall: f64,
    typed_precision: f64,
    typed_recall: f64,
    by_type: BTreeMap<String, (usize, usize)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
}

fn read_lines(path: &PathBuf) -> Result<Vec<(usize, serde_json::Map<String, Value>)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}", path.display(), n + 1))?;
        let Value::Object(row) = value else {
            bail!("{} line {}: not a JSON object", path.display(), n + 1);
        };
        out.push((n + 1, row));
    }
    Ok(out)
}

fn synth(memories: &PathBuf, truth: &PathBuf) -> Result<(Vec<Text>, Gold)> {
    let mut texts = Vec::new();
    for (n, row) in read_lines(memories)? {
        let at = format!("{} line {n}", memories.display());
        texts.push(Text {
            key: text_field(&row, "id", &at)?,
            user: text_field(&row, "user_id", &at)?,
            text: text_field(&row, "text", &at)?,
        });
    }
    let truth_text =
        std::fs::read_to_string(truth).with_context(|| format!("{}", truth.display()))?;
    let value: Value =
        serde_json::from_str(&truth_text).with_context(|| format!("{}", truth.display()))?;
    let entities = value
        .get("entities")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("{}: no `entities` list", truth.display()))?;
    let mut gold = Gold::new();
    for (i, e) in entities.iter().enumerate() {
        let at = format!("{} entities[{i}]", truth.display());
        let row = e
            .as_object()
            .ok_or_else(|| anyhow!("{at}: not an object"))?;
        let name = normalise_name(&text_field(row, "name", &at)?);
        let kind = text_field(row, "entity_type", &at)?;
        for id in row
            .get("memory_ids")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            gold.insert((id.to_string(), name.clone()), kind.to_string());
        }
    }
    Ok((texts, gold))
}

fn labelled(path: &PathBuf) -> Result<(Vec<Text>, Gold)> {
    let mut texts = Vec::new();
    let mut gold = Gold::new();
    for (n, row) in read_lines(path)? {
        let at = format!("{} line {n}", path.display());
        let key = format!("line {n}");
        texts.push(Text {
            key: key.clone(),
            user: row
                .get("user_id")
                .and_then(Value::as_str)
                .unwrap_or("user")
                .to_string(),
            text: text_field(&row, "text", &at)?,
        });
        let list = row
            .get("entities")
            .and_then(Value::as_array)
            .ok_or_else(|| anyhow!("{at}: field `entities` missing or not a list"))?;
        for (i, e) in list.iter().enumerate() {
            let at = format!("{at} entities[{i}]");
            let e = e
                .as_object()
                .ok_or_else(|| anyhow!("{at}: not an object"))?;
            let kind = text_field(e, "type", &at)?;
            if !crate::model::schema::ENTITY_TYPES.contains(&kind.as_str()) {
                bail!(
                    "{at}: type {kind:?} is not one of {:?}",
                    crate::model::schema::ENTITY_TYPES
                );
            }
            gold.insert(
                (key.clone(), normalise_name(&text_field(e, "name", &at)?)),
                kind.to_string(),
            );
        }
    }
    Ok((texts, gold))
}

fn score(source: String, texts: &[Text], gold: &Gold, errors: bool) -> Scores {
    let mut by_user: BTreeMap<&str, Vec<&Text>> = BTreeMap::new();
    for t in texts {
        by_user.entry(&t.user).or_default().push(t);
    }
    let mut found: Gold = Gold::new();
    for list in by_user.values() {
        let strs: Vec<&str> = list.iter().map(|t| t.text.as_str()).collect();
        for (t, mentions) in list.iter().zip(read_user(&strs, &BTreeSet::new())) {
            for m in mentions {
                found.insert(
                    (t.key.clone(), normalise_name(&m.name)),
                    m.entity_type.to_string(),
                );
            }
        }
    }
    let text_of: BTreeMap<&str, &str> = texts
        .iter()
        .map(|t| (t.key.as_str(), t.text.as_str()))
        .collect();
    let mut s = Scores {
        source,
        texts: texts.len(),
        gold_mentions: gold.len(),
        found_mentions: found.len(),
        ..Scores::default()
    };
    for (key, kind) in gold {
        let entry = s.by_type.entry(kind.clone()).or_default();
        entry.1 += 1;
        match found.get(key) {
            Some(k) => {
                s.correct += 1;
                if k == kind {
                    s.correct_typed += 1;
                    entry.0 += 1;
                } else if errors {
                    s.errors.push(format!(
                        "typed {k}, gold {kind}: {:?} in {:?}",
                        key.1,
                        text_of.get(key.0.as_str())
                    ));
                }
            }
            None if errors => s.errors.push(format!(
                "missed {kind}: {:?} in {:?}",
                key.1,
                text_of.get(key.0.as_str())
            )),
            None => {}
        }
    }
    if errors {
        for (key, kind) in &found {
            if !gold.contains_key(key) {
                s.errors.push(format!(
                    "false {kind}: {:?} in {:?}",
                    key.1,
                    text_of.get(key.0.as_str())
                ));
            }
        }
    }
    let ratio = |a: usize, b: usize| {
        if b == 0 {
            0.0
        } else {
            (a as f64 / b as f64 * 1000.0).round() / 1000.0
        }
    };
    s.precision = ratio(s.correct, s.found_mentions);
    s.recall = ratio(s.correct, s.gold_mentions);
    s.typed_precision = ratio(s.correct_typed, s.found_mentions);
    s.typed_recall = ratio(s.correct_typed, s.gold_mentions);
    s
}

pub fn run(args: &EntitiesEvalArgs, json: bool, out: &mut dyn Write) -> Result<ExitStatus> {
    let mut reports = Vec::new();
    if let (Some(memories), Some(truth)) = (&args.memories, &args.truth) {
        let (texts, gold) = synth(memories, truth)?;
        reports.push(score(
            format!("{} (synth truth)", memories.display()),
            &texts,
            &gold,
            args.errors,
        ));
    }
    for path in &args.labels {
        let (texts, gold) = labelled(path)?;
        reports.push(score(
            format!("{} (labels)", path.display()),
            &texts,
            &gold,
            args.errors,
        ));
    }
    if reports.is_empty() {
        bail!("nothing to score: give --memories with --truth, or --labels");
    }
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&reports)?)?;
        return Ok(ExitStatus::Success);
    }
    for r in &reports {
        writeln!(
            out,
            "{}: {} texts, {} labelled mentions, {} found",
            r.source, r.texts, r.gold_mentions, r.found_mentions
        )?;
        writeln!(
            out,
            "  names: precision {:.3}, recall {:.3}",
            r.precision, r.recall
        )?;
        writeln!(
            out,
            "  names and types: precision {:.3}, recall {:.3}",
            r.typed_precision, r.typed_recall
        )?;
        for (kind, (typed, total)) in &r.by_type {
            writeln!(out, "  {kind}: {typed}/{total} found with this type")?;
        }
        for e in &r.errors {
            writeln!(out, "    {e}")?;
        }
    }
    Ok(ExitStatus::Success)
}
