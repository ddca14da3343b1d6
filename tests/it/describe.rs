//! `memlife describe` on real Lance tables: dirty entities get a description from their notes
//! and memories (offline rules, or a provider over HTTP with the offline rules as fallback),
//! a fresh vector and a cleared flag; a rerun with nothing dirty writes nothing.

use crate::common::{TestDb, stderr, stdout};
use crate::llm::{Mock, both_roles_config};

const MEMORIES: &str = r#"{"id":"m1","user_id":"ana","text":"Ana's dentist Dr. Okafor moved the appointment to Friday.","created_at":"2025-02-05T10:00:00Z"}
{"id":"m2","user_id":"ana","text":"Ana told Okafor about the tooth ache.","created_at":"2025-02-06T10:00:00Z"}
{"id":"m3","user_id":"ana","text":"Ana flew to Lisbon for a conference in May.","created_at":"2025-02-04T10:00:00Z"}
"#;

/// `memlife --json [global...] describe --embedder hash [job...]`.
fn describe(db: &TestDb, global: &[&str], job: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(global);
    all.extend_from_slice(&["describe", "--embedder", "hash"]);
    all.extend_from_slice(job);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn prepared() -> TestDb {
    let db = TestDb::new();
    std::fs::write(db.path("m.jsonl"), MEMORIES).unwrap();
    assert_eq!(
        db.run(&["import", &db.path("m.jsonl")]).status.code(),
        Some(0)
    );
    let out = db.run(&["entities", "--embedder", "hash"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    db
}

fn entities(db: &TestDb) -> Vec<serde_json::Value> {
    db.rows("SELECT id, name, description, is_dirty, embedding_model, updated_at FROM entities ORDER BY id")
}

#[test]
fn dirty_entities_are_described_reembedded_and_cleaned_and_a_rerun_writes_nothing() {
    let db = prepared();
    let dirty: i64 = db
        .scalar("SELECT COUNT(*) AS n FROM entities WHERE is_dirty")
        .parse()
        .unwrap();
    assert!(dirty >= 3, "new entities are dirty");
    let report = describe(&db, &[], &[]);
    assert_eq!(report["counts"]["described"], dirty, "{report}");
    let okafor = db.rows("SELECT description, is_dirty FROM entities WHERE name = 'Dr. Okafor'");
    // The newest memories naming him, newest first ("Okafor" without the title counts).
    assert_eq!(
        okafor[0]["description"],
        "Ana told Okafor about the tooth ache. Ana's dentist Dr. Okafor moved the appointment to Friday."
    );
    assert_eq!(okafor[0]["is_dirty"], false);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'DESCRIBE'"),
        dirty.to_string()
    );
    // The vector is of the description now, not of the name alone.
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE embedding IS NOT NULL AND name_embedding IS NOT NULL \
                   AND array_to_string(embedding, ',') <> array_to_string(name_embedding, ',')"),
        dirty.to_string()
    );

    let before = entities(&db);
    let again = describe(&db, &[], &[]);
    assert_eq!(again["counts"]["dirty"], 0);
    assert_eq!(entities(&db), before, "nothing dirty: nothing written");

    // A note makes Lisbon dirty; its description follows the note. Okafor, dirty again with
    // nothing new, keeps his description and row: only the flag is cleared.
    let mut lisbon = db
        .rows("SELECT * EXCLUDE (embedding, name_embedding) FROM entities WHERE name = 'Lisbon'")
        [0]
    .clone();
    lisbon["notes"] = serde_json::json!([{"text": "Lisbon is where Ana's company holds its yearly offsite.", "added_at": "2025-03-01T00:00:00Z"}]);
    lisbon["is_dirty"] = serde_json::json!(true);
    let mut okafor = db.rows(
        "SELECT * EXCLUDE (embedding, name_embedding) FROM entities WHERE name = 'Dr. Okafor'",
    )[0]
    .clone();
    okafor["is_dirty"] = serde_json::json!(true);
    std::fs::write(db.path("e.jsonl"), format!("{lisbon}\n{okafor}\n")).unwrap();
    let out = db.run(&["import", "--table", "entities", &db.path("e.jsonl")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = describe(&db, &[], &[]);
    assert_eq!(report["counts"]["described"], 1, "{report}");
    assert_eq!(report["counts"]["unchanged"], 1);
    assert_eq!(
        db.scalar("SELECT description FROM entities WHERE name = 'Lisbon'"),
        r#""Lisbon is where Ana's company holds its yearly offsite.""#
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE is_dirty"),
        "0"
    );
}

#[test]
fn a_provider_describes_over_http_and_bad_replies_fall_back_to_the_offline_rules() {
    let db = prepared();
    let dirty: u64 = db
        .scalar("SELECT COUNT(*) AS n FROM entities WHERE is_dirty")
        .parse()
        .unwrap();
    // Every reply malformed: each item fails after its retries and the offline rules answer.
    let faults = format!("[{}]", vec![r#"{"malformed": true}"#; 64].join(","));
    let mock = Mock::with_script(&db, &faults);
    let config = both_roles_config(&db, &mock);
    let report = describe(&db, &["--config", &config], &["--llm", "providers"]);
    assert_eq!(report["counts"]["offline_fallbacks"], dirty, "{report}");
    assert_eq!(report["counts"]["described"], dirty);
    assert!(
        report["llm"]["providers"]["mock"]["invalid_replies"]
            .as_u64()
            .unwrap()
            > 0,
        "{report}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE is_dirty OR description IS NULL"),
        "0"
    );
    drop(mock);

    // A healthy provider: its replies are used (the mock answers with the offline rules).
    let fresh = prepared();
    let mock = Mock::start(&[]);
    let config = both_roles_config(&fresh, &mock);
    let report = describe(&fresh, &["--config", &config], &["--llm", "providers"]);
    assert_eq!(report["counts"]["offline_fallbacks"], 0, "{report}");
    assert_eq!(report["llm"]["providers"]["mock"]["served"], dirty);
    assert_eq!(
        fresh.scalar("SELECT description FROM entities WHERE name = 'Lisbon'"),
        r#""Ana flew to Lisbon for a conference in May.""#
    );
}
