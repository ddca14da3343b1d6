//! `memlife insights` on real Lance tables: narratives alike in meaning become one
//! `learning_pattern` memory whose evidence are those narratives (which exist, are the
//! user's, and prune keeps), a rerun asks nothing twice, the lookback window is kept, and a
//! provider's pattern is used over HTTP while a reply resting on one narrative writes nothing.

use crate::common::{TestDb, stderr, stdout};
use crate::llm::{Mock, both_roles_config};

/// Three sessions of ana's about trains to Ghent, one about soup; one of ben's about trains.
const MEMORIES: &str = r#"{"id":"t1","user_id":"ana","session_id":"s1","kind":"episode","text":"Ana asked for train tickets to Ghent on Friday.","created_at":"2026-03-01T10:00:00Z"}
{"id":"t2","user_id":"ana","session_id":"s1","kind":"episode","text":"Ana wants the cheapest train to Ghent.","created_at":"2026-03-01T10:05:00Z"}
{"id":"t3","user_id":"ana","session_id":"s2","kind":"episode","text":"Ana booked the train to Ghent again.","created_at":"2026-03-02T18:00:00Z"}
{"id":"t4","user_id":"ana","session_id":"s2","kind":"episode","text":"Ana asked whether the Ghent train has delays.","created_at":"2026-03-02T18:04:00Z"}
{"id":"t5","user_id":"ana","session_id":"s3","kind":"episode","text":"Ana said her train to Ghent was late.","created_at":"2026-03-03T08:00:00Z"}
{"id":"t6","user_id":"ana","session_id":"s3","kind":"episode","text":"Ana asked for a refund for the late Ghent train.","created_at":"2026-03-03T08:06:00Z"}
{"id":"c1","user_id":"ana","session_id":"s4","kind":"episode","text":"Ana cooked lentil soup with cumin.","created_at":"2026-03-04T19:00:00Z"}
{"id":"c2","user_id":"ana","session_id":"s4","kind":"episode","text":"The soup needed more salt, she said.","created_at":"2026-03-04T19:10:00Z"}
{"id":"b1","user_id":"ben","session_id":"b","kind":"episode","text":"Ben asked for train tickets to Ghent.","created_at":"2026-03-02T09:00:00Z"}
{"id":"b2","user_id":"ben","session_id":"b","kind":"episode","text":"Ben wants the cheapest train to Ghent.","created_at":"2026-03-02T09:03:00Z"}
"#;

const NOW: &str = "2026-03-06T00:00:00Z";

/// Hash vectors are lexical: narratives sharing a topic's words are about 0.3-0.6 alike.
const SETTINGS: &str = "\n[insights]\nsimilarity = 0.3\n";

