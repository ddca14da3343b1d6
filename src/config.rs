//! `memlife.toml`: providers, roles and tasks of the LLM layer, the embedder, and the tunable
//! parameters of the jobs. Read once (`--config`, else `$MEMLIFE_CONFIG`, else `./memlife.toml`
//! when it exists, else built-in defaults) and validated before any job starts, so a typo is a
//! clear error naming the file and the key, not a failure half-way through a run.
//!
//! API keys are never in the file: a provider names the environment variable holding its key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// Every task of the LLM layer and the role it uses unless the file says otherwise.
pub const DEFAULT_TASK_ROLES: &[(&str, &str)] = &[
    ("consolidate.propose", "reasoning"),
    ("consolidate.verify", "fast"),
    ("link.classify", "fast"),
    ("integrate.classify", "fast"),
    ("integrate.merge", "reasoning"),
    ("refine", "reasoning"),
    ("summarize", "fast"),
    ("entity.describe", "fast"),
    ("entities.extract", "fast"),
    ("recall.answer", "reasoning"),
    ("session.narrate", "fast"),
    ("insight.extract", "reasoning"),
    ("semantic.distill", "reasoning"),
];

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub llm: LlmSection,
    /// Named OpenAI-compatible endpoints.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Role name to an ordered chain of provider names (the first that works serves a call).
    #[serde(default)]
    pub roles: BTreeMap<String, Vec<String>>,
    /// Task name to role name; tasks not listed use `DEFAULT_TASK_ROLES`.
    #[serde(default)]
    pub tasks: BTreeMap<String, String>,
    #[serde(default)]
    pub embedder: EmbedderSection,
    /// Parameters of the daily score recalculation (`memlife scores`).
    #[serde(default)]
    pub scores: crate::logic::scores::ScoreParams,
    /// Similarity thresholds per embedding model (`[thresholds."all-MiniLM-L6-v2"]`): cosine
    /// similarities depend on the model, so each model gets its own. Keys given here override
    /// the built-in calibration (`BUILT_IN_THRESHOLDS`) key by key.
    #[serde(default)]
    pub thresholds: BTreeMap<String, ThresholdsSection>,
    /// Hubs and cluster sizes of `memlife cluster`.
    #[serde(default)]
    pub cluster: crate::logic::cluster::ClusterParams,
    /// Which memories `memlife refine` splits or trims.
    #[serde(default)]
    pub refine: RefineSection,
    /// Candidates, confidence and operations of `memlife integrate`.
    #[serde(default)]
    pub integrate: crate::logic::integrate::IntegrateParams,
    /// The ranking of `memlife recall`: each signal's weight, the candidate pool, widening.
    #[serde(default)]
    pub recall: crate::logic::recall::RecallParams,
    /// The session-start block of `memlife summaries inject`.
    #[serde(default)]
    pub summaries: crate::logic::summaries::SummaryParams,
    /// How long `memlife optimize` keeps old table versions (what `undo` reads).
    #[serde(default)]
    pub retention: RetentionSection,
    /// Which memories `memlife prune` archives or deletes, where it exports them, and its
    /// storage trigger.
    #[serde(default)]
    pub prune: crate::logic::prune::PruneParams,
    /// When a session has ended and how many of its memories `memlife sessions` tells.
    #[serde(default)]
    pub sessions: crate::logic::sessions::SessionParams,
    /// Which narratives `memlife insights` reads and how it clusters them.
    #[serde(default)]
    pub insights: crate::logic::insights::InsightParams,
    /// Which episodes `memlife distill` turns into semantic facts, and how it groups them.
    #[serde(default)]
    pub distill: crate::logic::distill::DistillParams,
    /// How `memlife anchor` moves a user's profile anchor and when its drift is an event.
    #[serde(default)]
    pub anchor: crate::logic::anchor::AnchorParams,
    /// Where the configuration came from (not read from the file).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSection {
    /// `offline` (the rule-based judge, no network) or `providers`.
    #[serde(default = "default_judge")]
    pub judge: String,
    /// `online` or `batch`.
    #[serde(default = "default_mode")]
    pub mode: String,
    /// A reply that fails to parse or validate is asked again this many times.
    #[serde(default = "default_reply_retries")]
    pub invalid_reply_retries: u32,
    /// Batch records and their files older than this are removed by `batches cleanup`.
    #[serde(default = "default_cleanup_days")]
    pub batch_retention_days: u32,
    /// A claim on a batch's results older than this is presumed dead (its poller crashed).
    #[serde(default = "default_lease")]
    pub apply_lease_secs: u64,
}

