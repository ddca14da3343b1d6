//! `memlife nightly` end to end: every step an ordinary run in pipeline order at one clock,
//! optimize only when due, `--steps` in pipeline order, a failing step reported with the
//! worst exit status (and the rest skipped under `--fail-fast`), bad step names refused.

use serde_json::Value;

use crate::common::{TestDb, stderr, stdout};

const MEMORIES: &str = r#"{"id":"a1","user_id":"ana","text":"Ana's sister Lina lives in Utrecht.","created_at":"2025-01-02T09:00:00Z"}
{"id":"a2","user_id":"ana","text":"Ana's sister Lina lives in Utrecht and works as a nurse.","created_at":"2025-01-05T09:00:00Z"}
{"id":"a3","user_id":"ana","text":"Ana drinks oat milk in her coffee.","created_at":"2025-01-06T09:00:00Z"}
{"id":"a4","user_id":"ana","text":"Ana now drinks almond milk in her coffee instead of oat milk.","created_at":"2025-02-06T09:00:00Z"}
{"id":"b1","user_id":"ben","text":"Ben plays the cello in an amateur orchestra.","created_at":"2025-01-03T09:00:00Z"}
"#;

fn store() -> TestDb {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(&file, MEMORIES).unwrap();
    let out = db.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    db
}

fn json(out: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(out), stderr(out)))
}

fn steps(report: &Value) -> Vec<(String, String)> {
    report["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            (
                s["step"].as_str().unwrap().to_string(),
                s["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn nightly_runs_every_step_as_its_own_run_and_optimize_when_due() {
    let db = store();
    let now = "2025-03-01T00:00:00Z";
    let out = db.run(&["--json", "nightly", "--embedder", "hash", "--now", now]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&out);
    let expected = [
        "embed",
        "sessions",
        "insights",
        "entities",
        "scores",
        "link",
        "cluster",
        "consolidate",
        "refine",
        "distill",
        "anchor",
        "prune",
        "entity-gc",
        "describe",
        "optimize",
    ];
    assert_eq!(
        steps(&report),
        expected
            .iter()
            .map(|s| (s.to_string(), "done".to_string()))
            .collect::<Vec<_>>(),
        "{report}"
    );
    // Each step is a run of its job, in order, at the pipeline's clock.
    for step in report["steps"].as_array().unwrap() {
        let run_id = step["run_id"].as_str().expect("a run id");
        let job = db.scalar(&format!("SELECT job FROM runs WHERE run_id = '{run_id}'"));
        assert_eq!(job, format!("\"{}\"", step["step"].as_str().unwrap()));
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM memories WHERE embedding IS NULL"),
        "0"
    );
    // Every step ran at the pipeline's clock (each run records its clock).
    for step in report["steps"].as_array().unwrap() {
        let run_id = step["run_id"].as_str().unwrap();
        let params: Value = serde_json::from_str(
            db.rows(&format!(
                "SELECT params FROM runs WHERE run_id = '{run_id}'"
            ))[0]["params"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            params["clock"], "2025-03-01T00:00:00+00:00",
            "{step}: {params}"
        );
    }
    assert_eq!(report["before"]["live_memories"], 5);
    assert!(report["after"]["links"].as_i64().unwrap() > 0, "{report}");

    // A day later a full optimize is not due: the light merge runs instead (it does not
    // count as the week's optimize); named, optimize runs in full.
    let out = db.run(&[
        "--json",
        "nightly",
        "--embedder",
        "hash",
        "--now",
        "2025-03-02T00:00:00Z",
    ]);
    let report = json(&out);
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["step"], "optimize");
    assert_eq!(last["status"], "done", "{last}");
    assert!(last["note"].as_str().unwrap().contains("light"), "{last}");
    let light_run = last["run_id"].as_str().unwrap();
    let params = db.rows(&format!(
        "SELECT params FROM runs WHERE run_id = '{light_run}'"
    ));
    assert!(
        params[0]["params"]
            .as_str()
            .unwrap()
            .contains(r#""light":true"#),
        "{params:?}"
    );
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'PRUNE_VERSIONS' \
             AND created_at > TIMESTAMP '2025-03-01T12:00:00Z'"
        ),
        "0",
        "no version is older than the window yet"
    );
    let out = db.run(&[
        "--json",
        "nightly",
        "--steps",
        "optimize,scores",
        "--now",
        "2025-03-02T00:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        steps(&json(&out)),
        [
            ("scores".to_string(), "done".to_string()),
            ("optimize".to_string(), "done".to_string())
        ],
        "named steps run in pipeline order"
    );
}

#[test]
fn a_failing_step_sets_the_exit_status_and_fail_fast_skips_the_rest() {
    let db = store();
    // The local model is not where the steps look: embed fails; scores does not embed.
    let missing = db.path("no-model");
    let run = |extra: &[&str]| {
        let mut command = crate::common::memlife_command();
        command
            .args(["--db", &db.uri, "--json", "nightly", "--embedder", "local"])
            .args(["--steps", "embed,scores", "--now", "2025-03-01T00:00:00Z"])
            .args(extra)
            .env("MEMLIFE_MODEL_DIR", &missing);
        command.output().expect("memlife runs")
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["status"], "failed");
    assert_eq!(
        steps(&report),
        [
            ("embed".to_string(), "failed".to_string()),
            ("scores".to_string(), "done".to_string())
        ]
    );
    let note = report["steps"][0]["note"].as_str().unwrap();
    assert!(
        note.contains("no-model"),
        "the error names the folder: {note}"
    );
    let out = run(&["--fail-fast"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(steps(&json(&out))[1].1, "skipped");
}

#[test]
fn nightly_names_bad_input() {
    let db = TestDb::new();
    let out = db.run(&["nightly", "--steps", "scores,tidy"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no step named 'tidy'"),
        "{}",
        stderr(&out)
    );
    let out = db.run(&["nightly", "--now", "yesterday-ish"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--now"), "{}", stderr(&out));
}
