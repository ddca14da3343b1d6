//! What the benches and evals share: a work folder, this binary run as a child process (its
//! JSON report and wall time), `memlife mock-llm` on a free port, and the CPU's name.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

/// The mock server, stopped when dropped.
pub(crate) struct MockServer(pub(crate) Child);

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A temporary folder, removed when dropped unless kept.
pub(crate) struct Workdir {
    pub(crate) path: PathBuf,
    pub(crate) keep: bool,
}

impl Workdir {
    /// `keep` (kept afterwards), or a new temporary folder named after `what` (removed).
    pub(crate) fn new(keep: Option<&PathBuf>, what: &str) -> Result<Workdir> {
        if let Some(dir) = keep {
            std::fs::create_dir_all(dir)?;
            return Ok(Workdir {
                path: dir.clone(),
                keep: true,
            });
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "memlife-bench-{what}-{}-{stamp}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Workdir {
            path: dir,
            keep: false,
        })
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The CPU the figures come from (`model name` of /proc/cpuinfo).
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|name| name.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Copies the folder `from` to `to`, which must not exist yet (`cp -r`).
pub(crate) fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    let status = Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .status()
        .context("cp -r")?;
    anyhow::ensure!(
        status.success(),
        "cp -r {} {} failed",
        from.display(),
        to.display()
    );
    Ok(())
}

/// Runs this binary with `args`; returns its JSON report and its wall time in seconds.
pub(crate) fn memlife(args: &[&str]) -> Result<(Value, f64)> {
    let (text, seconds) = memlife_text(args)?;
    Ok((serde_json::from_str(&text).unwrap_or(Value::Null), seconds))
}

/// Runs this binary with `args`; returns its standard output and wall time in seconds.
pub(crate) fn memlife_text(args: &[&str]) -> Result<(String, f64)> {
    let exe = std::env::current_exe().context("locating the memlife binary")?;
    let started = Instant::now();
    let out = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running memlife {}", args.join(" ")))?;
    let seconds = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "memlife {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), seconds))
}

/// Starts `memlife mock-llm` on a free port with `args`; its address.
pub(crate) fn spawn_mock(args: &[String]) -> Result<(MockServer, String)> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["mock-llm", "--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting memlife mock-llm")?;
    let mut line = String::new();
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("mock-llm has no stdout"))?;
    BufReader::new(stdout).read_line(&mut line)?;
    let url = line
        .split_whitespace()
        .last()
        .filter(|u| u.starts_with("http"))
        .ok_or_else(|| anyhow!("mock-llm printed no address: {line:?}"))?
        .to_string();
    Ok((MockServer(child), url))
}

/// A count of a job report.
pub(crate) fn count(report: &Value, name: &str) -> u64 {
    report["counts"][name].as_u64().unwrap_or(0)
}
