//! `memlife init`: creates a database, or checks an existing one, and says which.

use anyhow::Result;

use crate::store::Store;

pub async fn run(uri: &str, embedding_dim: usize, json: bool) -> Result<u8> {
    let (store, created) = Store::init(uri, embedding_dim).await?;
    if json {
        let report = serde_json::json!({
            "db": store.uri(),
            "schema_version": store.schema_version(),
            "embedding_dim": store.embedding_dim(),
            "created_tables": created,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if created.is_empty() {
        println!(
            "{} is up to date (schema version {}, embedding dim {})",
            store.uri(),
            store.schema_version(),
            store.embedding_dim()
        );
    } else {
        println!(
            "initialised {} (schema version {}, embedding dim {}): created {}",
            store.uri(),
            store.schema_version(),
            store.embedding_dim(),
            created.join(", ")
        );
    }
    Ok(0)
}
