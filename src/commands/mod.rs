//! Commands outside the job registry, one file each with its clap arguments and its
//! `run(&App, &Args, out) -> Result<ExitStatus>`: setup (`init`), data movement (`export`,
//! `synth`), read-only views (`sql`, `stats`, `report`, `similar`, `traverse`, which also removes the dead links it
//! meets), measurements (`index`, `bench`, `eval`), and
//! the Batch API cycle (`batches`). Only `batches poll|retry|cleanup` write `runs` rows (they
//! are scheduled like jobs and change what links exist); the others change no memory.

pub mod batches;
pub mod bench;
pub mod check;
pub mod eval;
pub mod export;
pub mod history;
pub mod index;
pub mod init;
pub mod nightly;
pub mod recall;
pub mod report;
pub mod review;
pub mod schedule;
pub mod similar;
pub mod sql;
pub mod stats;
pub mod summaries;
pub mod synth;
pub mod traverse;
pub mod undo;
pub mod undo_versions;
