//! The saved queries of `sql/`, run as SQL against fixture tables and compared with expected
//! output kept in `tests/snapshots/`. Set UPDATE_SNAPSHOTS=1 to rewrite the expectations after
//! an intended change, then review the diff.

use std::path::PathBuf;

use crate::common::{TestDb, fixture};

/// (saved query, parameters)
const CASES: &[(&str, &[(&str, &str)])] = &[
    ("memory_counts", &[]),
    ("memories_by_state_tier", &[]),
    ("link_statistics", &[]),
    ("link_statistics_by_user", &[("user", "")]),
    ("memory_link_statistics", &[("memory_id", "m2")]),
    ("most_linked_memories", &[("user", "")]),
    ("current_facts", &[]),
    ("point_in_time", &[("at", "2025-04-01T00:00:00Z")]),
    ("supersession_chain", &[("chain", "chain-vs")]),
    ("run_audit", &[("run_id", "r3")]),
    ("last_runs", &[]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_queries_match_their_snapshots() {
    let db = TestDb::new();
    for (table, file) in [
        ("memories", "memories.jsonl"),
        ("links", "links.jsonl"),
        ("runs", "runs.jsonl"),
        ("audit_log", "audit_log.jsonl"),
    ] {
        let out = db.run(&["import", "--table", table, fixture(file).to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0));
    }
    let store = memlife::store::Store::open(&db.uri).await.unwrap();
    let context = memlife::store::sql::session(&store).await.unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some();
    let mut mismatches = Vec::new();
    for (name, params) in CASES {
        let sql = std::fs::read_to_string(root.join("sql").join(format!("{name}.sql"))).unwrap();
        let params: Vec<(String, String)> = params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (schema, batches) = memlife::store::sql::query(&context, &sql, &params)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let mut text = String::from_utf8(
            memlife::commands::sql::encode(schema, &batches, memlife::formats::Format::Csv)
                .unwrap(),
        )
        .unwrap();
        // The import jobs' own run rows carry wall-clock times and random ids.
        if *name == "last_runs" {
            text = text
                .lines()
                .filter(|l| !l.starts_with("import,"))
                .map(|l| format!("{l}\n"))
                .collect();
        }
        let snapshot = root.join("tests/snapshots").join(format!("{name}.csv"));
        if update {
            std::fs::write(&snapshot, &text).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&snapshot).unwrap_or_default();
        if expected != text {
            mismatches.push(format!("{name}:\n--- expected\n{expected}--- got\n{text}"));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
