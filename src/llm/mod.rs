//! The LLM layer every judging job goes through. A job builds `TaskInput`s; `Llm::run`
//! answers them with the offline judge or, online, through each task's provider chain, and
//! returns one `Outcome` per item, in input order: a validated reply, or a failure with its
//! reason plus the task's safe default. `batch` submits the same requests to the OpenAI Batch
//! API instead, for `memlife batches poll` to apply later.
//!
//! Rules: a failed item fails alone; a provider that cannot answer (refused connection, 5xx or
//! 429 after retries, timeout) hands the item to the next provider of the chain; a reply that
//! does not parse or validate is asked again `invalid_reply_retries` times, then recorded as
//! failed. Nothing here logs a key or a prompt.

pub mod batch;
pub mod mock;
pub mod offline;
pub mod oracle;
pub mod provider;
pub mod tasks;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Result;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use provider::{Provider, ProviderUsage};
use tasks::{Reply, Task, TaskInput, parse_reply, safe_default};

/// Who answers: the rule-based judge, or the configured providers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JudgeKind {
    Offline,
    Providers,
}

/// How requests are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallMode {
    Online,
    Batch,
}

/// The options of every job that calls the LLM layer.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LlmArgs {
    /// offline: the deterministic rule-based judge (no network); providers: the chains of
    /// memlife.toml. Default: llm.judge of the config (offline when unset).
    #[arg(long = "llm", value_enum)]
    pub judge: Option<JudgeKind>,
    /// online: call now; batch: submit to the Batch API and exit (`batches poll` applies).
    #[arg(long, value_enum)]
    pub mode: Option<CallMode>,
}

/// One request: an id the caller knows it by, and the input.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Item {
    pub custom_id: String,
    pub input: TaskInput,
}

/// The answer to one item.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub custom_id: String,
    /// The validated reply, or the task's safe default when `failure` is set.
    pub reply: Option<Reply>,
    /// Why no trusted reply exists (then `reply` is the safe default, if the task has one).
    pub failure: Option<String>,
    /// The provider that answered (`offline` for the judge).
    pub served_by: Option<String>,
}

impl Outcome {
    pub fn failed(
        custom_id: &str,
        task: Task,
        reason: String,
        served_by: Option<String>,
    ) -> Outcome {
        Outcome {
            custom_id: custom_id.to_string(),
            reply: safe_default(task),
            failure: Some(reason),
            served_by,
        }
    }
}

/// What a run spent, per provider; kept in `runs.llm_usage` and in the JSON report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmUsage {
    pub judge: String,
    pub mode: String,
    pub items: u64,
    pub failed_items: u64,
    pub providers: BTreeMap<String, ProviderUsage>,
    pub estimated_cost_usd: f64,
}

impl LlmUsage {
    pub fn add(&mut self, other: &LlmUsage) {
        self.items += other.items;
        self.failed_items += other.failed_items;
        for (name, u) in &other.providers {
            let mine = self
                .providers
                .entry(name.clone())
                .or_insert_with(|| ProviderUsage {
                    model: u.model.clone(),
                    ..Default::default()
                });
            mine.requests += u.requests;
            mine.retries += u.retries;
            mine.failed_calls += u.failed_calls;
            mine.completions += u.completions;
            mine.invalid_replies += u.invalid_replies;
            mine.served += u.served;
            mine.input_tokens += u.input_tokens;
            mine.output_tokens += u.output_tokens;
            mine.skipped_circuit_open += u.skipped_circuit_open;
            mine.estimated_cost_usd += u.estimated_cost_usd;
        }
        self.estimated_cost_usd += other.estimated_cost_usd;
    }

