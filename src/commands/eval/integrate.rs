//! `memlife eval integrate --pairs FILE`: new-fact integration judged end to end (candidate
//! retrieval plus judge) on labelled pairs (`{"old", "new", "label"}`, the `integrate.classify`
//! cases of `memlife eval judge`). Each pair is its own user of one temporary store: the old
//! fact is imported and embedded, the new one integrated through the real CLI, and the
//! operation integrate wrote is read back from the audit log. Reports the confusion matrix
//! of label against outcome (NEW: no candidate reached the judge), the destructive errors
//! (COEXIST or SUPERSEDE ending as DUPLICATE or MERGE, listed) and supersession accuracy.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::commands::bench::harness::{MockServer, Workdir, cpu_name, memlife, spawn_mock};

#[derive(clap::Args, Clone, Debug)]
pub struct IntegrateEvalArgs {
    /// JSON Lines of `{"old", "new", "label"}` (label DUPLICATE, SUPERSEDE, MERGE or COEXIST).
    #[arg(long, required_unless_present = "synth")]
    pub pairs: Vec<PathBuf>,
    /// Pairs from a `memlife synth` file and its truth (`--truth`): the first two memories of
    /// each duplicate group (DUPLICATE) and merge group (MERGE), consecutive versions of each
    /// supersession chain (SUPERSEDE), and two memories naming one entity that are in none of
    /// those (COEXIST, as many as there are merge groups).
    #[arg(long, requires = "truth")]
    pub synth: Option<PathBuf>,
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Embedder of the store: local (all-MiniLM-L6-v2, its calibrated threshold) or hash.
    #[arg(long, default_value = "local")]
    pub embedder: String,
    /// Judge: offline or providers (then `--llm-config` names the providers).
    #[arg(long, default_value = "offline")]
    pub llm: String,
    #[arg(long)]
    pub llm_config: Option<PathBuf>,
    /// Judge with `memlife mock-llm` answering every pair with its own label (confidence
    /// 0.9, through real HTTP): what candidate retrieval allows a perfect judge.
    #[arg(long, conflicts_with_all = ["llm", "llm_config"])]
    pub label_judge: bool,
    /// Keep the store in this folder.
    #[arg(long)]
    pub keep: Option<PathBuf>,
}

const LABELS: &[&str] = &["DUPLICATE", "SUPERSEDE", "MERGE", "COEXIST"];

/// What integrate did with a fact, from its decision's audit row.
fn outcome(operation: &str, classification: &str) -> String {
    match (operation, classification) {
        ("ADD", "NEW") => "NEW".into(),
        ("ADD", _) => "COEXIST".into(),
        ("UPDATE" | "NOOP", _) => "DUPLICATE".into(),
        ("REVIEW", c) => format!("REVIEW:{c}"),
        (op, _) => op.to_string(),
    }
}

fn synth_pairs(
    memories: &std::path::Path,
    truth: &std::path::Path,
) -> Result<Vec<(String, String, String)>> {
    let mut text: BTreeMap<String, String> = BTreeMap::new();
    for line in std::fs::read_to_string(memories)
        .with_context(|| format!("reading {}", memories.display()))?
        .lines()
    {
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}: a line is not JSON", memories.display()))?;
        if let (Some(id), Some(t)) = (v["id"].as_str(), v["text"].as_str()) {
            text.insert(id.to_string(), t.to_string());
        }
    }
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(truth).with_context(|| format!("reading {}", truth.display()))?,
    )
    .with_context(|| format!("{}: not JSON", truth.display()))?;
    let ids = |g: &Value| -> Vec<String> {
        g["memory_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let mut pairs = Vec::new();
    let mut grouped = std::collections::BTreeSet::new();
    let push = |a: &str, b: &str, label: &str, pairs: &mut Vec<(String, String, String)>| {
        if let (Some(x), Some(y)) = (text.get(a), text.get(b)) {
            pairs.push((x.clone(), y.clone(), label.to_string()));
        }
    };
    for (kind, label) in [("duplicate_groups", "DUPLICATE"), ("merge_groups", "MERGE")] {
        for g in truth[kind].as_array().into_iter().flatten() {
            let m = ids(g);
            grouped.extend(m.iter().cloned());
            if let [a, b, ..] = m.as_slice() {
                push(a, b, label, &mut pairs);
            }
        }
    }
    for g in truth["supersession_chains"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let m = ids(g);
        grouped.extend(m.iter().cloned());
        for w in m.windows(2) {
            push(&w[0], &w[1], "SUPERSEDE", &mut pairs);
        }
    }
    let wanted = truth["merge_groups"].as_array().map_or(0, Vec::len);
    let mut coexist = 0;
    for e in truth["entities"].as_array().into_iter().flatten() {
        if coexist >= wanted {
            break;
        }
        let free: Vec<String> = ids(e)
            .into_iter()
            .filter(|m| !grouped.contains(m))
            .collect();
        if let [a, b, ..] = free.as_slice() {
            push(a, b, "COEXIST", &mut pairs);
            grouped.insert(a.clone());
            grouped.insert(b.clone());
            coexist += 1;
        }
    }
    Ok(pairs)
}

/// The labelled pairs (`{"old", "new", "label"}` per line) of the files; lines of other
/// tasks are skipped, an unknown label is an error naming the file and line.
fn read_pairs(files: &[std::path::PathBuf]) -> Result<Vec<(String, String, String)>> {
    let mut pairs = Vec::new();
    for path in files {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not JSON", path.display(), n + 1))?;
            let (Some(old), Some(new), Some(label)) =
                (v["old"].as_str(), v["new"].as_str(), v["label"].as_str())
            else {
                continue; // another task's case
            };
            if !LABELS.contains(&label) {
                bail!(
                    "{}:{}: label '{label}' is not one of {LABELS:?}",
                    path.display(),
                    n + 1
                );
            }
            pairs.push((old.to_string(), new.to_string(), label.to_string()));
        }
    }
    Ok(pairs)
}

