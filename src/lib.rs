//! memlife: batch jobs that keep an LLM agent's memory store healthy, on Lance tables.
//!
//! Layers, innermost first (ARCHITECTURE.md has the map):
//! - `logic`: the pure core (scores, similarity, synthetic data, hashing): no I/O at all, a
//!   crate of its own (crates/memlife-logic) whose only dependencies are serde, serde_json, chrono,
//!   uuid, rayon, clap;
//! - `model`: the table model (schemas, encodings, row building): arrow only;
//! - `formats`: file readers and writers (JSON Lines, JSON, CSV, Parquet);
//! - `store`: the only module that touches the database (Lance tables, DataFusion SQL);
//! - `llm`: the LLM layer (tasks, offline judge, providers, Batch API, mock server);
//! - `embedders`: text to vectors (local model, OpenAI-compatible, lexical hash);
//! - `jobs`: the scheduled jobs, one file each; `commands`: everything else the CLI runs;
//! - `app`: the context built once per invocation; `cli`: clap definitions and dispatch.

pub mod app;
pub mod cli;
pub mod commands;
pub mod config;
pub mod crash;
pub mod embedders;
pub mod exit;
pub mod formats;
pub mod jobs;
pub mod llm;
/// The pure core, its own crate (crates/memlife-logic) so that it builds beside lance and its
/// tests need no database.
pub use memlife_logic as logic;
pub mod model;
pub mod progress;
pub mod store;
