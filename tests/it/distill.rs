//! `memlife distill` on real Lance tables: old, fading episodes alike in meaning become one
//! semantic fact that holds them (provenance links, their entity rows), the episodes it rests
//! on are archived (still there), young, salient or unrelated episodes stay, undo puts them
//! back, and a provider's facts are used over HTTP: an episode no fact rests on stays live.

use crate::common::{TestDb, stderr, stdout};
use crate::llm::{Mock, both_roles_config};

const EPISODES: &str = r#"{"id":"e1","user_id":"ana","kind":"episode","text":"Ana took the train to Ghent for work.","created_at":"2026-01-05T08:00:00Z","salience":0.1}
{"id":"e2","user_id":"ana","kind":"episode","text":"Ana took the train to Ghent for work and the bike carriage was full.","created_at":"2026-01-12T08:00:00Z","salience":0.1}
{"id":"e3","user_id":"ana","kind":"episode","text":"Ana took the early train to Ghent for work again.","created_at":"2026-01-19T08:00:00Z","salience":0.1}
{"id":"e4","user_id":"ana","kind":"episode","text":"Ana baked bread on Sunday.","created_at":"2026-01-20T08:00:00Z","salience":0.1}
{"id":"e5","user_id":"ana","kind":"episode","text":"Ana took the train to Ghent for work.","created_at":"2026-02-27T08:00:00Z","salience":0.1}
{"id":"e6","user_id":"ana","kind":"episode","text":"Ana took the train to Ghent for work on a strike day.","created_at":"2026-01-21T08:00:00Z","salience":0.6}
"#;

const NOW: &str = "2026-03-01T00:00:00Z";

