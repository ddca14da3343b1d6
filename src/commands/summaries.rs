//! `memlife summaries inject --user U --context FILE`: the session-start block of seed 001
//! (`<memory_consolidated_summaries version=".." generated_at="..">`) written into a context
//! file, replacing any earlier block and keeping every other byte; `--stdout` prints it for
//! hooks that take additional context. The rules (which summaries, the budget, the version,
//! the replacement) are `logic::summaries`; tokens are counted with tiktoken's cl100k_base.
//!
//! A user's summaries are their live consolidated memories (written by `consolidate`) and
//! memories of kind `summary`: not archived, not superseded, still valid. Reading them
//! activates nothing: a hook that runs at every session start must not make them look used.
//!
//! The file is written only when the version changes (or when blocks must be collapsed into
//! one), through a temporary file in the same folder renamed over it, so a reader never sees
//! half a file and a killed run leaves the old one.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;

use crate::app::App;
use crate::embedders::{Embedded, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::logic::summaries::{self, Prioritize, SummaryCandidate, SummaryParams};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::store::{sql_string, sql_timestamp};

#[derive(clap::Args, Debug)]
pub struct SummariesArgs {
    #[command(subcommand)]
    pub which: SummariesCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum SummariesCommand {
    /// Write the session-start block of a user's consolidated summaries into a context file
    /// (exactly one block after any number of runs; every other byte kept).
    Inject(InjectArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct InjectArgs {
    #[arg(long)]
    pub user: String,
    /// The context file (created when missing). Optional with --stdout.
    #[arg(long, required_unless_present = "stdout")]
    pub context: Option<PathBuf>,
    /// Print the block (for hooks that take additional context).
    #[arg(long)]
    pub stdout: bool,
    /// Tokens of the whole block (cl100k_base); default summaries.token_budget (2000).
    #[arg(long)]
    pub budget: Option<usize>,
    /// At most this many summaries; default summaries.max (10).
    #[arg(long)]
    pub max: Option<usize>,
    /// Default summaries.min_confidence (0.7).
    #[arg(long)]
    pub min_confidence: Option<f64>,
    /// What ranks first; default summaries.prioritize (relevance).
    #[arg(long, value_enum)]
    pub prioritize: Option<Prioritize>,
    /// The session's project: summaries near it rank first.
    #[arg(long)]
    pub project: Option<String>,
    /// Files of the session (repeatable): summaries near them rank first.
    #[arg(long = "file")]
    pub files: Vec<String>,
    /// The clock (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    /// Embeds the session's description when --project or --file is given.
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

#[derive(Serialize)]
struct Chosen {
    id: String,
    priority: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    relevance: Option<f64>,
    text: String,
}

#[derive(Serialize)]
struct Report {
    user: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<String>,
    version: String,
    generated_at: String,
    /// Whether the file was written (false: its block had this version already).
    written: bool,
    /// Blocks found in the file before the run.
    blocks_before: usize,
    candidates: usize,
    summaries: Vec<Chosen>,
    tokens: usize,
    budget: usize,
    over_budget: Vec<String>,
    over_max: usize,
    #[serde(skip)]
    block: String,
}

/// What the block reads of a summary.
#[derive(serde::Deserialize)]
struct Summary {
    id: String,
    text: String,
    confidence: Option<f64>,
    access_count: Option<i64>,
    created_at: i64,
    updated_at: Option<i64>,
}

/// The token count of a text (cl100k_base).
pub fn tokens(text: &str) -> usize {
    tiktoken_rs::cl100k_base_singleton()
        .encode_ordinary(text)
        .len()
}

pub async fn run(app: &App, args: &SummariesArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    match &args.which {
        SummariesCommand::Inject(a) => inject(app, a, out).await,
    }
}

async fn inject(app: &App, args: &InjectArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let config = app.config().await?;
    let params = SummaryParams {
        max: args.max.unwrap_or(config.summaries.max),
        token_budget: args.budget.unwrap_or(config.summaries.token_budget),
        min_confidence: args
            .min_confidence
            .unwrap_or(config.summaries.min_confidence),
        prioritize: args.prioritize.unwrap_or(config.summaries.prioritize),
    };
    params.validate().map_err(|e| anyhow!(e))?;
    let now = Clock::or_now(args.now).micros();
    // Read the file first: a damaged one stops the run before any work.
    let before = match &args.context {
        Some(path) => read_context(path)?,
        None => None,
    };
    let blocks_before = match &before {
        Some(text) => summaries::blocks(text)
            .map_err(|e| anyhow!("{}: {e}", args.context.as_ref().unwrap().display()))?
            .len(),
        None => 0,
    };

    let store = app.store().await?;
    let live = format!(
        "user_id = {} AND archived_at IS NULL AND state <> 'archived' AND superseded_by IS NULL \
         AND (valid_until IS NULL OR valid_until > {}) AND (kind = 'summary' OR source = 'consolidate')",
        sql_string(&args.user),
        sql_timestamp(now)
    );
    let rows: Vec<Summary> = store.scan_rows("memories", Some(&live)).await?;
    // Recalls since the last `scores` run count: their activations are pending.
    let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    let pending = store.pending_activations_of(&ids).await?;
    let relevance = relevance(app, args, store, &live, rows.len()).await?;
    let candidates: Vec<SummaryCandidate> = rows
        .into_iter()
        .map(|r| SummaryCandidate {
            relevance: relevance
                .as_ref()
                .map(|m| m.get(&r.id).copied().unwrap_or(0.0)),
            text: r.text,
            updated_at: r.updated_at.unwrap_or(r.created_at),
            access_count: pending
                .get(&r.id)
                .map_or(0, |a| a.access_count)
                .max(r.access_count.unwrap_or(0)),
            confidence: r.confidence.unwrap_or(0.0),
            id: r.id,
        })
        .collect();

    // To the second: the attribute is for people, and the version says what changed.
    let generated_at = chrono::DateTime::from_timestamp_micros(now)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| format_timestamp(now));
    let selection = summaries::select(
        &args.user,
        &candidates,
        &params,
        now,
        &generated_at,
        &tokens,
    )
    .map_err(|e| anyhow!("--budget {}: {e}", params.token_budget))?;
    let chosen: Vec<&SummaryCandidate> = selection.chosen.iter().map(|&i| &candidates[i]).collect();
    let version = summaries::block_version(&args.user, &chosen);

    // The same selection as the file's one block: leave the file exactly as it is.
    let unchanged = blocks_before == 1
        && before
            .as_deref()
            .and_then(summaries::version_in)
            .is_some_and(|v| v == version);
    let mut written = false;
    let block = if unchanged {
        let text = before.as_deref().unwrap_or("");
        let r = summaries::blocks(text).map_err(|e| anyhow!(e))?[0].clone();
        text[r].to_string()
    } else {
        if let Some(path) = &args.context {
            let replaced = summaries::replace(before.as_deref().unwrap_or(""), &selection.block)
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            write_atomically(path, &replaced)?;
            written = true;
        }
        selection.block.clone()
    };
    let report = Report {
        user: args.user.clone(),
        context: args.context.as_ref().map(|p| p.display().to_string()),
        generated_at: summaries::generated_at_in(&block)
            .unwrap_or(&generated_at)
            .to_string(),
        version,
        written,
        blocks_before,
        candidates: candidates.len(),
        summaries: chosen
            .iter()
            .map(|c| Chosen {
                id: c.id.clone(),
                priority: (summaries::priority(c, params.prioritize, now) * 1e4).round() / 1e4,
                relevance: c.relevance.map(|r| (r * 1e4).round() / 1e4),
                text: c.text.clone(),
            })
            .collect(),
        tokens: tokens(&block),
        budget: params.token_budget,
        over_budget: selection
            .over_budget
            .iter()
            .map(|&i| candidates[i].id.clone())
            .collect(),
        over_max: selection.over_max,
        block,
    };
    print(app.json, args.stdout, &report, out)?;
    Ok(ExitStatus::Success)
}

/// How well each summary answers the session's description (`--project`, `--file`), by
/// recall's ranking (`recall::relevance`); None when the session has none.
async fn relevance(
    app: &App,
    args: &InjectArgs,
    store: &crate::store::Store,
    live: &str,
    candidates: usize,
) -> Result<Option<std::collections::BTreeMap<String, f64>>> {
    let mut about = Vec::new();
    if let Some(p) = &args.project {
        about.push(format!("project {p}"));
    }
    if !args.files.is_empty() {
        about.push(format!("files {}", args.files.join(", ")));
    }
    if about.is_empty() || candidates == 0 {
        return Ok(None);
    }
    let embedder = app
        .embedder(&args.embedder, store.embedding_dim(), 16)
        .await?;
    let model = embedder.model_name();
    let query = about.join("; ");
    let vector = match embedder.embed(&[query.as_str()]).await?.pop() {
        Some(Embedded::Vector { values, .. }) => values,
        Some(Embedded::Refused(why)) => {
            bail!("the embedder refused the session's description: {why}")
        }
        None => bail!("the embedder returned nothing for the session's description"),
    };
    let filter = format!("{live} AND embedding_model = {}", sql_string(&model));
    // Recall's own ranking (cosine, the lexical signal, crowding), so a session's summaries are
    // chosen the way its questions are answered.
    let params = &app.config().await?.recall;
    Ok(Some(
        super::recall::relevance(store, params, &query, &vector, &filter, candidates).await?,
    ))
}

/// The file's text, or None when it does not exist yet.
fn read_context(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|e| anyhow!("{}: not UTF-8 text ({e})", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Writes through a temporary file in the same folder, renamed over `path` (keeping its
/// permissions).
fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{}: not a file path", path.display()))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".memlife-{}.tmp", std::process::id()));
    let tmp = match dir {
        Some(d) => d.join(&tmp_name),
        None => PathBuf::from(&tmp_name),
    };
    let result = (|| -> Result<()> {
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if let Ok(meta) = std::fs::metadata(path) {
            std::fs::set_permissions(&tmp, meta.permissions())?;
        }
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot replace {}", path.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn print(json: bool, stdout: bool, report: &Report, out: &mut dyn Write) -> Result<()> {
    if stdout {
        // The block alone, for a hook's additional context.
        writeln!(out, "{}", report.block)?;
        return Ok(());
    }
    if json {
        serde_json::to_writer_pretty(&mut *out, report)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "summaries for {}: {} of {} chosen, {} of {} tokens, version {}{}",
        report.user,
        report.summaries.len(),
        report.candidates,
        report.tokens,
        report.budget,
        report.version,
        match (&report.context, report.written) {
            (Some(c), true) => format!("; written to {c}"),
            (Some(c), false) => format!("; {c} has this version already (not rewritten)"),
            (None, _) => String::new(),
        }
    )?;
    for s in &report.summaries {
        writeln!(out, "  {:.3}  {:<36} {}", s.priority, s.id, s.text)?;
    }
    if !report.over_budget.is_empty() {
        writeln!(
            out,
            "left out (over the budget): {}",
            report.over_budget.join(", ")
        )?;
    }
    if report.over_max > 0 {
        writeln!(out, "left out (over the maximum): {}", report.over_max)?;
    }
    Ok(())
}
