//! `memlife bench targets` on tiny scales: the table's shape, the exit codes (0 all held, 1 a
//! target missed, 2 a bench that could not run or a speed target refused in a debug build),
//! the history in `bench_runs` read back by `memlife sql` and `report --html`, the generated
//! Markdown table, and named errors for a bad targets file. Never timing itself.

use crate::common::{TestDb, stderr, stdout};

/// Cheap commands: the offline judge on one file of labelled pairs, and a small all-pairs
/// search (a speed target).
fn targets_file(db: &TestDb) -> String {
    let pairs = format!("{}/data/eval/integrate.jsonl", env!("CARGO_MANIFEST_DIR"));
    let judge = format!(
        r#"["eval", "judge", "--llm", "offline", "--no-similarity", "--pairs", "{pairs}"]"#
    );
    let similarity = r#"["bench", "similarity", "--vectors", "400", "--naive-queries", "20"]"#;
    let text = format!(
        r#"
[[target]]
name = "judge-safe"
title = "no destructive error"
run = {judge}
quick = {judge}
figure = "destructive_errors"
op = "<="
bound = 0
kind = "quality"

[[target]]
name = "impossible"
title = "more cases right than there are"
run = {judge}
quick = {judge}
figure = "correct"
op = ">"
bound = 1.0
against = "cases"
kind = "quality"

[[target]]
name = "fast-pairs"
title = "all-pairs on 400 vectors"
run = {similarity}
quick = {similarity}
figure = "kernel_seconds"
op = "<="
bound = 1000
unit = "s"
kind = "speed"

[[target]]
name = "broken"
title = "a bench that does not exist"
run = ["bench", "no-such-bench"]
quick = ["bench", "no-such-bench"]
figure = "x"
op = "<="
bound = 1
kind = "quality"

[[target]]
name = "needs-data"
title = "a target whose data is absent"
run = ["eval", "recall", "--locomo", "no/such/file.json"]
figure = "x"
op = ">="
bound = 1
kind = "quality"
requires = ["no/such/file.json"]
"#
    );
    let path = db.path("targets.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn targets(db: &TestDb, file: &str, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["--json", "bench", "targets", "--targets", file];
    all.extend_from_slice(args);
    let out = db.run(&all);
    let report = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
    (out.status.code().unwrap(), report)
}

fn statuses(report: &serde_json::Value) -> Vec<(String, String)> {
    report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["target"].as_str().unwrap().to_string(),
                t["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn held_missed_refused_errors_and_skips_set_the_exit_code_and_are_recorded() {
    let db = TestDb::new();
    let file = targets_file(&db);

    // Everything: a bench that cannot run, and (in this debug build) a refused speed target.
    let (code, all) = targets(&db, &file, &["--quick"]);
    assert_eq!(code, 2, "{all}");
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let expected_fast = match all["provenance"]["debug_build"].as_bool().unwrap() {
        true => "refused",
        false => "held",
    };
    assert_eq!(
        statuses(&all),
        pairs(&[
            ("judge-safe", "held"),
            ("impossible", "missed"),
            ("fast-pairs", expected_fast),
            ("broken", "error"),
            ("needs-data", "skipped"),
        ])
    );
    let rows = all["targets"].as_array().unwrap();
    assert!(
        rows[3]["reason"]
            .as_str()
            .unwrap()
            .contains("no-such-bench")
    );
    assert!(
        rows[4]["reason"]
            .as_str()
            .unwrap()
            .contains("no/such/file.json")
    );
    // The relative bound is the factor times the other figure: cases judged.
    assert!(rows[1]["bound"].as_f64().unwrap() > 10.0, "{}", rows[1]);
    assert_eq!(rows[0]["value"], 0.0);
    let provenance = &all["provenance"];
    for field in ["cpu", "kernel", "profile", "commit"] {
        assert!(
            !provenance[field].as_str().unwrap().is_empty(),
            "{field}: {provenance}"
        );
    }

    // A missed target alone: 1. Held alone: 0. A speed target judged when asked.
    let (code, _) = targets(&db, &file, &["--quick", "--only", "judge-safe,impossible"]);
    assert_eq!(code, 1);
    let (code, _) = targets(&db, &file, &["--quick", "--only", "judge-safe"]);
    assert_eq!(code, 0);
    let (code, fast) = targets(
        &db,
        &file,
        &["--quick", "--only", "fast-pairs", "--allow-debug"],
    );
    assert_eq!(
        (code, statuses(&fast)),
        (0, pairs(&[("fast-pairs", "held")]))
    );

    // The table a person reads: a provenance line, a header, one line per target, the
    // reasons, and a tally.
    let out = db.run(&[
        "bench",
        "targets",
        "--targets",
        &file,
        "--quick",
        "--only",
        "judge-safe,needs-data",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("CPU ") && lines[0].contains("quick scale"),
        "{text}"
    );
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(header, ["target", "bound", "figure", "status", "seconds"]);
    let judge: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(judge[..5], ["judge-safe", "<=", "0", "0", "held"], "{text}");
    assert!(lines[3].starts_with("needs-data") && lines[3].contains("skipped"));
    assert!(lines[4].starts_with("needs-data skipped: needs no/such/file.json"));
    assert!(lines[5].starts_with("1 held, 0 missed, 0 could not run, 0 refused, 1 skipped"));

    // Every run is in the history, with where it came from.
    let recorded = db.rows(
        "SELECT target, status, quick, cpu, kernel, profile, \"commit\" FROM bench_runs \
         WHERE target = 'judge-safe'",
    );
    assert_eq!(recorded.len(), 4, "{recorded:?}");
    assert!(
        recorded
            .iter()
            .all(|r| r["status"] == "held" && r["quick"] == true)
    );
    assert_eq!(db.count("bench_runs"), 5 + 2 + 1 + 1 + 2);

    // The generated table holds full-scale runs only: none yet, then the judge's.
    let md = db.path("BENCH.md");
    std::fs::write(&md, "# Figures\n\nWritten by hand.\n").unwrap();
    let out = db.run(&[
        "bench",
        "targets",
        "--targets",
        &file,
        "--no-run",
        "--markdown",
        &md,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(
        text.starts_with("# Figures\n\nWritten by hand.\n"),
        "{text}"
    );
    assert!(text.contains("No full-scale run recorded yet."), "{text}");
    let (code, _) = targets(&db, &file, &["--only", "judge-safe", "--markdown", &md]);
    assert_eq!(code, 0);
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("targets held."), "{text}");
    assert!(
        text.contains("| no destructive error | <= 0 | 0 | held |"),
        "{text}"
    );
    assert_eq!(text.matches("<!-- end of bench targets -->").count(), 1);

    // Another machine's history merges in: export there, import here.
    let other = TestDb::new();
    let history = db.path("history.jsonl");
    let out = db.run(&["export", "--table", "bench_runs", "-o", &history]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = other.run(&["import", "--table", "bench_runs", &history]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(other.count("bench_runs"), db.count("bench_runs"));

    // And the report charts it.
    let html = db.path("report.html");
    let out = db.run(&["--json", "report", "--html", &html]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(summary["bench_targets"], 5, "{summary}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Benchmark targets") && page.contains("all-pairs on 400 vectors"));
}

#[test]
fn a_bad_targets_file_or_name_is_refused_with_the_file_and_the_problem_named() {
    let db = TestDb::new();
    let path = db.path("bad.toml");
    std::fs::write(
        &path,
        "[[target]]\nname = \"a\"\ntitle = \"t\"\nrun = [\"bench\"]\nfigure = \"x\"\nop = \"=<\"\n\
         bound = 1\nkind = \"quality\"\n",
    )
    .unwrap();
    let out = db.run(&["bench", "targets", "--targets", &path]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("bad.toml") && err.contains("op '=<'"), "{err}");

    std::fs::write(&path, "[[target]]\nname = \"a\"\nspeed = 3\n").unwrap();
    let out = db.run(&["bench", "targets", "--targets", &path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("bad.toml"), "{}", stderr(&out));

    let out = db.run(&["bench", "targets", "--only", "no-such-target"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("no-such-target") && err.contains("judge-destructive"),
        "{err}"
    );
}

/// The shipped file: sound, and its cheap targets' figures are where it says (a renamed
/// report field would leave a target that can never be judged).
#[test]
fn the_shipped_targets_read_figures_their_benches_report() {
    let db = TestDb::new();
    let (code, report) = targets(
        &db,
        "benches/targets.toml",
        &[
            "--quick",
            "--allow-debug",
            "--no-record",
            "--only",
            "all-pairs-time,all-pairs-recall,judge-destructive,scores-1m,import-1m,import-1m-write,sql-group-by-1m",
        ],
    );
    let errors: Vec<_> = report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] == "error")
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(code < 2, "{report}");
    assert_eq!(db.count("bench_runs WHERE true"), 0, "--no-record");
}
