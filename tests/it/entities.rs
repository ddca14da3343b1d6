//! `memlife entities` on real Lance tables: entities typed by the offline rules, one entity
//! per name however often it is mentioned, sparse `shares_entity` links, reruns that read
//! only changed memories and create no duplicates.

use crate::common::{TestDb, stderr, stdout};

fn memories(changed: bool) -> String {
    let texts = [
        ("a1", "ana", "Ana took our beagle Pickle to the vet.", 1),
        ("a2", "ana", "Pickle chewed the new sofa cushion.", 2),
        ("a3", "ana", "Ana's cousin Tobias moved to Valparaiso.", 3),
        ("a4", "ana", "Tobias sent photos of the harbour.", 4),
        ("a5", "ana", "Ana walked Pickle along the beach at dawn.", 5),
        ("a6", "ana", "Ana walked Pickle in the rain before work.", 6),
        ("a7", "ana", "Ana and Pickle napped all afternoon.", 7),
        (
            "a8",
            "ana",
            if changed {
                "Ana switched her editor from Vim to Helix."
            } else {
                "Ana prefers PostgreSQL 16 for side projects."
            },
            8,
        ),
        ("b1", "ben", "Ben met Tobias at a climbing gym in Leeds.", 1),
    ];
    texts
        .iter()
        .map(|(id, user, text, day)| {
            format!(
                r#"{{"id":"{id}","user_id":"{user}","text":"{text}","created_at":"2025-02-{day:02}T10:00:00Z"}}"#
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn run_entities(db: &TestDb) -> serde_json::Value {
    let out = db.run(&["--json", "entities", "--embedder", "hash"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn import(db: &TestDb, changed: bool) {
    let file = db.path(if changed {
        "changed.jsonl"
    } else {
        "memories.jsonl"
    });
    std::fs::write(&file, memories(changed)).unwrap();
    let out = db.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn entities_are_typed_linked_sparsely_and_reruns_read_only_changed_memories() {
    let db = TestDb::new();
    import(&db, false);
    let first = run_entities(&db);
    assert_eq!(first["counts"]["memories_read"], 9, "{first}");

    let entities =
        db.rows("SELECT user_id, name, entity_type FROM entities ORDER BY user_id, name");
    let listed: Vec<String> = entities
        .iter()
        .map(|r| {
            format!(
                "{}:{}:{}",
                r["user_id"].as_str().unwrap(),
                r["name"].as_str().unwrap(),
                r["entity_type"].as_str().unwrap()
            )
        })
        .collect();
    for expected in [
        "ana:Ana:person",
        "ana:Pickle:pet",
        "ana:PostgreSQL 16:tool",
        "ana:Tobias:person",
        "ana:Valparaiso:place",
        "ben:Leeds:place",
        "ben:Tobias:person",
    ] {
        assert!(
            listed.contains(&expected.to_string()),
            "{expected} missing from {listed:?}"
        );
    }
    // One entity per user and name, however often it is named.
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE user_id = 'ana' AND name = 'Pickle'"),
        "1"
    );
    // Pickle is named by a1, a2, a5, a6, a7: each memory linked to at most 3 earlier ones.
    let pickle = db.rows(
        "SELECT source_id, target_id FROM links WHERE link_type = 'shares_entity:Pickle' \
         ORDER BY source_id, target_id",
    );
    let pairs: Vec<String> = pickle
        .iter()
        .map(|r| {
            format!(
                "{}>{}",
                r["source_id"].as_str().unwrap(),
                r["target_id"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            "a2>a1", "a5>a1", "a5>a2", "a6>a1", "a6>a2", "a6>a5", "a7>a2", "a7>a5", "a7>a6"
        ],
        "{pairs:?}"
    );
    // Users never share entities or links.
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) AS n FROM links l JOIN memories s ON l.source_id = s.id \
             JOIN memories t ON l.target_id = t.id WHERE s.user_id != t.user_id"
        ),
        "0"
    );
    let (entities_before, rows_before, links_before) = (
        db.count("entities"),
        db.count("memory_entities"),
        db.count("links"),
    );

    // A rerun reads nothing and writes nothing new.
    let again = run_entities(&db);
    assert_eq!(again["counts"]["memories_read"], 0, "{again}");
    assert_eq!(db.count("entities"), entities_before);
    assert_eq!(db.count("memory_entities"), rows_before);
    assert_eq!(db.count("links"), links_before);

    // A changed memory is read again; its old entity rows and links go.
    // Described: nothing dirty (new entities were) until a memory names one again.
    let out = db.run(&["describe", "--embedder", "hash"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE is_dirty"),
        "0"
    );
    import(&db, true);
    let third = run_entities(&db);
    assert_eq!(third["counts"]["memories_read"], 1, "{third}");
    // Ana, named by the changed memory, is marked for `describe` to look at again.
    assert_eq!(third["counts"]["entities_marked_dirty"], 1, "{third}");
    assert_eq!(
        db.scalar("SELECT is_dirty FROM entities WHERE user_id = 'ana' AND name = 'Ana'"),
        "true"
    );
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) AS n FROM memory_entities me JOIN entities e ON me.entity_id = e.id \
             WHERE me.memory_id = 'a8' AND e.name = 'PostgreSQL 16'"
        ),
        "0"
    );
    let tools: Vec<String> = db
        .rows(
            "SELECT e.name FROM memory_entities me JOIN entities e ON me.entity_id = e.id \
             WHERE me.memory_id = 'a8' ORDER BY e.name",
        )
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        tools.contains(&"Helix".to_string()) && tools.contains(&"Vim".to_string()),
        "{tools:?}"
    );
}

#[test]
fn a_dry_run_reports_the_entities_and_writes_nothing() {
    let db = TestDb::new();
    import(&db, false);
    let out = db.run(&["--json", "entities", "--embedder", "hash", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        report["counts"]["entities_new"].as_u64().unwrap() >= 7,
        "{report}"
    );
    assert_eq!(db.count("entities"), 0);
    assert_eq!(db.count("links"), 0);
    assert_eq!(db.count("entity_scans"), 0);
}

#[test]
fn a_new_spelling_close_to_an_entity_of_its_type_becomes_its_alias() {
    let db = TestDb::new();
    import(&db, false);
    let out = db.run(&["entities", "--embedder", "hash", "--name-match", "0.3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // `scalar` gives JSON text: a string comes quoted.
    let pickle = db.scalar("SELECT id FROM entities WHERE user_id = 'ana' AND name = 'Pickle'");
    let pickle_id = pickle.trim_matches('"');
    let more = db.path("more.jsonl");
    std::fs::write(
        &more,
        concat!(
            r#"{"id":"a9","user_id":"ana","text":"Our dog Pickles slept all day.","created_at":"2025-02-09T10:00:00Z"}"#,
            "\n",
            r#"{"id":"a10","user_id":"ana","text":"Our cat Biscuit slept all day.","created_at":"2025-02-10T10:00:00Z"}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = db.run(&["import", &more]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = db.run(&[
        "--json",
        "entities",
        "--embedder",
        "hash",
        "--name-match",
        "0.3",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        report["counts"]["entities_matched_by_embedding"], 1,
        "{report}"
    );
    // "Pickles" is Pickle (hash vectors share its character trigrams), kept as an alias...
    assert_eq!(
        db.scalar("SELECT entity_id FROM memory_entities WHERE memory_id = 'a9'"),
        pickle
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT array_to_string(aliases, ',') AS a FROM entities WHERE id = '{pickle_id}'"
        )),
        "\"Pickles\""
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE name = 'Pickles'"),
        "0"
    );
    // ...while an unrelated pet name is a new entity.
    assert_eq!(
        db.scalar("SELECT entity_type FROM entities WHERE user_id = 'ana' AND name = 'Biscuit'"),
        "\"pet\""
    );
}

#[test]
fn an_llm_extractor_reads_over_http_and_the_rules_read_what_it_gives_no_valid_reply_for() {
    use crate::llm::{Mock, both_roles_config};
    let db = TestDb::new();
    import(&db, false);
    let mock = Mock::start(&[]);
    let config = both_roles_config(&db, &mock);
    let run = |db: &TestDb, config: &str, extractor: &str| -> serde_json::Value {
        let out = db.run(&[
            "--json",
            "--config",
            config,
            "entities",
            "--embedder",
            "hash",
            "--extractor",
            extractor,
            "--llm",
            "providers",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    };
    let report = run(&db, &config, "llm");
    // 9 memories, 8 to a request: two requests, both answered by the provider.
    assert_eq!(report["llm"]["providers"]["mock"]["served"], 2, "{report}");
    assert_eq!(report["counts"]["llm_fallbacks"], 0);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entity_scans WHERE extractor = 'llm-v1'"),
        "9"
    );
    // The mock answers with the offline rules: the same names the rules find (types may be
    // voted otherwise: a model's type counts as a strong cue, the rules' weak cues do not).
    let rules_db = TestDb::new();
    import(&rules_db, false);
    run_entities(&rules_db);
    let names = |db: &TestDb| db.rows("SELECT user_id, name FROM entities ORDER BY user_id, name");
    assert_eq!(names(&db), names(&rules_db));
    // A rerun with the same extractor reads nothing; the rules read everything again.
    assert_eq!(run(&db, &config, "llm")["counts"]["memories_read"], 0);
    assert_eq!(run_entities(&db)["counts"]["memories_read"], 9);

    // Every reply malformed: the rules read all, the scans say so, and a later LLM run
    // reads those memories again.
    let broken = TestDb::new();
    import(&broken, false);
    let faults = format!("[{}]", vec![r#"{"malformed": true}"#; 64].join(","));
    let bad = Mock::with_script(&broken, &faults);
    let config = both_roles_config(&broken, &bad);
    let report = run(&broken, &config, "llm");
    assert_eq!(report["counts"]["llm_fallbacks"], 9, "{report}");
    assert_eq!(names(&broken), names(&rules_db));
    assert_eq!(
        broken.scalar("SELECT COUNT(*) AS n FROM entity_scans WHERE extractor = 'rules-v2'"),
        "9"
    );
}

fn json(out: std::process::Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn submit_batch(db: &TestDb, config: &str) -> serde_json::Value {
    json(db.run(&[
        "--json",
        "--config",
        config,
        "entities",
        "--embedder",
        "hash",
        "--extractor",
        "llm",
        "--llm",
        "providers",
        "--mode",
        "batch",
    ]))
}

#[test]
fn an_llm_extractor_in_batch_mode_is_applied_by_the_poll_exactly_once() {
    use crate::llm::{Mock, both_roles_config};
    let db = TestDb::new();
    import(&db, false);
    let mock = Mock::start(&[]);
    let config = both_roles_config(&db, &mock);
    let submit = |db: &TestDb| submit_batch(db, &config);
    let poll = |db: &TestDb| db.poll_batches(&config);
    // Two users: ana's 8 memories in one request, ben's 1 in another, one batch each.
    let report = submit(&db);
    assert_eq!(report["counts"]["requests"], 2, "{report}");
    assert_eq!(report["counts"]["batches_submitted"], 2, "{report}");
    assert_eq!(db.scalar("SELECT COUNT(*) AS n FROM entities"), "0");
    // Submitted memories are not submitted again while their batch is pending.
    let again = submit(&db);
    assert_eq!(again["counts"]["memories_in_pending_batches"], 9, "{again}");
    assert_eq!(again["counts"]["memories_read"], 0, "{again}");

    let polled = poll(&db);
    assert_eq!(polled["counts"]["applied"], 2, "{polled}");
    assert_eq!(polled["counts"]["memories_read"], 9, "{polled}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entity_scans WHERE extractor = 'llm-v1'"),
        "9"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'EXTRACT'"),
        "2"
    );
    // The same entities and links as an online run of the same extractor.
    let online = TestDb::new();
    import(&online, false);
    let online_config = both_roles_config(&online, &mock);
    json(online.run(&[
        "--json",
        "--config",
        &online_config,
        "entities",
        "--embedder",
        "hash",
        "--extractor",
        "llm",
        "--llm",
        "providers",
    ]));
    for query in [
        "SELECT user_id, name, entity_type FROM entities ORDER BY user_id, name",
        "SELECT source_id, target_id, link_type FROM links ORDER BY source_id, target_id, link_type",
        "SELECT memory_id, entity_id FROM memory_entities ORDER BY memory_id, entity_id",
    ] {
        assert_eq!(db.rows(query), online.rows(query), "{query}");
    }
    // A second poll applies nothing; a later run has nothing to read.
    let second = poll(&db);
    assert_eq!(second["notes"][0], "no batch to poll", "{second}");
    let later = submit(&db);
    assert_eq!(later["counts"]["memories_read"], 0, "{later}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'EXTRACT'"),
        "2"
    );
}

#[test]
fn a_memory_changed_before_the_poll_is_left_to_the_next_run() {
    use crate::llm::{Mock, both_roles_config};
    let db = TestDb::new();
    import(&db, false);
    let mock = Mock::start(&[]);
    let config = both_roles_config(&db, &mock);
    submit_batch(&db, &config);
    import(&db, true); // a8's text changes while its batch is out
    let polled = db.poll_batches(&config);
    assert_eq!(
        polled["counts"]["memories_changed_since_submission"], 1,
        "{polled}"
    );
    assert_eq!(polled["counts"]["memories_read"], 8, "{polled}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entity_scans WHERE memory_id = 'a8'"),
        "0"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE name LIKE 'PostgreSQL%'"),
        "0",
        "the old text's names are not written"
    );
    // The next run submits the changed memory, and its poll reads the new text.
    assert_eq!(submit_batch(&db, &config)["counts"]["memories_read"], 1);
    db.poll_batches(&config);
    assert_eq!(db.scalar("SELECT COUNT(*) AS n FROM entity_scans"), "9");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE name = 'Helix'"),
        "1"
    );
}

#[test]
fn entities_reads_only_the_users_with_a_memory_it_has_not_read() {
    let db = TestDb::new();
    import(&db, false);
    let counts = |report: &serde_json::Value, names: &[&str]| -> Vec<u64> {
        names
            .iter()
            .map(|n| report["counts"][*n].as_u64().unwrap_or(u64::MAX))
            .collect()
    };
    let read = ["users_read", "memories", "memories_read", "memories_marked"];
    let first = run_entities(&db);
    assert_eq!(counts(&first, &read), [2, 9, 9, 9], "{first}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE entity_mark IS NULL"),
        "0"
    );

    // Nothing new: no user is read.
    let again = run_entities(&db);
    assert_eq!(counts(&again, &read), [0, 0, 0, 0], "{again}");

    // A memory integrate adds for Ben: only Ben is read, and only it is new.
    let fact = db.path("fact.jsonl");
    std::fs::write(
        &fact,
        r#"{"user_id":"ben","text":"Ben booked a climbing trip to Kalymnos with Tobias.","created_at":"2025-03-01T10:00:00Z"}"#,
    )
    .unwrap();
    let added = db.run_json(&[
        "integrate",
        &fact,
        "--embedder",
        "hash",
        "--now",
        "2025-03-01T12:00:00Z",
    ]);
    assert_eq!(added["counts"]["added"], 1, "{added}");
    let ben = run_entities(&db);
    assert_eq!(counts(&ben, &read), [1, 2, 1, 1], "{ben}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entities WHERE user_id = 'ben' AND name = 'Kalymnos'"),
        "1"
    );

    // Undo of that run takes its mark back with its reading: the next run reads Ben again.
    let undone = db.run(&["undo", "--last", "entities", "--embedder", "hash"]);
    assert_eq!(undone.status.code(), Some(0), "{}", stderr(&undone));
    let checked = db.run(&["check"]);
    assert_eq!(checked.status.code(), Some(0), "{}", stdout(&checked));
    let redone = run_entities(&db);
    assert_eq!(counts(&redone, &read), [1, 2, 1, 1], "{redone}");

    // A dry run reads but marks nothing; a text imported again is read again.
    import(&db, true);
    let dry = db.run_json(&["entities", "--embedder", "hash", "--dry-run"]);
    // Import cleared the marks of the 9 rows it wrote (both users): 8 settled, a8 read again.
    assert_eq!(counts(&dry, &read), [2, 10, 1, 0], "{dry}");
    let again = run_entities(&db);
    assert_eq!(counts(&again, &read), [2, 10, 1, 9], "{again}");
    assert_eq!(counts(&run_entities(&db), &read), [0, 0, 0, 0]);

    // --all reads every user and every memory; their marks are already right.
    let all = db.run_json(&["entities", "--embedder", "hash", "--all"]);
    assert_eq!(counts(&all, &read), [2, 10, 10, 0], "{all}");
}

#[test]
fn the_scans_are_indexed_by_memory_and_user() {
    // entities merges each night's scans on memory_id and reads a user's by user_id: with
    // the BTree indexes Lance probes them instead of joining against every scan.
    let db = TestDb::new();
    import(&db, false);
    run_entities(&db);
    assert_eq!(db.run(&["index", "--scalar"]).status.code(), Some(0));
    assert_eq!(db.indexed_columns("entity_scans"), ["memory_id", "user_id"]);
    // A rerun after a change still finds and replaces the changed memory's scan.
    import(&db, true);
    run_entities(&db);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM entity_scans WHERE memory_id = 'a8'"),
        "1"
    );
}
