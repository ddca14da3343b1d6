//! `memlife recall` on real Lance tables: each mode's tiers, current facts unless asked for
//! history or a point in time, successors named, activation written once per call and not
//! twice for the same recall at the same clock.

use serde_json::Value;

use crate::common::{TestDb, stderr, stdout};

/// One topic in every tier, and a supersession chain.
const MEMORIES: &str = r#"{"id":"hot","user_id":"u","text":"User walks the dog Biscuit in the park","tier":"hot","state":"active","created_at":"2025-01-01T08:00:00Z"}
{"id":"warm","user_id":"u","text":"User walks the dog Biscuit by the river","tier":"warm","state":"active","created_at":"2025-01-02T08:00:00Z"}
{"id":"cold","user_id":"u","text":"User walks the dog Biscuit before work","tier":"cold","state":"active","created_at":"2025-01-03T08:00:00Z"}
{"id":"gone","user_id":"u","text":"User walks the dog Biscuit at night","tier":"archived","state":"archived","archived_at":"2025-02-01T00:00:00Z","created_at":"2025-01-04T08:00:00Z"}
{"id":"v1","user_id":"u","text":"User works at Google as an engineer","tier":"hot","state":"active","created_at":"2024-01-01T00:00:00Z","valid_from":"2024-01-01T00:00:00Z","valid_until":"2025-03-01T00:00:00Z","superseded_by":"v2","supersession_chain_id":"v1"}
{"id":"v2","user_id":"u","text":"User works at Anthropic as an engineer","tier":"hot","state":"active","created_at":"2025-03-01T00:00:00Z","valid_from":"2025-03-01T00:00:00Z","supersession_chain_id":"v1"}
{"id":"other","user_id":"w","text":"User walks the dog Biscuit in the park","tier":"hot","state":"active","created_at":"2025-01-01T08:00:00Z"}
"#;

