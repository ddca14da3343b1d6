//! `memlife integrate`, `memlife review` and `memlife history` on real Lance tables, judged
//! over real HTTP by the mock LLM (scripted answers for seed 003's four examples) or by the
//! offline judge.

use crate::common::{TestDb, stderr, stdout};
use crate::llm::{Mock, mock_provider};

const OLD: &str = r#"{"id":"m1","user_id":"u","text":"User prefers dark mode","created_at":"2025-01-01T10:00:00Z"}
{"id":"m2","user_id":"u","text":"User works at Google","created_at":"2025-01-02T10:00:00Z"}
{"id":"m3","user_id":"u","text":"User has a dog","created_at":"2025-01-03T10:00:00Z"}
{"id":"m4","user_id":"u","text":"User enjoys hiking","created_at":"2025-01-04T10:00:00Z"}
"#;

const NEW: &str = r#"{"id":"f1","user_id":"u","text":"User likes dark theme","created_at":"2025-03-01T10:00:00Z"}
{"id":"f2","user_id":"u","text":"User now works at Anthropic","created_at":"2025-03-02T10:00:00Z"}
{"id":"f3","user_id":"u","text":"User's dog is named Max","created_at":"2025-03-03T10:00:00Z","tags":["pets"]}
{"id":"f4","user_id":"u","text":"User went hiking last weekend","created_at":"2025-03-04T10:00:00Z"}
"#;

fn classify(old: &str, new: &str, class: &str, confidence: f64) -> String {
    format!(
        r#"{{"task":"integrate.classify","texts":["{old}","{new}"],"reply":{{"classification":"{class}","confidence":{confidence},"reasoning":"scripted {class}"}}}}"#
    )
}

/// The seed's four examples as a model would answer them, plus the merge text.
fn seed_answers() -> String {
    [
        classify("User prefers dark mode", "User likes dark theme", "DUPLICATE", 0.95),
        classify("User works at Google", "User now works at Anthropic", "SUPERSEDE", 0.9),
        classify("User has a dog", "User's dog is named Max", "MERGE", 0.9),
        classify("User enjoys hiking", "User went hiking last weekend", "COEXIST", 0.9),
        r#"{"task":"integrate.merge","texts":["User has a dog","User's dog is named Max"],"reply":{"text":"User has a dog named Max","confidence":0.9}}"#.to_string(),
    ]
    .join("\n")
}

/// A database with the old memories embedded, a mock answering `answers`, and a config whose
/// roles are the mock and whose `integrate` threshold suits the hash embedder.
fn setup(answers: &str) -> (TestDb, Mock, String) {
    let db = TestDb::new();
    let old = db.path("old.jsonl");
    std::fs::write(&old, OLD).unwrap();
    for args in [
        vec!["import", old.as_str()],
        vec!["embed", "--embedder", "hash"],
    ] {
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let path = db.path("answers.jsonl");
    std::fs::write(&path, answers).unwrap();
    let mock = Mock::start(&["--answers", &path]);
    let config = db.path("memlife.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[roles]\nfast = [\"mock\"]\nreasoning = [\"mock\"]\n\
             [thresholds.\"hash-lexical-v1\"]\nintegrate = 0.1\n",
            mock_provider("mock", &mock.url, "")
        ),
    )
    .unwrap();
    (db, mock, config)
}

