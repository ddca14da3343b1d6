//! `memlife entity-gc` on real Lance tables: near-duplicates merged with every reference
//! rewritten, entities no live memory names archived then deleted after the grace period,
//! never an entity a live memory still names; dry runs and reruns write nothing.

use crate::common::{TestDb, stderr, stdout};

const MEMORIES: &str = r#"{"id":"m1","user_id":"ana","text":"Ana migrated the billing service to Postgres last week.","created_at":"2025-02-01T10:00:00Z"}
{"id":"m2","user_id":"ana","text":"Ana tuned the autovacuum settings of PostgreSQL on the new server.","created_at":"2025-02-02T10:00:00Z"}
{"id":"m3","user_id":"ana","text":"Ana backed up the Postgres cluster before the upgrade.","created_at":"2025-02-03T10:00:00Z"}
{"id":"m4","user_id":"ana","text":"Ana flew to Lisbon for a conference in May.","created_at":"2025-02-04T10:00:00Z"}
{"id":"m5","user_id":"ana","text":"Ana's dentist Dr. Okafor moved the appointment to Friday.","created_at":"2025-02-05T10:00:00Z"}
{"id":"m6","user_id":"ana","text":"Ana told Okafor about the tooth ache.","created_at":"2025-02-06T10:00:00Z"}
{"id":"b1","user_id":"ben","text":"Ben runs PostgreSQL at work and uses Postgres at home.","created_at":"2025-02-01T10:00:00Z"}
"#;

fn gc(db: &TestDb, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "entity-gc"];
    all.extend_from_slice(args);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn tables(db: &TestDb) -> String {
    [
        "SELECT id, name, entity_type, aliases, archived_at FROM entities ORDER BY id",
        "SELECT memory_id, entity_id FROM memory_entities ORDER BY memory_id, entity_id",
        "SELECT source_id, target_id, link_type FROM links ORDER BY source_id, target_id, link_type",
    ]
    .iter()
    .map(|sql| format!("{:?}", db.rows(sql)))
    .collect::<Vec<_>>()
    .join("\n")
}

fn entity_id(db: &TestDb, user: &str, name: &str) -> String {
    db.scalar(&format!(
        "SELECT id FROM entities WHERE user_id = '{user}' AND name = '{name}'"
    ))
    .trim_matches('"')
    .to_string()
}

