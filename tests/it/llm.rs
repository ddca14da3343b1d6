//! The LLM layer against `memlife mock-llm` over real HTTP on loopback: Retry-After backoff,
//! provider fallback, malformed replies, the Batch API path applied exactly once (also after a
//! crash between download and apply, and with two polls at once), and what logs may show.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Instant;

use serde_json::Value;

use crate::common::{TestDb, stderr, stdout};
use crate::reports::redact;

/// A mock server process, killed when dropped.
pub struct Mock {
    child: Child,
    pub url: String,
}

impl Mock {
    pub fn start(extra: &[&str]) -> Mock {
        let mut child = crate::common::memlife_command()
            .args(["mock-llm", "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("mock-llm starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .rsplit(' ')
            .next()
            .expect("address line")
            .to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{line}");
        Mock { child, url }
    }

    pub fn with_script(db: &TestDb, faults: &str) -> Mock {
        let path = db.path("faults.json");
        std::fs::write(&path, faults).unwrap();
        Mock::start(&["--script", &path])
    }

    pub fn stats(&self) -> Value {
        let address = self
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/v1");
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        use std::io::{Read, Write};
        write!(
            stream,
            "GET /mock/stats HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        // The server keeps connections alive: read the head, then exactly the body.
        let mut reader = BufReader::new(&mut stream);
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        text.push_str(&String::from_utf8_lossy(&body));
        serde_json::from_str(&text).unwrap()
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const MEMORIES: &str = r#"{"id":"m1","user_id":"u1","text":"User uses Pinecone for vector search.","created_at":"2025-01-01T00:00:00Z"}
{"id":"m2","user_id":"u1","text":"User moved to pgvector for vector search.","created_at":"2025-03-01T00:00:00Z"}
{"id":"m3","user_id":"u1","text":"User has a dog named Biscuit.","created_at":"2025-02-01T00:00:00Z"}
"#;

/// A database with `n` (2 or 3) embedded memories of one user: n(n-1)/2 pairs to judge.
fn db_with_memories(n: usize) -> TestDb {
    let db = TestDb::new();
    let file = db.path("memories.jsonl");
    let lines: Vec<&str> = MEMORIES.lines().take(n).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    let out = db.run(&["embed", "--embedder", "hash"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    db
}

fn write_config(db: &TestDb, providers: &str, roles: &str) -> String {
    let path = db.path("memlife.toml");
    std::fs::write(&path, format!("{providers}\n[roles]\n{roles}\n")).unwrap();
    path
}

pub fn mock_provider(name: &str, url: &str, extra: &str) -> String {
    format!(
        "[providers.{name}]\nbase_url = \"{url}\"\nmodel = \"mock-model\"\nbatch = true\ninitial_backoff_secs = 0.01\n\
         input_price_per_million = 1.0\noutput_price_per_million = 2.0\n{extra}\n"
    )
}

/// A config (in the database's folder) whose `fast` and `reasoning` roles are the one mock.
pub fn both_roles_config(db: &TestDb, mock: &Mock) -> String {
    write_config(
        db,
        &mock_provider("mock", &mock.url, ""),
        "fast = [\"mock\"]\nreasoning = [\"mock\"]",
    )
}

/// A config whose `fast` role is the one mock provider.
fn single_mock_config(db: &TestDb, mock: &Mock) -> String {
    write_config(
        db,
        &mock_provider("mock", &mock.url, ""),
        "fast = [\"mock\"]",
    )
}

/// Runs `link` with the config, all pairs judged; returns (exit code, JSON report, stderr).
fn link(db: &TestDb, config: &str, extra: &[&str]) -> (Option<i32>, Value, String) {
    let mut args = vec![
        "--json",
        "--config",
        config,
        "link",
        "--llm",
        "providers",
        "--min-score",
        "-1",
    ];
    args.extend_from_slice(extra);
    let out = db.run(&args);
    let report = serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null);
    (out.status.code(), report, stderr(&out))
}

#[test]
fn a_429_with_retry_after_is_waited_out_and_counted() {
    let db = db_with_memories(2);
    let mock = Mock::with_script(&db, r#"[{"status":429,"retry_after":1}]"#);
    let config = single_mock_config(&db, &mock);
    let started = Instant::now();
    let (code, report, err) = link(&db, &config, &[]);
    assert_eq!(code, Some(0), "{err}");
    // The server asked for 1 s; the configured backoff alone would have been 10 ms.
    assert!(
        started.elapsed().as_secs_f64() >= 1.0,
        "Retry-After was not honoured"
    );
    let mock_usage = &report["llm"]["providers"]["mock"];
    assert_eq!(mock_usage["retries"], 1, "{report}");
    assert_eq!(mock_usage["requests"], 2);
    assert_eq!(mock_usage["served"], 1);
    assert!(mock_usage["input_tokens"].as_u64().unwrap() > 0);
    assert!(mock_usage["estimated_cost_usd"].as_f64().unwrap() > 0.0);
    assert_eq!(mock.stats()["chat"], 2);
    assert_eq!(db.scalar("SELECT link_type FROM links"), "\"supersedes\"");
    let usage: Value = serde_json::from_str(
        serde_json::from_str::<String>(&db.scalar("SELECT llm_usage FROM runs WHERE job = 'link'"))
            .unwrap()
            .as_str(),
    )
    .unwrap();
    assert_eq!(
        usage["providers"]["mock"]["retries"], 1,
        "runs.llm_usage records the accounting"
    );
}

#[test]
fn a_dead_provider_hands_its_calls_to_the_next_in_the_chain() {
    let db = db_with_memories(3);
    let mock = Mock::start(&[]);
    let providers = format!(
        "{}{}",
        mock_provider("dead", "http://127.0.0.1:9/v1", "max_retries = 1"),
        mock_provider("mock", &mock.url, "")
    );
    let config = write_config(&db, &providers, "fast = [\"dead\", \"mock\"]");
    let (code, report, err) = link(&db, &config, &[]);
    assert_eq!(code, Some(0), "{err}");
    let providers = &report["llm"]["providers"];
    assert_eq!(providers["mock"]["served"], 3, "{report}");
    assert_eq!(providers["dead"]["served"], 0);
    assert!(providers["dead"]["failed_calls"].as_u64().unwrap() >= 1);
    assert_eq!(report["counts"]["pairs_judged"], 3);
}

#[test]
fn malformed_replies_are_retried_once_then_fail_safely_and_are_judged_again_later() {
    let db = db_with_memories(2);
    let mock = Mock::with_script(&db, r#"[{"malformed":true},{"malformed":true}]"#);
    let config = single_mock_config(&db, &mock);
    let (code, report, _) = link(&db, &config, &[]);
    assert_eq!(
        code,
        Some(1),
        "a failed item makes the run partial: {report}"
    );
    assert!(
        report["failures"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("invalid reply")
    );
    assert_eq!(report["llm"]["providers"]["mock"]["invalid_replies"], 2);
    assert_eq!(db.count("links"), 0, "the safe default makes no link");
    assert_eq!(
        db.scalar("SELECT classification FROM audit_log WHERE operation = 'LINK'"),
        "\"FAILED\""
    );
    // The script is spent: the next run asks again and gets a valid reply.
    let (code, report, _) = link(&db, &config, &[]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["counts"]["pairs_judged"], 1);
    assert_eq!(db.count("links"), 1);
}

fn batch_state(db: &TestDb) -> (String, i64, i64) {
    let status: String =
        serde_json::from_str(&db.scalar("SELECT status FROM llm_batches")).unwrap();
    let audits = db
        .scalar("SELECT COUNT(*) FROM audit_log WHERE operation = 'LINK'")
        .parse()
        .unwrap();
    (status, audits, db.count("links"))
}

pub fn poll(
    db: &TestDb,
    config: &str,
    extra: &[&str],
    env: Option<(&str, &str)>,
) -> (Option<i32>, Value) {
    let mut command = crate::common::memlife_command();
    command
        .args([
            "--db", &db.uri, "--json", "--config", config, "batches", "poll",
        ])
        .args(extra);
    if let Some((k, v)) = env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    (
        out.status.code(),
        serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null),
    )
}

#[test]
fn a_batch_is_applied_exactly_once_even_after_a_crash_between_download_and_apply() {
    let db = db_with_memories(3);
    let mock = Mock::start(&[]);
    let config = single_mock_config(&db, &mock);
    let (code, report, err) = link(&db, &config, &["--mode", "batch"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(report["counts"]["items_submitted"], 3);
    assert_eq!(
        batch_state(&db),
        ("submitted".into(), 0, 0),
        "submitting applies nothing"
    );

    // The poller dies after claiming and downloading.
    let (code, _) = poll(
        &db,
        &config,
        &[],
        Some(("MEMLIFE_FAULT", "batches.poll.after-download")),
    );
    assert_eq!(code, None, "the poller dies by a signal, with no exit code");
    assert_eq!(batch_state(&db), ("applying".into(), 0, 0));
    // A fresh claim is respected while its lease runs...
    let (code, report) = poll(&db, &config, &[], None);
    assert_eq!(code, Some(0));
    assert_eq!(report["counts"]["applied"], 0, "{report}");
    // ...and taken over once it is stale.
    let (code, report) = poll(&db, &config, &["--lease-secs", "0"], None);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["counts"]["applied"], 1);
    assert_eq!(report["counts"]["items_applied"], 3);
    let (status, audits, links) = batch_state(&db);
    assert_eq!((status.as_str(), audits), ("applied", 3));
    assert_eq!(
        links,
        report["counts"]["links_supersedes"].as_i64().unwrap_or(0)
    );
    // Polling again finds nothing and changes nothing.
    let (code, report) = poll(&db, &config, &["--lease-secs", "0"], None);
    assert_eq!(code, Some(0));
    assert_eq!(report["notes"][0], "no batch to poll");
    assert_eq!(batch_state(&db), ("applied".into(), 3, links));
    // The same pairs are not submitted again.
    let (_, report, _) = link(&db, &config, &["--mode", "batch"]);
    assert_eq!(report["counts"]["pairs_to_judge"], 0);
    assert_eq!(mock.stats()["batches_created"], 1);
}

#[test]
fn two_polls_at_once_apply_a_batch_once() {
    let db = db_with_memories(3);
    let mock = Mock::start(&[]);
    let config = single_mock_config(&db, &mock);
    let (code, _, err) = link(&db, &config, &["--mode", "batch"]);
    assert_eq!(code, Some(0), "{err}");
    // The first poller has claimed and downloaded the batch and is held there...
    let first = crate::common::Paused::start(
        &db,
        &["--json", "--config", &config, "batches", "poll"],
        "batches.poll.after-download",
    );
    // ...while a second one starts: it must not apply anything, and says who is polling.
    let (code, _) = poll(&db, &config, &["--lease-secs", "0"], None);
    assert_eq!(
        code,
        Some(2),
        "a second poller is refused while the first runs"
    );
    assert_eq!(batch_state(&db), ("applying".into(), 0, 0));
    let first = first.finish();
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let report: Value = serde_json::from_str(&stdout(&first)).unwrap();
    assert_eq!(report["counts"]["applied"], 1, "{report}");
    let links = report["counts"]["links_supersedes"].as_i64().unwrap_or(0);
    assert!(links >= 1, "{report}");
    // Exactly one application: 3 audit rows, and the links the report counted.
    assert_eq!(batch_state(&db), ("applied".into(), 3, links));
    let (code, report) = poll(&db, &config, &["--lease-secs", "0"], None);
    assert_eq!(code, Some(0));
    assert_eq!(report["notes"][0], "no batch to poll");
    assert_eq!(batch_state(&db), ("applied".into(), 3, links));
}

/// Two hosts polling one database on shared storage: each host's job lock is its own (here:
/// a `file://` URI puts the lock under `$HOME`, and each "host" has its own `HOME`), so only
/// the claim's lease keeps them apart. A claim must stay fresh for as long as its poller is
/// applying, however long that takes.
#[test]
fn a_claim_stays_fresh_while_its_poller_applies_so_another_host_waits() {
    let db = db_with_memories(3);
    let mock = Mock::start(&[]);
    let config = single_mock_config(&db, &mock);
    let (code, _, err) = link(&db, &config, &["--mode", "batch"]);
    assert_eq!(code, Some(0), "{err}");
    let shared_uri = format!("file://{}", db.uri);
    let host = |name: &str| {
        let home = db.dir.path().join(name);
        std::fs::create_dir_all(&home).unwrap();
        let mut command = crate::common::memlife_command();
        command.env("HOME", home).args([
            "--db",
            &shared_uri,
            "--json",
            "--config",
            &config,
            "batches",
            "poll",
            "--lease-secs",
            "1",
        ]);
        command
    };
    // Host A has claimed the batch and is applying it, slowly: three leases long.
    let first = crate::common::Paused::spawn(&db, host("host-a"), "batches.poll.applying");
    std::thread::sleep(std::time::Duration::from_millis(3500));
    // Host B polls meanwhile: the claim is fresh, so it leaves the batch alone.
    let second = host("host-b").output().unwrap();
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let report: Value = serde_json::from_str(&stdout(&second)).unwrap();
    assert_eq!(
        report["counts"]["applied"], 0,
        "host B took over a claim whose poller was still applying: {report}"
    );
    assert_eq!(batch_state(&db), ("applying".into(), 0, 0));
    let first = first.finish();
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let report: Value = serde_json::from_str(&stdout(&first)).unwrap();
    assert_eq!(report["counts"]["applied"], 1, "{report}");
    let links = report["counts"]["links_supersedes"].as_i64().unwrap_or(0);
    assert_eq!(batch_state(&db), ("applied".into(), 3, links));
}

/// A claim that fails for a reason other than a lost race (here the table's folder has
/// become unwritable under the poller) is an error the operator sees, not "claimed by
/// another poller" and a clean exit.
#[test]
fn a_claim_that_fails_on_io_is_reported_not_taken_for_a_lost_race() {
    let db = db_with_memories(3);
    let mock = Mock::start(&[]);
    let config = single_mock_config(&db, &mock);
    let (code, _, err) = link(&db, &config, &["--mode", "batch"]);
    assert_eq!(code, Some(0), "{err}");
    // One poll moves the batch to ready; the next is held just before it claims.
    let (code, report) = poll(
        &db,
        &config,
        &[],
        Some(("MEMLIFE_FAULT", "batches.poll.before-claim")),
    );
    assert_eq!(code, None, "{report}");
    let paused = crate::common::Paused::start(
        &db,
        &["--json", "--config", &config, "batches", "poll"],
        "batches.poll.before-claim",
    );
    let table = std::path::Path::new(&db.uri).join("llm_batches.lance");
    let aside = std::path::Path::new(&db.uri).join("llm_batches.lance.aside");
    std::fs::rename(&table, &aside).unwrap();
    std::fs::write(&table, "not a folder").unwrap();
    let out = paused.finish();
    std::fs::remove_file(&table).unwrap();
    std::fs::rename(&aside, &table).unwrap();
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null);
    assert_ne!(out.status.code(), Some(0), "{report} {}", stderr(&out));
    assert_eq!(
        report["counts"]["skipped_claimed_elsewhere"], 0,
        "an I/O error was taken for another poller's claim: {report}"
    );
    let errors = report["failures"].to_string() + &report["error"].to_string() + &stderr(&out);
    assert!(
        errors.contains("llm_batches"),
        "the error names the table: {errors}"
    );
    // Nothing was applied, and the next poll applies the batch.
    assert_eq!(batch_state(&db), ("ready".into(), 0, 0));
    let (code, report) = poll(&db, &config, &[], None);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["counts"]["applied"], 1, "{report}");
}

#[test]
fn keys_and_prompts_stay_out_of_logs() {
    let db = db_with_memories(2);
    let mock = Mock::with_script(&db, r#"[{"status":500},{"malformed":true}]"#);
    let config = write_config(
        &db,
        &mock_provider("mock", &mock.url, "api_key_env = \"MEMLIFE_TEST_KEY\""),
        "fast = [\"mock\"]",
    );
    for level in ["warn", "info"] {
        let out = crate::common::memlife_command()
            .args([
                "--db",
                &db.uri,
                "--config",
                &config,
                "link",
                "--llm",
                "providers",
                "--min-score",
                "-1",
            ])
            .env("MEMLIFE_TEST_KEY", "sk-test-secret-4242")
            .env("MEMLIFE_LOG", level)
            .output()
            .unwrap();
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            !all.contains("sk-test-secret-4242"),
            "key leaked at {level}: {all}"
        );
        assert!(
            !all.contains("Pinecone"),
            "prompt text leaked at {level}: {all}"
        );
    }
    // Without the key variable the run stops before any call, naming the variable.
    let out = db.run(&["--config", &config, "link", "--llm", "providers"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("MEMLIFE_TEST_KEY"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_offline_judge_needs_no_network_and_says_so() {
    let db = db_with_memories(3);
    let out = db.run(&["--json", "link", "--min-score", "-1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["llm"]["judge"], "offline");
    assert_eq!(report["llm"]["providers"]["offline"]["served"], 3);
    assert_eq!(
        db.scalar("SELECT source_id FROM links WHERE link_type = 'supersedes'"),
        "\"m2\""
    );
    // Batch mode needs real providers.
    let out = db.run(&["link", "--mode", "batch"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--llm providers"));
}

#[test]
fn failed_batches_are_resubmitted_and_old_records_cleaned_up() {
    let db = db_with_memories(2);
    let mock = Mock::start(&["--fail-batches", "1"]);
    let config = single_mock_config(&db, &mock);
    let (code, _, err) = link(&db, &config, &["--mode", "batch"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, report) = poll(&db, &config, &[], None);
    assert_eq!(code, Some(0));
    assert_eq!(report["counts"]["failed_remotely"], 1, "{report}");
    assert_eq!(batch_state(&db).0, "failed");
    // retry resubmits from the stored items; the next poll applies.
    let out = db.run(&["--json", "--config", &config, "batches", "retry"]);
    let retried: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(retried["counts"]["resubmitted"], 1, "{retried}");
    assert_eq!(db.scalar("SELECT attempts FROM llm_batches"), "2");
    let (_, report) = poll(&db, &config, &[], None);
    assert_eq!(report["counts"]["applied"], 1, "{report}");
    assert_eq!(batch_state(&db).1, 1);
    assert_eq!(mock.stats()["batches_created"], 2);
    // cleanup: recent records stay; with 0 days they go, audited first, files deleted.
    let out = db.run(&["--json", "--config", &config, "batches", "cleanup"]);
    let kept: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(kept["counts"]["records_deleted"], 0);
    let out = db.run(&[
        "--json",
        "--config",
        &config,
        "batches",
        "cleanup",
        "--older-than-days",
        "0",
    ]);
    let cleaned: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(cleaned["counts"]["records_deleted"], 1, "{cleaned}");
    assert!(cleaned["counts"]["remote_files_deleted"].as_u64().unwrap() >= 2);
    assert_eq!(db.count("llm_batches"), 0);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM audit_log WHERE operation = 'BATCH_CLEANUP'"),
        "1"
    );
    assert!(mock.stats()["files_deleted"].as_u64().unwrap() >= 2);
}

#[test]
fn batch_cycle_reports_are_pinned() {
    let db = db_with_memories(3);
    let mock = Mock::start(&[]);
    let config = single_mock_config(&db, &mock);
    let run = |args: &[&str]| -> Value {
        let mut all = vec!["--json", "--config", config.as_str()];
        all.extend_from_slice(args);
        let out = db.run(&all);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    };
    let submitted = run(&[
        "link",
        "--llm",
        "providers",
        "--min-score",
        "-1",
        "--mode",
        "batch",
    ]);
    insta::assert_snapshot!("link_batch_submit", redact(submitted));
    let polled = run(&["batches", "poll"]);
    insta::assert_snapshot!("batches_poll_applied", redact(polled));
    let retried = run(&["batches", "retry"]);
    insta::assert_snapshot!("batches_retry", redact(retried));
    let cleaned = run(&["batches", "cleanup", "--older-than-days", "0"]);
    insta::assert_snapshot!("batches_cleanup", redact(cleaned));
}

#[test]
fn one_poll_applying_two_batches_counts_each_call_once() {
    let db = TestDb::new();
    let file = db.path("two-users.jsonl");
    let second_user = MEMORIES.replace("\"u1\"", "\"u2\"").replace("\"m", "\"n");
    std::fs::write(&file, format!("{MEMORIES}{second_user}")).unwrap();
    assert_eq!(db.run(&["import", &file]).status.code(), Some(0));
    let out = db.run(&["embed", "--embedder", "hash"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mock = Mock::start(&[]);
    let config = single_mock_config(&db, &mock);
    let (code, report, err) = link(&db, &config, &["--mode", "batch"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(report["counts"]["batches_submitted"], 2, "{report}");
    let before = mock.stats()["requests"].as_u64().unwrap();
    let (code, report) = poll(&db, &config, &[], None);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["counts"]["applied"], 2, "{report}");
    // The mock counts its own /mock/stats request too.
    let calls = mock.stats()["requests"].as_u64().unwrap() - before - 1;
    assert_eq!(
        report["llm"]["providers"]["mock"]["requests"], calls,
        "the report counts each HTTP call of the poll once: {report}"
    );
    let stored: Value = serde_json::from_str(
        serde_json::from_str::<String>(
            &db.scalar("SELECT llm_usage FROM runs WHERE job = 'batches.poll'"),
        )
        .unwrap()
        .as_str(),
    )
    .unwrap();
    assert_eq!(stored["providers"]["mock"]["requests"], calls, "{stored}");
    assert_eq!(stored["items"], 6, "{stored}");
}

#[test]
fn a_second_batch_submission_before_the_poll_sends_nothing_again() {
    let db = db_with_memories(3);
    let mock = Mock::start(&[]);
    let config = single_mock_config(&db, &mock);
    let (code, first, err) = link(&db, &config, &["--mode", "batch"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(first["counts"]["items_submitted"], 3, "{first}");
    // The pairs wait in a submitted batch: a second run (cron fired twice, a manual rerun)
    // must not pay for them again.
    let (code, second, err) = link(&db, &config, &["--mode", "batch"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(second["counts"]["pairs_to_judge"], 0, "{second}");
    assert_eq!(mock.stats()["batches_created"], 1);
    assert_eq!(db.count("llm_batches"), 1);
}

#[test]
fn links_are_looked_for_from_the_threshold_of_the_model_that_made_the_vectors() {
    let db = db_with_memories(3);
    let pairs = |config: Option<&str>, extra: &[&str]| {
        let mut args = vec!["--json"];
        if let Some(config) = config {
            args.extend(["--config", config]);
        }
        args.extend(["link", "--dry-run"]);
        args.extend_from_slice(extra);
        let out = db.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
        (
            report["counts"]["pairs_to_judge"].as_u64().unwrap(),
            report["notes"].to_string(),
        )
    };
    // The hash embedder has no calibration: the seeds' 0.75, said in the report.
    let (seed_pairs, notes) = pairs(None, &[]);
    assert!(
        notes.contains("0.75 (no calibration: the seeds' threshold of hash-lexical-v1"),
        "{notes}"
    );
    // A threshold for this model in the config file applies to it, and only to it.
    let config = db.path("thresholds.toml");
    std::fs::write(
        &config,
        "[thresholds.\"hash-lexical-v1\"]\nlink = -1\n[thresholds.\"other-model\"]\nlink = 0.99\n",
    )
    .unwrap();
    let (all_pairs, notes) = pairs(Some(&config), &[]);
    assert_eq!(all_pairs, 3, "three memories make three pairs at -1");
    assert!(seed_pairs < all_pairs);
    assert!(
        notes.contains("the config file's threshold of hash-lexical-v1"),
        "{notes}"
    );
    // --min-score overrides every model's threshold.
    assert_eq!(pairs(Some(&config), &["--min-score", "0.99"]).0, 0);
}
