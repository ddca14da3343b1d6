//! Each job's `--json` report on a fixed input, pinned as a snapshot (run ids, durations and
//! timings redacted), so a changed report is a diff a reviewer sees. Also the per-item failure
//! rule: one bad row fails that row, is reported, and the run goes on with exit code 1.

use serde_json::Value;

use crate::common::{TestDb, fixture, stderr, stdout};

/// Replaces what differs between runs (ids, durations, timings) with placeholders.
pub fn redact(mut report: Value) -> String {
    if let Some(object) = report.as_object_mut() {
        for (key, placeholder) in [("run_id", "[run_id]"), ("duration_ms", "[ms]")] {
            if object.get(key).is_some_and(|v| !v.is_null()) {
                object.insert(key.into(), Value::String(placeholder.into()));
            }
        }
        if let Some(counts) = object.get_mut("counts").and_then(Value::as_object_mut)
            && counts.contains_key("compute_ms")
        {
            counts.insert("compute_ms".into(), Value::String("[ms]".into()));
        }
        if let Some(notes) = object.get_mut("notes").and_then(Value::as_array_mut) {
            for note in notes.iter_mut() {
                if let Some(text) = note.as_str() {
                    *note = Value::String(redact_timings(text));
                }
            }
        }
    }
    serde_json::to_string_pretty(&report).unwrap()
}

/// "compute 12 ms of 40 ms" becomes "compute [n] ms of [n] ms", and a UUID becomes
/// "[uuid]"; the rest is kept.
fn redact_timings(text: &str) -> String {
    let words: Vec<&str> = text.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    for (i, word) in words.iter().enumerate() {
        let next = words.get(i + 1).copied().unwrap_or("");
        let is_number = !word.is_empty() && word.chars().all(|c| c.is_ascii_digit());
        if is_number && next.starts_with("ms") {
            out.push("[n]");
        } else if is_uuid(word) {
            out.push("[uuid]");
        } else {
            out.push(word);
        }
    }
    out.join(" ")
}

fn is_uuid(word: &str) -> bool {
    word.len() == 36
        && word.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

fn report(db: &TestDb, args: &[&str], expected_code: i32) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = db.run(&all);
    assert_eq!(
        out.status.code(),
        Some(expected_code),
        "{args:?}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&out)))
}

#[test]
fn job_reports_are_pinned() {
    let db = TestDb::new();
    let memories = fixture("memories.jsonl").display().to_string();
    let import = report(&db, &["import", &memories], 0);
    insta::assert_snapshot!("import", redact(import));
    let embed = report(&db, &["embed", "--embedder", "hash"], 0);
    insta::assert_snapshot!("embed", redact(embed));
    let link = report(&db, &["link", "--min-score", "0.3"], 0);
    insta::assert_snapshot!("link", redact(link));
    let scores = report(&db, &["scores", "--now", "2025-07-01T00:00:00Z"], 0);
    insta::assert_snapshot!("scores", redact(scores));
    let archive = db.path("archive");
    let args = [
        "prune",
        "--now",
        "2025-12-01T00:00:00Z",
        "--archive-dir",
        &archive,
    ];
    let prune = report(&db, &args, 0)
        .to_string()
        .replace(&archive, "[archive]");
    insta::assert_snapshot!("prune", redact(serde_json::from_str(&prune).unwrap()));
    let args = [
        "sessions",
        "--embedder",
        "hash",
        "--now",
        "2025-12-01T00:00:00Z",
    ];
    insta::assert_snapshot!("sessions", redact(report(&db, &args, 0)));
    let args = [
        "insights",
        "--embedder",
        "hash",
        "--now",
        "2025-12-01T00:00:00Z",
        "--lookback-days",
        "365",
    ];
    insta::assert_snapshot!("insights", redact(report(&db, &args, 0)));
    let args = [
        "distill",
        "--embedder",
        "hash",
        "--now",
        "2025-12-01T00:00:00Z",
    ];
    insta::assert_snapshot!("distill", redact(report(&db, &args, 0)));
    let args = ["anchor", "--now", "2025-12-01T00:00:00Z"];
    insta::assert_snapshot!("anchor", redact(report(&db, &args, 0)));
    let poll = report(&db, &["batches", "poll"], 0);
    insta::assert_snapshot!("batches_poll_idle", redact(poll));
    // The Batch API cycle's reports (with the mock server) are pinned in `llm.rs`.
}

#[test]
fn the_redaction_keeps_what_is_not_a_timing() {
    assert_eq!(
        redact_timings(
            "now = 2025-07-01T00:00:00Z; compute 12 ms of 340 ms (first batch after 5 ms)"
        ),
        "now = 2025-07-01T00:00:00Z; compute [n] ms of [n] ms (first batch after [n] ms)"
    );
    assert_eq!(redact_timings("10 memories"), "10 memories");
    assert_eq!(
        redact_timings("batch 0b0e0b7e-8c2a-4f7e-9a55-1c4bd1a3a0f2 (batch_mock_3)"),
        "batch [uuid] (batch_mock_3)"
    );
}

/// Overwrites one memory's state with a value no job knows, as another writer might.
async fn corrupt_state(uri: &str, id: &str, state: &str) {
    let connection = lancedb::connect(uri).execute().await.unwrap();
    let table = connection.open_table("memories").execute().await.unwrap();
    table
        .update()
        .only_if(format!("id = '{id}'"))
        .column("state", format!("'{state}'"))
        .execute()
        .await
        .unwrap();
}

#[test]
fn scores_fails_a_memory_with_an_unknown_state_and_goes_on() {
    let db = TestDb::new();
    let memories = fixture("memories.jsonl").display().to_string();
    report(&db, &["import", &memories], 0);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(corrupt_state(&db.uri, "m4", "dormant"));

    let scores = report(&db, &["scores", "--now", "2025-07-01T00:00:00Z"], 1);
    assert_eq!(scores["status"], "partial", "{scores}");
    assert_eq!(scores["counts"]["failed"], 1, "{scores}");
    assert_eq!(scores["failures"][0]["item"], "memory m4");
    assert!(
        scores["failures"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("unknown state \"dormant\""),
        "{scores}"
    );
    // Every other memory the run reads was scored (its anchor is set); the bad one is left
    // as it was.
    assert_eq!(scores["counts"]["processed"], 7, "{scores}");
    let unscored = db.scalar(
        "SELECT COUNT(*) AS n FROM memories \
         WHERE salience_anchor IS NULL AND state != 'archived' AND id != 'm4'",
    );
    assert_eq!(unscored, "0");
    assert_eq!(
        db.scalar("SELECT state FROM memories WHERE id = 'm4'"),
        "\"dormant\""
    );
    // The run row says so too.
    assert_eq!(
        db.scalar("SELECT items_failed FROM runs WHERE job = 'scores'"),
        "1"
    );
}
