//! memlife: batch jobs that keep an LLM agent's memory store healthy, on Lance tables.
//!
//! The pure core (`schema`, `encoding`, `rows`, `synth`, `similarity`, `embedders::hash`) has no Lance and no I/O; `store` and
//! `sql` are the only modules that touch the database; `formats` reads and writes files;
//! `jobs` and `commands` are what the `memlife` binary runs. See ARCHITECTURE.md.

pub mod cli;
pub mod columnar;
pub mod commands;
pub mod config;
pub mod embedders;
pub mod encoding;
pub mod formats;
pub mod jobs;
pub mod llm;
pub mod mock_llm;
pub mod parquet_vectors;
pub mod rows;
pub mod schema;
pub mod scores;
pub mod similarity;
pub mod sql;
pub mod store;
pub mod synth;
