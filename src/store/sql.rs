//! Ad-hoc and saved SQL over every table of a database, with DataFusion: each Lance table is
//! registered under its own name through lancedb's table provider. Sessions are read-only
//! (no DDL, no DML): maintenance happens through jobs, which log what they change.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::ParamValues;
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use lancedb::table::datafusion::BaseTableAdapter;

use crate::store::Store;

/// A DataFusion session with every table of `store` registered.
pub async fn session(store: &Store) -> Result<SessionContext> {
    let context = SessionContext::new();
    for name in store.table_names().await? {
        let table = store.table(&name).await?;
        let provider = BaseTableAdapter::try_new(table.base_table().clone())
            .await
            .with_context(|| format!("cannot expose table '{name}' to SQL"))?;
        context.register_table(name.as_str(), Arc::new(provider))?;
    }
    Ok(context)
}

/// Parses `name=value` pairs given with `--param`.
pub fn parse_params(pairs: &[String]) -> Result<Vec<(String, String)>> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => Ok((
                name.trim().trim_start_matches('$').to_string(),
                value.to_string(),
            )),
            _ => bail!("--param '{pair}' is not of the form name=value"),
        })
        .collect()
}

/// Runs one read-only statement. `$name` placeholders take the given string values; compare
/// them with non-text columns through a cast (`CAST($since AS TIMESTAMP)`).
pub async fn query(
    context: &SessionContext,
    sql: &str,
    params: &[(String, String)],
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let statement = sql.trim().trim_end_matches(';');
    if statement.is_empty() {
        bail!("the SQL text is empty");
    }
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let mut frame = context
        .sql_with_options(statement, options)
        .await
        .context("SQL error")?;
    if !params.is_empty() {
        let values: HashMap<String, ScalarValue> = params
            .iter()
            .map(|(k, v)| (k.clone(), ScalarValue::Utf8(Some(v.clone()))))
            .collect();
        frame = frame
            .with_param_values(ParamValues::from(values))
            .context("cannot bind --param values")?;
    }
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let batches = frame.collect().await.context("SQL execution failed")?;
    Ok((schema, batches))
}
