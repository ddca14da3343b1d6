//! Import as users rely on it: every kind of bad row named with file, line and field; nothing
//! written under --on-error abort; valid rows written under skip; upserts, never duplicates.

use crate::common::{TestDb, fixture, stderr, stdout};

fn report(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(out), stderr(out)))
}

fn failure_reasons(report: &serde_json::Value) -> Vec<String> {
    report["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{}: {}",
                f["item"].as_str().unwrap(),
                f["reason"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn abort_reports_every_bad_row_and_writes_nothing() {
    let db = TestDb::new();
    let file = fixture("bad_memories.jsonl");
    let out = db.run(&["--json", "import", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let report = report(&out);
    assert_eq!(report["status"], "failed");
    let reasons = failure_reasons(&report);
    let expect = [
        (
            "bad_memories.jsonl:line 2",
            "field 'text': required field is missing",
        ),
        (
            "bad_memories.jsonl:line 3",
            "field 'user_id': required field is missing",
        ),
        (
            "bad_memories.jsonl:line 4",
            "field 'created_at': expected an RFC 3339 timestamp, got \"last tuesday\"",
        ),
        (
            "bad_memories.jsonl:line 5",
            "field 'salience': 1.7 is outside [0, 1]",
        ),
        (
            "bad_memories.jsonl:line 6",
            "field 'state': unknown value 'dormant'",
        ),
        (
            "bad_memories.jsonl:line 7",
            "field 'embedding': embedding has 3 dimensions, the database expects 384",
        ),
        ("bad_memories.jsonl:line 8", "not valid JSON"),
        (
            "bad_memories.jsonl:line 10",
            "field 'id': duplicate key 'ok1' (first at line 1)",
        ),
    ];
    assert_eq!(reasons.len(), expect.len(), "{reasons:#?}");
    for ((place, reason), got) in expect.iter().zip(&reasons) {
        assert!(
            got.contains(place) && got.contains(reason),
            "expected {place} {reason}, got {got}"
        );
    }
    assert_eq!(db.count("memories"), 0, "abort must write nothing");
    // The failed run is on record.
    assert_eq!(
        db.scalar("SELECT status FROM runs WHERE job = 'import'"),
        "\"failed\""
    );
}

#[test]
fn skip_writes_the_valid_rows_and_exits_1() {
    let db = TestDb::new();
    let file = fixture("bad_memories.jsonl");
    let out = db.run(&[
        "--json",
        "import",
        "--on-error",
        "skip",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let report = report(&out);
    assert_eq!(report["status"], "partial");
    assert_eq!(report["counts"]["inserted"], 2);
    assert_eq!(report["counts"]["rows_rejected"], 8);
    assert_eq!(db.count("memories"), 2);
    assert_eq!(
        db.scalar("SELECT text FROM memories WHERE id = 'ok1'"),
        "\"A valid memory.\""
    );
}

#[test]
fn csv_rows_are_checked_by_line_and_lists_parse_from_json_text() {
    let db = TestDb::new();
    let file = fixture("bad_memories.csv");
    let out = db.run(&[
        "--json",
        "import",
        "--on-error",
        "skip",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let reasons = failure_reasons(&report(&out));
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].contains("bad_memories.csv:line 3")
            && reasons[0].contains("2.5 is outside [0, 1]")
    );
    assert_eq!(
        db.scalar("SELECT tags FROM memories WHERE id = 'c1'"),
        "[\"drinks\"]"
    );
    assert_eq!(
        db.scalar("SELECT salience FROM memories WHERE id = 'c3'"),
        "0.5",
        "empty cell takes the default"
    );
}

#[test]
fn invalid_utf8_is_a_row_error_and_the_rest_goes_on() {
    let db = TestDb::new();
    let file = fixture("invalid_utf8.jsonl");
    let out = db.run(&[
        "--json",
        "import",
        "--on-error",
        "skip",
        file.to_str().unwrap(),
    ]);
    let reasons = failure_reasons(&report(&out));
    assert_eq!(reasons.len(), 1);
    assert!(
        reasons[0].contains("line 2") && reasons[0].contains("invalid UTF-8"),
        "{reasons:?}"
    );
    assert_eq!(db.scalar("SELECT text FROM memories"), "\"café ok\"");
}

#[test]
fn bad_files_fail_with_their_name() {
    let db = TestDb::new();
    let jsonl = fixture("memories.jsonl").display().to_string();
    let txt = fixture("memories.txt").display().to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["import", "/nonexistent/memories.jsonl"],
            "/nonexistent/memories.jsonl",
        ),
        (&["import", &txt], "extension"),
        (&["import", "--format", "parquet", &jsonl], "memories.jsonl"),
        (
            &["import", "--table", "nope", &jsonl],
            "cannot import into 'nope'",
        ),
    ];
    for (args, fragment) in cases {
        let out = db.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains(fragment),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(db.count("memories"), 0);
}

#[test]
fn reimporting_the_same_ids_upserts() {
    let db = TestDb::new();
    let file = fixture("memories.jsonl");
    let first = report(&db.run(&["--json", "import", file.to_str().unwrap()]));
    assert_eq!(first["counts"]["inserted"], 10);
    let second = report(&db.run(&["--json", "import", file.to_str().unwrap()]));
    assert_eq!(second["counts"]["inserted"], 0);
    assert_eq!(second["counts"]["updated"], 10);
    assert_eq!(db.count("memories"), 10);
    let changed = db.path("changed.jsonl");
    std::fs::write(
        &changed,
        "{\"id\": \"m4\", \"user_id\": \"alice\", \"text\": \"Alice prefers light mode now.\"}\n\
         {\"id\": \"m11\", \"user_id\": \"alice\", \"text\": \"Alice has a cat.\"}\n",
    )
    .unwrap();
    let third = report(&db.run(&["--json", "import", &changed]));
    assert_eq!(
        (
            third["counts"]["inserted"].as_u64(),
            third["counts"]["updated"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(db.count("memories"), 11);
    assert_eq!(
        db.scalar("SELECT text FROM memories WHERE id = 'm4'"),
        "\"Alice prefers light mode now.\""
    );
}

#[test]
fn rows_without_ids_get_content_ids_so_reimport_does_not_duplicate() {
    let db = TestDb::new();
    let file = db.path("no_ids.jsonl");
    std::fs::write(
        &file,
        "{\"user_id\": \"u\", \"text\": \"Likes tea.\", \"created_at\": \"2025-01-01\"}\n\
         {\"user_id\": \"u\", \"text\": \"Likes coffee.\"}\n",
    )
    .unwrap();
    db.run(&["import", &file]);
    db.run(&["import", &file]);
    assert_eq!(db.count("memories"), 2);
}

#[test]
fn dry_run_and_user_scope_write_nothing_outside_their_scope() {
    let db = TestDb::new();
    let file = fixture("memories.jsonl");
    let dry = report(&db.run(&["--json", "import", "--dry-run", file.to_str().unwrap()]));
    assert_eq!(dry["counts"]["rows_valid"], 10);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(db.count("memories"), 0);
    assert_eq!(db.count("runs"), 0, "a dry run records no run");
    let scoped = report(&db.run(&["--json", "import", "--user", "bob", file.to_str().unwrap()]));
    assert_eq!(scoped["counts"]["rows_other_users"], 6);
    assert_eq!(db.count("memories"), 4);
    assert_eq!(
        db.scalar("SELECT COUNT(DISTINCT user_id) AS n FROM memories"),
        "1"
    );
    assert_eq!(db.scalar("SELECT user_id FROM runs"), "\"bob\"");
}

#[test]
fn links_and_entities_are_validated_and_keyed() {
    let db = TestDb::new();
    // Links imported without their memories: `check` rightly reports them dangling.
    db.skip_final_check();
    let links = fixture("links.jsonl");
    assert_eq!(
        db.run(&["import", "--table", "links", links.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        db.run(&["import", "--table", "links", links.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        db.count("links"),
        5,
        "links upsert on (source_id, target_id, link_type)"
    );
    let bad = db.path("bad_links.jsonl");
    std::fs::write(&bad, "{\"source_id\": \"a\", \"target_id\": \"b\", \"user_id\": \"u\", \"link_type\": \"likes\"}\n").unwrap();
    let out = db.run(&["import", "--table", "links", &bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).contains("unknown link type 'likes'"),
        "{}",
        stdout(&out)
    );
}

/// Imports `file` into `db` under the default `--on-error abort`: exit 2, exactly one failure
/// whose text holds every one of `needles`, and no memory written.
fn aborts_naming_one_row(db: &TestDb, file: &str, needles: &[&str]) {
    let out = db.run(&["--json", "import", file]);
    assert_eq!(out.status.code(), Some(2));
    let reasons = failure_reasons(&report(&out));
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        needles.iter().all(|n| reasons[0].contains(n)),
        "{reasons:?}"
    );
    assert_eq!(db.count("memories"), 0);
}

/// Writes a Parquet file of memories, one row group per slice of `rows`.
fn parquet_file(path: &str, groups: &[&[(&str, &str, f64)]]) {
    use arrow::array::{ArrayRef, Float64Array, StringArray, TimestampMicrosecondArray};
    use std::sync::Arc;
    let file = std::fs::File::create(path).unwrap();
    let mut writer: Option<parquet::arrow::ArrowWriter<std::fs::File>> = None;
    for rows in groups {
        let batch = arrow::record_batch::RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            (
                "user_id",
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.1).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            (
                "text",
                Arc::new(StringArray::from(vec!["User likes tea."; rows.len()])) as ArrayRef,
            ),
            (
                "salience",
                Arc::new(Float64Array::from(
                    rows.iter().map(|r| r.2).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            (
                "created_at",
                Arc::new(
                    TimestampMicrosecondArray::from(vec![1_735_689_600_000_000; rows.len()])
                        .with_timezone("UTC"),
                ) as ArrayRef,
            ),
        ])
        .unwrap();
        let w = writer.get_or_insert_with(|| {
            parquet::arrow::ArrowWriter::try_new(file.try_clone().unwrap(), batch.schema(), None)
                .unwrap()
        });
        w.write(&batch).unwrap();
        w.flush().unwrap();
    }
    writer.unwrap().close().unwrap();
}

#[test]
fn parquet_batches_take_the_columnar_path_and_bad_rows_are_still_named() {
    let db = TestDb::new();
    let clean = db.path("clean.parquet");
    parquet_file(
        &clean,
        &[&[("a", "u1", 0.2), ("b", "u2", 0.4)], &[("c", "u1", 0.6)]],
    );
    let out = report(&db.run(&["--json", "import", &clean]));
    assert_eq!(out["counts"]["inserted"], 3, "{out}");
    assert_eq!(
        db.scalar("SELECT state FROM memories WHERE id = 'c'"),
        "\"candidate\"",
        "defaults filled"
    );
    assert_eq!(
        db.scalar("SELECT salience FROM memories WHERE id = 'b'"),
        "0.4"
    );
    // --user keeps one user's rows.
    let other = TestDb::new();
    let out = report(&other.run(&["--json", "import", "--user", "u1", &clean]));
    assert_eq!(out["counts"]["inserted"], 2, "{out}");

    // A bad value in the second row group: named by row, nothing written under abort.
    let bad = db.path("bad.parquet");
    parquet_file(
        &bad,
        &[&[("d", "u1", 0.1)], &[("e", "u1", 0.3), ("f", "u1", 1.5)]],
    );
    let fresh = TestDb::new();
    aborts_naming_one_row(&fresh, &bad, &["row 3", "salience"]);
    let out = report(&fresh.run(&["--json", "import", "--on-error", "skip", &bad]));
    assert_eq!(out["counts"]["inserted"], 2, "{out}");

    // A key repeated across row groups is named with both rows.
    let dup = db.path("dup.parquet");
    parquet_file(
        &dup,
        &[&[("g", "u1", 0.1), ("h", "u1", 0.1)], &[("g", "u1", 0.2)]],
    );
    let fresh = TestDb::new();
    let out = fresh.run(&["--json", "import", &dup]);
    let reasons = failure_reasons(&report(&out));
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("duplicate key 'g'") && r.contains("row 1")),
        "{reasons:?}"
    );
}

fn vector_value(row: usize, place: usize) -> f32 {
    (row % 4096) as f32 + place as f32 / 1024.0
}

/// Writes `rows` memories ("m1".., user "u1") with 384-d vectors as Parquet, place d of row
/// r's vector holding `vector_value(r, d)`; `odd` replaces row `odd.0`'s (1-based; None: a null vector), and
/// `list` writes variable lists instead of fixed-size ones.
fn parquet_with_vectors(path: &str, rows: usize, list: bool, odd: (usize, Option<Vec<f32>>)) {
    use arrow::array::{
        ArrayRef, FixedSizeListBuilder, Float32Builder, ListBuilder, RecordBatch, StringArray,
    };
    use std::sync::Arc;
    let dim = 384;
    let vector = |r: usize| -> Option<Vec<f32>> {
        match r == odd.0 {
            true => odd.1.clone(),
            false => Some((0..dim).map(|d| vector_value(r, d)).collect()),
        }
    };
    let vectors: ArrayRef = if list {
        let mut b = ListBuilder::new(Float32Builder::new());
        for r in 1..=rows {
            match vector(r) {
                Some(v) => {
                    b.values().append_slice(&v);
                    b.append(true);
                }
                None => b.append(false),
            }
        }
        Arc::new(b.finish())
    } else {
        let mut b = FixedSizeListBuilder::new(Float32Builder::new(), dim as i32);
        for r in 1..=rows {
            let v = vector(r);
            b.values().append_slice(v.as_deref().unwrap_or(&[0.0; 384]));
            b.append(v.is_some());
        }
        Arc::new(b.finish())
    };
    let ids: Vec<String> = (1..=rows).map(|r| format!("m{r}")).collect();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(StringArray::from(ids)) as ArrayRef),
        (
            "user_id",
            Arc::new(StringArray::from(vec!["u1"; rows])) as ArrayRef,
        ),
        (
            "text",
            Arc::new(StringArray::from(vec!["User likes tea."; rows])) as ArrayRef,
        ),
        ("embedding", vectors),
    ])
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

#[test]
fn parquet_vectors_read_fast_or_generically_give_the_same_rows_and_errors() {
    let db = TestDb::new();
    // A null vector far into the file: the rows before it take the direct vector reader, the
    // rest the generic one; every row arrives with its own vector.
    let file = db.path("null-vector.parquet");
    parquet_with_vectors(&file, 20_000, false, (15_000, None));
    let out = report(&db.run(&["--json", "import", &file]));
    assert_eq!(out["counts"]["inserted"], 20_000, "{out}");
    assert_eq!(
        db.scalar("SELECT id FROM memories WHERE embedding IS NULL"),
        "\"m15000\""
    );
    for row in [1usize, 14_999, 15_001, 20_000] {
        for place in [1usize, 384] {
            let sql = format!(
                "SELECT array_element(embedding, {place}) AS v FROM memories WHERE id = 'm{row}'"
            );
            let got: f64 = db.scalar(&sql).parse().expect("a number");
            let want = vector_value(row, place - 1) as f64;
            // Half a step between neighbouring places (1/1024), well above f32 rounding.
            assert!(
                (got - want).abs() < 3e-4,
                "m{row}[{place}]: {got} != {want}"
            );
        }
    }

    // A vector one value short, in a file of variable lists: named by row, nothing written.
    let short = db.path("short-vector.parquet");
    parquet_with_vectors(&short, 20_000, true, (12_345, Some(vec![0.5; 383])));
    aborts_naming_one_row(&TestDb::new(), &short, &["row 12345", "embedding"]);
}

#[test]
fn import_fills_the_event_day_a_memory_names_relative_to_when_it_was_said() {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(
        &file,
        r#"{"id":"a","user_id":"u","text":"Went to the support group yesterday","created_at":"2023-05-08T13:56:00Z"}
{"id":"b","user_id":"u","text":"Went hiking last week","created_at":"2023-05-08T13:56:00Z"}
{"id":"c","user_id":"u","text":"Met Jo last Friday","created_at":"2023-05-08T13:56:00Z","happens_at":"2023-05-01T00:00:00Z"}
"#,
    )
    .unwrap();
    assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    let rows = db.rows("SELECT id, CAST(happens_at AS VARCHAR) AS h FROM memories ORDER BY id");
    assert_eq!(
        rows[0]["h"], "2023-05-07T00:00:00Z",
        "yesterday: the day before"
    );
    assert!(rows[1]["h"].is_null(), "a week is not a day: {rows:?}");
    assert_eq!(
        rows[2]["h"], "2023-05-01T00:00:00Z",
        "a given happens_at is kept"
    );
}

#[test]
fn a_memory_naming_a_model_without_a_vector_is_refused_by_row_and_field() {
    // `embed` finds the rows to embed by their missing model: a model without its vector
    // would never be embedded.
    let db = TestDb::new();
    let file = db.path("model-only.jsonl");
    std::fs::write(
        &file,
        "{\"id\":\"a\",\"user_id\":\"u1\",\"text\":\"User likes tea.\"}\n\
         {\"id\":\"b\",\"user_id\":\"u1\",\"text\":\"User likes rain.\",\"embedding_model\":\"m\"}\n",
    )
    .unwrap();
    aborts_naming_one_row(&db, &file, &["embedding_model", "no embedding"]);
}