fn default_judge() -> String {
    "offline".into()
}
fn default_mode() -> String {
    "online".into()
}
fn default_reply_retries() -> u32 {
    1
}
fn default_cleanup_days() -> u32 {
    7
}
fn default_lease() -> u64 {
    600
}

impl Default for LlmSection {
    fn default() -> Self {
        LlmSection {
            judge: default_judge(),
            mode: default_mode(),
            invalid_reply_retries: default_reply_retries(),
            batch_retention_days: default_cleanup_days(),
            apply_lease_secs: default_lease(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// e.g. https://api.openai.com/v1, http://localhost:1234/v1 (LM Studio),
    /// http://localhost:11434/v1 (Ollama).
    pub base_url: String,
    pub model: String,
    /// Name of the environment variable holding the API key; none for local servers.
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default = "default_concurrency")]
    pub max_concurrency: usize,
    /// Client-side limits; 0 means unlimited.
    #[serde(default)]
    pub requests_per_minute: u32,
    #[serde(default)]
    pub tokens_per_minute: u32,
    #[serde(default = "default_timeout")]
    pub timeout_secs: f64,
    /// Retries after the first attempt on 429, 5xx, timeouts and refused connections.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// First backoff delay; doubles per retry (with jitter), capped at `max_backoff_secs`.
    #[serde(default = "default_backoff")]
    pub initial_backoff_secs: f64,
    #[serde(default = "default_max_backoff")]
    pub max_backoff_secs: f64,
    /// USD per million tokens, for the cost estimate.
    #[serde(default)]
    pub input_price_per_million: f64,
    #[serde(default)]
    pub output_price_per_million: f64,
    /// Ask for a JSON object reply (`response_format: json_object`); turn off for servers
    /// that reject the field.
    #[serde(default = "default_true")]
    pub json_mode: bool,
    /// The provider accepts the OpenAI Batch API (files + batches).
    #[serde(default)]
    pub batch: bool,
    #[serde(default = "default_max_tokens")]
    pub max_output_tokens: u32,
}

fn default_concurrency() -> usize {
    8
}
fn default_timeout() -> f64 {
    60.0
}
fn default_retries() -> u32 {
    4
}
fn default_backoff() -> f64 {
    0.5
}
fn default_max_backoff() -> f64 {
    30.0
}
fn default_true() -> bool {
    true
}
fn default_max_tokens() -> u32 {
    1024
}

/// Which memories `memlife refine` looks at (`[refine]` in memlife.toml).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RefineSection {
    pub verbose_threshold_chars: usize,
    pub min_age_days: i64,
    pub min_access_count: i64,
    pub cooldown_days: i64,
    pub max_rejections: i64,
    pub max_candidates: usize,
}

impl Default for RefineSection {
    fn default() -> Self {
        RefineSection {
            verbose_threshold_chars: 200,
            min_age_days: 7,
            min_access_count: 5,
            cooldown_days: 30,
            max_rejections: 3,
            max_candidates: 100,
        }
    }
}

