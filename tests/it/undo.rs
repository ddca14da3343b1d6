//! `memlife undo` of runs of every job other than integrate and review (those are in
//! integrate.rs): reverted from the tables' versions, exactly, refusing when a later run
//! changed the same rows, idempotent, and leaving the job free to run again.

use crate::common::{TestDb, stderr, stdout};

/// Memories for every job: restatements for consolidate, two facts in one memory for
/// refine, names for entities, old low-salience ones for scores.
const MEMORIES: &str = r#"{"id":"a1","user_id":"u","text":"Noor's sister Lina lives in Utrecht","importance":0.9,"access_count":6,"created_at":"2025-01-01T08:00:00Z"}
{"id":"a2","user_id":"u","text":"Noor's sister Lina lives in Utrecht and works as a nurse","importance":0.5,"created_at":"2025-01-05T08:00:00Z"}
{"id":"a3","user_id":"u","text":"Noor's sister Lina lives in Utrecht with her two cats","importance":0.4,"created_at":"2025-01-09T08:00:00Z"}
{"id":"b1","user_id":"u","text":"Noor plays the cello in an amateur orchestra. Noor's car is a blue Volvo estate.","access_count":7,"created_at":"2025-01-02T08:00:00Z"}
{"id":"c1","user_id":"u","text":"Noor switched from Vim to Helix for editing code","created_at":"2025-01-05T08:00:00Z"}
{"id":"c2","user_id":"u","text":"Noor edits code in Vim with a custom colour scheme","created_at":"2025-01-04T08:00:00Z"}
{"id":"d1","user_id":"u","text":"Noor tried a ramen place near the station","salience":0.02,"created_at":"2024-01-04T08:00:00Z"}
{"id":"d2","user_id":"u","text":"Noor's dentist appointment was moved to Friday","salience":0.03,"created_at":"2024-02-04T08:00:00Z"}
"#;

/// Every data table, row by row (all columns, embeddings included), in key order.
fn tables(db: &TestDb) -> Vec<String> {
    let mut out = Vec::new();
    for (table, order) in [
        ("memories", "id"),
        ("links", "source_id, target_id, link_type"),
        ("entities", "id"),
        ("memory_entities", "memory_id, entity_id"),
        ("clusters", "cluster_id"),
        ("entity_scans", "memory_id"),
        ("review_queue", "id"),
        ("activations", "memory_id"),
    ] {
        out.push(format!("-- {table}"));
        out.extend(
            db.rows(&format!("SELECT * FROM {table} ORDER BY {order}"))
                .iter()
                .map(|r| r.to_string()),
        );
    }
    out
}

fn loaded() -> TestDb {
    let db = TestDb::new();
    let file = db.path("memories.jsonl");
    std::fs::write(&file, MEMORIES).unwrap();
    db.run_json(&["import", &file]);
    db
}

#[test]
fn undo_puts_back_exactly_what_each_job_changed_and_the_job_runs_again() {
    let db = loaded();
    let now = ["--now", "2025-09-01T00:00:00Z"];
    let config = db.path("memlife.toml");
    std::fs::write(
        &config,
        "[refine]\nverbose_threshold_chars = 40\nmin_access_count = 0\nmin_age_days = 0\n",
    )
    .unwrap();
    let jobs: Vec<Vec<&str>> = vec![
        vec!["embed", "--embedder", "hash"],
        vec!["link", "--min-score", "0.2"],
        vec!["entities"],
        vec!["cluster", "--mode", "full", "--threshold", "0.5"],
        vec!["consolidate", "--embedder", "hash", now[0], now[1]],
        vec![
            "--config",
            &config,
            "refine",
            "--embedder",
            "hash",
            now[0],
            now[1],
        ],
    ];
    for job in &jobs {
        let before = tables(&db);
        let first = db.run_json(job);
        let after = tables(&db);
        assert_ne!(before, after, "{job:?} changed nothing to undo: {first}");
        let name = job
            .iter()
            .find(|a| !a.starts_with("--") && !a.ends_with(".toml"))
            .unwrap();
        let undone = db.run_json(&["undo", "--last", name]);
        assert_eq!(undone["status"], "done", "{undone}");
        assert_eq!(
            tables(&db),
            before,
            "undo of {job:?} restores every table exactly"
        );
        // Undone once: a second undo changes nothing.
        let again = db.run_json(&["undo", "--last", name]);
        assert!(again.to_string().contains("undone already"), "{again}");
        assert_eq!(tables(&db), before);
        // The job runs again and changes what it changed the first time.
        db.run_json(job);
        let redone = tables(&db);
        assert_eq!(
            redone.len(),
            after.len(),
            "{job:?} after undo writes as many rows as its first run"
        );
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM memories WHERE source = 'consolidate'"),
        "1",
        "the consolidation was made again after its undo"
    );
}

