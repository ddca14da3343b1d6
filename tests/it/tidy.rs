//! Rules of the code base that hold themselves: every source file says why it exists, the
//! pure core stays pure, and every job is scheduled.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use memlife::cli::Cli;
use memlife::jobs::JobName;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(folder: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(folder).expect("readable folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

fn sources(folder: &str) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&root().join(folder), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable source");
            (path, text)
        })
        .collect()
}

#[test]
fn every_source_file_opens_with_a_doc_comment_saying_why_it_exists() {
    let mut missing = Vec::new();
    for folder in ["src", "crates/memlife-logic/src", "tests", "benches"] {
        if !root().join(folder).exists() {
            continue;
        }
        for (path, text) in sources(folder) {
            if !text.trim_start().starts_with("//!") {
                missing.push(path.strip_prefix(root()).unwrap().display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "files without a //! opening: {missing:?}"
    );
}

/// What the pure core may not name: the database, the query engine, the async runtime, HTTP,
/// the file system, and the modules of this crate that do I/O.
const FORBIDDEN_IN_PURE_CORE: &[&str] = &[
    "lancedb",
    "lance::",
    "datafusion",
    "tokio",
    "reqwest",
    "async_openai",
    "std::fs",
    "std::net",
    "File::",
    "crate::store",
    "crate::formats",
    "crate::llm",
    "crate::jobs",
    "crate::commands",
    "crate::embedders",
];

#[test]
fn the_pure_core_does_no_io() {
    let mut violations = Vec::new();
    for folder in ["crates/memlife-logic/src", "src/model"] {
        for (path, text) in sources(folder) {
            for (number, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for word in FORBIDDEN_IN_PURE_CORE {
                    if code.contains(word) {
                        violations.push(format!(
                            "{}:{}: {word}",
                            path.strip_prefix(root()).unwrap().display(),
                            number + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "I/O in the pure core: {violations:#?}"
    );
}

/// The only crates the pure core may depend on: none of them does I/O.
/// serde_json and uuid (v5 only: a hash, no random source) let plans carry their audit rows.
const PURE_CORE_DEPENDENCIES: &[&str] = &["serde", "serde_json", "chrono", "uuid", "rayon", "clap"];

#[test]
fn the_pure_core_crate_depends_on_nothing_that_does_io() {
    let manifest = std::fs::read_to_string(root().join("crates/memlife-logic/Cargo.toml"))
        .expect("the pure core's manifest");
    let mut section = String::new();
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
        } else if section.ends_with("dependencies]") && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', ' ']).next().unwrap_or("").to_string();
            found.push(name);
        }
    }
    assert!(
        found.contains(&"rayon".to_string()),
        "manifest not read: {found:?}"
    );
    let extra: Vec<&String> = found
        .iter()
        .filter(|name| !PURE_CORE_DEPENDENCIES.contains(&name.as_str()))
        .collect();
    assert!(extra.is_empty(), "the pure core depends on {extra:?}");
}

#[test]
fn the_rule_catches_a_pure_module_that_opens_a_file() {
    // The check above is a text scan: make sure it sees what it is meant to see.
    let line = "    let text = std::fs::read_to_string(path)?;";
    assert!(FORBIDDEN_IN_PURE_CORE.iter().any(|w| line.contains(w)));
}

/// Names of the database crates: only `src/store/` may write them.
const DATABASE_CRATES: &[&str] = &["lancedb::", "lance::", "use lancedb", "use lance;"];

/// The lines outside `src/store/` that name a database crate.
/// Each code line of `files` (comments cut) that `hit` flags, as "path:line: what it says".
fn flagged_lines<'a>(
    files: impl IntoIterator<Item = &'a (PathBuf, String)>,
    hit: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if let Some(what) = hit(code) {
                found.push(format!(
                    "{}:{}: {what}",
                    path.strip_prefix(root()).unwrap_or(path).display(),
                    number + 1,
                ));
            }
        }
    }
    found
}

fn database_names_outside_store(files: &[(PathBuf, String)]) -> Vec<String> {
    let store = root().join("src/store");
    flagged_lines(
        files.iter().filter(|(path, _)| !path.starts_with(&store)),
        |code| {
            DATABASE_CRATES
                .iter()
                .any(|w| code.contains(w))
                .then(|| code.trim().to_string())
        },
    )
}

#[test]
fn only_the_store_names_the_database() {
    let found = database_names_outside_store(&sources("src"));
    assert!(
        found.is_empty(),
        "lancedb or lance named outside src/store/ (add a Store method instead): {found:#?}"
    );
    // The scan sees what it is meant to see.
    let planted = [(
        root().join("src/commands/example.rs"),
        "    memories: lancedb::Table,\n".to_string(),
    )];
    assert_eq!(database_names_outside_store(&planted).len(), 1);
}

/// Lines that read a batch's column by its position (`batch.column(3)`): a position
/// depends on a select list written elsewhere, so rows are read by name (`model::typed`).
fn positional_columns(files: &[(PathBuf, String)]) -> Vec<String> {
    flagged_lines(files, |code| {
        code.match_indices(".column(")
            .any(|(at, m)| {
                code[at + m.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
            })
            .then(|| code.trim().to_string())
    })
}

#[test]
fn columns_are_read_by_name_never_by_position() {
    let found = positional_columns(&sources("src"));
    assert!(
        found.is_empty(),
        "a column read by position (read a typed row, `Store::scan_rows`, or \
         `column_by_name`): {found:#?}"
    );
    let planted = [(
        root().join("src/jobs/example.rs"),
        "        let ids = batch.column(0).as_string::<i32>();\n".to_string(),
    )];
    assert_eq!(positional_columns(&planted).len(), 1);
}

/// Files outside `src/store/` that still read or write rows as JSON maps (`json_rows`,
/// `text_of`, `batch_from_json`), with how many lines do: issue 36 converts them to typed
/// rows (`model::typed`, `logic::rows`). A file may only fall on this list, never rise or
/// join it; a file converted leaves it. Entities and the review queue's new items are written
/// from JSON values until they get row types of their own.
const JSON_ROW_FILES: &[(&str, usize)] = &[("src/commands/check.rs", 1)];

/// Lines outside `src/store/` that go through JSON-map rows, by file.
fn json_row_lines(files: &[(PathBuf, String)]) -> std::collections::BTreeMap<String, usize> {
    let store = root().join("src/store");
    let mut by_file = std::collections::BTreeMap::new();
    for line in flagged_lines(
        files.iter().filter(|(path, _)| !path.starts_with(&store)),
        |code| {
            ["json_rows(", "text_of(", "batch_from_json("]
                .iter()
                .any(|w| code.contains(w))
                .then(String::new)
        },
    ) {
        let file = line.split(':').next().unwrap_or("").to_string();
        *by_file.entry(file).or_default() += 1;
    }
    by_file
}

#[test]
fn rows_are_typed_and_json_map_rows_only_shrink() {
    let found = json_row_lines(&sources("src"));
    let allowed: std::collections::BTreeMap<String, usize> = JSON_ROW_FILES
        .iter()
        .map(|(f, n)| (f.to_string(), *n))
        .collect();
    let grown: Vec<String> = found
        .iter()
        .filter(|(f, n)| allowed.get(*f).is_none_or(|a| *n > a))
        .map(|(f, n)| format!("{f}: {n} lines (allowed {})", allowed.get(f).unwrap_or(&0)))
        .collect();
    assert!(
        grown.is_empty(),
        "rows read or written as JSON maps (read a typed row: `Store::scan_rows`, \
         `memories_with_ids`; write one: `upsert_memories`): {grown:#?}"
    );
    let stale: Vec<String> = allowed
        .iter()
        .filter(|(f, n)| found.get(*f).unwrap_or(&0) < *n)
        .map(|(f, n)| format!("{f}: allowed {n}, uses {}", found.get(f).unwrap_or(&0)))
        .collect();
    assert!(
        stale.is_empty(),
        "JSON_ROW_FILES allows more than a file uses: lower it (the list only shrinks): {stale:#?}"
    );
    let planted = [(
        root().join("src/jobs/example.rs"),
        "    let id = text_of(&row, \"id\");\n".to_string(),
    )];
    assert_eq!(
        json_row_lines(&planted).get("src/jobs/example.rs"),
        Some(&1)
    );
}

/// Functions allowed over `MAX_FUNCTION_LINES`, each with why (file, function, reason). None
/// today: a function grows past the limit only with its reason written here.
const LONG_FUNCTIONS: &[(&str, &str, &str)] = &[];

const MAX_FUNCTION_LINES: usize = 150;

/// Functions (`fn` at any indent, closed by the `}` at the same indent) longer than the limit:
/// (file, name, lines).
fn long_functions(files: &[(PathBuf, String)]) -> Vec<(String, String, usize)> {
    let mut found = Vec::new();
    for (path, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            let indent = line.len() - line.trim_start().len();
            let code = line.trim_start();
            let code = ["pub(crate) ", "pub(super) ", "pub "]
                .iter()
                .find_map(|p| code.strip_prefix(p))
                .unwrap_or(code);
            let code = code.strip_prefix("async ").unwrap_or(code);
            let name = code
                .strip_prefix("fn ")
                .map(|rest| rest.split(['(', '<']).next().unwrap_or("").to_string());
            let one_line = line.trim_end().ends_with('}') && line.contains('{');
            let Some(name) = name.filter(|_| !line.trim_end().ends_with(';') && !one_line) else {
                i += 1;
                continue;
            };
            let close = " ".repeat(indent) + "}";
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].trim_end() == close)
                .unwrap_or(lines.len() - 1);
            if end - i + 1 > MAX_FUNCTION_LINES {
                let file = path
                    .strip_prefix(root())
                    .unwrap_or(path)
                    .display()
                    .to_string();
                found.push((file, name, end - i + 1));
            }
            i = end + 1;
        }
    }
    found
}

#[test]
fn no_function_is_longer_than_150_lines_but_the_named_exceptions() {
    let found: Vec<(String, String, usize)> = long_functions(&sources("src"))
        .into_iter()
        .filter(|(file, name, _)| {
            !LONG_FUNCTIONS
                .iter()
                .any(|(f, n, _)| f == file && n == name)
        })
        .collect();
    assert!(
        found.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (split them, or name them in \
         LONG_FUNCTIONS with the reason): {found:?}"
    );
    let body = "    let x = 1;\n".repeat(MAX_FUNCTION_LINES);
    let planted = [(
        root().join("src/jobs/example.rs"),
        format!("pub async fn long_one(a: u8) -> u8 {{\n{body}}}\nfn short() {{}}\n"),
    )];
    assert_eq!(
        long_functions(&planted),
        [(
            "src/jobs/example.rs".to_string(),
            "long_one".to_string(),
            MAX_FUNCTION_LINES + 2
        )]
    );
}

/// The layers, each with the layers above it that it must not name: commands use jobs,
/// jobs use the LLM layer, embedders and the store, and none of those reach back up.
const LAYERS_ABOVE: &[(&str, &[&str])] = &[
    ("src/jobs", &["crate::commands", "crate::cli"]),
    ("src/llm", &["crate::commands", "crate::jobs", "crate::cli"]),
    (
        "src/embedders",
        &["crate::commands", "crate::jobs", "crate::llm", "crate::cli"],
    ),
    (
        "src/store",
        &[
            "crate::commands",
            "crate::jobs",
            "crate::llm",
            "crate::embedders",
            "crate::cli",
        ],
    ),
    (
        "src/model",
        &[
            "crate::commands",
            "crate::jobs",
            "crate::llm",
            "crate::embedders",
            "crate::store",
            "crate::cli",
        ],
    ),
    (
        "src/config.rs",
        &["crate::commands", "crate::jobs", "crate::cli"],
    ),
];

fn names_of_layers_above(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (layer, above) in LAYERS_ABOVE {
        let folder = root().join(layer);
        found.extend(flagged_lines(
            files.iter().filter(|(path, _)| path.starts_with(&folder)),
            |code| {
                above
                    .iter()
                    .find(|a| code.contains(*a))
                    .map(|name| format!("names {name}"))
            },
        ));
    }
    found
}

#[test]
fn no_layer_reaches_up() {
    let found = names_of_layers_above(&sources("src"));
    assert!(
        found.is_empty(),
        "a module names a layer above it (move what both need down): {found:#?}"
    );
    let planted = [(
        root().join("src/jobs/example.rs"),
        "    let n = crate::commands::review::expire(ctx).await?;\n".to_string(),
    )];
    assert_eq!(names_of_layers_above(&planted).len(), 1);
}

/// How a schedule file calls memlife: `memlife ` in the crontab, `{MEMLIFE} ` in the DAG.
fn marker(file: &str) -> &'static str {
    if file == "crontab" {
        "memlife "
    } else {
        "{MEMLIFE} "
    }
}

