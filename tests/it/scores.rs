//! `memlife scores` end to end on real Lance tables: idempotent for a given --now, decay from
//! anchors, lifecycle transitions counted and audited, archived memories kept and revived,
//! expired entity notes removed; and the in-place migration of older databases.

use serde_json::{Value, json};

use crate::common::{TestDb, stderr, stdout};

const MEMORIES: &str = r#"{"id":"fresh","user_id":"u1","text":"User likes tea.","salience":0.5,"state":"candidate","confidence":0.5,"created_at":"2025-01-01T00:00:00Z"}
{"id":"sure","user_id":"u1","text":"User lives in Lyon.","salience":0.5,"state":"candidate","confidence":0.9,"created_at":"2025-01-01T00:00:00Z"}
{"id":"used","user_id":"u1","text":"User codes in Rust.","salience":0.9,"state":"candidate","access_count":12,"recall_frequency":12,"last_accessed_at":"2025-03-01T00:00:00Z","created_at":"2025-01-01T00:00:00Z"}
{"id":"forever","user_id":"u1","text":"User's name is Ada.","salience":0.2,"ttl_policy":"keep_forever","created_at":"2025-01-01T00:00:00Z"}
{"id":"brief","user_id":"u1","kind":"episode","text":"User is at the airport.","salience":1.0,"state":"active","access_count":3,"ttl_policy":"ephemeral","last_accessed_at":"2025-01-20T00:00:00Z","created_at":"2025-01-01T00:00:00Z"}
{"id":"back","user_id":"u1","text":"User plays chess.","salience":0.3,"state":"archived","access_count":2,"archived_at":"2025-02-01T00:00:00Z","last_accessed_at":"2025-03-01T00:00:00Z","created_at":"2025-01-01T00:00:00Z"}
{"id":"gone","user_id":"u1","text":"User visited Rome.","salience":0.001,"state":"archived","archived_at":"2025-02-01T00:00:00Z","created_at":"2025-01-01T00:00:00Z"}
"#;

fn json(out: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(out), stderr(out)))
}

