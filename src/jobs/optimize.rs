//! `memlife optimize`: keeps the tables small and fast as nightly runs pile up commits. For
//! every table, in turn: indexes take in the rows written since they were built (one commit),
//! fragments are compacted by the `[retention]` policy (small ones merged, a large one only
//! rewritten once it holds many deleted rows; one commit), and versions written before
//! the retention window (`[retention] keep_versions_days`, default 14, measured on the run's
//! clock) are removed with the files only they referred to. The latest version is never
//! removed, and every table stays readable after each step.
//!
//! Removing versions is the destructive step: `undo` reads old versions, so a run whose
//! versions are gone can no longer be undone (`undo` says so, naming the window). The
//! tables undo does not put back, the logs (`runs`, `audit_log`, `llm_batches`), keep theirs
//! only `[retention] keep_log_versions_days` (default 1): each holds every row in its
//! current version, and on day 365 of the year bench their old versions were 12 of the
//! store's 125 MB (`audit_log`'s re-merged fragments and remapped indexes; with a day's,
//! the store was within 2x of a fresh copy on 14 of the 19 sampled days from day 20, against
//! 9; BENCHMARKS.md, session 46). One PRUNE_VERSIONS audit row per table, naming the versions
//! and the cutoff, is written before they go. A run killed half-way leaves each table at one
//! of its steps; the next run does the rest. The run itself is not undoable: it changes how
//! rows are stored, not the rows.
//!
//! `--light` (what `nightly` runs on the days a full optimize is not due) merges the small
//! fragments the day's commits appended and removes the versions that left the window that
//! day; of the indexes it updates only those of the tables recall searches, which take the
//! day's rows every night. Versions removed only weekly, the window held up to 20 days of
//! them, not 14: on day 300 of `bench year` the store was 136.7 MB with weekly removal and
//! 101.5 MB with nightly (BENCHMARKS.md, session 42). The removal is Lance's cleanup,
//! which reads each kept manifest of the table; the versions to name in the audit row are
//! found without reading them (`Store::versions_before`). A light run on day 366 of the year
//! took 1.17x its time on day 16, the first nights the window is full, and 2.3x its time on
//! day 2, when nothing is old enough to go (BENCHMARKS.md, session 43).
//!
//! The indexes of the tables recall searches (the ones with a full-text index) take the
//! night's rows into a delta and are merged into one segment at each full run, so the
//! week's fragments, indexed by different segments, merge again: a search loads and scores
//! each segment apart, and scans the rows none holds. On a day-118 store of `bench year`,
//! four days after a full run, a recall took 67.7 ms with the indexes as the week left them
//! and 54.7 ms with them current (`benches/recall_index_states.py`; BENCHMARKS.md, session
//! 35). Their full-text index was merged whole every night until session 44, a copy the
//! window kept each night; on a day-160 store its second segment cost a recall nothing
//! measurable (101.1 ms against 102.4 ms merged). Other indexes are kept as
//! their oldest segment and one delta, merged whole once the delta holds `DELTA_SHARE` of
//! the oldest's rows (`store::maintain::segments_to_merge`): a merge rewrites an index and
//! the window keeps each rewrite, while every lookup (each merge on a table's key) opens
//! every segment.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::json;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::config::RetentionSection;
use crate::model::clock::Clock;
use crate::model::schema::{ALL_TABLES, REVERTIBLE};
use crate::model::typed::RunStart;
use crate::store::audit::AuditRow;
use crate::store::maintain::{CompactionPolicy, TableStorage};

/// Compacts small fragments, updates indexes and removes versions older than the retention
/// window, table by table.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OptimizeArgs {
    /// Keep versions this many days old or newer (default `[retention] keep_versions_days`,
    /// 14); older ones are removed and runs that wrote them can no longer be undone.
    #[arg(long, value_name = "DAYS")]
    pub keep_versions_days: Option<f64>,
    /// Keep the versions of the logs (`runs`, `audit_log`, `llm_batches`, and the other
    /// tables undo does not put back) this many days (default `[retention]
    /// keep_log_versions_days`, 1). Only undo's check of a `batches poll` run reads them.
    #[arg(long, value_name = "DAYS")]
    pub keep_log_versions_days: Option<f64>,
    /// Only these tables (comma-separated; default every table).
    #[arg(long, value_delimiter = ',')]
    pub tables: Vec<String>,
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    /// Only merge the small fragments (under 64 rows) the day's commits left, bring the
    /// indexes of the tables recall searches up to date and remove the versions older than
    /// the window: no rewrite of a large fragment. `nightly` runs this on the days a full
    /// optimize is not due, so reads do not open a dozen more fragments, or scan the rows
    /// no index holds, for every day since the last one, and the window holds its days of
    /// versions, not up to a week more.
    #[arg(long)]
    pub light: bool,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for OptimizeArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

