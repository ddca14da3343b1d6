//! `memlife import`: loads memories, links, entities (or any importable table) from JSON Lines,
//! a JSON array, CSV or Parquet. Rows stream from the file through validation into one Lance
//! commit; with `--on-error abort` (the default) a single bad row fails the stream before the
//! commit, so nothing is written, and every bad row is still reported.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{Result, bail};
use arrow::array::{RecordBatch, RecordBatchReader};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;

use super::{ItemFailure, Job, JobCtx, JobName, JobReport, JobScope, RunLog, Status};
use crate::formats::{self, Format, FormatError, Intake, Location, RowError, RowSource};
use crate::logic::shard::UserScope;
use crate::model::clock::Clock;
use crate::model::encoding::Cell;
use crate::model::rows::{DigestMap, RowBuilder};
use crate::model::schema::{IMPORTABLE_TABLES, TableSpec};

/// Rows per Arrow batch handed to Lance.
const BATCH_ROWS: usize = 8192;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Write nothing if any row is invalid.
    Abort,
    /// Write the valid rows; report the others.
    Skip,
}

/// Load rows from JSON Lines, JSON, CSV or Parquet (upsert on the table's key).
#[derive(clap::Args, Debug, Clone)]
pub struct ImportArgs {
    pub file: PathBuf,
    /// Target table.
    #[arg(long, default_value = "memories")]
    pub table: String,
    /// Input format (default: from the file extension).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// What to do with invalid rows: abort writes nothing, skip writes the valid rows.
    #[arg(long, value_enum, default_value = "abort")]
    pub on_error: OnError,
    /// Leave rows whose key the table already holds as they are (insert only the others),
    /// instead of replacing them: to restore what prune exported without rolling back an
    /// entity that changed since.
    #[arg(long)]
    pub keep_existing: bool,
    /// The clock the run computes at (RFC 3339): the `created_at` of rows that give none;
    /// default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for ImportArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

pub fn importable_table(name: &str) -> Result<&'static TableSpec> {
    match IMPORTABLE_TABLES.iter().find(|t| t.name == name) {
        Some(spec) => Ok(spec),
        None => bail!(
            "cannot import into '{name}' (importable tables: {})",
            IMPORTABLE_TABLES
                .iter()
                .map(|t| t.name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// What the intake saw; shared between the reader Lance consumes and the job.
#[derive(Default)]
struct Tally {
    offered: u64,
    accepted: u64,
    skipped_other_user: u64,
    rejected: Vec<RowError>,
    input_columns: Vec<String>,
    first_seen: DigestMap<Location>,
    scope: UserScope,
}

impl Intake for Tally {
    fn offer<'a>(
        &mut self,
        builder: &mut RowBuilder,
        location: Location,
        cell_of: &mut dyn FnMut(usize, &str) -> Cell<'a>,
    ) {
        self.offered += 1;
        let mut row = match builder.validate(cell_of) {
            Ok(row) => row,
            Err(e) => return self.rejected.push((location, e).into()),
        };
        if let Some(e) = crate::model::rows::model_without_vector(builder.spec(), &row) {
            return self.rejected.push((location, e).into());
        }
        row.clear_store_marks(builder.spec());
        if row
            .get(builder.spec(), "user_id")
            .and_then(|v| v.as_str())
            .is_some_and(|u| !self.scope.contains(u))
        {
            self.skipped_other_user += 1;
            return;
        }
        let digest = builder.key_digest(&row);
        if let Some(first) = self.first_seen.get(&digest) {
            return self.rejected.push(RowError {
                location,
                field: Some(builder.spec().key.join("+")),
                reason: format!(
                    "duplicate key '{}' (first at {first})",
                    builder.key_of(&row).replace('\u{1f}', "+")
                ),
            });
        }
        self.first_seen.insert(digest, location);
        builder.push(row);
        self.accepted += 1;
    }

    fn refuse(&mut self, error: RowError) {
        self.offered += 1;
        self.rejected.push(error);
    }

    fn note_columns(&mut self, columns: Vec<String>) {
        self.input_columns = columns;
    }

    fn offer_batch(
        &mut self,
        builder: &mut RowBuilder,
        batch: RecordBatch,
        rows_before: usize,
    ) -> bool {
        use arrow::array::{Array, AsArray};
        let spec = builder.spec();
        let mut batch = batch;
        let mut skipped = 0u64;
        if self.scope != UserScope::All {
            let Some(users) = batch.column_by_name("user_id") else {
                return false;
            };
            let keep: arrow::array::BooleanArray = users
                .as_string::<i32>()
                .iter()
                .map(|u| Some(u.is_none_or(|u| self.scope.contains(u))))
                .collect();
            let Ok(filtered) = arrow::compute::filter_record_batch(&batch, &keep) else {
                return false;
            };
            skipped = (batch.num_rows() - filtered.num_rows()) as u64;
            batch = filtered;
        }
        // A memory naming a model without a vector sends the batch to the row path, which
        // names it.
        if spec.name == "memories"
            && let (Some(vectors), Some(models)) = (
                batch.column_by_name("embedding"),
                batch.column_by_name("embedding_model"),
            )
            && (0..batch.num_rows()).any(|r| vectors.is_null(r) && models.is_valid(r))
        {
            return false;
        }
        if spec.name == "memories" {
            match crate::model::rows::without_store_marks(&batch) {
                Ok(Some(cleared)) => batch = cleared,
                Ok(None) => {}
                Err(_) => return false,
            }
        }
        // Keys: a key seen before (in this file) sends the batch to the row path, which
        // names both rows.
        let keys: Vec<&arrow::array::StringArray> = match spec
            .key
            .iter()
            .map(|k| {
                batch
                    .column_by_name(k)
                    .and_then(|c| c.as_string_opt::<i32>())
            })
            .collect::<Option<Vec<_>>>()
        {
            Some(keys) => keys,
            None => return false,
        };
        // Locations are only kept to name the first of two duplicate rows; a row of a
        // filtered batch is named by its position among the kept rows.
        self.first_seen.reserve(batch.num_rows());
        for row in 0..batch.num_rows() {
            let fresh = !keys.iter().any(|k| k.is_null(row))
                && match self.first_seen.entry(crate::model::rows::key_digest_of(
                    keys.iter().map(|k| k.value(row)),
                )) {
                    std::collections::hash_map::Entry::Occupied(_) => false,
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(Location::Row(rows_before + row + 1));
                        true
                    }
                };
            if !fresh {
                // Undo this batch's keys: the row path offers them again, one by one.
                for earlier in 0..row {
                    let digest =
                        crate::model::rows::key_digest_of(keys.iter().map(|k| k.value(earlier)));
                    self.first_seen.remove(&digest);
                }
                return false;
            }
        }
        self.offered += batch.num_rows() as u64 + skipped;
        self.skipped_other_user += skipped;
        self.accepted += batch.num_rows() as u64;
        if batch.num_rows() > 0 {
            builder.push_ready(batch);
        }
        true
    }
}

/// Validated batches of a file, produced on their own thread so parsing overlaps Lance's
/// encoding and writing. The stream fails at its end when rows were refused under
/// `--on-error abort`, which aborts the commit.
struct ImportReader {
    schema: SchemaRef,
    receiver: Receiver<Result<RecordBatch, ArrowError>>,
    pending: Option<RecordBatch>,
    finished: bool,
    /// Batches handed to Lance so far.
    handed: u64,
}

/// Starts the producer; join the handle before reading the tally.
fn spawn_producer(
    mut source: Box<dyn RowSource>,
    mut builder: RowBuilder,
    tally: Arc<Mutex<Tally>>,
    fatal: Arc<Mutex<Option<FormatError>>>,
    abort_on_error: bool,
) -> (ImportReader, JoinHandle<()>) {
    let schema = builder.schema();
    // Memories whose text says the day of their event get `happens_at` (logic::temporal).
    let memories = builder.spec().name == "memories";
    let fill = move |batch: Result<RecordBatch, ArrowError>| -> Result<RecordBatch, ArrowError> {
        match batch {
            Ok(b) if memories => crate::model::rows::fill_happens_at(&b),
            other => other,
        }
    };
    // Two batches in flight: enough to keep both sides busy, little memory.
    let (sender, receiver) = sync_channel(2);
    let handle = std::thread::spawn(move || {
        loop {
            let more = {
                let mut tally = tally.lock().expect("tally lock");
                source.fill(&mut builder, &mut *tally, BATCH_ROWS)
            };
            let more = match more {
                Ok(more) => more,
                Err(e) => {
                    let message = e.to_string();
                    *fatal.lock().expect("fatal lock") = Some(e);
                    let _ = sender.send(Err(ArrowError::ExternalError(message.into())));
                    return;
                }
            };
            for batch in builder.take_ready() {
                if sender.send(fill(Ok(batch))).is_err() {
                    return; // The writer stopped reading: it failed and reports why.
                }
            }
            if (builder.len() >= BATCH_ROWS || (!more && !builder.is_empty()))
                && sender.send(fill(builder.finish())).is_err()
            {
                return; // The writer stopped reading: it failed and reports why.
            }
            if !more {
                let rejected = tally.lock().expect("tally lock").rejected.len();
                if abort_on_error && rejected > 0 {
                    let message =
                        format!("{rejected} invalid rows with --on-error abort: nothing written");
                    let _ = sender.send(Err(ArrowError::ExternalError(message.into())));
                }
                return;
            }
        }
    });
    let reader = ImportReader {
        schema,
        receiver,
        pending: None,
        finished: false,
        handed: 0,
    };
    (reader, handle)
}

impl ImportReader {
    fn next_batch(&mut self) -> Option<Result<RecordBatch, ArrowError>> {
        if let Some(batch) = self.pending.take() {
            return Some(Ok(batch));
        }
        if self.finished {
            return None;
        }
        match self.receiver.recv() {
            Ok(item) => {
                self.finished = item.is_err();
                Some(item)
            }
            Err(_) => {
                self.finished = true;
                None
            }
        }
    }

    /// Reads ahead to the first batch, so an input with no valid row writes no commit.
    fn has_rows(&mut self) -> bool {
        match self.next_batch() {
            Some(Ok(batch)) => {
                self.pending = Some(batch);
                true
            }
            Some(Err(_)) | None => false,
        }
    }
}

impl Iterator for ImportReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = self.next_batch();
        // When Lance asks for a second batch (or, for a one-batch import, learns the stream
        // has ended), it holds the first and is writing this import's files, and nothing is
        // committed: a kill here is a kill mid-write.
        match batch {
            Some(_) => self.handed += 1,
            None if self.handed == 1 => crate::crash::point("import.mid-write"),
            None => {}
        }
        if self.handed == 2 && batch.is_some() {
            crate::crash::point("import.mid-write");
        }
        batch
    }
}