fn db() -> TestDb {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(&file, MEMORIES).unwrap();
    let out = db.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let entities = db.path("e.jsonl");
    std::fs::write(
        &entities,
        r#"{"id":"e1","user_id":"u1","name":"Ada","entity_type":"person","notes":[{"text":"old","added_at":"2025-01-01T00:00:00Z","expires_at":"2025-02-01T00:00:00Z"},{"text":"kept","added_at":"2025-01-01T00:00:00Z","expires_at":null}]}"#,
    )
    .unwrap();
    let out = db.run(&["import", "--table", "entities", &entities]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    db
}

fn memory(db: &TestDb, id: &str, column: &str) -> String {
    db.scalar(&format!("SELECT {column} FROM memories WHERE id = '{id}'"))
}

#[test]
fn scores_apply_seed_002_and_are_idempotent() {
    let db = db();
    let now = "2025-06-01T00:00:00Z";
    let first = json(&db.run(&["--json", "scores", "--now", now]));
    assert_eq!(first["status"], "done", "{first}");
    assert_eq!(
        first["counts"]["processed"], 6,
        "archived rows that stay archived are not read"
    );
    assert_eq!(first["counts"]["revived"], 1);
    assert_eq!(first["counts"]["expired"], 1);
    assert_eq!(
        first["counts"]["archived"], 1,
        "the doubtful candidate faded"
    );
    assert_eq!(first["counts"]["made_core"], 1);
    // Low-confidence candidate: 0.5 * exp(-0.04 * 151 days) < 0.01 -> archived, not deleted.
    assert_eq!(memory(&db, "fresh", "state"), "\"archived\"");
    assert_eq!(memory(&db, "fresh", "tier"), "\"archived\"");
    // High-confidence candidate: no decay until its first retrieval.
    assert_eq!(memory(&db, "sure", "salience"), "0.5");
    assert_eq!(memory(&db, "used", "state"), "\"core\"");
    assert_eq!(memory(&db, "forever", "salience"), "1");
    assert_eq!(
        memory(&db, "brief", "state"),
        "\"archived\"",
        "ephemeral wins over high salience"
    );
    assert_eq!(
        memory(&db, "back", "state"),
        "\"active\"",
        "re-accessed after archival"
    );
    assert_eq!(memory(&db, "gone", "state"), "\"archived\"");
    assert_eq!(db.count("memories"), 7, "archiving never deletes");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM audit_log WHERE operation = 'ARCHIVE'"),
        "2",
        "each archival is in the audit log"
    );
    // Expired entity notes are gone, the others kept.
    assert_eq!(first["counts"]["notes_removed"], 1);
    assert_eq!(
        db.scalar("SELECT array_length(notes) FROM entities WHERE id = 'e1'"),
        "1"
    );

    let before = stdout(&db.run(&["export", "--table", "memories", "--format", "jsonl"]));
    let second = json(&db.run(&["--json", "scores", "--now", now]));
    assert_eq!(second["counts"]["changed"], 0, "{second}");
    let after = stdout(&db.run(&["export", "--table", "memories", "--format", "jsonl"]));
    assert_eq!(before, after, "the same --now twice changes nothing");

    // Later, salience only falls (no access in between), from the anchor, not compounded.
    let used_june: f64 = memory(&db, "used", "salience").parse().unwrap();
    let states_june = stdout(&db.run(&[
        "sql",
        "SELECT id, state, tier, salience_anchor FROM memories ORDER BY id",
    ]));
    // Each memory got a due date after the run's clock, within `due_max_days`, drawn
    // before the clock its scores drift past the tolerance (memories scored together do not
    // come due together); the one archived for good is never due.
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM memories WHERE scores_due_at <= TIMESTAMP '2025-06-01T00:00:00' \
             OR (scores_due_at > TIMESTAMP '2025-07-01T00:00:00' AND state != 'archived') \
             OR scores_due_at IS NULL"
        ),
        "0"
    );
    // A day later only the memories whose date has passed are read.
    let due = db.scalar(
        "SELECT COUNT(*) FROM memories WHERE scores_due_at <= TIMESTAMP '2025-06-02T00:00:00'",
    );
    let quiet = json(&db.run(&["--json", "scores", "--now", "2025-06-02T00:00:00Z"]));
    assert_eq!(quiet["counts"]["full_pass"], 0, "{quiet}");
    assert_eq!(quiet["counts"]["processed"].to_string(), due, "{quiet}");
    // With no tolerance (new parameters: every memory is read) only salience moves: the
    // columns no row changes are not rewritten.
    let exact = db.path("exact.toml");
    std::fs::write(&exact, "[scores]\ndue_tolerance = 0.0\n").unwrap();
    let next_day = json(&db.run(&[
        "--json",
        "--config",
        &exact,
        "scores",
        "--now",
        "2025-06-02T00:00:00Z",
    ]));
    assert_eq!(next_day["counts"]["full_pass"], 1, "{next_day}");
    assert!(
        next_day["counts"]["changed_salience"].as_u64().unwrap() > 0,
        "{next_day}"
    );
    for column in ["state", "tier", "salience_anchor"] {
        assert_eq!(
            next_day["counts"][format!("changed_{column}")],
            0,
            "{next_day}"
        );
    }
    assert_eq!(
        stdout(&db.run(&[
            "sql",
            "SELECT id, state, tier, salience_anchor FROM memories ORDER BY id"
        ])),
        states_june,
        "columns no row changes are left as they were"
    );
    db.run(&["scores", "--now", "2025-09-01T00:00:00Z"]);
    let used_sept: f64 = memory(&db, "used", "salience").parse().unwrap();
    assert!(used_sept < used_june);
    let rate = 0.02 / (1.0 + 12f64.powf(1.0));
    let expected = 0.9 * (-rate * 184.0f64).exp();
    assert!(
        (used_sept - expected).abs() < 1e-9,
        "{used_sept} vs {expected}"
    );
}