/// The compaction policy of a configuration's `[retention]` section.
pub fn compaction_policy(retention: &RetentionSection) -> CompactionPolicy {
    CompactionPolicy {
        deleted_fraction: retention.compact_deleted_fraction,
        fragment_fraction: retention.compact_fragment_fraction,
        min_rows: CompactionPolicy::MIN_ROWS,
    }
}

/// "1.2 MB" and the like.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: &[&str] = &["B", "kB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn describe(before: &TableStorage, after: &TableStorage, light: bool, removed: u64) -> String {
    if light {
        // A light run reads the current version only (`Store::current_storage`).
        let versions = match removed {
            0 => String::new(),
            n => format!(", {n} versions removed"),
        };
        return format!(
            "{}: {} -> {} fragments, {} -> {} open files{versions}",
            before.table, before.fragments, after.fragments, before.open_files, after.open_files
        );
    }
    format!(
        "{}: {} -> {} fragments, {} -> {} versions, {} -> {}",
        before.table,
        before.fragments,
        after.fragments,
        before.versions,
        after.versions,
        human_bytes(before.bytes),
        human_bytes(after.bytes)
    )
}

pub async fn run(ctx: &JobCtx<'_>, args: &OptimizeArgs) -> Result<JobReport> {
    if ctx.scope != crate::logic::shard::UserScope::All {
        bail!(
            "optimize works on whole tables: it takes no --user or --shard (run it once, not per shard)"
        );
    }
    let retention = &ctx.app.config().await?.retention;
    let policy = if args.light {
        CompactionPolicy::LIGHT
    } else {
        compaction_policy(retention)
    };
    let (data, logs) = windows(ctx, args, retention).await?;
    let known: Vec<&str> = ALL_TABLES.iter().map(|s| s.name).collect();
    if let Some(unknown) = args.tables.iter().find(|t| !known.contains(&t.as_str())) {
        bail!(
            "--tables: no table named '{unknown}' (tables: {})",
            known.join(", ")
        );
    }
    let tables: Vec<&str> = known
        .iter()
        .copied()
        .filter(|t| args.tables.is_empty() || args.tables.iter().any(|a| a == t))
        .collect();
    let window_of = |table: &str| Window::for_table(table, &data, &logs);
    let params = json!({
        "light": args.light,
        "keep_versions_days": data.days,
        "keep_log_versions_days": logs.days,
        "compaction": {
            "deleted_fraction": policy.deleted_fraction,
            "fragment_fraction": policy.fragment_fraction,
        },
        "tables": tables,
        "now": ctx.now.to_rfc3339(),
        "cutoff": data.cutoff.to_rfc3339(),
        "log_cutoff": logs.cutoff.to_rfc3339(),
    });
    let log = RunLog::start(ctx, JobName::Optimize.as_str(), &params).await?;
    let mut report = JobReport::new(JobName::Optimize.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = ["versions_removed", "files_removed", "bytes_removed"]
        .iter()
        .map(|k| (k.to_string(), 0))
        .collect();
    let add = |counts: &mut BTreeMap<String, u64>, name: &str, n: u64| {
        *counts.entry(name.to_string()).or_default() += n;
    };
    // What each table holds, and its versions older than the window.
    let mut plan = Vec::new();
    // (A light run reads the current version's storage, not every version's files, a walk
    // whose cost grows with the window; the versions that left it are found by name and a
    // few manifest reads: `Store::versions_before`.)
    let storage_of = |table: &'static str| async move {
        if args.light {
            ctx.store.current_storage(table).await
        } else {
            ctx.store.table_storage(table).await
        }
    };
    for table in &tables {
        let started = Instant::now();
        let before = storage_of(table).await?;
        let old = ctx
            .store
            .versions_before(table, window_of(table).written_before)
            .await?;
        report.phase("read", started);
        add(&mut counts, "fragments_before", before.fragments as u64);
        if !args.light {
            add(&mut counts, "versions_before", before.versions as u64);
            add(&mut counts, "bytes_before", before.bytes);
        }
        plan.push((*table, before, old));
    }
    if ctx.dry_run {
        for (table, before, old) in &plan {
            // (A light run does not count the versions: `current_storage`.)
            let versions = if args.light {
                String::new()
            } else {
                format!("{} versions of which ", before.versions)
            };
            report.notes.push(format!(
                "{table}: {} fragments ({} small), {versions}{} older than the window",
                before.fragments,
                before.small_fragments,
                old.len()
            ));
            add(&mut counts, "versions_removed", old.len() as u64);
        }
    } else {
        // Logged before any goes, in one commit: which versions of which table, and the
        // window that let them go. Appended: each row's key holds this run's own id, so
        // none can be there already (a merge looked up every key in `audit_log`'s index,
        // 21 ms of a light run on day 366 of `bench year`).
        let rows = prune_rows(ctx, log.run_id(), &plan, window_of);
        let started = Instant::now();
        if !rows.is_empty() {
            ctx.store.append_audit(&rows).await?;
        }
        report.phase("audit", started);
        crate::crash::point("optimize.after-audit");
        for (table, before, old) in &plan {
            let (indexes, removed, added) =
                compact_and_index(ctx, args.light, table, &policy, &mut report).await?;
            add(&mut counts, "fragments_compacted", removed as u64);
            add(&mut counts, "fragments_written", added as u64);
            add(&mut counts, "indexes_updated", indexes as u64);
            let mut pruned = 0;
            if !old.is_empty() {
                crate::crash::point("optimize.before-prune");
                let started = Instant::now();
                let (versions, files, bytes) = ctx
                    .store
                    .remove_versions_before(table, window_of(table).written_before)
                    .await?;
                report.phase("prune", started);
                pruned = versions;
                add(&mut counts, "versions_removed", versions);
                add(&mut counts, "files_removed", files);
                add(&mut counts, "bytes_removed", bytes);
            }
            let started = Instant::now();
            let after = storage_of(table).await?;
            report.phase("read", started);
            add(&mut counts, "fragments_after", after.fragments as u64);
            if !args.light {
                add(&mut counts, "versions_after", after.versions as u64);
                add(&mut counts, "bytes_after", after.bytes);
            }
            if after != *before || pruned > 0 {
                report
                    .notes
                    .push(describe(before, &after, args.light, pruned));
            }
        }
    }
    counts.insert("tables".into(), tables.len() as u64);
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}