/// The memlife invocations of a schedule file: the words after the marker, global flags and
/// their values dropped; comment lines skipped.
fn invocations(text: &str, start: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        {
            let Some(at) = line.find(start) else { continue };
            let mut words = Vec::new();
            let mut rest = line[at + start.len()..]
                .split(|c: char| c.is_whitespace() || c == '"')
                .filter(|w| !w.is_empty());
            while let Some(word) = rest.next() {
                match word {
                    "--db" | "--config" => {
                        rest.next();
                    }
                    "--json" => {}
                    w if w.starts_with("--") || w.starts_with('/') || w.starts_with('>') => break,
                    w => words.push(w.to_string()),
                }
            }
            found.push(words);
        }
    }
    found
}

fn schedule(name: &str) -> String {
    std::fs::read_to_string(root().join("jobs").join(name)).expect("schedule file")
}

/// Every subcommand that is a scheduled job: the registered jobs and the Batch API cycle.
fn job_subcommands() -> Vec<String> {
    let mut jobs: Vec<String> = JobName::ALL
        .iter()
        .map(|j| j.as_str().to_string())
        .collect();
    jobs.extend(["batches poll", "batches retry", "batches cleanup"].map(String::from));
    jobs
}

#[test]
fn every_job_is_scheduled_or_listed_as_run_by_hand() {
    let crontab = schedule("crontab");
    let dag = schedule("memlife_dag.py");
    let by_hand: Vec<String> = crontab
        .lines()
        .find_map(|l| l.strip_prefix("# By hand, on purpose:"))
        .map(|names| names.split(',').map(|n| n.trim().to_string()).collect())
        .unwrap_or_default();
    let mut scheduled: Vec<String> = Vec::new();
    let calls = invocations(&crontab, marker("crontab"))
        .into_iter()
        .chain(invocations(&dag, marker("memlife_dag.py")));
    for words in calls {
        scheduled.push(words.join(" "));
    }
    let unscheduled: Vec<String> = job_subcommands()
        .into_iter()
        .filter(|job| {
            !scheduled
                .iter()
                .any(|s| s == job || s.starts_with(&format!("{job} ")))
        })
        .filter(|job| !by_hand.contains(job))
        .collect();
    assert!(
        unscheduled.is_empty(),
        "jobs in neither jobs/crontab nor jobs/memlife_dag.py: {unscheduled:?}"
    );
}

