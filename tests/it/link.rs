//! `memlife link` looks only at the memories it has not seen (`memories.link_mark`): a new
//! memory, a new vector, or all of them after the options change (`--all`). The pairs such a
//! run judges are those a pass over every memory would judge for the new ones.

use serde_json::Value;

use crate::common::TestDb;

const FIRST: &str = r#"{"id":"m1","user_id":"u1","text":"The user keeps a sourdough starter named Clint.","created_at":"2025-01-01T00:00:00Z"}
{"id":"m2","user_id":"u1","text":"The user bakes sourdough every Sunday morning.","created_at":"2025-02-01T00:00:00Z"}
{"id":"m3","user_id":"u1","text":"The user's sister lives in Porto.","created_at":"2025-03-01T00:00:00Z"}
"#;

fn import_and_embed(db: &TestDb, name: &str, lines: &str) {
    let file = db.path(name);
    std::fs::write(&file, lines).unwrap();
    db.run_json(&["import", &file]);
    db.run_json(&["embed", "--embedder", "hash"]);
}

/// `link` judging every pair (`--min-score -1`) with the offline judge, then `extra`.
fn link(db: &TestDb, extra: &[&str]) -> Value {
    let mut args = vec!["link", "--llm", "offline", "--min-score", "-1"];
    args.extend_from_slice(extra);
    db.run_json(&args)
}

fn count(report: &Value, name: &str) -> u64 {
    report["counts"][name].as_u64().unwrap_or(0)
}

fn judged(db: &TestDb) -> i64 {
    db.scalar("SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'LINK'")
        .parse()
        .unwrap()
}

#[test]
fn link_looks_again_only_at_new_memories_new_vectors_and_after_new_options() {
    let db = TestDb::new();
    import_and_embed(&db, "first.jsonl", FIRST);
    let first = link(&db, &[]);
    assert_eq!(count(&first, "memories_new_to_link"), 3, "{first}");
    assert_eq!(count(&first, "pairs_to_judge"), 3, "{first}");
    assert_eq!(count(&first, "memories_marked"), 3, "{first}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE link_mark IS NULL"),
        "0"
    );

    // Nothing new: no user is read, nothing is asked.
    let again = link(&db, &[]);
    assert_eq!(count(&again, "users_read"), 0, "{again}");
    assert_eq!(count(&again, "users"), 0, "{again}");
    assert_eq!(count(&again, "pairs_to_judge"), 0, "{again}");
    assert_eq!(judged(&db), 3);

    // A new memory of u1 is judged against each of the three; one of another user is
    // looked at without u1's memories being looked at again.
    import_and_embed(
        &db,
        "second.jsonl",
        r#"{"id":"m4","user_id":"u1","text":"The user fed the sourdough starter Clint rye flour.","created_at":"2025-04-01T00:00:00Z"}
{"id":"m5","user_id":"u2","text":"The user plays the cello.","created_at":"2025-04-01T00:00:00Z"}
"#,
    );
    let second = link(&db, &[]);
    assert_eq!(count(&second, "users"), 2, "{second}");
    assert_eq!(count(&second, "memories_new_to_link"), 2, "{second}");
    assert_eq!(count(&second, "pairs_to_judge"), 3, "{second}");
    assert_eq!(judged(&db), 6);
    let pairs: Vec<Value> = db
        .rows("SELECT source_ids FROM audit_log WHERE operation = 'LINK' ORDER BY created_at, id");
    for row in &pairs[3..] {
        assert_eq!(
            row["source_ids"][0], "m4",
            "the newer memory is the source: {row}"
        );
    }

    // New options: the marks no longer match, `--all` finds every memory new again, and
    // the pairs it would judge were all judged before.
    let options = link(&db, &["--k", "1", "--all"]);
    assert_eq!(count(&options, "memories_new_to_link"), 5, "{options}");
    assert_eq!(count(&options, "pairs_to_judge"), 0, "{options}");
    assert_eq!(count(&options, "memories_marked"), 5, "{options}");

    // A writer of new vectors clears the marks: re-embedded memories are new to `link`.
    db.run_json(&["embed", "--embedder", "hash", "--all"]);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE link_mark IS NULL"),
        "5"
    );
    let reembedded = link(&db, &["--k", "1"]);
    assert_eq!(
        count(&reembedded, "memories_new_to_link"),
        5,
        "{reembedded}"
    );
    assert_eq!(count(&reembedded, "pairs_to_judge"), 0, "{reembedded}");
    assert_eq!(judged(&db), 6);
}
