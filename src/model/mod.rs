//! The table model: every table described once (`schema`), the text encodings of every column
//! kind both ways (`encoding`), and validated row building into Arrow batches (`rows`).
//! **Pure (arrow only)**: no Lance, no files; `store` and `formats` build on it.

pub mod clock;
pub mod encoding;
pub mod rows;
pub mod schema;