#[test]
fn the_schedules_name_only_subcommands_that_exist() {
    let cli = Cli::command();
    for file in ["crontab", "memlife_dag.py"] {
        let calls = invocations(&schedule(file), marker(file));
        assert!(!calls.is_empty(), "{file}: no memlife invocation found");
        for words in calls {
            let first = words
                .first()
                .unwrap_or_else(|| panic!("{file}: a bare memlife"));
            let command = cli
                .find_subcommand(first)
                .unwrap_or_else(|| panic!("{file} runs `memlife {first}`, which does not exist"));
            if command.has_subcommands() {
                let second = words.get(1).map(String::as_str).unwrap_or("");
                assert!(
                    command.find_subcommand(second).is_some(),
                    "{file} runs `memlife {first} {second}`, which does not exist"
                );
            }
        }
    }
}

#[test]
fn the_schedule_check_sees_a_missing_job() {
    let without_scores = schedule("crontab").replace("memlife scores", "memlife stats");
    let scheduled: Vec<String> = invocations(&without_scores, marker("crontab"))
        .into_iter()
        .map(|w| w.join(" "))
        .collect();
    assert!(!scheduled.iter().any(|s| s == "scores"));
    assert!(
        scheduled.iter().any(|s| s == "batches poll"),
        "{scheduled:?}"
    );
}

