//! `memlife report --html`: one self-contained page (no script, nothing fetched) whose charts
//! carry the store's own figures per day of the runs' clocks; tiers survive `optimize`
//! removing old versions (from the scores runs' counts); an empty store and an unwritable
//! path get a page and a named error.

use serde_json::Value;

use crate::common::{TestDb, stderr, stdout};

const MEMORIES: &str = r#"{"id":"a1","user_id":"ana","text":"Ana's sister Lina lives in Utrecht.","created_at":"2025-01-02T09:00:00Z"}
{"id":"a2","user_id":"ana","text":"Ana drinks oat milk in her coffee.","created_at":"2025-01-06T09:00:00Z","last_accessed_at":"2025-02-27T09:00:00Z"}
{"id":"a3","user_id":"ana","text":"Ana keeps bees on her allotment.","created_at":"2025-02-20T09:00:00Z","last_accessed_at":"2025-02-28T09:00:00Z","importance":0.9}
{"id":"b1","user_id":"ben","text":"Ben plays the cello in an amateur orchestra.","created_at":"2024-06-03T09:00:00Z"}
"#;

fn report(db: &TestDb) -> (Value, String) {
    let page = db.path("report.html");
    let out = db.run(&["--json", "report", "--html", &page]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary: Value = serde_json::from_str(&stdout(&out)).unwrap();
    (summary, std::fs::read_to_string(&page).unwrap())
}

/// The count a tier's point shows on a day.
fn tier_point(page: &str, tier: &str, day: &str) -> Option<i64> {
    let marker = format!("<title>{tier} {day}: ");
    let start = page.find(&marker)? + marker.len();
    page[start..].split('<').next()?.parse().ok()
}

#[test]
fn the_page_is_self_contained_and_charts_the_stores_own_figures() {
    let db = TestDb::new();
    let (_, empty) = report(&db);
    assert!(empty.contains("No finished runs yet"), "{empty}");

    let file = db.path("m.jsonl");
    std::fs::write(&file, MEMORIES).unwrap();
    assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    for day in ["2025-03-01", "2025-03-02"] {
        let now = format!("{day}T00:00:00Z");
        let out = db.run(&[
            "nightly",
            "--steps",
            "embed,scores,link",
            "--embedder",
            "hash",
            "--now",
            &now,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let (summary, page) = report(&db);
    // Nothing to fetch, nothing to run: it opens offline, anywhere.
    for banned in ["<script", "src=", "href=", "@import", "url("] {
        assert!(!page.contains(banned), "{banned} in the page");
    }
    assert_eq!(
        page.matches("http").count(),
        page.matches("http://www.w3.org/2000/svg").count(),
        "only the SVG namespace names a URL"
    );
    for title in [
        "Memories per tier",
        "Memories per state",
        "What the jobs did per day",
        "Run time per day, by job",
        "Latest runs",
        "Storage per table",
    ] {
        assert!(page.contains(title), "{title} missing");
    }
    let days: Vec<&str> = vec!["2025-03-01", "2025-03-02"];
    for day in &days {
        assert!(
            page.contains(&format!(">{day}</text>")),
            "{day} not on the axis"
        );
    }
    // The last day's tiers are the table's tiers now.
    for tier in ["hot", "warm", "cold", "archived"] {
        let now: i64 = db
            .scalar(&format!(
                "SELECT COUNT(*) AS n FROM memories WHERE tier = '{tier}'"
            ))
            .parse()
            .unwrap();
        assert_eq!(
            tier_point(&page, tier, "2025-03-02"),
            Some(now),
            "{tier} on the last day"
        );
    }
    assert_eq!(summary["days_from_versions"], summary["days"], "{summary}");

    // Versions gone: the tiers of those days come from the scores runs' counts.
    let out = db.run(&[
        "optimize",
        "--keep-versions-days",
        "0",
        "--now",
        "2025-03-03T00:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (after, page) = report(&db);
    assert!(
        after["days_from_versions"].as_i64() < summary["days_from_versions"].as_i64(),
        "{after}"
    );
    let scored: Value =
        serde_json::from_str(
            db.rows("SELECT counts FROM runs WHERE job = 'scores' ORDER BY started_at LIMIT 1")[0]
                ["counts"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(
        tier_point(&page, "cold", "2025-03-01"),
        scored["tier_cold"].as_i64(),
        "day 1's cold count from its scores run"
    );
}

#[test]
fn an_unwritable_path_is_a_named_error() {
    let db = TestDb::new();
    let page = db.path("no-such-folder/report.html");
    let out = db.run(&["report", "--html", &page]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(&page), "{}", stderr(&out));
}
