//! Progress bars for long work (embedding, LLM judging, a simulated year), drawn on stderr only
//! when stderr is a terminal and the output is not `--json`: under cron, Airflow, a pipe or a
//! scheduler reading JSON nothing is drawn, so logs and reports stay byte-for-byte the same.
//! `MEMLIFE_PROGRESS=0` turns them off on a terminal too.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether the invocation allows bars at all (set once by `App::new` from `--json`).
static ALLOWED: AtomicBool = AtomicBool::new(true);

/// Called once per invocation: `--json` output gets no bars.
pub fn allow(json: bool) {
    ALLOWED.store(!json, Ordering::Relaxed);
}

/// Whether a bar would be drawn now.
pub fn drawn() -> bool {
    ALLOWED.load(Ordering::Relaxed)
        && std::io::stderr().is_terminal()
        && std::env::var("MEMLIFE_PROGRESS").map_or(true, |v| v != "0")
}

/// A bar of `total` steps named `prefix` (hidden where bars are not drawn); `finish_and_clear`
/// it when done so the report that follows starts on a clean line.
pub fn bar(total: u64, prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if drawn() {
        bar.set_style(
            ProgressStyle::with_template("{prefix:>12} {bar:40} {pos}/{len} {per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(prefix.to_string());
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}
