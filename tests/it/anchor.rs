//! `memlife anchor` on real Lance tables: a user's first narratives set the origin, later
//! ones move the live anchor a tenth of the way, drift is logged once it crosses a
//! threshold, a run with nothing new changes nothing, the origin is reset only when asked
//! (for one user), and undo puts the anchor back.

use crate::common::{TestDb, stderr, stdout};

/// Narratives of ana written directly (as `sessions` would), on two topics far apart in
/// hash space, and one of ben's.
fn narrative(id: &str, user: &str, day: u32, text: &str) -> String {
    format!(
        r#"{{"id":"{id}","user_id":"{user}","kind":"narrative","text":"{text}","created_at":"2026-03-{day:02}T10:00:00Z"}}"#
    )
}

fn import(db: &TestDb, lines: &[String]) {
    let file = db.path(&format!("n{}.jsonl", lines.len()));
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    for args in [
        vec!["import", file.as_str()],
        vec!["embed", "--embedder", "hash"],
    ] {
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
}

fn anchor(db: &TestDb, now: &str, extra: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "anchor", "--now", now];
    all.extend_from_slice(extra);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn drift(db: &TestDb, user: &str) -> f64 {
    db.rows(&format!(
        "SELECT drift FROM anchors WHERE user_id = '{user}'"
    ))[0]["drift"]
        .as_f64()
        .unwrap()
}

const GARDEN: &str = "Ana talked about her garden, tomatoes, roses and the compost heap.";
const CHESS: &str = "Ana played chess openings online and studied endgames with a coach.";

#[test]
fn the_anchor_starts_at_the_first_narratives_and_drifts_toward_new_ones_logged_when_it_crosses() {
    let db = TestDb::new();
    import(
        &db,
        &[
            narrative("g1", "ana", 1, GARDEN),
            narrative("g2", "ana", 2, GARDEN),
            narrative("x1", "ben", 2, CHESS),
        ],
    );
    let first = anchor(&db, "2026-03-03T00:00:00Z", &[]);
    assert_eq!(first["counts"]["origins_set"], 2, "{first}");
    assert_eq!(first["counts"]["narratives_folded"], 3);
    assert_eq!(drift(&db, "ana"), 0.0);
    // Nothing new: nothing changes.
    let idle = anchor(&db, "2026-03-04T00:00:00Z", &[]);
    assert_eq!(idle["counts"]["anchors_updated"], 0, "{idle}");

    // Ana's narratives turn to chess, one a day: the anchor moves a tenth of the way each
    // run, so drift grows run by run and crosses 0.2, then 0.4.
    let mut last = 0.0;
    let mut day = 3;
    while drift(&db, "ana") <= 0.4 {
        day += 1;
        assert!(day < 28, "drift stalled at {last}");
        import(&db, &[narrative(&format!("c{day}"), "ana", day, CHESS)]);
        let report = anchor(&db, &format!("2026-03-{day:02}T12:00:00Z"), &[]);
        assert_eq!(report["counts"]["anchors_updated"], 1, "{report}");
        let now = drift(&db, "ana");
        assert!(now > last, "drift grows: {last} then {now}");
        last = now;
    }
    let events: Vec<String> = db
        .rows("SELECT classification FROM audit_log WHERE operation = 'ANCHOR_DRIFT' ORDER BY created_at")
        .iter()
        .map(|r| r["classification"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events, ["warning", "critical"], "each crossing logged once");
    assert_eq!(drift(&db, "ben"), 0.0, "ben had nothing new");
    let anchors = db.rows("SELECT narratives, origin_at FROM anchors WHERE user_id = 'ana'");
    assert_eq!(anchors[0]["narratives"], (2 + day - 3) as i64);
    assert_eq!(
        anchors[0]["origin_at"], "2026-03-03T00:00:00Z",
        "the origin never moves"
    );

    // Undo of the last run puts the anchor back as it was.
    let out = db.run(&["undo", "--last", "anchor"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(drift(&db, "ana") < last);

    // Resetting the origin needs a user; for that user it is the mean of all narratives.
    let out = db.run(&["anchor", "--reset-origin"]);
    assert_ne!(
        out.status.code(),
        Some(0),
        "--reset-origin without --user is refused"
    );
    assert!(stderr(&out).contains("--user"), "{}", stderr(&out));
    let reset = anchor(
        &db,
        "2026-03-28T00:00:00Z",
        &["--reset-origin", "--user", "ana"],
    );
    assert_eq!(reset["counts"]["origins_set"], 1, "{reset}");
    assert_eq!(drift(&db, "ana"), 0.0);
    assert_eq!(
        db.count("audit_log WHERE operation = 'ANCHOR' AND classification = 'RESET'"),
        1
    );
}
