//! `memlife index`: the recall it reports measures what a user's search would get: each
//! query searches its own user's memories, and the query is not its own neighbour.

use serde_json::Value;

use crate::common::{TestDb, stderr, stdout};

/// A deterministic unit vector (a small LCG: no randomness crate for one test).
fn vector(seed: u64, dim: usize) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut v: Vec<f32> = (0..dim)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Two users whose memories have the very same vectors (bob's are copies of alice's): a
/// search that strayed into the other user's memories would find exact copies first, and
/// with exhaustive settings (every partition probed, every candidate re-ranked) a search that
/// stays within the user finds exactly the exact neighbours.
#[test]
fn recall_is_measured_within_each_user_without_the_query_itself() {
    let dim = 16;
    let db = TestDb::with_dim(dim);
    let mut lines = String::new();
    for user in ["alice", "bob"] {
        for i in 0..200u64 {
            let row = serde_json::json!({
                "id": format!("{user}-{i}"),
                "user_id": user,
                "text": format!("memory {i} of {user}"),
                "embedding": vector(i, dim),
            });
            lines.push_str(&format!("{row}\n"));
        }
    }
    let file = db.path("twins.jsonl");
    std::fs::write(&file, lines).unwrap();
    let out = db.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = db.run(&[
        "--json",
        "index",
        "--partitions",
        "4",
        "--nprobes",
        "4",
        "--refine-factor",
        "100",
        "--k",
        "5",
        "--sample",
        "40",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["vectors"], 400);
    assert_eq!(report["sample_queries"], 40);
    assert_eq!(
        report["recall_at_k"].as_f64(),
        Some(1.0),
        "an exhaustive search within the user finds every exact neighbour: {report}"
    );
}

/// A job's finish looks only at the tables it wrote (`refresh_scalar_indexes` with `only`);
/// `memlife index --scalar` looks at every table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_limited_to_some_tables_indexes_those_only() {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    let lines: String = (0..40)
        .map(|i| {
            format!(
                "{{\"id\": \"m{i}\", \"user_id\": \"u{}\", \"text\": \"note {i}\"}}\n",
                i % 3
            )
        })
        .collect();
    std::fs::write(&file, lines).unwrap();
    let out = db.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let store = memlife::store::Store::open(&db.uri).await.unwrap();
    let only: std::collections::BTreeSet<String> = ["memories".to_string()].into();
    let changes = store.refresh_scalar_indexes(1, Some(&only)).await.unwrap();
    assert!(changes.iter().all(|c| c.table == "memories"), "{changes:?}");
    assert!(db.indexed_columns("memories").contains(&"id".to_string()));
    assert!(
        db.indexed_columns("runs").is_empty(),
        "runs was not looked at"
    );
    store.refresh_scalar_indexes(1, None).await.unwrap();
    assert_eq!(db.indexed_columns("runs"), ["job", "run_id", "status"]);
}
