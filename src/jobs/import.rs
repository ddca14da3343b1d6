//! `memlife import`: loads memories, links, entities (or any importable table) from JSON Lines,
//! a JSON array, CSV or Parquet. Rows stream from the file through validation into one Lance
//! commit; with `--on-error abort` (the default) a single bad row fails the stream before the
//! commit, so nothing is written, and every bad row is still reported.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Result, bail};
use arrow::array::{RecordBatch, RecordBatchReader};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;

use super::{ItemFailure, JobCtx, JobReport, RunLog, Status};
use crate::encoding::Cell;
use crate::formats::{self, Format, FormatError, Intake, Location, RowError, RowSource};
use crate::rows::RowBuilder;
use crate::schema::{IMPORTABLE_TABLES, TableSpec};

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

#[derive(Debug, Clone)]
pub struct ImportArgs {
    pub file: PathBuf,
    pub table: String,
    pub format: Option<Format>,
    pub on_error: OnError,
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
    first_seen: HashMap<String, Location>,
    user: Option<String>,
}

impl Intake for Tally {
    fn offer<'a>(
        &mut self,
        builder: &mut RowBuilder,
        location: Location,
        cell_of: &mut dyn FnMut(&str) -> Cell<'a>,
    ) {
        self.offered += 1;
        let row = match builder.validate(cell_of) {
            Ok(row) => row,
            Err(e) => return self.rejected.push((location, e).into()),
        };
        if let Some(user) = &self.user
            && row
                .get(builder.spec(), "user_id")
                .and_then(|v| v.as_str())
                .is_some_and(|u| u != user)
        {
            self.skipped_other_user += 1;
            return;
        }
        let key = builder.key_of(&row);
        if let Some(first) = self.first_seen.get(&key) {
            return self.rejected.push(RowError {
                location,
                field: Some(builder.spec().key.join("+")),
                reason: format!(
                    "duplicate key '{}' (first at {first})",
                    key.replace('\u{1f}', "+")
                ),
            });
        }
        self.first_seen.insert(key, location);
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
}

/// Streams validated batches out of a file; Lance pulls from it while writing. The stream
/// fails at its end when rows were refused under `--on-error abort`, which aborts the commit.
struct ImportReader {
    source: Box<dyn RowSource>,
    builder: RowBuilder,
    tally: Arc<Mutex<Tally>>,
    fatal: Arc<Mutex<Option<FormatError>>>,
    abort_on_error: bool,
    pending: Option<RecordBatch>,
    exhausted: bool,
    finished: bool,
}

impl ImportReader {
    fn next_batch(&mut self) -> Option<Result<RecordBatch, ArrowError>> {
        if let Some(batch) = self.pending.take() {
            return Some(Ok(batch));
        }
        loop {
            if self.finished {
                return None;
            }
            if self.exhausted {
                self.finished = true;
                let tally = self.tally.lock().expect("tally lock");
                if self.abort_on_error && !tally.rejected.is_empty() {
                    return Some(Err(ArrowError::ExternalError(
                        format!(
                            "{} invalid rows with --on-error abort: nothing written",
                            tally.rejected.len()
                        )
                        .into(),
                    )));
                }
                return None;
            }
            let more = {
                let mut tally = self.tally.lock().expect("tally lock");
                self.source.fill(&mut self.builder, &mut *tally, BATCH_ROWS)
            };
            match more {
                Ok(more) => self.exhausted = !more,
                Err(e) => {
                    let message = e.to_string();
                    *self.fatal.lock().expect("fatal lock") = Some(e);
                    self.finished = true;
                    return Some(Err(ArrowError::ExternalError(message.into())));
                }
            }
            if self.builder.len() >= BATCH_ROWS || (self.exhausted && !self.builder.is_empty()) {
                return Some(self.builder.finish());
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
        self.next_batch()
    }
}

impl RecordBatchReader for ImportReader {
    fn schema(&self) -> SchemaRef {
        self.builder.schema()
    }
}

pub async fn run(ctx: &JobCtx, args: &ImportArgs) -> Result<JobReport> {
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
    });
    let log = RunLog::start(ctx, "import", &params).await?;
    tracing::info!(run_id = log.run_id(), file = %args.file.display(), table = spec.name, "import started");
    let mut report = JobReport::new("import", ctx);

    let tally = Arc::new(Mutex::new(Tally {
        user: ctx.user.clone(),
        ..Tally::default()
    }));
    let fatal = Arc::new(Mutex::new(None));
    let mut reader = ImportReader {
        source,
        builder: RowBuilder::new(spec, ctx.store.embedding_dim(), ctx.now.timestamp_micros()),
        tally: tally.clone(),
        fatal: fatal.clone(),
        abort_on_error: args.on_error == OnError::Abort,
        pending: None,
        exhausted: false,
        finished: false,
    };

    let mut write_error = None;
    let mut written = None;
    if ctx.dry_run {
        for batch in reader.by_ref() {
            if batch.is_err() {
                break;
            }
        }
    } else if reader.has_rows() {
        match ctx.store.write_rows(spec, Box::new(reader)).await {
            Ok(stats) => written = Some(stats),
            Err(e) => write_error = Some(e),
        }
    } else {
        // Drain the error, if any, that ended the read-ahead.
        reader.for_each(drop);
    }

    let tally = std::mem::take(&mut *tally.lock().expect("tally lock"));
    let fatal = fatal.lock().expect("fatal lock").take();
    report.count("rows_read", tally.offered);
    report.count("rows_valid", tally.accepted);
    report.count("rows_rejected", tally.rejected.len() as u64);
    if ctx.user.is_some() {
        report.count("rows_other_users", tally.skipped_other_user);
    }
    if let Some(stats) = written {
        report.count("inserted", stats.inserted);
        report.count("updated", stats.updated);
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
    report.failures = tally
        .rejected
        .iter()
        .map(|e| ItemFailure {
            item: format!("{file}:{}", e.location),
            reason: match &e.field {
                Some(field) => format!("field '{field}': {}", e.reason),
                None => e.reason.clone(),
            },
        })
        .collect();

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
