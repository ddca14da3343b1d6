//! Crash points: named places in a job's write sequence where a test can make the process die
//! the way `kill -9` would, to prove that the next run completes the work. The switch is the
//! environment variable `MEMLIFE_FAULT=<point>`, set only by tests (a name nobody sets by
//! accident). At the named point the process aborts: no destructors, no flushing, no exit code
//! of its own choosing, so nothing after the point can tidy up.
//!
//! The same points can pause instead, so a test can make two processes provably overlap:
//! `MEMLIFE_PAUSE=<point>` and `MEMLIFE_PAUSE_FILE=<path>` make the process create
//! `<path>.reached` at the point and wait there until `<path>` exists.

/// The variable that names the crash point to die at.
pub const FAULT_VARIABLE: &str = "MEMLIFE_FAULT";

/// The variables that name the point to pause at and the file that releases it.
pub const PAUSE_VARIABLE: &str = "MEMLIFE_PAUSE";
pub const PAUSE_FILE_VARIABLE: &str = "MEMLIFE_PAUSE_FILE";

/// Dies at `point` when `MEMLIFE_FAULT` names it, or waits there when `MEMLIFE_PAUSE` does;
/// returns otherwise.
pub fn point(point: &str) {
    if std::env::var(FAULT_VARIABLE).as_deref() == Ok(point) {
        eprintln!("memlife: injected crash at {point}");
        std::process::abort();
    }
    if std::env::var(PAUSE_VARIABLE).as_deref() == Ok(point)
        && let Some(release) = std::env::var_os(PAUSE_FILE_VARIABLE)
    {
        let release = std::path::PathBuf::from(release);
        let mut reached = release.clone().into_os_string();
        reached.push(".reached");
        let _ = std::fs::write(&reached, point);
        eprintln!("memlife: paused at {point}");
        // Bounded: a test that forgets to release does not leave a process behind for long.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let wait = || {
            while !release.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        };
        // The process's background tasks (a claim's renewal) go on while it waits, as they
        // would while a slow step ran: the runtime moves them off this thread.
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        }
    }
}