fn integrate(
    db: &TestDb,
    config: &str,
    file: &str,
    now: &str,
    extra: &[&str],
) -> serde_json::Value {
    let mut args = vec![
        "--json",
        "--config",
        config,
        "integrate",
        file,
        "--embedder",
        "hash",
        "--llm",
        "providers",
        "--top-k",
        "1",
        "--now",
        now,
    ];
    args.extend_from_slice(extra);
    let out = db.run(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn write(db: &TestDb, name: &str, text: &str) -> String {
    let path = db.path(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `memlife integrate` of `text` (written to `name`) with the offline judge; its report.
fn integrate_offline(db: &TestDb, name: &str, text: &str, now: &str) -> serde_json::Value {
    let facts = write(db, name, text);
    db.run_json(&["integrate", &facts, "--embedder", "hash", "--now", now])
}

#[test]
fn the_seed_examples_take_their_four_branches_and_a_rerun_changes_nothing() {
    let (db, _mock, config) = setup(&seed_answers());
    let facts = write(&db, "new.jsonl", NEW);
    let report = integrate(&db, &config, &facts, "2025-03-10T00:00:00Z", &[]);
    let counts = &report["counts"];
    for (name, n) in [
        ("duplicates", 1),
        ("superseded", 1),
        ("merged", 1),
        ("coexisting", 1),
    ] {
        assert_eq!(counts[name], n, "{name}: {report}");
    }
    let ops = db.rows(
        "SELECT source_ids[1] AS fact, operation, classification, target_id FROM audit_log \
         WHERE operation IN ('ADD','UPDATE','NOOP','SUPERSEDE','MERGE') ORDER BY fact",
    );
    let ops: Vec<String> = ops
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r["fact"], r["operation"], r["classification"], r["target_id"]
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            r#""f1" "UPDATE" "DUPLICATE" "m1""#,
            r#""f2" "SUPERSEDE" "SUPERSEDE" "f2""#,
            r#""f3" "MERGE" "MERGE" "m3""#,
            r#""f4" "ADD" "COEXIST" "f4""#,
        ]
    );
    // DUPLICATE: no new memory; the existing one touched at the run's clock; the fact's own
    // words stay readable in its decision's row.
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE id = 'f1'"),
        "0"
    );
    assert!(
        db.scalar("SELECT after_state FROM audit_log WHERE operation = 'UPDATE'")
            .contains("User likes dark theme")
    );
    assert_eq!(
        db.scalar("SELECT CAST(updated_at AS VARCHAR) AS t FROM memories WHERE id = 'm1'"),
        "\"2025-03-10T00:00:00Z\""
    );
    // SUPERSEDE: the old memory stays, valid until the new fact, in one chain with it.
    let old = &db.rows(
        "SELECT CAST(valid_until AS VARCHAR) AS until, superseded_by, supersession_chain_id, \
         archived_at FROM memories WHERE id = 'm2'",
    )[0];
    assert_eq!(old["until"], "2025-03-02T10:00:00Z");
    assert_eq!(old["superseded_by"], "f2");
    assert_eq!(old["supersession_chain_id"], "m2");
    assert!(old["archived_at"].is_null());
    assert_eq!(
        db.scalar("SELECT supersession_chain_id FROM memories WHERE id = 'f2'"),
        "\"m2\""
    );
    // MERGE: the existing memory keeps its id and gets the merged text and united tags; the
    // fact is kept, archived, with a merged_into link.
    let merged = &db.rows(
        "SELECT text, tags, consolidates_memory_ids AS sources, CAST(created_at AS VARCHAR) AS c \
         FROM memories WHERE id = 'm3'",
    )[0];
    assert_eq!(merged["text"], "User has a dog named Max");
    assert_eq!(merged["tags"], serde_json::json!(["pets"]));
    assert_eq!(merged["sources"], serde_json::json!(["f3"]));
    assert_eq!(merged["c"], "2025-01-03T10:00:00Z");
    assert_ne!(
        db.scalar("SELECT CAST(archived_at AS VARCHAR) AS a FROM memories WHERE id = 'f3'"),
        "\"null\""
    );
    let links: Vec<String> = db
        .rows("SELECT source_id, target_id, link_type FROM links ORDER BY source_id")
        .iter()
        .map(|r| format!("{}>{}:{}", r["source_id"], r["target_id"], r["link_type"]))
        .map(|s| s.replace('"', ""))
        .collect();
    assert_eq!(
        links,
        ["f2>m2:supersedes", "f3>m3:merged_into", "f4>m4:related_to"]
    );
    // A rerun of the same file integrates nothing again.
    let again = integrate(&db, &config, &facts, "2025-03-11T00:00:00Z", &[]);
    assert_eq!(again["counts"]["already_integrated"], 4, "{again}");
    assert_eq!(db.count("memories"), 7);
    assert_eq!(db.count("links"), 3);
}

#[test]
fn chains_of_three_versions_read_back_in_order_and_as_of_every_boundary() {
    let answers = [
        classify(
            "User works at Google",
            "User now works at Anthropic",
            "SUPERSEDE",
            0.9,
        ),
        classify(
            "User now works at Anthropic",
            "User now works at OpenAI",
            "SUPERSEDE",
            0.9,
        ),
    ]
    .join("\n");
    let (db, _mock, config) = setup(&answers);
    let first = write(
        &db,
        "a.jsonl",
        r#"{"id":"v2","user_id":"u","text":"User now works at Anthropic","created_at":"2025-03-01T00:00:00Z"}"#,
    );
    integrate(&db, &config, &first, "2025-03-05T00:00:00Z", &[]);
    let second = write(
        &db,
        "b.jsonl",
        r#"{"id":"v3","user_id":"u","text":"User now works at OpenAI","created_at":"2025-06-01T00:00:00Z"}"#,
    );
    integrate(&db, &config, &second, "2025-06-05T00:00:00Z", &[]);
    let out = db.run(&["--json", "history", "v2"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let history: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let ids: Vec<&str> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m2", "v2", "v3"]);
    for (at, expected) in [
        ("2025-01-01T23:59:59Z", None),
        ("2025-01-02T10:00:00Z", Some("m2")),
        ("2025-02-28T23:59:59Z", Some("m2")),
        ("2025-03-01T00:00:00Z", Some("v2")),
        ("2025-05-31T23:59:59Z", Some("v2")),
        ("2025-06-01T00:00:00Z", Some("v3")),
        ("2030-01-01T00:00:00Z", Some("v3")),
    ] {
        let out = db.run(&["--json", "history", "m2", "--as-of", at]);
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        let found: Vec<&str> = v["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            found,
            expected.into_iter().collect::<Vec<_>>(),
            "as of {at}"
        );
    }
    let text = stdout(&db.run(&["history", "v3"]));
    assert!(text.contains("V1 m2 -> V2 v2 -> V3 v3"), "{text}");
}

#[test]
fn unsure_answers_wait_for_review_and_approve_or_reject_apply_them() {
    let answers = [
        classify(
            "User works at Google",
            "User now works at Anthropic",
            "SUPERSEDE",
            0.6,
        ),
        classify(
            "User prefers dark mode",
            "User likes dark theme",
            "DUPLICATE",
            0.5,
        ),
    ]
    .join("\n");
    let (db, _mock, config) = setup(&answers);
    let facts = write(
        &db,
        "new.jsonl",
        &NEW.lines().take(2).collect::<Vec<_>>().join("\n"),
    );
    let report = integrate(&db, &config, &facts, "2025-03-10T00:00:00Z", &[]);
    assert_eq!(report["counts"]["queued_for_review"], 2, "{report}");
    assert_eq!(
        db.count("memories"),
        4,
        "nothing applied while under review"
    );
    let out = db.run(&["--json", "review", "list"]);
    let queue: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let queue = queue.as_array().unwrap();
    assert_eq!(queue.len(), 2);
    let id_of = |class: &str| {
        queue.iter().find(|r| r["classification"] == class).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (supersede, duplicate) = (id_of("SUPERSEDE"), id_of("DUPLICATE"));
    let run = |args: &[&str]| {
        let mut all = vec!["--json", "--config", config.as_str(), "review"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--embedder", "hash", "--now", "2025-03-12T00:00:00Z"]);
        let out = db.run(&all);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}\n{}",
            stdout(&out),
            stderr(&out)
        );
    };
    run(&["approve", &supersede]);
    assert_eq!(
        db.scalar("SELECT superseded_by FROM memories WHERE id = 'm2'"),
        "\"f2\""
    );
    run(&["reject", &duplicate]);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE id = 'f1'"),
        "1"
    );
    assert_eq!(
        db.scalar("SELECT link_type FROM links WHERE source_id = 'f1'"),
        "\"related_to\""
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM review_queue WHERE status = 'pending'"),
        "0"
    );
    // A decided item is not decided again.
    let out = db.run(&[
        "--json",
        "--config",
        &config,
        "review",
        "approve",
        &duplicate,
        "--embedder",
        "hash",
    ]);
    assert!(
        stdout(&out).contains("already rejected"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn unreviewed_items_expire_into_kept_facts() {
    let answers = classify("User has a dog", "User's dog is named Max", "MERGE", 0.3);
    let (db, _mock, config) = setup(&answers);
    let facts = write(&db, "new.jsonl", NEW.lines().nth(2).unwrap());
    integrate(&db, &config, &facts, "2025-03-10T00:00:00Z", &[]);
    assert_eq!(db.scalar("SELECT status FROM review_queue"), "\"pending\"");
    // 15 days later (the default time to live is 14), any integrate run expires it.
    let none = write(&db, "none.jsonl", "");
    let report = integrate(&db, &config, &none, "2025-03-25T00:00:00Z", &[]);
    assert_eq!(report["counts"]["reviews_expired"], 1, "{report}");
    assert_eq!(db.scalar("SELECT status FROM review_queue"), "\"expired\"");
    assert_eq!(
        db.scalar("SELECT text FROM memories WHERE id = 'f3'"),
        "\"User's dog is named Max\""
    );
    assert_eq!(
        db.scalar("SELECT text FROM memories WHERE id = 'm3'"),
        "\"User has a dog\""
    );
}

#[test]
fn facts_of_one_file_that_repeat_each_other_end_as_one_memory_with_the_offline_judge() {
    let (db, _mock, _config) = setup("");
    let report = integrate_offline(
        &db,
        "twice.jsonl",
        r#"{"id":"r1","user_id":"w","text":"Wren keeps a sourdough starter named Bubbles.","created_at":"2025-04-01T00:00:00Z"}
{"id":"r2","user_id":"w","text":"Wren keeps a sourdough starter named Bubbles.","created_at":"2025-04-02T00:00:00Z"}
"#,
        "2025-04-03T00:00:00Z",
    );
    assert_eq!(report["counts"]["added"], 1, "{report}");
    assert_eq!(report["counts"]["duplicates"], 1, "{report}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE user_id = 'w'"),
        "1"
    );
}

#[test]
fn unrelated_facts_of_one_user_share_a_round_and_a_repeat_still_waits_for_its_original() {
    let (db, _mock, _config) = setup("");
    let report = integrate_offline(
        &db,
        "four.jsonl",
        r#"{"id":"s1","user_id":"w","text":"Wren keeps a sourdough starter named Bubbles.","created_at":"2025-04-01T00:00:00Z"}
{"id":"s2","user_id":"w","text":"Her sister moved to Lisbon in March.","created_at":"2025-04-01T01:00:00Z"}
{"id":"s3","user_id":"w","text":"Cello lessons happen every Sunday morning.","created_at":"2025-04-01T02:00:00Z"}
{"id":"s4","user_id":"w","text":"Wren keeps a sourdough starter named Bubbles.","created_at":"2025-04-02T00:00:00Z"}
"#,
        "2025-04-03T00:00:00Z",
    );
    // s1, s2 and s3 in the first round; s4 repeats s1, so it is judged in a second round,
    // against s1 as stored: one round per fact would have taken four.
    assert_eq!(report["counts"]["rounds"], 2, "{report}");
    assert_eq!(report["counts"]["added"], 3, "{report}");
    assert_eq!(report["counts"]["duplicates"], 1, "{report}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE user_id = 'w'"),
        "3"
    );
    // The repeat is judged against s1 (as stored by the first round), not added beside it.
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) AS n FROM audit_log WHERE target_id = 's1' AND run_id IN \
             (SELECT run_id FROM runs WHERE job = 'integrate')"
        ),
        "2"
    );
}

