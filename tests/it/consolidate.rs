//! `memlife consolidate` end to end on real Lance tables: the two passes, the applied change
//! (new memory, links and entity rows moved, members archived), `memlife check`'s
//! consolidation invariants, remembered rejections, a killed run finished by the next, and
//! the same job through an OpenAI-compatible server.

use serde_json::Value;

use crate::common::{TestDb, memlife_command, stderr, stdout};

const MEMORIES: &str = r#"{"id":"s1","user_id":"u1","text":"Noor's sister Lina lives in Utrecht.","importance":0.9,"access_count":6,"created_at":"2025-01-01T08:00:00Z","tags":["family"]}
{"id":"s2","user_id":"u1","text":"Noor's sister Lina lives in Utrecht and works as a nurse.","importance":0.5,"created_at":"2025-01-05T08:00:00Z","tags":["work"]}
{"id":"s3","user_id":"u1","text":"Noor's sister Lina lives in Utrecht with her two cats.","importance":0.4,"created_at":"2025-01-09T08:00:00Z"}
{"id":"t1","user_id":"u1","text":"Noor visited Lina in Utrecht last weekend.","importance":0.3,"created_at":"2025-02-01T08:00:00Z"}
{"id":"v1","user_id":"u1","text":"Noor edits code in Vim.","importance":0.9,"access_count":9,"created_at":"2025-02-02T08:00:00Z"}
{"id":"v2","user_id":"u1","text":"Noor edits code in Emacs.","importance":0.5,"created_at":"2025-02-03T08:00:00Z"}
{"id":"v3","user_id":"u1","text":"Noor never edits code in Vim.","importance":0.5,"created_at":"2025-02-04T08:00:00Z"}
"#;

const LINKS: &str = r#"{"source_id":"t1","target_id":"s1","user_id":"u1","link_type":"instance_of","confidence":0.7,"origin":"llm"}
{"source_id":"t1","target_id":"s2","user_id":"u1","link_type":"instance_of","confidence":0.9,"origin":"llm"}
{"source_id":"s3","target_id":"s1","user_id":"u1","link_type":"related_to","confidence":0.6,"origin":"llm"}
{"source_id":"s2","target_id":"v1","user_id":"u1","link_type":"related_to","confidence":0.5,"origin":"llm"}
"#;

const ENTITIES: &str = r#"{"id":"e-lina","user_id":"u1","name":"Lina","entity_type":"person"}
"#;

const MEMORY_ENTITIES: &str = r#"{"memory_id":"s1","entity_id":"e-lina","user_id":"u1"}
{"memory_id":"s2","entity_id":"e-lina","user_id":"u1"}
"#;

