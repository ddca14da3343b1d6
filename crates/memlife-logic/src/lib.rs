//! The pure core: the rules and kernels every job computes with, as plain functions over
//! slices and typed rows (`rows`; no Arrow here: `model::typed` converts). Jobs' decisions
//! are plans made here (`integrate::plan`: input rows in, what to write and log out).
//! **Nothing here does I/O**: no Lance, no DataFusion, no tokio, no
//! HTTP, no files (a tidy test enforces it), so every rule is unit-tested and benchmarked
//! without a database, and its tests compile without linking lancedb.

pub mod anchor;
pub mod chart;
pub mod cluster;
pub mod consolidate;
pub mod describe;
pub mod distill;
pub mod entities;
pub mod entity_gc;
pub mod entity_writes;
pub mod eval;
pub mod hash;
pub mod hash_embedding;
pub mod insights;
pub mod integrate;
pub mod link;
pub mod prune;
pub mod reading;
pub mod recall;
pub mod recall_eval;
pub mod refine;
pub mod report;
pub mod rows;
pub mod schedule;
pub mod scores;
pub mod sessions;
pub mod shard;
pub mod similarity;
pub mod summaries;
pub mod synth;
pub mod targets;
pub mod temporal;
pub mod undo;