fn loaded() -> TestDb {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(&file, MEMORIES).unwrap();
    for args in [
        vec!["import", file.as_str()],
        vec!["embed", "--embedder", "hash"],
    ] {
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    db
}

fn recall(db: &TestDb, query: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "--json",
        "recall",
        query,
        "--user",
        "u",
        "--embedder",
        "hash",
        "--now",
        "2025-06-01T00:00:00Z",
    ];
    args.extend_from_slice(extra);
    let out = db.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn ids(report: &Value) -> Vec<String> {
    let mut ids: Vec<String> = report["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn each_mode_searches_its_tiers_and_only_the_users_memories() {
    let db = loaded();
    let q = "walks the dog Biscuit";
    let dogs =
        |r: &Value| -> Vec<String> { ids(r).into_iter().filter(|i| !i.starts_with('v')).collect() };
    let ro = ["--no-activate", "--k", "10"];
    let mode = |m: &str| {
        let mut a = ro.to_vec();
        a.extend(["--mode", m]);
        dogs(&recall(&db, q, &a))
    };
    assert_eq!(mode("reflexive"), ["hot"]);
    assert_eq!(mode("standard"), ["hot", "warm"]);
    assert_eq!(mode("deep"), ["cold", "hot", "warm"]);
    assert_eq!(mode("exhaustive"), ["cold", "gone", "hot", "warm"]);
    // The default is standard; read-only recalls changed nothing.
    assert_eq!(dogs(&recall(&db, q, &ro)), ["hot", "warm"]);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM memories WHERE last_accessed_at IS NOT NULL"),
        "0"
    );
}

#[test]
fn current_facts_by_default_history_and_as_of_on_request() {
    let db = loaded();
    let q = "works as an engineer";
    let jobs =
        |r: &Value| -> Vec<String> { ids(r).into_iter().filter(|i| i.starts_with('v')).collect() };
    assert_eq!(jobs(&recall(&db, q, &["--no-activate"])), ["v2"]);
    let all = recall(&db, q, &["--no-activate", "--history"]);
    assert_eq!(jobs(&all), ["v1", "v2"]);
    let old = all["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "v1")
        .unwrap();
    assert_eq!(
        old["superseded_by"], "v2",
        "a superseded memory names its successor"
    );
    // What was true at a time: before the change, the old job; at its instant, the new.
    let at = |t: &str| jobs(&recall(&db, q, &["--no-activate", "--as-of", t]));
    assert_eq!(at("2024-06-01T00:00:00Z"), ["v1"]);
    assert_eq!(at("2025-03-01T00:00:00Z"), ["v2"]);
    assert!(at("2023-06-01T00:00:00Z").is_empty(), "nothing written yet");
}

#[test]
fn returned_memories_are_activated_once_per_recall() {
    let db = loaded();
    let q = "walks the dog Biscuit";
    let first = recall(&db, q, &["--k", "2"]);
    assert_eq!(first["activated"], 2, "{first}");
    let state = |id: &str| {
        db.rows(&format!(
            "SELECT access_count, recall_frequency, CAST(last_accessed_at AS VARCHAR) AS at, \
             salience FROM memories WHERE id = '{id}'"
        ))[0]
            .clone()
    };
    let hot = state("hot");
    assert_eq!(hot["access_count"], 1);
    assert_eq!(hot["recall_frequency"], 1);
    assert_eq!(hot["at"], "2025-06-01T00:00:00Z");
    // The same recall at the same clock (a retry) activates nothing twice.
    let again = recall(&db, q, &["--k", "2"]);
    assert_eq!(again["activated"], 0, "{again}");
    assert_eq!(state("hot")["access_count"], 1);
    // A later recall is another retrieval.
    let out = db.run(&[
        "--json",
        "recall",
        q,
        "--user",
        "u",
        "--embedder",
        "hash",
        "--k",
        "2",
        "--now",
        "2025-06-08T00:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(state("hot")["access_count"], 2);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM audit_log WHERE operation = 'RECALL'"),
        "2",
        "one logged recall per call"
    );
    assert_eq!(db.count("memories"), 7, "nothing added");
}

#[test]
fn a_date_question_gets_a_reasoned_answer_from_the_dates_memories_name() {
    let db = loaded();
    let file = db.path("kitten.jsonl");
    std::fs::write(
        &file,
        r#"{"id":"k1","user_id":"u","text":"User adopted a grey kitten yesterday","tier":"hot","state":"active","created_at":"2025-05-10T09:00:00Z"}"#,
    )
    .unwrap();
    for args in [
        vec!["import", file.as_str()],
        vec!["embed", "--embedder", "hash"],
    ] {
        assert_eq!(db.run(&args).status.code(), Some(0));
    }
    // "When did" switches the answer on by itself.
    let report = recall(
        &db,
        "When did the user adopt a grey kitten?",
        &["--no-activate"],
    );
    let answer = &report["answer"];
    assert_eq!(answer["answer"], "2025-05-09", "{report}");
    assert_eq!(answer["source_memory_ids"], serde_json::json!(["k1"]));
    assert_eq!(answer["requires_inference"], false);
    assert!(answer["reasoning"].as_str().unwrap().contains("yesterday"));
    // Another question has no answer unless asked for.
    let plain = recall(&db, "grey kitten", &["--no-activate"]);
    assert!(plain.get("answer").is_none(), "{plain}");
    // Asked for, offline: the nearest memory as written, its dates resolved, marked as
    // inferred at low confidence (the rules answer only date questions).
    let asked = recall(&db, "grey kitten", &["--no-activate", "--reason"]);
    let answer = &asked["answer"];
    assert_eq!(answer["answer"], "User adopted a grey kitten yesterday");
    assert_eq!(answer["requires_inference"], true);
    assert!(answer["confidence"].as_f64().unwrap() < 0.5);
    assert_eq!(
        answer["temporal_resolutions"],
        serde_json::json!([{"memory_id": "k1", "expression": "yesterday", "resolved": "2025-05-09"}])
    );
}

/// The kitten memory of the test above, in a database whose `recall.answer` role is the mock
/// LLM answering `answers`.
fn with_mock(answers: &str) -> (TestDb, crate::llm::Mock, String) {
    let db = TestDb::new();
    let file = db.path("kitten.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"id":"k1","user_id":"u","text":"User adopted a grey kitten yesterday","created_at":"2025-05-10T09:00:00Z"}"#,
            "\n",
            r#"{"id":"k2","user_id":"u","text":"User named the kitten Miso","created_at":"2025-05-12T09:00:00Z"}"#,
        ),
    )
    .unwrap();
    for args in [
        vec!["import", file.as_str()],
        vec!["embed", "--embedder", "hash"],
    ] {
        assert_eq!(db.run(&args).status.code(), Some(0));
    }
    let path = db.path("answers.jsonl");
    std::fs::write(&path, answers).unwrap();
    let mock = crate::llm::Mock::start(&["--answers", &path]);
    let config = db.path("memlife.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[roles]\nfast = [\"mock\"]\nreasoning = [\"mock\"]\n",
            crate::llm::mock_provider("mock", &mock.url, "")
        ),
    )
    .unwrap();
    (db, mock, config)
}