impl RecordBatchReader for ImportReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

pub async fn run(ctx: &JobCtx<'_>, args: &ImportArgs) -> Result<JobReport> {
    let spec = importable_table(&args.table)?;
    let format = match args.format {
        Some(f) => f,
        None => Format::from_path(&args.file)?,
    };
    let source = formats::open_source(&args.file, format)?;
    let params = serde_json::json!({
        "file": args.file.display().to_string(),
        "table": spec.name,
        "format": format,
        "on_error": args.on_error,
        "keep_existing": args.keep_existing,
    });
    let tally = Arc::new(Mutex::new(Tally {
        scope: ctx.scope.clone(),
        ..Tally::default()
    }));
    let fatal = Arc::new(Mutex::new(None));
    let builder = RowBuilder::new(spec, ctx.store.embedding_dim(), ctx.now.timestamp_micros());
    let abort_on_error = args.on_error == OnError::Abort;
    let (mut reader, producer) = spawn_producer(
        source,
        builder,
        tally.clone(),
        fatal.clone(),
        abort_on_error,
    );
    // The file is read from here on, while the run is logged and the table opened.
    let log = RunLog::start(ctx, JobName::Import.as_str(), &params).await?;
    tracing::info!(run_id = log.run_id(), file = %args.file.display(), table = spec.name, "import started");
    let mut report = JobReport::new(JobName::Import.as_str(), ctx);

    let mut write_error = None;
    let mut written = None;
    if ctx.dry_run {
        for batch in reader.by_ref() {
            if batch.is_err() {
                break;
            }
        }
    } else if reader.has_rows() {
        let written_rows = match args.keep_existing {
            true => ctx.store.insert_missing_rows(spec, Box::new(reader)).await,
            false => ctx.store.write_rows(spec, Box::new(reader)).await,
        };
        match written_rows {
            Ok(stats) => written = Some(stats),
            Err(e) => write_error = Some(e),
        }
        crate::crash::point("import.after-commit");
    } else {
        // Drain the error, if any, that ended the read-ahead.
        reader.for_each(drop);
    }
    producer
        .join()
        .map_err(|_| anyhow::anyhow!("the import's reader thread panicked"))?;

    let tally = std::mem::take(&mut *tally.lock().expect("tally lock"));
    let fatal = fatal.lock().expect("fatal lock").take();
    report.count("rows_read", tally.offered);
    report.count("rows_valid", tally.accepted);
    report.count("rows_rejected", tally.rejected.len() as u64);
    if ctx.scope != UserScope::All {
        report.count("rows_other_users", tally.skipped_other_user);
    }
    if let Some(stats) = written {
        report.count("inserted", stats.inserted);
        report.count("updated", stats.updated);
        if args.keep_existing {
            report.count(
                "kept_existing",
                tally.accepted.saturating_sub(stats.inserted),
            );
        }
    } else {
        report.count("inserted", 0);
        report.count("updated", 0);
    }
    let ignored: Vec<&str> = tally
        .input_columns
        .iter()
        .map(String::as_str)
        .filter(|c| spec.field(c).is_none())
        .collect();
    if !ignored.is_empty() {
        report.notes.push(format!(
            "ignored columns not in '{}': {}",
            spec.name,
            ignored.join(", ")
        ));
    }
    let file = args.file.display().to_string();
    report.failures = failures_of(&file, &tally.rejected);

    if let Some(e) = fatal {
        report.status = Status::Failed;
        report.error = Some(format!("{e}: nothing written"));
    } else if args.on_error == OnError::Abort && !tally.rejected.is_empty() {
        report.status = Status::Failed;
        report.error = Some(format!(
            "{} of {} rows of {file} are invalid; with --on-error abort nothing was written \
             (use --on-error skip to write the valid rows)",
            tally.rejected.len(),
            tally.offered
        ));
    } else if let Some(e) = write_error {
        report.status = Status::Failed;
        report.error = Some(format!("writing to '{}' failed: {e}", spec.name));
    }
    log.finish(ctx, &mut report).await?;
    tracing::info!(
        status = report.status.as_str(),
        rows = tally.offered,
        rejected = tally.rejected.len(),
        "import finished"
    );
    Ok(report)
}