#[test]
fn bad_arguments_and_config_are_named() {
    let db = db();
    let out = db.run(&["scores", "--now", "yesterday"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--now") && stderr(&out).contains("\"yesterday\" is not a time"),
        "{}",
        stderr(&out)
    );
    let config = db.path("memlife.toml");
    std::fs::write(&config, "[scores]\nhot_treshold = 0.7\n").unwrap();
    let out = db.run(&["--config", &config, "scores"]);
    assert!(stderr(&out).contains("hot_treshold"), "{}", stderr(&out));
    let defaults = json(&db.run(&[
        "--json",
        "scores",
        "--dry-run",
        "--now",
        "2025-01-02T00:00:00Z",
    ]));
    assert!(
        defaults["counts"]["tier_hot"].as_u64().unwrap() >= 1,
        "{defaults}"
    );
    std::fs::write(
        &config,
        "[scores]\nhot_threshold = 1.01\nwarm_threshold = 1.0\n",
    )
    .unwrap();
    let tuned = json(&db.run(&[
        "--json",
        "--config",
        &config,
        "scores",
        "--dry-run",
        "--now",
        "2025-01-02T00:00:00Z",
    ]));
    assert_eq!(
        tuned["counts"]["tier_hot"], 0,
        "thresholds come from the config: {tuned}"
    );
    assert!(
        tuned["counts"]["tier_warm"].as_u64().unwrap() >= 1,
        "keep_forever has retention 1.0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_database_is_migrated_in_place() {
    let db = db();
    // Make it look like schema version 1: no llm_batches, no v2/v3 columns.
    {
        let connection = lancedb::connect(&db.uri).execute().await.unwrap();
        connection.drop_table("llm_batches", &[]).await.unwrap();
        let runs = connection.open_table("runs").execute().await.unwrap();
        runs.drop_columns(&["llm_usage"]).await.unwrap();
        let memories = connection.open_table("memories").execute().await.unwrap();
        memories.drop_columns(&["salience_anchor"]).await.unwrap();
    }
    crate::common::set_schema_version(&db.uri, 1).await;
    let out = db.run(&["--json", "scores", "--now", "2025-06-01T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        db.scalar("SELECT value FROM memlife_meta WHERE key = 'schema_version'"),
        format!("\"{}\"", memlife::model::schema::SCHEMA_VERSION)
    );
    assert_eq!(db.count("clusters"), 0, "tables added since are created");
    assert_eq!(db.count("llm_batches"), 0);
    assert_eq!(db.count("memories"), 7, "no row lost");
    assert_eq!(memory(&db, "sure", "salience_anchor"), "0.5");
}

#[test]
fn a_run_recomputes_only_memories_due_accessed_or_newly_linked() {
    let db = db();
    let run = |now: &str, extra: &[&str]| {
        let mut args = vec!["--json", "scores", "--now", now];
        args.extend_from_slice(extra);
        json(&db.run(&args))
    };
    let pass = |r: &Value| {
        (
            r["counts"]["full_pass"].as_u64().unwrap(),
            r["counts"]["processed"].as_u64().unwrap(),
        )
    };
    // The first run reads every memory not archived for good.
    let first = run("2025-06-01T00:00:00Z", &[]);
    assert_eq!(pass(&first), (1, 6), "{first}");
    let due = |id: &str| memory(&db, id, "scores_due_at");
    // Memories due at a clock (the date passed or cleared), and those `also` names.
    let due_by = |clock: &str, also: &str| -> u64 {
        db.scalar(&format!(
            "SELECT COUNT(*) FROM memories WHERE scores_due_at IS NULL \
             OR scores_due_at <= TIMESTAMP '{clock}' OR id IN ('{also}')"
        ))
        .parse()
        .unwrap()
    };
    // The memory archived for good is read once, to be passed by from then on; the next
    // run reads the memories whose (spread) dates have passed, and no other.
    assert_eq!(first["counts"]["left_archived"], 1, "{first}");
    assert_eq!(memory(&db, "gone", "state"), "\"archived\"");
    assert_eq!(memory(&db, "gone", "salience"), "0.001");
    assert!(due("gone").starts_with("\"9999-12-31"), "{}", due("gone"));
    let expected = due_by("2025-06-03T00:00:00", "");
    assert_eq!(pass(&run("2025-06-03T00:00:00Z", &[])), (0, expected));

    // An access (recall, pending until this run writes it) makes a memory due; so does a
    // new link pointing at it, whose inbound count raises its importance.
    let embedded = db.run(&["embed", "--embedder", "hash"]);
    assert_eq!(embedded.status.code(), Some(0), "{}", stderr(&embedded));
    let recalled = db.run_json(&[
        "recall",
        "tea",
        "--user",
        "u1",
        "--embedder",
        "hash",
        "--now",
        "2025-06-03T12:00:00Z",
    ]);
    assert!(recalled["activated"].as_u64().unwrap() >= 1, "{recalled}");
    let accessed: Vec<String> = db
        .rows("SELECT memory_id AS id FROM activations ORDER BY memory_id")
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!accessed.is_empty());
    let import_link = |source: &str, target: &str, at: &str| {
        let links = db.path("links.jsonl");
        let row = json!({"source_id": source, "target_id": target, "user_id": "u1",
                         "link_type": "related_to", "created_at": at});
        std::fs::write(&links, row.to_string()).unwrap();
        let out = db.run(&["import", "--table", "links", &links]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    };
    import_link("used", "sure", "2025-06-03T18:00:00Z");
    let importance_before: f64 = memory(&db, "sure", "importance").parse().unwrap();
    let expected = due_by(
        "2025-06-04T00:00:00",
        &format!("sure','{}", accessed.join("','")),
    );
    assert!(expected > accessed.len() as u64 || accessed.iter().any(|id| id == "sure"));
    let fourth = run("2025-06-04T00:00:00Z", &[]);
    assert_eq!(pass(&fourth), (0, expected), "{fourth}");
    assert_eq!(
        fourth["counts"]["activations_written"],
        accessed.len(),
        "{fourth}"
    );
    for id in &accessed {
        let at = memory(&db, id, "last_accessed_at");
        assert!(at.starts_with("\"2025-06-03T12:00:00"), "{id}: {at}");
    }
    assert_eq!(db.count("activations"), 0);
    let importance_after: f64 = memory(&db, "sure", "importance").parse().unwrap();
    assert!(
        importance_after > importance_before + 0.03,
        "{importance_before} -> {importance_after}"
    );
    // Links made before the last run are not read again, nor one dated after the run's
    // clock (written by a job at another clock): it is new to the first run whose clock
    // passes its date.
    import_link("sure", "used", "2025-06-20T00:00:00Z");
    let expected = due_by("2025-06-05T00:00:00", "");
    assert_eq!(pass(&run("2025-06-05T00:00:00Z", &[])), (0, expected));
    let later = run("2025-06-21T00:00:00Z", &[]);
    assert!(
        later["notes"][0]
            .as_str()
            .unwrap()
            .contains("the 1 links made since"),
        "{later}"
    );

    // Every memory is due again within `due_max_days` (30).
    let month = run("2025-07-06T00:00:00Z", &[]);
    assert_eq!(month["counts"]["full_pass"], 0, "{month}");
    assert_eq!(
        month["counts"]["processed"],
        db.scalar("SELECT COUNT(*) FROM memories WHERE state != 'archived'")
            .parse::<u64>()
            .unwrap(),
        "{month}"
    );
    // A clock before the last run's reads every memory; the next night after it is a due
    // pass again (the latest run decides, not the latest clock ever seen).
    assert_eq!(pass(&run("2025-07-01T00:00:00Z", &[])).0, 1);
    assert_eq!(pass(&run("2025-07-02T00:00:00Z", &[])).0, 0);
    // Runs of other scopes in between (more than are read at a time, latest first) do not
    // hide the last run of the whole store's scope.
    for _ in 0..9 {
        run("2025-07-03T00:00:00Z", &["--shard", "1/2"]);
    }
    let after_shards = run("2025-07-03T00:00:00Z", &[]);
    assert_eq!(pass(&after_shards).0, 0, "{after_shards}");
    assert_eq!(pass(&run("2025-07-06T00:00:00Z", &["--all"])).0, 1);
    // Neither a dry run nor a run of one user at a later clock is the store scope's last
    // run: the next run after them is still a due pass from the `--all` one's clock.
    run("2025-07-20T00:00:00Z", &["--dry-run"]);
    run("2025-07-21T00:00:00Z", &["--user", "u1"]);
    let after_others = run("2025-07-07T00:00:00Z", &[]);
    assert_eq!(pass(&after_others).0, 0, "{after_others}");
}
