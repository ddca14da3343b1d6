//! `memlife embed`: fills missing embeddings of memories and entities, user by user, and
//! records the model beside each vector. Rows are embedded in model batches and written back
//! a chunk at a time, each chunk one Lance commit: a killed run loses at most the chunk in
//! flight, and the next run picks up the rows still without a vector. A user whose vectors
//! come from another model is refused (mixing models makes similarities meaningless) unless
//! `--all` re-embeds everything.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow::array::{
    Array, ArrayRef, AsArray, FixedSizeListBuilder, Float32Builder, RecordBatch, StringBuilder,
};

use super::{ItemFailure, Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::embedders::{Embedded, EmbedderArgs};
use crate::model::clock::Clock;
use crate::model::schema::{ENTITIES, MEMORIES, TableSpec};
use crate::store::{sql_list, sql_string};

/// Rows per commit when `--commit-rows` is not given: at least the first, at most the second
/// (a chunk's texts and vectors are held in memory until its commit: 65,536 vectors of 1536
/// dimensions are 400 MB).
const DEFAULT_COMMIT_ROWS: (usize, usize) = (1024, 65_536);

/// Fill missing embeddings of memories and entities (resumable; --all recomputes).
#[derive(clap::Args, Debug, Clone)]
pub struct EmbedArgs {
    /// Recompute every vector (also the way to move a user to another model).
    #[arg(long)]
    pub all: bool,
    /// Texts per model call.
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Rows per commit: the most a killed run loses. Default: the rows of a fragment that
    /// compaction leaves alone (a quarter of the table's rows, `[retention]`), at least
    /// 1024 and at most 65,536. Each commit writes its rows as a new fragment: smaller ones are merged by the
    /// next compaction, embeddings and all, a second copy the version window keeps.
    #[arg(long)]
    pub commit_rows: Option<usize>,
    /// Which table(s) to embed.
    #[arg(long, value_parser = ["memories", "entities", "all"], default_value = "all")]
    pub table: String,
    /// The clock the run computes at (RFC 3339): its recorded clock; default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

impl Job for EmbedArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

impl EmbedArgs {
    /// The tables `--table` names.
    fn tables(&self) -> Vec<String> {
        match self.table.as_str() {
            "all" => vec![MEMORIES.name.to_string(), ENTITIES.name.to_string()],
            one => vec![one.to_string()],
        }
    }
}

/// The text a row is embedded from.
fn texts_of(spec: &TableSpec, batch: &RecordBatch) -> Vec<String> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .map(|c| c.as_string::<i32>().clone())
    };
    if spec.name == MEMORIES.name {
        let text = column("text").expect("memories.text");
        return (0..batch.num_rows())
            .map(|i| text.value(i).to_string())
            .collect();
    }
    // Entities: name, description and notes, as a person would read them.
    let name = column("name").expect("entities.name");
    let description = column("description").expect("entities.description");
    let notes = batch
        .column_by_name("notes")
        .map(|c| c.as_list::<i32>().clone());
    (0..batch.num_rows())
        .map(|i| {
            let mut text = name.value(i).to_string();
            if description.is_valid(i) && !description.value(i).is_empty() {
                text.push_str(": ");
                text.push_str(description.value(i));
            }
            if let Some(notes) = &notes
                && notes.is_valid(i)
            {
                let entries = notes.value(i);
                let Some(texts) = entries.as_struct().column_by_name("text") else {
                    return text;
                };
                let texts = texts.as_string::<i32>();
                for n in 0..texts.len() {
                    text.push_str(". ");
                    text.push_str(texts.value(n));
                }
            }
            text
        })
        .collect()
}

/// Models other than `current` that made some of the user's vectors. The model terms come
/// first: the bitmap index on `embedding_model` answers them, so only the rows it keeps (a
/// model other than `current`, or none) are read for the vector's presence, not every
/// vector of the table (28 MB on day 365 of `bench year`, every night).
async fn other_models(
    ctx: &JobCtx<'_>,
    table: &str,
    current: &str,
) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let filter = ctx.user_filter_and(&format!(
        "(embedding_model IS NULL OR embedding_model <> {}) AND embedding IS NOT NULL",
        sql_string(current)
    ));
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    #[derive(serde::Deserialize)]
    struct Made {
        user_id: String,
        embedding_model: Option<String>,
    }
    for row in ctx.store.scan_rows::<Made>(table, Some(&filter)).await? {
        let model = row.embedding_model.unwrap_or_else(|| "unknown".to_string());
        if model != current {
            out.entry(row.user_id).or_default().insert(model);
        }
    }
    Ok(out)
}

