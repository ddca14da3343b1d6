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
    without_memlife_environment(Command::new(env!("CARGO_BIN_EXE_memlife")))
}

/// The real `memlife` binary run on a pseudo-terminal (util-linux `script`), as a person at a
/// terminal runs it: what it printed there, stdout and stderr together, escapes included.
pub fn memlife_on_terminal(args: &[&str], env: &[(&str, &str)]) -> Output {
    let line = std::iter::once(env!("CARGO_BIN_EXE_memlife"))
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut command = Command::new("script");
    command
        .args(["-qec", &line, "/dev/null"])
        .envs(env.iter().copied());
    without_memlife_environment(command)
        .output()
        .expect("script (util-linux) runs")
}

/// The real `memlife` binary on an emulated CPU: qemu's user-mode emulator
/// (`qemu-x86_64 -cpu MODEL`), which reports the model's CPUID to the program, so its
/// run-time dispatch sees that CPU's instruction sets. `scripts/test.sh` installs qemu-user.
pub fn memlife_on_cpu(model: &str, args: &[&str]) -> Output {
    let mut command = Command::new("qemu-x86_64");
    command
        .args(["-cpu", model, env!("CARGO_BIN_EXE_memlife")])
        .args(args);
    without_memlife_environment(command)
        .output()
        .unwrap_or_else(|e| {
            panic!("qemu-x86_64: {e} (install qemu-user, as `bash scripts/test.sh` does)")
        })
}

fn without_memlife_environment(mut command: Command) -> Command {
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

/// A database in a temporary folder, initialised through the CLI. When a test that used it
/// ends without failing, `memlife check` runs on it and must pass: every test that writes
/// proves it left the store consistent.
pub struct TestDb {
    pub dir: tempfile::TempDir,
    pub uri: String,
    check_on_drop: std::cell::Cell<bool>,
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if std::thread::panicking() || !self.check_on_drop.get() {
            return;
        }
        let out = self.run(&["check"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "memlife check after the test: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
}

impl TestDb {
    pub fn new() -> TestDb {
        TestDb::with_dim(384)
    }

    pub fn with_dim(dim: usize) -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let uri = dir.path().join("memlife.db").display().to_string();
        let db = TestDb {
            dir,
            uri,
            check_on_drop: std::cell::Cell::new(true),
        };
        let out = db.run(&["init", "--embedding-dim", &dim.to_string()]);
        assert_eq!(out.status.code(), Some(0), "init failed: {}", stderr(&out));
        db
    }

    /// For a test that leaves the store inconsistent on purpose (to test `check` itself).
    pub fn skip_final_check(&self) {
        self.check_on_drop.set(false);
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

    /// Every row of a query, as JSON objects.
    pub fn rows(&self, sql: &str) -> Vec<serde_json::Value> {
        let out = self.run(&["sql", sql, "--format", "jsonl"]);
        assert_eq!(out.status.code(), Some(0), "{sql}: {}", stderr(&out));
        stdout(&out)
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON row"))
            .collect()
    }

    /// `table`'s row of `memlife --json stats`' storage (versions, fragments, bytes, indexes).
    pub fn storage(&self, table: &str) -> serde_json::Value {
        let stats = self.run_json(&["stats"]);
        stats["storage"]
            .as_array()
            .expect("storage per table")
            .iter()
            .find(|t| t["table"] == table)
            .cloned()
            .unwrap_or_else(|| panic!("no storage row for {table}: {stats}"))
    }

    /// The columns `table`'s indexes are on (one per index), sorted, from `storage`.
    pub fn indexed_columns(&self, table: &str) -> Vec<String> {
        let storage = self.storage(table);
        let mut columns: Vec<String> = storage["indexes"]
            .as_array()
            .unwrap_or_else(|| panic!("no indexes listed: {storage}"))
            .iter()
            .map(|i| i["columns"][0].as_str().unwrap().to_string())
            .collect();
        columns.sort();
        columns
    }

    pub fn count(&self, table: &str) -> i64 {
        self.scalar(&format!("SELECT COUNT(*) AS n FROM {table}"))
            .parse()
            .expect("count")
    }

    /// `memlife --json ARGS`, its exit checked (0); its JSON report (null when it printed none).
    pub fn run_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}\n{}",
            stdout(&out),
            stderr(&out)
        );
        serde_json::from_str(&stdout(&out)).unwrap_or(serde_json::Value::Null)
    }

    /// `batches poll` with `config` (hash embedder): its JSON report, the exit checked.
    pub fn poll_batches(&self, config: &str) -> serde_json::Value {
        let args = ["--config", config, "batches", "poll", "--embedder", "hash"];
        self.run_json(&args)
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// With `UPDATE_RELIABILITY` set, replaces the text between `<!-- NAME -->` and
/// `<!-- /NAME -->` in a file of the repository (a generated table in a document).
pub fn replace_marked_section(file: &str, name: &str, text: &str) {
    if std::env::var_os("UPDATE_RELIABILITY").is_none() {
        return;
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file);
    let document = std::fs::read_to_string(&path).expect("document");
    let (open, close) = (format!("<!-- {name} -->"), format!("<!-- /{name} -->"));
    let start = document.find(&open).expect("opening marker") + open.len();
    let end = document.find(&close).expect("closing marker");
    let updated = format!("{}\n{}{}", &document[..start], text, &document[end..]);
    std::fs::write(&path, updated).expect("document written");
}

/// A `memlife` process stopped at a crash point (`MEMLIFE_PAUSE`) until `release` is called:
/// two processes that provably overlap, not two that merely might.
pub struct Paused {
    pub child: std::process::Child,
    release: PathBuf,
}

impl Paused {
    /// Starts `memlife ARGS` and waits until it reaches `point`.
    pub fn start(db: &TestDb, args: &[&str], point: &str) -> Paused {
        let mut command = memlife_command();
        command.arg("--db").arg(&db.uri).args(args);
        Paused::spawn(db, command, point)
    }

    /// Starts `command` (a `memlife` command with its arguments and environment) and waits
    /// until it reaches `point`.
    pub fn spawn(db: &TestDb, mut command: Command, point: &str) -> Paused {
        let release = db.dir.path().join(format!("release-{}", uuid_like()));
        let args = format!("{command:?}");
        let child = command
            .env(memlife::crash::PAUSE_VARIABLE, point)
            .env(memlife::crash::PAUSE_FILE_VARIABLE, &release)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("memlife starts");
        let mut reached = release.clone().into_os_string();
        reached.push(".reached");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !PathBuf::from(&reached).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{args} never reached {point}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Paused { child, release }
    }

    /// Lets it go on, and waits for it to end.
    pub fn finish(self) -> Output {
        std::fs::write(&self.release, "go").expect("release file");
        self.child.wait_with_output().expect("memlife ends")
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Records an older schema version in the store's meta table through lancedb itself (no
/// migration runs), as an older build left it: the next `memlife` run migrates.
pub async fn set_schema_version(uri: &str, version: i64) {
    let connection = lancedb::connect(uri).execute().await.unwrap();
    let meta = connection
        .open_table("memlife_meta")
        .execute()
        .await
        .unwrap();
    meta.update()
        .only_if("key = 'schema_version'")
        .column("value", format!("'{version}'"))
        .execute()
        .await
        .unwrap();
}
