//! File formats memlife reads and writes: JSON Lines, a JSON array, CSV and Parquet. Readers
//! stream a file's rows into an `Intake` a chunk at a time, so a million-row file never sits in
//! memory; writers turn Arrow batches back into the same encodings. `columnar` is the import fast path
//! for Arrow input (whole batches cast and checked column by column); `parquet_vectors` decodes
//! a Parquet file's vector column from its pages directly. Both change speed, never results.

pub mod columnar;
pub mod parquet_vectors;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{
    ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde_json::Value;

use crate::formats::parquet_vectors::VectorColumn;
use crate::model::encoding::{Cell, arrow_cell, write_csv_cell, write_json};
use crate::model::rows::{FieldError, RowBuilder};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Jsonl,
    Json,
    Csv,
    Parquet,
}

impl Format {
    /// The format a file name implies, by extension.
    pub fn from_path(path: &Path) -> Result<Format, FormatError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("jsonl") | Some("ndjson") => Ok(Format::Jsonl),
            Some("json") => Ok(Format::Json),
            Some("csv") => Ok(Format::Csv),
            Some("parquet") | Some("pq") => Ok(Format::Parquet),
            _ => Err(FormatError::UnknownExtension {
                path: path.to_path_buf(),
            }),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(
        "cannot tell the format of {path} from its extension (use .jsonl, .json, .csv or .parquet, or --format)"
    )]
    UnknownExtension { path: PathBuf },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Malformed { path: PathBuf, message: String },
}

/// Where a row sits in its file, as a person would look for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "unit", content = "number")]
pub enum Location {
    Line(usize),
    Record(usize),
    Row(usize),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Line(n) => write!(f, "line {n}"),
            Location::Record(n) => write!(f, "record {n}"),
            Location::Row(n) => write!(f, "row {n}"),
        }
    }
}

/// A row that was refused, with its place and reason.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RowError {
    pub location: Location,
    pub field: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}: field '{field}': {}", self.location, self.reason),
            None => write!(f, "{}: {}", self.location, self.reason),
        }
    }
}

/// Receives the rows a reader finds: validates, filters and appends them.
pub trait Intake {
    fn offer<'a>(
        &mut self,
        builder: &mut RowBuilder,
        location: Location,
        cell_of: &mut dyn FnMut(usize, &str) -> Cell<'a>,
    );
    fn refuse(&mut self, error: RowError);
    fn note_columns(&mut self, columns: Vec<String>);
    /// Offers a whole batch already converted to the table's schema (rows `rows_before + 1`
    /// on); returns false to have the source offer its rows one by one instead.
    fn offer_batch(
        &mut self,
        _builder: &mut RowBuilder,
        _batch: RecordBatch,
        _rows_before: usize,
    ) -> bool {
        false
    }
}

/// A file being read, a chunk of rows at a time.
pub trait RowSource: Send {
    /// Offers up to `max_rows` rows; returns false once the file is exhausted.
    fn fill(
        &mut self,
        builder: &mut RowBuilder,
        intake: &mut dyn Intake,
        max_rows: usize,
    ) -> Result<bool, FormatError>;
}

pub fn open_source(path: &Path, format: Format) -> Result<Box<dyn RowSource>, FormatError> {
    let io = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    Ok(match format {
        Format::Jsonl => Box::new(JsonlSource {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 20, file),
            line: 0,
            buffer: Vec::new(),
            columns_noted: false,
        }),
        Format::Json => {
            let values: Value = serde_json::from_reader(BufReader::new(file)).map_err(|e| {
                FormatError::Malformed {
                    path: path.to_path_buf(),
                    message: format!("not valid JSON: {e}"),
                }
            })?;
            let Value::Array(items) = values else {
                return Err(FormatError::Malformed {
                    path: path.to_path_buf(),
                    message:
                        "expected a JSON array of objects (use .jsonl for one object per line)"
                            .to_string(),
                });
            };
            Box::new(JsonArraySource {
                items: items.into_iter(),
                record: 0,
                columns_noted: false,
            })
        }
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(file);
            let headers = reader
                .headers()
                .map_err(|e| FormatError::Malformed {
                    path: path.to_path_buf(),
                    message: format!("cannot read the CSV header: {e}"),
                })?
                .clone();
            let index = headers
                .iter()
                .enumerate()
                .map(|(i, h)| (h.trim().to_string(), i))
                .collect();
            Box::new(CsvSource {
                path: path.to_path_buf(),
                reader,
                index,
                headers: headers.iter().map(|h| h.trim().to_string()).collect(),
                record: csv::ByteRecord::new(),
                columns_noted: false,
            })
        }
        Format::Parquet => {
            let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| {
                FormatError::Malformed {
                    path: path.to_path_buf(),
                    message: format!("not a readable Parquet file: {e}"),
                }
            })?;
            Box::new(ParquetSource {
                path: path.to_path_buf(),
                unopened: Some(builder),
                reader: None,
                vectors: None,
                batch: None,
                next_row: 0,
                rows_before: 0,
                columns_noted: false,
            })
        }
    })
}

