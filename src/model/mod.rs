//! The table model: every table described once (`schema`), the text encodings of every column
//! kind both ways (`encoding`), validated row building into Arrow batches (`rows`), and typed
//! rows read from Arrow batches by the names of their fields (`typed`).
//! **Pure (arrow only)**: no Lance, no files; `store` and `formats` build on it.

pub mod clock;
pub mod encoding;
pub mod rows;
pub mod schema;
pub mod typed;
