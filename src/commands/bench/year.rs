//! `memlife bench year`: a synthetic store lives D days through the real CLI on a real Lance
//! folder. Day 0 imports N synthetic memories and runs the whole nightly pipeline once (a
//! store in service before day 1). Each day then integrates new facts (a later draw of the
//! same synth, dated that day), recalls a few memories (activating them, as an agent
//! would), and runs the nightly pipeline at that day's clock: embed, entities, scores
//! and link daily; cluster, consolidate, refine and describe on the seventh day; entity-gc on
//! the thirtieth; optimize weekly unless `--no-optimize`. Judge offline, embedder `hash` by
//! default (the time measured is memlife's own, not a model's).
//!
//! Recorded on day 1, every `--sample-every` days and the last day: each job's time (the
//! median of `--repeats` runs of the day, each from the store as the day began), each
//! table's versions, data files and bytes, and those bytes against a freshly written copy
//! of the same rows (each table `import` writes, exported to Parquet and imported into a new
//! store, then given the same indexes, `memlife index --scalar`, as the jobs give a store of
//! that size). The closing report adds the last day's copy without indexes and the sampled
//! day furthest over its copy. Targets (issue 35): with optimize, bytes within 2x of the
//! fresh copy on every sampled day, and each job's time on the last day within 1.25x of
//! day 1. The report's ratios are the last day over day 1 as lived here; day 1 is a warm-up
//! night and the rows grow with the facts, so `benches/year_time_target.sh` also holds day
//! 366 against a store of the same rows without the year's history (ARCHITECTURE.md).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::harness::{Workdir, copy_dir, cpu_name, memlife};
use crate::config::RetentionSection;

#[derive(clap::Args, Debug)]
pub struct YearBench {
    /// Memories in the store on day 0.
    #[arg(long, default_value_t = 10_000)]
    pub memories: usize,
    /// Days the store lives.
    #[arg(long, default_value_t = 365)]
    pub days: usize,
    #[arg(long, default_value_t = 20)]
    pub users: usize,
    /// New facts integrated each day.
    #[arg(long, default_value_t = 20)]
    pub facts_per_day: usize,
    /// Recalls each day (each activates what it returns).
    #[arg(long, default_value_t = 5)]
    pub recalls_per_day: usize,
    /// Leave optimize out of the schedule (the baseline).
    #[arg(long)]
    pub no_optimize: bool,
    /// Put the storage jobs of seeds 002 and 004 in the schedule: `sessions`, `insights`,
    /// `anchor` and `prune` daily (prune exporting what it deletes to `db.prune-archive`, whose
    /// bytes each record gives beside the tables'), `distill` weekly.
    #[arg(long)]
    pub prune: bool,
    /// `[retention] keep_versions_days` for optimize (default: the configuration's, 14).
    #[arg(long)]
    pub keep_versions_days: Option<f64>,
    /// Record jobs and storage every this many days (and day 0's night, day 1 and the last
    /// day).
    #[arg(long, default_value_t = 100)]
    pub sample_every: usize,
    /// hash (default: memlife's own time) or local.
    #[arg(long, default_value = "hash")]
    pub embedder: String,
    /// Keep the work folder here (default: a temporary folder, removed afterwards). A kept
    /// year saves its state after each day; a file named `stop` in the folder pauses it
    /// after the day running.
    #[arg(long)]
    pub keep: Option<PathBuf>,
    /// Go on with the year kept in `--keep` from the day after the last one done (after a
    /// pause, or a kill: a day cut off half-way is lived again, its jobs finishing what the
    /// cut left). The other options must be the ones it started with.
    #[arg(long)]
    pub resume: bool,
    /// Pause after this day (as the `stop` file does; needs `--keep`): to keep the machine
    /// quiet for the days whose times are recorded, live the days between them in pieces.
    /// 0 pauses after day 0's night, before day 1.
    #[arg(long)]
    pub until_day: Option<usize>,
    /// Live each sampled day this many times, each from the store as the day began, and
    /// record each job's median time (all runs are kept beside it). One run of a job of
    /// 0.1-0.3 s varies by a fifth or more on a shared machine, the whole margin the 1.25x
    /// target allows. The runs before the last work on a copy, so the year's own store is
    /// lived once.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
}