/// `[retention]`: table versions older than `keep_versions_days` are removed by `memlife
/// optimize`; `undo` of a run whose versions are gone refuses, naming the window. The logs'
/// versions (`runs`, `audit_log`, `llm_batches`: undo never puts them back, and each keeps
/// every row it holds in its current version) go after `keep_log_versions_days`. The other
/// keys say when compaction rewrites a fragment: every rewrite of a large fragment leaves a
/// full copy of it on disk for the window, so large fragments are rewritten only when their
/// deleted rows have grown to be worth it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSection {
    pub keep_versions_days: f64,
    /// Versions of the tables undo does not put back (the logs and `memlife_meta`,
    /// `schema::REVERTIBLE` names the others) are kept this many days. Nothing reads them but
    /// undo's check that a `batches poll` run applied no integrate decisions: such a run is
    /// undoable while they last. On day 365 of the year bench, `runs` and `audit_log` took
    /// 35.2 MB with 14 days of versions and 23.2 MB with one, against 21.6 MB for a fresh
    /// copy (BENCHMARKS.md, session 46).
    pub keep_log_versions_days: f64,
    /// A fragment is rewritten whole once more than this fraction of its rows were deleted
    /// (an update that rewrites whole rows deletes the old ones).
    pub compact_deleted_fraction: f64,
    /// Fragments holding at least this fraction of the table's rows (and at least 256) are
    /// left as they are; smaller neighbours are merged up to that size. Every fragment costs
    /// each read of the table its files (a base file, one per column update since, a deletion
    /// file): at 1/32 the year bench's `memories` stayed at 34 fragments and 120 open files,
    /// and a recall on it took 1.8x what it took on a fresh copy of the same rows; at 1/4 it
    /// holds about 10 fragments, recall 1.26x, and the store was smaller too (each manifest
    /// lists every fragment, and every version keeps its manifest). At 1/8 and below the
    /// growing tail fragment is rewritten with each week's rows; at 1/4 too, but there are
    /// fewer fragments whose deletions need rewriting.
    pub compact_fragment_fraction: f64,
}

impl Default for RetentionSection {
    fn default() -> Self {
        RetentionSection {
            keep_versions_days: 14.0,
            keep_log_versions_days: 1.0,
            compact_deleted_fraction: 0.2,
            compact_fragment_fraction: 0.25,
        }
    }
}

impl RetentionSection {
    fn validate(&self) -> Result<()> {
        for (key, days) in [
            ("keep_versions_days", self.keep_versions_days),
            ("keep_log_versions_days", self.keep_log_versions_days),
        ] {
            if !(days.is_finite() && days >= 0.0) {
                bail!("retention.{key} = {days}: expected a number of days, 0 or more");
            }
        }
        for (key, value) in [
            ("compact_deleted_fraction", self.compact_deleted_fraction),
            ("compact_fragment_fraction", self.compact_fragment_fraction),
        ] {
            if !(value > 0.0 && value <= 1.0) {
                bail!("retention.{key} = {value}: expected a fraction above 0 and at most 1");
            }
        }
        Ok(())
    }
}

/// The embedder section; flags and environment variables override it.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedderSection {
    /// local, openai or hash.
    pub kind: Option<String>,
    pub model_dir: Option<PathBuf>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub dimensions: Option<u32>,
    pub concurrency: Option<usize>,
    pub timeout_secs: Option<u64>,
}

/// One model's similarity thresholds as the file gives them; a key left out comes from the
/// built-in calibration of that model, else from the seeds.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ThresholdsSection {
    pub link: Option<f32>,
    pub integrate: Option<f32>,
    pub cluster: Option<f32>,
    pub recall: Option<f32>,
}

/// The similarity a pair of memories needs before a job looks at it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Thresholds {
    /// `memlife link`: a neighbour pair is judged (`link.classify`) at this cosine similarity.
    pub link: f32,
    /// `memlife integrate`: existing memories this similar to a new fact are its candidates.
    pub integrate: f32,
    /// `memlife cluster`: a memory joins a hub's cluster at this similarity.
    pub cluster: f32,
    /// `memlife recall`: standard mode searches cold memories too when no hot or warm
    /// memory reaches this similarity to the query.
    pub recall: f32,
}

