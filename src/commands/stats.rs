//! `memlife stats`: a one-screen summary built from the saved queries in `sql/`: memories per
//! user, state and tier; links per type; the last run of each job.

use std::io::Write;

use anyhow::Result;
use serde_json::Value;

use super::sql::{OutputFormat, encode, print_batches};
use crate::app::App;
use crate::exit::ExitStatus;
use crate::formats::Format;
use crate::store::Store;

/// Each section: its title, its key in the JSON report, and its saved query.
const SECTIONS: &[(&str, &str, &str)] = &[
    (
        "Memories per user, state and tier",
        "memories",
        include_str!("../../sql/memory_counts.sql"),
    ),
    (
        "Links per type",
        "links",
        include_str!("../../sql/link_statistics.sql"),
    ),
    (
        "Last run of each job",
        "runs",
        include_str!("../../sql/last_runs.sql"),
    ),
];

/// `memlife stats`: the summary of the database `app` names.
pub async fn command(app: &App, out: &mut dyn Write) -> Result<ExitStatus> {
    run(app.store().await?, app.json, out).await?;
    Ok(ExitStatus::Success)
}

pub async fn run(store: &Store, json: bool, out: &mut dyn Write) -> Result<()> {
    let context = crate::store::sql::session(store).await?;
    let mut report = serde_json::Map::new();
    if !json {
        writeln!(
            out,
            "memlife database {} (schema version {}, embedding dim {})",
            store.uri(),
            store.schema_version(),
            store.embedding_dim()
        )?;
    }
    for (title, key, sql) in SECTIONS {
        let (schema, batches) = crate::store::sql::query(&context, sql, &[]).await?;
        if json {
            let rows: Value = serde_json::from_slice(&encode(schema, &batches, Format::Json)?)?;
            report.insert(key.to_string(), rows);
        } else {
            writeln!(out, "\n{title}")?;
            print_batches(schema, &batches, OutputFormat::Table, out)?;
        }
    }
    if json {
        report.insert("db".into(), Value::String(store.uri().to_string()));
        report.insert("schema_version".into(), store.schema_version().into());
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    }
    Ok(())
}