#[test]
fn a_bad_row_is_named_and_nothing_is_integrated() {
    let (db, _mock, config) = setup("");
    let facts = write(
        &db,
        "bad.jsonl",
        r#"{"id":"ok","user_id":"u","text":"User bought a kayak"}
{"id":"bad","user_id":"u","importance":"very"}
"#,
    );
    let out = db.run(&[
        "--json",
        "--config",
        &config,
        "integrate",
        &facts,
        "--embedder",
        "hash",
    ]);
    assert_ne!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let failures = report["failures"].to_string();
    assert!(failures.contains("bad.jsonl:line 2"), "{failures}");
    assert!(failures.contains("field 'text'"), "{failures}");
    assert_eq!(db.count("memories"), 4);
}

fn snapshot(db: &TestDb) -> Vec<serde_json::Value> {
    let mut rows = db.rows(
        "SELECT id, text, CAST(updated_at AS VARCHAR) AS u, CAST(valid_until AS VARCHAR) AS v, \
         superseded_by, supersession_chain_id, archived_at, consolidates_memory_ids, tags, \
         importance, CAST(created_at AS VARCHAR) AS c, embedding_model FROM memories ORDER BY id",
    );
    rows.extend(db.rows("SELECT source_id, target_id, link_type FROM links ORDER BY source_id"));
    rows.extend(db.rows("SELECT id, status FROM review_queue ORDER BY id"));
    rows
}

