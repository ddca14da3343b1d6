//! `memlife summaries inject` on real Lance tables and a real context file: one block after
//! any number of runs, every other byte kept, the token budget (cl100k_base) never exceeded,
//! a version that changes only with the selection, relevance to the session.

use serde_json::Value;

use crate::common::{TestDb, stderr, stdout};

/// Consolidated summaries of user u (and what must never be chosen: an archived summary, a
/// weak one, a plain fact, another user's summary).
const MEMORIES: &str = r#"{"id":"s-parser","user_id":"u","text":"User rewrote the SQL parser of the billing service in Rust and keeps its grammar tests green","source":"consolidate","state":"active","confidence":0.9,"access_count":2,"created_at":"2025-05-01T00:00:00Z"}
{"id":"s-family","user_id":"u","text":"User has two children, Ada and Ben, and a cat called Miso","source":"consolidate","state":"active","confidence":0.85,"access_count":12,"created_at":"2025-03-01T00:00:00Z"}
{"id":"s-diet","user_id":"u","text":"User is vegetarian and avoids nuts","kind":"summary","state":"active","confidence":0.8,"access_count":0,"created_at":"2025-05-20T00:00:00Z"}
{"id":"s-old","user_id":"u","text":"User lived in Paris","source":"consolidate","state":"archived","tier":"archived","archived_at":"2025-04-01T00:00:00Z","confidence":0.9,"created_at":"2024-01-01T00:00:00Z"}
{"id":"s-weak","user_id":"u","text":"User might like jazz","source":"consolidate","state":"active","confidence":0.4,"created_at":"2025-05-25T00:00:00Z"}
{"id":"fact","user_id":"u","text":"User likes the SQL parser work","state":"active","created_at":"2025-05-26T00:00:00Z"}
{"id":"s-other","user_id":"w","text":"User w plays chess","source":"consolidate","state":"active","confidence":0.9,"created_at":"2025-05-26T00:00:00Z"}
"#;

const CONTEXT: &str =
    "# Project notes\r\n\nKeep   these bytes: tabs\there, ünïcödé, no newline at the end";

