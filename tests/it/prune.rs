//! `memlife prune` on real Lance tables: the keep rules hold end to end, provenance is
//! archived, everything else decayed is exported to Parquet before it is deleted (with its
//! links, entity rows and entities), the export brings it back through `memlife import` (after
//! entity-gc deleted what only it named), `undo` reverts
//! a run, `--dry-run` changes nothing, a folder that cannot be written stops the run before
//! anything is lost, and the storage trigger holds the job back until the table is large.

use crate::common::{TestDb, stderr, stdout};

/// Old, decayed, flat memories of user `u` (what prune may remove), and what protects others.
const MEMORIES: &str = r#"{"id":"old1","user_id":"u","text":"Had a sandwich with Marco at the station.","kind":"episode","salience":0.05,"emotional_salience":0.1,"created_at":"2026-01-01T10:00:00Z"}
{"id":"old2","user_id":"u","text":"Walked past the bakery with Marco.","kind":"episode","salience":0.05,"emotional_salience":0.1,"created_at":"2026-01-02T10:00:00Z"}
{"id":"sad","user_id":"u","text":"The day the old dog had to be put down.","kind":"episode","salience":0.05,"emotional_salience":0.9,"created_at":"2026-01-03T10:00:00Z"}
{"id":"forever","user_id":"u","text":"Blood type is O negative.","salience":0.05,"emotional_salience":0.1,"ttl_policy":"keep_forever","created_at":"2026-01-03T10:00:00Z"}
{"id":"young","user_id":"u","text":"Bought new running shoes.","kind":"episode","salience":0.05,"emotional_salience":0.1,"created_at":"2026-05-20T10:00:00Z"}
{"id":"used","user_id":"u","text":"Asked about the train times to Ghent.","kind":"episode","salience":0.05,"emotional_salience":0.1,"created_at":"2026-01-01T10:00:00Z","last_accessed_at":"2026-05-25T10:00:00Z"}
{"id":"ep1","user_id":"u","text":"Talked about the trip to Lisbon.","kind":"episode","salience":0.05,"emotional_salience":0.1,"created_at":"2026-01-04T10:00:00Z"}
{"id":"nar","user_id":"u","text":"A session about travel plans for the spring.","kind":"narrative","salience":0.8,"consolidates_memory_ids":["ep1"],"created_at":"2026-01-05T10:00:00Z"}
{"id":"ev1","user_id":"u","text":"Skipped breakfast before the exam.","kind":"episode","salience":0.05,"emotional_salience":0.1,"created_at":"2026-01-04T10:00:00Z"}
{"id":"pat","user_id":"u","text":"Skips meals under stress.","kind":"learning_pattern","salience":0.8,"consolidates_memory_ids":["ev1"],"created_at":"2026-01-06T10:00:00Z"}
"#;

const LINKS: &str = r#"{"source_id":"old1","target_id":"old2","user_id":"u","link_type":"related_to"}
{"source_id":"nar","target_id":"old1","user_id":"u","link_type":"related_to"}
{"source_id":"nar","target_id":"sad","user_id":"u","link_type":"related_to"}
"#;

const NOW: &str = "2026-06-01T00:00:00Z";

fn prepared() -> TestDb {
    let db = TestDb::new();
    std::fs::write(db.path("m.jsonl"), MEMORIES).unwrap();
    std::fs::write(db.path("l.jsonl"), LINKS).unwrap();
    for step in [
        vec!["import", &db.path("m.jsonl")],
        vec!["import", "--table", "links", &db.path("l.jsonl")],
        vec!["embed", "--embedder", "hash"],
        vec!["entities", "--embedder", "hash"],
    ] {
        let out = db.run(&step);
        assert_eq!(out.status.code(), Some(0), "{step:?}: {}", stderr(&out));
    }
    db
}

fn prune(db: &TestDb, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "prune", "--now", NOW];
    all.extend_from_slice(args);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn states(db: &TestDb) -> Vec<(String, String)> {
    db.rows("SELECT id, state FROM memories ORDER BY id")
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().into(),
                r["state"].as_str().unwrap().into(),
            )
        })
        .collect()
}

fn ids(db: &TestDb) -> Vec<String> {
    states(db).into_iter().map(|(id, _)| id).collect()
}

/// The Parquet files of the one run that exported, by table.
fn exported(dir: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
}

