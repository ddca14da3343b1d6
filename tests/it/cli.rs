//! The binary as a user runs it: init, schema versions, SQL, stats, synth, exit codes.

use crate::common::{TestDb, fixture, memlife, stderr, stdout};

#[test]
fn init_is_idempotent_and_reports_the_schema() {
    let db = TestDb::new();
    let again = db.run(&["--json", "init"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let report: serde_json::Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert_eq!(
        report["schema_version"],
        memlife::model::schema::SCHEMA_VERSION
    );
    assert_eq!(report["embedding_dim"], 384);
    assert_eq!(report["created_tables"], serde_json::json!([]));
    // A second init with another width keeps the recorded one.
    let other = db.run(&["--json", "init", "--embedding-dim", "8"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&other)).unwrap();
    assert_eq!(report["embedding_dim"], 384);
}

#[test]
fn a_folder_that_is_not_a_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("nothing.db").display().to_string();
    let out = memlife(&["--db", &uri, "stats"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a memlife database"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_version_is_refused_with_a_clear_error() {
    let db = TestDb::new();
    // The database is unreadable to this memlife on purpose: `check` refuses it too.
    db.skip_final_check();
    let store = memlife::store::Store::open(&db.uri).await.unwrap();
    memlife::store::set_meta(&store, "schema_version", "99")
        .await
        .unwrap();
    let out = db.run(&["stats"]);
    assert_eq!(out.status.code(), Some(2));
    let message = stderr(&out);
    assert!(message.contains("schema version 99"), "{message}");
    assert!(message.contains("upgrade memlife"), "{message}");
}

#[test]
fn sql_prints_table_json_and_csv_and_refuses_writes() {
    let db = TestDb::new();
    let imported = db.run(&["import", fixture("memories.jsonl").to_str().unwrap()]);
    assert_eq!(imported.status.code(), Some(0), "{}", stdout(&imported));
    let json = db.run(&[
        "sql",
        "SELECT user_id, COUNT(*) AS n FROM memories GROUP BY user_id ORDER BY user_id",
        "--format",
        "json",
    ]);
    let rows: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(
        rows,
        serde_json::json!([{"user_id": "alice", "n": 6}, {"user_id": "bob", "n": 4}])
    );
    let csv = db.run(&[
        "sql",
        "SELECT id FROM memories WHERE id IN ('m1','m2') ORDER BY id",
        "--format",
        "csv",
    ]);
    assert_eq!(stdout(&csv), "id\nm1\nm2\n");
    let table = db.run(&["sql", "SELECT id FROM memories WHERE id = 'm3'"]);
    assert!(stdout(&table).contains("| m3 |") && stdout(&table).contains("(1 row)"));
    for statement in [
        "DELETE FROM memories",
        "DROP TABLE memories",
        "CREATE TABLE x AS SELECT 1",
    ] {
        let out = db.run(&["sql", statement]);
        assert_eq!(out.status.code(), Some(2), "{statement} should be refused");
    }
    assert_eq!(db.count("memories"), 10);
    let bad = db.run(&["sql", "SELECT nope FROM memories"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("nope"), "{}", stderr(&bad));
}

#[test]
fn saved_queries_run_from_files_with_parameters() {
    let db = TestDb::new();
    db.run(&["import", fixture("memories.jsonl").to_str().unwrap()]);
    let sql = concat!(env!("CARGO_MANIFEST_DIR"), "/sql/supersession_chain.sql");
    let out = db.run(&[
        "sql",
        "--file",
        sql,
        "--param",
        "chain=chain-vs",
        "--format",
        "csv",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ids: Vec<String> = stdout(&out)
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["m1", "m2", "m3"]);
    let missing = db.run(&["sql", "--file", sql]);
    assert_eq!(
        missing.status.code(),
        Some(2),
        "a missing --param is an error"
    );
}

#[test]
fn stats_summarises_memories_links_and_runs() {
    let db = TestDb::new();
    db.run(&["import", fixture("memories.jsonl").to_str().unwrap()]);
    db.run(&[
        "import",
        "--table",
        "links",
        fixture("links.jsonl").to_str().unwrap(),
    ]);
    let out = db.run(&["stats"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "Memories per user, state and tier",
        "Links per type",
        "Last run of each job",
        "supersedes",
        "import",
    ] {
        assert!(text.contains(expected), "stats lacks {expected}:\n{text}");
    }
    let json = db.run(&["--json", "stats"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    let alice = &report["memories"][0];
    assert_eq!(alice["user_id"], "alice");
    assert_eq!(alice["total"], 6);
    assert_eq!(alice["archived"], 1);
    assert_eq!(alice["core"], 1);
    assert_eq!(report["links"][0]["link_type"], "(all)");
    assert_eq!(report["links"][0]["links"], 5);
    assert_eq!(report["runs"][0]["job"], "import");
    assert_eq!(report["runs"][0]["status"], "done");
}

#[test]
fn synth_is_deterministic_and_imports_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    for name in ["a.jsonl", "b.jsonl", "c.jsonl", "a.parquet", "b.parquet"] {
        let seed = if name.starts_with('c') { "8" } else { "7" };
        let out = memlife(&[
            "synth",
            "--users",
            "3",
            "--memories",
            "400",
            "--seed",
            seed,
            "-o",
            &path(name),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let read = |name: &str| std::fs::read(path(name)).unwrap();
    assert_eq!(read("a.jsonl"), read("b.jsonl"));
    assert_eq!(read("a.truth.json"), read("b.truth.json"));
    assert_eq!(read("a.parquet"), read("b.parquet"));
    assert_ne!(read("a.jsonl"), read("c.jsonl"));
    let truth: serde_json::Value = serde_json::from_slice(&read("a.truth.json")).unwrap();
    for key in [
        "duplicate_groups",
        "merge_groups",
        "supersession_chains",
        "verbose",
        "entities",
        "sessions",
    ] {
        assert!(
            !truth[key].as_array().unwrap().is_empty(),
            "truth lacks {key}"
        );
    }
    let db = TestDb::new();
    let out = db.run(&["import", &path("a.jsonl")]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(db.count("memories"), 400);
    assert_eq!(
        db.scalar("SELECT COUNT(DISTINCT user_id) AS n FROM memories"),
        "3"
    );
}

#[test]
fn relative_folders_named_like_cloud_uris_are_local() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["db", "dbfiles"] {
        let out = crate::common::memlife_command()
            .current_dir(dir.path())
            .args(["--db", name, "init"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert!(
            dir.path().join(name).join("memories.lance").exists(),
            "{name}"
        );
    }
}

#[test]
fn init_and_sql_work_beside_a_broken_config_that_jobs_refuse() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("memlife.toml"),
        "[scores]\nhot_treshold = 0.7\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        crate::common::memlife_command()
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    // ./memlife.toml is read only by what needs it.
    let out = run(&["--db", "db", "init"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run(&["--db", "db", "sql", "SELECT COUNT(*) AS n FROM memories"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("(1 row)"), "{}", stdout(&out));
    let out = run(&["--db", "db", "stats"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A job that reads it names the bad key and exits 2, writing nothing.
    let out = run(&["--db", "db", "scores"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("hot_treshold"), "{}", stderr(&out));
    let out = run(&["--db", "db", "sql", "SELECT COUNT(*) AS n FROM runs"]);
    assert!(stdout(&out).contains("| 0 "), "{}", stdout(&out));
}

#[test]
fn the_demo_never_deletes_a_folder_it_did_not_make() {
    let dir = tempfile::tempdir().unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo-folder.sh");
    let folder = |name: &str| dir.path().join(name);
    let run = |path: &std::path::Path| {
        std::process::Command::new("bash")
            .arg(&script)
            .arg(path)
            .output()
            .unwrap()
    };
    // Somebody's database at the demo's path: refused, untouched.
    std::fs::create_dir_all(folder("theirs.db/memories.lance")).unwrap();
    std::fs::write(folder("theirs.db/memories.lance/data"), "precious").unwrap();
    let out = run(&folder("theirs.db"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("was not made by the demo"));
    assert_eq!(
        std::fs::read_to_string(folder("theirs.db/memories.lance/data")).unwrap(),
        "precious"
    );
    // Its own folder from an earlier run: made anew.
    let out = run(&folder("demo.db"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::write(folder("demo.db/leftover"), "old run").unwrap();
    let out = run(&folder("demo.db"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!folder("demo.db/leftover").exists());
    assert!(folder("demo.db/.memlife-demo").exists());
}

#[test]
fn every_clock_flag_is_read_one_way_with_one_message() {
    let db = TestDb::new();
    for (flag, args) in [
        ("--now", vec!["scores", "--now", "yesterday"]),
        ("--now", vec!["nightly", "--now", "yesterday"]),
        (
            "--now",
            vec!["recall", "a question", "--user", "u1", "--now", "yesterday"],
        ),
        ("--as-of", vec!["history", "m1", "--as-of", "yesterday"]),
        (
            "--start",
            vec!["synth", "--start", "yesterday", "-o", "x.jsonl"],
        ),
    ] {
        let out = db.run(&args);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        let message = stderr(&out);
        assert!(
            message.contains(flag)
                && message.contains("\"yesterday\" is not a time: expected RFC 3339"),
            "{args:?}: {message}"
        );
    }
    // A clock in another offset or as a bare date reads as the same instant everywhere.
    let out = db.run(&["--json", "scores", "--now", "2026-01-31T03:00:00+01:00"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let params = db.scalar("SELECT params FROM runs WHERE job = 'scores'");
    assert!(params.contains("2026-01-31T02:00:00"), "{params}");
}