#[test]
fn undo_restores_the_tables_exactly_and_the_facts_can_be_integrated_again() {
    let (db, _mock, config) = setup(&seed_answers());
    let facts = write(&db, "new.jsonl", NEW);
    let before = snapshot(&db);
    integrate(&db, &config, &facts, "2025-03-10T00:00:00Z", &[]);
    let after = snapshot(&db);
    assert_ne!(before, after);
    let out = db.run(&[
        "--json",
        "undo",
        "--last",
        "integrate",
        "--embedder",
        "hash",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(snapshot(&db), before, "undo restores every row");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'UNDO'"),
        "4"
    );
    // Undoing again changes nothing; integrating again gives the same result as the first time.
    let again = db.run(&[
        "--json",
        "undo",
        "--last",
        "integrate",
        "--embedder",
        "hash",
    ]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let report = integrate(&db, &config, &facts, "2025-03-10T00:00:00Z", &[]);
    assert_eq!(report["counts"]["merged"], 1, "{report}");
    assert_eq!(snapshot(&db), after);
}

#[test]
fn undo_refuses_when_a_later_run_changed_the_same_rows() {
    let answers = seed_answers()
        + "\n"
        + &classify(
            "User prefers dark mode",
            "User loves dark mode",
            "DUPLICATE",
            0.95,
        );
    let (db, _mock, config) = setup(&answers);
    let facts = write(&db, "new.jsonl", NEW);
    let first = integrate(&db, &config, &facts, "2025-03-10T00:00:00Z", &[]);
    let later = write(
        &db,
        "later.jsonl",
        r#"{"id":"f5","user_id":"u","text":"User loves dark mode","created_at":"2025-04-01T10:00:00Z"}"#,
    );
    integrate(&db, &config, &later, "2025-04-02T00:00:00Z", &[]);
    let before = snapshot(&db);
    let run = first["run_id"].as_str().unwrap();
    let out = db.run(&["--json", "undo", run, "--embedder", "hash"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("memory m1 changed"),
        "{}",
        stdout(&out)
    );
    assert_eq!(snapshot(&db), before, "a refused undo changes nothing");
    // Another job's run (undone from the tables' versions) is refused the same way: the
    // integrate runs since rewrote rows the embed run wrote.
    let out = db.run(&["--json", "undo", "--last", "embed"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).contains("memories row m1 changed after run"),
        "{}",
        stdout(&out)
    );
    assert_eq!(snapshot(&db), before, "a refused undo changes nothing");
}

#[test]
fn enable_delete_archives_the_superseded_memory_and_logs_it_first() {
    let (db, _mock, config) = setup(&seed_answers());
    let facts = write(&db, "new.jsonl", NEW.lines().nth(1).unwrap());
    integrate(
        &db,
        &config,
        &facts,
        "2025-03-10T00:00:00Z",
        &["--enable-delete"],
    );
    let old = &db.rows("SELECT archived_at IS NOT NULL AS archived, superseded_by, state FROM memories WHERE id = 'm2'")[0];
    assert_eq!(old["archived"], true);
    assert_eq!(old["superseded_by"], "f2");
    assert_eq!(old["state"], "archived");
    let delete =
        &db.rows("SELECT target_id, before_state FROM audit_log WHERE operation = 'DELETE'")[0];
    assert_eq!(delete["target_id"], "m2");
    assert!(
        delete["before_state"]
            .as_str()
            .unwrap()
            .contains("User works at Google"),
        "the row as it was: {delete}"
    );
}

#[test]
fn a_supersedes_link_found_by_link_builds_the_same_chain() {
    // A sure supersedes link, and one under `integrate.min_confidence` (0.8), which stays a
    // link and changes no memory's validity.
    let answers = r#"{"task":"link.classify","texts":["User now works at Anthropic","User works at Google"],"reply":{"link_type":"supersedes","confidence":0.9,"reasoning":"scripted"}}
{"task":"link.classify","texts":["User now enjoys hiking in the Alps","User enjoys hiking"],"reply":{"link_type":"supersedes","confidence":0.7,"reasoning":"scripted unsure"}}"#;
    let (db, _mock, config) = setup(answers);
    let later = write(
        &db,
        "later.jsonl",
        "{\"id\":\"n2\",\"user_id\":\"u\",\"text\":\"User now works at Anthropic\",\"created_at\":\"2025-03-02T10:00:00Z\"}\n\
         {\"id\":\"n4\",\"user_id\":\"u\",\"text\":\"User now enjoys hiking in the Alps\",\"created_at\":\"2025-03-03T10:00:00Z\"}",
    );
    for args in [
        vec!["import", later.as_str()],
        vec!["embed", "--embedder", "hash"],
    ] {
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let out = db.run(&[
        "--json",
        "--config",
        &config,
        "link",
        "--llm",
        "providers",
        "--min-score",
        "0.1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["counts"]["supersessions_chained"], 1, "{report}");
    assert_eq!(
        report["counts"]["supersedes_under_min_confidence"], 1,
        "{report}"
    );
    let hiking = &db
        .rows("SELECT valid_until IS NULL AS open, superseded_by FROM memories WHERE id = 'm4'")[0];
    assert_eq!(hiking["open"], true, "an unsure link changes no validity");
    assert!(hiking["superseded_by"].is_null(), "{hiking}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM links WHERE source_id = 'n4' AND target_id = 'm4' AND link_type = 'supersedes'"),
        "1",
        "the unsure link itself is kept"
    );
    let old = &db.rows(
        "SELECT CAST(valid_until AS VARCHAR) AS until, superseded_by, supersession_chain_id \
         FROM memories WHERE id = 'm2'",
    )[0];
    assert_eq!(old["until"], "2025-03-02T10:00:00Z");
    assert_eq!(old["superseded_by"], "n2");
    assert_eq!(old["supersession_chain_id"], "m2");
    let history = stdout(&db.run(&["history", "n2"]));
    assert!(history.contains("V1 m2 -> V2 n2"), "{history}");
}

#[test]
fn check_names_a_forked_chain() {
    let db = TestDb::new();
    db.skip_final_check();
    let file = write(
        &db,
        "fork.jsonl",
        r#"{"id":"a","user_id":"u","text":"A.","valid_until":"2025-02-01T00:00:00Z","superseded_by":"c","supersession_chain_id":"k"}
{"id":"b","user_id":"u","text":"B.","valid_until":"2025-02-01T00:00:00Z","superseded_by":"c","supersession_chain_id":"k"}
{"id":"c","user_id":"u","text":"C.","supersession_chain_id":"k"}
"#,
    );
    assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    let out = db.run(&["--json", "check"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    for invariant in [
        "supersession: no version has two predecessors",
        "supersession: each chain has one current version and one first version",
    ] {
        assert!(text.contains(invariant), "{invariant}: {text}");
    }
    let out = db.run(&["history", "c"]);
    assert!(stderr(&out).contains("supersedes both"), "{}", stderr(&out));
}

#[test]
fn approval_is_refused_when_the_memory_changed_since_the_judge_read_it() {
    let answers = classify(
        "User works at Google",
        "User now works at Anthropic",
        "SUPERSEDE",
        0.6,
    );
    let (db, _mock, config) = setup(&answers);
    let facts = write(&db, "new.jsonl", NEW.lines().nth(1).unwrap());
    integrate(&db, &config, &facts, "2025-03-10T00:00:00Z", &[]);
    let id = db.rows("SELECT id FROM review_queue")[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The memory is rewritten before anyone reviews the item.
    let changed = write(
        &db,
        "changed.jsonl",
        r#"{"id":"m2","user_id":"u","text":"User works at Google in Zurich","created_at":"2025-01-02T10:00:00Z"}"#,
    );
    assert_eq!(db.run(&["import", &changed]).status.code(), Some(0));
    let out = db.run(&[
        "--json",
        "--config",
        &config,
        "review",
        "approve",
        &id,
        "--embedder",
        "hash",
    ]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("changed, was superseded or archived"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        db.scalar("SELECT superseded_by IS NULL AS n FROM memories WHERE id = 'm2'"),
        "true"
    );
    assert_eq!(db.scalar("SELECT status FROM review_queue"), "\"pending\"");
    // Rejecting keeps the fact; the changed memory is not linked as if unchanged.
    let out = db.run(&[
        "--json",
        "--config",
        &config,
        "review",
        "reject",
        &id,
        "--embedder",
        "hash",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE id = 'f2'"),
        "1"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM links WHERE source_id = 'f2'"),
        "0"
    );
}

/// What integrate leaves in the store, comparable across runs: memories, links and each
/// fact's decision.
fn outcome(db: &TestDb) -> Vec<String> {
    let mut out: Vec<String> = db
        .rows(
            "SELECT id, text, CAST(valid_until AS VARCHAR) AS until, superseded_by, \
             supersession_chain_id AS chain, archived_at IS NULL AS live, tags, \
             consolidates_memory_ids AS sources, CAST(updated_at AS VARCHAR) AS updated \
             FROM memories ORDER BY id",
        )
        .iter()
        .map(|r| r.to_string())
        .collect();
    out.extend(
        db.rows("SELECT source_id, target_id, link_type FROM links ORDER BY source_id, target_id")
            .iter()
            .map(|r| r.to_string()),
    );
    out.extend(
        db.rows(
            "SELECT id, source_ids, operation, classification, target_id, after_state \
             FROM audit_log WHERE operation IN ('ADD','UPDATE','NOOP','SUPERSEDE','MERGE','REVIEW') \
             ORDER BY id",
        )
        .iter()
        .map(|r| r.to_string()),
    );
    out
}

/// NEW plus a fact that repeats an earlier fact of the same file.
const NEW_AND_REPEAT: &str = r#"{"id":"f5","user_id":"u","text":"User went hiking last weekend","created_at":"2025-03-04T10:00:00Z"}"#;

#[test]
fn batch_mode_writes_what_an_online_run_writes() {
    let file_text = format!("{NEW}{NEW_AND_REPEAT}\n");
    let (online, _mock_a, config_a) = setup(&seed_answers());
    let facts = write(&online, "new.jsonl", &file_text);
    integrate(&online, &config_a, &facts, "2025-03-10T00:00:00Z", &[]);

    let (batch, _mock_b, config_b) = setup(&seed_answers());
    let facts = write(&batch, "new.jsonl", &file_text);
    let first = integrate(
        &batch,
        &config_b,
        &facts,
        "2025-03-10T00:00:00Z",
        &["--mode", "batch"],
    );
    // f5 would be judged against f4, which is still in the batch: it waits for the next run.
    assert_eq!(first["counts"]["facts_submitted"], 4, "{first}");
    assert_eq!(first["counts"]["deferred"], 1, "{first}");
    assert_eq!(
        batch.scalar("SELECT COUNT(*) FROM memories WHERE id LIKE 'f%'"),
        "0",
        "nothing is applied before the poll"
    );
    // One poll applies round 1 and submits the merge as round 2, then applies round 2.
    let polled = batch.poll_batches(&config_b);
    for (name, n) in [
        ("duplicates", 1),
        ("superseded", 1),
        ("merged", 1),
        ("coexisting", 1),
        ("merges_submitted", 1),
    ] {
        assert_eq!(polled["counts"][name], n, "{name}: {polled}");
    }
    let second = integrate(
        &batch,
        &config_b,
        &facts,
        "2025-03-10T00:00:00Z",
        &["--mode", "batch"],
    );
    assert_eq!(second["counts"]["already_integrated"], 4, "{second}");
    assert_eq!(second["counts"]["facts_submitted"], 1, "{second}");
    batch.poll_batches(&config_b);
    let third = integrate(
        &batch,
        &config_b,
        &facts,
        "2025-03-10T00:00:00Z",
        &["--mode", "batch"],
    );
    assert_eq!(third["counts"]["already_integrated"], 5, "{third}");
    assert!(
        third["counts"].get("batches_submitted").is_none(),
        "{third}"
    );
    assert_eq!(
        outcome(&batch),
        outcome(&online),
        "same tables as the online run"
    );
    // A poll's integrate decisions are undone by their integrate run, not by the poll.
    let first_poll = batch
        .scalar("SELECT run_id FROM runs WHERE job = 'batches.poll' ORDER BY started_at LIMIT 1");
    let out = batch.run(&["--json", "undo", first_poll.trim_matches('"')]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("undo that run instead"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        outcome(&batch),
        outcome(&online),
        "a refused undo changes nothing"
    );
    // Once the logs' versions of its time are gone, nothing tells which decisions the poll
    // applied: refused, naming the window, though the data's versions are all there.
    let optimized = batch.run_json(&[
        "optimize",
        "--keep-log-versions-days",
        "0",
        "--keep-versions-days",
        "1000",
    ]);
    assert_eq!(optimized["status"], "done", "{optimized}");
    let out = batch.run(&["undo", first_poll.trim_matches('"')]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("keep_log_versions_days"),
        "{}",
        stderr(&out)
    );
    assert_eq!(outcome(&batch), outcome(&online));
    // The judge's answers are logged, one row per request.
    assert_eq!(
        batch.scalar("SELECT COUNT(*) FROM audit_log WHERE operation = 'JUDGE'"),
        "6",
        "five classify answers and one merge text"
    );
}

#[test]
fn a_batch_fact_whose_candidate_changed_before_the_poll_waits_for_the_next_run() {
    let answers = format!(
        "{}\n{}",
        seed_answers(),
        classify(
            "User works at Google",
            "User now works at OpenAI",
            "SUPERSEDE",
            0.9
        )
    );
    let (db, _mock, config) = setup(&answers);
    let facts = write(&db, "new.jsonl", NEW);
    integrate(
        &db,
        &config,
        &facts,
        "2025-03-10T00:00:00Z",
        &["--mode", "batch"],
    );
    // Before the poll, an online run supersedes m2, which the batch judged f2 against.
    let other = write(
        &db,
        "other.jsonl",
        r#"{"id":"g1","user_id":"u","text":"User now works at OpenAI","created_at":"2025-03-01T12:00:00Z"}"#,
    );
    let online = integrate(&db, &config, &other, "2025-03-10T00:00:00Z", &[]);
    assert_eq!(online["counts"]["superseded"], 1, "{online}");
    let polled = db.poll_batches(&config);
    assert_eq!(polled["counts"]["left_for_next_run"], 1, "{polled}");
    assert_eq!(
        db.scalar("SELECT superseded_by FROM memories WHERE id = 'm2'"),
        "\"g1\"",
        "m2 is superseded once, not forked"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM memories WHERE id = 'f2'"),
        "0"
    );
    // The next run judges f2 against the store as it is now.
    let again = integrate(
        &db,
        &config,
        &facts,
        "2025-03-11T00:00:00Z",
        &["--mode", "batch"],
    );
    assert_eq!(again["counts"]["already_integrated"], 3, "{again}");
    assert_eq!(again["counts"]["facts_submitted"], 1, "{again}");
    let submitted = db.rows(
        "SELECT source_ids FROM audit_log WHERE operation = 'JUDGE' AND source_ids[2] = 'f2'",
    );
    assert_eq!(
        submitted.len(),
        1,
        "f2 was judged once before the poll: {submitted:?}"
    );
    db.poll_batches(&config);
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM audit_log WHERE operation = 'JUDGE' AND source_ids[2] = 'f2'"
        ),
        "2"
    );
}