fn loaded() -> TestDb {
    let db = TestDb::new();
    for (table, rows) in [
        ("memories", MEMORIES),
        ("links", LINKS),
        ("entities", ENTITIES),
        ("memory_entities", MEMORY_ENTITIES),
    ] {
        let file = db.path(&format!("{table}.jsonl"));
        std::fs::write(&file, rows).unwrap();
        let out = db.run(&["import", "--table", table, &file]);
        assert_eq!(out.status.code(), Some(0), "{table}: {}", stderr(&out));
    }
    for args in [
        &["embed", "--embedder", "hash"][..],
        &["cluster", "--threshold", "0.5"][..],
    ] {
        let out = db.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    db
}

fn consolidate(db: &TestDb, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    args.extend(["consolidate", "--embedder", "hash"]);
    let out = db.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn a_members_pending_activation_counts_in_the_consolidated_memory() {
    let db = loaded();
    let stored: i64 = db
        .scalar("SELECT SUM(access_count) FROM memories WHERE id IN ('s1','s2','s3')")
        .parse()
        .unwrap();
    let out = db.run(&[
        "--json",
        "recall",
        "Lina lives in Utrecht",
        "--user",
        "u1",
        "--embedder",
        "hash",
        "--k",
        "3",
        "--now",
        "2025-02-01T08:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let pending = db.rows("SELECT memory_id FROM activations WHERE memory_id IN ('s1','s2','s3')");
    assert!(!pending.is_empty(), "the recall returned a member");
    let report = consolidate(&db, &[]);
    assert_eq!(report["counts"]["consolidated"], 1, "{report:#}");
    let new = &db
        .rows("SELECT access_count, last_accessed_at FROM memories WHERE source = 'consolidate'")
        [0];
    assert_eq!(
        new["access_count"].as_i64().unwrap(),
        stored + pending.len() as i64,
        "the members' counts with their pending accesses: {new}"
    );
    assert_eq!(new["last_accessed_at"], "2025-02-01T08:00:00Z", "{new}");
}

#[test]
fn an_approved_cluster_becomes_one_memory_that_takes_over_its_links() {
    let db = loaded();
    let report = consolidate(&db, &[]);
    assert_eq!(report["counts"]["consolidated"], 1, "{report:#}");
    // The Vim cluster (a contradiction and another editor) is declined, never folded.
    let new = db.rows(
        "SELECT id, text, importance, state, created_at, last_accessed_at, tags, consolidates_memory_ids, embedding IS NOT NULL AS embedded \
         FROM memories WHERE source = 'consolidate'",
    );
    assert_eq!(new.len(), 1, "{new:?}");
    let new = &new[0];
    let id = new["id"].as_str().unwrap();
    assert_eq!(
        new["consolidates_memory_ids"],
        serde_json::json!(["s1", "s2", "s3"])
    );
    assert_eq!(new["importance"], 0.5, "the median of 0.9, 0.5, 0.4");
    assert_eq!(new["created_at"], "2025-01-01T08:00:00Z", "the earliest");
    assert_eq!(
        new["state"], "candidate",
        "the furthest state of its members"
    );
    assert_eq!(
        new["last_accessed_at"], "2025-01-09T08:00:00Z",
        "decay runs from the last telling (s3's), not the first"
    );
    assert_eq!(new["tags"], serde_json::json!(["family", "work"]));
    assert_eq!(new["embedded"], true);
    let text = new["text"].as_str().unwrap();
    assert!(
        text.contains("nurse") && text.contains("two cats"),
        "{text}"
    );
    // Members archived, still there.
    let members =
        db.rows("SELECT id, state FROM memories WHERE id IN ('s1','s2','s3') ORDER BY id");
    assert!(
        members.iter().all(|m| m["state"] == "archived"),
        "{members:?}"
    );
    assert_eq!(
        db.scalar("SELECT state FROM memories WHERE id = 'v1'"),
        "\"candidate\""
    );
    // Links: t1's two instance_of links become one (the higher confidence), the link between
    // members is dropped, s2 -> v1 moves; consolidates links reach every member.
    let links = db.rows(
        "SELECT source_id, target_id, link_type, confidence FROM links ORDER BY link_type, source_id, target_id",
    );
    let expect = |s: &str, t: &str, ty: &str| {
        links
            .iter()
            .any(|l| l["source_id"] == s && l["target_id"] == t && l["link_type"] == ty)
    };
    for member in ["s1", "s2", "s3"] {
        assert!(expect(id, member, "consolidates"), "{links:?}");
    }
    assert!(
        expect("t1", id, "instance_of") && expect(id, "v1", "related_to"),
        "{links:?}"
    );
    let instance = links
        .iter()
        .find(|l| l["link_type"] == "instance_of")
        .unwrap();
    assert_eq!(instance["confidence"], 0.9);
    assert_eq!(links.len(), 5, "{links:?}");
    // Entity rows moved once.
    assert_eq!(db.scalar("SELECT COUNT(*) AS n FROM memory_entities"), "1");
    assert_eq!(
        db.scalar("SELECT memory_id FROM memory_entities"),
        format!("\"{id}\"")
    );
    // The audit row holds the before state.
    let before: Value = serde_json::from_str(
        serde_json::from_str::<String>(&db.scalar(
            "SELECT before_state FROM audit_log WHERE operation = 'CONSOLIDATE' AND classification = 'APPROVED'",
        ))
        .unwrap()
        .as_str(),
    )
    .unwrap();
    assert_eq!(before["memories"].as_array().unwrap().len(), 3);
    assert_eq!(before["links"].as_array().unwrap().len(), 4);
    // A rerun changes nothing: the cluster is stale, the declined one remembered.
    let again = consolidate(&db, &[]);
    assert_eq!(again["counts"]["consolidated"], Value::Null, "{again:#}");
    assert_eq!(again["counts"]["clusters_stale"], 1, "{again:#}");
    assert_eq!(again["counts"]["clusters_declined_before"], 1, "{again:#}");
    assert_eq!(again["llm"]["items"], 0, "nothing asked again");
}

#[test]
fn a_consolidation_consolidated_again_keeps_its_own_provenance_links() {
    let db = loaded();
    let first = consolidate(&db, &[]);
    assert_eq!(first["counts"]["consolidated"], 1, "{first:#}");
    let x = db.rows("SELECT id FROM memories WHERE source = 'consolidate'")[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A later memory telling the same, then clustering and consolidation again: the first
    // consolidation is a member of the second.
    let file = db.path("later.jsonl");
    std::fs::write(
        &file,
        r#"{"id":"s4","user_id":"u1","text":"Noor's sister Lina lives in Utrecht with her two cats and works as a nurse.","importance":0.5,"created_at":"2025-03-01T08:00:00Z"}
"#,
    )
    .unwrap();
    for args in [
        &["import", file.as_str()][..],
        &["embed", "--embedder", "hash"][..],
        &["cluster", "--threshold", "0.5"][..],
    ] {
        let out = db.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    let second = consolidate(&db, &[]);
    assert_eq!(second["counts"]["consolidated"], 1, "{second:#}");
    let y = db.rows(&format!(
        "SELECT id, consolidates_memory_ids FROM memories WHERE source = 'consolidate' AND id <> '{x}'"
    ));
    assert_eq!(y.len(), 1, "{y:?}");
    let held = y[0]["consolidates_memory_ids"].to_string();
    assert!(held.contains(&x) && held.contains("s4"), "{held}");
    // The first consolidation still says what it was made of; the second does not take over
    // those links.
    for member in ["s1", "s2", "s3"] {
        assert_eq!(
            db.count(&format!(
                "links WHERE link_type = 'consolidates' AND target_id = '{member}' AND source_id = '{x}'"
            )),
            1,
            "{member}"
        );
        assert_eq!(
            db.count(&format!(
                "links WHERE link_type = 'consolidates' AND target_id = '{member}'"
            )),
            1,
            "{member}"
        );
    }
    // `check` passes on the store: TestDb runs it when the test ends (the year's store
    // failed it on these links).
}

#[test]
fn a_run_killed_mid_apply_is_finished_by_the_next_and_check_says_so_meanwhile() {
    let db = loaded();
    let mut command = memlife_command();
    command
        .args(["--db", &db.uri, "consolidate", "--embedder", "hash"])
        .env(memlife::crash::FAULT_VARIABLE, "consolidate.after-links");
    let killed = command.output().unwrap();
    assert_eq!(killed.status.code(), None, "{}", stderr(&killed));
    // Logged, new memory written, links moved, members not archived yet: check reports it.
    let out = db.run(&["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("consolidation: every member is archived"),
        "{}",
        stdout(&out)
    );
    let report = consolidate(&db, &[]);
    assert_eq!(report["counts"]["resumed"], 1, "{report:#}");
    assert_eq!(
        db.count("memories"),
        8,
        "7 memories and 1 consolidated, none twice"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE state = 'archived'"),
        "3"
    );
}

#[test]
fn the_same_consolidation_through_an_openai_compatible_server() {
    let db = loaded();
    // The offline judge on one copy, the server (answering with the same rules over HTTP)
    // on others: the same consolidation.
    consolidate(&db, &[]);
    let offline_text = db.scalar("SELECT text FROM memories WHERE source = 'consolidate'");
    // Through a fresh mock server and copy, with `extra` arguments: the report and the calls.
    let through_server = |extra: &[&str]| -> (Value, u64) {
        let mock = crate::llm::Mock::start(&[]);
        let config = crate::llm::both_roles_config(&db, &mock);
        let copy = loaded();
        let mut args = vec![
            "--json",
            "--config",
            &config,
            "consolidate",
            "--embedder",
            "hash",
            "--llm",
            "providers",
        ];
        args.extend_from_slice(extra);
        let out = copy.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(report["counts"]["consolidated"], 1, "{report:#}");
        assert_eq!(report["llm"]["judge"], "providers");
        assert_eq!(
            copy.scalar("SELECT text FROM memories WHERE source = 'consolidate'"),
            offline_text
        );
        (report, mock.stats()["chat"].as_u64().unwrap())
    };
    // The two small clusters go out in one pass-1 request (`--memories-per-call`, 8): one
    // proposal for both and a verification.
    let (report, calls) = through_server(&[]);
    assert_eq!(report["counts"]["requests"], 1, "{report:#}");
    assert_eq!(calls, 2);
    // One request per cluster on request: the same consolidation, one call more.
    let (report, calls) = through_server(&["--memories-per-call", "1"]);
    assert_eq!(report["counts"]["requests"], 2, "{report:#}");
    assert_eq!(calls, 3);
}

fn poll(db: &TestDb, config: &str, fault: Option<&str>) -> (Option<i32>, Value) {
    crate::llm::poll(
        db,
        config,
        &["--lease-secs", "0", "--embedder", "hash"],
        fault.map(|point| (memlife::crash::FAULT_VARIABLE, point)),
    )
}

#[test]
fn in_batch_mode_the_two_passes_are_two_batch_rounds_applied_exactly_once() {
    let offline = loaded();
    consolidate(&offline, &[]);
    let db = loaded();
    // Batches complete 1.5 s after they are created: each poll below sees one round.
    let mock = crate::llm::Mock::start(&["--batch-delay-ms", "1500"]);
    let wait = || std::thread::sleep(std::time::Duration::from_millis(1700));
    let config = crate::llm::both_roles_config(&db, &mock);
    let batch = [
        "--config",
        &config,
        "consolidate",
        "--embedder",
        "hash",
        "--llm",
        "providers",
        "--mode",
        "batch",
    ];
    let submit = |db: &TestDb| -> Value {
        let mut args = vec!["--json"];
        args.extend_from_slice(&batch);
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    };
    let report = submit(&db);
    // Both small clusters in one pass-1 request.
    assert_eq!(report["counts"]["items_submitted"], 1, "{report:#}");
    assert_eq!(db.count("llm_batches"), 1);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE source = 'consolidate'"),
        "0",
        "submitting changes no memory"
    );

    // Poll 1 applies pass 1 and submits pass 2, and is killed before it marks pass 1
    // applied; the next poll applies pass 1 again (same audit rows) and submits pass 2 once.
    wait();
    let (code, _) = poll(&db, &config, Some("batches.poll.after-apply"));
    assert_eq!(code, None, "killed by the injected fault");
    let (code, report) = poll(&db, &config, None);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["counts"]["applied"], 1, "{report:#}");
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) AS n FROM llm_batches WHERE task = 'consolidate.verify' AND status = 'submitted'"
        ),
        "1"
    );
    assert_eq!(mock.stats()["batches_created"], 2);
    // Meanwhile a new submission skips the cluster waiting for pass 2 and the declined one.
    let again = submit(&db);
    assert_eq!(
        again["counts"]["clusters_in_pending_batches"], 1,
        "{again:#}"
    );
    assert_eq!(again["counts"]["clusters_declined_before"], 1, "{again:#}");
    assert!(again["counts"]["items_submitted"].is_null(), "{again:#}");

    // Poll 2 applies the approved group, killed once after its links moved.
    wait();
    let (code, _) = poll(&db, &config, Some("consolidate.after-links"));
    assert_eq!(code, None);
    let (code, report) = poll(&db, &config, None);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["counts"]["consolidated"], 1, "{report:#}");
    assert_eq!(
        db.rows("SELECT text FROM memories WHERE source = 'consolidate'"),
        offline.rows("SELECT text FROM memories WHERE source = 'consolidate'"),
        "the same consolidation as online with the same rules"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE archived_at IS NOT NULL"),
        "3"
    );
    let out = db.run(&["--json", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // Nothing left to poll, nothing applied twice.
    let (_, report) = poll(&db, &config, None);
    assert_eq!(report["notes"][0], "no batch to poll", "{report:#}");
    assert_eq!(mock.stats()["batches_created"], 2);
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'CONSOLIDATE' AND classification = 'APPROVED'"
        ),
        "1"
    );
}