/// The prompt's memories are the two kitten memories, best first: the scripted reply must
/// name them in the order the recall ranks them, so the test asks for both orders.
fn scripted(reply: &str) -> String {
    let texts = [
        "User adopted a grey kitten yesterday",
        "User named the kitten Miso",
    ];
    [
        format!(
            r#"{{"task":"recall.answer","texts":["{}","{}"],"reply":{reply}}}"#,
            texts[0], texts[1]
        ),
        format!(
            r#"{{"task":"recall.answer","texts":["{}","{}"],"reply":{reply}}}"#,
            texts[1], texts[0]
        ),
    ]
    .join("\n")
}

fn recall_with(db: &TestDb, config: &str, query: &str) -> Value {
    let out = db.run(&[
        "--json",
        "--config",
        config,
        "recall",
        query,
        "--user",
        "u",
        "--embedder",
        "hash",
        "--llm",
        "providers",
        "--no-activate",
        "--k",
        "2",
        "--now",
        "2025-06-01T00:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn a_provider_answers_date_questions_over_real_http_and_its_reply_is_checked() {
    // A model's answer, resolving "yesterday" against the memory's own date.
    let good = r#"{"answer":"9 May 2025","confidence":0.9,"reasoning":"k1 was written on 10 May and says yesterday","temporal_resolutions":[{"memory_id":"k1","expression":"yesterday","resolved":"2025-05-09"}],"source_memory_ids":["k1"],"requires_inference":true}"#;
    let (db, mock, config) = with_mock(&scripted(good));
    let report = recall_with(&db, &config, "When did the user adopt the kitten?");
    let answer = &report["answer"];
    assert_eq!(answer["answer"], "9 May 2025", "{report}");
    assert_eq!(answer["source_memory_ids"], serde_json::json!(["k1"]));
    assert_eq!(answer["temporal_resolutions"][0]["resolved"], "2025-05-09");
    let notes = report["notes"].to_string();
    assert!(notes.contains("answered by provider mock"), "{notes}");
    assert_eq!(mock.stats()["chat"], 1, "one call per recall");
}

#[test]
fn an_untrustworthy_answer_falls_back_to_the_offline_rules_and_says_why() {
    // The model cites a memory it was not shown and an expression no memory contains.
    let invented = r#"{"answer":"last Tuesday","confidence":0.95,"reasoning":"made up","temporal_resolutions":[{"memory_id":"k1","expression":"last Tuesday","resolved":"2025-05-06"}],"source_memory_ids":["k9"],"requires_inference":false}"#;
    let (db, _mock, config) = with_mock(&scripted(invented));
    let report = recall_with(&db, &config, "When did the user adopt the kitten?");
    let answer = &report["answer"];
    assert_eq!(
        answer["answer"], "2025-05-09",
        "the offline rules answered: {report}"
    );
    assert_eq!(answer["source_memory_ids"], serde_json::json!(["k1"]));
    let notes = report["notes"].to_string();
    assert!(notes.contains("no answer that could be trusted"), "{notes}");
    assert!(
        notes.contains("k9"),
        "the reason names what was wrong: {notes}"
    );
}
