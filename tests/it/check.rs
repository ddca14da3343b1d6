//! `memlife check` finds what it exists to find: each invariant broken on purpose is reported
//! with the rows that break it (exit 1); a consistent store passes (exit 0).

use serde_json::Value;

use crate::common::{TestDb, fixture, stderr, stdout};

fn check(db: &TestDb) -> (Option<i32>, Value) {
    let out = db.run(&["--json", "check"]);
    let report = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
    (out.status.code(), report)
}

fn violated(report: &Value) -> Vec<String> {
    report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["invariant"].as_str().unwrap().to_string())
        .collect()
}

fn import(db: &TestDb, table: &str, rows: &str) {
    let file = db.path(&format!("{table}-{}.jsonl", rows.len()));
    std::fs::write(&file, rows).unwrap();
    let out = db.run(&["import", "--table", table, &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_consistent_store_passes() {
    let db = TestDb::new();
    import(
        &db,
        "memories",
        &std::fs::read_to_string(fixture("memories.jsonl")).unwrap(),
    );
    let (code, report) = check(&db);
    assert_eq!(code, Some(0), "{report}");
    assert!(report["invariants_checked"].as_array().unwrap().len() >= 12);
    let out = db.run(&["check"]);
    assert!(stdout(&out).contains("invariants hold"), "{}", stdout(&out));
}

#[test]
fn dangling_references_are_listed() {
    let db = TestDb::new();
    db.skip_final_check();
    import(
        &db,
        "memories",
        r#"{"id":"a","user_id":"u","text":"A.","superseded_by":"ghost"}
{"id":"b","user_id":"u","text":"B.","consolidates_memory_ids":["a","gone"]}"#,
    );
    import(
        &db,
        "links",
        r#"{"source_id":"a","target_id":"nowhere","user_id":"u","link_type":"related_to"}"#,
    );
    import(
        &db,
        "memory_entities",
        r#"{"memory_id":"a","entity_id":"no-entity","user_id":"u"}"#,
    );
    let (code, report) = check(&db);
    assert_eq!(code, Some(1));
    let names = violated(&report);
    for expected in [
        "links: both ends are memories",
        "memory_entities: the entity exists",
        "memories: superseded_by is a memory",
        "memories: consolidates_memory_ids are memories",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected}: {report}");
    }
    let consolidated = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["invariant"] == "memories: consolidates_memory_ids are memories")
        .unwrap();
    assert_eq!(
        consolidated["rows"], 1,
        "only 'gone' is missing: {consolidated}"
    );
    assert_eq!(consolidated["examples"][0]["member"], "gone");
}

/// Opens a table with lancedb directly, to break the store the way a foreign writer could.
async fn table(db: &TestDb, name: &str) -> lancedb::Table {
    let connection = lancedb::connect(&db.uri).execute().await.unwrap();
    connection.open_table(name).execute().await.unwrap()
}

#[test]
fn duplicate_keys_and_unaudited_archivals_are_listed() {
    let db = TestDb::new();
    db.skip_final_check();
    import(
        &db,
        "memories",
        r#"{"id":"old","user_id":"u","text":"User visited Rome.","salience":0.005,"confidence":0.5,"created_at":"2024-01-01T00:00:00Z"}
{"id":"new","user_id":"u","text":"User likes tea.","salience":0.9,"created_at":"2025-06-01T00:00:00Z"}"#,
    );
    let out = db.run(&["scores", "--now", "2025-07-01T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        db.scalar("SELECT state FROM memories WHERE id = 'old'"),
        "\"archived\""
    );
    let (code, report) = check(&db);
    assert_eq!(code, Some(0), "archived and audited: {report}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // The archival's audit row disappears...
        let audit = table(&db, "audit_log").await;
        audit.delete("operation = 'ARCHIVE'").await.unwrap();
        // ...and a second copy of a memory is appended without key matching.
        let memories = table(&db, "memories").await;
        let copy: Vec<arrow::array::RecordBatch> = {
            use futures::TryStreamExt;
            use lancedb::query::{ExecutableQuery, QueryBase};
            memories
                .query()
                .only_if("id = 'new'")
                .execute()
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap()
        };
        let schema = copy[0].schema();
        let reader: Box<dyn arrow::array::RecordBatchReader + Send> = Box::new(
            arrow::array::RecordBatchIterator::new(copy.into_iter().map(Ok), schema),
        );
        memories.add(reader).execute().await.unwrap();
    });
    let (code, report) = check(&db);
    assert_eq!(code, Some(1));
    let names = violated(&report);
    assert!(
        names.contains(&"memories: one row per key (id)".to_string()),
        "{report}"
    );
    assert!(
        names.contains(&"memories: every archival by a job is audited".to_string()),
        "{report}"
    );
    let text = stdout(&db.run(&["check"]));
    assert!(text.contains("\"id\":\"new\""), "{text}");
}

#[test]
fn an_archival_by_another_job_of_the_same_night_is_audited_by_that_jobs_row() {
    // The nightly runs scores and consolidate at one clock: a memory consolidate folded is
    // archived at the scores clock, and named in the CONSOLIDATE row's source ids.
    let db = TestDb::new();
    db.skip_final_check();
    import(
        &db,
        "memories",
        r#"{"id":"folded","user_id":"u","text":"User likes green tea.","state":"archived","archived_at":"2025-07-01T00:00:00Z","created_at":"2025-06-01T00:00:00Z"}
{"id":"lost","user_id":"u","text":"User likes black tea.","state":"archived","archived_at":"2025-07-01T00:00:00Z","created_at":"2025-06-01T00:00:00Z"}
{"id":"merged","user_id":"u","text":"User likes tea.","created_at":"2025-07-01T00:00:00Z"}"#,
    );
    import(
        &db,
        "audit_log",
        r#"{"run_id":"night","operation":"CONSOLIDATE","target_id":"merged","source_ids":["folded"],"created_at":"2025-07-01T00:00:00Z"}"#,
    );
    let out = db.run(&["scores", "--now", "2025-07-01T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (code, report) = check(&db);
    assert_eq!(code, Some(1), "{report}");
    let archival: Vec<&Value> = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["invariant"] == "memories: every archival by a job is audited")
        .collect();
    assert_eq!(archival.len(), 1, "{report}");
    let listed = archival[0].to_string();
    assert!(
        listed.contains("lost") && !listed.contains("folded"),
        "{listed}"
    );
}
