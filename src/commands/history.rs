//! `memlife history ID [--as-of TS]`: the supersession chain a memory belongs to, V1 -> V2 ->
//! ..., each version with its validity interval [valid_from, valid_until); with `--as-of`,
//! the version that was true at that time (`valid_from <= t AND (valid_until IS NULL OR
//! valid_until > t)`). A broken chain (a fork, a cycle, a successor that does not exist) is
//! reported as an error naming it; `memlife check` finds them all.

use std::io::Write;

use anyhow::{Result, anyhow, bail};
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::exit::ExitStatus;
use crate::logic::integrate::{chain_order, valid_at};
use crate::model::clock::Clock;
use crate::store::{json_rows, sql_string};
use crate::store::{text_of, time_of};

#[derive(clap::Args, Debug, Clone)]
pub struct HistoryArgs {
    /// Any version's memory id.
    pub id: String,
    /// Only the version true at this time (RFC 3339).
    #[arg(long)]
    pub as_of: Option<Clock>,
}

const COLUMNS: &[&str] = &[
    "id",
    "user_id",
    "text",
    "valid_from",
    "valid_until",
    "superseded_by",
    "supersession_chain_id",
    "archived_at",
    "created_at",
];

pub async fn run(app: &App, args: &HistoryArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let as_of = args.as_of.map(Clock::micros);
    let store = app.store().await?;
    let found = json_rows(
        &store
            .scan_columns(
                "memories",
                Some(&format!("id = {}", sql_string(&args.id))),
                COLUMNS,
            )
            .await?,
    );
    let Some(memory) = found.into_iter().next() else {
        bail!("no memory with id '{}'", args.id);
    };
    let versions = match memory.get("supersession_chain_id").and_then(Value::as_str) {
        Some(chain) => json_rows(
            &store
                .scan_columns(
                    "memories",
                    Some(&format!("supersession_chain_id = {}", sql_string(chain))),
                    COLUMNS,
                )
                .await?,
        ),
        None => vec![memory.clone()],
    };
    let pairs: Vec<(String, Option<String>)> = versions
        .iter()
        .map(|v| {
            (
                text_of(v, "id"),
                v.get("superseded_by")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            )
        })
        .collect();
    let order = chain_order(&pairs).map_err(|e| {
        anyhow!(
            "the supersession chain of '{}' is broken: {e} (see `memlife check`)",
            args.id
        )
    })?;
    let ordered: Vec<&Map<String, Value>> = order
        .iter()
        .filter_map(|id| versions.iter().find(|v| text_of(v, "id") == *id))
        .collect();
    let shown: Vec<(usize, &Map<String, Value>)> = ordered
        .iter()
        .enumerate()
        .filter(|(_, v)| {
            as_of.is_none_or(|t| valid_at(time_of(v, "valid_from"), time_of(v, "valid_until"), t))
        })
        .map(|(i, v)| (i + 1, *v))
        .collect();
    if app.json {
        let rows: Vec<Value> = shown
            .iter()
            .map(|(n, v)| {
                let mut v = Value::Object((*v).clone());
                v["version"] = json!(n);
                v
            })
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "id": args.id,
                "chain": memory.get("supersession_chain_id"),
                "as_of": args.as_of.map(|c| c.to_string()),
                "versions": rows,
            }))?
        )?;
        return Ok(ExitStatus::Success);
    }
    if shown.is_empty() {
        writeln!(
            out,
            "nothing in the chain of {} was true at {}",
            args.id,
            args.as_of.map(|c| c.to_string()).unwrap_or_default()
        )?;
        return Ok(ExitStatus::Success);
    }
    if as_of.is_none() && ordered.len() > 1 {
        writeln!(
            out,
            "{}",
            order
                .iter()
                .enumerate()
                .map(|(i, id)| format!("V{} {id}", i + 1))
                .collect::<Vec<_>>()
                .join(" -> ")
        )?;
    }
    for (n, v) in shown {
        let until = v
            .get("valid_until")
            .and_then(Value::as_str)
            .unwrap_or("now (current)");
        let archived = if v["archived_at"].is_null() {
            ""
        } else {
            " [archived]"
        };
        writeln!(
            out,
            "V{n} {}  [{} .. {until}){archived}\n   {}",
            text_of(v, "id"),
            text_of(v, "valid_from"),
            text_of(v, "text")
        )?;
    }
    Ok(ExitStatus::Success)
}
