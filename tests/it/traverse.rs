//! `memlife traverse` and `memlife stats --links/--memory` on real Lance tables: depth is
//! respected, cycles end the walk, heal-on-read removes exactly the dead links it meets (audit
//! first), archived memories are followed and marked.

use crate::common::{TestDb, stderr, stdout};

/// Memories a..f (f archived) and the links between them, plus dead ones.
fn graph(db: &TestDb) {
    let memories: String = [
        ("a", "Ana plants tomatoes every spring"),
        ("b", "Ana's tomatoes got blight last year"),
        ("c", "Ana switched to blight-resistant seeds"),
        ("d", "Ana sells seedlings at the market"),
        ("e", "The market moved to the old station"),
        ("f", "Ana once grew only peppers"),
        ("x", "Ana's bike has a flat tyre"),
    ]
    .iter()
    .map(|(id, text)| {
        let archived = if *id == "f" {
            r#","state":"archived","archived_at":"2025-03-01T00:00:00Z""#
        } else {
            ""
        };
        format!(r#"{{"id":"{id}","user_id":"ana","text":"{text}"{archived}}}"#) + "\n"
    })
    .collect();
    // a -> b -> c -> a is a cycle; c -> d -> e a chain; a -> f archived; dead: a -> gone1,
    // gone2 -> b (reachable), x -> gone3 (not reachable from a).
    let links: String = [
        ("a", "b", "causes", 0.9),
        ("b", "c", "motivated_by", 0.8),
        ("c", "a", "related_to", 0.7),
        ("c", "d", "related_to", 0.6),
        ("d", "e", "shares_entity:market", 1.0),
        ("a", "f", "supersedes", 0.95),
        ("a", "gone1", "related_to", 0.5),
        ("gone2", "b", "causes", 0.5),
        ("x", "gone3", "related_to", 0.5),
    ]
    .iter()
    .map(|(s, t, ty, c)| {
        format!(
            r#"{{"source_id":"{s}","target_id":"{t}","user_id":"ana","link_type":"{ty}","confidence":{c}}}"#
        ) + "\n"
    })
    .collect();
    std::fs::write(db.path("m.jsonl"), memories).unwrap();
    std::fs::write(db.path("l.jsonl"), links).unwrap();
    for args in [
        vec!["import", db.path("m.jsonl").leak() as &str],
        vec!["import", "--table", "links", db.path("l.jsonl").leak()],
    ] {
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
}

fn traverse(db: &TestDb, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "traverse"];
    all.extend_from_slice(args);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

/// (id, depth) of every memory reached, in order.
fn reached(t: &serde_json::Value) -> Vec<(String, u64)> {
    t["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["depth"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn dead_links(db: &TestDb) -> Vec<String> {
    db.rows(
        "SELECT source_id, target_id FROM links WHERE source_id NOT IN (SELECT id FROM memories) \
         OR target_id NOT IN (SELECT id FROM memories) ORDER BY source_id",
    )
    .iter()
    .map(|r| {
        format!(
            "{}>{}",
            r["source_id"].as_str().unwrap(),
            r["target_id"].as_str().unwrap()
        )
    })
    .collect()
}

#[test]
fn traversal_respects_depth_survives_cycles_and_marks_archived_memories() {
    let db = TestDb::new();
    graph(&db);
    let t = traverse(&db, &["a", "--depth", "2", "--no-heal"]);
    let got = reached(&t);
    // Each memory once, at its shortest depth: the cycle a-b-c-a ends; e is 3 links away.
    let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), 5, "{got:?}");
    for (id, depth) in [("a", 0), ("b", 1), ("c", 1), ("f", 1), ("d", 2)] {
        assert!(
            got.contains(&(id.to_string(), depth)),
            "{id} at {depth}: {got:?}"
        );
    }
    let memory = |id: &str| {
        t["memories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .unwrap()
            .clone()
    };
    // c is reached from a by its own link c -> a: inbound, with that link's type and confidence.
    assert_eq!(memory("c")["direction"], "in");
    assert_eq!(memory("c")["link_type"], "related_to");
    assert_eq!(memory("c")["path"], serde_json::json!(["a", "c"]));
    assert_eq!(memory("d")["path"], serde_json::json!(["a", "c", "d"]));
    assert_eq!(memory("f")["archived"], true);
    assert_eq!(memory("b")["archived"], false);
    assert_eq!(t["archived_reached"], 1);
    // --no-heal: the two dead links met are reported and left.
    assert_eq!(t["dead_links"].as_array().unwrap().len(), 2, "{t}");
    assert_eq!(t["dead_links_removed"], 0);
    assert_eq!(dead_links(&db).len(), 3);

    let deeper = reached(&traverse(&db, &["a", "--depth", "3", "--no-heal"]));
    assert!(deeper.contains(&("e".to_string(), 3)), "{deeper:?}");
    let one = reached(&traverse(&db, &["a", "--depth", "1", "--no-heal"]));
    assert_eq!(one.iter().map(|r| r.1).max(), Some(1));

    // --types: only causes links (a -> b), then b's causes links (a dead one).
    let causes = reached(&traverse(
        &db,
        &["a", "--depth", "3", "--types", "causes", "--no-heal"],
    ));
    assert_eq!(causes, vec![("a".into(), 0), ("b".into(), 1)]);
    // The shares_entity family and a confidence floor.
    let family = reached(&traverse(
        &db,
        &["d", "--depth", "1", "--types", "shares_entity", "--no-heal"],
    ));
    assert_eq!(family, vec![("d".into(), 0), ("e".into(), 1)]);
    let strong = reached(&traverse(
        &db,
        &["a", "--depth", "1", "--min-confidence", "0.92", "--no-heal"],
    ));
    assert_eq!(strong, vec![("a".into(), 0), ("f".into(), 1)]);
    // --limit stops the walk and says so.
    let limited = traverse(&db, &["a", "--depth", "3", "--limit", "2", "--no-heal"]);
    assert_eq!(reached(&limited).len(), 2);
    assert_eq!(limited["truncated"], true);

    let out = db.run(&["traverse", "nobody"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("memory nobody not found"),
        "{}",
        stderr(&out)
    );
    // Leave the store whole for the final check.
    traverse(&db, &["a", "--depth", "3"]);
    traverse(&db, &["x"]);
}

#[test]
fn heal_on_read_removes_exactly_the_dead_links_it_meets_and_logs_them_first() {
    let db = TestDb::new();
    graph(&db);
    let links_before = db.count("links");
    let t = traverse(&db, &["a", "--depth", "3"]);
    assert_eq!(t["dead_links_removed"], 2, "{t}");
    // The unreachable dead link stays; the two met are gone, nothing else is.
    assert_eq!(dead_links(&db), vec!["x>gone3".to_string()]);
    assert_eq!(db.count("links"), links_before - 2);
    let healed = db.rows(
        "SELECT source_ids[1] AS source, target_id, classification, before_state FROM audit_log \
         WHERE operation = 'HEAL' ORDER BY target_id",
    );
    assert_eq!(healed.len(), 2, "{healed:?}");
    assert_eq!(healed[0]["source"], "gone2");
    assert_eq!(healed[0]["classification"], "causes");
    assert_eq!(healed[1]["target_id"], "gone1");
    assert!(
        healed[1]["before_state"]
            .as_str()
            .unwrap()
            .contains("\"related_to\"")
    );
    // A second walk finds nothing dead and writes nothing.
    let again = traverse(&db, &["a", "--depth", "3"]);
    assert_eq!(again["dead_links"].as_array().unwrap().len(), 0);
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'HEAL'"),
        "2"
    );
    // The last dead link is met from its live end; then check passes (TestDb checks on drop).
    assert_eq!(traverse(&db, &["x"])["dead_links_removed"], 1);
    assert!(dead_links(&db).is_empty());
}

#[test]
fn link_statistics_count_inbound_and_outbound_by_type_per_memory_and_user() {
    let db = TestDb::new();
    graph(&db);
    let out = db.run(&["--json", "stats", "--memory", "a"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let a: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    // a: outbound causes, supersedes, related_to (to gone1); inbound related_to from c.
    assert_eq!(a["total_outbound"], 3, "{a}");
    assert_eq!(a["total_inbound"], 1);
    assert_eq!(a["by_type"]["related_to"], 2);
    assert_eq!(a["by_direction"]["outbound"]["causes"], 1);
    assert_eq!(a["by_direction"]["inbound"]["related_to"], 1);

    let out = db.run(&["--json", "stats", "--links", "--user", "ana"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let links: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let all = links["by_user"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["link_type"] == "(all)")
        .unwrap()
        .clone();
    assert_eq!(all["links"], 9, "{links}");
    let shares = links["by_type"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["link_type"] == "shares_entity");
    assert_eq!(shares.unwrap()["links"], 1);
    assert_eq!(links["most_linked"][0]["memory_id"], "a");
    let out = db.run(&["stats", "--memory", "nobody"]);
    assert_eq!(out.status.code(), Some(2));
    db.skip_final_check(); // the dead links stay: this test only reads
}

#[test]
fn walks_from_several_starts_share_a_cached_graph_and_equal_single_walks() {
    let db = TestDb::new();
    graph(&db);
    // A link from Ana's graph to another user's memory: not followed, and not dead.
    std::fs::write(
        db.path("bo.jsonl"),
        r#"{"id":"bo1","user_id":"bo","text":"Bo runs the market stall next to Ana"}"#,
    )
    .unwrap();
    std::fs::write(
        db.path("bo-link.jsonl"),
        r#"{"source_id":"e","target_id":"bo1","user_id":"ana","link_type":"related_to","confidence":0.4}"#,
    )
    .unwrap();
    for args in [
        vec!["import", db.path("bo.jsonl").leak() as &str],
        vec![
            "import",
            "--table",
            "links",
            db.path("bo-link.jsonl").leak(),
        ],
    ] {
        assert_eq!(db.run(&args).status.code(), Some(0));
    }
    let strip = |mut t: serde_json::Value| {
        t.as_object_mut().unwrap().remove("duration_ms");
        t
    };
    let starts = ["a", "d", "x", "bo1", "c"];
    for options in [
        vec!["--depth", "1"],
        vec!["--depth", "3"],
        vec!["--depth", "6"],
        vec!["--depth", "3", "--types", "causes,shares_entity"],
        vec!["--depth", "4", "--min-confidence", "0.65"],
    ] {
        let mut args = starts.to_vec();
        args.extend_from_slice(&options);
        args.push("--no-heal");
        let together = traverse(&db, &args);
        let together = together.as_array().expect("one report per start");
        assert_eq!(together.len(), starts.len());
        for (start, walk) in starts.iter().zip(together) {
            let mut alone = vec![*start];
            alone.extend_from_slice(&options);
            alone.push("--no-heal");
            assert_eq!(
                strip(walk.clone()),
                strip(traverse(&db, &alone)),
                "from {start} with {options:?}"
            );
        }
    }
    // A walk stays in its user's graph: Ana's link to Bo's memory is counted, not followed.
    let deep = traverse(&db, &["a", "x", "--depth", "6", "--no-heal"]);
    assert!(
        reached(&deep[0]).iter().all(|(id, _)| id != "bo1"),
        "{deep}"
    );
    assert_eq!(deep[0]["links_to_other_users"], 1);
    assert_eq!(reached(&traverse(&db, &["bo1", "--depth", "3"])).len(), 1);

    // Healing in a multi-start walk: each dead link removed once, and later starts in the
    // same process no longer meet it.
    let healed = traverse(&db, &["a", "b", "x", "--depth", "2"]);
    let removed: u64 = healed
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["dead_links_removed"].as_u64().unwrap())
        .sum();
    assert_eq!(removed, 3, "{healed}");
    assert_eq!(
        healed[1]["dead_links"],
        serde_json::json!([]),
        "b's dead link went with a's walk"
    );
    assert!(dead_links(&db).is_empty());
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM audit_log WHERE operation = 'HEAL'"),
        "3"
    );
}
