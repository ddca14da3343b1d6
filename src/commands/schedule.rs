//! The schedule as data (`jobs/schedule.toml`): `memlife schedule crontab|dag|list` writes the
//! crontab and the Airflow DAG file from it, and `memlife run-due` runs every entry whose
//! cadence's latest slot (`logic::schedule`) came after the entry last started. What run-due
//! started, and at which clock, is its own `runs` row (job `run-due`, params `{"now", "ran"}`),
//! so the state lives in the store; one cron line, `* * * * * memlife run-due`, is the whole
//! crontab. Entries run one after another in the file's order, each as its own `memlife`
//! process with the database and configuration of this one; two run-dues never overlap (a
//! lock; the second says so and exits 0).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;

use crate::app::App;
use crate::exit::ExitStatus;
use crate::logic::schedule::{Cadence, cron, is_due, is_recorded, parse_cadence};
use crate::model::clock::Clock;

pub const DEFAULT_FILE: &str = "jobs/schedule.toml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    settings: Settings,
    #[serde(rename = "job", default)]
    jobs: Vec<EntryFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub db: String,
    pub config: String,
    pub logs: String,
    #[serde(default)]
    pub by_hand: Vec<String>,
    /// Shards the Airflow DAG fans each per-user job out over (`--shard I/N`, one task each);
    /// 1: no fan-out. The crontab and run-due run each job once, for every user.
    #[serde(default = "one_shard")]
    pub shards: u32,
}

fn one_shard() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryFile {
    name: String,
    run: String,
    cadence: String,
    dag: String,
    about: String,
    #[serde(default)]
    json_report: bool,
}

/// One scheduled command.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    /// The memlife arguments, split on whitespace.
    pub run: Vec<String>,
    pub cadence: Cadence,
    pub dag: String,
    pub about: String,
    pub json_report: bool,
    /// A job that works per user (it takes `--shard`): the DAG fans it out over the shards.
    /// Jobs on whole tables (optimize) and commands that are not jobs run once.
    pub per_shard: bool,
}

#[derive(Debug)]
pub struct Schedule {
    pub settings: Settings,
    pub entries: Vec<Entry>,
}

/// Reads and checks a schedule file: every cadence readable, every command a memlife
/// subcommand, names unique; errors name the file and the entry.
pub fn load(path: &Path) -> Result<Schedule> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("schedule {}: cannot read it", path.display()))?;
    parse(&text).with_context(|| format!("schedule {}", path.display()))
}

pub fn parse(text: &str) -> Result<Schedule> {
    use clap::CommandFactory;
    let file: File = toml::from_str(text)?;
    if file.settings.shards == 0 {
        bail!("[settings] shards must be at least 1 (1: no fan-out)");
    }
    let cli = crate::cli::Cli::command();
    let mut entries: Vec<Entry> = Vec::new();
    for e in file.jobs {
        if entries.iter().any(|x| x.name == e.name) {
            bail!("entry '{}' appears twice", e.name);
        }
        let cadence = parse_cadence(&e.cadence)
            .map_err(|why| anyhow::anyhow!("entry '{}': {why}", e.name))?;
        let run: Vec<String> = e.run.split_whitespace().map(str::to_string).collect();
        let Some(first) = run.first() else {
            bail!("entry '{}': `run` is empty", e.name);
        };
        let Some(command) = cli.find_subcommand(first) else {
            bail!(
                "entry '{}': `memlife {first}` is not a memlife command",
                e.name
            );
        };
        if command.has_subcommands() {
            let second = run.get(1).map(String::as_str).unwrap_or("");
            if command.find_subcommand(second).is_none() {
                bail!(
                    "entry '{}': `memlife {first} {second}` is not a memlife command",
                    e.name
                );
            }
        }
        if first == "run-due" {
            bail!("entry '{}': run-due cannot schedule itself", e.name);
        }
        let per_shard =
            first != "optimize" && command.get_arguments().any(|a| a.get_id() == "shard");
        entries.push(Entry {
            per_shard,
            name: e.name,
            run,
            cadence,
            dag: e.dag,
            about: e.about,
            json_report: e.json_report,
        });
    }
    Ok(Schedule {
        settings: file.settings,
        entries,
    })
}

