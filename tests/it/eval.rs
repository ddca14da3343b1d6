//! `memlife eval judge` on our own labelled pairs (`data/eval/`, real everyday wording, not
//! synth templates): the report a user reads to decide whether to trust the offline judge,
//! and the judge's promise that it destroys nothing it is unsure of.

use serde_json::Value;

use crate::common::{memlife, stderr, stdout};

fn pairs(name: &str) -> String {
    format!("{}/data/eval/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn eval(extra: &[&str]) -> Value {
    let integrate = pairs("integrate.jsonl");
    let link = pairs("link.jsonl");
    let mut args = vec![
        "--json",
        "eval",
        "judge",
        "--embedder",
        "hash",
        "--pairs",
        &integrate,
        "--pairs",
        &link,
    ];
    args.extend_from_slice(extra);
    let out = memlife(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn the_offline_judge_on_our_pairs_makes_no_destructive_integration_error() {
    let report = eval(&[]);
    assert_eq!(report["judge"], "offline");
    let tasks = report["tasks"].as_array().unwrap();
    let integrate = &tasks[0];
    assert_eq!(integrate["task"], "integrate.classify");
    assert_eq!(integrate["pairs"], 120);
    // Both halves reported, and together they are all the pairs.
    let dev = integrate["dev"]["pairs"].as_u64().unwrap();
    let held_out = integrate["held_out"]["pairs"].as_u64().unwrap();
    assert_eq!(dev + held_out, 120);
    assert!(dev > 30 && held_out > 30, "{dev} / {held_out}");
    // A distinct or outdated fact is never folded into another.
    assert_eq!(
        integrate["all"]["destructive_errors"], 0,
        "{:#}",
        integrate["errors"]
    );
    // Every error is listed with both texts; the confusion matrix adds up.
    let errors = integrate["errors"].as_array().unwrap();
    let correct = integrate["all"]["correct"].as_u64().unwrap();
    assert_eq!(errors.len() as u64 + correct, 120);
    assert!(
        errors
            .iter()
            .all(|e| e["first"].is_string() && e["second"].is_string())
    );
    let confusion = integrate["all"]["confusion"].as_object().unwrap();
    let total: u64 = confusion
        .values()
        .flat_map(|row| row.as_object().unwrap().values())
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(total, 120);
    // The similarity table: a row per class, a share per threshold.
    let table = integrate["similarity"].as_array().unwrap();
    assert_eq!(table.len(), 4);
    assert!(
        table
            .iter()
            .all(|row| row["reaching"].as_array().unwrap().len() == 7)
    );
}

#[test]
fn the_offline_links_it_makes_on_our_pairs_are_right() {
    let report = eval(&["--no-similarity"]);
    let link = &report["tasks"][1];
    assert_eq!(link["task"], "link.classify");
    assert_eq!(link["pairs"], 77);
    assert!(link["similarity"].is_null());
    // At most one wrong link in 77 pairs, and every type it emits at least 0.9 precise.
    assert!(
        link["all"]["destructive_errors"].as_u64().unwrap() <= 1,
        "{:#}",
        link["errors"]
    );
    for class in link["all"]["classes"].as_array().unwrap() {
        if class["label"] != "null" && class["judged"].as_u64().unwrap() > 0 {
            assert!(
                class["precision"].as_f64().unwrap() >= 0.9,
                "{} precision: {class}",
                class["label"]
            );
        }
    }
}

#[test]
fn a_bad_pair_is_refused_naming_its_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pairs.jsonl");
    std::fs::write(
        &file,
        "{\"old\": \"A\", \"new\": \"B\", \"label\": \"COEXIST\"}\n{\"old\": \"A\", \"new\": \"B\", \"label\": \"SAME\"}\n",
    )
    .unwrap();
    let out = memlife(&[
        "eval",
        "judge",
        "--no-similarity",
        "--pairs",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("line 2") && err.contains("label") && err.contains("SAME"),
        "{err}"
    );
}
