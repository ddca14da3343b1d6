//! `memlife sessions` on real Lance tables: an ended session becomes one narrative memory that
//! holds its memories (which stay live), an ongoing one waits, a rerun tells nothing twice;
//! a provider's narrative is used over HTTP, and malformed replies fall back to the offline
//! judge's extractive narrative, counted.

use crate::common::{TestDb, stderr, stdout};
use crate::llm::{Mock, both_roles_config};

const MEMORIES: &str = r#"{"id":"a1","user_id":"ana","session_id":"s-move","kind":"episode","text":"Ana said she is moving to Utrecht in March. The movers are booked.","created_at":"2026-03-01T10:00:00Z","emotional_salience":0.4}
{"id":"a2","user_id":"ana","session_id":"s-move","kind":"episode","text":"Ana asked which neighbourhoods in Utrecht are quiet.","created_at":"2026-03-01T10:05:00Z"}
{"id":"a3","user_id":"ana","session_id":"s-move","kind":"fact","text":"Ana's daughter starts school in April.","created_at":"2026-03-01T10:08:00Z"}
{"id":"a4","user_id":"ana","session_id":"s-move","kind":"episode","text":"Ana worried about a school for her daughter. Should she call the school board first?","created_at":"2026-03-01T10:12:00Z"}
{"id":"b1","user_id":"ana","session_id":"s-job","kind":"episode","text":"Ana started a new job today.","created_at":"2026-03-05T09:00:00Z"}
{"id":"b2","user_id":"ana","session_id":"s-job","kind":"episode","text":"Ana's new team writes Rust.","created_at":"2026-03-05T09:10:00Z"}
{"id":"x1","user_id":"ana","text":"Ana likes tea.","created_at":"2026-03-01T09:00:00Z"}
"#;

/// 20 minutes after the second session's last memory: the first has ended, the second not.
const DURING: &str = "2026-03-05T09:30:00Z";
const AFTER: &str = "2026-03-06T00:00:00Z";

