//! The frame every job shares, and the registry of jobs. A job is one file,
//! `src/jobs/<job>.rs`: its clap arguments (with `JobScope` flattened in), its
//! `run(&JobCtx, &Args) -> Result<JobReport>`, its report counts and, if it submits to the
//! Batch API, its `Applier`. Registering it is one line of `register_jobs!` below: that line
//! makes its subcommand, its `JobName` (as recorded in `runs` and `llm_batches`) and the
//! applier lookup `batches poll` uses. Every run leaves a row in `runs`; its `JobReport`
//! prints as a table for people or as JSON for schedulers and gives the exit status.

pub mod anchor;
pub mod cluster;
pub mod consolidate;
pub mod describe;
pub mod distill;
pub mod embed;
pub mod entities;
pub mod entity_gc;
pub mod import;
pub mod insights;
pub mod integrate;
pub mod integrate_batch;
pub mod link;
pub mod lock;
pub mod optimize;
pub mod prune;
pub mod refine;
pub mod review_queue;
pub mod scores;
pub mod sessions;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use anyhow::Result;
use chrono::Utc;
use serde::Serialize;

use crate::app::App;
pub use crate::app::{JobCtx, JobScope};
use crate::exit::ExitStatus;
use crate::llm::batch::Applier;
use crate::model::encoding::Cell;
use crate::model::rows::RowBuilder;
use crate::model::schema::RUNS;

/// What the frame asks of a job's arguments.
pub trait Job {
    /// The shared `--user` / `--dry-run` flags.
    fn scope(&self) -> &JobScope;
    /// The clock the run computes at, for jobs that take `--now`; default the current time.
    fn clock(&self) -> Option<crate::model::clock::Clock> {
        None
    }
    /// What applies this job's Batch API results in `batches poll`, if it submits any.
    fn applier() -> Option<Box<dyn Applier>>
    where
        Self: Sized,
    {
        None
    }
}

/// The clock a batch is applied at: the clock of the run that submitted it (its items carry
/// it), so a batch applied late, or twice after a crash, writes the same times as an online
/// run at that clock would.
pub fn batch_clock(
    record: &crate::llm::batch::BatchRecord,
    items: &[crate::llm::Item],
) -> Result<i64> {
    // A record always has its submission time: the fallback when no item carries a clock.
    Ok(items
        .first()
        .map(|i| i.input.now.as_str())
        .and_then(crate::model::encoding::parse_timestamp)
        .unwrap_or(record.submitted_at))
}

/// Declares the jobs: each line gives the `JobName` variant, the job's module and arguments,
/// and its name (the subcommand and the `job` column of `runs` and `llm_batches`).
macro_rules! register_jobs {
    ($($variant:ident => $module:ident::$args:ident, $name:literal;)*) => {
        /// The scheduled jobs, one subcommand each (their help is their arguments' doc).
        #[derive(clap::Subcommand, Debug)]
        pub enum JobCommand {
            $(#[command(name = $name)] $variant($module::$args),)*
        }

        /// A job's name, as its subcommand and in `runs.job` and `llm_batches.job`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum JobName {
            $($variant,)*
        }

        impl JobName {
            pub const ALL: &'static [JobName] = &[$(JobName::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(JobName::$variant => $name,)*
                }
            }

            pub fn parse(name: &str) -> Option<JobName> {
                Self::ALL.iter().copied().find(|job| job.as_str() == name)
            }

            /// What applies this job's Batch API results, if it submits any.
            pub fn applier(self) -> Option<Box<dyn Applier>> {
                match self {
                    $(JobName::$variant => <$module::$args as Job>::applier(),)*
                }
            }
        }

        impl JobCommand {
            pub fn name(&self) -> JobName {
                match self {
                    $(JobCommand::$variant(_) => JobName::$variant,)*
                }
            }

            fn job(&self) -> &dyn Job {
                match self {
                    $(JobCommand::$variant(args) => args,)*
                }
            }

            async fn dispatch(&self, ctx: &JobCtx<'_>) -> Result<JobReport> {
                match self {
                    $(JobCommand::$variant(args) => $module::run(ctx, args).await,)*
                }
            }
        }
    };
}