/// The nightly steps of day `day` (day 0: the night before day 1, every cadence due),
/// `nightly` runs them in its pipeline's order.
fn steps_of(day: usize, optimize: bool, prune: bool) -> Vec<&'static str> {
    let mut steps = vec!["embed", "entities", "scores", "link"];
    if prune {
        steps.extend(["sessions", "insights", "anchor", "prune"]);
    }
    if day.is_multiple_of(7) {
        steps.extend(["cluster", "consolidate", "refine", "describe"]);
        if prune {
            steps.push("distill");
        }
    }
    if day.is_multiple_of(30) {
        steps.push("entity-gc");
    }
    if optimize && day.is_multiple_of(7) {
        steps.push("optimize");
    }
    steps
}

/// Bytes of the files in a folder (0 when there is none).
fn folder_bytes(dir: &Path) -> u64 {
    let files = std::fs::read_dir(dir).into_iter().flatten().flatten();
    files
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Memories neither archived nor superseded.
fn live_memories(db: &str) -> Result<u64> {
    let sql = "SELECT COUNT(*) AS n FROM memories WHERE archived_at IS NULL \
               AND state <> 'archived' AND superseded_by IS NULL";
    let (text, _) = super::harness::memlife_text(&["--db", db, "sql", sql, "--format", "jsonl"])?;
    let row: Value = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
    Ok(row["n"].as_u64().unwrap_or(0))
}

fn storage(db: &str) -> Result<Value> {
    let (stats, _) = memlife(&["--db", db, "--json", "stats"])?;
    let mut out = serde_json::Map::new();
    let mut total = (0u64, 0u64, 0u64, 0u64);
    for t in stats["storage"].as_array().into_iter().flatten() {
        let (v, f, o, b) = (
            t["versions"].as_u64().unwrap_or(0),
            t["data_files"].as_u64().unwrap_or(0),
            t["open_files"].as_u64().unwrap_or(0),
            t["bytes"].as_u64().unwrap_or(0),
        );
        total = (total.0 + v, total.1 + f, total.2 + o, total.3 + b);
        out.insert(
            t["table"].as_str().unwrap_or("?").to_string(),
            json!({"versions": v, "data_files": f, "open_files": o, "bytes": b, "rows": t["rows"]}),
        );
    }
    out.insert(
        "total".into(),
        json!({"versions": total.0, "data_files": total.1, "open_files": total.2, "bytes": total.3}),
    );
    Ok(Value::Object(out))
}

/// The tables `import` writes: the fresh copy holds these, and bytes are compared over them.
const COPIED: &[&str] = &[
    "memories",
    "links",
    "entities",
    "memory_entities",
    "runs",
    "audit_log",
];

/// Bytes of the `COPIED` tables in a storage record.
fn copied_bytes(storage: &Value) -> f64 {
    COPIED
        .iter()
        .map(|t| storage[*t]["bytes"].as_f64().unwrap_or(0.0))
        .sum()
}

/// `bytes` over `of`, to two decimals (0 when there is nothing to compare with).
fn ratio_of(bytes: f64, of: f64) -> f64 {
    if of > 0.0 {
        (bytes / of * 100.0).round() / 100.0
    } else {
        0.0
    }
}

/// Storage of a freshly written copy of the `COPIED` tables' rows: as imported, and with the
/// indexes the store has (the recall and lookup indexes every store of that size gets).
fn fresh_copy_bytes(work: &std::path::Path, db: &str) -> Result<(Value, Value)> {
    let copy = work.join("fresh");
    // A sampled day's copy is replaced by the next one's.
    if copy.exists() {
        std::fs::remove_dir_all(&copy).with_context(|| format!("removing {}", copy.display()))?;
    }
    let copy_db = copy.to_string_lossy().into_owned();
    memlife(&["--db", &copy_db, "init"])?;
    for table in COPIED {
        let file = work.join(format!("{table}.parquet"));
        let file = file.to_string_lossy().into_owned();
        memlife(&[
            "--db", db, "--json", "export", "--table", table, "-o", &file,
        ])?;
        let (report, _) = memlife(&[
            "--db", &copy_db, "--json", "import", "--table", table, &file,
        ])
        .with_context(|| format!("fresh copy of {table}"))?;
        if report["counts"]["rows_rejected"].as_u64().unwrap_or(0) > 0 {
            bail!("fresh copy of {table}: rows rejected: {report}");
        }
    }
    let rows_only = storage(&copy_db)?;
    memlife(&["--db", &copy_db, "--json", "index", "--scalar"])?;
    Ok((rows_only, storage(&copy_db)?))
}

/// What a kept work folder holds between days (`year-state.json`), so an interrupted or
/// paused year resumes where it stopped (`--resume`): the bench's shape, the last day done,
/// the recall draw's state and the records so far.
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct YearState {
    shape: Value,
    day_done: usize,
    draw: u64,
    elapsed_seconds: f64,
    records: Vec<Value>,
}

/// The bench's options that decide what the year does; a resumed year must have the same.
fn shape_of(bench: &YearBench, retention: &RetentionSection) -> Value {
    let mut shape = json!({
        "memories": bench.memories,
        "days": bench.days,
        "users": bench.users,
        "facts_per_day": bench.facts_per_day,
        "recalls_per_day": bench.recalls_per_day,
        "optimize": !bench.no_optimize,
        "embedder": bench.embedder,
        "retention": retention,
    });
    // Only a year with prune says so: years kept before the option resume as they were.
    if bench.prune {
        shape["prune"] = json!(true);
    }
    shape
}

const STATE_FILE: &str = "year-state.json";
/// A file of this name in the work folder pauses the year after the day running.
const STOP_FILE: &str = "stop";

fn save_state(work: &Path, state: &YearState) -> Result<()> {
    let tmp = work.join(format!("{STATE_FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(state)?)?;
    std::fs::rename(&tmp, work.join(STATE_FILE))?;
    Ok(())
}

fn load_state(work: &Path, shape: &Value) -> Result<YearState> {
    let file = work.join(STATE_FILE);
    let state: YearState = serde_json::from_slice(
        &std::fs::read(&file).with_context(|| format!("--resume: reading {}", file.display()))?,
    )
    .with_context(|| format!("--resume: {} is not a year's state", file.display()))?;
    for (key, value) in shape.as_object().into_iter().flatten() {
        if &state.shape[key] != value {
            bail!(
                "--resume: {} was a year with {key} = {}, not {value}; rerun with the same options",
                file.display(),
                state.shape[key]
            );
        }
    }
    Ok(state)
}

/// The year's inputs: the store's first rows (recall queries are drawn from them) and the
/// facts that arrive day by day, in time order, as `synth` wrote them.
type Rows = Vec<serde_json::Map<String, Value>>;

fn split_rows(all: &str, memories: usize) -> Result<(Rows, Rows)> {
    let mut rows: Rows = std::fs::read_to_string(all)
        .with_context(|| format!("reading {all}"))?
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    rows.sort_by(|a, b| {
        a["created_at"]
            .as_str()
            .unwrap_or("")
            .cmp(b["created_at"].as_str().unwrap_or(""))
    });
    let facts = rows.split_off(memories.min(rows.len()));
    Ok((rows, facts))
}

/// Day 0: the synthetic rows, a store holding the first `memories` of them, and the
/// configuration every command of the year reads (the caller's `[retention]`, compaction policy
/// included, with `--keep-versions-days`).
fn prepare(bench: &YearBench, work: &Path, retention: &RetentionSection) -> Result<Value> {
    let p = |name: &str| work.join(name).to_string_lossy().into_owned();
    let (db, all) = (p("db"), p("all.jsonl"));
    let facts_total = bench.days * bench.facts_per_day;
    memlife(&[
        "synth",
        "--users",
        &bench.users.to_string(),
        "--memories",
        &(bench.memories + facts_total).to_string(),
        "--seed",
        "17",
        "-o",
        &all,
    ])?;
    let (rows, _) = split_rows(&all, bench.memories)?;
    let base = p("base.jsonl");
    std::fs::write(
        &base,
        rows.iter()
            .map(|r| Value::Object(r.clone()).to_string() + "\n")
            .collect::<String>(),
    )?;
    memlife(&["--db", &db, "init"])?;
    // At the year's first clock, so every run of the store is on the store's own time.
    memlife(&[
        "--db",
        &db,
        "--json",
        "import",
        &base,
        "--now",
        "2026-01-01T00:00:00Z",
    ])?;
    std::fs::write(
        p("memlife.toml"),
        format!(
            "[retention]\nkeep_versions_days = {:?}\nkeep_log_versions_days = {:?}\n\
             compact_deleted_fraction = {:?}\ncompact_fragment_fraction = {:?}\n",
            retention.keep_versions_days,
            retention.keep_log_versions_days,
            retention.compact_deleted_fraction,
            retention.compact_fragment_fraction
        ),
    )?;
    // Day 0's night: the whole pipeline once (every cadence is due), so that day 1 is a day
    // of a store in service, embedded and indexed, as after a user's first night. Measured
    // on the store just imported, day 1's recall searched no vectors (the import has none
    // until `embed`) and its integration compared each fact with nothing.
    let steps = steps_of(0, !bench.no_optimize, bench.prune).join(",");
    let started = std::time::Instant::now();
    nightly(
        (work, &work.join("db")),
        0,
        &steps,
        "2026-01-01T01:00:00Z",
        &bench.embedder,
    )?;
    Ok(json!({
        "day": 0,
        "clock": "2026-01-01T01:00:00Z",
        "seconds": {"nightly": started.elapsed().as_secs_f64()},
        "storage": storage(&db)?,
    }))
}

/// `memlife nightly --steps STEPS` on the year's store at `now` (the bench's embedder, the
/// offline judge): its report, or an error naming the day when it did not finish.
fn nightly(
    (work, db): (&Path, &Path),
    day: usize,
    steps: &str,
    now: &str,
    embedder: &str,
) -> Result<Value> {
    let config = work.join("memlife.toml").to_string_lossy().into_owned();
    let db = db.to_string_lossy().into_owned();
    let (report, _) = memlife(&[
        "--config",
        &config,
        "--db",
        &db,
        "--json",
        "nightly",
        "--steps",
        steps,
        "--now",
        now,
        "--embedder",
        embedder,
        "--llm",
        "offline",
    ])?;
    if report["status"] != "done" {
        bail!("day {day}: nightly {}: {report}", report["status"]);
    }
    Ok(report)
}

/// The next draw of the recall sequence (xorshift; its state lives in `YearState`).
fn draw(state: &mut u64, n: usize) -> usize {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % n.max(1) as u64) as usize
}

/// One day of the store's life at `clock`, on the store in `db`: the day's facts
/// integrated, recalls, then the nightly steps. Returns each job's seconds.
fn live_day(
    bench: &YearBench,
    (work, db): (&Path, &Path),
    day: usize,
    clock: chrono::DateTime<chrono::Utc>,
    (rows, facts): (&Rows, &Rows),
    state: &mut u64,
) -> Result<BTreeMap<String, f64>> {
    let p = |name: &str| work.join(name).to_string_lossy().into_owned();
    let (db, config) = (db.to_string_lossy().into_owned(), p("memlife.toml"));
    let with_config = |args: &[&str]| {
        let mut all = vec!["--config", config.as_str(), "--db", db.as_str(), "--json"];
        all.extend_from_slice(args);
        memlife(&all)
    };
    let now = clock.to_rfc3339();
    let mut times: BTreeMap<String, f64> = BTreeMap::new();
    // New facts, dated this morning.
    let todays: Vec<Value> = facts
        .iter()
        .skip((day - 1) * bench.facts_per_day)
        .take(bench.facts_per_day)
        .map(|f| {
            let mut f = f.clone();
            f.remove("id");
            f.insert(
                "created_at".into(),
                Value::String((clock - chrono::Duration::hours(1)).to_rfc3339()),
            );
            for k in [
                "last_accessed_at",
                "access_count",
                "recall_frequency",
                "state",
            ] {
                f.remove(k);
            }
            Value::Object(f)
        })
        .collect();
    if !todays.is_empty() {
        let file = p("facts.jsonl");
        std::fs::write(
            &file,
            todays
                .iter()
                .map(|f| f.to_string() + "\n")
                .collect::<String>(),
        )?;
        let (_, s) = with_config(&[
            "integrate",
            &file,
            "--embedder",
            &bench.embedder,
            "--llm",
            "offline",
            "--now",
            &now,
        ])?;
        times.insert("integrate".into(), s);
    }
    // Recalls of what the store holds.
    let mut recall_s = 0.0;
    for _ in 0..bench.recalls_per_day {
        let r = &rows[draw(state, rows.len())];
        let (query, user) = (
            r["text"].as_str().unwrap_or("memory"),
            r["user_id"].as_str().unwrap_or("user-01"),
        );
        let (_, s) = with_config(&[
            "recall",
            query,
            "--user",
            user,
            "--embedder",
            &bench.embedder,
            "--now",
            &now,
        ])?;
        recall_s += s;
    }
    if bench.recalls_per_day > 0 {
        times.insert("recall".into(), recall_s / bench.recalls_per_day as f64);
    }
    let steps = steps_of(day, !bench.no_optimize, bench.prune).join(",");
    let report = nightly((work, Path::new(&db)), day, &steps, &now, &bench.embedder)?;
    for step in report["steps"].as_array().into_iter().flatten() {
        if let (Some(name), Some(ms)) = (step["step"].as_str(), step["duration_ms"].as_u64()) {
            times.insert(name.to_string(), ms as f64 / 1000.0);
        }
    }
    // The days the full optimize is not due, the light merge of the day's small fragments
    // (what `nightly` without `--steps` runs on those days).
    if !bench.no_optimize && !steps.contains("optimize") {
        let (_, s) = with_config(&["optimize", "--light", "--now", &now])?;
        times.insert("optimize-light".into(), s);
    }
    Ok(times)
}

/// A sampled day lived `bench.repeats` times from the store (and recall draw) as the day
/// began: the runs before the last on a copy of the store (removed afterwards), the last on
/// the year's own, so a year killed half-way through the day has its store as one run left
/// it. Returns each job's median seconds and each run's.
fn live_sampled_day(
    bench: &YearBench,
    work: &Path,
    day: usize,
    clock: chrono::DateTime<chrono::Utc>,
    inputs: (&Rows, &Rows),
    state: &mut u64,
) -> Result<(JobSeconds, Vec<JobSeconds>)> {
    let db = work.join("db");
    let copy = work.join("db.repeat");
    let archive = |db: &Path| PathBuf::from(format!("{}.prune-archive", db.display()));
    let remove_copy = || -> Result<()> {
        for dir in [copy.clone(), archive(&copy)] {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("removing {}", dir.display()))?;
            }
        }
        Ok(())
    };
    let draw = *state;
    let mut runs = Vec::new();
    for _ in 1..bench.repeats.max(1) {
        remove_copy()?;
        copy_dir(&db, &copy)?;
        if archive(&db).exists() {
            copy_dir(&archive(&db), &archive(&copy))?;
        }
        runs.push(live_day(bench, (work, &copy), day, clock, inputs, state)?);
        *state = draw;
    }
    remove_copy()?;
    runs.push(live_day(bench, (work, &db), day, clock, inputs, state)?);
    Ok((medians(&runs), runs))
}