    /// The providers' calls made since `earlier` was taken (counters only grow): one batch's
    /// share of a poll that applies several, so merging the shares counts each call once.
    pub fn since(&self, earlier: &LlmUsage) -> LlmUsage {
        let mut delta = self.clone();
        for (name, u) in delta.providers.iter_mut() {
            if let Some(e) = earlier.providers.get(name) {
                u.requests = u.requests.saturating_sub(e.requests);
                u.retries = u.retries.saturating_sub(e.retries);
                u.failed_calls = u.failed_calls.saturating_sub(e.failed_calls);
                u.completions = u.completions.saturating_sub(e.completions);
                u.invalid_replies = u.invalid_replies.saturating_sub(e.invalid_replies);
                u.served = u.served.saturating_sub(e.served);
                u.input_tokens = u.input_tokens.saturating_sub(e.input_tokens);
                u.output_tokens = u.output_tokens.saturating_sub(e.output_tokens);
                u.skipped_circuit_open = u
                    .skipped_circuit_open
                    .saturating_sub(e.skipped_circuit_open);
                u.estimated_cost_usd = (u.estimated_cost_usd - e.estimated_cost_usd).max(0.0);
            }
        }
        delta.estimated_cost_usd = delta
            .providers
            .values()
            .fold(0.0, |t, u| t + u.estimated_cost_usd);
        delta
    }
}

/// The layer, configured once per run.
pub struct Llm {
    pub judge: JudgeKind,
    pub mode: CallMode,
    config: Config,
    /// Providers by name: every provider some role names, built at start, so a missing API
    /// key variable fails the run before any call.
    providers: BTreeMap<String, Arc<Provider>>,
}

