//! The context of one `memlife` invocation, built once from the global flags: the database
//! location, the output mode and the configuration file. The heavy parts (the Lance
//! connection, the parsed memlife.toml) are opened lazily, on first use, so a command that
//! needs neither (`init`, `synth`, `mock-llm`) never touches them, and `init` and `sql` still
//! work beside a broken memlife.toml.

use std::path::PathBuf;

use anyhow::Result;
use chrono::{DateTime, Utc};
use tokio::sync::OnceCell;

use crate::config::Config;
use crate::embedders::{Embedder, EmbedderArgs};
use crate::llm::{Llm, LlmArgs};
use crate::logic::shard::{Shard, UserScope};
use crate::model::clock::Clock;
use crate::store::Store;

/// The flags every job shares.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct JobScope {
    /// Process one user only (default: every user, each independently).
    #[arg(long, conflicts_with = "shard")]
    pub user: Option<String>,

    /// Process one shard of the users: I/N is the I-th (from 0) of N shards, users split by a
    /// stable hash of their id, so N runs given 0/N to N-1/N process every user exactly once
    /// (on one host or many; the Airflow DAG fans them out).
    #[arg(long, value_name = "I/N")]
    pub shard: Option<crate::logic::shard::Shard>,

    /// Compute and report, but write nothing (not even the run log).
    #[arg(long)]
    pub dry_run: bool,
}

/// The global flags every command shares.
#[derive(clap::Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Database location: a folder, memory://, or an object-store URI.
    #[arg(
        long,
        global = true,
        env = "MEMLIFE_DB",
        default_value = "./memlife.db"
    )]
    pub db: String,

    /// Print a machine-readable JSON report on stdout.
    #[arg(long, global = true)]
    pub json: bool,

    /// Configuration file (default: ./memlife.toml when it exists; built-in defaults otherwise).
    #[arg(long, global = true, env = "MEMLIFE_CONFIG")]
    pub config: Option<PathBuf>,
}

pub struct App {
    pub db: String,
    pub json: bool,
    config_path: Option<PathBuf>,
    store: OnceCell<Store>,
    config: OnceCell<Config>,
}

impl App {
    pub fn new(global: GlobalArgs) -> App {
        crate::progress::allow(global.json);
        App {
            db: global.db,
            json: global.json,
            config_path: global.config,
            store: OnceCell::new(),
            config: OnceCell::new(),
        }
    }

    /// The configuration file named by `--config` or `MEMLIFE_CONFIG`, if any.
    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.config_path.as_deref()
    }

    /// An invocation over a store already open (an in-memory database, a library caller).
    pub fn with_store(store: Store, json: bool) -> App {
        App {
            db: store.uri().to_string(),
            json,
            config_path: None,
            store: OnceCell::new_with(Some(store)),
            config: OnceCell::new(),
        }
    }

    /// The database, opened on first use (schema version checked, migrated in place).
    pub async fn store(&self) -> Result<&Store> {
        Ok(self.store.get_or_try_init(|| Store::open(&self.db)).await?)
    }

    /// memlife.toml, read and validated on first use.
    pub async fn config(&self) -> Result<&Config> {
        self.config
            .get_or_try_init(|| async { Config::load(self.config_path.as_deref()) })
            .await
    }

    /// The LLM layer for a job's `--llm`/`--mode` choice.
    pub async fn llm(&self, args: &LlmArgs) -> Result<Llm> {
        Llm::new(self.config().await?, args)
    }

    /// The embedder chosen by flags, environment, then `[embedder]` of memlife.toml.
    pub async fn embedder(
        &self,
        args: &EmbedderArgs,
        dim: usize,
        batch_size: usize,
    ) -> Result<Embedder> {
        Embedder::from_args(args, &self.config().await?.embedder, dim, batch_size)
    }

    /// The context of one job run: the store, the user scope, dry-run and the clock.
    pub async fn job_ctx(&self, scope: &JobScope, now: Option<Clock>) -> Result<JobCtx<'_>> {
        let now = Clock::or_now(now).time();
        let store = self.store().await?.clone();
        let (user_scope, shard_users) = match (&scope.user, scope.shard) {
            (Some(user), _) => (UserScope::One(user.clone()), Vec::new()),
            (None, Some(shard)) => (
                UserScope::Shard(shard),
                users_in_shard(&store, shard).await?,
            ),
            (None, None) => (UserScope::All, Vec::new()),
        };
        Ok(JobCtx {
            app: self,
            store,
            user: scope.user.clone(),
            scope: user_scope,
            shard_users,
            dry_run: scope.dry_run,
            now,
        })
    }
}

/// The users of a shard among those the store holds memories or entities of, sorted.
pub async fn users_in_shard(store: &Store, shard: Shard) -> Result<Vec<String>> {
    let mut users = std::collections::BTreeSet::new();
    for table in ["memories", "entities"] {
        users.extend(
            store
                .distinct_users(table)
                .await?
                .into_iter()
                .filter(|u| shard.contains(u)),
        );
    }
    Ok(users.into_iter().collect())
}

/// What every job gets: built once by `App::job_ctx`, read-only afterwards.
pub struct JobCtx<'a> {
    /// The invocation: configuration, LLM layer and embedder on demand.
    pub app: &'a App,
    pub store: Store,
    /// One user, or all users when `None` (`scope` says which users exactly).
    pub user: Option<String>,
    /// The users this run processes: every user, one (`--user`) or a shard (`--shard I/N`).
    pub scope: UserScope,
    /// With `--shard`: the shard's users among the store's memories and entities (sorted),
    /// resolved once, for the scans' `user_id IN (...)` filters.
    pub shard_users: Vec<String>,
    /// Compute and report; write nothing (not even the run row).
    pub dry_run: bool,
    /// The run's clock reading: every default timestamp of the run uses it.
    pub now: DateTime<Utc>,
}

impl JobCtx<'_> {
    /// A SQL predicate on `user_id` selecting the run's users; `None` for every user.
    pub fn user_filter(&self) -> Option<String> {
        match &self.scope {
            UserScope::All => None,
            UserScope::One(user) => Some(format!("user_id = {}", crate::store::sql_string(user))),
            UserScope::Shard(_) => Some(crate::store::users_in(&self.shard_users)),
        }
    }

    /// `user_filter` joined with `rest`.
    pub fn user_filter_and(&self, rest: &str) -> String {
        match self.user_filter() {
            Some(users) => format!("{users} AND {rest}"),
            None => rest.to_string(),
        }
    }

    pub fn shard(&self) -> Option<Shard> {
        match self.scope {
            UserScope::Shard(shard) => Some(shard),
            _ => None,
        }
    }

    /// What the job lock is taken for: a user, a shard ("shard I/N"), or the whole job.
    pub fn lock_scope(&self) -> Option<String> {
        match &self.scope {
            UserScope::All => None,
            UserScope::One(user) => Some(user.clone()),
            UserScope::Shard(shard) => Some(format!("shard {shard}")),
        }
    }
}