fn loaded() -> TestDb {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    std::fs::write(&file, MEMORIES).unwrap();
    for args in [
        vec!["import", file.as_str()],
        vec!["embed", "--embedder", "hash"],
    ] {
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    db
}

fn inject(db: &TestDb, context: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "--json",
        "summaries",
        "inject",
        "--user",
        "u",
        "--context",
        context,
        "--now",
        "2025-06-01T00:00:00Z",
    ];
    args.extend_from_slice(extra);
    let out = db.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

/// The file without its one block (and the block).
fn split(text: &str) -> (String, String) {
    let start = text
        .find("<memory_consolidated_summaries")
        .expect("a block");
    let end = text
        .find("</memory_consolidated_summaries>")
        .expect("closed")
        + "</memory_consolidated_summaries>".len();
    assert_eq!(
        text.matches("<memory_consolidated_summaries").count(),
        1,
        "exactly one block: {text}"
    );
    (
        format!("{}{}", &text[..start], &text[end..]),
        text[start..end].to_string(),
    )
}

fn ids(report: &Value) -> Vec<&str> {
    report["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect()
}

#[test]
fn any_number_of_runs_leave_one_block_and_every_other_byte() {
    let db = loaded();
    let context = db.path("CLAUDE.md");
    std::fs::write(&context, CONTEXT).unwrap();
    let first = inject(&db, &context, &[]);
    assert_eq!(first["written"], true);
    let mut chosen = ids(&first);
    chosen.sort();
    assert_eq!(chosen, ["s-diet", "s-family", "s-parser"], "{first}");
    let after_first = std::fs::read_to_string(&context).unwrap();
    let (rest, block) = split(&after_first);
    assert_eq!(
        rest,
        format!("{CONTEXT}\n\n"),
        "the file's bytes, then the block"
    );
    assert!(block.contains(&format!(
        "version=\"{}\"",
        first["version"].as_str().unwrap()
    )));
    assert!(block.contains("vegetarian") && !block.contains("Paris") && !block.contains("jazz"));

    // Runs with the same selection leave the file exactly as it was, whatever the clock.
    for later in ["2025-06-01T00:00:00Z", "2025-06-01T00:00:01Z"] {
        let out = db.run(&[
            "--json",
            "summaries",
            "inject",
            "--user",
            "u",
            "--context",
            &context,
            "--now",
            later,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let again: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(again["written"], false);
        assert_eq!(again["version"], first["version"], "a stable version");
        assert_eq!(std::fs::read_to_string(&context).unwrap(), after_first);
    }

    // A new summary changes the selection: a new version, still one block, in place.
    let more = db.path("more.jsonl");
    std::fs::write(
        &more,
        r#"{"id":"s-run","user_id":"u","text":"User trains for a marathon in October","source":"consolidate","state":"active","confidence":0.9,"created_at":"2025-05-30T00:00:00Z"}"#,
    )
    .unwrap();
    assert_eq!(db.run(&["import", &more]).status.code(), Some(0));
    // Text written after the block by someone else stays too.
    std::fs::write(&context, format!("{after_first}\nappended by hand\n")).unwrap();
    let changed = inject(&db, &context, &[]);
    assert_eq!(changed["written"], true);
    assert_ne!(changed["version"], first["version"]);
    assert!(ids(&changed).contains(&"s-run"));
    let (rest, block) = split(&std::fs::read_to_string(&context).unwrap());
    assert_eq!(rest, format!("{CONTEXT}\n\n\nappended by hand\n"));
    assert!(block.contains("marathon"));

    // --stdout prints the block the file holds.
    let out = db.run(&[
        "summaries",
        "inject",
        "--user",
        "u",
        "--context",
        &context,
        "--stdout",
        "--now",
        "2025-06-01T00:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim_end(), block);
}

#[test]
fn the_token_budget_is_never_exceeded() {
    let db = loaded();
    let context = db.path("context.md");
    let mut seen = Vec::new();
    for budget in ["2000", "130", "100", "80"] {
        let report = inject(&db, &context, &["--budget", budget]);
        let budget: usize = budget.parse().unwrap();
        let (_, block) = split(&std::fs::read_to_string(&context).unwrap());
        let counted = memlife::commands::summaries::tokens(&block);
        assert_eq!(
            report["tokens"], counted,
            "the report counts the block written"
        );
        assert!(
            counted <= budget,
            "{counted} tokens over a budget of {budget}"
        );
        seen.push(ids(&report).len());
    }
    assert_eq!(seen[0], 3);
    assert!(
        seen[3] < seen[0],
        "a small budget leaves summaries out: {seen:?}"
    );
    // A budget the wrapper alone exceeds: refused, the file untouched.
    let before = std::fs::read_to_string(&context).unwrap();
    let out = db.run(&[
        "summaries",
        "inject",
        "--user",
        "u",
        "--context",
        &context,
        "--budget",
        "40",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("over the budget of 40"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_to_string(&context).unwrap(), before);
    // --max caps the count.
    let report = inject(&db, &context, &["--max", "1"]);
    assert_eq!(ids(&report).len(), 1);
    assert_eq!(report["over_max"], 2);
}

#[test]
fn the_session_decides_what_ranks_first() {
    let db = loaded();
    let context = db.path("context.md");
    // By recency alone the diet summary (newest) leads; by activation the family one.
    let report = inject(&db, &context, &["--prioritize", "recency"]);
    assert_eq!(ids(&report)[0], "s-diet");
    let report = inject(&db, &context, &["--prioritize", "activation"]);
    assert_eq!(ids(&report)[0], "s-family");
    // Recalls count before `scores` writes their activations onto the rows.
    for day in 1..=11 {
        let now = format!("2025-06-{day:02}T09:00:00Z");
        let out = db.run(&[
            "--json",
            "recall",
            "billing service SQL parser grammar tests",
            "--user",
            "u",
            "--embedder",
            "hash",
            "--k",
            "1",
            "--now",
            &now,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let pending = db.scalar("SELECT activation FROM activations WHERE memory_id = 's-parser'");
    assert!(pending.contains(r#"\"access_count\":13"#), "{pending}");
    let report = inject(&db, &context, &["--prioritize", "activation"]);
    assert_eq!(ids(&report)[0], "s-parser", "{report}");
    // A session on the parser: the parser summary leads.
    let report = inject(
        &db,
        &context,
        &[
            "--project",
            "billing service SQL parser",
            "--file",
            "src/parser/grammar.rs",
            "--embedder",
            "hash",
        ],
    );
    assert_eq!(ids(&report)[0], "s-parser", "{report}");
    assert!(report["summaries"][0]["relevance"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_damaged_block_is_refused_with_its_line_and_nothing_is_written() {
    let db = loaded();
    let context = db.path("context.md");
    let damaged = "line one\nline two\n<memory_consolidated_summaries version=\"x\">\nno end";
    std::fs::write(&context, damaged).unwrap();
    let out = db.run(&["summaries", "inject", "--user", "u", "--context", &context]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("context.md") && err.contains("line 3"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&context).unwrap(), damaged);
}