fn field_error(location: Location, error: FieldError) -> RowError {
    RowError {
        location,
        field: Some(error.field),
        reason: error.reason,
    }
}

impl From<(Location, FieldError)> for RowError {
    fn from((location, error): (Location, FieldError)) -> RowError {
        field_error(location, error)
    }
}

struct JsonlSource {
    path: PathBuf,
    reader: BufReader<File>,
    line: usize,
    buffer: Vec<u8>,
    columns_noted: bool,
}

impl RowSource for JsonlSource {
    fn fill(
        &mut self,
        builder: &mut RowBuilder,
        intake: &mut dyn Intake,
        max_rows: usize,
    ) -> Result<bool, FormatError> {
        let mut offered = 0;
        while offered < max_rows {
            self.buffer.clear();
            let read = self
                .reader
                .read_until(b'\n', &mut self.buffer)
                .map_err(|source| FormatError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            if read == 0 {
                return Ok(false);
            }
            self.line += 1;
            let location = Location::Line(self.line);
            let text = match std::str::from_utf8(&self.buffer) {
                Ok(text) => text.trim(),
                Err(e) => {
                    intake.refuse(RowError {
                        location,
                        field: None,
                        reason: format!("invalid UTF-8 at byte {}", e.valid_up_to()),
                    });
                    offered += 1;
                    continue;
                }
            };
            if text.is_empty() {
                continue;
            }
            offered += 1;
            let value: Value = match serde_json::from_str(text) {
                Ok(v) => v,
                Err(e) => {
                    intake.refuse(RowError {
                        location,
                        field: None,
                        reason: format!("not valid JSON: {e}"),
                    });
                    continue;
                }
            };
            let Value::Object(map) = &value else {
                intake.refuse(RowError {
                    location,
                    field: None,
                    reason: "expected a JSON object".to_string(),
                });
                continue;
            };
            if !self.columns_noted {
                intake.note_columns(map.keys().cloned().collect());
                self.columns_noted = true;
            }
            intake.offer(builder, location, &mut |_, name| {
                map.get(name).map_or(Cell::Missing, Cell::Json)
            });
        }
        Ok(true)
    }
}

struct JsonArraySource {
    items: std::vec::IntoIter<Value>,
    record: usize,
    columns_noted: bool,
}

impl RowSource for JsonArraySource {
    fn fill(
        &mut self,
        builder: &mut RowBuilder,
        intake: &mut dyn Intake,
        max_rows: usize,
    ) -> Result<bool, FormatError> {
        for _ in 0..max_rows {
            let Some(value) = self.items.next() else {
                return Ok(false);
            };
            self.record += 1;
            let location = Location::Record(self.record);
            let Value::Object(map) = &value else {
                intake.refuse(RowError {
                    location,
                    field: None,
                    reason: "expected a JSON object".to_string(),
                });
                continue;
            };
            if !self.columns_noted {
                intake.note_columns(map.keys().cloned().collect());
                self.columns_noted = true;
            }
            intake.offer(builder, location, &mut |_, name| {
                map.get(name).map_or(Cell::Missing, Cell::Json)
            });
        }
        Ok(true)
    }
}

struct CsvSource {
    path: PathBuf,
    reader: csv::Reader<File>,
    index: HashMap<String, usize>,
    headers: Vec<String>,
    record: csv::ByteRecord,
    columns_noted: bool,
}

impl RowSource for CsvSource {
    fn fill(
        &mut self,
        builder: &mut RowBuilder,
        intake: &mut dyn Intake,
        max_rows: usize,
    ) -> Result<bool, FormatError> {
        if !self.columns_noted {
            intake.note_columns(self.headers.clone());
            self.columns_noted = true;
        }
        for _ in 0..max_rows {
            let more = match self.reader.read_byte_record(&mut self.record) {
                Ok(more) => more,
                Err(e) => {
                    let line = e.position().map(|p| p.line() as usize).unwrap_or(0);
                    if matches!(e.kind(), csv::ErrorKind::Io(_)) {
                        return Err(FormatError::Malformed {
                            path: self.path.clone(),
                            message: e.to_string(),
                        });
                    }
                    intake.refuse(RowError {
                        location: Location::Line(line),
                        field: None,
                        reason: format!("malformed CSV record: {e}"),
                    });
                    continue;
                }
            };
            if !more {
                return Ok(false);
            }
            let line = self
                .record
                .position()
                .map(|p| p.line() as usize)
                .unwrap_or(0);
            let location = Location::Line(line);
            let record = match csv::StringRecord::from_byte_record(self.record.clone()) {
                Ok(r) => r,
                Err(e) => {
                    let column = self.headers.get(e.utf8_error().field()).cloned();
                    intake.refuse(RowError {
                        location,
                        field: column,
                        reason: "invalid UTF-8".to_string(),
                    });
                    continue;
                }
            };
            let index = &self.index;
            intake.offer(builder, location, &mut |_, name| match index.get(name) {
                Some(&i) => record.get(i).map_or(Cell::Missing, Cell::Text),
                None => Cell::Missing,
            });
        }
        Ok(true)
    }
}

/// Rows per batch read from a Parquet file.
const PARQUET_BATCH_ROWS: usize = 8192;

struct ParquetSource {
    path: PathBuf,
    /// The file, checked by `open_source`; readers are set up at the first `fill`, which knows
    /// the table (and so which column holds vectors).
    unopened: Option<ParquetRecordBatchReaderBuilder<File>>,
    reader: Option<ParquetRecordBatchReader>,
    /// The vector column, decoded apart from the others (see `parquet_vectors`), and its name.
    vectors: Option<(VectorColumn, &'static str)>,
    batch: Option<RecordBatch>,
    next_row: usize,
    rows_before: usize,
    columns_noted: bool,
}

impl ParquetSource {
    fn malformed(&self, message: String) -> FormatError {
        FormatError::Malformed {
            path: self.path.clone(),
            message,
        }
    }

