//! `--shard I/N`: users partitioned by a stable hash, every user processed exactly once over
//! N shards, by every job that works per user (the runs record their shard); bad specs, a shard
//! with `--user`, and optimize (whole tables) refused with their reasons; nightly forwards it.

use std::collections::BTreeMap;

use memlife::logic::shard::Shard;
use serde_json::Value;

use crate::common::{TestDb, stderr, stdout};

const USERS: &[&str] = &[
    "ana", "ben", "chloe", "dev", "emil", "fatima", "gus", "hana", "ivo",
];

fn store() -> TestDb {
    let db = TestDb::new();
    let mut lines = String::new();
    for (u, user) in USERS.iter().enumerate() {
        for m in 0..3 {
            lines.push_str(&format!(
                "{{\"id\":\"{user}-{m}\",\"user_id\":\"{user}\",\"text\":\"{user} note {m}: likes {} tea\",\"created_at\":\"2025-01-0{}T09:00:00Z\"}}\n",
                ["green", "black", "mint"][m],
                1 + (u + m) % 8
            ));
        }
    }
    let file = db.path("m.jsonl");
    std::fs::write(&file, lines).unwrap();
    let out = db.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    db
}

fn json(out: &std::process::Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    serde_json::from_str(&stdout(out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

/// Which users each memory's `column` was written for, by the shard that wrote it.
fn users_with(db: &TestDb, predicate: &str) -> Vec<String> {
    let mut users: Vec<String> = db
        .rows(&format!(
            "SELECT DISTINCT user_id FROM memories WHERE {predicate} ORDER BY user_id"
        ))
        .iter()
        .map(|r| r["user_id"].as_str().unwrap().to_string())
        .collect();
    users.sort();
    users
}

#[test]
fn every_user_is_processed_exactly_once_over_the_shards() {
    let db = store();
    let count = 3u32;
    let mut embedded_by: BTreeMap<String, u32> = BTreeMap::new();
    for index in 0..count {
        let before = users_with(&db, "embedding IS NOT NULL");
        let spec = format!("{index}/{count}");
        let report = json(&db.run(&["--json", "embed", "--embedder", "hash", "--shard", &spec]));
        let after = users_with(&db, "embedding IS NOT NULL");
        // This shard's run embedded exactly its own users, all of their memories.
        let new: Vec<&String> = after.iter().filter(|u| !before.contains(u)).collect();
        let expected: Vec<&str> = USERS
            .iter()
            .copied()
            .filter(|u| Shard::index_of(u, count) == index)
            .collect();
        let mut expected_sorted = expected.clone();
        expected_sorted.sort();
        assert_eq!(new, expected_sorted, "shard {spec}");
        assert_eq!(
            report["counts"]["embedded"].as_u64(),
            Some(3 * expected.len() as u64),
            "{report}"
        );
        for user in new {
            *embedded_by.entry(user.clone()).or_default() += 1;
        }
        // The run records its shard.
        let run_id = report["run_id"].as_str().unwrap();
        let params: Value = serde_json::from_str(
            db.rows(&format!(
                "SELECT params FROM runs WHERE run_id = '{run_id}'"
            ))[0]["params"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(params["shard"], spec.as_str());
    }
    assert_eq!(embedded_by.len(), USERS.len(), "every user embedded");
    assert!(embedded_by.values().all(|n| *n == 1), "{embedded_by:?}");

    // The same holds for the scores job: processed counts add up to the whole store, once.
    let mut processed = 0;
    for index in 0..count {
        let spec = format!("{index}/{count}");
        let report = json(&db.run(&[
            "--json",
            "scores",
            "--shard",
            &spec,
            "--now",
            "2025-03-01T00:00:00Z",
        ]));
        processed += report["counts"]["processed"].as_u64().unwrap();
    }
    assert_eq!(processed, 3 * USERS.len() as u64);
}

#[test]
fn bad_shard_specs_and_misuse_are_refused_with_the_reason() {
    let db = store();
    for (spec, why) in [
        ("3/2", "I must be below N"),
        ("0/0", "N must be at least 1"),
        ("one/2", "is not I/N"),
    ] {
        let out = db.run(&["scores", "--shard", spec]);
        assert_eq!(out.status.code(), Some(2), "{spec}");
        assert!(stderr(&out).contains(why), "{spec}: {}", stderr(&out));
    }
    let out = db.run(&["scores", "--shard", "0/2", "--user", "ana"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
    let out = db.run(&["optimize", "--shard", "0/2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("once, not per shard"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn nightly_runs_each_step_for_its_shard_and_leaves_optimize_to_one_run() {
    let db = store();
    let report = json(&db.run(&[
        "--json",
        "nightly",
        "--shard",
        "1/2",
        "--embedder",
        "hash",
        "--now",
        "2025-03-01T00:00:00Z",
    ]));
    let ours: Vec<&str> = USERS
        .iter()
        .copied()
        .filter(|u| Shard::index_of(u, 2) == 1)
        .collect();
    assert_eq!(report["before"]["live_memories"], 3 * ours.len());
    let mut with_vectors = users_with(&db, "embedding IS NOT NULL");
    with_vectors.sort();
    let mut ours_sorted: Vec<String> = ours.iter().map(|u| u.to_string()).collect();
    ours_sorted.sort();
    assert_eq!(with_vectors, ours_sorted);
    let optimize = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "optimize")
        .unwrap()
        .clone();
    assert_eq!(optimize["status"], "skipped", "{optimize}");
    assert!(optimize["note"].as_str().unwrap().contains("not per shard"));
}

#[test]
fn shards_of_one_job_run_at_once_against_one_store() {
    let db = store();
    // Two shards of each job as concurrent processes, as Airflow's mapped tasks on two
    // workers would run them: both finish, and the store holds every user's work once.
    for job in [
        vec!["embed", "--embedder", "hash"],
        vec!["scores", "--now", "2025-03-01T00:00:00Z"],
        vec!["entities"],
        vec!["link"],
        vec!["cluster"],
        vec!["consolidate", "--embedder", "hash"],
        vec!["refine", "--embedder", "hash"],
        vec!["entity-gc"],
        vec!["describe", "--embedder", "hash"],
    ] {
        let children: Vec<std::process::Child> = (0..2)
            .map(|i| {
                let spec = format!("{i}/2");
                let mut command = crate::common::memlife_command();
                command
                    .args(["--db", db.uri.as_str(), "--json"])
                    .args(&job)
                    .args(["--shard", &spec])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped());
                command.spawn().unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{job:?}: {}", stderr(&out));
        }
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding IS NULL"),
        "0"
    );
    let out = db.run(&["check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}
