//! `memlife bench store`: the whole-table figures of a synthetic store of N memories with
//! 384-dim vectors, each a whole `memlife` process as a user runs it: `import` of the Parquet
//! file (rows per second: of the whole process, with the indexes it builds as it ends, and of
//! its write alone), `scores` on the next day (every salience moves: the daily case;
//! a first run at the import's day adopts anchors and is reported beside it), and a `sql`
//! group-by over the table. `benches/import_sql.sh` and `benches/scores.sh` measure the same
//! with peak memory.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use serde_json::json;

use super::harness::{Workdir, cpu_name, memlife, memlife_text};

#[derive(clap::Args, Debug)]
pub struct StoreBench {
    #[arg(long, default_value_t = 1_000_000)]
    pub memories: usize,
    /// Keep the work folder (the Parquet file and the store) here.
    #[arg(long)]
    pub keep: Option<PathBuf>,
}

/// The group-by the figure times: three keys, a count and a mean over every row.
pub const GROUP_BY: &str = "SELECT user_id, state, tier, COUNT(*) AS n, AVG(salience) AS \
                            mean_salience FROM memories GROUP BY user_id, state, tier \
                            ORDER BY n DESC LIMIT 5";

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn run(bench: &StoreBench, out: &mut dyn Write) -> Result<()> {
    let work = Workdir::new(bench.keep.as_ref(), "store")?;
    let n = bench.memories.max(1);
    let users = (n / 1000).max(1).to_string();
    let file = work.path.join(format!("synth-{n}.parquet"));
    let file_text = file.display().to_string();
    let n_text = n.to_string();
    if !file.exists() {
        let synth = [
            "synth",
            "--users",
            &users,
            "--memories",
            &n_text,
            "--dim",
            "384",
            "--seed",
            "1",
            "-o",
        ];
        let mut args = synth.to_vec();
        args.push(&file_text);
        memlife_text(&args)?;
    }
    let db = work.path.join("db");
    let _ = std::fs::remove_dir_all(&db);
    let db = db.display().to_string();
    memlife_text(&["--db", &db, "init"])?;
    let (import, import_s) = memlife(&["--db", &db, "--json", "import", &file_text])?;
    let write_s = import["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0;
    // synth dates its memories across 2025; the first run adopts anchors, the next day's is
    // the daily recalculation.
    let (_, first_s) = memlife(&[
        "--db",
        &db,
        "--json",
        "scores",
        "--now",
        "2026-01-01T00:00:00Z",
    ])?;
    let (scores, scores_s) = memlife(&[
        "--db",
        &db,
        "--json",
        "scores",
        "--now",
        "2026-01-02T00:00:00Z",
    ])?;
    let (_, sql_s) = memlife_text(&["--db", &db, "sql", "--format", "csv", GROUP_BY])?;
    let report = json!({
        "bench": "store",
        "cpu": cpu_name(),
        "memories": n,
        "users": users.parse::<u64>().unwrap_or(1),
        // The whole process, with the indexes every job builds when it ends (BTree, bitmap
        // and full-text: the table searchable), and the import's own write (read, validate,
        // commit: the job's duration).
        "import_seconds": round3(import_s),
        "import_rows_per_second": (n as f64 / import_s.max(1e-9)).round(),
        "import_write_seconds": round3(write_s),
        "import_write_rows_per_second": (n as f64 / write_s.max(1e-9)).round(),
        "import_index_notes": import["notes"],
        "rows_imported": import["counts"]["inserted"],
        "scores_first_seconds": round3(first_s),
        "scores_seconds": round3(scores_s),
        "scores_changed": scores["counts"]["changed"],
        "sql_group_by_seconds": round3(sql_s),
        "work": if work.keep { json!(work.path.display().to_string()) } else { json!(null) },
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    Ok(())
}
