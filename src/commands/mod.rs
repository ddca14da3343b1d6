//! Commands outside the job frame: setup (`init`), data movement (`export`, `synth`) and
//! read-only views (`sql`, `stats`). They write no `runs` row: they change no memory.

pub mod batches;
pub mod bench;
pub mod export;
pub mod index;
pub mod init;
pub mod similar;
pub mod sql;
pub mod stats;
pub mod synth;
