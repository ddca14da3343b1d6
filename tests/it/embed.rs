//! Embeddings end to end: the embed job fills vectors and records their model, resumes, refuses
//! to mix models unless --all, talks to OpenAI-compatible servers over real HTTP, and
//! `similar` ranks neighbours.

use std::sync::atomic::Ordering;

use crate::common::{TestDb, fixture, memlife, stderr, stdout};

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(out), stderr(out)))
}

#[test]
fn embed_fills_missing_vectors_records_the_model_and_resumes() {
    let db = TestDb::with_dim(64);
    db.run(&["import", fixture("memories.jsonl").to_str().unwrap()]);
    let entities = db.path("entities.jsonl");
    std::fs::write(&entities, "{\"id\": \"e1\", \"user_id\": \"alice\", \"name\": \"Priya\", \"entity_type\": \"person\", \"description\": \"hiking friend\"}\n").unwrap();
    db.run(&["import", "--table", "entities", &entities]);
    let dry = json(&db.run(&["--json", "embed", "--embedder", "hash", "--dry-run"]));
    assert_eq!(dry["counts"]["embedded"], 11);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding IS NOT NULL"),
        "0"
    );
    let first = json(&db.run(&[
        "--json",
        "embed",
        "--embedder",
        "hash",
        "--commit-rows",
        "3",
    ]));
    assert_eq!(first["status"], "done", "{first}");
    assert_eq!(first["counts"]["embedded"], 11);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding_model = 'hash-lexical-v1'"),
        "10"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE embedding IS NOT NULL"),
        "1"
    );
    assert_eq!(db.count("memories"), 10, "updates never duplicate rows");
    assert_eq!(
        db.scalar("SELECT text FROM memories WHERE id = 'm4'"),
        "\"Alice prefers dark mode.\""
    );
    let again = json(&db.run(&["--json", "embed", "--embedder", "hash"]));
    assert_eq!(again["counts"]["embedded"], 0, "nothing left to embed");
}

/// Killed after its first committed chunk, `embed` keeps that chunk, and the next run embeds
/// only what is left: the work done before the kill is neither lost nor done twice.
#[test]
fn a_killed_embed_resumes_where_it_stopped() {
    let db = TestDb::with_dim(64);
    db.run(&["import", fixture("memories.jsonl").to_str().unwrap()]);
    let killed = crate::common::memlife_command()
        .args(["--db", &db.uri, "--json", "embed", "--embedder", "hash"])
        .args(["--commit-rows", "3", "--table", "memories"])
        .env(memlife::crash::FAULT_VARIABLE, "embed.after-chunk")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "killed by the injected abort");
    let kept = db.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding IS NOT NULL");
    assert_eq!(kept, "3", "the first chunk's commit survives the kill");
    let models = db.scalar(
        "SELECT COUNT(*) AS n FROM memories WHERE embedding IS NOT NULL AND embedding_model = 'hash-lexical-v1'",
    );
    assert_eq!(models, "3", "every kept vector names its model");
    let rerun = json(&db.run(&[
        "--json",
        "embed",
        "--embedder",
        "hash",
        "--table",
        "memories",
    ]));
    assert_eq!(rerun["status"], "done", "{rerun}");
    assert_eq!(
        rerun["counts"]["embedded"], 7,
        "only what the kill left: {rerun}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding IS NULL"),
        "0"
    );
    assert_eq!(db.count("memories"), 10, "no row duplicated");
}

#[test]
fn mixing_models_is_refused_until_all_re_embeds() {
    let db = TestDb::with_dim(64);
    let synth = db.path("synth.jsonl");
    memlife(&[
        "synth",
        "--users",
        "2",
        "--memories",
        "40",
        "--dim",
        "64",
        "-o",
        &synth,
    ]);
    db.run(&["import", &synth]);
    let refused = db.run(&[
        "--json",
        "embed",
        "--embedder",
        "hash",
        "--table",
        "memories",
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let report = json(&refused);
    let reason = report["failures"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("synth-placeholder") && reason.contains("--all"),
        "{reason}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding_model = 'hash-lexical-v1'"),
        "0"
    );
    let migrated = db.run(&[
        "--json",
        "embed",
        "--embedder",
        "hash",
        "--table",
        "memories",
        "--all",
    ]);
    assert_eq!(migrated.status.code(), Some(0), "{}", stdout(&migrated));
    assert_eq!(
        db.scalar("SELECT COUNT(DISTINCT embedding_model) AS n FROM memories"),
        "1"
    );
    assert_eq!(db.count("memories"), 40);
}

#[test]
fn a_missing_model_folder_says_how_to_fetch_it() {
    let db = TestDb::with_dim(64);
    let dir = db.path("model");
    let out = db.run(&["embed", "--model-dir", &dir]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("fetch-model.sh"), "{}", stderr(&out));
}

#[test]
fn the_openai_embedder_batches_retries_and_records_its_model() {
    let server = crate::loopback::serve_embeddings(64, 2, 429);
    let db = TestDb::with_dim(64);
    db.run(&["import", fixture("memories.jsonl").to_str().unwrap()]);
    let out = db.run(&[
        "--json",
        "embed",
        "--embedder",
        "openai",
        "--embed-url",
        &server.url,
        "--embed-model",
        "test-embedder",
        "--batch-size",
        "4",
        "--embed-concurrency",
        "2",
        "--table",
        "memories",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(json(&out)["counts"]["embedded"], 10);
    // 10 texts in batches of 4 are 3 requests, plus the 2 refused with 429 and retried.
    assert_eq!(server.requests.load(Ordering::SeqCst), 5);
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) AS n FROM memories WHERE embedding_model = 'openai:test-embedder'"
        ),
        "10"
    );
}

