# memlife recipes: one line each. `just --list` shows them.

# Build and run the end-to-end demo on the committed sample (README quick start).
demo:
    bash scripts/demo.sh

# The whole test suite (README quick start).
test:
    bash scripts/test.sh

# Formatting and lints, as CI expects them.
lint:
    cargo fmt --all -- --check && cargo clippy --workspace --all-targets -- -D warnings

# Regenerate the committed sample data (deterministic: the same bytes every time).
sample:
    cargo run --bin memlife -- synth --users 4 --memories 1000 --seed 42 -o data/sample.jsonl

# Rewrite the saved-SQL snapshots after an intended change; review the diff.
snapshots:
    UPDATE_SNAPSHOTS=1 cargo test --test it saved_sql
    INSTA_UPDATE=always cargo test --test it reports

# Import and SQL benchmarks at 100k and 1M memories (see BENCHMARKS.md).
bench:
    bash benches/import_sql.sh

# Embedding, neighbour-search and vector-index benchmarks (see BENCHMARKS.md).
bench-embeddings:
    bash benches/embeddings.sh

# Score recalculation over 1M memories (see BENCHMARKS.md).
bench-scores:
    bash benches/scores.sh

# The LLM layer at model latency: 1000 classifications, concurrency 64, mock at 1000 ms.
bench-llm:
    bash benches/llm.sh

# The whole consolidation (cluster, both passes, apply) at 1k, 10k and 100k memories against the
# mock at 1500 ms per call, online and as Batch API rounds (perf build; see BENCHMARKS.md).
bench-consolidate:
    cargo build --profile perf --bin memlife
    for n in 1000 10000 100000; do "${CARGO_TARGET_DIR:-target}/perf/memlife" bench consolidate --memories $n; done
    "${CARGO_TARGET_DIR:-target}/perf/memlife" bench consolidate --memories 1000 --batch
    "${CARGO_TARGET_DIR:-target}/perf/memlife" bench consolidate --memories 1000 --judge oracle

# An OpenAI-compatible mock server on port 8089 answering memlife prompts (offline judge).
mock:
    cargo run --bin memlife -- mock-llm --port 8089