register_jobs! {
    Import => import::ImportArgs, "import";
    Embed => embed::EmbedArgs, "embed";
    Scores => scores::ScoresArgs, "scores";
    Link => link::LinkArgs, "link";
    Cluster => cluster::ClusterArgs, "cluster";
    Consolidate => consolidate::ConsolidateArgs, "consolidate";
    Refine => refine::RefineArgs, "refine";
    Entities => entities::EntitiesArgs, "entities";
    EntityGc => entity_gc::EntityGcArgs, "entity-gc";
    Describe => describe::DescribeArgs, "describe";
    Integrate => integrate::IntegrateArgs, "integrate";
    Optimize => optimize::OptimizeArgs, "optimize";
    Prune => prune::PruneArgs, "prune";
    Sessions => sessions::SessionsArgs, "sessions";
    Insights => insights::InsightsArgs, "insights";
    Anchor => anchor::AnchorArgs, "anchor";
    Distill => distill::DistillArgs, "distill";
}

impl std::fmt::Display for JobName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Runs one job from the command line: builds its context, runs it, prints its report.
pub async fn run(app: &App, command: &JobCommand, out: &mut dyn Write) -> Result<ExitStatus> {
    let report = run_report(app, command).await?;
    report.print(app.json, out)?;
    Ok(report.exit_status())
}

/// Runs one job and returns its report (`nightly` runs its steps so).
pub async fn run_report(app: &App, command: &JobCommand) -> Result<JobReport> {
    let job = command.job();
    let ctx = app.job_ctx(job.scope(), job.clock()).await?;
    command.dispatch(&ctx).await
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Done,
    Partial,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Done => "done",
            Status::Partial => "partial",
            Status::Failed => "failed",
        }
    }
}

/// One item a job could not process, and why.
#[derive(Clone, Debug, Serialize)]
pub struct ItemFailure {
    pub item: String,
    pub reason: String,
}

/// The outcome of one job run.
#[derive(Debug, Serialize)]
pub struct JobReport {
    pub job: String,
    pub run_id: Option<String>,
    pub status: Status,
    pub dry_run: bool,
    pub user: Option<String>,
    /// `--shard I/N`, when the run processed one shard of the users.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    pub counts: BTreeMap<String, u64>,
    pub failures: Vec<ItemFailure>,
    pub notes: Vec<String>,
    pub duration_ms: u64,
    /// Wall time of the run's phases, for jobs that report them (consolidate: where the time
    /// goes besides the LLM).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub phases_ms: BTreeMap<String, u64>,
    /// `phases_ms` at full precision (`phase`): a phase summed over many short steps (a
    /// table's step of `optimize` often takes under a millisecond) is rounded once.
    #[serde(skip)]
    phase_time: BTreeMap<String, std::time::Duration>,
    pub error: Option<String>,
    /// Calls, tokens, retries, failures and cost per provider, for jobs that judge with an LLM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<crate::llm::LlmUsage>,
}

/// Tables (and rows written since the last index update) below this size are scanned, not
/// indexed: see `Store::refresh_scalar_indexes`.
pub const SCALAR_INDEX_MIN_ROWS: usize = 10_000;

/// How many failures the human-readable report lists before summarising.
const FAILURES_SHOWN: usize = 20;

impl JobReport {
    pub fn new(job: &str, ctx: &JobCtx<'_>) -> JobReport {
        JobReport {
            job: job.to_string(),
            run_id: None,
            status: Status::Done,
            dry_run: ctx.dry_run,
            user: ctx.user.clone(),
            shard: ctx.shard().map(|s| s.to_string()),
            counts: BTreeMap::new(),
            failures: Vec::new(),
            notes: Vec::new(),
            duration_ms: 0,
            phases_ms: BTreeMap::new(),
            phase_time: BTreeMap::new(),
            error: None,
            llm: None,
        }
    }

