//! `memlife optimize` on real Lance folders: small fragments merged, old versions removed
//! (logged first), every row kept, `undo` of a run whose versions are gone refused with the
//! window named, a run inside the window still undoable, and `stats` showing the storage.

use serde_json::Value;

use crate::common::{TestDb, stderr, stdout};

fn json(out: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(out), stderr(out)))
}

/// A store after many small commits: 60 memories embedded 5 rows per commit, scored twice.
fn busy_store() -> TestDb {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    let lines: Vec<String> = (0..60)
        .map(|i| {
            format!(
                r#"{{"id":"m{i:02}","user_id":"u{}","text":"Memory number {i} about topic {}","salience":0.5,"created_at":"2025-01-01T00:00:00Z"}}"#,
                i % 2,
                i % 7
            )
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    for args in [
        vec!["import", file.as_str()],
        vec!["embed", "--embedder", "hash", "--commit-rows", "5"],
        vec!["scores", "--now", "2025-03-01T00:00:00Z"],
        vec!["scores", "--now", "2025-03-02T00:00:00Z", "--all"],
    ] {
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    db
}

#[test]
fn optimize_compacts_and_removes_old_versions_keeping_every_row() {
    let db = busy_store();
    let rows_before = db.rows("SELECT id, text, salience, tier FROM memories ORDER BY id");
    let before = db.storage("memories");
    assert!(before["versions"].as_u64().unwrap() > 5, "{before}");
    assert!(before["data_files"].as_u64().unwrap() > 3, "{before}");

    // Within the window (the default 14 days, on the store's clock: the scores runs ran at
    // 1 and 2 March) no version goes when the logs' window is as long.
    let kept = json(&db.run(&[
        "--json",
        "optimize",
        "--now",
        "2025-03-03T00:00:00Z",
        "--keep-log-versions-days",
        "14",
    ]));
    assert_eq!(kept["status"], "done", "{kept}");
    assert_eq!(kept["counts"]["versions_removed"], 0, "{kept}");
    // By default the logs keep a day's (`keep_log_versions_days`): theirs from before the
    // first scores run go, and no version of the data: the last scores run can still be
    // undone afterwards.
    let runs_versions = db.storage("runs")["versions"].as_u64().unwrap();
    let first = json(&db.run(&["--json", "optimize", "--now", "2025-03-03T00:00:00Z"]));
    assert_eq!(first["status"], "done", "{first}");
    assert!(
        db.storage("memories")["versions"].as_u64() >= before["versions"].as_u64(),
        "no version of memories went (optimize adds its own)"
    );
    assert!(db.storage("runs")["versions"].as_u64().unwrap() < runs_versions);
    let pruned_tables = db.rows(
        "SELECT DISTINCT target_id FROM audit_log WHERE operation = 'PRUNE_VERSIONS' \
         ORDER BY target_id",
    );
    assert!(
        pruned_tables.iter().any(|r| r["target_id"] == "runs")
            && pruned_tables.iter().all(|r| {
                [
                    "runs",
                    "audit_log",
                    "llm_batches",
                    "memlife_meta",
                    "bench_runs",
                ]
                .contains(&r["target_id"].as_str().unwrap())
            }),
        "only the logs lost versions: {pruned_tables:?}"
    );
    let undo = db.run(&["undo", "--last", "scores", "--dry-run"]);
    assert_eq!(undo.status.code(), Some(0), "{}", stderr(&undo));

    // A window of 0 days removes every version but the latest, logged first.
    let pruned = json(&db.run(&["--json", "optimize", "--keep-versions-days", "0"]));
    assert_eq!(pruned["status"], "done", "{pruned}");
    assert!(pruned["counts"]["versions_removed"].as_u64().unwrap() > 5);
    // Where the time went: a removal only when versions went.
    let phases = |r: &serde_json::Value| {
        let p = r["phases_ms"].as_object().cloned().unwrap_or_default();
        p.keys().cloned().collect::<Vec<_>>()
    };
    assert_eq!(
        phases(&pruned),
        ["audit", "compact", "index", "prune", "read"]
    );
    assert!(!phases(&kept).contains(&"prune".to_string()), "{kept}");
    let after = db.storage("memories");
    assert_eq!(after["versions"], 1, "{after}");
    assert!(
        after["data_files"].as_u64() < before["data_files"].as_u64(),
        "the old versions' files went with them: {before} -> {after}"
    );
    assert!(
        after["bytes"].as_u64().unwrap() < before["bytes"].as_u64().unwrap(),
        "{before} -> {after}"
    );
    assert_eq!(
        db.rows("SELECT id, text, salience, tier FROM memories ORDER BY id"),
        rows_before,
        "every row as it was"
    );
    let logged = db.rows(
        "SELECT target_id, before_state FROM audit_log WHERE operation = 'PRUNE_VERSIONS' \
         AND target_id = 'memories'",
    );
    assert_eq!(logged.len(), 1, "{logged:?}");

    // The scores run's versions are gone: undo refuses, naming the window.
    let undo = db.run(&["undo", "--last", "scores"]);
    assert_ne!(undo.status.code(), Some(0));
    let message = stderr(&undo);
    assert!(
        message.contains("can no longer be undone") && message.contains("kept 0"),
        "{message}"
    );
    // The optimize run itself is not a change of rows.
    let undo = db.run(&["undo", "--last", "optimize"]);
    assert!(
        stderr(&undo).contains("nothing to undo"),
        "{}",
        stderr(&undo)
    );
}

/// Memories `from..to` as JSON lines, one user per ten.
fn memory_lines(from: usize, to: usize) -> String {
    (from..to)
        .map(|i| {
            format!(
                r#"{{"id":"m{i:05}","user_id":"u{}","text":"Memory number {i} about topic {}","salience":0.5,"created_at":"2025-01-01T00:00:00Z"}}"#,
                i % 10,
                i % 7
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn fragments(db: &TestDb) -> u64 {
    db.storage("memories")["fragments"]
        .as_u64()
        .expect("fragments")
}

#[test]
fn compaction_merges_small_fragments_and_rewrites_a_large_one_only_past_its_deleted_share() {
    // One large fragment (2000 rows, one import) and three small ones (5 rows each).
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(&file, memory_lines(0, 2000)).unwrap();
    let out = db.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for k in 0..3 {
        std::fs::write(&file, memory_lines(2000 + 5 * k, 2005 + 5 * k)).unwrap();
        let out = db.run(&["import", &file]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    assert_eq!(fragments(&db), 4);
    let rows_before = db.rows("SELECT id, text, salience FROM memories ORDER BY id");
    let large_bytes = db.storage("memories")["live_bytes"].as_u64().unwrap();

    // The small ones merge into one; the large one is not copied.
    let report = json(&db.run(&["--json", "optimize", "--tables", "memories"]));
    assert_eq!(report["counts"]["fragments_compacted"], 3, "{report}");
    assert_eq!(report["counts"]["fragments_written"], 1, "{report}");
    assert_eq!(fragments(&db), 2);
    let after = db.storage("memories");
    assert_eq!(
        after["open_files"], 2,
        "one data file per fragment: {after}"
    );
    assert!(
        after["bytes"].as_u64().unwrap() < large_bytes * 3 / 2,
        "no second copy of the large fragment: {after} (live {large_bytes})"
    );

    // Column updates (scores, every day) replace the columns' files, not the fragment:
    // compaction leaves the large fragment alone, and every value reads as scores left it.
    for now in [
        "2025-03-01T00:00:00Z",
        "2025-03-02T00:00:00Z",
        "2025-03-03T00:00:00Z",
    ] {
        let out = db.run(&["scores", "--now", now]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let scored = db.rows("SELECT id, salience, tier, retention FROM memories ORDER BY id");
    // Each column update attached a file to both fragments: a read opens those too.
    let open = db.storage("memories")["open_files"].as_u64().unwrap();
    assert!(open > 2, "scores' column files are opened by reads: {open}");
    let report = json(&db.run(&["--json", "optimize", "--tables", "memories"]));
    assert_eq!(report["counts"]["fragments_compacted"], 0, "{report}");
    assert_eq!(
        db.rows("SELECT id, salience, tier, retention FROM memories ORDER BY id"),
        scored
    );

    // Whole rows written again (a quarter of the large fragment's) delete the old copies;
    // past `compact_deleted_fraction` (0.2) the fragment is rewritten without them.
    std::fs::write(
        &file,
        memory_lines(0, 500).replace("Memory number", "Rewritten memory number"),
    )
    .unwrap();
    let out = db.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // At 1/8 of the table (252 rows, so 256), the 500 new rows are a large fragment.
    let config = db.path("memlife.toml");
    std::fs::write(
        &config,
        "[retention]\ncompact_deleted_fraction = 0.3\ncompact_fragment_fraction = 0.125\n",
    )
    .unwrap();
    let report = json(&db.run(&[
        "--config", &config, "--json", "optimize", "--tables", "memories",
    ]));
    assert_eq!(
        report["counts"]["fragments_compacted"], 0,
        "the large one, 25% deleted, is under 0.3; the new 500 rows are a large fragment \
         too (at least 256 rows); the merged 15 have no small neighbour: {report}"
    );
    assert_eq!(fragments(&db), 3);
    std::fs::write(&config, "[retention]\ncompact_fragment_fraction = 0.125\n").unwrap();
    let report = json(&db.run(&[
        "--config", &config, "--json", "optimize", "--tables", "memories",
    ]));
    assert_eq!(
        report["counts"]["fragments_compacted"], 2,
        "25% deleted is over 0.2: the large one is rewritten, with its small neighbour: {report}"
    );
    // Rewritten in pieces of the policy's size (1/8 of the table, at least 256 rows), so a
    // later rewrite copies one piece, not the table; the 500-row fragment is untouched.
    assert_eq!(
        report["counts"]["fragments_written"].as_u64().unwrap() + 1,
        fragments(&db),
        "{report}"
    );
    assert!(fragments(&db) > 2, "{report}");
    assert_eq!(
        db.scalar("SELECT count(*) FROM memories WHERE text LIKE 'Rewritten%'"),
        "500"
    );
    assert_eq!(
        db.rows("SELECT id FROM memories ORDER BY id").len(),
        rows_before.len()
    );

    // A fraction outside (0, 1] is named.
    std::fs::write(&config, "[retention]\ncompact_fragment_fraction = 0\n").unwrap();
    let out = db.run(&["--config", &config, "optimize"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("retention.compact_fragment_fraction"),
        "{}",
        stderr(&out)
    );
}

/// A fragment that was large when written stays out of later merges as the table grows past
/// it: merging it would copy it again, a copy the version window keeps.
#[test]
fn a_settled_fragment_is_not_merged_again_as_the_table_grows() {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    // [3000] [900] [5] [5] [5]: 3,915 rows, a target of 978 rows; the 900-row fragment is
    // under it but more than half of it.
    for (from, to) in [
        (0, 3000),
        (3000, 3900),
        (3900, 3905),
        (3905, 3910),
        (3910, 3915),
    ] {
        std::fs::write(&file, memory_lines(from, to)).unwrap();
        let out = db.run(&["import", &file]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    assert_eq!(fragments(&db), 5);
    let report = json(&db.run(&["--json", "optimize", "--tables", "memories"]));
    assert_eq!(
        report["counts"]["fragments_compacted"], 3,
        "the three small ones merge; the 900 rows beside them are not copied again: {report}"
    );
    assert_eq!(report["counts"]["fragments_written"], 1, "{report}");
    assert_eq!(fragments(&db), 3);
    assert_eq!(db.count("memories"), 3915);
}

/// `embed` on a fresh import commits fragments that compaction leaves alone: the vectors are
/// written once, not once per commit and again by the merge of the commits.
#[test]
fn an_embedded_import_is_not_rewritten_by_compaction() {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(&file, memory_lines(0, 6000)).unwrap();
    let out = db.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&db.run(&["--json", "embed", "--embedder", "hash"]));
    assert_eq!(report["counts"]["embedded"], 6000, "{report}");
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("memories: a commit every 1500 rows"),
        "{notes}"
    );
    assert_eq!(
        fragments(&db),
        4,
        "four commits of a quarter of the table each"
    );
    let report = json(&db.run(&["--json", "optimize", "--tables", "memories"]));
    assert_eq!(report["counts"]["fragments_compacted"], 0, "{report}");
    // On disk: the live rows, and the import's rows without vectors the window keeps.
    let storage = db.storage("memories");
    let (bytes, live) = (
        storage["bytes"].as_u64().unwrap(),
        storage["live_bytes"].as_u64().unwrap(),
    );
    assert!(
        bytes < live * 3 / 2,
        "one copy of the vectors on disk: {bytes} bytes, {live} live"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM memories WHERE embedding IS NULL"),
        "0"
    );
}

#[test]
fn optimize_names_bad_input() {
    let db = TestDb::new();
    let out = db.run(&["optimize", "--tables", "memories,nope"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("no table named 'nope'"),
        "{}",
        stderr(&out)
    );
    let out = db.run(&["optimize", "--user", "u1"]);
    assert!(stderr(&out).contains("takes no --user"), "{}", stderr(&out));
    let out = db.run(&["optimize", "--keep-versions-days", "-3"]);
    assert_ne!(out.status.code(), Some(0));
    let config = db.path("memlife.toml");
    std::fs::write(&config, "[retention]\nkeep_versions_days = \"soon\"\n").unwrap();
    let out = db.run(&["--config", &config, "optimize"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("keep_versions_days"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&config, "[retention]\nkeep_log_versions_days = -1\n").unwrap();
    let out = db.run(&["--config", &config, "optimize"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("retention.keep_log_versions_days = -1"),
        "{}",
        stderr(&out)
    );
    let out = db.run(&["optimize", "--keep-log-versions-days", "NaN"]);
    assert!(
        stderr(&out).contains("--keep-log-versions-days must be a number of days"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_window_is_measured_on_the_clock_the_runs_ran_at() {
    // Three scores runs a week apart on a simulated clock, all written within a minute of
    // wall time: a 10-day window at the last run's clock keeps what the last two runs wrote
    // and removes what came before the first.
    let db = busy_store();
    for now in [
        "2025-04-01T00:00:00Z",
        "2025-04-08T00:00:00Z",
        "2025-04-15T00:00:00Z",
    ] {
        let out = db.run(&["scores", "--now", now]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let out = db.run(&[
        "--json",
        "optimize",
        "--keep-versions-days",
        "10",
        "--now",
        "2025-04-15T00:00:00Z",
    ]);
    let report = json(&out);
    let removed = report["counts"]["versions_removed"].as_u64().unwrap();
    assert!(removed > 0, "{report}");
    // The PRUNE_VERSIONS rows, written before the removal, named exactly what went.
    let named: usize = db
        .rows("SELECT before_state FROM audit_log WHERE operation = 'PRUNE_VERSIONS'")
        .iter()
        .map(|row| {
            let state: Value = serde_json::from_str(row["before_state"].as_str().unwrap()).unwrap();
            state["versions"].as_array().unwrap().len()
        })
        .sum();
    assert_eq!(named as u64, removed, "{report}");
    // The last run (inside the window) can be undone; the first (outside) cannot.
    let undo = db.run(&["undo", "--last", "scores", "--dry-run"]);
    assert_eq!(undo.status.code(), Some(0), "{}", stderr(&undo));
    let first =
        db.scalar("SELECT run_id FROM runs WHERE job = 'scores' AND params LIKE '%2025-04-01%'");
    let undo = db.run(&["undo", first.trim_matches('"')]);
    assert!(
        stderr(&undo).contains("can no longer be undone"),
        "{}",
        stderr(&undo)
    );
}

/// `memlife bench year` at a tiny scale: the report's shape, and what optimize does to the
/// store over a week (fewer versions and files than the same week without it). The week with
/// optimize is paused after day 1 (a `stop` file) and day 3 (`--until-day`) and resumed, and
/// lives each sampled day three times (the default `--repeats`), the week without it once:
/// both end with the same rows.
#[test]
fn a_week_of_bench_year_with_and_without_optimize() {
    let dir = tempfile::tempdir().unwrap();
    let year = |extra: &[&str]| -> Value {
        let keep = dir.path().join(if extra.contains(&"--no-optimize") {
            "without"
        } else {
            "with"
        });
        let mut args = vec![
            "bench",
            "year",
            "--memories",
            "40",
            "--users",
            "2",
            "--days",
            "7",
            "--facts-per-day",
            "2",
            "--recalls-per-day",
            "1",
            "--keep-versions-days",
            "1",
        ];
        let keep = keep.to_string_lossy().into_owned();
        args.extend(["--keep", keep.as_str()]);
        args.extend_from_slice(extra);
        let out = crate::common::memlife(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = stdout(&out);
        if text.contains("paused after day") {
            return Value::Null;
        }
        serde_json::from_str(&text[text.find("{\n").expect("a JSON report")..]).unwrap()
    };
    let with_dir = dir.path().join("with");
    let day_done = || -> Value {
        let state: Value =
            serde_json::from_slice(&std::fs::read(with_dir.join("year-state.json")).unwrap())
                .unwrap();
        state["day_done"].clone()
    };
    // `--until-day 0` keeps the store in service before day 1 (day 0's night lived).
    assert_eq!(
        year(&["--until-day", "0"]),
        Value::Null,
        "paused after day 0"
    );
    assert_eq!(day_done(), 0);
    std::fs::write(with_dir.join("stop"), "").unwrap();
    assert_eq!(year(&["--resume"]), Value::Null, "paused after day 1");
    assert!(!with_dir.join("stop").exists(), "the stop file is taken");
    assert_eq!(day_done(), 1);
    // Other options than the year began with are refused, naming the one that differs.
    let keep = with_dir.to_string_lossy().into_owned();
    let out = crate::common::memlife(&[
        "bench",
        "year",
        "--memories",
        "41",
        "--keep",
        &keep,
        "--resume",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("memories = 40"), "{}", stderr(&out));
    // `--until-day` pauses after the day named.
    assert_eq!(year(&["--resume", "--until-day", "3"]), Value::Null);
    assert_eq!(day_done(), 3);
    let with = year(&["--resume"]);
    let without = year(&["--no-optimize", "--repeats", "1"]);
    assert!(
        !with_dir.join("db.repeat").exists(),
        "the repeats' copy is removed"
    );
    // The year's own store lived each day once: one integration a day, the sampled days'
    // repeats (days 1 and 7) included.
    let integrations = crate::common::memlife(&[
        "--db",
        &with_dir.join("db").to_string_lossy(),
        "sql",
        "SELECT COUNT(*) AS n FROM runs WHERE job = 'integrate'",
        "--format",
        "jsonl",
    ]);
    assert_eq!(
        stdout(&integrations).trim(),
        r#"{"n":7}"#,
        "{}",
        stderr(&integrations)
    );
    let days: Vec<u64> = with["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["day"].as_u64().unwrap())
        .collect();
    // Day 0's night (the whole pipeline once, before day 1), day 1 and the last day; the
    // ratios compare the last day with day 1, not with that first night.
    assert_eq!(days, [0, 1, 7], "{with}");
    assert!(with["samples"][0]["seconds"]["nightly"].as_f64().is_some());
    // A sampled day's time is each job's median over its runs, each of which is kept.
    for (report, repeats) in [(&with, 3), (&without, 1)] {
        for day in [1, 2] {
            let sample = &report["samples"][day];
            let runs = sample["seconds_of_each_run"].as_array().unwrap();
            assert_eq!(runs.len(), repeats, "{sample}");
            let recall = sample["seconds"]["recall"].as_f64().unwrap();
            let mut each: Vec<f64> = runs.iter().map(|r| r["recall"].as_f64().unwrap()).collect();
            each.sort_by(f64::total_cmp);
            assert_eq!(recall, each[repeats / 2], "{sample}");
        }
    }
    // That night embedded the imported rows before day 1 (its clock is 01:00 on the first
    // day, day 1's is a day later), so day 1's recall searched vectors.
    let out = crate::common::memlife(&[
        "--db",
        &with_dir.join("db").to_string_lossy(),
        "sql",
        "SELECT COUNT(*) AS n FROM runs WHERE job = 'embed' \
         AND params LIKE '%\"clock\":\"2026-01-01T01:00:00%'",
        "--format",
        "jsonl",
    ]);
    assert_eq!(stdout(&out).trim(), r#"{"n":1}"#, "{}", stderr(&out));
    assert!(with["last_day_over_day_1"]["recall"].as_f64().is_some());
    assert!(with["last_day_over_day_1"]["nightly"].is_null(), "{with}");
    assert!(
        with["samples"][2]["seconds"]["optimize"].as_f64().is_some(),
        "{with}"
    );
    assert!(
        without["samples"][2]["seconds"]["optimize"].is_null(),
        "{without}"
    );
    let total = |r: &Value, what: &str| r["samples"][2]["storage"]["total"][what].as_u64().unwrap();
    assert!(
        total(&with, "versions") < total(&without, "versions"),
        "{with} {without}"
    );
    assert!(total(&with, "data_files") < total(&without, "data_files"));
    // The same rows either way, and the fresh copy holds them.
    let memories = |r: &Value| r["samples"][2]["storage"]["memories"]["rows"].clone();
    assert_eq!(memories(&with), memories(&without));
    assert_eq!(with["fresh_copy"]["memories"]["rows"], memories(&with));
    assert!(with["bytes_over_fresh_copy"].as_f64().unwrap() >= 1.0);
    // Each sampled day after day 0 has its own copy, of that day's rows, and the report
    // names the day furthest over its copy.
    let sample = |day: usize| &with["samples"][day];
    for day in [1, 2] {
        assert_eq!(
            sample(day)["fresh_copy"]["memories"]["rows"],
            sample(day)["storage"]["memories"]["rows"],
            "{with}"
        );
        assert!(sample(day)["bytes_over_fresh_copy"].as_f64().unwrap() >= 1.0);
    }
    assert_ne!(
        sample(1)["fresh_copy"]["memories"]["rows"],
        sample(2)["fresh_copy"]["memories"]["rows"]
    );
    let worst = &with["most_over_fresh_copy"];
    let ratios: Vec<f64> = [1, 2]
        .iter()
        .map(|d| sample(*d)["bytes_over_fresh_copy"].as_f64().unwrap())
        .collect();
    assert_eq!(
        worst["bytes_over_fresh_copy"].as_f64().unwrap(),
        ratios[0].max(ratios[1]),
        "{with}"
    );
}

#[test]
fn a_light_optimize_merges_only_the_small_fragments_and_removes_only_old_versions() {
    // One large fragment (2000 rows), a quarter of it written again (deleted in place: a
    // full optimize at 0.2 would rewrite it), then three small appends.
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(&file, memory_lines(0, 2000)).unwrap();
    assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    // The indexes a store of 10k rows gets from its jobs, here at 2000.
    assert_eq!(db.run(&["index", "--scalar"]).status.code(), Some(0));
    std::fs::write(
        &file,
        memory_lines(0, 500).replace("Memory number", "Rewritten memory number"),
    )
    .unwrap();
    assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    for k in 0..3 {
        std::fs::write(&file, memory_lines(2000 + 5 * k, 2005 + 5 * k)).unwrap();
        assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    }
    assert_eq!(fragments(&db), 5);
    let rows_before = db.rows("SELECT id, text FROM memories ORDER BY id");
    let before = db.storage("memories");
    let indexes = |s: &serde_json::Value| s["indexes"].as_array().unwrap().clone();
    let unindexed = |s: &serde_json::Value| -> u64 {
        indexes(s)
            .iter()
            .map(|i| i["unindexed_rows"].as_u64().unwrap())
            .sum()
    };
    assert!(
        unindexed(&before) > 0,
        "the small appends are in no index yet: {before}"
    );

    let report = json(&db.run(&["--json", "optimize", "--light", "--tables", "memories"]));
    assert_eq!(report["status"], "done", "{report}");
    assert_eq!(
        report["counts"]["fragments_compacted"], 3,
        "the three small appends, not the large fragment nor the 500 rewritten rows: {report}"
    );
    assert_eq!(report["counts"]["fragments_written"], 1, "{report}");
    assert_eq!(report["counts"]["versions_removed"], 0, "{report}");
    // memories is the table recall searches: its indexes take the day's rows every night,
    // the full-text index, like the others, in a delta beside its oldest segment (merged
    // whole each night, it was a copy of the index a night that the window kept).
    let after = db.storage("memories");
    assert_eq!(
        report["counts"]["indexes_updated"],
        indexes(&after).len() as u64,
        "{report}"
    );
    assert_eq!(unindexed(&after), 0, "{after}");
    let text = indexes(&after)
        .into_iter()
        .find(|i| i["columns"] == serde_json::json!(["text"]))
        .expect("a full-text index on text");
    assert_eq!(text["segments"], 2, "{after}");
    assert_eq!(fragments(&db), 3);
    assert!(
        after["versions"].as_u64().unwrap() > before["versions"].as_u64().unwrap()
            && after["oldest_version_at"] == before["oldest_version_at"],
        "every version kept: {before} -> {after}"
    );
    assert_eq!(
        db.rows("SELECT id, text FROM memories ORDER BY id"),
        rows_before
    );
    // Nothing small is left and every index is current: a second light run writes nothing.
    let version = after["version"].clone();
    let report = json(&db.run(&["--json", "optimize", "--light", "--tables", "memories"]));
    assert_eq!(report["counts"]["fragments_compacted"], 0, "{report}");
    assert_eq!(db.storage("memories")["version"], version);
    // A full run leaves every index of memories in one segment.
    let report = json(&db.run(&["--json", "optimize", "--tables", "memories"]));
    assert_eq!(report["status"], "done", "{report}");
    let full = db.storage("memories");
    for index in indexes(&full) {
        assert_eq!(index["segments"], 1, "{full}");
        assert_eq!(index["unindexed_rows"], 0, "{full}");
    }
    // A light run removes the versions older than the window too (nightly, so the window
    // holds its days of versions, not up to a week more), logged first; the rows stay.
    let versions = db.storage("memories")["versions"].as_u64().unwrap();
    assert!(versions > 1, "{versions}");
    let report = json(&db.run(&[
        "--json",
        "optimize",
        "--light",
        "--keep-versions-days",
        "0",
        "--tables",
        "memories",
    ]));
    assert_eq!(report["status"], "done", "{report}");
    assert_eq!(
        report["counts"]["versions_removed"],
        versions - 1,
        "{report}"
    );
    assert_eq!(db.storage("memories")["versions"], 1);
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'PRUNE_VERSIONS' \
             AND target_id = 'memories'"
        ),
        "1"
    );
    // The row names exactly the versions removed: every one but the latest.
    let text: String = serde_json::from_str(&db.scalar(
        "SELECT before_state FROM audit_log WHERE operation = 'PRUNE_VERSIONS' \
         AND target_id = 'memories'",
    ))
    .unwrap();
    let logged: Value = serde_json::from_str(&text).unwrap();
    let named: Vec<u64> = logged["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let latest = db.storage("memories")["version"].as_u64().unwrap();
    assert_eq!(named.len() as u64, versions - 1, "{logged}");
    assert!(
        named.iter().all(|v| *v < latest),
        "{logged} (latest {latest})"
    );
    assert_eq!(
        db.rows("SELECT id, text FROM memories ORDER BY id"),
        rows_before
    );
}

/// Links `m{i} -> m{i+10}` for `from..to`, both of user `u{i % 10}` (`memory_lines`).
fn link_lines(from: usize, to: usize) -> String {
    (from..to)
        .map(|i| {
            format!(
                r#"{{"source_id":"m{i:05}","target_id":"m{:05}","user_id":"u{}","link_type":"related_to"}}"#,
                i + 10,
                i % 10
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn an_index_keeps_its_oldest_segment_and_one_delta_until_the_delta_outgrows_its_share() {
    // 400 links in one index segment; then weekly runs each bring 20 new links, then 100.
    let db = TestDb::new();
    let (memories, links) = (db.path("m.jsonl"), db.path("l.jsonl"));
    std::fs::write(&memories, memory_lines(0, 600)).unwrap();
    assert_eq!(db.run(&["import", &memories]).status.code(), Some(0));
    std::fs::write(&links, link_lines(0, 400)).unwrap();
    let import = |db: &TestDb| {
        let out = db.run(&["import", "--table", "links", &links]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    };
    import(&db);
    assert_eq!(db.run(&["index", "--scalar"]).status.code(), Some(0));
    let segments = |db: &TestDb| -> Vec<(u64, u64)> {
        db.storage("links")["indexes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let n = |k: &str| i[k].as_u64().unwrap();
                (n("segments"), n("unindexed_rows"))
            })
            .collect()
    };
    assert!(
        segments(&db).iter().all(|&s| s == (1, 0)),
        "{:?}",
        segments(&db)
    );
    // The link a lookup by source must find, whichever segment holds it.
    let reaches = |db: &TestDb, from: usize| {
        let out = db.run(&["--json", "traverse", &format!("m{from:05}"), "--depth", "1"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let t: Value = serde_json::from_str(&stdout(&out)).unwrap();
        let to = format!("m{:05}", from + 10);
        assert!(
            t["memories"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["id"] == to),
            "{from} -> {to} not found: {t}"
        );
    };
    let optimize = |db: &TestDb| {
        let report = json(&db.run(&["--json", "optimize", "--tables", "links"]));
        assert_eq!(report["status"], "done", "{report}");
    };
    for week in 0..3 {
        let from = 400 + 20 * week;
        std::fs::write(&links, link_lines(from, from + 20)).unwrap();
        import(&db);
        optimize(&db);
        // The week's rows join the one delta: two segments, never one more per week.
        assert!(
            segments(&db).iter().all(|&s| s == (2, 0)),
            "week {week}: {:?}",
            segments(&db)
        );
        reaches(&db, 5);
        reaches(&db, from + 7);
    }
    // 60 rows in the delta and 100 more pass a quarter of the oldest segment's 400: one segment.
    std::fs::write(&links, link_lines(460, 560)).unwrap();
    import(&db);
    optimize(&db);
    assert!(
        segments(&db).iter().all(|&s| s == (1, 0)),
        "{:?}",
        segments(&db)
    );
    for from in [5, 410, 455, 530] {
        reaches(&db, from);
    }
    assert_eq!(db.rows("SELECT count(*) AS n FROM links")[0]["n"], 560);
}

#[test]
fn what_an_index_oldest_segment_covers_is_not_merged_again() {
    // links [700] [100] [100], one index segment over them: 900 rows, so a fragment under
    // 128 rows has not settled, but one the oldest segment covers has from 64 rows (merging
    // the two would copy every index of the table).
    let db = TestDb::new();
    let (memories, links) = (db.path("m.jsonl"), db.path("l.jsonl"));
    std::fs::write(&memories, memory_lines(0, 1000)).unwrap();
    assert_eq!(db.run(&["import", &memories]).status.code(), Some(0));
    let import = |db: &TestDb, from: usize, to: usize| {
        std::fs::write(&links, link_lines(from, to)).unwrap();
        let out = db.run(&["import", "--table", "links", &links]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    };
    for (from, to) in [(0, 700), (700, 800), (800, 900)] {
        import(&db, from, to);
    }
    assert_eq!(db.run(&["index", "--scalar"]).status.code(), Some(0));
    let fragments = |db: &TestDb| db.storage("links")["fragments"].as_u64().unwrap();
    let optimize = |db: &TestDb| {
        let report = json(&db.run(&["--json", "optimize", "--tables", "links"]));
        assert_eq!(report["status"], "done", "{report}");
        report["counts"]["fragments_compacted"].as_u64().unwrap()
    };
    assert_eq!(fragments(&db), 3);
    // A week's links join a delta; the fragments the oldest segment covers stay as they are.
    import(&db, 900, 920);
    assert_eq!(optimize(&db), 0);
    assert_eq!(fragments(&db), 4);
    // The next week's merge with the delta's.
    import(&db, 920, 940);
    assert_eq!(optimize(&db), 2);
    assert_eq!(fragments(&db), 4);
    assert_eq!(db.count("links"), 940);
    for from in [5, 750, 850, 910, 930] {
        let out = db.run(&["--json", "traverse", &format!("m{from:05}"), "--depth", "1"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let to = format!("m{:05}", from + 10);
        assert!(
            stdout(&out).contains(&to),
            "{from} -> {to}: {}",
            stdout(&out)
        );
    }
}

#[test]
fn runs_and_the_audit_log_are_indexed_and_each_run_keeps_one_row() {
    // Every job appends its `runs` row when it starts and merges it on `run_id` when it
    // finishes. Once `runs` is indexed, Lance finds the row through the index and through
    // the rows written since, which no index holds yet: a run started after the index was
    // built must still end with one row, finished, not a second one.
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(&file, memory_lines(0, 300)).unwrap();
    assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    db.run_json(&["scores", "--now", "2025-02-01T00:00:00Z"]);
    // An undo, so that the audit log has a row to index.
    db.run_json(&["scores", "--now", "2025-02-02T00:00:00Z"]);
    let undone = db.run_json(&["undo", "--last", "scores"]);
    assert_eq!(undone["status"], "done", "{undone}");
    assert_eq!(db.run(&["index", "--scalar"]).status.code(), Some(0));
    assert_eq!(db.indexed_columns("runs"), ["job", "run_id", "status"]);
    assert_eq!(
        db.indexed_columns("audit_log"),
        ["id", "operation", "run_id", "target_id"]
    );
    for day in ["2025-02-03", "2025-02-04"] {
        let report = db.run_json(&["scores", "--now", &format!("{day}T00:00:00Z")]);
        assert_eq!(report["status"], "done", "{report}");
    }
    // An undo's `runs` row, written after the index on `runs.job`, is found by the next
    // undo's check for the runs undone already.
    let undone = db.run_json(&["undo", "--last", "scores"]);
    assert_eq!(undone["status"], "done", "{undone}");
    let again = db.run_json(&["undo", "--last", "scores"]);
    assert!(again.to_string().contains("undone already"), "{again}");
    let runs = db.rows(
        "SELECT job, status, COUNT(*) AS n FROM runs GROUP BY job, status ORDER BY job, status",
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) - COUNT(DISTINCT run_id) AS n FROM runs"),
        "0",
        "one row per run: {runs:?}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM runs WHERE job = 'scores'"),
        "4",
        "{runs:?}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM runs WHERE status = 'running'"),
        "0",
        "{runs:?}"
    );
}
