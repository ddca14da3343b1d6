//! `memlife report --html FILE`: the store's history on one self-contained page (inline SVG
//! and CSS; no script, no network) that a person would rather look at than query: memories per
//! tier and state over time, run time per job, LLM requests, tokens and cost, what the jobs
//! folded, superseded, split and archived per day, the latest runs, and storage per table.
//!
//! Where the numbers come from: every finished run's `runs` row (its clock, duration, counts
//! and LLM usage); tiers and states read from the `memories` version each day's last run left
//! (`runs.table_versions`), while `optimize` has kept it; on days whose versions are gone the
//! tier line falls back to the counts of that day's `scores` run. Storage is read now.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use arrow::array::AsArray;
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::{Int64Type, TimestampMicrosecondType};
use memlife_logic::chart::{Series, escape, line_chart, short_number, stacked_bar_chart};
use memlife_logic::report::{Daily, LlmFacts, RunFacts, daily};
use serde_json::Value;

use crate::app::App;
use crate::exit::ExitStatus;
use crate::logic::targets::{HistoryRow, history_by_target};
use crate::model::schema::{BENCH_RUNS, MEMORY_STATES, MEMORY_TIERS};
use crate::store::Store;
use crate::store::maintain::TableStorage;

/// One page of charts of the store's history.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// Write the page to this file (HTML, self-contained: it opens offline).
    #[arg(long, value_name = "FILE")]
    pub html: PathBuf,
    /// Days shown: the latest N days that have runs.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..))]
    pub days: u32,
    /// Runs listed in the table of latest runs.
    #[arg(long, default_value_t = 40)]
    pub runs: usize,
}

/// A finished run as the report reads it.
struct RunRow {
    run_id: String,
    status: String,
    clock: String,
    started_at: i64,
    facts: RunFacts,
    memories_after: Option<u64>,
}

/// What the page is made of, also printed as JSON with `--json`.
#[derive(serde::Serialize)]
struct Summary {
    file: String,
    days: usize,
    runs: usize,
    first_day: Option<String>,
    last_day: Option<String>,
    /// Days whose tiers and states were read from a kept `memories` version.
    days_from_versions: usize,
    /// Targets charted from `bench_runs` (`memlife bench targets`).
    bench_targets: usize,
    bytes: usize,
}

pub async fn run(app: &App, args: &ReportArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let store = app.store().await?;
    let runs = read_runs(store).await?;
    let facts: Vec<RunFacts> = runs.iter().map(|r| r.facts.clone()).collect();
    let history = daily(&facts, args.days as usize);
    let snapshots = version_counts(store, &runs, &history.days).await?;
    let storage = store.storage_of_all_tables().await?;
    let benches: Vec<HistoryRow> = store.scan_rows(BENCH_RUNS.name, None).await?;
    let mut page = page(
        store.uri(),
        &history,
        &snapshots,
        &runs,
        args.runs,
        &storage,
    );
    if !benches.is_empty() {
        let end = page.rfind("</body>").unwrap_or(page.len());
        page.insert_str(end, &bench_section(&benches));
    }
    std::fs::write(&args.html, &page)
        .with_context(|| format!("report: cannot write {}", args.html.display()))?;
    let summary = Summary {
        file: args.html.display().to_string(),
        days: history.days.len(),
        runs: runs.len(),
        first_day: history.days.first().cloned(),
        last_day: history.days.last().cloned(),
        days_from_versions: snapshots.iter().filter(|s| s.is_some()).count(),
        bench_targets: history_by_target(&benches).len(),
        bytes: page.len(),
    };
    if app.json {
        serde_json::to_writer_pretty(&mut *out, &summary)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "report: {} ({} days{}, {} runs; tiers and states from table versions on {} of the days) -> {}",
            short_number(summary.bytes as f64) + "B",
            summary.days,
            match (&summary.first_day, &summary.last_day) {
                (Some(a), Some(b)) => format!(", {a} to {b}"),
                _ => String::new(),
            },
            summary.runs,
            summary.days_from_versions,
            summary.file
        )?;
    }
    Ok(ExitStatus::Success)
}

fn strings<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a arrow::array::StringArray> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_string_opt::<i32>())
        .with_context(|| format!("runs: column {name} missing or not text"))
}