#[test]
fn a_run_is_undone_after_the_logs_versions_of_its_time_are_gone() {
    // `optimize` keeps the logs' versions a day (`keep_log_versions_days`), the data's 14: a
    // consolidation two days old is undone from the data's versions, though `audit_log`'s
    // version from its start is gone.
    let db = loaded();
    db.run_json(&["embed", "--embedder", "hash"]);
    db.run_json(&["cluster", "--mode", "full", "--threshold", "0.5"]);
    let before = tables(&db);
    let consolidated = db.run_json(&[
        "consolidate",
        "--embedder",
        "hash",
        "--now",
        "2025-09-01T00:00:00Z",
    ]);
    assert!(
        tables(&db) != before,
        "nothing to undo: {}",
        consolidated["counts"]
    );
    let memories_versions = db.storage("memories")["versions"].clone();
    let optimized = db.run_json(&["optimize", "--now", "2025-09-03T00:00:00Z"]);
    assert_eq!(optimized["status"], "done", "{optimized}");
    let pruned = db.rows(
        "SELECT DISTINCT target_id FROM audit_log WHERE operation = 'PRUNE_VERSIONS' \
         ORDER BY target_id",
    );
    assert!(
        pruned.iter().any(|r| r["target_id"] == "audit_log")
            && !pruned.iter().any(|r| r["target_id"] == "memories"),
        "{pruned:?}"
    );
    assert!(
        db.storage("memories")["versions"].as_u64() >= memories_versions.as_u64(),
        "no version of memories went (optimize adds its own)"
    );
    let undone = db.run_json(&["undo", "--last", "consolidate"]);
    assert_eq!(undone["status"], "done", "{undone}");
    assert!(tables(&db) == before, "every table as before the run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_recorded_before_a_table_was_added_is_undone() {
    // A store written by a build that had no `activations` table: its runs' version records
    // lack it. The upgrade creates the table; undo of such a run knows the run cannot have
    // written it.
    let db = loaded();
    let before = tables(&db);
    let scored = db.run_json(&["scores", "--now", "2025-09-01T00:00:00Z"]);
    assert!(
        tables(&db) != before,
        "nothing to undo: {}",
        scored["counts"]
    );
    {
        let connection = lancedb::connect(&db.uri).execute().await.unwrap();
        connection.drop_table("activations", &[]).await.unwrap();
        let runs = connection.open_table("runs").execute().await.unwrap();
        let recorded = db.scalar("SELECT table_versions FROM runs WHERE job = 'scores'");
        let text: String = serde_json::from_str(&recorded).unwrap();
        let mut versions: serde_json::Value = serde_json::from_str(&text).unwrap();
        for side in ["before", "after"] {
            versions[side]
                .as_object_mut()
                .unwrap()
                .remove("activations");
        }
        let literal = versions.to_string().replace('\'', "''");
        runs.update()
            .only_if("job = 'scores'")
            .column("table_versions", format!("'{literal}'"))
            .execute()
            .await
            .unwrap();
    }
    crate::common::set_schema_version(&db.uri, 12).await;
    let undone = db.run(&["--json", "undo", "--last", "scores"]);
    assert_eq!(
        undone.status.code(),
        Some(0),
        "{}{}",
        stdout(&undone),
        stderr(&undone)
    );
    assert_eq!(db.count("activations"), 0, "the upgrade created the table");
    assert!(tables(&db) == before, "every table as before the run");
}

#[test]
fn undo_refuses_when_a_later_run_changed_the_same_rows_and_changes_nothing() {
    let db = loaded();
    db.run_json(&["scores", "--now", "2025-09-01T00:00:00Z"]);
    let first = db.scalar("SELECT run_id FROM runs WHERE job = 'scores'");
    let first = first.trim_matches('"').to_string();
    db.run_json(&["scores", "--now", "2026-03-01T00:00:00Z"]);
    let before = tables(&db);
    let out = db.run(&["undo", &first]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("cannot be undone"), "{text}");
    assert!(text.contains("memories row"), "names the rows: {text}");
    assert_eq!(tables(&db), before, "nothing changed");
    // Undoing the later run first, then the earlier one, works.
    db.run_json(&["undo", "--last", "scores"]);
    db.run_json(&["undo", &first]);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM memories WHERE tier = 'archived'"),
        "0"
    );
}

#[test]
fn undo_of_an_import_removes_what_it_added_and_the_file_imports_again() {
    let db = loaded();
    let out = db.run(&["undo", "--last", "import"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        db.count("memories"),
        0,
        "undo of an import removes what it added"
    );
    let file = db.path("memories.jsonl");
    db.run_json(&["import", &file]);
    assert_eq!(db.count("memories"), 8, "and the file imports again");
}