/// Seconds by job, of one day's run or the medians of several.
type JobSeconds = BTreeMap<String, f64>;

/// Each job's median over `runs` (the upper one of an even count).
fn medians(runs: &[JobSeconds]) -> JobSeconds {
    let mut all: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for run in runs {
        for (job, s) in run {
            all.entry(job.clone()).or_default().push(*s);
        }
    }
    all.into_iter()
        .map(|(job, mut s)| {
            s.sort_by(f64::total_cmp);
            (job, s[s.len() / 2])
        })
        .collect()
}

pub fn run(bench: &YearBench, retention: &RetentionSection, out: &mut dyn Write) -> Result<()> {
    if bench.days == 0 || bench.memories == 0 {
        bail!("--days and --memories must be at least 1");
    }
    if bench.until_day.is_some() && bench.keep.is_none() {
        bail!("--until-day needs --keep DIR: the work folder a later --resume goes on with");
    }
    if bench.resume && bench.keep.is_none() {
        bail!("--resume needs --keep DIR: the work folder of the year to go on with");
    }
    let mut retention = retention.clone();
    if let Some(days) = bench.keep_versions_days {
        retention.keep_versions_days = days;
    }
    let shape = shape_of(bench, &retention);
    let work = Workdir::new(bench.keep.as_ref(), "year")?;
    let mut state = if bench.resume {
        load_state(&work.path, &shape)?
    } else {
        let night_0 = prepare(bench, &work.path, &retention)?;
        YearState {
            shape,
            day_done: 0,
            draw: 0x9e37_79b9_7f4a_7c15,
            elapsed_seconds: 0.0,
            records: vec![night_0],
        }
    };
    if bench.until_day == Some(0) && state.day_done == 0 {
        // The store in service before day 1, kept so that day 1 itself can be lived on
        // copies (`benches/year_time_target.sh`), not only the days after a kept day.
        save_state(&work.path, &state)?;
        return paused(out, 0, bench.days);
    }
    let all = work.path.join("all.jsonl").to_string_lossy().into_owned();
    let (rows, facts) = split_rows(&all, bench.memories)?;
    let db = work.path.join("db").to_string_lossy().into_owned();
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T02:00:00Z")
        .expect("a constant")
        .with_timezone(&chrono::Utc);
    let sampled = |d: usize| d == 1 || d == bench.days || d.is_multiple_of(bench.sample_every);
    let started = std::time::Instant::now();
    // Seconds of the year so far, the sessions before a resume included.
    let before = state.elapsed_seconds;
    let elapsed = || before + started.elapsed().as_secs_f64();
    let bar = crate::progress::bar(bench.days as u64, "days");
    for day in state.day_done + 1..=bench.days {
        bar.set_position(day as u64 - 1);
        let clock = start + chrono::Duration::days(day as i64);
        let (times, runs) = if sampled(day) {
            live_sampled_day(
                bench,
                &work.path,
                day,
                clock,
                (&rows, &facts),
                &mut state.draw,
            )?
        } else {
            let times = live_day(
                bench,
                (&work.path, &work.path.join("db")),
                day,
                clock,
                (&rows, &facts),
                &mut state.draw,
            )?;
            (times, Vec::new())
        };
        if sampled(day) {
            let stored = storage(&db)?;
            // The target holds on every day, not the last alone: the window's rewrites come
            // and go with the cadences (a merge of a large index is kept for its 14 days).
            let (fresh_rows, fresh) = fresh_copy_bytes(&work.path, &db)?;
            state.records.push(json!({
                "day": day,
                "clock": clock.to_rfc3339(),
                "seconds": times,
                "seconds_of_each_run": runs,
                "bytes_over_fresh_copy": ratio_of(copied_bytes(&stored), copied_bytes(&fresh)),
                "storage": stored,
                "fresh_copy": fresh,
                "fresh_copy_without_indexes": fresh_rows,
            }));
            if bench.prune {
                let archive = work.path.join("db.prune-archive");
                let last = state.records.last_mut().expect("just pushed");
                last["prune_archive_bytes"] = json!(folder_bytes(&archive));
                last["live_memories"] = json!(live_memories(&db)?);
            }
            let record = state.records.last().expect("just pushed");
            // The bar steps aside while the line is written (both may be the terminal). On
            // stderr: stdout is the report (JSON with --json).
            bar.suspend(|| {
                let mut err = std::io::stderr();
                writeln!(
                    err,
                    "day {day}: {:.0} s elapsed; storage {}; {}x a fresh copy; seconds {}",
                    elapsed(),
                    record["storage"]["total"],
                    record["bytes_over_fresh_copy"],
                    record["seconds"]
                )?;
                err.flush()
            })?;
        }
        state.day_done = day;
        if bench.keep.is_some() {
            state.elapsed_seconds = elapsed();
            save_state(&work.path, &state)?;
            let stop = work.path.join(STOP_FILE);
            let until = bench.until_day.is_some_and(|last| day >= last);
            if (stop.exists() || until) && day < bench.days {
                if stop.exists() {
                    std::fs::remove_file(&stop)?;
                }
                bar.finish_and_clear();
                return paused(out, day, bench.days);
            }
        }
    }
    bar.finish_and_clear();
    let wall = elapsed();
    finish(bench, &work.path, &retention, &state.records, wall, out)
}