    fn undecodable(&self, error: impl std::fmt::Display) -> FormatError {
        let rows = self.rows_before;
        self.malformed(format!("cannot decode rows after row {rows}: {error}"))
    }

    /// A second handle on the file, for a reader of its own.
    fn reopen(&self) -> Result<File, FormatError> {
        File::open(&self.path).map_err(|source| FormatError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// Sets up the readers: the table's vector column, when it has the regular shape of a
    /// list of floats, by its own reader; every other column by Arrow's.
    fn open(&mut self, builder: &RowBuilder) -> Result<(), FormatError> {
        let Some(unopened) = self.unopened.take() else {
            return Ok(());
        };
        let schema = unopened.parquet_schema();
        let roots = schema.root_schema().get_fields().len();
        let vector_field = builder
            .spec()
            .fields
            .iter()
            .find(|f| matches!(f.kind, crate::model::schema::Kind::Embedding));
        let split = vector_field.and_then(|field| {
            crate::formats::parquet_vectors::vector_root(schema, field.name)
                .filter(|_| roots > 1)
                .map(|(root, leaf)| (field.name, root, leaf))
        });
        let unopened = match split {
            Some((name, root, leaf)) => {
                let others = ProjectionMask::roots(schema, (0..roots).filter(|&r| r != root));
                let vectors = VectorColumn::new(self.reopen()?, leaf, builder.embedding_dim())
                    .map_err(|e| self.malformed(format!("not a readable Parquet file: {e}")))?;
                self.vectors = Some((vectors, name));
                unopened.with_projection(others)
            }
            None => unopened,
        };
        let reader = unopened
            .with_batch_size(PARQUET_BATCH_ROWS)
            .build()
            .map_err(|e| self.malformed(e.to_string()))?;
        self.reader = Some(reader);
        Ok(())
    }

    /// The next batch of the file, every column present.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, FormatError> {
        loop {
            let reader = self.reader.as_mut().expect("opened before reading");
            let batch = match reader.next() {
                None => return Ok(None),
                Some(Err(e)) => return Err(self.undecodable(e)),
                Some(Ok(batch)) => batch,
            };
            let Some((vectors, name)) = &mut self.vectors else {
                return Ok(Some(batch));
            };
            let name = *name;
            match vectors.read(batch.num_rows()) {
                Ok(Some(array)) => {
                    let mut fields: Vec<_> = batch.schema().fields().iter().cloned().collect();
                    fields.push(Arc::new(Field::new(name, array.data_type().clone(), true)));
                    let mut columns = batch.columns().to_vec();
                    columns.push(array);
                    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
                        .map_err(|e| self.malformed(e.to_string()))?;
                    return Ok(Some(batch));
                }
                Ok(None) => {
                    // Not the regular shape: these rows and the rest go through Arrow's
                    // reader, whose batches the row path can check value by value.
                    tracing::debug!(
                        "vectors after row {} are irregular: generic reader",
                        self.rows_before
                    );
                    self.vectors = None;
                    self.reader = Some(self.generic_reader_from(self.rows_before)?);
                }
                Err(e) => return Err(self.undecodable(e)),
            }
        }
    }

    /// Arrow's reader over every column, from row `skip + 1` on.
    fn generic_reader_from(&self, skip: usize) -> Result<ParquetRecordBatchReader, FormatError> {
        let builder = ParquetRecordBatchReaderBuilder::try_new(self.reopen()?)
            .map_err(|e| self.malformed(format!("not a readable Parquet file: {e}")))?;
        let total = builder.metadata().file_metadata().num_rows().max(0) as usize;
        let selection = RowSelection::from(vec![
            RowSelector::skip(skip),
            RowSelector::select(total.saturating_sub(skip)),
        ]);
        builder
            .with_row_selection(selection)
            .with_batch_size(PARQUET_BATCH_ROWS)
            .build()
            .map_err(|e| self.malformed(e.to_string()))
    }
}

impl RowSource for ParquetSource {
    fn fill(
        &mut self,
        builder: &mut RowBuilder,
        intake: &mut dyn Intake,
        max_rows: usize,
    ) -> Result<bool, FormatError> {
        self.open(builder)?;
        let mut offered = 0;
        while offered < max_rows {
            let exhausted = self
                .batch
                .as_ref()
                .is_none_or(|b| self.next_row >= b.num_rows());
            if exhausted {
                if let Some(done) = self.batch.take() {
                    self.rows_before += done.num_rows();
                }
                let Some(batch) = self.next_batch()? else {
                    return Ok(false);
                };
                if !self.columns_noted {
                    let schema = batch.schema();
                    intake.note_columns(schema.fields().iter().map(|f| f.name().clone()).collect());
                    self.columns_noted = true;
                }
                // Clean Arrow input skips the row path (see `columnar`).
                let converted = crate::formats::columnar::conform(
                    builder.spec(),
                    builder.embedding_dim(),
                    builder.now_micros(),
                    &batch,
                );
                self.next_row = 0;
                match converted {
                    Ok(converted) => {
                        if intake.offer_batch(builder, converted, self.rows_before) {
                            offered += batch.num_rows();
                            self.next_row = batch.num_rows();
                        }
                    }
                    Err(why) => {
                        tracing::debug!("row path for rows after {}: {why}", self.rows_before);
                    }
                }
                self.batch = Some(batch);
                continue;
            }
            let batch = self.batch.as_ref().expect("batch present");
            // The batch's column for each of the table's fields, looked up once per batch.
            let schema = batch.schema_ref();
            let columns: Vec<Option<&dyn arrow::array::Array>> = builder
                .spec()
                .fields
                .iter()
                .map(|f| {
                    schema
                        .index_of(f.name)
                        .ok()
                        .map(|i| batch.column(i).as_ref())
                })
                .collect();
            let end = (self.next_row + (max_rows - offered)).min(batch.num_rows());
            for row in self.next_row..end {
                let location = Location::Row(self.rows_before + row + 1);
                intake.offer(builder, location, &mut |index, _| {
                    columns[index].map_or(Cell::Missing, |array| arrow_cell(array, row))
                });
            }
            offered += end - self.next_row;
            self.next_row = end;
        }
        Ok(true)
    }
}

/// Writes batches to a file, stdout or a buffer in one format.
pub struct BatchWriter<W: Write + Send = Box<dyn Write + Send>> {
    inner: WriterKind<W>,
}

enum WriterKind<W: Write + Send> {
    Lines {
        out: W,
        format: Format,
        first: bool,
        line: String,
    },
    Csv {
        out: Box<csv::Writer<W>>,
        header_written: bool,
        cell: String,
    },
    Parquet(Box<ArrowWriter<W>>),
}

impl<W: Write + Send> BatchWriter<W> {
    pub fn new(format: Format, out: W, schema: SchemaRef) -> anyhow::Result<BatchWriter<W>> {
        let inner = match format {
            Format::Jsonl | Format::Json => WriterKind::Lines {
                out,
                format,
                first: true,
                line: String::new(),
            },
            Format::Csv => WriterKind::Csv {
                out: Box::new(csv::WriterBuilder::new().from_writer(out)),
                header_written: false,
                cell: String::new(),
            },
            Format::Parquet => {
                let properties = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .build();
                WriterKind::Parquet(Box::new(ArrowWriter::try_new(
                    out,
                    schema,
                    Some(properties),
                )?))
            }
        };
        Ok(BatchWriter { inner })
    }

