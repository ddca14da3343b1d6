//! Crash points: named places in a job's write sequence where a test can make the process die
//! the way `kill -9` would, to prove that the next run completes the work. The switch is the
//! environment variable `MEMLIFE_FAULT=<point>`, set only by tests (a name nobody sets by
//! accident). At the named point the process aborts: no destructors, no flushing, no exit code
//! of its own choosing, so nothing after the point can tidy up.

/// The variable that names the crash point to die at.
pub const FAULT_VARIABLE: &str = "MEMLIFE_FAULT";

/// Dies at `point` when `MEMLIFE_FAULT` names it; returns otherwise.
pub fn point(point: &str) {
    if std::env::var(FAULT_VARIABLE).as_deref() == Ok(point) {
        eprintln!("memlife: injected crash at {point}");
        std::process::abort();
    }
}