#[test]
fn near_duplicates_merge_and_every_reference_is_rewritten() {
    let db = TestDb::new();
    std::fs::write(db.path("m.jsonl"), MEMORIES).unwrap();
    assert_eq!(
        db.run(&["import", &db.path("m.jsonl")]).status.code(),
        Some(0)
    );
    let out = db.run(&["entities", "--embedder", "hash"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let postgres = entity_id(&db, "ana", "Postgres");
    let postgresql = entity_id(&db, "ana", "PostgreSQL");

    let before = tables(&db);
    let dry = gc(&db, &["--dry-run"]);
    assert_eq!(tables(&db), before, "a dry run writes nothing");
    assert_eq!(dry["counts"]["merged"], 2, "{dry}");
    let notes = dry["notes"].to_string();
    assert!(
        notes.contains("merge: ana 'PostgreSQL' (tool) into 'Postgres' (tool), rule abbreviation"),
        "{notes}"
    );

    let report = gc(&db, &[]);
    assert_eq!(report["counts"]["merged"], 2, "{report}");
    // The survivor keeps the other name as an alias; the merged entity is gone.
    assert_eq!(
        db.scalar(&format!(
            "SELECT aliases FROM entities WHERE id = '{postgres}'"
        )),
        r#"["PostgreSQL"]"#
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) AS n FROM entities WHERE id = '{postgresql}'"
        )),
        "0"
    );
    // Every reference moved: m2 names the survivor, nothing names the merged id.
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) AS n FROM memory_entities WHERE entity_id = '{postgresql}'"
        )),
        "0"
    );
    let named: Vec<String> = db
        .rows(&format!("SELECT memory_id FROM memory_entities WHERE entity_id = '{postgres}' ORDER BY memory_id"))
        .iter()
        .map(|r| r["memory_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(named, ["m1", "m2", "m3"]);
    // The chain is rebuilt under the survivor's name; no link of the merged name is left.
    assert_eq!(db.scalar("SELECT COUNT(*) AS n FROM links WHERE link_type = 'shares_entity:PostgreSQL' AND user_id = 'ana'"), "0");
    let chain: Vec<String> = db
        .rows("SELECT source_id, target_id FROM links WHERE link_type = 'shares_entity:Postgres' AND user_id = 'ana' ORDER BY source_id, target_id")
        .iter()
        .map(|r| format!("{}>{}", r["source_id"].as_str().unwrap(), r["target_id"].as_str().unwrap()))
        .collect();
    assert_eq!(chain, ["m2>m1", "m3>m1", "m3>m2"]);
    // Ben's two names merge among Ben's own entities, not into Ana's.
    assert_eq!(db.scalar("SELECT COUNT(*) AS n FROM entities WHERE user_id = 'ben' AND lower(name) LIKE 'postgres%'"), "1");
    let audit = db.rows("SELECT classification, before_state FROM audit_log WHERE operation = 'ENTITY_MERGE' ORDER BY user_id");
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[0]["classification"], "abbreviation");
    assert!(
        audit[0]["before_state"]
            .as_str()
            .unwrap()
            .contains(r#""memory_ids":["m2"]"#),
        "{audit:?}"
    );

    // A rerun finds nothing more and writes nothing.
    let after = tables(&db);
    let again = gc(&db, &[]);
    assert_eq!(again["counts"]["merged"], 0);
    assert_eq!(tables(&db), after);
    // The entities job, rerun over everything, matches the merged name to the survivor.
    let out = db.run(&["entities", "--embedder", "hash", "--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(db.scalar("SELECT COUNT(*) AS n FROM entities WHERE user_id = 'ana' AND lower(name) LIKE 'postgres%'"), "1");
}

#[test]
fn entities_of_no_live_memory_are_archived_then_deleted_after_the_grace_period() {
    let db = TestDb::new();
    std::fs::write(db.path("m.jsonl"), MEMORIES).unwrap();
    assert_eq!(
        db.run(&["import", &db.path("m.jsonl")]).status.code(),
        Some(0)
    );
    assert_eq!(
        db.run(&["entities", "--embedder", "hash"]).status.code(),
        Some(0)
    );
    let lisbon = entity_id(&db, "ana", "Lisbon");
    // m4 (the only memory naming Lisbon) is archived; m5 and m6 name Okafor, m6 stays live.
    let archived = MEMORIES
        .lines()
        .filter(|l| l.contains(r#""id":"m4""#) || l.contains(r#""id":"m5""#))
        .map(|l| {
            l.replace(
                r#""user_id""#,
                r#""state":"archived","archived_at":"2025-03-01T00:00:00Z","user_id""#,
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(db.path("archived.jsonl"), archived + "\n").unwrap();
    assert_eq!(
        db.run(&["import", &db.path("archived.jsonl")])
            .status
            .code(),
        Some(0)
    );

    let first = gc(&db, &["--now", "2025-04-01T00:00:00Z", "--no-merge"]);
    assert_eq!(first["counts"]["archived"], 1, "{first}");
    assert_eq!(
        db.scalar(&format!(
            "SELECT archived_at FROM entities WHERE id = '{lisbon}'"
        )),
        r#""2025-04-01T00:00:00Z""#
    );
    // Okafor is still named by live m6: never archived or removed.
    assert_eq!(
        db.scalar("SELECT archived_at IS NULL AS live FROM entities WHERE name = 'Dr. Okafor'"),
        "true"
    );

    // An archived entity a live memory names again comes back.
    let live_m4 = MEMORIES
        .lines()
        .find(|l| l.contains(r#""id":"m4""#))
        .unwrap()
        .to_string();
    std::fs::write(db.path("live.jsonl"), live_m4 + "\n").unwrap();
    assert_eq!(
        db.run(&["import", &db.path("live.jsonl")]).status.code(),
        Some(0)
    );
    let revived = gc(&db, &["--now", "2025-04-10T00:00:00Z", "--no-merge"]);
    assert_eq!(revived["counts"]["revived"], 1, "{revived}");
    assert_eq!(
        db.scalar(&format!(
            "SELECT archived_at IS NULL AS live FROM entities WHERE id = '{lisbon}'"
        )),
        "true"
    );
    assert_eq!(
        db.run(&["import", &db.path("archived.jsonl")])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        gc(&db, &["--now", "2025-04-11T00:00:00Z", "--no-merge"])["counts"]["archived"],
        1
    );

    // Within the grace period nothing is deleted; after it, Lisbon goes (logged first) with
    // its memory_entities row; the archived memory itself stays.
    let early = gc(&db, &["--now", "2025-05-05T00:00:00Z", "--no-merge"]);
    assert_eq!(early["counts"]["deleted"], 0);
    // A row naming a memory that no longer exists (deleted by the agent outside memlife).
    let okafor = entity_id(&db, "ana", "Dr. Okafor");
    std::fs::write(
        db.path("orphan.jsonl"),
        format!(r#"{{"memory_id":"gone","entity_id":"{okafor}","user_id":"ana"}}"#) + "\n",
    )
    .unwrap();
    let out = db.run(&[
        "import",
        "--table",
        "memory_entities",
        &db.path("orphan.jsonl"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let late = gc(&db, &["--now", "2025-05-12T00:00:00Z", "--no-merge"]);
    assert_eq!(late["counts"]["deleted"], 1, "{late}");
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) AS n FROM entities WHERE id = '{lisbon}'"
        )),
        "0"
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) AS n FROM memory_entities WHERE entity_id = '{lisbon}'"
        )),
        "0"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE id = 'm4'"),
        "1"
    );
    let deleted = db.scalar("SELECT before_state FROM audit_log WHERE operation = 'ENTITY_DELETE'");
    assert!(
        deleted.contains("Lisbon") && deleted.contains("m4"),
        "{deleted}"
    );
    // Okafor, named by live m6 all along, was never archived or removed.
    assert_eq!(
        db.scalar("SELECT archived_at IS NULL AS live FROM entities WHERE name = 'Dr. Okafor'"),
        "true"
    );
    // The row of the memory that no longer exists is dropped; Okafor's live rows stay.
    assert_eq!(late["counts"]["orphan_memory_entities"], 1, "{late}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memory_entities WHERE memory_id = 'gone'"),
        "0"
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) AS n FROM memory_entities WHERE entity_id = '{okafor}'"
        )),
        "2"
    );
}