/// The seeds' thresholds (seed 003: 0.75 to link, 0.85 for candidates; seed 000: 0.85 to
/// cluster), chosen for other embedding models: used for a model with no calibration.
pub const SEED_THRESHOLDS: Thresholds = Thresholds {
    link: 0.75,
    integrate: 0.85,
    cluster: 0.85,
    // (no seed says; the link threshold's scale)
    recall: 0.75,
};

/// Thresholds calibrated on the labelled pairs of `data/eval` and LoCoMo (EVALUATION.md,
/// "Similarity of labelled pairs"). all-MiniLM-L6-v2: at 0.6, 94% of supersessions, 82% of
/// `supersedes` links and 66% of complementary facts (MERGE) reach the judge, against 3% of
/// each at the seeds' 0.85; clustering at 0.75 gathers restatements (every duplicate pair
/// scores above 0.7) and leaves most merely related memories (COEXIST) out. Recall widens
/// below 0.8: on the LoCoMo dev split after the nightly jobs (most memories cold), hit@10 is
/// 0.496 when standard mode never widens, 0.620 / 0.775 / 0.861 when it widens below 0.6 /
/// 0.7 / 0.8 (0.869 before the jobs; EVALUATION.md).
pub const BUILT_IN_THRESHOLDS: &[(&str, Thresholds)] = &[(
    crate::embedders::local::LOCAL_MODEL_NAME,
    Thresholds {
        link: 0.6,
        integrate: 0.6,
        cluster: 0.75,
        recall: 0.8,
    },
)];

/// Where a model's thresholds came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThresholdSource {
    /// `[thresholds."MODEL"]` in the config file (at least one key).
    Config,
    /// memlife's own calibration of this model.
    Calibrated,
    /// No calibration for this model: the seeds' values.
    Seed,
}

impl ThresholdSource {
    /// How a job report names the source: "the calibrated threshold of MODEL".
    pub fn label(self) -> &'static str {
        match self {
            ThresholdSource::Config => "the config file's",
            ThresholdSource::Calibrated => "the calibrated",
            ThresholdSource::Seed => "no calibration: the seeds'",
        }
    }
}

impl Config {
    /// The similarity thresholds for vectors made by `model`: the file's keys, else the
    /// built-in calibration of the model, else the seeds' values.
    pub fn thresholds_for(&self, model: &str) -> (Thresholds, ThresholdSource) {
        let built_in = BUILT_IN_THRESHOLDS
            .iter()
            .find(|(name, _)| *name == model)
            .map(|(_, t)| *t);
        let base = built_in.unwrap_or(SEED_THRESHOLDS);
        let mut source = if built_in.is_some() {
            ThresholdSource::Calibrated
        } else {
            ThresholdSource::Seed
        };
        let Some(file) = self.thresholds.get(model) else {
            return (base, source);
        };
        if file != &ThresholdsSection::default() {
            source = ThresholdSource::Config;
        }
        (
            Thresholds {
                link: file.link.unwrap_or(base.link),
                integrate: file.integrate.unwrap_or(base.integrate),
                cluster: file.cluster.unwrap_or(base.cluster),
                recall: file.recall.unwrap_or(base.recall),
            },
            source,
        )
    }