/// Finished runs (not dry runs), in clock order.
async fn read_runs(store: &Store) -> Result<Vec<RunRow>> {
    let undone: std::collections::BTreeSet<String> = crate::store::undone_runs(store)
        .await?
        .into_iter()
        .collect();
    let columns = [
        "run_id",
        "job",
        "status",
        "started_at",
        "duration_ms",
        "params",
        "counts",
        "llm_usage",
        "table_versions",
    ];
    let batches = store
        .scan_columns(
            "runs",
            Some("dry_run = false AND status <> 'running'"),
            &columns,
        )
        .await?;
    let mut runs = Vec::new();
    for batch in &batches {
        let (run_id, job, status) = (
            strings(batch, "run_id")?,
            strings(batch, "job")?,
            strings(batch, "status")?,
        );
        let (params, counts, usage, versions) = (
            strings(batch, "params")?,
            strings(batch, "counts")?,
            strings(batch, "llm_usage")?,
            strings(batch, "table_versions")?,
        );
        let started = batch
            .column_by_name("started_at")
            .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>())
            .context("runs: started_at missing")?;
        let duration = batch
            .column_by_name("duration_ms")
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
            .context("runs: duration_ms missing")?;
        for i in 0..batch.num_rows() {
            let text =
                |a: &arrow::array::StringArray| a.is_valid(i).then(|| a.value(i).to_string());
            let json = |a: &arrow::array::StringArray| {
                text(a)
                    .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                    .unwrap_or(Value::Null)
            };
            let params = json(params);
            let started_at = started.value(i);
            let clock = ["clock", "now"]
                .iter()
                .find_map(|k| params[*k].as_str())
                .and_then(crate::model::encoding::parse_timestamp)
                .unwrap_or(started_at);
            let clock = crate::model::encoding::format_timestamp(clock);
            let run_id = run_id.value(i).to_string();
            runs.push(RunRow {
                facts: RunFacts {
                    job: job.value(i).to_string(),
                    day: clock.get(..10).unwrap_or_default().to_string(),
                    duration_ms: duration.is_valid(i).then(|| duration.value(i)),
                    counts: numbers(&json(counts)),
                    llm: llm_facts(&json(usage)),
                    undone: undone.contains(&run_id),
                },
                memories_after: json(versions)["after"]["memories"].as_u64(),
                status: status.value(i).to_string(),
                clock,
                started_at,
                run_id,
            });
        }
    }
    runs.sort_by(|a, b| (&a.clock, a.started_at).cmp(&(&b.clock, b.started_at)));
    Ok(runs)
}

/// The numeric counts of a run (nested objects and text left out).
fn numbers(counts: &Value) -> BTreeMap<String, f64> {
    counts
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_f64().map(|v| (k.clone(), v)))
                .collect()
        })
        .unwrap_or_default()
}

/// A run's LLM usage summed over providers.
fn llm_facts(usage: &Value) -> LlmFacts {
    let mut facts = LlmFacts {
        items: usage["items"].as_f64().unwrap_or(0.0),
        cost_usd: usage["estimated_cost_usd"].as_f64().unwrap_or(0.0),
        ..LlmFacts::default()
    };
    if let Some(providers) = usage["providers"].as_object() {
        for p in providers.values() {
            facts.requests += p["requests"].as_f64().unwrap_or(0.0);
            facts.input_tokens += p["input_tokens"].as_f64().unwrap_or(0.0);
            facts.output_tokens += p["output_tokens"].as_f64().unwrap_or(0.0);
        }
    }
    facts
}

