//! `memlife export`: streams a table (optionally one user's rows, or a filtered subset) to a
//! file in the encodings import reads, so export followed by import loses nothing.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use futures::TryStreamExt;

use crate::app::App;
use crate::exit::ExitStatus;
use crate::formats::{BatchWriter, Format, open_output};
use crate::store::sql_string;

/// Write a table to JSON Lines, JSON, CSV or Parquet.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    #[arg(long, default_value = "memories")]
    pub table: String,
    /// Output format (default: from -o's extension, else jsonl).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Output file (default: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Only this user's rows.
    #[arg(long)]
    pub user: Option<String>,
    /// Only rows matching this SQL predicate, e.g. "state = 'core'".
    #[arg(long = "where")]
    pub filter: Option<String>,
}

impl ExportArgs {
    /// `--format`, else the output file's extension, else JSON Lines (stdout).
    fn format(&self) -> Result<Format> {
        Ok(match (self.format, &self.output) {
            (Some(format), _) => format,
            (None, Some(path)) if path.as_os_str() != "-" => Format::from_path(path)?,
            _ => Format::Jsonl,
        })
    }
}

pub async fn run(app: &App, args: &ExportArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let format = args.format()?;
    let store = app.store().await?;
    let mut predicates = Vec::new();
    if let Some(user) = &args.user {
        predicates.push(format!("user_id = {}", sql_string(user)));
    }
    if let Some(filter) = &args.filter {
        predicates.push(format!("({filter})"));
    }
    let predicate = (!predicates.is_empty()).then(|| predicates.join(" AND "));
    let (schema, mut stream) = store.scan_stream(&args.table, predicate.as_deref()).await?;
    let mut writer = BatchWriter::new(format, open_output(args.output.as_deref())?, schema)?;
    let mut rows = 0u64;
    while let Some(batch) = stream.try_next().await? {
        rows += batch.num_rows() as u64;
        writer.write(&batch)?;
    }
    writer.finish()?;
    // With a file as output, stdout is free for the summary.
    if args.output.is_some() {
        if app.json {
            writeln!(
                out,
                "{}",
                serde_json::json!({"table": args.table, "rows": rows})
            )?;
        } else {
            eprintln!("exported {rows} rows of '{}'", args.table);
        }
    }
    Ok(ExitStatus::Success)
}