impl Llm {
    pub fn new(config: &Config, args: &LlmArgs) -> Result<Llm> {
        let judge = args.judge.unwrap_or(if config.llm.judge == "providers" {
            JudgeKind::Providers
        } else {
            JudgeKind::Offline
        });
        let mode = args.mode.unwrap_or(if config.llm.mode == "batch" {
            CallMode::Batch
        } else {
            CallMode::Online
        });
        if judge == JudgeKind::Offline && mode == CallMode::Batch {
            anyhow::bail!("--mode batch needs --llm providers (the offline judge answers at once)");
        }
        let mut providers = BTreeMap::new();
        if judge == JudgeKind::Providers {
            if config.roles.is_empty() {
                anyhow::bail!(
                    "--llm providers needs [providers] and [roles] in a config file{}",
                    config
                        .source
                        .as_ref()
                        .map(|p| format!(" ({} has none)", p.display()))
                        .unwrap_or_else(
                            || " (none found: pass --config or set MEMLIFE_CONFIG)".into()
                        )
                );
            }
            for chain in config.roles.values() {
                for name in chain {
                    if !providers.contains_key(name) {
                        let p = Provider::new(name, &config.providers[name])?;
                        providers.insert(name.clone(), Arc::new(p));
                    }
                }
            }
        }
        Ok(Llm {
            judge,
            mode,
            config: config.clone(),
            providers,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A configured provider by name (batch records name the provider that took them).
    pub fn provider(&self, name: &str) -> Result<Arc<Provider>> {
        self.providers
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("provider {name} is not in any role of the config"))
    }

    /// The providers of a task, in chain order.
    pub fn chain(&self, task: Task) -> Result<Vec<Arc<Provider>>> {
        Ok(self
            .config
            .chain_of(task.name())?
            .into_iter()
            .map(|(name, _)| self.providers[&name].clone())
            .collect())
    }

    /// Answers every item now (offline judge or online providers), in input order.
    pub async fn run(&self, items: Vec<Item>) -> Vec<Outcome> {
        if self.judge == JudgeKind::Offline {
            return items
                .iter()
                .map(|item| match item.input.check_arity() {
                    Err(reason) => Outcome::failed(&item.custom_id, item.input.task, reason, None),
                    Ok(()) => Outcome {
                        custom_id: item.custom_id.clone(),
                        reply: Some(offline::judge(&item.input)),
                        failure: None,
                        served_by: Some("offline".into()),
                    },
                })
                .collect();
        }
        let width: usize = self
            .providers
            .values()
            .map(|p| p.config.max_concurrency)
            .sum::<usize>()
            .max(1);
        // On a terminal, a bar of the items answered (the long wait of a job that judges).
        let bar = crate::progress::bar(
            items.len() as u64,
            items.first().map_or("llm", |i| i.input.task.name()),
        );
        let mut indexed: Vec<(usize, Outcome)> =
            futures::stream::iter(items.into_iter().enumerate())
                .map(|(i, item)| {
                    let bar = &bar;
                    async move {
                        let outcome = self.run_online(item).await;
                        bar.inc(1);
                        (i, outcome)
                    }
                })
                .buffer_unordered(width)
                .collect()
                .await;
        bar.finish_and_clear();
        indexed.sort_by_key(|(i, _)| *i);
        indexed.into_iter().map(|(_, o)| o).collect()
    }

    async fn run_online(&self, item: Item) -> Outcome {
        let task = item.input.task;
        if let Err(reason) = item.input.check_arity() {
            return Outcome::failed(&item.custom_id, task, reason, None);
        }
        let chain = match self.chain(task) {
            Ok(chain) => chain,
            Err(e) => return Outcome::failed(&item.custom_id, task, format!("{e:#}"), None),
        };
        let prompt = item.input.render();
        let temperature = if self.config.role_of(task.name()) == "fast" {
            0.0
        } else {
            0.2
        };
        let mut errors = Vec::new();
        for provider in chain {
            if provider.circuit_open() {
                errors.push(format!(
                    "provider {}: skipped (circuit open after repeated failures)",
                    provider.name
                ));
                continue;
            }
            let mut invalid_left = self.config.llm.invalid_reply_retries;
            loop {
                match provider.complete(&prompt, temperature).await {
                    Err(e) => {
                        errors.push(e.to_string());
                        break;
                    }
                    Ok(completion) => match parse_reply(&item.input, &completion.text) {
                        Ok(reply) => {
                            provider.stats.served.fetch_add(1, Ordering::Relaxed);
                            return Outcome {
                                custom_id: item.custom_id,
                                reply: Some(reply),
                                failure: None,
                                served_by: Some(provider.name.clone()),
                            };
                        }
                        Err(reason) => {
                            provider
                                .stats
                                .invalid_replies
                                .fetch_add(1, Ordering::Relaxed);
                            tracing::info!(provider = %provider.name, task = task.name(), "invalid reply: {reason}");
                            if invalid_left == 0 {
                                return Outcome::failed(
                                    &item.custom_id,
                                    task,
                                    format!("invalid reply from {}: {reason}", provider.name),
                                    Some(provider.name.clone()),
                                );
                            }
                            invalid_left -= 1;
                        }
                    },
                }
            }
        }
        Outcome::failed(
            &item.custom_id,
            task,
            format!("every provider failed: {}", errors.join("; ")),
            None,
        )
    }

    /// The accounting of this run so far.
    pub fn usage(&self, outcomes: &[Outcome]) -> LlmUsage {
        let providers: BTreeMap<String, ProviderUsage> = self
            .providers
            .iter()
            .map(|(name, p)| (name.clone(), p.usage()))
            .filter(|(_, u)| u.requests > 0 || u.skipped_circuit_open > 0)
            .collect();
        let mut usage = LlmUsage {
            judge: match self.judge {
                JudgeKind::Offline => "offline".into(),
                JudgeKind::Providers => "providers".into(),
            },
            mode: match self.mode {
                CallMode::Online => "online".into(),
                CallMode::Batch => "batch".into(),
            },
            items: outcomes.len() as u64,
            failed_items: outcomes.iter().filter(|o| o.failure.is_some()).count() as u64,
            estimated_cost_usd: providers
                .values()
                .fold(0.0, |t, u| t + u.estimated_cost_usd),
            providers,
        };
        if self.judge == JudgeKind::Offline {
            let served = outcomes.iter().filter(|o| o.failure.is_none()).count() as u64;
            usage.providers.insert(
                "offline".into(),
                ProviderUsage {
                    model: "offline-rules-v1".into(),
                    served,
                    ..Default::default()
                },
            );
        }
        usage
    }
}