/// The tables recall searches: those with a full-text index (`store::index::TEXT_INDEXES`).
fn searched(table: &str) -> bool {
    crate::store::index::TEXT_INDEXES
        .iter()
        .any(|(t, _)| *t == table)
}

/// Whether a table's indexes are folded into one segment (see the module's notes): on the
/// tables recall searches, on a full run. Between full runs the full-text index, like the
/// others, keeps its oldest segment and takes the night's rows into one delta: merged whole
/// every night, it was a new copy of the index a night, which the window kept (on day 365
/// of the year bench, 18 copies, 6.2 MB, against 0.35 MB for the index itself).
fn one_segment(table: &str, light: bool) -> bool {
    searched(table) && !light
}

/// One table's compaction and index update, in the order each kind of run needs; returns
/// the indexes updated and the fragments compacted and written. A full run updates the
/// indexes first: Lance merges only fragments that the same indexes cover, so the week's
/// new fragments, not yet indexed, would otherwise stay apart from the indexed ones for good
/// (one more fragment a week); compaction remaps the indexes onto what it writes, and a
/// second update covers anything it could not remap. A light run merges the day's small
/// fragments, none of them indexed yet, first, then folds them into the indexes of the
/// tables recall searches once (indexed first, they were remapped by the merge: a second
/// copy of the full-text index a night, which the window keeps).
async fn compact_and_index(
    ctx: &JobCtx<'_>,
    light: bool,
    table: &str,
    policy: &CompactionPolicy,
    report: &mut JobReport,
) -> Result<(usize, usize, usize)> {
    let one = one_segment(table, light);
    let started = Instant::now();
    // Where indexes keep an oldest segment and a delta (the tables recall does not search),
    // what that segment covered before the run settles at half the rows: compaction remaps
    // every segment covering what it rewrites, a copy of the whole index. What merges is the
    // week's rows and the fragments only the delta covers. (Read before the update: when it
    // merges everything into one segment, the week's fragments still merge.) A light run
    // merges only fragments under 64 rows, which a base hardly ever covers: not read there.
    let base = if light || searched(table) {
        std::collections::HashSet::new()
    } else {
        ctx.store.index_base_fragments(table).await?
    };
    let mut indexes = 0;
    if !light {
        indexes = ctx.store.update_indexes(table, one).await?;
    }
    report.phase("index", started);
    let started = Instant::now();
    let (removed, added) = ctx.store.compact_table(table, policy, &base).await?;
    report.phase("compact", started);
    crate::crash::point("optimize.after-compact");
    let started = Instant::now();
    if light && searched(table) {
        indexes = ctx.store.update_indexes(table, one).await?;
    } else if added > 0 && !light {
        ctx.store.update_indexes(table, one).await?;
    }
    report.phase("index", started);
    Ok((indexes, removed, added))
}