    /// Adds the time since `since` to phase `name`.
    pub fn phase(&mut self, name: &str, since: Instant) {
        let total = self.phase_time.entry(name.to_string()).or_default();
        *total += since.elapsed();
        self.phases_ms
            .insert(name.to_string(), total.as_millis() as u64);
    }

    pub fn count(&mut self, name: &str, value: u64) {
        self.counts.insert(name.to_string(), value);
    }

    pub fn exit_status(&self) -> ExitStatus {
        match self.status {
            Status::Done => ExitStatus::Success,
            Status::Partial => ExitStatus::Failure,
            Status::Failed => ExitStatus::Error,
        }
    }

    pub fn print(&self, json: bool, out: &mut dyn Write) -> std::io::Result<()> {
        if json {
            serde_json::to_writer_pretty(&mut *out, self)?;
            return writeln!(out);
        }
        let mut header = format!("{}: {}", self.job, self.status.as_str());
        if self.dry_run {
            header.push_str(" (dry run: nothing written)");
        }
        writeln!(out, "{header}")?;
        if let Some(run_id) = &self.run_id {
            writeln!(out, "  run_id      {run_id}")?;
        }
        if let Some(user) = &self.user {
            writeln!(out, "  user        {user}")?;
        }
        if let Some(shard) = &self.shard {
            writeln!(out, "  shard       {shard}")?;
        }
        for (name, value) in &self.counts {
            writeln!(out, "  {name:<20} {value}")?;
        }
        writeln!(out, "  duration    {} ms", self.duration_ms)?;
        if !self.phases_ms.is_empty() {
            let phases: Vec<String> = self
                .phases_ms
                .iter()
                .map(|(name, ms)| format!("{name} {ms} ms"))
                .collect();
            writeln!(out, "  phases      {}", phases.join(", "))?;
        }
        if let Some(llm) = &self.llm {
            writeln!(
                out,
                "  judge: {} ({} mode), {} items, {} failed, est. ${:.4}",
                llm.judge, llm.mode, llm.items, llm.failed_items, llm.estimated_cost_usd
            )?;
            for (name, p) in &llm.providers {
                writeln!(
                    out,
                    "    {name:<12} served {:<6} requests {:<6} retries {:<4} failed calls {:<4} invalid replies {:<4} tokens {}/{}",
                    p.served,
                    p.requests,
                    p.retries,
                    p.failed_calls,
                    p.invalid_replies,
                    p.input_tokens,
                    p.output_tokens
                )?;
            }
        }
        for note in &self.notes {
            writeln!(out, "  note: {note}")?;
        }
        if let Some(error) = &self.error {
            writeln!(out, "  error: {error}")?;
        }
        if !self.failures.is_empty() {
            writeln!(out, "  failed items ({}):", self.failures.len())?;
            for failure in self.failures.iter().take(FAILURES_SHOWN) {
                writeln!(out, "    {}: {}", failure.item, failure.reason)?;
            }
            if self.failures.len() > FAILURES_SHOWN {
                writeln!(
                    out,
                    "    ... and {} more (use --json for the full list)",
                    self.failures.len() - FAILURES_SHOWN
                )?;
            }
        }
        Ok(())
    }
}

/// Where a run's time went, phase by phase, for its report's notes: a person reading why a
/// nightly job got slower sees which read or write grew.
pub struct Phases {
    at: Instant,
    laps: Vec<(&'static str, u128)>,
}

impl Phases {
    pub fn start() -> Self {
        Phases {
            at: Instant::now(),
            laps: Vec::new(),
        }
    }

    /// The time since the last lap, as `name`'s.
    pub fn lap(&mut self, name: &'static str) {
        self.laps.push((name, self.at.elapsed().as_millis()));
        self.at = Instant::now();
    }