/// Memories per tier and per state as each day's last run left the table: `None` for days
/// whose version `optimize` has removed (or that wrote none).
async fn version_counts(
    store: &Store,
    runs: &[RunRow],
    days: &[String],
) -> Result<Vec<Option<BTreeMap<String, f64>>>> {
    let kept: std::collections::BTreeSet<u64> = store
        .version_times("memories")
        .await?
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    let mut last_version: BTreeMap<&str, u64> = BTreeMap::new();
    for run in runs {
        if let Some(v) = run.memories_after {
            last_version.insert(run.facts.day.as_str(), v);
        }
    }
    let mut out = Vec::with_capacity(days.len());
    for day in days {
        let Some(version) = last_version.get(day.as_str()).filter(|v| kept.contains(v)) else {
            out.push(None);
            continue;
        };
        let mut counts: BTreeMap<String, f64> = BTreeMap::new();
        for batch in store
            .scan_at("memories", *version, None, &["tier", "state"])
            .await?
        {
            for column in ["tier", "state"] {
                let values = strings(&batch, column)?;
                for i in 0..batch.num_rows() {
                    let key = format!("{column}:{}", values.value(i));
                    *counts.entry(key).or_default() += 1.0;
                }
            }
        }
        out.push(Some(counts));
    }
    Ok(out)
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px auto;max-width:800px;color:#222}\
h1{font-size:22px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #ddd}\
svg{width:100%;height:auto;margin:8px 0}p.note{color:#555;font-size:13px}\
table{border-collapse:collapse;font-size:12px;width:100%}\
td,th{border-bottom:1px solid #eee;padding:3px 6px;text-align:right}\
td:first-child,th:first-child,td.l{text-align:left}";

fn page(
    uri: &str,
    history: &Daily,
    snapshots: &[Option<BTreeMap<String, f64>>],
    runs: &[RunRow],
    latest: usize,
    storage: &[TableStorage],
) -> String {
    let days = &history.days;
    let mut html = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>memlife report: {db}</title><style>{STYLE}</style></head><body>\
         <h1>memlife report</h1><p class=\"note\">Store <code>{db}</code>: {n} runs over {d} \
         days{span}. Days are the runs' clocks (<code>--now</code>), not when they ran; days \
         without runs are left out. Hover a point or bar for its value.</p>",
        db = escape(uri),
        n = runs.len(),
        d = days.len(),
        span = match (days.first(), days.last()) {
            (Some(a), Some(b)) => format!(", {a} to {b}"),
            _ => String::new(),
        },
    );
    if days.is_empty() {
        html.push_str("<p>No finished runs yet: run <code>memlife nightly</code> first.</p>");
    } else {
        html.push_str("<h2>Memories</h2>");
        html.push_str(&line_chart(
            "Memories per tier",
            "memories",
            days,
            &tier_series(history, snapshots),
        ));
        let states: Vec<Series> = MEMORY_STATES
            .iter()
            .map(|s| snapshot_series(snapshots, "state", s))
            .collect();
        if states.iter().any(|s| s.values.iter().any(Option::is_some)) {
            html.push_str(&line_chart("Memories per state", "memories", days, &states));
        }
        html.push_str(
            "<p class=\"note\">Tiers and states as each day's last run left the memories \
             table, while its version is kept (<code>[retention] keep_versions_days</code>); \
             before that, tiers as the day's <code>scores</code> run counted them.</p>",
        );
        let effects: Vec<Series> = history
            .effects
            .iter()
            .map(|(n, v)| Series::new(n.clone(), v.clone()))
            .collect();
        html.push_str(&stacked_bar_chart(
            "What the jobs did per day",
            "memories",
            days,
            &effects,
        ));
        html.push_str("<h2>Runs</h2>");
        html.push_str(&stacked_bar_chart(
            "Run time per day, by job",
            "seconds",
            days,
            &by_job(&history.seconds_by_job),
        ));
        html.push_str("<h2>LLM use</h2>");
        html.push_str(&line_chart(
            "Items judged and requests sent per day",
            "count",
            days,
            &[
                Series::new("items judged", history.items_judged.clone()),
                Series::new("requests sent", history.requests.clone()),
            ],
        ));
        if history.tokens_by_job.is_empty() {
            html.push_str(
                "<p class=\"note\">No tokens spent: every judgement so far came from the \
                 offline judge.</p>",
            );
        } else {
            html.push_str(&stacked_bar_chart(
                "Tokens per day, by job",
                "tokens",
                days,
                &by_job(&history.tokens_by_job),
            ));
            html.push_str(&line_chart(
                "Estimated cost per day",
                "USD",
                days,
                &[Series::new("cost", history.cost_usd.clone())],
            ));
        }
        html.push_str(&runs_table(runs, latest));
    }
    html.push_str(&storage_section(storage));
    html.push_str("</body></html>\n");
    html
}

fn snapshot_series(
    snapshots: &[Option<BTreeMap<String, f64>>],
    column: &str,
    value: &str,
) -> Series {
    let key = format!("{column}:{value}");
    Series::new(
        value,
        snapshots
            .iter()
            .map(|s| s.as_ref().map(|c| c.get(&key).copied().unwrap_or(0.0)))
            .collect(),
    )
}

/// Tiers from the kept versions, else from that day's scores run.
fn tier_series(history: &Daily, snapshots: &[Option<BTreeMap<String, f64>>]) -> Vec<Series> {
    MEMORY_TIERS
        .iter()
        .map(|tier| {
            let from_versions = snapshot_series(snapshots, "tier", tier);
            let from_scores = history
                .tiers_from_scores
                .iter()
                .find(|(t, _)| t == tier)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let values = from_versions
                .values
                .iter()
                .enumerate()
                .map(|(i, v)| v.or(from_scores.get(i).copied().flatten()))
                .collect();
            Series::new(*tier, values)
        })
        .collect()
}

fn by_job(map: &BTreeMap<String, Vec<Option<f64>>>) -> Vec<Series> {
    map.iter()
        .map(|(job, values)| Series::new(job.clone(), values.clone()))
        .collect()
}

fn runs_table(runs: &[RunRow], latest: usize) -> String {
    let mut html = String::from(
        "<h2>Latest runs</h2><table><tr><th>clock</th><th>job</th><th>status</th>\
         <th>seconds</th><th>items judged</th><th>requests</th><th>tokens</th>\
         <th>cost (USD)</th><th>run</th></tr>",
    );
    for run in runs.iter().rev().take(latest) {
        let f = &run.facts;
        html.push_str(&format!(
            "<tr><td>{clock}</td><td class=\"l\">{job}</td><td class=\"l\">{status}</td>\
             <td>{secs}</td><td>{items}</td><td>{requests}</td><td>{tokens}</td>\
             <td>{cost:.4}</td><td class=\"l\"><code>{id}</code></td></tr>",
            clock = escape(run.clock.get(..16).unwrap_or(&run.clock)),
            job = escape(&f.job),
            status = escape(&if f.undone {
                format!("{} (undone)", run.status)
            } else {
                run.status.clone()
            }),
            secs = f
                .duration_ms
                .map_or("-".to_string(), |ms| format!("{:.1}", ms as f64 / 1000.0)),
            items = short_number(f.llm.items),
            requests = short_number(f.llm.requests),
            tokens = short_number(f.llm.input_tokens + f.llm.output_tokens),
            cost = f.llm.cost_usd,
            id = escape(run.run_id.get(..8).unwrap_or(&run.run_id)),
        ));
    }
    html.push_str("</table>");
    html
}

fn storage_section(storage: &[TableStorage]) -> String {
    let names: Vec<String> = storage.iter().map(|t| t.table.clone()).collect();
    let megabytes = |f: fn(&TableStorage) -> u64| {
        storage
            .iter()
            .map(|t| Some(f(t) as f64 / 1e6))
            .collect::<Vec<_>>()
    };
    let mut html = String::from("<h2>Storage per table (now)</h2>");
    html.push_str(&stacked_bar_chart(
        "Bytes on disk per table: the current version, and older versions kept for undo",
        "MB",
        &names,
        &[
            Series::new("current version", megabytes(|t| t.live_bytes.min(t.bytes))),
            Series::new(
                "older versions",
                megabytes(|t| t.bytes.saturating_sub(t.live_bytes)),
            ),
        ],
    ));
    html.push_str(
        "<table><tr><th>table</th><th>rows</th><th>versions</th><th>fragments</th>\
         <th>open files</th><th>data files</th><th>bytes</th></tr>",
    );
    for t in storage {
        html.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&t.table),
            t.rows,
            t.versions,
            t.fragments,
            t.open_files,
            t.data_files.map_or("-".to_string(), |d| d.to_string()),
            crate::jobs::optimize::human_bytes(t.bytes),
        ));
    }
    html.push_str("</table>");
    html
}

/// The benchmark targets' figures over the recorded runs (`bench_runs`): a chart per target,
/// one line per CPU and the bound, and the latest status of each.
fn bench_section(rows: &[HistoryRow]) -> String {
    let histories = history_by_target(rows);
    let mut html = String::from(
        "<h2>Benchmark targets</h2><p class=\"note\">Figures of <code>memlife bench \
         targets</code> runs recorded in this store (<code>bench_runs</code>), one line per \
         CPU (quick-scale runs apart), beside the bound.</p><table><tr><th>target</th>\
         <th>bound</th><th>latest</th><th>runs</th></tr>",
    );
    for h in &histories {
        html.push_str(&format!(
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td></tr>",
            escape(&h.target),
            escape(&h.latest_bound_text),
            escape(&h.latest_status),
            h.labels.len()
        ));
    }
    html.push_str("</table>");
    for h in &histories {
        let mut series: Vec<Series> = h
            .series
            .iter()
            .map(|(name, values)| Series::new(name.clone(), values.clone()))
            .collect();
        if h.bound.iter().any(Option::is_some) {
            series.push(Series::new("bound", h.bound.clone()));
        }
        html.push_str(&line_chart(&h.title, &h.unit, &h.labels, &series));
    }
    html
}