/// The result as text: the confusion matrix, destructive errors, supersession accuracy.
fn print_result(
    result: &Value,
    matrix: &BTreeMap<String, BTreeMap<String, u64>>,
    destructive: &[Value],
    (supersede_right, supersede_total): (u64, u64),
    out: &mut dyn Write,
) -> Result<()> {
    let pairs = result["pairs"].as_u64().unwrap_or(0) as usize;
    writeln!(
        out,
        "integrate end to end: {} pairs, embedder {}, judge {}",
        pairs,
        result["embedder"].as_str().unwrap_or(""),
        result["judge"].as_str().unwrap_or("")
    )?;
    let outcomes: Vec<String> = {
        let mut all: Vec<String> = matrix.values().flat_map(|m| m.keys().cloned()).collect();
        all.sort();
        all.dedup();
        all
    };
    writeln!(
        out,
        "{:<10} {}",
        "label",
        outcomes
            .iter()
            .map(|o| format!("{o:>18}"))
            .collect::<String>()
    )?;
    for label in LABELS {
        let row = matrix.get(*label);
        writeln!(
            out,
            "{label:<10} {}",
            outcomes
                .iter()
                .map(|o| format!("{:>18}", row.and_then(|r| r.get(o)).copied().unwrap_or(0)))
                .collect::<String>()
        )?;
    }
    writeln!(
        out,
        "destructive errors (COEXIST or SUPERSEDE ending DUPLICATE or MERGE): {} of {} ({:.1}%)",
        destructive.len(),
        pairs,
        100.0 * destructive.len() as f64 / pairs as f64
    )?;
    writeln!(
        out,
        "supersession accuracy: {supersede_right} of {supersede_total}"
    )?;
    for d in destructive {
        writeln!(
            out,
            "  {} -> {}: {:?} / {:?}",
            d["label"], d["outcome"], d["old"], d["new"]
        )?;
    }
    Ok(())
}

/// The judge the integration runs with: `--label-judge` starts `memlife mock-llm` answering
/// each pair with its own label (its config added to `integrate`'s arguments), else the
/// `--llm` asked for (with `--llm-config`). Returns the mock server (stopped when dropped)
/// and the `--llm` value.
fn judge(
    args: &IntegrateEvalArgs,
    pairs: &[(String, String, String)],
    work: &Workdir,
    integrate: &mut Vec<String>,
) -> Result<(Option<MockServer>, String)> {
    let p = |name: &str| work.path.join(name).to_string_lossy().into_owned();
    let mut llm = args.llm.clone();
    let mock = if args.label_judge {
        let answers = p("answers.jsonl");
        let lines: Vec<String> = pairs
            .iter()
            .map(|(old, new, label)| {
                json!({"task": "integrate.classify", "texts": [old, new],
                       "reply": {"classification": label, "confidence": 0.9,
                                 "reasoning": "the pair's label"}})
                .to_string()
            })
            .collect();
        std::fs::write(&answers, lines.join("\n") + "\n")?;
        let (mock, url) = spawn_mock(&["--answers".into(), answers])?;
        let config = p("label-judge.toml");
        std::fs::write(
            &config,
            format!(
                "[providers.mock]\nbase_url = \"{url}\"\nmodel = \"mock\"\nmax_concurrency = 64\n\
                 [roles]\nfast = [\"mock\"]\nreasoning = [\"mock\"]\n"
            ),
        )?;
        integrate.extend(["--config".into(), config]);
        llm = "providers".into();
        Some(mock)
    } else {
        if let Some(c) = &args.llm_config {
            integrate.extend(["--config".into(), c.to_string_lossy().into_owned()]);
        }
        None
    };
    Ok((mock, llm))
}

