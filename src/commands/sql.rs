//! `memlife sql`: runs one read-only statement and prints the result as a table, JSON, JSON
//! Lines or CSV.

use std::io::Write;

use anyhow::Result;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::formats::{BatchWriter, Format};
use crate::store::Store;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
    Jsonl,
    Csv,
}

pub async fn run(
    store: &Store,
    sql: &str,
    params: &[(String, String)],
    format: OutputFormat,
    out: &mut dyn Write,
) -> Result<()> {
    let context = crate::sql::session(store).await?;
    let (schema, batches) = crate::sql::query(&context, sql, params).await?;
    print_batches(schema, &batches, format, out)
}

/// Prints a result in the chosen format; the table form ends with a row count.
pub fn print_batches(
    schema: SchemaRef,
    batches: &[RecordBatch],
    format: OutputFormat,
    out: &mut dyn Write,
) -> Result<()> {
    let format = match format {
        OutputFormat::Table => {
            let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            if rows > 0 {
                writeln!(
                    out,
                    "{}",
                    arrow::util::pretty::pretty_format_batches(batches)?
                )?;
            } else {
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                writeln!(out, "{}", names.join(" | "))?;
            }
            writeln!(out, "({rows} row{})", if rows == 1 { "" } else { "s" })?;
            return Ok(());
        }
        OutputFormat::Json => Format::Json,
        OutputFormat::Jsonl => Format::Jsonl,
        OutputFormat::Csv => Format::Csv,
    };
    out.write_all(&encode(schema, batches, format)?)?;
    Ok(())
}

/// Encodes batches in memory (JSON, JSON Lines or CSV).
pub fn encode(schema: SchemaRef, batches: &[RecordBatch], format: Format) -> Result<Vec<u8>> {
    let mut writer = BatchWriter::new(format, Vec::new(), schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()
}
