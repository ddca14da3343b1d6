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
    hashed(MEMORIES)
}

/// A database holding `rows` (JSON Lines of memories), embedded with the hash embedder.
fn hashed(rows: &str) -> TestDb {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(&file, rows).unwrap();
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

/// Recall checks the terms no index answers (archived, superseded, expired) on the rows its
/// searches return: when the nearest rows are mostly not live, it must still find the live ones
/// behind them, and never return the others.
#[test]
fn live_memories_behind_a_crowd_of_dead_ones_are_found() {
    let mut rows = String::new();
    for i in 0..150 {
        // Chains of two: dead{3j} superseded by dead{3j+1}, itself expired since.
        let chain = i - i % 3;
        let dead = match i % 3 {
            0 => format!(
                r#""superseded_by":"dead{}","valid_until":"2025-01-15T00:00:00Z","supersession_chain_id":"c{chain}""#,
                i + 1
            ),
            1 => format!(
                r#""valid_until":"2025-02-01T00:00:00Z","supersession_chain_id":"c{chain}""#
            ),
            _ => r#""archived_at":"2025-02-01T00:00:00Z""#.to_string(),
        };
        rows.push_str(&format!(
            r#"{{"id":"dead{i}","user_id":"u","text":"User walks the dog Biscuit","tier":"hot","state":"active","created_at":"2025-01-01T08:00:00Z",{dead}}}"#
        ));
        rows.push('\n');
    }
    for i in 0..3 {
        rows.push_str(&format!(
            r#"{{"id":"live{i}","user_id":"u","text":"User walks the dog Biscuit on Sunday {i}","tier":"hot","state":"active","created_at":"2025-01-01T08:00:00Z"}}"#
        ));
        rows.push('\n');
    }
    let db = hashed(&rows);
    let report = recall(
        &db,
        "User walks the dog Biscuit",
        &["--no-activate", "--k", "5"],
    );
    assert_eq!(ids(&report), ["live0", "live1", "live2"]);
    let history = recall(
        &db,
        "User walks the dog Biscuit",
        &["--no-activate", "--k", "5", "--history"],
    );
    assert!(
        ids(&history).iter().any(|id| id.starts_with("dead")),
        "--history returns superseded and expired memories: {history}"
    );
}

#[test]
fn each_mode_searches_its_tiers_and_only_the_users_memories() {
    let db = loaded();
    let q = "walks the dog Biscuit";
    let dogs =
        |r: &Value| -> Vec<String> { ids(r).into_iter().filter(|i| !i.starts_with('v')).collect() };
    let ro = ["--no-activate", "--k", "2"];
    let mode = |m: &str, k: &str| {
        let mut a = vec!["--no-activate", "--k", k];
        a.extend(["--mode", m]);
        dogs(&recall(&db, q, &a))
    };
    assert_eq!(mode("reflexive", "10"), ["hot"]);
    assert_eq!(mode("standard", "2"), ["hot", "warm"]);
    assert_eq!(mode("deep", "10"), ["cold", "hot", "warm"]);
    assert_eq!(mode("exhaustive", "10"), ["cold", "gone", "hot", "warm"]);
    // Asked for more than the hot and warm memories that answer, standard mode fills the
    // results from cold ones: each would rank among the k on cosine alone.
    assert_eq!(mode("standard", "10"), ["cold", "hot", "warm"]);
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
    // Salience and recency weighed (the defaults, tuned on LoCoMo, leave them out).
    let weighed = db.path("weighed.toml");
    std::fs::write(
        &weighed,
        "[recall]\nsalience = [0.1, 0.1, 0.1, 0.1]\nrecency = [0.1, 0.1, 0.1, 0.1]\n",
    )
    .unwrap();
    let explained = |db: &TestDb| -> Value {
        let args = [
            "--k",
            "2",
            "--no-activate",
            "--explain",
            "--config",
            &weighed,
        ];
        let out = recall(db, q, &args);
        out["memories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == "hot")
            .unwrap()["explain"]
            .clone()
    };
    let unused = explained(&db);
    let first = recall(&db, q, &["--k", "2"]);
    assert_eq!(first["activated"], 2, "{first}");
    // Ranking already counts the pending activation: its salience, the access just now.
    let used = explained(&db);
    assert!(
        used["recency"].as_f64().unwrap() > unused["recency"].as_f64().unwrap(),
        "{unused} -> {used}"
    );
    let state = |id: &str| {
        db.rows(&format!(
            "SELECT access_count, recall_frequency, CAST(last_accessed_at AS VARCHAR) AS at, \
             salience FROM memories WHERE id = '{id}'"
        ))[0]
            .clone()
    };
    // The activation waits for `scores`, the memory row as it was.
    let pending = |id: &str| -> Value {
        let rows = db.rows(&format!(
            "SELECT activation FROM activations WHERE memory_id = '{id}'"
        ));
        assert_eq!(rows.len(), 1, "one pending activation of {id}: {rows:?}");
        serde_json::from_str(rows[0]["activation"].as_str().unwrap()).unwrap()
    };
    let hot = pending("hot");
    assert_eq!(hot["access_count"], 1);
    assert_eq!(hot["recall_frequency"], 1);
    assert_eq!(hot["last_accessed_at"], "2025-06-01T00:00:00Z");
    assert_eq!(state("hot")["access_count"], 0);
    assert_eq!(db.count("activations"), 2);
    let weighed_salience = used["salience"].as_f64().unwrap();
    let pending_salience = hot["salience"].as_f64().unwrap();
    assert!(
        (weighed_salience - 0.1 * pending_salience).abs() < 1e-4,
        "ranked by the pending salience {pending_salience}: {used}"
    );
    // The same recall at the same clock (a retry) activates nothing twice.
    let again = recall(&db, q, &["--k", "2"]);
    assert_eq!(again["activated"], 0, "{again}");
    assert_eq!(pending("hot")["access_count"], 1);
    // A later recall is another retrieval, counted on from the pending one.
    let later = |now: &str| {
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
            now,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(later("2025-06-08T00:00:00Z")["activated"], 2);
    assert_eq!(pending("hot")["access_count"], 2);
    assert_eq!(pending("hot")["recall_frequency"], 2);
    // `scores` writes the pending activations onto the rows and clears them.
    let out = db.run(&["--json", "scores", "--now", "2025-06-09T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["counts"]["activations_written"], 2, "{report}");
    let hot = state("hot");
    assert_eq!(hot["access_count"], 2);
    assert_eq!(hot["recall_frequency"], 2);
    assert_eq!(hot["at"], "2025-06-08T00:00:00Z");
    assert_eq!(db.count("activations"), 0);
    // A recall after that counts on from the row.
    assert_eq!(later("2025-06-10T00:00:00Z")["activated"], 2);
    assert_eq!(pending("hot")["access_count"], 3);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM audit_log WHERE operation = 'RECALL'"),
        "3",
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

/// Two people named in one user's memories, and a cold memory of a dated trip.
const NAMED: &str = r#"{"id":"ana","user_id":"n","text":"My friend Ana plays the violin in an orchestra","tier":"hot","state":"active","created_at":"2025-01-01T08:00:00Z"}
{"id":"ben","user_id":"n","text":"My friend Ben plays the violin in an orchestra","tier":"hot","state":"active","created_at":"2025-01-02T08:00:00Z"}
{"id":"trip","user_id":"n","text":"My friend Ana went hiking in the Alps in March 2024","tier":"cold","state":"active","created_at":"2024-03-20T08:00:00Z"}
"#;

fn named_db(weights: &str) -> (TestDb, String) {
    let db = TestDb::new();
    let file = db.path("named.jsonl");
    std::fs::write(&file, NAMED).unwrap();
    for args in [
        vec!["import", file.as_str()],
        vec!["embed", "--embedder", "hash"],
        vec!["entities"],
    ] {
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let config = db.path("memlife.toml");
    // This lexical embedder's cosines run low: standard mode widens below 0.3 here.
    std::fs::write(
        &config,
        format!("[thresholds.\"hash-lexical-v1\"]\nrecall = 0.3\n[recall]\n{weights}\n"),
    )
    .unwrap();
    (db, config)
}

/// A recalled memory's `--explain` parts add up to its score.
fn assert_parts_add_up(memory: &Value) {
    let sum: f64 = memory["explain"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!(
        (sum - memory["score"].as_f64().unwrap()).abs() < 1e-3,
        "{memory}"
    );
}

fn recall_named(db: &TestDb, config: &str, query: &str, extra: &[&str]) -> Value {
    recall_explained(db, config, "n", query, extra)
}

/// `recall --explain` of `user`'s memories, read only, hash vectors, at a fixed clock.
fn recall_explained(db: &TestDb, config: &str, user: &str, query: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "--json",
        "--config",
        config,
        "recall",
        query,
        "--user",
        user,
        "--embedder",
        "hash",
        "--no-activate",
        "--explain",
        "--now",
        "2025-06-01T00:00:00Z",
    ];
    args.extend_from_slice(extra);
    let out = db.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn a_person_the_query_names_ranks_their_memories_first_and_explain_shows_why() {
    // Without the entity signal the two violinists tie on words; with it, the one asked
    // about comes first whichever way the tie would break.
    let (db, config) = named_db(
        "similarity = 1.0\nfocused = 0.0\nepisode = 0.0\nlexical = 0.0\ncrowding = 0.0\nentity = 0.5",
    );
    for (who, first) in [("Ana", "ana"), ("Ben", "ben")] {
        let r = recall_named(
            &db,
            &config,
            &format!("Who plays the violin, {who}?"),
            &["--k", "2"],
        );
        let top = &r["memories"][0];
        assert_eq!(top["id"], first, "{r}");
        let parts = &top["explain"];
        assert!(parts["entity"].as_f64().unwrap() > 0.49, "{parts}");
        assert_eq!(r["memories"][1]["explain"]["entity"], 0.0, "{r}");
        assert_parts_add_up(top);
        assert!(r["notes"].to_string().contains(who), "{r}");
    }
}

#[test]
fn full_text_search_scores_the_words_a_query_shares() {
    // BM25 alone: the memories that hold the query's word ("orchestra") score, each its BM25
    // over the query's best; the one without it scores nothing. A weak best match widens
    // standard mode to cold memories.
    let (db, config) =
        named_db("similarity = 0.0\nfocused = 0.0\nepisode = 0.0\nlexical = 1.0\ncrowding = 0.0");
    let r = recall_named(&db, &config, "orchestra hiking", &["--k", "3"]);
    let lexical: Vec<(String, f64)> = r["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["explain"]["lexical"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(lexical.len(), 3, "{r}");
    assert!(lexical.iter().all(|(_, l)| *l > 0.0 && *l <= 1.0), "{r}");
    assert!(
        lexical.iter().any(|(_, l)| *l > 0.999),
        "the best scores 1: {r}"
    );
    assert!(r["notes"].to_string().contains("widened to cold"), "{r}");
    // A word no memory holds scores nothing.
    let r = recall_named(&db, &config, "violin cello", &["--k", "3"]);
    for m in r["memories"].as_array().unwrap() {
        let l = m["explain"]["lexical"].as_f64().unwrap();
        assert_eq!(l > 0.0, m["id"] != "trip", "{r}");
    }
}

#[test]
fn standard_mode_widens_to_cold_memories_when_the_query_names_a_time() {
    let (db, config) = named_db("similarity = 1.0\ntime = 0.3");
    let r = recall_named(
        &db,
        &config,
        "Where did Ana go in March 2024?",
        &["--k", "3"],
    );
    assert_eq!(r["memories"][0]["id"], "trip", "{r}");
    assert!(r["memories"][0]["explain"]["time"].as_f64().unwrap() > 0.29);
    assert!(r["notes"].to_string().contains("widened to cold"), "{r}");
    // No time, but the nearest memory has cooled: standard mode widens and finds it.
    let r = recall_named(&db, &config, "hiking in the Alps", &["--k", "3"]);
    assert_eq!(r["memories"][0]["id"], "trip", "{r}");
    assert!(
        r["notes"]
            .to_string()
            .contains("a cold memory is nearer than any hot or warm one"),
        "{r}"
    );
    // Without a time, a weak best match or a cold memory that would rank among the k,
    // standard mode stays in hot and warm.
    let r = recall_named(&db, &config, "Ana plays the violin", &["--k", "2"]);
    assert!(
        r["memories"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["tier"] == "hot"),
        "{r}"
    );
}

/// `memlife eval recall` on the conversations fixture (hash vectors, k = 1 and 3).
fn eval_fixture(extra: &[&str]) -> Value {
    let fixture = crate::common::fixture("conversations.json");
    let mut args = vec![
        "--json",
        "eval",
        "recall",
        "--locomo",
        fixture.to_str().unwrap(),
        "--embedder",
        "hash",
        "--k",
        "1,3",
    ];
    args.extend_from_slice(extra);
    let out = crate::common::memlife(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn eval_recall_scores_recall_beside_cosine_on_conversations() {
    let r = eval_fixture(&["--misses"]);
    assert_eq!(r["observations"], 8);
    // Categories 1-4: six questions; the one whose evidence turn has no observation does
    // not count; category 5 is not asked.
    assert_eq!(r["questions_asked"], 6);
    assert_eq!(r["questions_counted"], 5);
    let before = &r["before"];
    assert_eq!(before["live_memories"], 8);
    for side in ["recall", "cosine"] {
        let f = &before["overall"][side];
        assert_eq!(f["questions"], 5, "{r}");
        let (h1, h3) = (
            f["hit"]["1"].as_f64().unwrap(),
            f["hit"]["3"].as_f64().unwrap(),
        );
        assert!(h1 <= h3 && h3 <= 1.0, "{f}");
        assert!(f["mrr"].as_f64().unwrap() >= h1, "{f}");
    }
    // Per category: multi-hop, open-domain and single-hop questions are present.
    let per = before["per_category"].as_object().unwrap();
    assert_eq!(
        per.keys().cloned().collect::<Vec<_>>(),
        ["1 multi-hop", "3 open-domain", "4 single-hop"]
    );
    assert_eq!(per["4 single-hop"]["recall"]["questions"], 3);
    // Misses name both rankings' outcome, and agree with the figures at the largest k.
    let misses = before["misses"].as_array().unwrap();
    for side in ["recall", "cosine"] {
        let missed = misses
            .iter()
            .filter(|m| m[format!("{side}_found")] == false)
            .count();
        let hit = before["overall"][side]["hit"]["3"].as_f64().unwrap();
        assert_eq!(missed, ((1.0 - hit) * 5.0).round() as usize, "{side}: {r}");
    }
    for m in misses {
        assert!(
            m["recall_found"] == false || m["cosine_found"] == false,
            "{m}"
        );
    }
}

#[test]
fn eval_recall_narratives_tells_each_session_and_scores_the_narratives_alone() {
    let r = eval_fixture(&["--narratives"]);
    let n = &r["narratives"];
    // Two conversations of the fixture, each session told once from its turns.
    assert_eq!(n["narratives"], 3, "{n}");
    assert_eq!(n["episodes"], 9);
    assert_eq!(n["compression"], 3.0);
    assert_eq!(
        n["scored"]["live_memories"], 3,
        "the narratives alone are asked"
    );
    // Standing for its session, a narrative answers at least what it kept word for word.
    let kept = n["turns_kept_word_for_word"].as_u64().unwrap();
    assert!(kept > 0 && kept <= 9, "{n}");
    for side in ["recall", "cosine"] {
        let whole = n["scored"]["overall"][side]["hit"]["3"].as_f64().unwrap();
        let strict = n["scored_kept_words"]["overall"][side]["hit"]["3"]
            .as_f64()
            .unwrap();
        assert!(strict <= whole, "{side}: {n}");
    }
}

#[test]
fn eval_recall_maintain_runs_the_nightly_jobs_and_scores_again() {
    let r = eval_fixture(&["--maintain"]);
    let jobs = r["jobs"].as_object().unwrap();
    for job in [
        "link",
        "cluster",
        "consolidate",
        "refine",
        "embed",
        "entities",
        "scores",
    ] {
        let per_user = jobs[job].as_array().unwrap();
        assert_eq!(per_user.len(), 2, "{job} ran for each conversation: {r}");
        assert!(per_user.iter().all(|u| u["status"] == "done"), "{job}: {r}");
    }
    assert!(r["supersessions"].is_array());
    assert_eq!(r["after"]["overall"]["recall"]["questions"], 5);
}

const FOCUS: &str = r#"{"id":"city","user_id":"f","text":"Dana told Dana's brother that Dana loves the city at night","tier":"hot","state":"active","created_at":"2025-01-01T08:00:00Z","session_id":"s1"}
{"id":"coat","user_id":"f","text":"Dana bought a warm coat for the winter","tier":"hot","state":"active","created_at":"2025-01-01T09:00:00Z","session_id":"s1"}
{"id":"aunt","user_id":"f","text":"Dana visited her aunt in the spring","tier":"hot","state":"active","created_at":"2025-02-01T08:00:00Z","session_id":"s2"}
{"id":"river","user_id":"f","text":"Running by the river helps her unwind after work","tier":"hot","state":"active","created_at":"2025-03-01T08:00:00Z","session_id":"s3"}
{"id":"note","user_id":"f","text":"The plumber comes on Tuesday","tier":"hot","state":"active","created_at":"2025-03-02T08:00:00Z"}
"#;

fn focus_recall(weights: &str, query: &str) -> Value {
    let db = hashed(FOCUS);
    let config = db.path("memlife.toml");
    std::fs::write(
        &config,
        format!(
            "[thresholds.\"hash-lexical-v1\"]\nrecall = 0.0\n[recall]\nlexical = 0.0\ncrowding = 0.0\ntime = 0.0\n{weights}\n"
        ),
    )
    .unwrap();
    recall_explained(&db, &config, "f", query, &["--k", "5"])
}

#[test]
fn the_focused_query_looks_past_the_name_every_memory_carries() {
    // Four of five memories name Dana: by the plain cosine the one that names her three
    // times comes first; the focused query ("What does do to unwind?") finds the answer (this
    // lexical embedder's cosines are low: the focused one weighs most here).
    let query = "What does Dana do to unwind?";
    let plain = focus_recall("similarity = 1.0\nfocused = 0.0\nepisode = 0.0", query);
    assert_eq!(plain["memories"][0]["id"], "city", "{plain}");
    assert!(
        !plain["notes"].to_string().contains("focused query"),
        "{plain}"
    );
    let focused = focus_recall("similarity = 0.1\nfocused = 1.0\nepisode = 0.0", query);
    assert_eq!(focused["memories"][0]["id"], "river", "{focused}");
    assert!(
        focused["notes"]
            .to_string()
            .contains("focused query: \\\"What does do to unwind?\\\""),
        "{focused}"
    );
    for m in focused["memories"].as_array().unwrap() {
        let parts = &m["explain"];
        // The cosine's part is its weight times the cosine; the parts add up to the score.
        assert!(
            (parts["similarity"].as_f64().unwrap() - 0.1 * m["similarity"].as_f64().unwrap()).abs()
                < 1e-3,
            "{m}"
        );
        assert_parts_add_up(m);
    }
    // A name few memories carry is kept: nothing to focus.
    let kept = focus_recall(
        "similarity = 0.5\nfocused = 0.5",
        "Who fixes the plumbing on Tuesday?",
    );
    assert!(
        !kept["notes"].to_string().contains("focused query"),
        "{kept}"
    );
    assert_eq!(kept["memories"][0]["id"], "note", "{kept}");
}

#[test]
fn a_memory_told_in_the_best_ones_session_is_lifted_by_it() {
    let r = focus_recall(
        "similarity = 1.0\nfocused = 0.0\nepisode = 0.5\nepisode_top = 2",
        "a warm coat for the winter",
    );
    let memories = r["memories"].as_array().unwrap();
    let by_id = |id: &str| memories.iter().find(|m| m["id"] == id).unwrap().clone();
    let (coat, city) = (by_id("coat"), by_id("city"));
    assert_eq!(memories[0]["id"], "coat", "{r}");
    // city shares coat's session: half of coat's score without episodes.
    let coat_alone = coat["score"].as_f64().unwrap() - coat["explain"]["episode"].as_f64().unwrap();
    assert!(
        (city["explain"]["episode"].as_f64().unwrap() - 0.5 * coat_alone).abs() < 1e-3,
        "{r}"
    );
    assert_eq!(memories[1]["id"], "city", "lifted to second: {r}");
    // Memories of other sessions, or of none, get nothing.
    for id in ["aunt", "river", "note"] {
        assert_eq!(by_id(id)["explain"]["episode"], 0.0, "{id}: {r}");
    }
    // Without the weight, city is not second.
    let off = focus_recall(
        "similarity = 1.0\nfocused = 0.0\nepisode = 0.0",
        "a warm coat for the winter",
    );
    assert_ne!(off["memories"][1]["id"], "city", "{off}");
}

#[test]
fn a_day_of_recalls_leaves_few_fragments_and_every_row() {
    // Each recall commits a RECALL audit row and its pending activations; the recall that
    // finds 32 small fragments in either table merges them (`Store::merge_small_tail`).
    let db = loaded();
    let mut activated = 0;
    for minute in 0..40 {
        let now = format!("2025-06-01T10:{minute:02}:00Z");
        let args = [
            "--json",
            "recall",
            "walks the dog",
            "--user",
            "u",
            "--embedder",
            "hash",
            "--now",
            &now,
        ];
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
        activated += report["activated"].as_u64().unwrap();
    }
    assert!(activated >= 40, "{activated}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM audit_log WHERE operation = 'RECALL'"),
        "40"
    );
    // One pending activation per memory, the latest recall's.
    let pending = db.count("activations");
    assert!(pending >= 1);
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM activations WHERE recalled_at = TIMESTAMP '2025-06-01T10:39:00'"
        ),
        pending.to_string()
    );
    for table in ["audit_log", "activations"] {
        let fragments = db.storage(table)["fragments"].as_u64().unwrap();
        assert!(fragments < 32, "{table}: {fragments} fragments");
    }
}