#[test]
fn a_failing_server_fails_its_items_and_the_job_goes_on() {
    let server = crate::loopback::serve_embeddings(64, usize::MAX, 400);
    let db = TestDb::with_dim(64);
    db.run(&["import", fixture("memories.jsonl").to_str().unwrap()]);
    let out = db.run(&[
        "--json",
        "embed",
        "--embedder",
        "openai",
        "--embed-url",
        &server.url,
        "--table",
        "memories",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    assert_eq!(report["counts"]["refused"], 10);
    assert!(
        report["failures"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("HTTP 400")
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding IS NOT NULL"),
        "0"
    );
}

#[test]
fn similar_ranks_a_users_neighbours_and_explains_missing_vectors() {
    // 384 buckets: few enough hash collisions for shared words to decide the ranking.
    let db = TestDb::with_dim(384);
    db.run(&["import", fixture("memories.jsonl").to_str().unwrap()]);
    let no_vector = db.run(&["similar", "m1"]);
    assert_eq!(no_vector.status.code(), Some(2));
    assert!(
        stderr(&no_vector).contains("memlife embed"),
        "{}",
        stderr(&no_vector)
    );
    db.run(&["embed", "--embedder", "hash"]);
    let out = json(&db.run(&["--json", "similar", "m1", "--k", "3"]));
    let neighbours = out["neighbours"].as_array().unwrap();
    assert_eq!(neighbours.len(), 3);
    assert!(neighbours.iter().all(|n| n["id"] != "m1"));
    // Alice's other vector-store memory shares the most words with "uses Pinecone for vector search".
    assert_eq!(neighbours[0]["id"], "m2");
    let scores: Vec<f64> = neighbours
        .iter()
        .map(|n| n["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]));
    let users: Vec<&str> = neighbours
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert!(
        users
            .iter()
            .all(|id| ["m2", "m3", "m4", "m5", "m6"].contains(id)),
        "only alice's: {users:?}"
    );
    let missing = db.run(&["similar", "nope"]);
    assert!(stderr(&missing).contains("no memory with id 'nope'"));

    // Archived memories are left out unless asked for.
    let row = db.path("m2.jsonl");
    let out = db.run(&["export", "--where", "id = 'm2'", "-o", &row]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut m2: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&row).unwrap().trim()).unwrap();
    m2["state"] = "archived".into();
    m2["tier"] = "archived".into();
    m2["archived_at"] = "2025-01-01T00:00:00Z".into();
    std::fs::write(&row, m2.to_string()).unwrap();
    assert_eq!(db.run(&["import", &row]).status.code(), Some(0));
    db.skip_final_check(); // an archival imported by hand has no audit row
    let live = json(&db.run(&["--json", "similar", "m1", "--k", "3"]));
    let live: Vec<&str> = live["neighbours"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(live.len(), 3);
    assert!(!live.contains(&"m2"), "{live:?}");
    let all = json(&db.run(&["--json", "similar", "m1", "--k", "3", "--archived"]));
    assert_eq!(all["neighbours"][0]["id"], "m2");
}

#[test]
fn the_config_file_chooses_the_embedder_and_flags_override_it() {
    let db = TestDb::with_dim(64);
    db.run(&["import", fixture("memories.jsonl").to_str().unwrap()]);
    let config = db.path("memlife.toml");
    std::fs::write(&config, "[embedder]\nkind = \"hash\"\n").unwrap();
    let out = db.run(&[
        "--json", "--config", &config, "embed", "--table", "memories",
    ]);
    assert_eq!(json(&out)["counts"]["embedded"], 10);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding_model = 'hash-lexical-v1'"),
        "10"
    );
    // A flag wins over the file: the local model folder does not exist here, and says so.
    let out = db.run(&[
        "--config",
        &config,
        "embed",
        "--all",
        "--embedder",
        "local",
        "--model-dir",
        "/nonexistent",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/nonexistent"), "{}", stderr(&out));
    std::fs::write(&config, "[embedder]\nkind = \"magic\"\n").unwrap();
    let out = db.run(&["--config", &config, "embed"]);
    assert!(
        stderr(&out).contains("embedder.kind = \"magic\""),
        "{}",
        stderr(&out)
    );
}
