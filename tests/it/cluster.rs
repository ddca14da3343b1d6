//! `memlife cluster` on real Lance tables: hub clusters, full mode, one cluster per memory,
//! size limits, thresholds per embedding model, the same clusters from the same input.

use serde_json::Value;

use crate::common::{TestDb, fixture, stderr, stdout};

/// The fixture (three paraphrase groups, unrelated memories, a second user), embedded with
/// the lexical hash embedder.
/// Imports a fixture and embeds it with the hash embedder.
fn load(db: &TestDb, name: &str) {
    let file = fixture(name);
    let out = db.run(&["import", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = db.run(&["embed", "--embedder", "hash"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn clustered_db() -> TestDb {
    let db = TestDb::new();
    load(&db, "clusters.jsonl");
    db
}

fn cluster(db: &TestDb, args: &[&str]) -> Value {
    cluster_with(db, None, args)
}

/// `memlife cluster` with a config file, if given.
fn cluster_with(db: &TestDb, config: Option<&str>, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    if let Some(config) = config {
        all.extend(["--config", config]);
    }
    all.push("cluster");
    all.extend_from_slice(args);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

/// The member lists of one run's clusters, sorted by seed.
fn clusters_of(db: &TestDb, run_id: &str) -> Vec<Vec<String>> {
    let out = db.run(&[
        "sql",
        &format!("SELECT member_ids FROM clusters WHERE run_id = '{run_id}' ORDER BY seed_id"),
        "--format",
        "jsonl",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|line| {
            let row: Value = serde_json::from_str(line).unwrap();
            row["member_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn hubs_gather_their_paraphrases_once_and_full_mode_finds_groups_without_hubs() {
    let db = clustered_db();
    let report = cluster(&db, &["--threshold", "0.6"]);
    // u1's hubs: c1 and x1 (important, used), x2, d1; u2's y1 (two memories: a pair is
    // enough for a cluster).
    assert_eq!(report["counts"]["hubs"], 5, "{report}");
    let run = report["run_id"].as_str().unwrap();
    let hubs = clusters_of(&db, run);
    assert_eq!(
        hubs,
        [vec!["c1", "c3", "c4", "c2"], vec!["d1", "d3", "d2"]],
        "a hub first, its neighbours best first; the chess group has no hub"
    );
    // The same input gives the same clusters.
    let again = cluster(&db, &["--threshold", "0.6"]);
    assert_eq!(clusters_of(&db, again["run_id"].as_str().unwrap()), hubs);
    // Full mode: every memory may seed; the chess group is found; one layer: no memory twice.
    let one_layer = db.path("memlife.toml");
    std::fs::write(&one_layer, "[cluster]\nlayers = 1\n").unwrap();
    let full = cluster_with(
        &db,
        Some(&one_layer),
        &["--mode", "full", "--threshold", "0.6"],
    );
    let found = clusters_of(&db, full["run_id"].as_str().unwrap());
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found.iter().any(|c| c.contains(&"p1".to_string())));
    let mut all: Vec<&String> = found.iter().flatten().collect();
    let total = all.len();
    all.sort();
    all.dedup();
    assert_eq!(
        all.len(),
        total,
        "with one layer a memory joins at most one cluster"
    );
    // Two layers (the default): the first round's clusters again, then groups of pairs the
    // first round split; no two memories share two clusters. Rex the parrot (r1) is closest
    // to Rex the tortoise (r2), so round one leaves r3, about the parrot, alone; round two
    // pairs it with r1.
    load(&db, "cluster_layers.jsonl");
    let split = cluster_with(
        &db,
        Some(&one_layer),
        &["--mode", "full", "--threshold", "0.5"],
    );
    let found = clusters_of(&db, split["run_id"].as_str().unwrap());
    let pair = |a: &str, b: &str| vec![a.to_string(), b.to_string()];
    assert!(found.contains(&pair("r1", "r2")), "{found:?}");
    assert!(
        !found.iter().any(|c| c.contains(&"r3".to_string())),
        "{found:?}"
    );
    let layered = cluster(&db, &["--mode", "full", "--threshold", "0.5"]);
    let found2 = clusters_of(&db, layered["run_id"].as_str().unwrap());
    assert!(found2.contains(&pair("r1", "r3")), "{found2:?}");
    for c in &found {
        assert!(
            found2.contains(c),
            "the first layer is the one-layer clustering: {found2:?}"
        );
    }
    let mut together = std::collections::BTreeSet::new();
    for c in &found2 {
        for (i, a) in c.iter().enumerate() {
            for b in &c[i + 1..] {
                let key = (a.min(b).clone(), a.max(b).clone());
                assert!(
                    together.insert(key),
                    "{a} and {b} share two clusters: {found2:?}"
                );
            }
        }
    }
    assert_eq!(
        layered["counts"]["memberships"].as_u64().unwrap() as usize,
        found2.iter().map(Vec::len).sum::<usize>(),
        "{layered}"
    );
    // Hub mode on u9, whom nobody has recalled from (no access counts): its hub is its best
    // connected memory, r1 (two neighbours at 0.5), which gathers both.
    let by_hubs = cluster(&db, &["--threshold", "0.5"]);
    assert_eq!(by_hubs["counts"]["hubs_by_connections"], 1, "{by_hubs}");
    let found3 = clusters_of(&db, by_hubs["run_id"].as_str().unwrap());
    let rex = vec!["r1".to_string(), "r2".to_string(), "r3".to_string()];
    assert!(found3.contains(&rex), "{found3:?}");
    // Every cluster records its pairwise similarities and a confidence within them.
    let row: Value = serde_json::from_str(
        stdout(&db.run(&[
            "sql",
            &format!("SELECT similarities, confidence FROM clusters WHERE run_id = '{run}' AND seed_id = 'c1'"),
            "--format",
            "jsonl",
        ]))
        .trim(),
    )
    .unwrap();
    let pairs: Vec<f64> = serde_json::from_str(row["similarities"].as_str().unwrap()).unwrap();
    assert_eq!(pairs.len(), 6, "4 members, 6 pairs");
    let confidence = row["confidence"].as_f64().unwrap();
    let mean = pairs.iter().sum::<f64>() / 6.0;
    assert!((confidence - mean).abs() < 1e-3, "{confidence} vs {mean}");
}

#[test]
fn the_threshold_is_the_models_and_sizes_come_from_the_config() {
    let db = clustered_db();
    // The hash embedder has no calibration: the seeds' 0.85 leaves d2 (0.72) out, and the
    // dog group keeps two memories: a pair is a cluster.
    let report = cluster(&db, &["--dry-run"]);
    assert_eq!(report["counts"]["clusters"], 2, "{report}");
    assert_eq!(report["counts"]["clustered_memories"], 6, "{report}");
    assert!(
        report["notes"].to_string().contains(
            "cluster threshold 0.85 (no calibration: the seeds' threshold of hash-lexical-v1"
        ),
        "{report}"
    );
    assert_eq!(db.count("clusters"), 0, "a dry run writes nothing");
    let config = db.path("memlife.toml");
    std::fs::write(
        &config,
        "[cluster]\nmin_size = 2\nmax_size = 3\n[thresholds.\"hash-lexical-v1\"]\ncluster = 0.6\n",
    )
    .unwrap();
    let out = db.run(&["--json", "--config", &config, "cluster"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let found = clusters_of(&db, report["run_id"].as_str().unwrap());
    assert_eq!(
        found,
        [vec!["c1", "c3", "c4"], vec!["d1", "d3", "d2"]],
        "max_size caps the coffee group at its three best"
    );
    // A bad size is refused before anything runs, naming the key.
    std::fs::write(&config, "[cluster]\nmin_size = 1\n").unwrap();
    let out = db.run(&["--config", &config, "cluster"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cluster.min_size"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn many_users_are_clustered_in_one_pass_each_as_if_alone_and_never_together() {
    // Twelve users with the same memories (ids told apart): one scan and one parallel pass
    // for all of them must give each user the clusters a run scoped to that user gives,
    // and no cluster may mix users although their texts are identical.
    let fixture = std::fs::read_to_string(fixture("clusters.jsonl")).unwrap();
    let mut lines = Vec::new();
    for n in 0..12 {
        for line in fixture.lines().filter(|l| l.contains("\"user_id\":\"u1\"")) {
            let mut row: Value = serde_json::from_str(line).unwrap();
            row["id"] = Value::from(format!("m{n}-{}", row["id"].as_str().unwrap()));
            row["user_id"] = Value::from(format!("user{n:02}"));
            lines.push(row.to_string());
        }
    }
    let db = TestDb::new();
    let file = db.path("many.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    for args in [
        vec!["import", file.as_str()],
        vec!["embed", "--embedder", "hash"],
    ] {
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let all = cluster(&db, &["--mode", "full", "--threshold", "0.6"]);
    assert_eq!(all["counts"]["users"], 12, "{all}");
    let found = clusters_of(&db, all["run_id"].as_str().unwrap());
    assert_eq!(found.len(), 36, "three groups per user: {found:?}");
    for members in &found {
        let prefix = members[0].split('-').next().unwrap();
        assert!(
            members.iter().all(|m| m.starts_with(&format!("{prefix}-"))),
            "a cluster mixes users: {members:?}"
        );
    }
    let alone = cluster(
        &db,
        &["--mode", "full", "--threshold", "0.6", "--user", "user07"],
    );
    let expected = clusters_of(&db, alone["run_id"].as_str().unwrap());
    assert_eq!(expected.len(), 3);
    let in_all: Vec<Vec<String>> = found
        .into_iter()
        .filter(|c| c[0].starts_with("m7-"))
        .collect();
    assert_eq!(in_all, expected);
}
