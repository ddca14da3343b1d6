//! `memlife init`: creates a database, or checks an existing one, and says which.

use std::io::Write;

use anyhow::Result;

use crate::app::App;
use crate::exit::ExitStatus;
use crate::model::schema::DEFAULT_EMBEDDING_DIM;
use crate::store::Store;

/// Create the database and its tables (idempotent).
#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// Width of embedding vectors, fixed for the database's life.
    #[arg(long, default_value_t = DEFAULT_EMBEDDING_DIM)]
    pub embedding_dim: usize,
}

pub async fn run(app: &App, args: &InitArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let (store, created) = Store::init(&app.db, args.embedding_dim).await?;
    if app.json {
        let report = serde_json::json!({
            "db": store.uri(),
            "schema_version": store.schema_version(),
            "embedding_dim": store.embedding_dim(),
            "created_tables": created,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else if created.is_empty() {
        writeln!(
            out,
            "{} is up to date (schema version {}, embedding dim {})",
            store.uri(),
            store.schema_version(),
            store.embedding_dim()
        )?;
    } else {
        writeln!(
            out,
            "initialised {} (schema version {}, embedding dim {}): created {}",
            store.uri(),
            store.schema_version(),
            store.embedding_dim(),
            created.join(", ")
        )?;
    }
    Ok(ExitStatus::Success)
}