/// The crontab the schedule describes.
pub fn crontab(s: &Schedule) -> String {
    let mut out = String::from(
        "# memlife schedule for cron, written by `memlife schedule crontab` from jobs/schedule.toml\n\
         # (edit that file, not this one; a test keeps them equal). Install with `crontab jobs/crontab`\n\
         # after editing the paths, or use the one line `* * * * * memlife run-due` instead, which\n\
         # reads jobs/schedule.toml itself. Exit codes: 0 done, 1 some items failed, 2 error.\n",
    );
    out.push_str(&format!(
        "# By hand, on purpose: {}\n",
        if s.settings.by_hand.is_empty() {
            "(none)".to_string()
        } else {
            s.settings.by_hand.join(", ")
        }
    ));
    out.push_str(&format!(
        "MEMLIFE_DB={}\nMEMLIFE_CONFIG={}\nMEMLIFE_LOG=info\n",
        s.settings.db, s.settings.config
    ));
    let logs = &s.settings.logs;
    for e in &s.entries {
        let log = e.run[0].clone();
        let command = if e.json_report {
            format!(
                "memlife --json {} > {logs}/{}-$(date +\\%F).json 2>> {logs}/{}.log",
                e.run.join(" "),
                e.name,
                e.name
            )
        } else {
            format!("memlife {} >> {logs}/{log}.log 2>&1", e.run.join(" "))
        };
        out.push_str(&format!(
            "\n# {} ({}): {}\n{}  {command}\n",
            e.name,
            describe_cadence(&e.cadence),
            e.about,
            cron(&e.cadence)
        ));
    }
    out
}

fn describe_cadence(c: &Cadence) -> String {
    match *c {
        Cadence::EveryMinutes(1) => "every minute".into(),
        Cadence::EveryMinutes(n) => format!("every {n} minutes"),
        Cadence::EveryHours { hours, minute } => format!("every {hours} hours at :{minute:02}"),
        Cadence::Daily { hour, minute } => format!("daily at {hour:02}:{minute:02}"),
        Cadence::Weekly { day, hour, minute } => {
            format!("weekly on {day} at {hour:02}:{minute:02}")
        }
        Cadence::Monthly { day, hour, minute } => {
            format!("monthly on day {day} at {hour:02}:{minute:02}")
        }
    }
}