/// A file's rows validated against `spec` as `import` validates them, read whole (for jobs
/// that take a file of rows as their input, such as `integrate`): the valid rows as batches,
/// the refused ones with their location, or the error that stopped the read (naming the file).
pub fn read_validated(
    path: &std::path::Path,
    format: Option<Format>,
    spec: &'static TableSpec,
    embedding_dim: usize,
    now_micros: i64,
    scope: UserScope,
) -> Result<(Vec<RecordBatch>, Vec<ItemFailure>)> {
    let format = match format {
        Some(f) => f,
        None => Format::from_path(path)?,
    };
    let source = formats::open_source(path, format)?;
    let tally = Arc::new(Mutex::new(Tally {
        scope,
        ..Tally::default()
    }));
    let fatal = Arc::new(Mutex::new(None));
    let builder = RowBuilder::new(spec, embedding_dim, now_micros);
    let (reader, producer) = spawn_producer(source, builder, tally.clone(), fatal.clone(), false);
    let batches: Vec<RecordBatch> = reader.filter_map(|b| b.ok()).collect();
    producer
        .join()
        .map_err(|_| anyhow::anyhow!("the reader thread of {} panicked", path.display()))?;
    if let Some(e) = fatal.lock().expect("fatal lock").take() {
        bail!("{}: {e}", path.display());
    }
    let file = path.display().to_string();
    let rejected = failures_of(&file, &tally.lock().expect("tally lock").rejected);
    Ok((batches, rejected))
}

/// Refused rows as report failures, named by file and location, and field when known.
fn failures_of(file: &str, rejected: &[RowError]) -> Vec<ItemFailure> {
    rejected
        .iter()
        .map(|e| ItemFailure {
            item: format!("{file}:{}", e.location),
            reason: match &e.field {
                Some(field) => format!("field '{field}': {}", e.reason),
                None => e.reason.clone(),
            },
        })
        .collect()
}
