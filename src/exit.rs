//! The process's exit status as a type, so no code path returns a bare integer and the
//! scheduler contract (cron, Airflow) lives in one place: 0 done, 1 done but some items failed
//! (or a quality gate did not pass), 2 error. A closed stdout pipe is not an error.

use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitStatus {
    /// Everything asked for was done.
    Success,
    /// Done, but some items failed or a quality gate did not pass: exit code 1.
    Failure,
    /// The command could not do its work: exit code 2.
    Error,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Error => 2,
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        ExitCode::from(status.code())
    }
}

/// The status of a command that ended in `error`: an error (2), except a closed stdout pipe
/// (`memlife sql ... | head`), which is success.
pub fn for_error(error: &anyhow::Error) -> ExitStatus {
    let broken_pipe = error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        ExitStatus::Success
    } else {
        ExitStatus::Error
    }
}
