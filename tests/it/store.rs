//! The store through the library: any lancedb URI (memory:// here), and a job killed half-way
//! leaves every table readable and the next run completes the work.

use crate::common::{TestDb, memlife, stderr};
use memlife::app::App;
use memlife::exit::ExitStatus;
use memlife::jobs::{JobScope, import};
use memlife::store::Store;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_memory_database_takes_imports_and_sql() {
    let (store, created) = Store::init("memory://memlife-test", 384).await.unwrap();
    assert!(created.contains(&"memories".to_string()));
    let app = App::with_store(store.clone(), false);
    let ctx = app.job_ctx(&JobScope::default(), None).await.unwrap();
    let args = import::ImportArgs {
        file: crate::common::fixture("memories.jsonl"),
        table: "memories".to_string(),
        format: None,
        on_error: import::OnError::Abort,
        keep_existing: false,
        now: None,
        scope: JobScope::default(),
    };
    let report = import::run(&ctx, &args).await.unwrap();
    assert_eq!(report.exit_status(), ExitStatus::Success, "{report:?}");
    assert_eq!(store.count_rows("memories", None).await.unwrap(), 10);
    let context = memlife::store::sql::session(&store).await.unwrap();
    let (_, batches) = memlife::store::sql::query(
        &context,
        "SELECT id FROM memories WHERE state = 'core'",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}

#[test]
fn a_killed_import_leaves_the_table_readable_and_a_rerun_completes() {
    let db = TestDb::new();
    let file = db.path("big.parquet");
    let out = memlife(&[
        "synth",
        "--users",
        "20",
        "--memories",
        "20000",
        "--dim",
        "384",
        "-o",
        &file,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Killed while Lance holds the write's files and has not committed (the crash point
    // sits after the reader has handed batches to Lance): not a timer that may fire early
    // or late.
    let killed = crate::common::memlife_command()
        .args(["--db", &db.uri, "import", &file])
        .env(memlife::crash::FAULT_VARIABLE, "import.mid-write")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "{}", stderr(&killed));
    assert!(stderr(&killed).contains("injected crash at import.mid-write"));
    // Nothing of the uncommitted write is visible.
    assert_eq!(db.count("memories"), 0, "partial import visible");
    let rerun = db.run(&["import", &file]);
    assert_eq!(rerun.status.code(), Some(0), "{}", stderr(&rerun));
    assert_eq!(db.count("memories"), 20_000);
    assert_eq!(
        db.scalar("SELECT COUNT(DISTINCT id) AS n FROM memories"),
        "20000"
    );
}
