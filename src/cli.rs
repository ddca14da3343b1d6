//! The `memlife` command line: clap definitions and the one `match` that dispatches them.
//! Nothing else lives here: each command's arguments are defined in its own file (jobs in
//! `jobs/`, the rest in `commands/`), and what a command needs is built by `App` on demand.

use std::io::Write;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::app::{App, GlobalArgs};
use crate::commands;
use crate::exit::ExitStatus;
use crate::jobs::{self, JobCommand};
use crate::llm::mock;

#[derive(Parser, Debug)]
#[command(
    name = "memlife",
    version,
    about = "Maintenance jobs for an LLM agent's memory store on Lance tables"
)]
#[command(after_help = "Exit codes: 0 done, 1 done but some items failed, 2 error.")]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    Init(commands::init::InitArgs),
    Check(commands::check::CheckArgs),
    // The scheduled jobs (`jobs::register_jobs!`).
    #[command(flatten)]
    Job(JobCommand),
    /// The maintenance pipeline: every job in dependency order, each its own run, one report.
    Nightly(commands::nightly::NightlyArgs),
    /// The schedule (jobs/schedule.toml) as a crontab, an Airflow DAG file, or a list.
    Schedule(commands::schedule::ScheduleArgs),
    /// Runs whatever the schedule says is due (one cron line: `* * * * * memlife run-due`).
    RunDue(commands::schedule::RunDueArgs),
    Export(commands::export::ExportArgs),
    Synth(commands::synth::SynthArgs),
    Sql(commands::sql::SqlArgs),
    Stats(commands::stats::StatsArgs),
    /// The store's history on one self-contained HTML page of charts.
    Report(commands::report::ReportArgs),
    Index(commands::index::IndexArgs),
    Bench(commands::bench::BenchArgs),
    /// Measurements of the judge on labelled pairs.
    Eval(commands::eval::EvalArgs),
    Batches(commands::batches::BatchesArgs),
    MockLlm(mock::MockOptions),
    Similar(commands::similar::SimilarArgs),
    Traverse(commands::traverse::TraverseArgs),
    /// A user's memories nearest a query, ranked, activated on return.
    Recall(commands::recall::RecallArgs),
    /// Facts `integrate` queued because its judge was unsure.
    Review(commands::review::ReviewArgs),
    /// A memory's supersession chain, or the version true at a time.
    History(commands::history::HistoryArgs),
    /// Revert a finished run of any job (integrate and review from their audit rows, the
    /// others from the tables' versions).
    Undo(commands::undo::UndoArgs),
    /// The session-start block of a user's consolidated summaries (seed 001).
    Summaries(commands::summaries::SummariesArgs),
}

/// Runs the parsed command; its output goes to `out`.
pub async fn run(cli: Cli, out: &mut dyn Write) -> Result<ExitStatus> {
    let app = App::new(cli.global);
    match &cli.command {
        Command::Init(args) => commands::init::run(&app, args, out).await,
        Command::Check(args) => commands::check::run(&app, args, out).await,
        Command::Job(job) => jobs::run(&app, job, out).await,
        Command::Nightly(args) => commands::nightly::run(&app, args, out).await,
        Command::Schedule(args) => commands::schedule::schedule(args, out).await,
        Command::RunDue(args) => commands::schedule::run_due(&app, args, out).await,
        Command::Export(args) => commands::export::run(&app, args, out).await,
        Command::Synth(args) => commands::synth::command(app.json, args, out),
        Command::Sql(args) => commands::sql::command(&app, args, out).await,
        Command::Stats(args) => commands::stats::command(&app, args, out).await,
        Command::Report(args) => commands::report::run(&app, args, out).await,
        Command::Index(args) => commands::index::run(&app, args, out).await,
        Command::Bench(args) => commands::bench::run(&app, args, out).await,
        Command::Eval(args) => commands::eval::run(&app, args, out).await,
        Command::Batches(args) => commands::batches::run(&app, args, out).await,
        Command::MockLlm(options) => mock::serve(options, out)
            .await
            .map(|()| ExitStatus::Success),
        Command::Similar(args) => commands::similar::run(&app, args, out).await,
        Command::Traverse(args) => commands::traverse::run(&app, args, out).await,
        Command::Recall(args) => commands::recall::run(&app, args, out).await,
        Command::Review(args) => commands::review::run(&app, args, out).await,
        Command::History(args) => commands::history::run(&app, args, out).await,
        Command::Undo(args) => commands::undo::run(&app, args, out).await,
        Command::Summaries(args) => commands::summaries::run(&app, args, out).await,
    }
}