/// Replaces the embedding and embedding_model columns of a batch.
fn with_vectors(
    batch: &RecordBatch,
    vectors: &[Option<Vec<f32>>],
    model: &str,
    dim: usize,
) -> Result<RecordBatch> {
    let mut embedding = FixedSizeListBuilder::new(Float32Builder::new(), dim as i32);
    let mut names = StringBuilder::new();
    let old_embedding = batch
        .column_by_name("embedding")
        .context("no embedding column")?;
    let old_names = batch
        .column_by_name("embedding_model")
        .context("no embedding_model column")?;
    let old_list = old_embedding.as_fixed_size_list();
    let old_names = old_names.as_string::<i32>();
    for (row, vector) in vectors.iter().enumerate() {
        match vector {
            Some(values) => {
                embedding.values().append_slice(values);
                embedding.append(true);
                names.append_value(model);
            }
            // A refused text keeps whatever it had.
            None if old_list.is_valid(row) => {
                let values = old_list.value(row);
                embedding.values().append_slice(
                    values
                        .as_primitive::<arrow::datatypes::Float32Type>()
                        .values(),
                );
                embedding.append(true);
                names.append_option(old_names.is_valid(row).then(|| old_names.value(row)));
            }
            None => {
                embedding.values().append_nulls(dim);
                embedding.append(false);
                names.append_null();
            }
        }
    }
    let schema = batch.schema();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| match field.name().as_str() {
            "embedding" => Arc::new(embedding.finish()) as ArrayRef,
            "embedding_model" => Arc::new(names.finish()) as ArrayRef,
            // A new vector is new to `link` (`memories.link_mark`).
            "link_mark" => arrow::array::new_null_array(field.data_type(), batch.num_rows()),
            _ => column.clone(),
        })
        .collect();
    // The builders' list field must match the table's (nullable float items).
    let columns = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(column, field)| arrow::compute::cast(&column, field.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// What a run's chunks embedded, refused and truncated.
#[derive(Default)]
struct Tally {
    embedded: u64,
    refused: u64,
    truncated: u64,
    failures: Vec<ItemFailure>,
}

/// One table's chunks: what `embed` does with each.
struct Chunk<'a> {
    spec: &'a TableSpec,
    /// Texts per model call.
    batch_size: usize,
    bar: &'a indicatif::ProgressBar,
}

impl Chunk<'_> {
    /// Embeds one chunk's rows (`pieces`, cut from the scan's batches), `batch_size` texts per
    /// model call, and writes their vectors in one commit (none on a dry run).
    async fn embed(
        &self,
        ctx: &JobCtx<'_>,
        embedder: &crate::embedders::Embedder,
        pieces: &[RecordBatch],
        tally: &mut Tally,
    ) -> Result<()> {
        let Some(first) = pieces.first() else {
            return Ok(());
        };
        let (spec, batch_size) = (self.spec, self.batch_size.max(1));
        let chunk = arrow::compute::concat_batches(&first.schema(), pieces)?;
        let texts = texts_of(spec, &chunk);
        let ids = chunk
            .column_by_name("id")
            .context("id column")?
            .as_string::<i32>()
            .clone();
        let mut vectors: Vec<Option<Vec<f32>>> = Vec::with_capacity(chunk.num_rows());
        for (offset, group) in texts.chunks(batch_size).enumerate() {
            let refs: Vec<&str> = group.iter().map(String::as_str).collect();
            for (i, outcome) in embedder.embed(&refs).await?.into_iter().enumerate() {
                let row = offset * batch_size + i;
                match outcome {
                    Embedded::Vector { values, truncated } => {
                        tally.embedded += 1;
                        tally.truncated += u64::from(truncated);
                        vectors.push(Some(values));
                    }
                    Embedded::Refused(reason) => {
                        tally.refused += 1;
                        tally.failures.push(ItemFailure {
                            item: format!("{} {}", spec.name, ids.value(row)),
                            reason,
                        });
                        vectors.push(None);
                    }
                }
            }
            self.bar.inc(group.len() as u64);
        }
        if !ctx.dry_run {
            let model = embedder.model_name();
            let updated = with_vectors(&chunk, &vectors, &model, ctx.store.embedding_dim())?;
            ctx.store.upsert_batch(spec, updated).await?;
            crate::crash::point("embed.after-chunk");
        }
        Ok(())
    }
}