/// The Airflow DAG file the schedule describes: one DAG per `dag` name, on its first entry's
/// cadence, its tasks in the file's order.
pub fn dag(s: &Schedule) -> String {
    let mut out = format!(
        r#""""Airflow DAGs for memlife, written by `memlife schedule dag` from jobs/schedule.toml (edit
that file, not this one; a test keeps them equal). One DAG per group of the schedule, its
tasks in the schedule's order, on the group's first cadence.

memlife exits 0 when done, 1 when done with some failed items, and 2 on error. Airflow fails
a task on any non-zero exit, so both 1 and 2 show in the UI with the JSON report in the log.

Jobs that work per user fan out over SHARDS mapped tasks (`--shard I/N`: users split by a
stable hash, every user in exactly one shard), which Airflow may run on different workers
against one shared store; jobs on whole tables (optimize) and the other commands run once.
Exclusivity comes from Airflow: one task per shard, and `max_active_runs=1`, so two runs of a
DAG never overlap. (On one host under cron, memlife's own file locks do that instead.)
"""

from datetime import datetime, timedelta

from airflow import DAG
from airflow.operators.bash import BashOperator

DB = "{}"
CONFIG = "{}"
MEMLIFE = f"memlife --db {{DB}} --config {{CONFIG}} --json"
SHARDS = {}
"#,
        s.settings.db, s.settings.config, s.settings.shards
    );
    let mut groups: Vec<&str> = Vec::new();
    for e in &s.entries {
        if !groups.contains(&e.dag.as_str()) {
            groups.push(&e.dag);
        }
    }
    for group in groups {
        let members: Vec<&Entry> = s.entries.iter().filter(|e| e.dag == group).collect();
        let first = members[0];
        // Runs of one DAG never overlap (hosts may share the store).
        out.push_str(&format!(
            "\nwith DAG(\n    dag_id=\"{group}\",\n    start_date=datetime(2025, 1, 1),\n    \
             schedule=\"{}\",\n    catchup=False,\n    max_active_runs=1,\n    \
             default_args={{\"retries\": 1, \"retry_delay\": timedelta(minutes=10)}},\n    \
             tags=[\"memlife\"],\n):\n",
            cron(&first.cadence),
        ));
        let mut tasks = Vec::new();
        for e in &members {
            let task = e.name.replace('-', "_");
            if e.per_shard && s.settings.shards > 1 {
                // One mapped task instance per shard, each with its `--shard I/N`.
                out.push_str(&format!(
                    "    # {} (one task per shard)\n    {task}_task = BashOperator.partial(\n        \
                     task_id=\"{task}\",\n    ).expand(\n        \
                     bash_command=[f\"{{MEMLIFE}} {} --shard {{i}}/{{SHARDS}}\" for i in range(SHARDS)],\n    )\n",
                    e.about,
                    e.run.join(" ")
                ));
            } else {
                out.push_str(&format!(
                    "    # {}\n    {task}_task = BashOperator(\n        task_id=\"{task}\",\n        \
                     bash_command=f\"{{MEMLIFE}} {}\",\n    )\n",
                    e.about,
                    e.run.join(" ")
                ));
            }
            tasks.push(format!("{task}_task"));
        }
        if tasks.len() > 1 {
            out.push_str(&format!("    {}\n", tasks.join(" >> ")));
        }
    }
    out
}

/// `memlife schedule`: what the schedule file says, as a crontab, a DAG file or a list.
#[derive(clap::Args, Debug, Clone)]
pub struct ScheduleArgs {
    /// crontab or dag (the files in jobs/ are these outputs), or list (each entry, its cron
    /// line and whether it is due now).
    #[arg(value_parser = ["crontab", "dag", "list"])]
    pub what: String,
    /// The schedule file.
    #[arg(long, default_value = DEFAULT_FILE)]
    pub file: PathBuf,
}

pub async fn schedule(args: &ScheduleArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let s = load(&args.file)?;
    match args.what.as_str() {
        "crontab" => out.write_all(crontab(&s).as_bytes())?,
        "dag" => out.write_all(dag(&s).as_bytes())?,
        _ => {
            for e in &s.entries {
                writeln!(
                    out,
                    "{:<16} {:<14} {:<22} memlife {}",
                    e.name,
                    cron(&e.cadence),
                    describe_cadence(&e.cadence),
                    e.run.join(" ")
                )?;
            }
        }
    }
    Ok(ExitStatus::Success)
}

/// Runs every entry of the schedule that is due.
#[derive(clap::Args, Debug, Clone)]
pub struct RunDueArgs {
    /// The schedule file.
    #[arg(long, default_value = DEFAULT_FILE)]
    pub file: PathBuf,
    /// The clock (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    /// Say what is due; run nothing, record nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only these entries (comma-separated names), when due.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

/// When each entry last started, by the clock run-due ran it at: from run-due's own rows.
async fn last_started(
    store: &crate::store::Store,
) -> Result<std::collections::BTreeMap<String, DateTime<Utc>>> {
    let rows: Vec<crate::model::typed::RunStart> = store
        .scan_rows("runs", Some("job = 'run-due' AND dry_run = false"))
        .await?;
    let mut last = std::collections::BTreeMap::new();
    for row in rows {
        let Some(clock) = row.time_param("now") else {
            continue;
        };
        let params = row.params();
        for name in params["ran"].as_array().into_iter().flatten() {
            if let Some(name) = name.as_str() {
                let entry = last.entry(name.to_string()).or_insert(clock);
                if clock > *entry {
                    *entry = clock;
                }
            }
        }
    }
    Ok(last)
}

pub async fn run_due(app: &App, args: &RunDueArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let s = load(&args.file)?;
    if let Some(unknown) = args
        .only
        .iter()
        .find(|o| !s.entries.iter().any(|e| &e.name == *o))
    {
        bail!(
            "--only: the schedule {} has no entry '{unknown}'",
            args.file.display()
        );
    }
    let now = Clock::or_now(args.now).time();
    let store = app.store().await?.clone();
    let _lock = if args.dry_run {
        None
    } else {
        match crate::jobs::lock::acquire(store.uri(), "run-due", None, "run-due") {
            Ok(lock) => Some(lock),
            Err(e) => {
                writeln!(
                    out,
                    "run-due: another run-due is running ({e}); nothing started"
                )?;
                return Ok(ExitStatus::Success);
            }
        }
    };
    // A run-due killed before it finished: no process holds the lock it held. Asked of the
    // `status` index first: an update that matches nothing still commits a version.
    if !args.dry_run
        && store
            .count_rows(crate::model::schema::RUNS.name, Some("status = 'running'"))
            .await?
            > 0
    {
        store
            .update_where(
                "runs",
                "job = 'run-due' AND status = 'running'",
                &[
                    ("status", "'abandoned'".to_string()),
                    (
                        "error",
                        crate::store::sql_string("abandoned: its process ended without finishing"),
                    ),
                ],
            )
            .await?;
    }
    let last = last_started(&store).await?;
    let due: Vec<&Entry> = s
        .entries
        .iter()
        .filter(|e| args.only.is_empty() || args.only.contains(&e.name))
        .filter(|e| is_due(&e.cadence, last.get(&e.name).copied(), now))
        .collect();
    if args.dry_run || due.is_empty() {
        writeln!(
            out,
            "run-due at {}: {}",
            now.to_rfc3339(),
            if due.is_empty() {
                "nothing is due".to_string()
            } else {
                format!(
                    "due: {}",
                    due.iter()
                        .map(|e| e.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )?;
        return Ok(ExitStatus::Success);
    }
    // Recorded before they start: a run-due killed half-way does not start them twice. Not
    // recorded when all are of a cadence of minutes (`is_recorded`): they are due by the
    // clock alone.
    let ran: Vec<&str> = due.iter().map(|e| e.name.as_str()).collect();
    let run_id = match due.iter().any(|e| is_recorded(&e.cadence)) {
        true => Some(record(&store, now, &ran).await?),
        false => None,
    };
    let exe = std::env::current_exe().context("run-due: cannot find its own executable")?;
    let mut worst = ExitStatus::Success;
    let mut results = serde_json::Map::new();
    for e in &due {
        let mut command = std::process::Command::new(&exe);
        command.arg("--db").arg(&app.db);
        if let Some(config) = app.config_path() {
            command.arg("--config").arg(config);
        }
        if app.json {
            command.arg("--json");
        }
        command.args(&e.run);
        if takes_now(&e.run) {
            command.args(["--now", &now.to_rfc3339()]);
        }
        let status = command
            .status()
            .with_context(|| format!("run-due: could not start `memlife {}`", e.run.join(" ")))?;
        let code = status.code().unwrap_or(2);
        let exit = match code {
            0 => ExitStatus::Success,
            1 => ExitStatus::Failure,
            _ => ExitStatus::Error,
        };
        worst = worst.max(exit);
        results.insert(e.name.clone(), json!(code));
        if !app.json {
            writeln!(out, "run-due: {} exited {code}", e.name)?;
        }
    }
    if let Some(run_id) = run_id {
        finish(&store, &run_id, &results, worst).await?;
        store
            .merge_small_tail(crate::model::schema::RUNS.name)
            .await;
    }
    Ok(worst)
}

/// Whether a scheduled command takes `--now` (jobs that compute at a clock).
fn takes_now(run: &[String]) -> bool {
    use clap::CommandFactory;
    let cli = crate::cli::Cli::command();
    let mut command = cli.find_subcommand(&run[0]);
    if let (Some(c), Some(second)) = (command, run.get(1))
        && c.has_subcommands()
    {
        command = c.find_subcommand(second);
    }
    command.is_some_and(|c| c.get_arguments().any(|a| a.get_id() == "now"))
}

async fn record(store: &crate::store::Store, now: DateTime<Utc>, ran: &[&str]) -> Result<String> {
    use crate::model::encoding::Cell;
    use crate::model::rows::RowBuilder;
    use crate::model::schema::RUNS;
    let run_id = uuid::Uuid::new_v4().to_string();
    let params = json!({"now": now.to_rfc3339(), "ran": ran}).to_string();
    let started = Utc::now().timestamp_micros();
    let mut builder = RowBuilder::new(&RUNS, store.embedding_dim(), started);
    builder
        .append(|_, name| match name {
            "run_id" => Cell::Text(&run_id),
            "job" => Cell::Text("run-due"),
            "started_at" => Cell::Timestamp(started),
            "status" => Cell::Text("running"),
            "dry_run" => Cell::Bool(false),
            "params" => Cell::Text(&params),
            _ => Cell::Missing,
        })
        .map_err(|e| anyhow::anyhow!("run row: {e}"))?;
    // A new key: appended, not merged.
    store.append_batch(&RUNS, builder.finish()?).await?;
    Ok(run_id)
}

async fn finish(
    store: &crate::store::Store,
    run_id: &str,
    results: &serde_json::Map<String, serde_json::Value>,
    worst: ExitStatus,
) -> Result<()> {
    let status = match worst {
        ExitStatus::Success => "done",
        ExitStatus::Failure => "partial",
        ExitStatus::Error => "failed",
    };
    store
        .update_where(
            "runs",
            &format!("run_id = {}", crate::store::sql_string(run_id)),
            &[
                ("status", crate::store::sql_string(status)),
                (
                    "counts",
                    crate::store::sql_string(
                        &serde_json::Value::Object(results.clone()).to_string(),
                    ),
                ),
                (
                    "finished_at",
                    crate::store::sql_timestamp(Utc::now().timestamp_micros()),
                ),
            ],
        )
        .await?;
    Ok(())
}