    /// "ms by phase: memories 12, scans 3, ..."
    pub fn note(&self) -> String {
        let laps: Vec<String> = self
            .laps
            .iter()
            .map(|(n, ms)| format!("{n} {ms}"))
            .collect();
        format!("ms by phase: {}", laps.join(", "))
    }
}

/// The users in the run's scope with a memory matching `predicate` (reads `user_id` only):
/// how `link` and `entities` find the users with something new to them.
pub async fn users_with_memories_where(ctx: &JobCtx<'_>, predicate: &str) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Owner {
        user_id: String,
    }
    let filter = ctx.user_filter_and(predicate);
    let users: std::collections::BTreeSet<String> = ctx
        .store
        .scan_rows::<Owner>("memories", Some(&filter))
        .await?
        .into_iter()
        .map(|o| o.user_id)
        .filter(|u| ctx.scope.contains(u))
        .collect();
    Ok(users.into_iter().collect())
}

/// New memories a job made (narratives, patterns, facts) embedded by `embedder` and upserted,
/// each with the model recorded.
pub async fn embed_and_write(
    store: &crate::store::Store,
    embedder: &crate::embedders::Embedder,
    rows: &[&crate::model::typed::MemoryRow],
    now: i64,
) -> Result<()> {
    use crate::embedders::Embedded;
    let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
    let mut vectors = Vec::with_capacity(rows.len());
    let mut written = Vec::with_capacity(rows.len());
    for (row, e) in rows.iter().zip(embedder.embed(&texts).await?) {
        let Embedded::Vector { values, .. } = e else {
            anyhow::bail!("the embedder refused the memory {}", row.id);
        };
        vectors.push(Some(values));
        written.push(crate::model::typed::MemoryRow {
            embedding_model: Some(embedder.model_name().to_string()),
            link_mark: None,
            entity_mark: None,
            scores_due_at: None,
            ..(*row).clone()
        });
    }
    store.upsert_memories(&written, &vectors, now).await?;
    Ok(())
}

/// The targets of `operation`'s audit rows by runs not undone: what a job that decides once
/// per key (insights' clusters, distill's groups) has asked about before.
pub async fn asked_before(
    store: &crate::store::Store,
    operation: &str,
) -> Result<std::collections::BTreeSet<String>> {
    let filter = crate::store::without_undone(
        store,
        &format!("operation = {}", crate::store::sql_string(operation)),
    )
    .await?;
    #[derive(serde::Deserialize)]
    struct Logged {
        target_id: Option<String>,
    }
    let rows: Vec<Logged> = store
        .scan_rows(crate::model::schema::AUDIT_LOG.name, Some(&filter))
        .await?;
    Ok(rows.into_iter().filter_map(|r| r.target_id).collect())
}

/// Which of `runs` did not finish (abandoned when killed, or failed): the runs whose logged
/// decisions a later run completes from the audit log.
pub async fn killed_runs(
    store: &crate::store::Store,
    runs: &[String],
) -> Result<std::collections::BTreeSet<String>> {
    #[derive(serde::Deserialize)]
    struct Run {
        run_id: String,
    }
    if runs.is_empty() {
        return Ok(Default::default());
    }
    let filter = format!(
        "run_id IN ({}) AND status IN ('abandoned', 'failed')",
        crate::store::sql_list(runs)
    );
    Ok(store
        .scan_rows::<Run>(RUNS.name, Some(&filter))
        .await?
        .into_iter()
        .map(|r| r.run_id)
        .collect())
}

/// The embedding model most of a user's vectors come from (ties by name), and how many rows
/// another model embedded: similarities are only meaningful between vectors of one model.
/// `column` is the index of `embedding_model` in `batches`.
pub fn main_model<'a>(models: impl IntoIterator<Item = Option<&'a str>>) -> (String, usize) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for model in models {
        *counts.entry(model.unwrap_or("").to_string()).or_default() += 1;
    }
    let model = crate::logic::entity_writes::most_used(&counts);
    let others = counts.values().sum::<usize>() - counts.get(&model).copied().unwrap_or(0);
    (model, others)
}