/// The named crash points in `src` (`crash::point("...")`), each once.
fn crash_points() -> Vec<String> {
    let mut points: Vec<String> = sources("src")
        .iter()
        .flat_map(|(_, text)| {
            text.split("crash::point(\"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect();
    points.sort();
    points.dedup();
    points
}

/// Every crash point a job names is one the crash harness kills at (the per-job
/// `<job>.started` and `<job>.finishing` points are listed per scenario there too): a new
/// write step cannot slip in unproven.
#[test]
fn every_named_crash_point_is_in_the_crash_harness() {
    let points = crash_points();
    assert!(points.len() >= 10, "found only {points:?}");
    let harness = std::fs::read_to_string(root().join("tests/it/crash.rs")).unwrap();
    let missing: Vec<&String> = points
        .iter()
        .filter(|p| !harness.contains(&format!("\"{p}\"")))
        .collect();
    assert!(
        missing.is_empty(),
        "crash points no harness scenario kills at: {missing:?}"
    );
}

#[test]
fn the_crontab_and_the_dag_are_what_the_schedule_says() {
    let schedule = memlife::commands::schedule::load(&root().join("jobs/schedule.toml"))
        .expect("jobs/schedule.toml reads");
    for (file, written) in [
        ("crontab", memlife::commands::schedule::crontab(&schedule)),
        (
            "memlife_dag.py",
            memlife::commands::schedule::dag(&schedule),
        ),
    ] {
        assert!(
            self::schedule(file) == written,
            "jobs/{file} differs from jobs/schedule.toml: run `memlife schedule {}` > jobs/{file}",
            if file == "crontab" { "crontab" } else { "dag" }
        );
    }
}

/// Names every module may define, since they are the same idea in each: a job's or a
/// command's entry point.
const SHARED_NAMES: &[&str] = &["run", "command"];

/// Module-level public functions and types whose name another file defines too, as
/// "name: file, file".
fn shared_public_names(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut defined: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (path, text) in files {
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("pub ") else {
                continue;
            };
            let rest = rest.strip_prefix("async ").unwrap_or(rest);
            let Some((kind, tail)) = rest.split_once(' ') else {
                continue;
            };
            if !["fn", "struct", "enum", "type", "trait"].contains(&kind) {
                continue;
            }
            let name: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let file = path
                .strip_prefix(root())
                .unwrap_or(path)
                .display()
                .to_string();
            defined.entry(name).or_default().push(file);
        }
    }
    defined
        .into_iter()
        .filter(|(name, files)| files.len() > 1 && !SHARED_NAMES.contains(&name.as_str()))
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect()
}

#[test]
fn no_two_modules_give_one_public_name_to_two_ideas() {
    let mut files = sources("src");
    files.extend(sources("crates/memlife-logic/src"));
    let found = shared_public_names(&files);
    assert!(
        found.is_empty(),
        "one public name in two modules (rename one, or add it to SHARED_NAMES with why \
         it is the same idea): {found:#?}"
    );
    let planted = [
        (
            root().join("src/jobs/a.rs"),
            "pub struct Plan {}\n".to_string(),
        ),
        (
            root().join("src/jobs/b.rs"),
            "pub fn run() {}\npub struct Plan;\n".to_string(),
        ),
        (
            root().join("src/jobs/c.rs"),
            "pub async fn run() {}\n".to_string(),
        ),
    ];
    assert_eq!(
        shared_public_names(&planted),
        ["Plan: src/jobs/a.rs, src/jobs/b.rs"]
    );
}

/// The files ARCHITECTURE.md's recipe for a new job names, one per numbered step
/// ("N. `path`"), and the count its first line states ("A job touches N files").
fn recipe(architecture: &str) -> (usize, Vec<String>) {
    let section = architecture
        .split("## Adding a job")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap_or("");
    let stated = section
        .split("touches ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let files = section
        .lines()
        .filter_map(|line| {
            let (number, rest) = line.split_once(". `")?;
            number.parse::<usize>().ok()?;
            Some(rest.split('`').next()?.to_string())
        })
        .collect();
    (stated, files)
}

#[test]
fn the_recipe_names_files_that_exist() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let (stated, files) = recipe(&text);
    assert_eq!(
        stated,
        files.len(),
        "the count the recipe states: {files:#?}"
    );
    assert!(files.len() >= 10, "the recipe's steps are read: {files:#?}");
    // The example job's own files are the new ones; every other file must be there.
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !f.contains("prune") && !root().join(f).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "the recipe names files that are gone: {missing:?}"
    );
    let planted = "## Adding a job\n\nA job touches 2 files:\n\n1. `src/a.rs`: x\n2. `b.rs`\n\n## Next\n3. `c.rs`\n";
    assert_eq!(recipe(planted), (2, vec!["src/a.rs".into(), "b.rs".into()]));
}
