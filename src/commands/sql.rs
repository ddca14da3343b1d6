//! `memlife sql`: runs one read-only statement and prints the result as a table, JSON, JSON
//! Lines or CSV.

use std::io::Write;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::app::App;
use crate::exit::ExitStatus;
use crate::formats::{BatchWriter, Format};
use crate::store::Store;

/// Run read-only SQL (DataFusion) over every table.
#[derive(clap::Args, Debug)]
pub struct SqlArgs {
    /// The statement (or use --file).
    pub query: Option<String>,
    /// A saved query, e.g. sql/current_facts.sql.
    #[arg(long, conflicts_with = "query")]
    pub file: Option<PathBuf>,
    /// Bind a $name placeholder: --param name=value (repeatable).
    #[arg(long = "param")]
    pub params: Vec<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
}

impl SqlArgs {
    /// The statement: given inline, or read from the saved query's file.
    fn statement(&self) -> Result<String> {
        match (&self.query, &self.file) {
            (Some(query), _) => Ok(query.clone()),
            (None, Some(path)) => std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display())),
            (None, None) => bail!("give a query or --file FILE"),
        }
    }
}

/// `memlife sql`: one statement, printed in the chosen format.
pub async fn command(app: &App, args: &SqlArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let statement = args.statement()?;
    let store = app.store().await?;
    let params = crate::store::sql::parse_params(&args.params)?;
    run(store, &statement, &params, args.format, out).await?;
    Ok(ExitStatus::Success)
}

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
    let context = crate::store::sql::session(store).await?;
    let (schema, batches) = crate::store::sql::query(&context, sql, params).await?;
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