#[test]
fn keep_rules_hold_provenance_is_archived_and_the_rest_is_exported_then_deleted() {
    let db = prepared();
    let before = ids(&db);
    let old1_links = db.count("links WHERE source_id = 'old1' OR target_id = 'old1'");
    assert_eq!(
        old1_links, 3,
        "two imported links and the shares_entity one"
    );
    let entity_rows =
        db.scalar("SELECT COUNT(*) AS n FROM memory_entities WHERE memory_id IN ('old1', 'old2')");
    assert_ne!(
        entity_rows, "0",
        "the fixture names entities in what prune deletes"
    );

    // A dry run says exactly what would happen and changes nothing.
    let dry = prune(&db, &["--dry-run"]);
    let notes: Vec<&str> = dry["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(
        notes,
        [
            "would archive ep1 (provenance_archived)",
            "would delete old1 (deleted)",
            "would delete old2 (deleted)"
        ]
    );
    assert_eq!(ids(&db), before);
    assert_eq!(db.count("audit_log WHERE operation = 'PRUNE'"), 0);

    let archive = db.path("archive");
    let report = prune(&db, &["--archive-dir", &archive]);
    let counts = &report["counts"];
    assert_eq!(
        (counts["archived"].as_u64(), counts["deleted"].as_u64()),
        (Some(1), Some(2)),
        "{report}"
    );
    for (rule, n) in [
        ("emotional", 1),
        ("keep_forever", 1),
        ("too_young", 1),
        ("recently_used", 1),
        ("evidence_or_core", 1),
    ] {
        assert_eq!(counts[format!("rule_{rule}")], n, "{rule}: {report}");
    }
    let after = states(&db);
    assert!(!ids(&db).contains(&"old1".to_string()) && !ids(&db).contains(&"old2".to_string()));
    assert!(
        after.contains(&("ep1".into(), "archived".into())),
        "a narrative's episode is archived"
    );
    for kept in ["sad", "forever", "young", "used", "ev1", "nar", "pat"] {
        assert!(
            after.iter().any(|(id, s)| id == kept && s != "archived"),
            "{kept} stays: {after:?}"
        );
    }
    // Their links and entity rows went with them; each decision was logged first.
    assert_eq!(
        db.count("links WHERE source_id IN ('old1', 'old2') OR target_id IN ('old1', 'old2')"),
        0
    );
    assert_eq!(
        db.count("memory_entities WHERE memory_id IN ('old1', 'old2')"),
        0
    );
    assert_eq!(
        db.count("audit_log WHERE operation = 'PRUNE' AND classification = 'DELETE'"),
        2
    );
    let logged = db.rows(
        "SELECT after_state FROM audit_log WHERE operation = 'PRUNE' AND classification = 'DELETE'",
    );
    let files = exported(&archive);
    assert_eq!(
        files.len(),
        4,
        "memories, links, entity rows and entities: {files:?}"
    );
    let memories_file = files
        .iter()
        .find(|f| f.ends_with(".memories.parquet"))
        .unwrap();
    assert!(
        logged[0]["after_state"]
            .as_str()
            .unwrap()
            .contains(memories_file.as_str())
    );

    // entity-gc archives the entities only the deleted memories named, and deletes them
    // months later.
    let entities_before = db.count("entities");
    for now in ["2026-06-02T00:00:00Z", "2026-09-01T00:00:00Z"] {
        let gc = db.run(&["entity-gc", "--now", now, "--no-merge"]);
        assert_eq!(gc.status.code(), Some(0), "{}", stderr(&gc));
    }
    let gone = entities_before - db.count("entities");
    assert!(gone > 0, "the fixture has entities only old1 and old2 name");

    // The export brings everything back, embeddings and all: the entities first, those still
    // there left as they are.
    for table in ["entities", "memories", "links", "memory_entities"] {
        let file = files
            .iter()
            .find(|f| f.ends_with(&format!(".{table}.parquet")))
            .unwrap();
        let path = format!("{archive}/{file}");
        let out = db.run(&[
            "--json",
            "import",
            "--keep-existing",
            "--table",
            table,
            &path,
        ]);
        assert_eq!(out.status.code(), Some(0), "{table}: {}", stderr(&out));
        let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        if table == "entities" {
            let back = report["counts"]["inserted"].as_u64().unwrap();
            assert!(back >= 1 && back <= gone as u64, "{report}");
        }
    }
    assert_eq!(
        db.count(
            "memory_entities WHERE memory_id IN ('old1', 'old2') \
             AND entity_id NOT IN (SELECT id FROM entities)"
        ),
        0,
        "every restored entity row names an entity"
    );
    let check = db.run(&["check"]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    assert_eq!(ids(&db), before);
    assert_eq!(db.count("memories WHERE embedding IS NULL"), 0);
    assert_eq!(
        db.count("links WHERE source_id = 'old1' OR target_id = 'old1'"),
        old1_links
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memory_entities WHERE memory_id IN ('old1', 'old2')"),
        entity_rows
    );
    // --keep-existing leaves a row the table holds as it is: old1, edited since its restore,
    // keeps its edit when the export is imported again.
    std::fs::write(
        db.path("edit.jsonl"),
        r#"{"id":"old1","user_id":"u","text":"Had lunch with Marco at the station.","kind":"episode","created_at":"2026-01-01T10:00:00Z"}"#,
    )
    .unwrap();
    let edit = db.run(&["import", &db.path("edit.jsonl")]);
    assert_eq!(edit.status.code(), Some(0), "{}", stderr(&edit));
    let memories_file = format!("{archive}/{memories_file}");
    let again = db.run(&["--json", "import", "--keep-existing", &memories_file]);
    let again: serde_json::Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert_eq!(
        (
            again["counts"]["inserted"].as_u64(),
            again["counts"]["kept_existing"].as_u64()
        ),
        (Some(0), Some(2)),
        "{again}"
    );
    assert_eq!(
        db.rows("SELECT text FROM memories WHERE id = 'old1'")[0]["text"],
        "Had lunch with Marco at the station."
    );
}

#[test]
fn an_undo_brings_a_prune_run_back_and_a_rerun_deletes_nothing_new() {
    let db = prepared();
    let before = states(&db);
    let old1_links = db.count("links WHERE source_id = 'old1' OR target_id = 'old1'");
    let archive = db.path("archive");
    prune(&db, &["--archive-dir", &archive]);
    let out = db.run(&["undo", "--last", "prune"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(states(&db), before);
    assert_eq!(
        db.count("links WHERE source_id = 'old1' OR target_id = 'old1'"),
        old1_links
    );
    // Still decayed: the next run prunes them again, and the one after finds nothing to do.
    let again = prune(&db, &["--archive-dir", &archive]);
    assert_eq!(again["counts"]["deleted"], 2, "{again}");
    let last = prune(&db, &["--archive-dir", &archive]);
    assert_eq!(
        (
            last["counts"]["deleted"].as_u64(),
            last["counts"]["archived"].as_u64()
        ),
        (Some(0), Some(0)),
        "{last}"
    );
}

#[test]
fn nothing_is_deleted_when_the_export_cannot_be_written() {
    let db = prepared();
    let before = ids(&db);
    // A file where the export folder should be.
    let blocked = db.path("blocked");
    std::fs::write(&blocked, "not a folder").unwrap();
    let out = db.run(&["prune", "--now", NOW, "--archive-dir", &blocked]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("blocked"),
        "the error names the folder: {}",
        stderr(&out)
    );
    assert_eq!(ids(&db), before);
    assert_eq!(db.count("audit_log WHERE operation = 'PRUNE'"), 0);
    // The next run with a folder it can write finishes the work (and takes the failed run over).
    let report = prune(&db, &["--archive-dir", &db.path("archive")]);
    assert_eq!(report["counts"]["deleted"], 2, "{report}");
}

#[test]
fn the_storage_trigger_prunes_only_past_its_bound() {
    let db = prepared();
    let archive = db.path("archive");
    let held = prune(&db, &["--archive-dir", &archive, "--when-rows", "100"]);
    assert!(held["counts"].get("deleted").is_none(), "{held}");
    assert!(
        held["notes"][0]
            .as_str()
            .unwrap()
            .contains("within the trigger"),
        "{held}"
    );
    assert_eq!(db.count("memories"), 10);
    let config = db.path("memlife.toml");
    std::fs::write(
        &config,
        format!("[prune]\narchive_dir = \"{archive}\"\ntrigger_rows = 5\n"),
    )
    .unwrap();
    let out = db.run(&["--json", "--config", &config, "prune", "--now", NOW]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["counts"]["deleted"], 2, "{report}");
    assert_eq!(exported(&archive).len(), 4);
}