pub fn run(args: &IntegrateEvalArgs, json_out: bool, out: &mut dyn Write) -> Result<()> {
    let mut pairs = read_pairs(&args.pairs)?;
    if let (Some(memories), Some(truth)) = (&args.synth, &args.truth) {
        pairs.extend(synth_pairs(memories, truth)?);
    }
    if pairs.is_empty() {
        bail!("no integrate pairs ({{\"old\", \"new\", \"label\"}}) in the files given");
    }
    let path = args.keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("memlife-eval-integrate-{}", std::process::id()))
    });
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path)?;
    let work = Workdir {
        path,
        keep: args.keep.is_some(),
    };
    let p = |name: &str| work.path.join(name).to_string_lossy().into_owned();
    let (db, old_file, new_file) = (p("db"), p("old.jsonl"), p("new.jsonl"));
    let row = |i: usize, side: &str, text: &str, day: &str| {
        json!({"id": format!("p{i:04}-{side}"), "user_id": format!("p{i:04}"), "text": text,
               "created_at": format!("2025-{day}T10:00:00Z")})
        .to_string()
    };
    let olds: Vec<String> = pairs
        .iter()
        .enumerate()
        .map(|(i, (o, _, _))| row(i, "old", o, "01-10"))
        .collect();
    let news: Vec<String> = pairs
        .iter()
        .enumerate()
        .map(|(i, (_, n, _))| row(i, "new", n, "03-10"))
        .collect();
    std::fs::write(&old_file, olds.join("\n") + "\n")?;
    std::fs::write(&new_file, news.join("\n") + "\n")?;
    memlife(&["--db", &db, "--json", "init"])?;
    memlife(&["--db", &db, "--json", "import", &old_file])?;
    memlife(&["--db", &db, "--json", "embed", "--embedder", &args.embedder])?;
    let mut integrate: Vec<String> = vec!["--db".into(), db.clone(), "--json".into()];
    let (_mock, llm) = judge(args, &pairs, &work, &mut integrate)?;
    integrate.extend(
        [
            "integrate",
            &new_file,
            "--embedder",
            &args.embedder,
            "--llm",
            &llm,
            "--now",
            "2025-03-11T00:00:00Z",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let refs: Vec<&str> = integrate.iter().map(String::as_str).collect();
    let (report, seconds) = memlife(&refs)?;
    let (rows, _) = memlife(&[
        "--db",
        &db,
        "--json",
        "sql",
        "SELECT user_id, operation, classification, reasoning FROM audit_log \
         WHERE operation IN ('ADD', 'UPDATE', 'NOOP', 'SUPERSEDE', 'MERGE', 'REVIEW')",
        "--format",
        "json",
    ])?;
    let mut by_user: BTreeMap<String, (String, String)> = BTreeMap::new();
    for r in rows.as_array().into_iter().flatten() {
        let user = r["user_id"].as_str().unwrap_or("").to_string();
        let op = outcome(
            r["operation"].as_str().unwrap_or(""),
            r["classification"].as_str().unwrap_or(""),
        );
        by_user.insert(
            user,
            (op, r["reasoning"].as_str().unwrap_or("").to_string()),
        );
    }
    let mut matrix: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut destructive = Vec::new();
    let mut supersede_right = 0u64;
    for (i, (old, new, label)) in pairs.iter().enumerate() {
        let (op, why) = by_user
            .get(&format!("p{i:04}"))
            .cloned()
            .unwrap_or_else(|| ("MISSING".into(), String::new()));
        *matrix
            .entry(label.clone())
            .or_default()
            .entry(op.clone())
            .or_default() += 1;
        if label == "SUPERSEDE" && op == "SUPERSEDE" {
            supersede_right += 1;
        }
        if matches!(label.as_str(), "COEXIST" | "SUPERSEDE")
            && matches!(op.as_str(), "DUPLICATE" | "MERGE")
        {
            destructive.push(
                json!({"old": old, "new": new, "label": label, "outcome": op, "reasoning": why}),
            );
        }
    }
    let supersede_total = pairs.iter().filter(|p| p.2 == "SUPERSEDE").count() as u64;
    let result = json!({
        "eval": "integrate",
        "cpu": cpu_name(),
        "pairs": pairs.len(),
        "embedder": args.embedder,
        "judge": if args.label_judge { "labels (mock-llm --answers)".to_string() } else { args.llm.clone() },
        "integrate_seconds": (seconds * 1000.0).round() / 1000.0,
        "confusion": matrix,
        "destructive_errors": destructive.len(),
        "destructive_rate": destructive.len() as f64 / pairs.len() as f64,
        "supersession_accuracy": if supersede_total > 0 { json!(supersede_right as f64 / supersede_total as f64) } else { Value::Null },
        "destructive": destructive,
        "llm": report["llm"],
    });
    if json_out {
        writeln!(out, "{}", serde_json::to_string_pretty(&result)?)?;
        return Ok(());
    }
    print_result(
        &result,
        &matrix,
        &destructive,
        (supersede_right, supersede_total),
        out,
    )?;
    Ok(())
}
