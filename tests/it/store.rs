//! The store through the library: any lancedb URI (memory:// here), and a job killed half-way
//! leaves every table readable and the next run completes the work.

use std::time::Duration;

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
    let mut child = crate::common::memlife_command()
        .args(["--db", &db.uri, "import", &file])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let _ = child.kill();
    let _ = child.wait();
    // All or nothing: the commit either happened or it did not.
    let count = db.count("memories");
    assert!(
        count == 0 || count == 20_000,
        "partial import visible: {count} rows"
    );
    let rerun = db.run(&["import", &file]);
    assert_eq!(rerun.status.code(), Some(0), "{}", stderr(&rerun));
    assert_eq!(db.count("memories"), 20_000);
    assert_eq!(
        db.scalar("SELECT COUNT(DISTINCT id) AS n FROM memories"),
        "20000"
    );
}
