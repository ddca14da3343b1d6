//! Progress bars: drawn on a terminal for long work, never under cron, a pipe or `--json`
//! (schedulers read those byte for byte), and off on request (`MEMLIFE_PROGRESS=0`).

use crate::common::{TestDb, memlife_on_terminal, stderr, stdout};

/// A bar's line: the position over the total, as indicatif's template writes it.
const BAR: &str = "/6 ";

fn store() -> TestDb {
    let db = TestDb::new();
    let file = db.path("m.jsonl");
    let lines: String = (0..6)
        .map(|i| {
            format!(
                "{{\"id\":\"m{i}\",\"user_id\":\"ana\",\"text\":\"Ana's note number {i} about her garden.\"}}\n"
            )
        })
        .collect();
    std::fs::write(&file, lines).unwrap();
    assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    db
}

#[test]
fn a_terminal_gets_a_bar_and_nothing_else_does() {
    let db = store();
    let on_terminal = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["--db", db.uri.as_str()];
        args.extend_from_slice(extra);
        let out = memlife_on_terminal(&args, env);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    let drawn = on_terminal(&["embed", "--embedder", "hash", "--all"], &[]);
    assert!(drawn.contains(BAR), "no bar on a terminal: {drawn:?}");
    assert!(drawn.contains("embedded"), "the report follows: {drawn:?}");

    let json = on_terminal(&["--json", "embed", "--embedder", "hash", "--all"], &[]);
    assert!(!json.contains(BAR), "a bar in --json output: {json:?}");
    assert!(
        !json.contains('\u{1b}'),
        "escapes in --json output: {json:?}"
    );

    let off = on_terminal(
        &["embed", "--embedder", "hash", "--all"],
        &[("MEMLIFE_PROGRESS", "0")],
    );
    assert!(!off.contains(BAR), "MEMLIFE_PROGRESS=0 still drew: {off:?}");

    // Not a terminal (cron, Airflow, a pipe): plain text only.
    let piped = db.run(&["embed", "--embedder", "hash", "--all"]);
    assert_eq!(piped.status.code(), Some(0));
    for text in [stdout(&piped), stderr(&piped)] {
        assert!(!text.contains(BAR) && !text.contains('\u{1b}'), "{text:?}");
    }
}
