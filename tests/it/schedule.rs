//! The schedule as data: `memlife run-due` runs what is due by the cadences of a schedule file,
//! records it in `runs`, runs nothing twice in one slot, and names bad schedules.

use crate::common::{TestDb, stderr, stdout};

const SCHEDULE: &str = r#"
[settings]
db = "/unused"
config = "/unused"
logs = "/unused"

[[job]]
name = "scores"
run = "scores"
cadence = "daily at 03:30"
dag = "nightly"
about = "scores"

[[job]]
name = "stats"
run = "stats"
cadence = "weekly on sun at 06:00"
dag = "weekly"
about = "stats"
"#;

fn ran(db: &TestDb) -> Vec<String> {
    db.rows("SELECT job, params FROM runs WHERE job = 'scores' ORDER BY started_at")
        .iter()
        .map(|r| r["params"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn run_due_runs_each_entry_once_per_slot_at_the_schedule_clock() {
    let db = TestDb::new();
    let file = db.path("schedule.toml");
    std::fs::write(&file, SCHEDULE).unwrap();
    let run_due = |now: &str| {
        let out = db.run(&["run-due", "--file", &file, "--now", now]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    // Wednesday 10:00: both never ran, so both are due; scores runs at the clock given.
    let first = run_due("2026-03-04T10:00:00Z");
    assert!(
        first.contains("scores exited 0") && first.contains("stats exited 0"),
        "{first}"
    );
    let scores = ran(&db);
    assert_eq!(scores.len(), 1);
    assert!(scores[0].contains("2026-03-04T10:00:00"), "{scores:?}");
    // Later the same day nothing is due.
    assert!(run_due("2026-03-04T23:00:00Z").contains("nothing is due"));
    // The next morning after 03:30 scores is due again, stats (weekly) is not.
    let dry = db.run(&[
        "run-due",
        "--file",
        &file,
        "--now",
        "2026-03-05T04:00:00Z",
        "--dry-run",
    ]);
    assert!(stdout(&dry).contains("due: scores"), "{}", stdout(&dry));
    assert!(!stdout(&dry).contains("stats"), "{}", stdout(&dry));
    let next = run_due("2026-03-05T04:00:00Z");
    assert!(
        next.contains("scores exited 0") && !next.contains("stats"),
        "{next}"
    );
    assert_eq!(ran(&db).len(), 2);
    // run-due's own rows say what it started and at which clock.
    let rows = db.rows("SELECT status, params FROM runs WHERE job = 'run-due' ORDER BY started_at");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|r| r["status"] == "done"), "{rows:?}");
}

#[test]
fn run_due_starts_a_command_of_minutes_in_its_slot_minutes_and_records_no_row_for_it() {
    let db = TestDb::new();
    let file = db.path("schedule.toml");
    let text = SCHEDULE.replace(
        "cadence = \"weekly on sun at 06:00\"",
        "cadence = \"every 15 minutes\"",
    );
    std::fs::write(&file, text).unwrap();
    let run_due = |now: &str| {
        let out = db.run(&["run-due", "--file", &file, "--now", now]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    let rows = || db.scalar("SELECT COUNT(*) FROM runs WHERE job = 'run-due'");
    // Scores never ran: it is recorded, and stats (its slot's first minute) with it.
    let first = run_due("2026-03-04T10:00:20Z");
    assert!(
        first.contains("scores exited 0") && first.contains("stats exited 0"),
        "{first}"
    );
    assert_eq!(rows(), "1");
    // A minute later nothing is due, and nothing is written.
    assert!(run_due("2026-03-04T10:01:00Z").contains("nothing is due"));
    // The next slot's first minute starts stats alone, without a run-due row; later minutes
    // of the slot do not.
    let next = run_due("2026-03-04T10:15:30Z");
    assert!(
        next.contains("stats exited 0") && !next.contains("scores exited"),
        "{next}"
    );
    assert_eq!(rows(), "1");
    assert!(run_due("2026-03-04T10:16:00Z").contains("nothing is due"));
}

#[test]
fn bad_schedules_are_named() {
    let db = TestDb::new();
    let file = db.path("schedule.toml");
    for (text, says) in [
        (
            SCHEDULE.replace("daily at 03:30", "hourly"),
            "entry 'scores': \"hourly\" is not a cadence",
        ),
        (
            SCHEDULE.replace("run = \"stats\"", "run = \"tidy\""),
            "`memlife tidy` is not a memlife command",
        ),
        (
            SCHEDULE.replace("name = \"stats\"", "name = \"scores\""),
            "appears twice",
        ),
        (
            SCHEDULE.replace(
                "cadence = \"weekly on sun at 06:00\"",
                "cadence = \"weekly on sun at 6pm\"",
            ),
            "not a time of day",
        ),
        (
            SCHEDULE.replace("logs = \"/unused\"", "logs = \"/unused\"\nshards = 0"),
            "shards must be at least 1",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = db.run(&["run-due", "--file", &file]);
        assert_eq!(out.status.code(), Some(2));
        let error = stderr(&out);
        assert!(
            error.contains("schedule.toml") && error.contains(says),
            "{says}: {error}"
        );
    }
    std::fs::write(&file, SCHEDULE).unwrap();
    let out = db.run(&["run-due", "--file", &file, "--only", "nope"]);
    assert!(stderr(&out).contains("no entry 'nope'"), "{}", stderr(&out));
}

#[test]
fn the_dag_fans_per_user_jobs_out_over_the_shards() {
    let db = TestDb::new();
    let file = db.path("schedule.toml");
    let text = SCHEDULE.replace("logs = \"/unused\"", "logs = \"/unused\"\nshards = 3")
        + "\n[[job]]\nname = \"optimize\"\nrun = \"optimize\"\ncadence = \"weekly on sun at 07:00\"\ndag = \"weekly\"\nabout = \"optimize\"\n";
    std::fs::write(&file, text).unwrap();
    let out = db.run(&["schedule", "dag", "--file", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let dag = stdout(&out);
    assert!(dag.contains("SHARDS = 3"), "{dag}");
    // scores works per user: one mapped task per shard.
    assert!(
        dag.contains("task_id=\"scores\",\n    ).expand(")
            && dag.contains("scores --shard {i}/{SHARDS}\" for i in range(SHARDS)]"),
        "{dag}"
    );
    // stats is not a job and optimize works on whole tables: one task each.
    assert!(dag.contains("bash_command=f\"{MEMLIFE} stats\""), "{dag}");
    assert!(
        dag.contains("bash_command=f\"{MEMLIFE} optimize\""),
        "{dag}"
    );
    assert_eq!(dag.matches(".expand(").count(), 1, "{dag}");
    // Runs of a DAG never overlap: every DAG says so.
    assert_eq!(
        dag.matches("    max_active_runs=1,\n").count(),
        dag.matches("with DAG(").count()
    );
}