    /// Reads the file named by `--config`, else `$MEMLIFE_CONFIG` (clap passes either as
    /// `explicit`), else `./memlife.toml` if present, else the defaults.
    pub fn load(explicit: Option<&Path>) -> Result<Config> {
        let path = match explicit {
            Some(path) => Some(path.to_path_buf()),
            None => Some(PathBuf::from("memlife.toml")).filter(|p| p.is_file()),
        };
        let mut config = match &path {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read config file {}", path.display()))?;
                Self::parse(&text).with_context(|| format!("in config file {}", path.display()))?
            }
            None => Config::default(),
        };
        config.source = path;
        Ok(config)
    }

    pub fn parse(text: &str) -> Result<Config> {
        let config: Config = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        self.scores.validate().map_err(anyhow::Error::msg)?;
        self.cluster.validate().map_err(anyhow::Error::msg)?;
        self.summaries.validate().map_err(anyhow::Error::msg)?;
        self.recall.validate().map_err(anyhow::Error::msg)?;
        self.retention.validate()?;
        self.prune.validate().map_err(anyhow::Error::msg)?;
        self.sessions.validate().map_err(anyhow::Error::msg)?;
        self.insights.validate().map_err(anyhow::Error::msg)?;
        self.anchor.validate().map_err(anyhow::Error::msg)?;
        self.distill.validate().map_err(anyhow::Error::msg)?;
        for (model, t) in &self.thresholds {
            for (key, value) in [
                ("link", t.link),
                ("integrate", t.integrate),
                ("cluster", t.cluster),
            ] {
                if let Some(v) = value
                    && !(-1.0..=1.0).contains(&v)
                {
                    bail!(
                        "thresholds.\"{model}\".{key} = {v}: a cosine similarity is between -1 and 1"
                    );
                }
            }
        }
        if !["offline", "providers"].contains(&self.llm.judge.as_str()) {
            bail!(
                "llm.judge = {:?}: expected \"offline\" or \"providers\"",
                self.llm.judge
            );
        }
        if !["online", "batch"].contains(&self.llm.mode.as_str()) {
            bail!(
                "llm.mode = {:?}: expected \"online\" or \"batch\"",
                self.llm.mode
            );
        }
        for (name, p) in &self.providers {
            if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://")) {
                bail!(
                    "providers.{name}.base_url = {:?}: expected an http(s) URL",
                    p.base_url
                );
            }
            if p.max_concurrency == 0 {
                bail!("providers.{name}.max_concurrency must be at least 1");
            }
            if p.timeout_secs.is_nan() || p.timeout_secs <= 0.0 {
                bail!("providers.{name}.timeout_secs must be positive");
            }
            if p.input_price_per_million < 0.0 || p.output_price_per_million < 0.0 {
                bail!("providers.{name}: prices cannot be negative");
            }
        }
        for (role, chain) in &self.roles {
            if chain.is_empty() {
                bail!("roles.{role} lists no provider");
            }
            for provider in chain {
                if !self.providers.contains_key(provider) {
                    bail!(
                        "roles.{role} names provider {provider:?}, which is not defined under [providers] (known: {})",
                        self.providers
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
            }
        }
        for (task, role) in &self.tasks {
            if !DEFAULT_TASK_ROLES.iter().any(|(t, _)| t == task) {
                bail!(
                    "tasks.{task:?} is not a task of memlife (known: {})",
                    DEFAULT_TASK_ROLES
                        .iter()
                        .map(|(t, _)| *t)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if !self.roles.contains_key(role) {
                bail!("tasks.{task:?} uses role {role:?}, which is not defined under [roles]");
            }
        }
        Ok(())
    }

    /// The role a task uses.
    pub fn role_of(&self, task: &str) -> String {
        self.tasks.get(task).cloned().unwrap_or_else(|| {
            DEFAULT_TASK_ROLES
                .iter()
                .find(|(t, _)| *t == task)
                .map_or("fast", |(_, r)| r)
                .to_string()
        })
    }

    /// The provider chain of a task: its role's providers, in order.
    pub fn chain_of(&self, task: &str) -> Result<Vec<(String, ProviderConfig)>> {
        let role = self.role_of(task);
        let Some(chain) = self.roles.get(&role) else {
            bail!(
                "task {task} uses role {role:?}, but no [roles] entry defines it{}",
                self.source
                    .as_ref()
                    .map(|p| format!(" in {}", p.display()))
                    .unwrap_or_else(|| " (no config file was found: pass --config)".into())
            );
        };
        Ok(chain
            .iter()
            .map(|name| (name.clone(), self.providers[name].clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[llm]
judge = "providers"

[providers.nano]
base_url = "https://api.openai.com/v1"
model = "gpt-5-nano"
api_key_env = "OPENAI_API_KEY"
max_concurrency = 32
input_price_per_million = 0.05
output_price_per_million = 0.4
batch = true

[providers.ollama]
base_url = "http://localhost:11434/v1"
model = "qwen2.5:3b"

[roles]
fast = ["nano", "ollama"]
reasoning = ["nano"]

[tasks]
"consolidate.verify" = "fast"
"#;

    #[test]
    fn a_full_file_parses_and_resolves_chains() {
        let config = Config::parse(EXAMPLE).unwrap();
        let chain = config.chain_of("link.classify").unwrap();
        assert_eq!(
            chain.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["nano", "ollama"]
        );
        assert_eq!(chain[1].1.max_concurrency, 8, "defaults fill omitted keys");
        assert_eq!(config.role_of("refine"), "reasoning");
    }

    #[test]
    fn thresholds_come_from_the_file_then_the_calibration_then_the_seeds() {
        let config = Config::parse(
            "[thresholds.\"all-MiniLM-L6-v2\"]\nlink = 0.5\n[thresholds.\"my-model\"]\ncluster = 0.9",
        )
        .unwrap();
        let (mini, source) = config.thresholds_for("all-MiniLM-L6-v2");
        assert_eq!(source, ThresholdSource::Config);
        assert_eq!((mini.link, mini.integrate, mini.cluster), (0.5, 0.6, 0.75));
        let (mine, _) = config.thresholds_for("my-model");
        assert_eq!((mine.link, mine.integrate, mine.cluster), (0.75, 0.85, 0.9));
        let defaults = Config::default();
        assert_eq!(
            defaults.thresholds_for("all-MiniLM-L6-v2"),
            (BUILT_IN_THRESHOLDS[0].1, ThresholdSource::Calibrated)
        );
        assert_eq!(
            defaults.thresholds_for("text-embedding-3-small"),
            (SEED_THRESHOLDS, ThresholdSource::Seed)
        );
    }

    #[test]
    fn mistakes_are_named() {
        for (text, expected) in [
            (
                "[roles]\nfast = [\"nope\"]",
                "roles.fast names provider \"nope\"",
            ),
            ("[llm]\njudge = \"magic\"", "llm.judge"),
            ("[tasks]\n\"summarise\" = \"fast\"", "not a task of memlife"),
            (
                "[providers.a]\nbase_url = \"ftp://x\"\nmodel = \"m\"",
                "providers.a.base_url",
            ),
            ("[provider.a]\nmodel = \"m\"", "unknown field"),
            (
                "[thresholds.\"m\"]\nlink = 1.5",
                "thresholds.\"m\".link = 1.5",
            ),
            ("[thresholds.\"m\"]\nlinks = 0.5", "unknown field"),
            (
                "[providers.a]\nbase_url = \"http://x\"\nmodel = \"m\"\napi_key = \"sk-1\"",
                "unknown field",
            ),
        ] {
            let error = format!("{:#}", Config::parse(text).unwrap_err());
            assert!(error.contains(expected), "{text:?} gave {error}");
        }
    }
}

#[cfg(test)]
mod example_file {
    #[test]
    fn the_shipped_example_config_is_valid() {
        let text = include_str!("../jobs/memlife.example.toml");
        let config = super::Config::parse(text).unwrap();
        assert_eq!(config.chain_of("consolidate.propose").unwrap().len(), 3);
        assert_eq!(config.llm.judge, "providers");
        // The example spells out the defaults of [retention].
        assert_eq!(config.retention, super::RetentionSection::default());
    }
}
