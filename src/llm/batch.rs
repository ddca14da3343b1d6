//! The OpenAI Batch API path: `submit` uploads a JSONL file of chat requests, creates a batch
//! and records it in `llm_batches`; `poll` (cron, every minute) moves finished batches to
//! `ready`, then claims each ready batch, downloads its output and error files, validates
//! every reply and hands the outcomes to the job that submitted them; `retry` resubmits
//! failed and expired batches; `cleanup` deletes old records and their remote files.
//!
//! Exactly once: a poller claims a batch with a conditional Lance update
//! (`status = 'ready'` to `applying`, with its own claim token) and applies only if the
//! stored token is still its own. Appliers write with keys derived from the batch and the
//! item, through merge-insert, so applying the same results again changes nothing: a
//! poller that crashes after claiming leaves `applying` behind, and once the claim is older
//! than the lease the next poll re-applies the batch to the same end state.

use std::collections::BTreeMap;

use anyhow::{Context, Result, anyhow};
use async_openai::types::batches::{
    BatchCompletionWindow, BatchEndpoint, BatchRequest, BatchStatus,
};
use async_openai::types::files::{CreateFileRequest, FileInput, FilePurpose};
use chrono::Utc;
use serde::Serialize;

use super::provider::{Provider, cost, describe_error};
use super::tasks::{Task, parse_reply};
use super::{Item, Llm, LlmUsage, Outcome, ProviderUsage};
use crate::model::encoding::format_timestamp;
use crate::model::schema::LLM_BATCHES;
use crate::store::audit::AuditRow;
use crate::store::{Store, sql_string, sql_timestamp};

pub use crate::model::typed::BatchRecord;

/// The items a record submitted.
pub fn items_of(record: &BatchRecord) -> Result<Vec<Item>> {
    serde_json::from_str(&record.items)
        .with_context(|| format!("llm_batches row {}: unreadable items", record.batch_key))
}

pub async fn records(store: &Store, filter: &str) -> Result<Vec<BatchRecord>> {
    let mut records = store
        .scan_rows::<BatchRecord>(LLM_BATCHES.name, Some(filter))
        .await?;
    records.sort_by(|a, b| {
        a.submitted_at
            .cmp(&b.submitted_at)
            .then(a.batch_key.cmp(&b.batch_key))
    });
    Ok(records)
}

/// The memories the items of `job`'s batches not applied yet are about (submitted, being
/// applied, or failed and waiting for `batches retry`): a job does not submit them again
/// meanwhile.
pub async fn memories_in_pending(
    store: &Store,
    job: &str,
) -> Result<std::collections::BTreeSet<String>> {
    let filter = format!("job = {} AND status != 'applied'", sql_string(job));
    let mut out = std::collections::BTreeSet::new();
    for record in records(store, &filter).await? {
        for item in items_of(&record)? {
            out.extend(item.input.memories.into_iter().map(|m| m.id));
        }
    }
    Ok(out)
}

async fn save(store: &Store, record: &BatchRecord) -> Result<()> {
    let batch = crate::model::typed::batch_record_batch(std::slice::from_ref(record))
        .map_err(|e| anyhow!(e))?;
    store.upsert_batch(&LLM_BATCHES, batch).await?;
    Ok(())
}