/// What a kept year says when it stops after `day` (its state saved) to go on later.
fn paused(out: &mut dyn Write, day: usize, days: usize) -> Result<()> {
    writeln!(
        out,
        "paused after day {day} of {days}; go on with the same options and --resume"
    )?;
    Ok(())
}

/// The closing report: the records, the store against a freshly written copy of its rows, and
/// each job's time on the last day against day 1.
fn finish(
    bench: &YearBench,
    work: &Path,
    retention: &RetentionSection,
    records: &[Value],
    wall_seconds: f64,
    out: &mut dyn Write,
) -> Result<()> {
    let db = work.join("db").to_string_lossy().into_owned();
    let last = records.last().cloned().unwrap_or(Value::Null);
    // The last day's record holds its copy (a year kept before per-day copies does not).
    let (fresh_rows, fresh) = if last["fresh_copy_without_indexes"].is_object() {
        (
            last["fresh_copy_without_indexes"].clone(),
            last["fresh_copy"].clone(),
        )
    } else {
        fresh_copy_bytes(work, &db)?
    };
    let bytes = copied_bytes(&last["storage"]);
    let fresh_bytes = copied_bytes(&fresh);
    let ratio = |of: f64| ratio_of(bytes, of);
    // The sampled day furthest over its fresh copy (years kept before the per-day copies
    // have none).
    let worst = records
        .iter()
        .filter(|r| r["bytes_over_fresh_copy"].is_number())
        .max_by(|a, b| {
            let key = |r: &Value| r["bytes_over_fresh_copy"].as_f64().unwrap_or(0.0);
            key(a).total_cmp(&key(b))
        })
        .map(|r| json!({"day": r["day"], "bytes_over_fresh_copy": r["bytes_over_fresh_copy"]}));
    // Each job's time on the last day against day 1 (jobs that ran on both).
    let first = records
        .iter()
        .find(|r| r["day"] == 1)
        .cloned()
        .unwrap_or(Value::Null);
    let mut ratios = serde_json::Map::new();
    for (job, s) in first["seconds"].as_object().into_iter().flatten() {
        if let (Some(a), Some(b)) = (s.as_f64(), last["seconds"][job].as_f64())
            && a > 0.0
        {
            ratios.insert(job.clone(), json!((b / a * 100.0).round() / 100.0));
        }
    }
    // The year's shape (what a resume checks), then what it measured.
    let mut report = shape_of(bench, retention);
    let measured = json!({
        "bench": "year",
        "cpu": cpu_name(),
        "wall_seconds": wall_seconds.round(),
        "samples": records,
        "fresh_copy": fresh,
        "fresh_copy_without_indexes": fresh_rows,
        "bytes_over_fresh_copy": ratio(fresh_bytes),
        "bytes_over_fresh_rows": ratio(copied_bytes(&fresh_rows)),
        "most_over_fresh_copy": worst,
        "last_day_over_day_1": ratios,
    });
    for (k, v) in measured.as_object().into_iter().flatten() {
        report[k] = v.clone();
    }
    serde_json::to_writer_pretty(&mut *out, &report)?;
    writeln!(out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::steps_of;

    #[test]
    fn the_days_schedule_follows_the_cadences() {
        assert_eq!(
            steps_of(1, true, false),
            ["embed", "entities", "scores", "link"]
        );
        let week = steps_of(7, true, false);
        assert!(week.contains(&"consolidate") && week.contains(&"optimize"));
        assert!(!steps_of(7, false, false).contains(&"optimize"));
        assert!(steps_of(30, true, false).contains(&"entity-gc"));
        assert!(!steps_of(29, true, false).contains(&"entity-gc"));
        // Day 0's night, before day 1, runs every step once.
        let night_0 = steps_of(0, true, false);
        assert!(
            ["embed", "consolidate", "entity-gc", "optimize"]
                .iter()
                .all(|s| night_0.contains(s))
        );
        // Seed 004's jobs run daily when asked for.
        let daily = steps_of(1, true, true);
        assert!(daily.contains(&"sessions") && daily.contains(&"prune"));
        assert!(steps_of(7, true, true).contains(&"distill"));
        assert!(!daily.contains(&"distill"), "distill runs weekly");
    }
}
