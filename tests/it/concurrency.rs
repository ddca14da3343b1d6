//! Two processes of one job on one database and user never run at once: the second is told
//! who runs (exit 2) and writes nothing; runs for other users, and other jobs, go side by side.
//! The first process is held at a crash point while the others start, so they provably overlap.

use crate::common::{Paused, TestDb, fixture, stderr};

fn db() -> TestDb {
    let db = TestDb::new();
    let out = db.run(&["import", &fixture("memories.jsonl").display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    db
}

const NOW: &str = "2025-07-01T00:00:00Z";

#[test]
fn a_second_run_of_a_job_is_refused_while_the_first_runs() {
    let db = db();
    for collision in 0..3 {
        let first = Paused::start(&db, &["scores", "--now", NOW], "scores.started");
        let pid = first.child.id();
        for args in [
            vec!["scores", "--now", NOW],
            vec!["scores", "--now", NOW, "--user", "alice"],
        ] {
            let out = db.run(&args);
            assert_eq!(
                out.status.code(),
                Some(2),
                "collision {collision}: {args:?}"
            );
            let message = stderr(&out);
            assert!(message.contains("scores is already running"), "{message}");
            assert!(message.contains(&format!("pid {pid}")), "{message}");
        }
        // Another job is not held up.
        let out = db.run(&["embed", "--embedder", "hash"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let first = first.finish();
        assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    }
    // Three runs, each recorded once, none abandoned; the refused ones wrote nothing.
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM runs WHERE job = 'scores' AND status = 'done'"),
        "3"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) AS n FROM runs WHERE job = 'scores' AND status != 'done'"),
        "0"
    );
}

#[test]
fn runs_for_different_users_go_side_by_side() {
    let db = db();
    let alice = Paused::start(
        &db,
        &["scores", "--now", NOW, "--user", "alice"],
        "scores.started",
    );
    let out = db.run(&["scores", "--now", NOW, "--user", "bob"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = db.run(&["scores", "--now", NOW, "--user", "alice"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = db.run(&["scores", "--now", NOW]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an all-users run waits for alice's"
    );
    let alice = alice.finish();
    assert_eq!(alice.status.code(), Some(0), "{}", stderr(&alice));
    let out = db.run(&["scores", "--now", NOW]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
