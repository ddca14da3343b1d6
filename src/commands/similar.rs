//! `memlife similar ID`: a memory's nearest neighbours among its user's memories, with their
//! cosine similarity, for tuning thresholds (seed 003: 0.75 linking, 0.85 default, 0.95
//! near-duplicates). Exact search with the pure kernels; only vectors of the same model count.

use std::io::Write;

use anyhow::{Context, Result, bail};

use crate::app::App;
use crate::exit::ExitStatus;
use crate::logic::similarity::{SelfMatch, top_k};
use crate::store::Store;
use crate::store::sql_string;

#[derive(Debug, serde::Serialize)]
pub struct SimilarRow {
    pub rank: usize,
    pub id: String,
    pub score: f32,
    pub state: String,
    pub text: String,
}

/// A user's vectors of one model, row-major, with ids, texts and states.
pub struct UserVectors {
    pub ids: Vec<String>,
    pub texts: Vec<String>,
    pub states: Vec<String>,
    pub data: Vec<f32>,
    pub dim: usize,
}

pub async fn load_user_vectors(
    store: &Store,
    user: &str,
    model: Option<&str>,
) -> Result<UserVectors> {
    let mut filter = format!("user_id = {}", sql_string(user));
    if let Some(model) = model {
        filter.push_str(&format!(" AND embedding_model = {}", sql_string(model)));
    }
    #[derive(serde::Deserialize)]
    struct Row {
        id: String,
        text: String,
        state: String,
    }
    let (rows, data) = store
        .scan_rows_with_vectors::<Row>("memories", &filter, "embedding")
        .await?;
    let mut vectors = UserVectors {
        ids: Vec::with_capacity(rows.len()),
        texts: Vec::with_capacity(rows.len()),
        states: Vec::with_capacity(rows.len()),
        data,
        dim: store.embedding_dim(),
    };
    for row in rows {
        vectors.ids.push(row.id);
        vectors.texts.push(row.text);
        vectors.states.push(row.state);
    }
    Ok(vectors)
}

/// A memory's nearest neighbours among its user's memories, with scores.
#[derive(clap::Args, Debug)]
pub struct SimilarArgs {
    pub id: String,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Only neighbours at or above this cosine similarity.
    #[arg(long, default_value_t = -1.0)]
    pub min: f32,
    /// Archived memories too (default: live neighbours only).
    #[arg(long)]
    pub archived: bool,
}

pub async fn run(app: &App, args: &SimilarArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let (store, json) = (app.store().await?, app.json);
    let (id, k, min) = (args.id.as_str(), args.k, args.min);
    let filter = format!("id = {}", sql_string(id));
    #[derive(serde::Deserialize)]
    struct Asked {
        user_id: String,
        embedding_model: Option<String>,
        embedding: Option<Vec<f32>>,
    }
    let found: Vec<Asked> = store.scan_rows("memories", Some(&filter)).await?;
    let Some(asked) = found.into_iter().next() else {
        bail!("no memory with id '{id}'");
    };
    if asked.embedding.is_none() {
        bail!("memory '{id}' has no embedding yet: run `memlife embed`");
    }
    let (user, model) = (asked.user_id, asked.embedding_model);
    let vectors = load_user_vectors(store, &user, model.as_deref()).await?;
    let position = vectors
        .ids
        .iter()
        .position(|x| x == id)
        .context("memory vanished")?;
    let query = &vectors.data[position * vectors.dim..(position + 1) * vectors.dim];
    // Archived memories are left out unless asked for: ask for enough to drop them.
    let live = |i: u32| args.archived || vectors.states[i as usize] != "archived";
    let archived = (0..vectors.ids.len() as u32).filter(|&i| !live(i)).count();
    let rows = [position as u32];
    let neighbours = top_k(
        query,
        &vectors.data,
        vectors.dim,
        k + archived,
        SelfMatch::Rows(&rows),
    )
    .into_iter()
    .next()
    .unwrap_or_default();
    let rows: Vec<SimilarRow> = neighbours
        .into_iter()
        .filter(|n| live(n.index))
        .take(k)
        .filter(|n| n.score >= min)
        .enumerate()
        .map(|(rank, n)| SimilarRow {
            rank: rank + 1,
            id: vectors.ids[n.index as usize].clone(),
            score: n.score,
            state: vectors.states[n.index as usize].clone(),
            text: vectors.texts[n.index as usize].clone(),
        })
        .collect();
    if json {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({
                "id": id, "user_id": user, "model": model, "text": vectors.texts[position], "neighbours": rows,
            }),
        )?;
        writeln!(out)?;
        return Ok(ExitStatus::Success);
    }
    writeln!(
        out,
        "{id} ({user}, {}): {}",
        model.as_deref().unwrap_or("unknown model"),
        vectors.texts[position]
    )?;
    for row in &rows {
        writeln!(
            out,
            "{:>3}  {:.4}  {:<28} {:<9} {}",
            row.rank, row.score, row.id, row.state, row.text
        )?;
    }
    if rows.is_empty() {
        writeln!(out, "(no neighbour at or above {min})")?;
    }
    Ok(ExitStatus::Success)
}