/// Distinct users of a table (or the one in scope), sorted.
pub async fn users_of(ctx: &JobCtx<'_>, table: &str) -> Result<Vec<String>> {
    if let Some(user) = &ctx.user {
        return Ok(vec![user.clone()]);
    }
    let mut users = ctx.store.distinct_users(table).await?;
    users.retain(|u| ctx.scope.contains(u));
    Ok(users)
}

/// The `runs` row of one execution: written as `running` when the job starts and replaced
/// with the outcome when it ends, so a killed job leaves a visible `running` row behind.
///
/// It also holds the job's lock (`lock`) from before the first write to after the last, so two
/// processes of one job and user never write at once; a run that takes the lock over from a
/// killed one marks that one's `running` rows `abandoned`.
pub struct RunLog {
    run_id: String,
    job: String,
    params: String,
    started: Instant,
    started_at: i64,
    lock: Option<lock::JobLock>,
    versions_before: Option<BTreeMap<String, u64>>,
}

impl RunLog {
    pub async fn start(ctx: &JobCtx<'_>, job: &str, params: &serde_json::Value) -> Result<RunLog> {
        let run_id = uuid::Uuid::new_v4().to_string();
        let lock = if ctx.dry_run {
            None
        } else {
            Some(lock::acquire(
                ctx.store.uri(),
                job,
                ctx.lock_scope().as_deref(),
                &run_id,
            )?)
        };
        // What the tables were before this run wrote anything (`memlife undo` diffs them).
        let versions_before = if ctx.dry_run {
            None
        } else {
            Some(ctx.store.table_versions().await)
        };
        // Every run records the clock it computed at, so the store's own time (not the wall
        // clock) says how old what it wrote is (`optimize`'s retention window).
        let mut params = params.clone();
        if let Some(object) = params.as_object_mut() {
            object
                .entry("clock")
                .or_insert_with(|| serde_json::Value::String(ctx.now.to_rfc3339()));
            if let Some(shard) = ctx.shard() {
                object.insert("shard".into(), shard.to_string().into());
            }
        }
        let log = RunLog {
            run_id,
            job: job.to_string(),
            params: params.to_string(),
            started: Instant::now(),
            started_at: Utc::now().timestamp_micros(),
            lock,
            versions_before,
        };
        if !ctx.dry_run {
            if let Some(lock) = &log.lock {
                abandon_killed_runs(ctx, job, &log.run_id, lock).await?;
            }
            log.write(ctx, None).await?;
            crate::crash::point(&format!("{job}.started"));
        }
        Ok(log)
    }