/// Updates one record's columns only if `condition` still holds; returns whether it did.
/// Every state change after submission goes through here, so a poller never overwrites a
/// newer state written by another (a blind upsert would undo a concurrent claim).
async fn transition(
    store: &Store,
    key: &str,
    condition: &str,
    columns: &[(&str, Option<String>)],
) -> Result<bool> {
    let mut assignments: Vec<(&str, String)> = columns
        .iter()
        .map(|(name, value)| {
            let expression = match value {
                None => "NULL".to_string(),
                Some(v) if name.ends_with("_at") => {
                    format!("TIMESTAMP '{}'", v.trim_end_matches('Z'))
                }
                Some(v) => sql_string(v),
            };
            (*name, expression)
        })
        .collect();
    assignments.push(("updated_at", sql_timestamp(Utc::now().timestamp_micros())));
    let predicate = format!("batch_key = {} AND ({condition})", sql_string(key));
    match store
        .update_where(LLM_BATCHES.name, &predicate, &assignments)
        .await
    {
        Ok(rows_updated) => Ok(rows_updated == 1),
        // Only a lost commit race means another poller got there first; any other error
        // (I/O, a bad predicate) is the caller's to see.
        Err(e) if e.is_commit_conflict() => {
            tracing::info!(batch = %key, "conditional update lost to a concurrent writer: {e}");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Moves this poller's claim on `key` forward to now, if the claim is still its own.
async fn renew_claim(store: &Store, key: &str, token: &str) -> Result<bool> {
    transition(
        store,
        key,
        &format!(
            "status = 'applying' AND claim_token = {}",
            sql_string(token)
        ),
        &[("claimed_at", Some(now_text()))],
    )
    .await
}

/// Renews a claim in the background every third of the lease until dropped, and notes
/// when the claim has been taken over (the record holds another token), so the applier
/// stops before it writes a result twice.
struct ClaimKeeper {
    lost: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl ClaimKeeper {
    fn start(store: Store, key: String, token: String, lease_secs: u64) -> ClaimKeeper {
        let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let every = std::time::Duration::from_millis((lease_secs * 1000 / 3).max(100));
        let flag = lost.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match renew_claim(&store, &key, &token).await {
                    Ok(true) => {}
                    Ok(false) => {
                        // Lost a commit race, or lost the claim: only the stored token says.
                        let ours = records(&store, &format!("batch_key = {}", sql_string(&key)))
                            .await
                            .ok()
                            .and_then(|r| r.into_iter().next())
                            .is_some_and(|r| r.claim_token.as_deref() == Some(token.as_str()));
                        if !ours {
                            tracing::warn!(batch = %key, "claim taken over by another poller");
                            flag.store(true, std::sync::atomic::Ordering::SeqCst);
                            return;
                        }
                    }
                    Err(e) => tracing::warn!(batch = %key, "renewing the claim failed: {e:#}"),
                }
            }
        });
        ClaimKeeper { lost, task }
    }

    fn lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for ClaimKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn now_text() -> String {
    format_timestamp(Utc::now().timestamp_micros())
}

/// The first provider of the task's chain that takes batches.
fn batch_provider(llm: &Llm, task: Task) -> Result<std::sync::Arc<Provider>> {
    llm.chain(task)?
        .into_iter()
        .find(|p| p.config.batch)
        .ok_or_else(|| {
            anyhow!(
                "no provider of task {}'s chain accepts the Batch API (set batch = true on one)",
                task.name()
            )
        })
}

/// The JSONL body of a batch: one chat request per item.
fn request_lines(provider: &Provider, items: &[Item], temperature: f32) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for item in items {
        let mut body = serde_json::json!({
            "model": provider.config.model,
            "messages": [{"role": "user", "content": item.input.render()}],
            "temperature": temperature,
            "max_completion_tokens": provider.config.max_output_tokens,
        });
        if provider.config.json_mode {
            body["response_format"] = serde_json::json!({"type": "json_object"});
        }
        let line = serde_json::json!({
            "custom_id": item.custom_id,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": body,
        });
        serde_json::to_writer(&mut out, &line)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// Uploads and creates the remote batch for a record; fills in its ids.
async fn send(llm: &Llm, record: &mut BatchRecord, items: &[Item]) -> Result<()> {
    let task =
        Task::from_name(&record.task).ok_or_else(|| anyhow!("unknown task {}", record.task))?;
    let provider = batch_provider(llm, task)?;
    let temperature = if llm.config().role_of(task.name()) == "fast" {
        0.0
    } else {
        0.2
    };
    let body = request_lines(&provider, items, temperature)?;
    let file = provider
        .client()
        .files()
        .create(CreateFileRequest {
            file: FileInput::from_vec_u8(format!("memlife-{}.jsonl", record.batch_key), body),
            purpose: FilePurpose::Batch,
            expires_after: None,
        })
        .await
        .map_err(|e| {
            anyhow!(
                "provider {}: uploading the batch file: {}",
                provider.name,
                describe_error(&e)
            )
        })?;
    let mut metadata = std::collections::HashMap::new();
    metadata.insert(
        "memlife_batch_key".to_string(),
        serde_json::json!(record.batch_key),
    );
    let batch = provider
        .client()
        .batches()
        .create(BatchRequest {
            input_file_id: file.id.clone(),
            endpoint: BatchEndpoint::V1ChatCompletions,
            completion_window: BatchCompletionWindow::W24H,
            metadata: Some(metadata),
            output_expires_after: None,
        })
        .await
        .map_err(|e| {
            anyhow!(
                "provider {}: creating the batch: {}",
                provider.name,
                describe_error(&e)
            )
        })?;
    record.provider = provider.name.clone();
    record.model = Some(provider.config.model.clone());
    record.input_file_id = Some(file.id);
    record.remote_batch_id = Some(batch.id);
    record.status = "submitted".into();
    record.updated_at = Utc::now().timestamp_micros();
    record.error = None;
    Ok(())
}

/// Submits `items` of one task as a batch for `job`; returns its record. The record is written
/// (as `submitting`) before anything is sent, so a crash leaves a row `retry` resubmits.
pub async fn submit(
    store: &Store,
    llm: &Llm,
    job: &str,
    run_id: &str,
    user: Option<&str>,
    task: Task,
    items: &[Item],
) -> Result<BatchRecord> {
    submit_keyed(
        store,
        llm,
        uuid::Uuid::new_v4().to_string(),
        job,
        run_id,
        user,
        task,
        items,
    )
    .await
}

/// `submit` under a key the caller derives, so a step that may run twice (an applier
/// submitting the next round) can see that its submission exists (`load` by key).
#[allow(clippy::too_many_arguments)]
pub async fn submit_keyed(
    store: &Store,
    llm: &Llm,
    batch_key: String,
    job: &str,
    run_id: &str,
    user: Option<&str>,
    task: Task,
    items: &[Item],
) -> Result<BatchRecord> {
    for item in items {
        item.input
            .check_arity()
            .map_err(|e| anyhow!("item {}: {e}", item.custom_id))?;
    }
    let provider = batch_provider(llm, task)?;
    let submitted_at = Utc::now().timestamp_micros();
    let mut record = BatchRecord {
        batch_key,
        job: job.to_string(),
        run_id: run_id.to_string(),
        user_id: user.map(str::to_string),
        task: task.name().to_string(),
        provider: provider.name.clone(),
        model: Some(provider.config.model.clone()),
        status: "submitting".into(),
        request_count: items.len() as i64,
        items: serde_json::to_string(items)?,
        attempts: 1,
        updated_at: submitted_at,
        submitted_at,
        ..Default::default()
    };
    save(store, &record).await?;
    match send(llm, &mut record, items).await {
        Ok(()) => save(store, &record).await?,
        Err(e) => {
            record.status = "failed".into();
            record.error = Some(format!("{e:#}"));
            record.updated_at = Utc::now().timestamp_micros();
            save(store, &record).await?;
            return Err(e);
        }
    }
    Ok(record)
}

/// What an applier may use: the store, the LLM layer (to submit a next round) and the
/// embedder (made on first use, for appliers that write texts).
pub struct ApplyEnv<'a> {
    pub store: &'a Store,
    pub llm: &'a Llm,
    pub embedder: &'a (dyn Fn() -> Result<crate::embedders::Embedder> + Send + Sync),
}

/// Applies validated outcomes of one batch; implemented by each job that submits batches.
/// Must be idempotent: keys derived from `record.batch_key` and the item's custom id.
#[async_trait::async_trait]
pub trait Applier: Send + Sync {
    async fn apply(
        &self,
        env: &ApplyEnv<'_>,
        record: &BatchRecord,
        items: &[Item],
        outcomes: &[Outcome],
    ) -> Result<BTreeMap<String, u64>>;

    /// The audit-row ids an application of `record` writes, one per item: `memlife check`
    /// verifies that an applied batch's results are all present.
    fn result_keys(&self, record: &BatchRecord, items: &[Item]) -> Vec<String>;
}

/// What a poll did.
#[derive(Debug, Default, Serialize)]
pub struct PollReport {
    pub checked: u64,
    pub still_running: u64,
    pub became_ready: u64,
    pub failed_remotely: u64,
    pub applied: u64,
    pub skipped_claimed_elsewhere: u64,
    pub items_applied: u64,
    pub items_failed: u64,
    pub errors: Vec<String>,
    pub usage: LlmUsage,
    pub counts: BTreeMap<String, u64>,
}

/// Parses a downloaded output file (and error file) into one outcome per submitted item.
pub fn read_results(
    task: Task,
    items: &[Item],
    output: &str,
    errors: &str,
) -> (Vec<Outcome>, u64, u64) {
    let by_id: BTreeMap<&str, &Item> = items.iter().map(|i| (i.custom_id.as_str(), i)).collect();
    let mut found: BTreeMap<String, Outcome> = BTreeMap::new();
    let (mut input_tokens, mut output_tokens) = (0u64, 0u64);
    for line in output
        .lines()
        .chain(errors.lines())
        .filter(|l| !l.trim().is_empty())
    {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(custom_id) = value["custom_id"].as_str() else {
            continue;
        };
        let Some(item) = by_id.get(custom_id) else {
            continue;
        };
        let response = &value["response"];
        let status = response["status_code"].as_u64().unwrap_or(0);
        let body = &response["body"];
        input_tokens += body["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        output_tokens += body["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        let outcome = if status == 200 {
            let text = body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or("");
            match parse_reply(&item.input, text) {
                Ok(reply) => Outcome {
                    custom_id: custom_id.to_string(),
                    reply: Some(reply),
                    failure: None,
                    served_by: None,
                },
                Err(reason) => {
                    Outcome::failed(custom_id, task, format!("invalid reply: {reason}"), None)
                }
            }
        } else {
            let message = value["error"]["message"]
                .as_str()
                .or(body["error"]["message"].as_str())
                .unwrap_or("no message");
            Outcome::failed(
                custom_id,
                task,
                format!("batch request failed (HTTP {status}): {message}"),
                None,
            )
        };
        found.insert(custom_id.to_string(), outcome);
    }
    let outcomes = items
        .iter()
        .map(|item| {
            found.remove(&item.custom_id).unwrap_or_else(|| {
                Outcome::failed(
                    &item.custom_id,
                    task,
                    "no result in the batch output".into(),
                    None,
                )
            })
        })
        .collect();
    (outcomes, input_tokens, output_tokens)
}

/// Options of `batches poll`.
pub struct PollOptions {
    /// A claim older than this is taken over (its poller is presumed dead).
    pub lease_secs: u64,
}

pub async fn poll(
    env: &ApplyEnv<'_>,
    appliers: &dyn Fn(&str) -> Option<Box<dyn Applier>>,
    options: &PollOptions,
) -> Result<PollReport> {
    let (store, llm) = (env.store, env.llm);
    let mut report = PollReport::default();
    // A job may submit its next round while its batch is applied (consolidate's pass 2):
    // the poll then checks those new batches too, so a provider that answers at once
    // finishes a multi-round job in one poll. Later rounds look only at batches submitted
    // since the poll began.
    let mut checked = std::collections::BTreeSet::new();
    for round in 0..POLL_ROUNDS {
        let running: Vec<BatchRecord> = records(store, "status = 'submitted'")
            .await?
            .into_iter()
            .filter(|r| !checked.contains(&r.batch_key))
            .collect();
        if round > 0 && running.is_empty() {
            break;
        }
        checked.extend(running.iter().map(|r| r.batch_key.clone()));
        poll_round(env, appliers, options, running, &mut report).await?;
        if !report.errors.is_empty() {
            break; // reported; the next poll tries again
        }
    }
    // The calls themselves (status checks, downloads, re-asks) are counted once for the whole
    // poll, from the providers' own counters; tokens and cost come from the batches' files.
    for (name, total) in llm.usage(&[]).providers {
        let mine = report
            .usage
            .providers
            .entry(name)
            .or_insert_with(|| ProviderUsage {
                model: total.model.clone(),
                ..Default::default()
            });
        mine.requests = total.requests;
        mine.retries = total.retries;
        mine.failed_calls = total.failed_calls;
        mine.completions = total.completions;
        mine.invalid_replies = total.invalid_replies;
        mine.skipped_circuit_open = total.skipped_circuit_open;
    }
    report.usage.judge = "providers".into();
    report.usage.mode = "batch".into();
    Ok(report)
}

/// Rounds of one poll: the batches running when it starts, then those its appliers submitted
/// (consolidate: pass 2), and one more for good measure.
const POLL_ROUNDS: usize = 3;

/// One round of a poll: asks about `running` batches, then applies every ready batch (and
/// every abandoned claim).
async fn poll_round(
    env: &ApplyEnv<'_>,
    appliers: &dyn Fn(&str) -> Option<Box<dyn Applier>>,
    options: &PollOptions,
    running: Vec<BatchRecord>,
    report: &mut PollReport,
) -> Result<()> {
    let (store, llm) = (env.store, env.llm);
    // 1. Ask the provider about every batch still running.
    for record in running {
        report.checked += 1;
        let Some(remote) = record.remote_batch_id.clone() else {
            continue;
        };
        let Ok(provider) = llm.provider(&record.provider) else {
            report.errors.push(format!(
                "batch {}: provider {} is not configured",
                record.batch_key, record.provider
            ));
            continue;
        };
        let batch = match provider.client().batches().retrieve(&remote).await {
            Ok(b) => b,
            Err(e) => {
                report.errors.push(format!(
                    "batch {}: {}",
                    record.batch_key,
                    describe_error(&e)
                ));
                continue;
            }
        };
        let changed = match batch.status {
            BatchStatus::Completed => {
                report.became_ready += 1;
                transition(
                    store,
                    &record.batch_key,
                    "status = 'submitted'",
                    &[
                        ("status", Some("ready".into())),
                        ("output_file_id", batch.output_file_id),
                        ("error_file_id", batch.error_file_id),
                    ],
                )
                .await?
            }
            BatchStatus::Failed | BatchStatus::Expired | BatchStatus::Cancelled => {
                report.failed_remotely += 1;
                let error = format!(
                    "remote batch {:?}{}",
                    batch.status,
                    batch
                        .errors
                        .map(|e| e
                            .data
                            .iter()
                            .map(|d| format!(": {}", d.message))
                            .collect::<String>())
                        .unwrap_or_default()
                );
                transition(
                    store,
                    &record.batch_key,
                    "status = 'submitted'",
                    &[("status", Some("failed".into())), ("error", Some(error))],
                )
                .await?
            }
            _ => {
                report.still_running += 1;
                continue;
            }
        };
        if !changed {
            tracing::info!(batch = %record.batch_key, "moved on by another poller");
        }
    }
    // 2. Apply every ready batch (and every abandoned claim) exactly once.
    let stale =
        format_timestamp(Utc::now().timestamp_micros() - options.lease_secs as i64 * 1_000_000);
    let filter = format!(
        "status = 'ready' OR (status = 'applying' AND claimed_at <= TIMESTAMP '{}')",
        stale.trim_end_matches('Z')
    );
    for record in records(store, &filter).await? {
        match apply_one(env, appliers, record, &stale, options.lease_secs).await {
            Ok(Some(applied)) => {
                report.applied += 1;
                report.items_applied += applied.items;
                report.items_failed += applied.failed;
                report.usage.add(&applied.usage);
                for (k, v) in applied.counts {
                    *report.counts.entry(k).or_default() += v;
                }
            }
            Ok(None) => report.skipped_claimed_elsewhere += 1,
            Err(e) => report.errors.push(format!("{e:#}")),
        }
    }
    Ok(())
}

async fn download(provider: &Provider, key: &str, id: Option<&str>) -> Result<String> {
    match id {
        None => Ok(String::new()),
        Some(id) => provider
            .client()
            .files()
            .content(id)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| anyhow!("batch {key}: downloading file {id}: {}", describe_error(&e))),
    }
}

struct Applied {
    items: u64,
    failed: u64,
    usage: LlmUsage,
    counts: BTreeMap<String, u64>,
}

async fn apply_one(
    env: &ApplyEnv<'_>,
    appliers: &dyn Fn(&str) -> Option<Box<dyn Applier>>,
    record: BatchRecord,
    stale: &str,
    lease_secs: u64,
) -> Result<Option<Applied>> {
    let (store, llm) = (env.store, env.llm);
    // This batch's share of the provider calls the poll makes (it may apply several).
    let calls_before = llm.usage(&[]);
    let key = record.batch_key.clone();
    let applier = appliers(record.job.as_str())
        .ok_or_else(|| anyhow!("batch {key}: no job named {} applies batches", record.job))?;
    // Claim: a conditional update that only one poller can win.
    crate::crash::point("batches.poll.before-claim");
    let token = uuid::Uuid::new_v4().to_string();
    let condition = format!(
        "status = 'ready' OR (status = 'applying' AND claimed_at <= TIMESTAMP '{}')",
        stale.trim_end_matches('Z')
    );
    let claimed = transition(
        store,
        &key,
        &condition,
        &[
            ("status", Some("applying".into())),
            ("claim_token", Some(token.clone())),
            ("claimed_at", Some(now_text())),
        ],
    )
    .await?;
    if !claimed {
        return Ok(None);
    }
    let mine = records(store, &format!("batch_key = {}", sql_string(&key))).await?;
    if mine.first().and_then(|r| r.claim_token.as_deref()) != Some(token.as_str()) {
        return Ok(None);
    }
    let provider = llm.provider(&record.provider)?;
    let output = download(&provider, &key, record.output_file_id.as_deref()).await?;
    let errors = download(&provider, &key, record.error_file_id.as_deref()).await?;
    // The crash the exactly-once test replays: claimed and downloaded, not applied.
    crate::crash::point("batches.poll.after-download");
    let task = Task::from_name(&record.task)
        .ok_or_else(|| anyhow!("batch {key}: unknown task {}", record.task))?;
    let items = items_of(&record)?;
    let (mut outcomes, input_tokens, output_tokens) = read_results(task, &items, &output, &errors);
    // An invalid reply is not asked again here: a re-apply after a crash could get another
    // answer and apply both. It stays a recorded failure (safe default), and the job's next
    // run judges that item again.
    // The claim is renewed before the writes, and every third of the lease while they run,
    // so neither a long download nor a long apply lets another poller (on another host, whose
    // job lock does not see ours) take the batch over while this one applies it.
    if !renew_claim(store, &key, &token).await? {
        return Ok(None);
    }
    let keeper = ClaimKeeper::start(store.clone(), key.clone(), token.clone(), lease_secs);
    crate::crash::point("batches.poll.applying");
    if keeper.lost() {
        return Ok(None);
    }
    for o in outcomes
        .iter_mut()
        .filter(|o| o.served_by.is_none() && o.failure.is_none())
    {
        o.served_by = Some(record.provider.clone());
    }
    let counts = applier.apply(env, &record, &items, &outcomes).await?;
    crate::crash::point("batches.poll.after-apply");
    drop(keeper);
    let failed = outcomes.iter().filter(|o| o.failure.is_some()).count() as u64;
    let mut usage = llm.usage(&[]).since(&calls_before);
    usage.mode = "batch".into();
    usage.items = outcomes.len() as u64;
    usage.failed_items = failed;
    let batch_cost = cost(&provider.config, input_tokens, output_tokens, true);
    let entry = usage.providers.entry(record.provider.clone()).or_default();
    entry.model = provider.config.model.clone();
    entry.input_tokens += input_tokens;
    entry.output_tokens += output_tokens;
    entry.served += outcomes.iter().filter(|o| o.failure.is_none()).count() as u64;
    entry.estimated_cost_usd += batch_cost;
    usage.estimated_cost_usd = usage
        .providers
        .values()
        .fold(0.0, |t, u| t + u.estimated_cost_usd);
    let mut all_counts = counts.clone();
    all_counts.insert("items".into(), outcomes.len() as u64);
    all_counts.insert("items_failed".into(), failed);
    let summary =
        serde_json::to_string(&serde_json::json!({"counts": all_counts, "usage": usage}))?;
    let finished = transition(
        store,
        &key,
        &format!(
            "status = 'applying' AND claim_token = {}",
            sql_string(&token)
        ),
        &[
            ("status", Some("applied".into())),
            ("applied_at", Some(now_text())),
            ("counts", Some(summary)),
        ],
    )
    .await?;
    if !finished {
        // Another poller took the claim over (our lease ran out); it applies the same
        // results to the same keys, so nothing is doubled. It reports the batch, not us.
        return Ok(None);
    }
    Ok(Some(Applied {
        items: outcomes.len() as u64,
        failed,
        usage,
        counts,
    }))
}

/// Resubmits failed batches (and submissions that never reached the provider) from their
/// stored items. Returns the records resubmitted.
pub async fn retry(store: &Store, llm: &Llm, stuck_after_secs: u64) -> Result<Vec<BatchRecord>> {
    let stuck =
        format_timestamp(Utc::now().timestamp_micros() - stuck_after_secs as i64 * 1_000_000);
    let filter = format!(
        "status = 'failed' OR (status = 'submitting' AND updated_at <= TIMESTAMP '{}')",
        stuck.trim_end_matches('Z')
    );
    let mut done = Vec::new();
    for mut record in records(store, &filter).await? {
        // Take the record first, so two concurrent retries do not both resubmit it.
        let condition = format!(
            "status = 'failed' OR (status = 'submitting' AND updated_at <= TIMESTAMP '{}')",
            stuck.trim_end_matches('Z')
        );
        if !transition(
            store,
            &record.batch_key,
            &condition,
            &[("status", Some("submitting".into()))],
        )
        .await?
        {
            continue;
        }
        crate::crash::point("batches.retry.after-take");
        let items = items_of(&record)?;
        record.attempts += 1;
        let old_input = record.input_file_id.clone();
        match send(llm, &mut record, &items).await {
            Ok(()) => {
                // A crash here leaves a remote batch nobody records: the record stays
                // `submitting` and the next retry sends it again (paid twice, applied once).
                crate::crash::point("batches.retry.after-send");
                save(store, &record).await?;
                // The failed attempt's upload is of no further use (best effort).
                if let (Some(old), Ok(provider)) = (old_input, llm.provider(&record.provider)) {
                    let _ = provider.client().files().delete(&old).await;
                }
                done.push(record);
            }
            Err(e) => {
                record.error = Some(format!("{e:#}"));
                record.updated_at = Utc::now().timestamp_micros();
                save(store, &record).await?;
            }
        }
    }
    Ok(done)
}

/// Deletes records of applied or failed batches last updated before `older_than_days`, and
/// their files on the provider (best effort). Each deletion is written to the audit log first.
pub async fn cleanup(
    store: &Store,
    llm: &Llm,
    run_id: &str,
    older_than_days: u32,
) -> Result<(u64, u64)> {
    let cutoff = Utc::now().timestamp_micros() - older_than_days as i64 * 86_400_000_000;
    let filter = format!(
        "(status = 'applied' OR status = 'failed') AND updated_at <= TIMESTAMP '{}'",
        format_timestamp(cutoff).trim_end_matches('Z')
    );
    let records = records(store, &filter).await?;
    if records.is_empty() {
        return Ok((0, 0));
    }
    let now = Utc::now().timestamp_micros();
    let audit: Vec<AuditRow> = records
        .iter()
        .map(|r| {
            // Keyed by the batch alone: a record is removed once, however many runs it takes.
            let mut row = AuditRow::new(run_id, "BATCH_CLEANUP", &r.batch_key, now);
            row.user_id = r.user_id.clone();
            row.target_id = Some(r.batch_key.clone());
            row.classification = Some(r.status.clone());
            row.before_state = Some(serde_json::to_string(r).unwrap_or_default());
            row
        })
        .collect();
    // The deletion is on record before it happens.
    store.write_audit(&audit).await?;
    crate::crash::point("batches.cleanup.after-audit");
    let mut files_deleted = 0u64;
    for r in &records {
        if let Ok(provider) = llm.provider(&r.provider) {
            for id in [&r.input_file_id, &r.output_file_id, &r.error_file_id]
                .into_iter()
                .flatten()
            {
                if provider.client().files().delete(id).await.is_ok() {
                    files_deleted += 1;
                }
            }
        }
    }
    let keys: Vec<String> = records.iter().map(|r| sql_string(&r.batch_key)).collect();
    store
        .delete_where(
            LLM_BATCHES.name,
            &format!("batch_key IN ({})", keys.join(", ")),
        )
        .await?;
    Ok((records.len() as u64, files_deleted))
}

/// Seconds since a record was last updated (for reports).
pub fn age_secs(record: &BatchRecord) -> Option<i64> {
    Some((Utc::now().timestamp_micros() - record.updated_at) / 1_000_000)
}