pub async fn run(ctx: &JobCtx<'_>, args: &EmbedArgs) -> Result<JobReport> {
    let embedder = &ctx
        .app
        .embedder(&args.embedder, ctx.store.embedding_dim(), args.batch_size)
        .await?;
    let tables = args.tables();
    let model = embedder.model_name();
    let policy = super::optimize::compaction_policy(&ctx.app.config().await?.retention);
    let params = serde_json::json!({
        "all": args.all, "model": model, "tables": tables,
        "batch_size": args.batch_size, "commit_rows": args.commit_rows,
    });
    let log = RunLog::start(ctx, JobName::Embed.as_str(), &params).await?;
    let mut report = JobReport::new(JobName::Embed.as_str(), ctx);
    report
        .notes
        .push(format!("model: {model} ({} dimensions)", embedder.dim()));
    let mut tally = Tally::default();
    let mut commits = BTreeMap::new();
    for spec in [&MEMORIES, &ENTITIES] {
        if !tables.iter().any(|t| t == spec.name) {
            continue;
        }
        // Every user of the table in one pass (one scan, commits of `commit_rows` rows
        // across users): a store of many small users pays no scan or commit per user.
        let mut conditions: Vec<String> = Vec::new();
        if let Some(users) = ctx.user_filter() {
            conditions.push(users);
        }
        if !args.all {
            // The model term first: a row without a vector names no model (`check`), so the
            // bitmap index on `embedding_model` keeps the few rows whose vectors are read,
            // not every vector of the table (39 of a no-op run's 62-80 ms on day 365 of
            // `bench year`). Entities have no such index and few rows.
            conditions.push(match spec.name == MEMORIES.name {
                true => "embedding_model IS NULL AND embedding IS NULL".into(),
                false => "embedding IS NULL".into(),
            });
            let others = other_models(ctx, spec.name, &model).await?;
            for (user, models) in &others {
                report.failures.push(ItemFailure {
                    item: format!("{} of user {user}", spec.name),
                    reason: format!(
                        "has vectors from {}; embedding with {model} would mix models \
                         (run `memlife embed --all` to re-embed this user with {model})",
                        models.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
            if !others.is_empty() {
                let users: Vec<String> = others.into_keys().collect();
                conditions.push(format!("user_id NOT IN ({})", sql_list(&users)));
            }
        }
        let filter = (!conditions.is_empty()).then(|| conditions.join(" AND "));
        let total = ctx.store.count_rows(spec.name, filter.as_deref()).await? as u64;
        if total == 0 {
            continue;
        }
        let commit_rows = match args.commit_rows {
            Some(n) => n.max(1),
            None => policy
                .fragment_rows(ctx.store.count_rows(spec.name, None).await?)
                .clamp(DEFAULT_COMMIT_ROWS.0, DEFAULT_COMMIT_ROWS.1),
        };
        commits.insert(spec.name, commit_rows);
        let bar = crate::progress::bar(total, spec.name);
        // Rows are read once up front: a chunk's commit must not shift what is left to read.
        // Chunks are cut across the scan's batches, so that every commit but the last
        // writes `commit_rows` rows.
        let batches = ctx.store.scan(spec.name, filter.as_deref()).await?;
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0;
        let chunk = Chunk {
            spec,
            batch_size: args.batch_size,
            bar: &bar,
        };
        for batch in batches {
            let mut start = 0;
            while start < batch.num_rows() {
                let take = (commit_rows - pending_rows).min(batch.num_rows() - start);
                pending.push(batch.slice(start, take));
                (pending_rows, start) = (pending_rows + take, start + take);
                if pending_rows == commit_rows {
                    let rows = std::mem::take(&mut pending);
                    pending_rows = 0;
                    chunk.embed(ctx, embedder, &rows, &mut tally).await?;
                }
            }
        }
        if pending_rows > 0 {
            chunk.embed(ctx, embedder, &pending, &mut tally).await?;
        }
        bar.finish_and_clear();
    }
    let Tally {
        embedded,
        refused,
        truncated,
        failures,
    } = tally;
    report.failures.extend(failures);
    report.count("embedded", embedded);
    report.count("refused", refused);
    report.count("truncated", truncated);
    if truncated > 0 {
        report.notes.push(format!(
            "{truncated} texts were longer than the model reads and were truncated"
        ));
    }
    for (table, rows) in commits {
        report
            .notes
            .push(format!("{table}: a commit every {rows} rows"));
    }
    if !ctx.dry_run && embedded > 0 {
        for spec in [&MEMORIES, &ENTITIES] {
            if !ctx.store.compact(spec.name, &policy).await? {
                report.notes.push(format!(
                    "{}: compaction left to `memlife optimize` (another writer committed first)",
                    spec.name
                ));
            }
        }
    }
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