    pub fn write(&mut self, batch: &RecordBatch) -> anyhow::Result<()> {
        match &mut self.inner {
            WriterKind::Lines {
                out,
                format,
                first,
                line,
            } => {
                let schema = batch.schema();
                for row in 0..batch.num_rows() {
                    line.clear();
                    if *format == Format::Json {
                        line.push_str(if *first { "[\n" } else { ",\n" });
                    }
                    *first = false;
                    line.push('{');
                    for (i, (field, column)) in
                        schema.fields().iter().zip(batch.columns()).enumerate()
                    {
                        if i > 0 {
                            line.push(',');
                        }
                        line.push_str(&serde_json::to_string(field.name())?);
                        line.push(':');
                        write_json(line, column.as_ref(), row);
                    }
                    line.push('}');
                    if *format == Format::Jsonl {
                        line.push('\n');
                    }
                    out.write_all(line.as_bytes())?;
                }
            }
            WriterKind::Csv {
                out,
                header_written,
                cell,
            } => {
                if !*header_written {
                    out.write_record(batch.schema().fields().iter().map(|f| f.name()))?;
                    *header_written = true;
                }
                for row in 0..batch.num_rows() {
                    for column in batch.columns() {
                        cell.clear();
                        write_csv_cell(cell, column.as_ref(), row);
                        out.write_field(cell.as_bytes())?;
                    }
                    out.write_record(None::<&[u8]>)?;
                }
            }
            WriterKind::Parquet(writer) => writer.write(batch)?,
        }
        Ok(())
    }

    /// Flushes and closes, giving the destination back; a JSON array is closed even when no
    /// row was written.
    pub fn finish(self) -> anyhow::Result<W> {
        Ok(match self.inner {
            WriterKind::Lines {
                mut out,
                format,
                first,
                ..
            } => {
                if format == Format::Json {
                    out.write_all(if first { b"[]\n" } else { b"\n]\n" })?;
                }
                out.flush()?;
                out
            }
            WriterKind::Csv { out, .. } => out
                .into_inner()
                .map_err(|e| anyhow::anyhow!("cannot flush CSV output: {}", e.error()))?,
            WriterKind::Parquet(writer) => {
                // into_inner writes the footer, then hands the destination back.
                let mut out = writer.into_inner()?;
                out.flush()?;
                out
            }
        })
    }
}

/// Opens a destination: a file path, or stdout for `-` or none.
pub fn open_output(path: Option<&Path>) -> anyhow::Result<Box<dyn Write + Send>> {
    use anyhow::Context;
    match path {
        Some(p) if p != Path::new("-") => {
            let file = File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            Ok(Box::new(std::io::BufWriter::with_capacity(1 << 20, file)))
        }
        _ => Ok(Box::new(std::io::BufWriter::new(std::io::stdout()))),
    }
}
