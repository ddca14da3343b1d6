//! The one integration-test binary (each extra binary would link all of lancedb again).
//! Modules test the real `memlife` binary on real Lance folders, and the library where a
//! test needs to reach inside (schema versions, saved SQL on fixtures).

mod anchor;
mod bench_targets;
mod check;
mod cli;
mod cluster;
mod common;
mod concurrency;
mod consolidate;
mod crash;
mod describe;
mod distill;
mod embed;
mod entities;
mod entity_gc;
mod eval;
mod import;
mod index;
mod insights;
mod integrate;
mod link;
mod llm;
mod local_model;
mod loopback;
mod nightly;
mod optimize;
mod progress;
mod prune;
mod recall;
mod refine;
mod report;
mod reports;
mod roundtrip;
mod saved_sql;
mod schedule;
mod scores;
mod sessions;
mod shard;
mod similarity;
mod store;
mod summaries;
mod tidy;
mod traverse;
mod undo;