fn prepared(config: Option<&str>) -> (TestDb, String) {
    let db = TestDb::new();
    std::fs::write(db.path("m.jsonl"), MEMORIES).unwrap();
    let config = match config {
        Some(c) => c.to_string(),
        None => db.path("memlife.toml"),
    };
    if !std::path::Path::new(&config).exists() {
        std::fs::write(&config, "").unwrap();
    }
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(SETTINGS);
    std::fs::write(&config, text).unwrap();
    for args in [
        vec!["import", &db.path("m.jsonl")],
        vec!["sessions", "--embedder", "hash", "--now", NOW],
    ] {
        let mut all = vec!["--config", config.as_str()];
        all.extend(args);
        let out = db.run(&all);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    (db, config)
}

fn insights(db: &TestDb, config: &str, now: &str, job: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "--config", config];
    all.extend_from_slice(&["insights", "--embedder", "hash", "--now", now]);
    all.extend_from_slice(job);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn patterns(db: &TestDb) -> Vec<serde_json::Value> {
    db.rows(
        "SELECT p.id, p.user_id, p.text, p.tags, p.confidence, p.consolidates_memory_ids, \
         p.embedding IS NOT NULL AS embedded FROM memories p \
         WHERE p.kind = 'learning_pattern' ORDER BY p.user_id",
    )
}

/// The sessions of a pattern's evidence, sorted.
fn evidence_sessions(db: &TestDb, pattern: &serde_json::Value) -> Vec<String> {
    let ids: Vec<String> = pattern["consolidates_memory_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| format!("'{}'", v.as_str().unwrap()))
        .collect();
    let rows = db.rows(&format!(
        "SELECT session_id FROM memories WHERE kind = 'narrative' AND id IN ({}) ORDER BY session_id",
        ids.join(", ")
    ));
    rows.iter()
        .map(|r| r["session_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn recurring_narratives_become_one_pattern_whose_evidence_exists_and_a_rerun_asks_nothing() {
    let (db, config) = prepared(None);
    let dry = insights(&db, &config, NOW, &["--dry-run"]);
    assert_eq!(dry["counts"]["patterns"], 1, "{dry}");
    assert!(patterns(&db).is_empty(), "a dry run writes nothing");

    let report = insights(&db, &config, NOW, &[]);
    let counts = &report["counts"];
    assert_eq!(counts["narratives_read"], 5, "{report}");
    assert_eq!(
        counts["clusters_asked"], 1,
        "ben's one narrative and the soup are no cluster"
    );
    assert_eq!(counts["patterns"], 1);
    let found = patterns(&db);
    assert_eq!(found.len(), 1);
    let p = &found[0];
    assert_eq!(p["user_id"], "ana");
    assert_eq!(evidence_sessions(&db, p), ["s1", "s2", "s3"]);
    assert_eq!(p["tags"], serde_json::json!(["category:topic"]));
    assert_eq!(p["embedded"], true);
    let text = p["text"].as_str().unwrap();
    assert!(
        text.starts_with("Recurring in 3 sessions: ") && text.contains("Ghent"),
        "{text}"
    );
    assert!(p["confidence"].as_f64().unwrap() > 0.0);
    assert_eq!(
        db.count("audit_log WHERE operation = 'INSIGHT' AND classification = 'PATTERN'"),
        1
    );

    let again = insights(&db, &config, NOW, &[]);
    assert_eq!(again["counts"]["clusters_seen_before"], 1, "{again}");
    assert_eq!(again["counts"]["clusters_asked"], 0);
    assert_eq!(patterns(&db).len(), 1);
    // The pattern's evidence is kept by prune, and check passes.
    let out = db.run(&["--config", &config, "check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );

    // Weeks later the narratives are out of the window.
    let late = insights(&db, &config, "2026-04-01T00:00:00Z", &[]);
    assert_eq!(late["counts"]["narratives_read"], 0, "{late}");
}

#[test]
fn a_provider_names_the_pattern_over_http_and_a_pattern_on_one_narrative_is_not_written() {
    // First learn the narratives' texts (the offline sessions tell the same ones).
    let (probe, _) = prepared(None);
    let texts: Vec<(String, String)> = probe
        .rows("SELECT session_id, text FROM memories WHERE kind = 'narrative' AND user_id = 'ana' ORDER BY created_at")
        .iter()
        .map(|r| {
            (
                r["session_id"].as_str().unwrap().to_string(),
                r["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let trains: Vec<&str> = texts
        .iter()
        .filter(|(s, _)| s != "s4")
        .map(|(_, t)| t.as_str())
        .collect();
    let id_of = |db: &TestDb, session: &str| {
        db.rows(&format!(
            "SELECT id FROM memories WHERE kind = 'narrative' AND session_id = '{session}'"
        ))[0]["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (s1, s3) = (id_of(&probe, "s1"), id_of(&probe, "s3"));
    let answer = |evidence: &[&str]| {
        serde_json::json!({"task": "insight.extract", "texts": trains, "reply": {
            "pattern": "Ana travels to Ghent by train often and minds delays.",
            "category": "habit", "confidence": 0.8, "evidence_ids": evidence}})
        .to_string()
    };
    for (evidence, written) in [
        (vec![s1.as_str(), s3.as_str()], true),
        (vec![s1.as_str()], false),
    ] {
        let db = TestDb::new();
        let answers = db.path("answers.jsonl");
        std::fs::write(&answers, answer(&evidence) + "\n").unwrap();
        let mock = Mock::start(&["--answers", &answers]);
        let config = both_roles_config(&db, &mock);
        let (db, config) = {
            // `prepared` imports into its own folder: reuse this one's config.
            let (fresh, _) = prepared(Some(&config));
            (fresh, config)
        };
        let report = insights(&db, &config, NOW, &["--llm", "providers"]);
        assert_eq!(report["counts"]["offline_fallbacks"], 0, "{report}");
        assert_eq!(report["llm"]["providers"]["mock"]["served"], 1, "{report}");
        let found = patterns(&db);
        if written {
            assert_eq!(found.len(), 1, "{report}");
            assert_eq!(
                found[0]["text"],
                "Ana travels to Ghent by train often and minds delays."
            );
            assert_eq!(found[0]["tags"], serde_json::json!(["category:habit"]));
            assert_eq!(found[0]["confidence"], 0.8);
            assert_eq!(evidence_sessions(&db, &found[0]), ["s1", "s3"]);
        } else {
            assert!(found.is_empty(), "{report}");
            assert_eq!(report["counts"]["no_pattern"], 1);
            assert!(
                report["notes"]
                    .to_string()
                    .contains("a recurrence needs two"),
                "{report}"
            );
            assert_eq!(
                db.count("audit_log WHERE operation = 'INSIGHT' AND classification = 'NONE'"),
                1
            );
        }
    }
}

#[test]
fn in_batch_mode_the_poll_writes_the_pattern_once_and_a_waiting_cluster_is_not_sent_again() {
    let holder = TestDb::new();
    let mock = Mock::start(&[]);
    let config = both_roles_config(&holder, &mock);
    let (db, _) = prepared(Some(&config));
    let batch = ["--llm", "providers", "--mode", "batch"];
    let submitted = insights(&db, &config, NOW, &batch);
    assert_eq!(submitted["counts"]["batches_submitted"], 1, "{submitted}");
    assert_eq!(submitted["counts"]["items_submitted"], 1, "{submitted}");
    assert!(
        patterns(&db).is_empty(),
        "nothing is written before the poll"
    );
    // A cluster waiting in a batch is not submitted again.
    let again = insights(&db, &config, NOW, &batch);
    assert_eq!(again["counts"]["clusters_in_pending_batches"], 1, "{again}");
    assert_eq!(again["counts"].get("batches_submitted"), None, "{again}");

    let polled = db.poll_batches(&config);
    assert_eq!(polled["counts"]["applied"], 1, "{polled}");
    let found = patterns(&db);
    assert_eq!(found.len(), 1, "{polled}");
    assert_eq!(evidence_sessions(&db, &found[0]), ["s1", "s2", "s3"]);
    assert_eq!(found[0]["embedded"], true);
    // The same pattern as an online run against the same provider.
    let online_holder = TestDb::new();
    let online_config = both_roles_config(&online_holder, &mock);
    let (online, _) = prepared(Some(&online_config));
    insights(&online, &online_config, NOW, &["--llm", "providers"]);
    let text = |rows: Vec<serde_json::Value>| -> Vec<serde_json::Value> {
        rows.iter().map(|r| r["text"].clone()).collect()
    };
    assert_eq!(text(patterns(&db)), text(patterns(&online)));
    // Applied once: a second poll and a later run add nothing, and check passes.
    db.poll_batches(&config);
    let later = insights(&db, &config, NOW, &batch);
    assert_eq!(later["counts"]["clusters_seen_before"], 1, "{later}");
    assert_eq!(later["counts"].get("batches_submitted"), None, "{later}");
    assert_eq!(patterns(&db).len(), 1);
    assert_eq!(db.count("audit_log WHERE operation = 'INSIGHT'"), 1);
    let out = db.run(&["--config", &config, "check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}
