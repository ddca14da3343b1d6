//! `memlife stats`: a one-screen summary built from the saved queries in `sql/`: memories per
//! user, state and tier; links per type; the last run of each job; then each table's storage
//! (rows, versions, fragments, data files, bytes).

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

/// One-screen summary: memories per user, state and tier; links per type; last runs. With
/// `--links` or `--memory`, link statistics instead (seed 000 get_link_statistics).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StatsArgs {
    /// Link statistics: per type, per user and type, and the most linked memories.
    #[arg(long)]
    pub links: bool,
    /// One memory's links: inbound and outbound totals and counts by type.
    #[arg(long, value_name = "ID", conflicts_with = "links")]
    pub memory: Option<String>,
    /// With --links: one user only.
    #[arg(long, requires = "links")]
    pub user: Option<String>,
}

const LINK_SECTIONS: &[(&str, &str, &str)] = &[
    (
        "Links per type",
        "by_type",
        include_str!("../../sql/link_statistics.sql"),
    ),
    (
        "Links per user and type",
        "by_user",
        include_str!("../../sql/link_statistics_by_user.sql"),
    ),
    (
        "Most linked memories",
        "most_linked",
        include_str!("../../sql/most_linked_memories.sql"),
    ),
];

/// `memlife stats`: the summary (or the link statistics) of the database `app` names.
pub async fn command(app: &App, args: &StatsArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let store = app.store().await?;
    if let Some(memory) = &args.memory {
        memory_links(store, memory, app.json, out).await?;
    } else if args.links {
        let params = [("user".to_string(), args.user.clone().unwrap_or_default())];
        sections(store, LINK_SECTIONS, &params, app.json, out).await?;
    } else {
        run(store, app.json, out).await?;
    }
    Ok(ExitStatus::Success)
}

/// One memory's link statistics, in seed 000's shape: total_inbound, total_outbound, by_type
/// (both directions together), and by direction and type.
async fn memory_links(store: &Store, memory: &str, json: bool, out: &mut dyn Write) -> Result<()> {
    let context = crate::store::sql::session(store).await?;
    let found = crate::store::sql::query(
        &context,
        "SELECT id FROM memories WHERE id = $id",
        &[("id".into(), memory.into())],
    )
    .await?;
    if found.1.iter().map(|b| b.num_rows()).sum::<usize>() == 0 {
        anyhow::bail!("memory {memory} not found");
    }
    let sql = include_str!("../../sql/memory_link_statistics.sql");
    let params = [("memory_id".to_string(), memory.to_string())];
    let (schema, batches) = crate::store::sql::query(&context, sql, &params).await?;
    let rows: Vec<Value> =
        serde_json::from_slice(&encode(schema.clone(), &batches, Format::Json)?)?;
    let mut totals = serde_json::Map::new();
    let mut by_type: std::collections::BTreeMap<String, i64> = Default::default();
    let mut by_direction = serde_json::Map::new();
    for row in &rows {
        let (Some(direction), Some(link_type), Some(links)) = (
            row["direction"].as_str(),
            row["link_type"].as_str(),
            row["links"].as_i64(),
        ) else {
            continue;
        };
        if link_type == "(all)" {
            totals.insert(format!("total_{direction}"), links.into());
            continue;
        }
        *by_type.entry(link_type.to_string()).or_default() += links;
        by_direction
            .entry(direction.to_string())
            .or_insert_with(|| Value::Object(Default::default()))
            .as_object_mut()
            .expect("an object")
            .insert(link_type.to_string(), links.into());
    }
    let report = serde_json::json!({
        "memory_id": memory,
        "total_inbound": totals.get("total_inbound").cloned().unwrap_or(0.into()),
        "total_outbound": totals.get("total_outbound").cloned().unwrap_or(0.into()),
        "by_type": by_type,
        "by_direction": by_direction,
    });
    if json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "memory {memory}: {} inbound, {} outbound links",
            report["total_inbound"], report["total_outbound"]
        )?;
        print_batches(schema, &batches, OutputFormat::Table, out)?;
    }
    Ok(())
}

pub async fn run(store: &Store, json: bool, out: &mut dyn Write) -> Result<()> {
    if json {
        let mut buffer = Vec::new();
        sections(store, SECTIONS, &[], true, &mut buffer).await?;
        let mut report: serde_json::Map<String, Value> = serde_json::from_slice(&buffer)?;
        report.insert(
            "storage".into(),
            serde_json::to_value(store.storage_of_all_tables().await?)?,
        );
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    sections(store, SECTIONS, &[], false, out).await?;
    writeln!(
        out,
        "\nStorage per table (`memlife optimize` compacts fragments and removes old versions; open \
         files: what a read of the current version opens; data files: every version's)"
    )?;
    writeln!(
        out,
        "{:<16} {:>9} {:>9} {:>10} {:>11} {:>11} {:>11}",
        "table", "rows", "versions", "fragments", "open files", "data files", "bytes"
    )?;
    let storage = store.storage_of_all_tables().await?;
    for t in &storage {
        writeln!(
            out,
            "{:<16} {:>9} {:>9} {:>10} {:>11} {:>11} {:>11}",
            t.table,
            t.rows,
            t.versions,
            t.fragments,
            t.open_files,
            t.data_files.map_or("-".to_string(), |d| d.to_string()),
            crate::jobs::optimize::human_bytes(t.bytes)
        )?;
    }
    writeln!(
        out,
        "\nIndexes (segments: a query reads each; unindexed rows: a query scans them)"
    )?;
    writeln!(
        out,
        "{:<16} {:<22} {:<9} {:>9} {:>15}",
        "table", "column", "kind", "segments", "unindexed rows"
    )?;
    for t in &storage {
        for i in &t.indexes {
            writeln!(
                out,
                "{:<16} {:<22} {:<9} {:>9} {:>15}",
                t.table,
                i.columns.join(","),
                i.kind,
                i.segments,
                i.unindexed_rows
            )?;
        }
    }
    Ok(())
}

async fn sections(
    store: &Store,
    list: &[(&str, &str, &str)],
    params: &[(String, String)],
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
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
    for (title, key, sql) in list {
        let (schema, batches) = crate::store::sql::query(&context, sql, params).await?;
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