fn prepared() -> TestDb {
    let db = TestDb::new();
    std::fs::write(db.path("m.jsonl"), MEMORIES).unwrap();
    let out = db.run(&["import", &db.path("m.jsonl")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    db
}

fn sessions(db: &TestDb, global: &[&str], now: &str, job: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(global);
    all.extend_from_slice(&["sessions", "--embedder", "hash", "--now", now]);
    all.extend_from_slice(job);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn narratives(db: &TestDb) -> Vec<serde_json::Value> {
    db.rows(
        "SELECT id, session_id, text, consolidates_memory_ids, created_at, emotional_salience, \
         embedding IS NOT NULL AS embedded FROM memories WHERE kind = 'narrative' ORDER BY created_at",
    )
}

#[test]
fn an_ended_session_is_told_once_and_its_memories_stay() {
    let db = prepared();
    let dry = sessions(&db, &[], DURING, &["--dry-run"]);
    assert_eq!(dry["counts"]["narratives"], 1, "{dry}");
    assert!(narratives(&db).is_empty(), "a dry run writes nothing");

    let report = sessions(&db, &[], DURING, &[]);
    let counts = &report["counts"];
    assert_eq!(
        (
            counts["sessions"].as_u64(),
            counts["sessions_ended"].as_u64()
        ),
        (Some(2), Some(1)),
        "{report}"
    );
    assert_eq!(counts["memories_told"], 4);
    assert!(
        report["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("compression 4.0:1"),
        "{report}"
    );
    let told = narratives(&db);
    assert_eq!(told.len(), 1);
    let n = &told[0];
    assert_eq!(n["session_id"], "s-move");
    assert_eq!(
        n["consolidates_memory_ids"],
        serde_json::json!(["a1", "a2", "a3", "a4"])
    );
    assert_eq!(
        n["created_at"], "2026-03-01T10:12:00Z",
        "dated when the session ended"
    );
    assert_eq!(n["emotional_salience"], 0.4);
    assert_eq!(n["embedded"], true);
    // The offline narrative is the session's own words, its open question kept as a thread.
    let text = n["text"].as_str().unwrap();
    assert!(
        text.starts_with("Ana said she is moving to Utrecht in March."),
        "{text}"
    );
    assert!(
        text.contains("Unresolved: Should she call the school board first?"),
        "{text}"
    );
    assert_eq!(
        db.count("memories WHERE state = 'archived'"),
        0,
        "told memories stay live"
    );
    assert_eq!(db.count("audit_log WHERE operation = 'NARRATE'"), 1);

    // Later the second session has ended; the first is not told again.
    let later = sessions(&db, &[], AFTER, &[]);
    assert_eq!(later["counts"]["sessions_told_before"], 1, "{later}");
    assert_eq!(later["counts"]["narratives"], 1);
    let again = sessions(&db, &[], AFTER, &[]);
    assert_eq!(again["counts"]["narratives"], 0, "{again}");
    assert_eq!(narratives(&db).len(), 2);
}

#[test]
fn a_provider_tells_over_http_and_malformed_replies_fall_back_to_the_offline_narrative() {
    let db = prepared();
    let mock = Mock::start(&[]);
    let config = both_roles_config(&db, &mock);
    let report = sessions(&db, &["--config", &config], AFTER, &["--llm", "providers"]);
    assert_eq!(report["counts"]["narratives"], 2, "{report}");
    assert_eq!(report["counts"]["offline_fallbacks"], 0, "{report}");
    assert_eq!(report["llm"]["providers"]["mock"]["served"], 2, "{report}");
    drop(mock);

    let fresh = prepared();
    let faults = format!("[{}]", vec![r#"{"malformed": true}"#; 16].join(","));
    let mock = Mock::with_script(&fresh, &faults);
    let config = both_roles_config(&fresh, &mock);
    let report = sessions(
        &fresh,
        &["--config", &config],
        AFTER,
        &["--llm", "providers"],
    );
    assert_eq!(report["counts"]["offline_fallbacks"], 2, "{report}");
    assert_eq!(report["counts"]["narratives"], 2);
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("offline narrative"),
        "the fallback says why: {notes}"
    );
}

#[test]
fn in_batch_mode_the_poll_writes_the_narratives_once_as_an_online_run_would() {
    let db = prepared();
    let mock = Mock::start(&[]);
    let config = both_roles_config(&db, &mock);
    let batch = ["--llm", "providers", "--mode", "batch"];
    let submitted = sessions(&db, &["--config", &config], AFTER, &batch);
    assert_eq!(submitted["counts"]["batches_submitted"], 1, "{submitted}");
    assert_eq!(submitted["counts"]["items_submitted"], 2, "{submitted}");
    assert!(
        narratives(&db).is_empty(),
        "nothing is written before the poll"
    );
    // Sessions waiting in a batch are not submitted again.
    let again = sessions(&db, &["--config", &config], AFTER, &batch);
    assert_eq!(again["counts"]["sessions_in_pending_batches"], 2, "{again}");
    assert_eq!(again["counts"].get("batches_submitted"), None, "{again}");

    let polled = db.poll_batches(&config);
    assert_eq!(polled["counts"]["applied"], 1, "{polled}");
    let told = narratives(&db);
    assert_eq!(told.len(), 2);
    assert_eq!(
        told[0]["consolidates_memory_ids"],
        serde_json::json!(["a1", "a2", "a3", "a4"])
    );
    assert_eq!(told[0]["created_at"], "2026-03-01T10:12:00Z");
    assert!(told.iter().all(|n| n["embedded"] == true));
    // The same narratives as an online run against the same provider.
    let online = prepared();
    let online_config = both_roles_config(&online, &mock);
    sessions(
        &online,
        &["--config", &online_config],
        AFTER,
        &["--llm", "providers"],
    );
    let text = |rows: Vec<serde_json::Value>| -> Vec<serde_json::Value> {
        rows.iter().map(|r| r["text"].clone()).collect()
    };
    assert_eq!(text(narratives(&db)), text(narratives(&online)));
    // Applied once: a second poll and a later run add nothing, and check passes.
    db.poll_batches(&config);
    let later = sessions(&db, &["--config", &config], AFTER, &batch);
    assert_eq!(later["counts"]["sessions_ended"], 0, "{later}");
    assert_eq!(db.count("audit_log WHERE operation = 'NARRATE'"), 2);
    let out = db.run(&["check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn a_session_whose_memories_went_before_the_poll_is_logged_gone_and_check_passes() {
    let db = TestDb::new();
    let (first, second): (Vec<&str>, Vec<&str>) =
        MEMORIES.lines().partition(|l| !l.contains("s-job"));
    std::fs::write(db.path("m1.jsonl"), first.join("\n")).unwrap();
    std::fs::write(db.path("m2.jsonl"), second.join("\n")).unwrap();
    for file in ["m1.jsonl", "m2.jsonl"] {
        let out = db.run(&["import", &db.path(file)]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let mock = Mock::start(&[]);
    let config = both_roles_config(&db, &mock);
    let batch = ["--llm", "providers", "--mode", "batch"];
    let submitted = sessions(&db, &["--config", &config], AFTER, &batch);
    assert_eq!(submitted["counts"]["items_submitted"], 2, "{submitted}");
    // The second session's memories go (their import undone) while the batch waits.
    let out = db.run(&["undo", "--last", "import"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(db.count("memories WHERE session_id = 's-job'"), 0);
    let polled = db.poll_batches(&config);
    assert_eq!(polled["counts"]["applied"], 1, "{polled}");
    let told = narratives(&db);
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["session_id"], "s-move");
    assert_eq!(
        db.count("audit_log WHERE operation = 'NARRATE' AND classification = 'GONE'"),
        1
    );
    let out = db.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn undo_of_a_sessions_run_removes_its_narratives_and_the_next_run_tells_them_again() {
    let db = prepared();
    let report = sessions(&db, &[], AFTER, &[]);
    assert_eq!(report["counts"]["narratives"], 2, "{report}");
    let out = db.run(&["undo", report["run_id"].as_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(narratives(&db).is_empty(), "the run's narratives are gone");
    assert_eq!(db.count("memories"), 7, "the told memories are untouched");
    let again = sessions(&db, &[], AFTER, &[]);
    assert_eq!(again["counts"]["sessions_told_before"], 0, "{again}");
    assert_eq!(again["counts"]["narratives"], 2);
    assert_eq!(narratives(&db).len(), 2);
}