/// The PRUNE_VERSIONS audit rows of a run: one per table with versions to remove, naming them
/// and the window that lets them go.
fn prune_rows<'w>(
    ctx: &JobCtx<'_>,
    run_id: &str,
    plan: &[(&str, TableStorage, Vec<u64>)],
    window_of: impl Fn(&str) -> &'w Window,
) -> Vec<AuditRow> {
    plan.iter()
        .filter_map(|(table, _, old)| {
            let Window {
                days,
                key,
                cutoff,
                consequence,
                ..
            } = window_of(table);
            let (first, last) = (old.iter().min()?, old.iter().max()?);
            let mut row = AuditRow::new(
                run_id,
                "PRUNE_VERSIONS",
                &format!("{table}|{first}-{last}|{}", run_id),
                ctx.now.timestamp_micros(),
            );
            row.target_id = Some(table.to_string());
            row.reasoning = Some(format!(
                "versions {first} to {last} of {table} ({} versions) were written before {} \
                     ([retention] {key} = {days}): logged here, then removed with \
                     the files only they used; {consequence}",
                old.len(),
                cutoff.to_rfc3339(),
            ));
            row.before_state = Some(json!({"versions": old}).to_string());
            Some(row)
        })
        .collect()
}

/// The windows of a run: the data's (`--keep-versions-days`) and the logs'
/// (`--keep-log-versions-days`), each defaulting to `[retention]`.
async fn windows(
    ctx: &JobCtx<'_>,
    args: &OptimizeArgs,
    retention: &RetentionSection,
) -> Result<(Window, Window)> {
    let days = args
        .keep_versions_days
        .unwrap_or(retention.keep_versions_days);
    let log_days = args
        .keep_log_versions_days
        .unwrap_or(retention.keep_log_versions_days);
    for (flag, d) in [
        ("--keep-versions-days", days),
        ("--keep-log-versions-days", log_days),
    ] {
        if !(d.is_finite() && d >= 0.0) {
            bail!("{flag} must be a number of days, 0 or more (got {d})");
        }
    }
    let mut runs: Vec<RunStart> = ctx.store.scan_rows("runs", None).await?;
    // Latest first: each window parses the options of the runs since its cutoff only, not
    // of every run the store ever had (2,400 a year of `bench year`, 15 ms of a light run).
    runs.sort_unstable_by_key(|r| std::cmp::Reverse(r.started_at));
    Ok((
        Window::of(
            ctx,
            &runs,
            days,
            "keep_versions_days",
            "runs that wrote them can no longer be undone",
        ),
        Window::of(
            ctx,
            &runs,
            log_days,
            "keep_log_versions_days",
            "undo does not put this table back, and its current version holds its rows",
        ),
    ))
}

/// A retention window: versions written before `written_before` go.
struct Window {
    days: f64,
    /// The `[retention]` key that sets it.
    key: &'static str,
    /// What the removal costs, for the PRUNE_VERSIONS row.
    consequence: &'static str,
    /// `days` before the run's clock.
    cutoff: chrono::DateTime<chrono::Utc>,
    written_before: chrono::DateTime<chrono::Utc>,
}

impl Window {
    /// The window of `table`: the data's for the tables undo puts back, else the logs'.
    fn for_table<'w>(table: &str, data: &'w Window, logs: &'w Window) -> &'w Window {
        if REVERTIBLE.iter().any(|s| s.name == table) {
            data
        } else {
            logs
        }
    }

    /// Versions carry the wall-clock time they were written at; runs carry the clock they
    /// computed at. A version is older than the window when it was written more than the
    /// window ago, or before a run whose clock was already outside it (on a store run at the
    /// current time the two agree; on one run at simulated clocks, the runs' clocks decide):
    /// `written_before` is the later of `days` before now and the start of the latest run
    /// whose clock is before `cutoff`. `runs`: latest started first.
    fn of(
        ctx: &JobCtx<'_>,
        runs: &[RunStart],
        days: f64,
        key: &'static str,
        consequence: &'static str,
    ) -> Window {
        let window = chrono::Duration::seconds((days * 86_400.0) as i64);
        let cutoff = ctx.now - window;
        // `runs` is latest first: the first whose clock is before the cutoff is the latest.
        let latest_outside = runs
            .iter()
            .find_map(|r| (r.time_param("clock")? < cutoff).then_some(r.started_at))
            .and_then(chrono::DateTime::from_timestamp_micros);
        let by_wall = chrono::Utc::now() - window;
        Window {
            days,
            key,
            consequence,
            cutoff,
            written_before: latest_outside.map_or(by_wall, |t| t.max(by_wall)),
        }
    }
}
