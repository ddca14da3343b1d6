//! `memlife export`: streams a table (optionally one user's rows, or a filtered subset) to a
//! file in the encodings import reads, so export followed by import loses nothing.

use std::path::Path;

use anyhow::Result;
use futures::TryStreamExt;

use crate::formats::{BatchWriter, Format, open_output};
use crate::store::Store;

/// Quotes a value as a SQL string literal.
pub fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

pub async fn run(
    store: &Store,
    table: &str,
    format: Format,
    output: Option<&Path>,
    user: Option<&str>,
    filter: Option<&str>,
) -> Result<u64> {
    let mut predicates = Vec::new();
    if let Some(user) = user {
        predicates.push(format!("user_id = {}", sql_string(user)));
    }
    if let Some(filter) = filter {
        predicates.push(format!("({filter})"));
    }
    let predicate = (!predicates.is_empty()).then(|| predicates.join(" AND "));
    let (schema, mut stream) = store.scan_stream(table, predicate.as_deref()).await?;
    let mut writer = BatchWriter::new(format, open_output(output)?, schema)?;
    let mut rows = 0u64;
    while let Some(batch) = stream.try_next().await? {
        rows += batch.num_rows() as u64;
        writer.write(&batch)?;
    }
    writer.finish()?;
    Ok(rows)
}
