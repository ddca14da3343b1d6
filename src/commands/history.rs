//! `memlife history ID [--as-of TS]`: the supersession chain a memory belongs to, V1 -> V2 ->
//! ..., each version with its validity interval [valid_from, valid_until); with `--as-of`,
//! the version that was true at that time (`valid_from <= t AND (valid_until IS NULL OR
//! valid_until > t)`). A broken chain (a fork, a cycle, a successor that does not exist) is
//! reported as an error naming it; `memlife check` finds them all.

use std::io::Write;

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

use crate::app::App;
use crate::exit::ExitStatus;
use crate::logic::integrate::{chain_order, valid_at};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::store::sql_string;

#[derive(clap::Args, Debug, Clone)]
pub struct HistoryArgs {
    /// Any version's memory id.
    pub id: String,
    /// Only the version true at this time (RFC 3339).
    #[arg(long)]
    pub as_of: Option<Clock>,
}

/// A version of a memory as the history shows it.
#[derive(Clone, serde::Deserialize)]
struct Version {
    id: String,
    user_id: String,
    text: String,
    valid_from: Option<i64>,
    valid_until: Option<i64>,
    superseded_by: Option<String>,
    supersession_chain_id: Option<String>,
    archived_at: Option<i64>,
    created_at: Option<i64>,
}

impl Version {
    /// As `--json` shows it: times as RFC 3339 text, numbered in the chain.
    fn to_json(&self, number: usize) -> Value {
        let time = |t: Option<i64>| t.map(format_timestamp);
        json!({
            "id": self.id,
            "user_id": self.user_id,
            "text": self.text,
            "valid_from": time(self.valid_from),
            "valid_until": time(self.valid_until),
            "superseded_by": self.superseded_by,
            "supersession_chain_id": self.supersession_chain_id,
            "archived_at": time(self.archived_at),
            "created_at": time(self.created_at),
            "version": number,
        })
    }
}

pub async fn run(app: &App, args: &HistoryArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let as_of = args.as_of.map(Clock::micros);
    let store = app.store().await?;
    let found: Vec<Version> = store
        .scan_rows("memories", Some(&format!("id = {}", sql_string(&args.id))))
        .await?;
    let Some(memory) = found.into_iter().next() else {
        bail!("no memory with id '{}'", args.id);
    };
    let versions: Vec<Version> = match &memory.supersession_chain_id {
        Some(chain) => {
            store
                .scan_rows(
                    "memories",
                    Some(&format!("supersession_chain_id = {}", sql_string(chain))),
                )
                .await?
        }
        None => vec![memory.clone()],
    };
    let pairs: Vec<(String, Option<String>)> = versions
        .iter()
        .map(|v| (v.id.clone(), v.superseded_by.clone()))
        .collect();
    let order = chain_order(&pairs).map_err(|e| {
        anyhow!(
            "the supersession chain of '{}' is broken: {e} (see `memlife check`)",
            args.id
        )
    })?;
    let ordered: Vec<&Version> = order
        .iter()
        .filter_map(|id| versions.iter().find(|v| v.id == *id))
        .collect();
    let shown: Vec<(usize, &Version)> = ordered
        .iter()
        .enumerate()
        .filter(|(_, v)| as_of.is_none_or(|t| valid_at(v.valid_from, v.valid_until, t)))
        .map(|(i, v)| (i + 1, *v))
        .collect();
    if app.json {
        let rows: Vec<Value> = shown.iter().map(|(n, v)| v.to_json(*n)).collect();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "id": args.id,
                "chain": memory.supersession_chain_id,
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
            .valid_until
            .map_or_else(|| "now (current)".to_string(), format_timestamp);
        let archived = if v.archived_at.is_none() {
            ""
        } else {
            " [archived]"
        };
        writeln!(
            out,
            "V{n} {}  [{} .. {until}){archived}\n   {}",
            v.id,
            v.valid_from.map(format_timestamp).unwrap_or_default(),
            v.text
        )?;
    }
    Ok(ExitStatus::Success)
}
