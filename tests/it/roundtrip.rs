//! Export followed by import loses nothing, on every column of every table, in every format:
//! the JSON Lines export of the re-imported database equals the original's byte for byte.

use crate::common::{TestDb, fixture, memlife, stderr};

const TABLES: &[(&str, &str)] = &[
    ("memories", "true"),
    ("links", "true"),
    ("entities", "true"),
    ("audit_log", "true"),
    ("runs", "job <> 'import'"),
];

fn export(db: &TestDb, table: &str, filter: &str, format: &str, name: &str) -> String {
    let path = db.path(name);
    let out = db.run(&[
        "export", "--table", table, "--format", format, "--where", filter, "-o", &path,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "export {table} {format}: {}",
        stderr(&out)
    );
    path
}

#[test]
fn every_table_round_trips_in_every_format() {
    let source = TestDb::with_dim(4);
    // Fixtures of every table imported side by side (links to memories of another fixture,
    // a `running` run row): a round-trip test, not a consistent store.
    source.skip_final_check();
    let synth = source.path("synth.jsonl");
    let out = memlife(&[
        "synth",
        "--users",
        "2",
        "--memories",
        "120",
        "--dim",
        "4",
        "-o",
        &synth,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for (table, file) in [
        ("memories", synth.clone()),
        ("memories", fixture("memories.jsonl").display().to_string()),
        ("links", fixture("links.jsonl").display().to_string()),
        ("entities", fixture("entities.jsonl").display().to_string()),
        (
            "audit_log",
            fixture("audit_log.jsonl").display().to_string(),
        ),
        ("runs", fixture("runs.jsonl").display().to_string()),
    ] {
        let out = source.run(&["import", "--table", table, &file]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "import {file}: {}",
            stderr(&out)
        );
    }
    assert_eq!(source.count("memories"), 130);
    assert_eq!(
        source.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding IS NOT NULL"),
        "120"
    );

    for (table, filter) in TABLES {
        let reference = std::fs::read(export(
            &source,
            table,
            filter,
            "jsonl",
            &format!("{table}.ref.jsonl"),
        ))
        .unwrap();
        assert!(!reference.is_empty(), "{table} has rows");
        for format in ["jsonl", "json", "csv", "parquet"] {
            let file = export(&source, table, filter, format, &format!("{table}.{format}"));
            let target = TestDb::with_dim(4);
            // One table alone: its references point into tables not imported here.
            target.skip_final_check();
            let out = target.run(&["import", "--table", table, &file]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "re-import {table} from {format}: {}",
                stderr(&out)
            );
            let again =
                std::fs::read(export(&target, table, filter, "jsonl", "again.jsonl")).unwrap();
            assert!(
                again == reference,
                "{table} via {format} differs:\n{}\nvs\n{}",
                String::from_utf8_lossy(&reference[..reference.len().min(600)]),
                String::from_utf8_lossy(&again[..again.len().min(600)])
            );
        }
    }
}