    /// For a job run that finds nothing to do and writes no run row of its own (an idle
    /// `batches poll`): marks killed runs of the job `abandoned` all the same, if no other
    /// process holds the job's lock. Returns how many were marked.
    pub async fn reap_abandoned(ctx: &JobCtx<'_>, job: &str) -> Result<u64> {
        if ctx.dry_run {
            return Ok(0);
        }
        let run_id = uuid::Uuid::new_v4().to_string();
        let Ok(lock) = lock::acquire(ctx.store.uri(), job, ctx.lock_scope().as_deref(), &run_id)
        else {
            // Another process runs the job: its runs are alive.
            return Ok(0);
        };
        let marked = abandon_killed_runs(ctx, job, &run_id, &lock).await?;
        lock.release();
        Ok(marked)
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Submits a user's `items` of one task to the Batch API for this run's job, at most
    /// 50,000 requests per batch (the API's limit per file); counts `batches_submitted` and
    /// `items_submitted` and notes each batch (`what`: what an item is, e.g. "pairs").
    pub async fn submit_batches(
        &self,
        ctx: &JobCtx<'_>,
        llm: &crate::llm::Llm,
        user: &str,
        (task, items, what): (crate::llm::tasks::Task, &[crate::llm::Item], &str),
        counts: &mut BTreeMap<String, u64>,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        for chunk in items.chunks(50_000) {
            let record = crate::llm::batch::submit(
                &ctx.store,
                llm,
                &self.job,
                &self.run_id,
                Some(user),
                task,
                chunk,
            )
            .await?;
            *counts.entry("batches_submitted".into()).or_default() += 1;
            *counts.entry("items_submitted".into()).or_default() += chunk.len() as u64;
            notes.push(format!(
                "user {user}: {} {what} submitted as batch {} ({}); `memlife batches poll` applies them",
                chunk.len(),
                record.batch_key,
                record.remote_batch_id.as_deref().unwrap_or("?")
            ));
        }
        Ok(())
    }

    /// `submit_batches` for items of several users: `(user, item)` pairs, one batch set per
    /// user.
    pub async fn submit_batches_by_user(
        &self,
        ctx: &JobCtx<'_>,
        llm: &crate::llm::Llm,
        (task, items, what): (
            crate::llm::tasks::Task,
            impl IntoIterator<Item = (String, crate::llm::Item)>,
            &str,
        ),
        counts: &mut BTreeMap<String, u64>,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        let mut by_user: BTreeMap<String, Vec<crate::llm::Item>> = BTreeMap::new();
        for (user, item) in items {
            by_user.entry(user).or_default().push(item);
        }
        for (user, items) in by_user {
            self.submit_batches(ctx, llm, &user, (task, &items, what), counts, notes)
                .await?;
        }
        Ok(())
    }

    /// Batch mode for jobs whose requests are about memories (sessions, insights, distill):
    /// the `(user, request)` pairs none of whose memories wait in a batch of this job not
    /// applied yet are submitted, one batch set per user; the others are counted as
    /// `waiting` (a count name), so nothing is asked twice. A dry run submits nothing.
    /// Returns how many requests were (or, dry, would be) submitted.
    pub async fn submit_unless_pending(
        &self,
        ctx: &JobCtx<'_>,
        llm: &crate::llm::Llm,
        (task, requests, what, waiting): (
            crate::llm::tasks::Task,
            Vec<(String, crate::llm::Item)>,
            &str,
            &str,
        ),
        counts: &mut BTreeMap<String, u64>,
        notes: &mut Vec<String>,
    ) -> Result<usize> {
        let pending = crate::llm::batch::memories_in_pending(&ctx.store, &self.job).await?;
        let (held, ready): (Vec<_>, Vec<_>) = requests
            .into_iter()
            .partition(|(_, item)| item.input.memories.iter().any(|m| pending.contains(&m.id)));
        if !held.is_empty() {
            counts.insert(waiting.into(), held.len() as u64);
        }
        let submitted = ready.len();
        if !ctx.dry_run && !ready.is_empty() {
            self.submit_batches_by_user(ctx, llm, (task, ready, what), counts, notes)
                .await?;
        }
        Ok(submitted)
    }

    /// Settles the report's status and duration and records them.
    pub async fn finish(self, ctx: &JobCtx<'_>, report: &mut JobReport) -> Result<()> {
        report.duration_ms = self.started.elapsed().as_millis() as u64;
        if report.status == Status::Done && !report.failures.is_empty() {
            report.status = Status::Partial;
        }
        if !ctx.dry_run {
            crate::crash::point(&format!("{}.finishing", self.job));
            let mut versions_after = ctx.store.table_versions().await;
            // Lookups by id stay fast as tables grow; a failure here loses nothing. Only the
            // tables this run wrote (or another process wrote meanwhile) are looked at: rows
            // another table gained earlier (a recall's audit rows, say) are folded in by the
            // next job that writes it, or by `optimize`; until then Lance scans them.
            let written = tables_written(self.versions_before.as_ref(), &versions_after);
            match ctx
                .store
                .refresh_scalar_indexes(SCALAR_INDEX_MIN_ROWS, Some(&written))
                .await
            {
                Ok(changes) => {
                    if !changes.is_empty() {
                        versions_after = ctx.store.table_versions().await;
                    }
                    report.notes.extend(changes.iter().map(|c| {
                        format!(
                            "index {}.{}: {} ({} rows, {} ms)",
                            c.table, c.column, c.action, c.rows, c.ms
                        )
                    }))
                }
                Err(e) => {
                    versions_after = ctx.store.table_versions().await;
                    report
                        .notes
                        .push(format!("scalar indexes not refreshed: {e}"))
                }
            }
            report.run_id = Some(self.run_id.clone());
            self.write(ctx, Some((report, versions_after))).await?;
            ctx.store.merge_small_tail(RUNS.name).await;
        }
        if let Some(lock) = self.lock {
            lock.release();
        }
        Ok(())
    }

    /// The run's row: at its start (`None`), or finished, with the tables' versions after it.
    async fn write(
        &self,
        ctx: &JobCtx<'_>,
        finished: Option<(&JobReport, BTreeMap<String, u64>)>,
    ) -> Result<()> {
        let (report, versions_after) = match finished {
            Some((report, versions)) => (Some(report), Some(versions)),
            None => (None, None),
        };
        let finished_at = Utc::now().timestamp_micros();
        let counts = report
            .map(|r| serde_json::to_string(&r.counts))
            .transpose()?;
        let failed = report.map(|r| r.failures.len() as i64);
        let duration = report.map(|r| r.duration_ms as i64);
        let status = report.map_or("running", |r| r.status.as_str());
        let error = report.and_then(|r| r.error.as_deref());
        let llm_usage = report
            .and_then(|r| r.llm.as_ref())
            .map(serde_json::to_string)
            .transpose()?;
        let table_versions = self.versions_before.as_ref().map(|before| {
            serde_json::json!({"before": before, "after": versions_after}).to_string()
        });
        let mut builder = RowBuilder::new(&RUNS, ctx.store.embedding_dim(), self.started_at);
        builder
            .append(|_, name| match name {
                "run_id" => Cell::Text(&self.run_id),
                "job" => Cell::Text(&self.job),
                "user_id" => ctx.user.as_deref().map_or(Cell::Null, Cell::Text),
                "started_at" => Cell::Timestamp(self.started_at),
                "finished_at" if report.is_some() => Cell::Timestamp(finished_at),
                "status" => Cell::Text(status),
                "dry_run" => Cell::Bool(ctx.dry_run),
                "params" => Cell::Text(&self.params),
                "counts" => counts.as_deref().map_or(Cell::Null, Cell::Text),
                "items_failed" => failed.map_or(Cell::Null, Cell::I64),
                "duration_ms" => duration.map_or(Cell::Null, Cell::I64),
                "error" => error.map_or(Cell::Null, Cell::Text),
                "llm_usage" => llm_usage.as_deref().map_or(Cell::Null, Cell::Text),
                "table_versions" => table_versions.as_deref().map_or(Cell::Null, Cell::Text),
                _ => Cell::Missing,
            })
            .map_err(|e| anyhow::anyhow!("run row: {e}"))?;
        let row = builder.finish()?;
        if report.is_none() {
            // The run's first row: its id is new (a v4 uuid drawn at start), so it is
            // appended, without the merge's lookup of `runs` (its index opened, a page
            // loaded, then the join). On day 366 of `bench year`, paired both ways round:
            // `embed` 0.73-0.79x its time, `entities` 0.86-0.92x, `link` 0.88x.
            ctx.store.append_batch(&RUNS, row).await?;
        } else {
            ctx.store.upsert_batch(&RUNS, row).await?;
        }
        Ok(())
    }
}

/// The tables whose version moved between `before` (all of them when unknown) and `after`:
/// those a run (or another process meanwhile) wrote, or created.
fn tables_written(
    before: Option<&BTreeMap<String, u64>>,
    after: &BTreeMap<String, u64>,
) -> std::collections::BTreeSet<String> {
    after
        .iter()
        .filter(|(table, v)| before.is_none_or(|before| before.get(*table) != Some(*v)))
        .map(|(table, _)| table.clone())
        .collect()
}

/// Runs of `job` in the context's scope still marked `running` while `lock` (taken by run
/// `by_run`) is held: no process can be running them, so they were killed. They are marked
/// `abandoned`, naming the killed process when the lock's owner record names it.
async fn abandon_killed_runs(
    ctx: &JobCtx<'_>,
    job: &str,
    by_run: &str,
    lock: &lock::JobLock,
) -> Result<u64> {
    let mut predicate = format!(
        "job = {} AND status = 'running'",
        crate::store::sql_string(job)
    );
    if let Some(user) = &ctx.user {
        predicate.push_str(&format!(
            " AND user_id = {}",
            crate::store::sql_string(user)
        ));
    }
    if let Some(shard) = ctx.shard() {
        // Runs of this shard only (its lock is held); other shards' runs may be alive.
        predicate.push_str(&format!(" AND params LIKE '%\"shard\":\"{shard}\"%'"));
    }
    // First the runs still running of any job, a look at the `status` index alone: there are
    // almost never any, and a lookup opens every index its filter names (with `job` too,
    // three index segments at each job's start on day 366 of `bench year`; this opens one,
    // 1.4-2.4 ms less a job where nothing else opens `job`'s; BENCHMARKS.md, session 52).
    if ctx
        .store
        .count_rows(RUNS.name, Some("status = 'running'"))
        .await?
        == 0
    {
        return Ok(0);
    }
    if ctx.store.count_rows(RUNS.name, Some(&predicate)).await? == 0 {
        return Ok(0);
    }
    let took_over = lock
        .took_over
        .as_ref()
        .map(|o| format!(" (pid {} on {})", o.pid, o.host))
        .unwrap_or_default();
    let message = format!(
        "abandoned: its process ended without finishing{took_over}; run {by_run} took over"
    );
    let marked = ctx
        .store
        .update_where(
            RUNS.name,
            &predicate,
            &[
                ("status", "'abandoned'".to_string()),
                ("error", crate::store::sql_string(&message)),
                (
                    "finished_at",
                    crate::store::sql_timestamp(Utc::now().timestamp_micros()),
                ),
            ],
        )
        .await?;
    tracing::warn!(job, "marked earlier running runs abandoned{took_over}");
    Ok(marked)
}

/// Every memory's `k` nearest others among `vectors` (one user's, `dim` wide), the all-pairs
/// search of `cluster --mode full` and `link`. A partition of the vectors, when one was
/// tried, is logged with its check (probes, the check rows' coverage, the share of pairs
/// scored), so a user can see which search answered.
pub(crate) fn all_pairs_neighbours(
    vectors: &[f32],
    dim: usize,
    k: usize,
) -> Vec<Vec<crate::logic::similarity::Neighbour>> {
    use crate::logic::similarity::{AllPairs, all_pairs_top_k};
    let (neighbours, run) = all_pairs_top_k(vectors, dim, k, AllPairs::default());
    if let Some(plan) = &run.partition {
        let rows = vectors.len() / dim.max(1);
        match plan.probes {
            Some(probes) => tracing::info!(
                rows,
                lists = plan.lists,
                probes,
                check_coverage = plan.sample_coverage,
                pairs_scored = plan.work_fraction,
                "all-pairs search over a partition"
            ),
            None => tracing::info!(
                rows,
                check_rows = plan.sample_queries,
                best_check_coverage = plan.sample_coverage,
                "all-pairs search scored every pair: no partition held the check rows' neighbours"
            ),
        }
    }
    neighbours
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::tables_written;

    #[test]
    fn a_run_refreshes_the_indexes_of_the_tables_whose_version_moved() {
        let versions = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(t, v)| (t.to_string(), *v)).collect()
        };
        let before = versions(&[("memories", 7), ("links", 3), ("runs", 40)]);
        let after = versions(&[("memories", 9), ("links", 3), ("runs", 41), ("anchors", 1)]);
        let written: Vec<String> = tables_written(Some(&before), &after).into_iter().collect();
        // `links` kept its version; `anchors` did not exist when the run started.
        assert_eq!(written, ["anchors", "memories", "runs"]);
        // Without the versions from the start, every table is looked at.
        assert_eq!(tables_written(None, &after).len(), 4);
    }
}
