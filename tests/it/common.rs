//! Helpers shared by the integration tests: run the binary, locate fixtures, make databases.

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The real `memlife` binary, with none of the environment that configures it inherited:
/// a developer's `MEMLIFE_CONFIG`, `MEMLIFE_DB`, `MEMLIFE_EMBEDDER`, API keys and the like
/// would otherwise change what the tests see.
pub fn memlife_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memlife"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("MEMLIFE_") || name.starts_with("OPENAI_") {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// Runs the real `memlife` binary.
pub fn memlife(args: &[&str]) -> Output {
    memlife_command().args(args).output().expect("memlife runs")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).to_string()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

/// A database in a temporary folder, initialised through the CLI.
pub struct TestDb {
    pub dir: tempfile::TempDir,
    pub uri: String,
}

impl TestDb {
    pub fn new() -> TestDb {
        TestDb::with_dim(384)
    }

    pub fn with_dim(dim: usize) -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let uri = dir.path().join("memlife.db").display().to_string();
        let db = TestDb { dir, uri };
        let out = db.run(&["init", "--embedding-dim", &dim.to_string()]);
        assert_eq!(out.status.code(), Some(0), "init failed: {}", stderr(&out));
        db
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["--db", self.uri.as_str()];
        all.extend_from_slice(args);
        memlife(&all)
    }

    /// The single value of a one-row, one-column query, as JSON text.
    pub fn scalar(&self, sql: &str) -> String {
        let out = self.run(&["sql", sql, "--format", "jsonl"]);
        assert_eq!(out.status.code(), Some(0), "{sql}: {}", stderr(&out));
        let row: serde_json::Value =
            serde_json::from_str(stdout(&out).trim()).expect("one JSON row");
        let object = row.as_object().expect("object");
        assert_eq!(object.len(), 1, "{row}");
        object.values().next().unwrap().to_string()
    }

    pub fn count(&self, table: &str) -> i64 {
        self.scalar(&format!("SELECT COUNT(*) AS n FROM {table}"))
            .parse()
            .expect("count")
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}