fn prepared(db: &TestDb, config: &[&str]) {
    std::fs::write(db.path("e.jsonl"), EPISODES).unwrap();
    for args in [
        vec!["import", db.path("e.jsonl").leak() as &str],
        vec!["embed", "--embedder", "hash"],
        vec!["entities", "--embedder", "hash"],
    ] {
        let mut all = config.to_vec();
        all.extend(args);
        let out = db.run(&all);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
}

fn distill(db: &TestDb, config: &[&str], job: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(config);
    all.extend_from_slice(&[
        "distill",
        "--embedder",
        "hash",
        "--now",
        NOW,
        "--similarity",
        "0.5",
    ]);
    all.extend_from_slice(job);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn archived(db: &TestDb) -> Vec<String> {
    db.rows("SELECT id FROM memories WHERE archived_at IS NOT NULL ORDER BY id")
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

fn facts(db: &TestDb) -> Vec<serde_json::Value> {
    db.rows(
        "SELECT id, text, consolidates_memory_ids, embedding IS NOT NULL AS embedded \
         FROM memories WHERE source = 'distill'",
    )
}

#[test]
fn old_fading_episodes_become_one_fact_that_holds_them_and_undo_puts_them_back() {
    let db = TestDb::new();
    prepared(&db, &[]);
    let dry = distill(&db, &[], &["--dry-run"]);
    assert_eq!(dry["counts"]["groups_distilled"], 1, "{dry}");
    assert!(
        archived(&db).is_empty() && facts(&db).is_empty(),
        "a dry run writes nothing"
    );

    let report = distill(&db, &[], &[]);
    let counts = &report["counts"];
    assert_eq!(
        counts["episodes_ripe"], 4,
        "e5 is young, e6 salient: {report}"
    );
    assert_eq!(counts["facts_created"], 1);
    assert_eq!(counts["episodes_archived"], 3);
    assert_eq!(
        archived(&db),
        ["e1", "e2", "e3"],
        "the bread stays an episode"
    );
    let found = facts(&db);
    assert_eq!(found.len(), 1);
    let fact = &found[0];
    assert_eq!(
        fact["consolidates_memory_ids"],
        serde_json::json!(["e1", "e2", "e3"])
    );
    assert_eq!(fact["embedded"], true);
    // Nothing is lost: the fact holds every sentence told once.
    let text = fact["text"].as_str().unwrap();
    assert!(
        text.contains("bike carriage was full") && text.contains("early train"),
        "{text}"
    );
    let id = fact["id"].as_str().unwrap();
    assert_eq!(
        db.count(&format!(
            "links WHERE source_id = '{id}' AND link_type = 'consolidates'"
        )),
        3
    );
    // The episodes' entities are the fact's too (entity GC still sees them named).
    assert!(db.count(&format!("memory_entities WHERE memory_id = '{id}'")) > 0);
    assert_eq!(
        db.count("audit_log WHERE operation = 'DISTILL' AND classification = 'APPLIED'"),
        1
    );

    let again = distill(&db, &[], &[]);
    assert_eq!(again["counts"].get("facts_created"), None, "{again}");
    assert_eq!(again["counts"]["groups_asked"], 0);

    let out = db.run(&["undo", report["run_id"].as_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(archived(&db).is_empty(), "{:?}", archived(&db));
    assert!(facts(&db).is_empty());
}

#[test]
fn a_provider_distills_over_http_and_an_episode_no_fact_rests_on_stays_live() {
    let db = TestDb::new();
    let texts = [
        "Ana took the train to Ghent for work.",
        "Ana took the train to Ghent for work and the bike carriage was full.",
        "Ana took the early train to Ghent for work again.",
    ];
    let answers = db.path("answers.jsonl");
    let reply = serde_json::json!({"task": "semantic.distill", "texts": texts, "reply": {
        "facts": [{"text": "Ana commutes to Ghent by train for work.", "source_ids": ["e1", "e3"]},
                  {"text": "Ana once found the bike carriage full.", "source_ids": ["e2"]}],
        "confidence": 0.8}});
    std::fs::write(&answers, reply.to_string() + "\n").unwrap();
    let mock = Mock::start(&["--answers", &answers]);
    let config = both_roles_config(&db, &mock);
    let global = ["--config", config.as_str()];
    prepared(&db, &global);
    let report = distill(&db, &global, &["--llm", "providers"]);
    assert_eq!(report["counts"]["offline_fallbacks"], 0, "{report}");
    assert_eq!(report["llm"]["providers"]["mock"]["served"], 1, "{report}");
    let found = facts(&db);
    assert_eq!(
        found.len(),
        1,
        "the fact on one episode is refused: {report}"
    );
    assert_eq!(found[0]["text"], "Ana commutes to Ghent by train for work.");
    assert_eq!(archived(&db), ["e1", "e3"], "e2 stays an episode");
    // A scores run at the same clock (as in the nightly pipeline): check still finds every
    // archival audited, distill's by its DISTILL row.
    let out = db.run(&["scores", "--now", NOW]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = db.run(&["check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        report["notes"].to_string().contains("a fact resting on one episode")
            || db.rows("SELECT reasoning FROM audit_log WHERE operation = 'DISTILL'")[0]
                ["reasoning"]
                .to_string()
                .contains("one episode"),
        "{report}"
    );
}

#[test]
fn in_batch_mode_the_poll_distills_once_and_a_waiting_group_is_not_sent_again() {
    let db = TestDb::new();
    let texts = [
        "Ana took the train to Ghent for work.",
        "Ana took the train to Ghent for work and the bike carriage was full.",
        "Ana took the early train to Ghent for work again.",
    ];
    let answers = db.path("answers.jsonl");
    let reply = serde_json::json!({"task": "semantic.distill", "texts": texts, "reply": {
        "facts": [{"text": "Ana commutes to Ghent by train for work.", "source_ids": ["e1", "e3"]}],
        "confidence": 0.8}});
    std::fs::write(&answers, reply.to_string() + "\n").unwrap();
    let mock = Mock::start(&["--answers", &answers]);
    let config = both_roles_config(&db, &mock);
    let global = ["--config", config.as_str()];
    prepared(&db, &global);
    let batch = ["--llm", "providers", "--mode", "batch"];
    let submitted = distill(&db, &global, &batch);
    assert_eq!(submitted["counts"]["batches_submitted"], 1, "{submitted}");
    assert_eq!(submitted["counts"]["items_submitted"], 1, "{submitted}");
    assert!(
        archived(&db).is_empty() && facts(&db).is_empty(),
        "nothing is written before the poll"
    );
    // A group waiting in a batch is not submitted again.
    let again = distill(&db, &global, &batch);
    assert_eq!(again["counts"]["groups_in_pending_batches"], 1, "{again}");
    assert_eq!(again["counts"].get("batches_submitted"), None, "{again}");

    let polled = db.poll_batches(&config);
    assert_eq!(polled["counts"]["applied"], 1, "{polled}");
    let found = facts(&db);
    assert_eq!(found.len(), 1, "{polled}");
    assert_eq!(found[0]["text"], "Ana commutes to Ghent by train for work.");
    assert_eq!(found[0]["embedded"], true);
    assert_eq!(archived(&db), ["e1", "e3"], "e2 stays an episode");
    let id = found[0]["id"].as_str().unwrap();
    assert_eq!(
        db.count(&format!(
            "links WHERE source_id = '{id}' AND link_type = 'consolidates'"
        )),
        2
    );
    // Applied once: a second poll and a later run add nothing, and check passes.
    db.poll_batches(&config);
    let later = distill(&db, &global, &batch);
    assert_eq!(later["counts"].get("batches_submitted"), None, "{later}");
    assert_eq!(facts(&db).len(), 1);
    assert_eq!(db.count("audit_log WHERE operation = 'DISTILL'"), 1);
    let out = db.run(&["--config", &config, "check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}
