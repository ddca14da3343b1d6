//! `memlife refine` end to end: which memories qualify, SPLIT into standalone memories that
//! point at the original (which stays active), TRIM in place with a fresh embedding, refusals
//! counted once per run and honoured after `max_rejections`.

use serde_json::Value;

use crate::common::{TestDb, stderr, stdout};

const NOW: &str = "2025-06-01T00:00:00Z";

const MEMORIES: &str = r#"{"id":"r1","user_id":"u1","importance":0.8,"access_count":6,"created_at":"2025-03-01T08:00:00Z","tags":["profile"],"text":"Kenji lives in Osaka near Namba station in a small flat on the fourth floor. Kenji is learning to play the classical guitar with a private teacher on Thursday evenings. Kenji's birthday is on 14 July every year."}
{"id":"r2","user_id":"u1","importance":0.5,"access_count":9,"created_at":"2025-03-01T08:00:00Z","text":"Basically, the user prefers replies that get straight to the point, with code first and explanation after, short paragraphs, no marketing language, and links to the primary documentation rather than to blog posts or forums."}
{"id":"r3","user_id":"u1","importance":0.5,"access_count":7,"created_at":"2025-03-01T08:00:00Z","text":"Tom adopted a four year old beagle called Biscuit from the shelter in Leiden in February. He walks her every morning before work along the canal and again in the evening when he gets home from the office."}
{"id":"r4","user_id":"u1","importance":0.5,"access_count":9,"created_at":"2025-03-01T08:00:00Z","text":"Kenji lives in Osaka."}
{"id":"r5","user_id":"u1","importance":0.5,"access_count":9,"created_at":"2025-05-30T08:00:00Z","text":"Rosa takes the 7:40 train from Utrecht to Amsterdam Zuid every weekday. Rosa's son Jonas is learning to swim at the municipal pool on Saturday mornings this spring."}
{"id":"r6","user_id":"u1","importance":0.5,"access_count":1,"created_at":"2025-03-01T08:00:00Z","text":"Rosa takes the 7:40 train from Utrecht to Amsterdam Zuid every weekday. Rosa's son Jonas is learning to swim at the municipal pool on Saturday mornings this spring."}
"#;

fn loaded() -> TestDb {
    let db = TestDb::new();
    let file = db.path("memories.jsonl");
    std::fs::write(&file, MEMORIES).unwrap();
    for args in [&["import", &file][..], &["embed", "--embedder", "hash"][..]] {
        let out = db.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    db
}

fn refine(db: &TestDb, now: &str) -> Value {
    let out = db.run(&["--json", "refine", "--embedder", "hash", "--now", now]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn verbose_memories_are_split_or_trimmed_and_refusals_are_counted() {
    let db = loaded();
    let report = refine(&db, NOW);
    // r4 is short, r5 too new, r6 too rarely used: three candidates.
    assert_eq!(report["counts"]["candidates"], 3, "{report:#}");
    assert_eq!(report["counts"]["split"], 1);
    assert_eq!(report["counts"]["trimmed"], 1);
    assert_eq!(report["counts"]["kept"], 1);
    // SPLIT: three standalone memories that point at the original, which stays active.
    let parts = db.rows(
        "SELECT text, importance, tags, consolidates_memory_ids, created_at, embedding IS NOT NULL AS embedded \
         FROM memories WHERE source = 'refine' ORDER BY text",
    );
    assert_eq!(parts.len(), 3, "{parts:?}");
    for part in &parts {
        assert_eq!(part["consolidates_memory_ids"], serde_json::json!(["r1"]));
        assert_eq!(
            part["importance"], 0.8,
            "each inherits the original's importance"
        );
        assert_eq!(part["tags"], serde_json::json!(["profile"]));
        assert_eq!(part["created_at"], "2025-03-01T08:00:00Z");
        assert_eq!(part["embedded"], true);
        assert!(
            part["text"].as_str().unwrap().starts_with("Kenji"),
            "{part}"
        );
    }
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) AS n FROM links WHERE link_type = 'split_from' AND target_id = 'r1'"
        ),
        "3"
    );
    assert_eq!(
        db.scalar("SELECT state FROM memories WHERE id = 'r1'"),
        "\"candidate\""
    );
    // TRIM: the text replaced, the filler gone, the old text in the audit log.
    let trimmed = db.scalar("SELECT text FROM memories WHERE id = 'r2'");
    assert!(
        trimmed.starts_with("\"The user prefers replies"),
        "{trimmed}"
    );
    let before = db.scalar(
        "SELECT before_state FROM audit_log WHERE operation = 'UPDATE' AND target_id = 'r2'",
    );
    assert!(before.contains("Basically"), "{before}");
    // KEEP: sentences that lean on each other; counted once.
    assert_eq!(
        db.scalar("SELECT refinement_rejection_count FROM memories WHERE id = 'r3'"),
        "1"
    );
    // The same clock again: everything is within its cooldown; nothing changes.
    let again = refine(&db, NOW);
    assert_eq!(again["counts"]["candidates"], 0, "{again:#}");
    assert_eq!(
        db.scalar("SELECT refinement_rejection_count FROM memories WHERE id = 'r3'"),
        "1"
    );
    // After the cooldown r3 is asked again (and r1 and r2, which are still long enough).
    let later = refine(&db, "2025-07-15T00:00:00Z");
    assert!(
        later["counts"]["candidates"].as_u64().unwrap() >= 1,
        "{later:#}"
    );
    assert_eq!(
        db.scalar("SELECT refinement_rejection_count FROM memories WHERE id = 'r3'"),
        "2"
    );
}

#[test]
fn in_batch_mode_refine_answers_are_applied_by_the_poll_once() {
    let online = loaded();
    refine(&online, NOW);
    let db = loaded();
    let mock = crate::llm::Mock::start(&[]);
    let config = crate::llm::both_roles_config(&db, &mock);
    let submit = || -> Value {
        let out = db.run(&[
            "--json",
            "--config",
            &config,
            "refine",
            "--embedder",
            "hash",
            "--now",
            NOW,
            "--llm",
            "providers",
            "--mode",
            "batch",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    };
    let report = submit();
    assert_eq!(report["counts"]["items_submitted"], 3, "{report:#}");
    // Waiting memories are not submitted twice.
    let again = submit();
    assert_eq!(again["counts"]["in_pending_batches"], 3, "{again:#}");
    assert_eq!(again["counts"]["candidates"], 0, "{again:#}");
    let poll = |fault: Option<&str>| {
        crate::llm::poll(
            &db,
            &config,
            &["--lease-secs", "0", "--embedder", "hash"],
            fault.map(|point| (memlife::crash::FAULT_VARIABLE, point)),
        )
    };
    // Killed after logging the answers, then taken over: applied once.
    assert_eq!(poll(Some("refine.after-audit")).0, None);
    let (code, report) = poll(None);
    assert_eq!(code, Some(0), "{report}");
    let state = "SELECT id, text, state, refinement_rejection_count, last_refined_at, consolidates_memory_ids \
                 FROM memories ORDER BY id";
    assert_eq!(
        db.rows(state),
        online.rows(state),
        "the same end state as online"
    );
    assert_eq!(
        db.scalar("SELECT refinement_rejection_count FROM memories WHERE id = 'r3'"),
        "1"
    );
    let out = db.run(&["--json", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
