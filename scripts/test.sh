#!/usr/bin/env bash
# Quick start, part 2: the whole test suite (unit tests of the pure core, then the one
# integration-test binary that drives the real CLI on real Lance folders).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --all-targets "$@"
