#!/usr/bin/env bash
# Issue 17: the quick start's first build, timed step by step, and where its compile time goes.
# Clones the repository into a new folder and builds into a new, empty target folder, then:
# scripts/setup.sh + scripts/fetch-model.sh; `cargo build --bin memlife --timings`; then
# `bash scripts/demo.sh` (its build then a no-op). Prints the seconds of each step and, from
# cargo's timings report, the compile seconds of each direct dependency and of the crates only
# it brings (benches/depcost.py).
#
# For the figures of a fresh machine (BENCHMARKS.md "Issue 17: the first build"), first make
# this one fresh by hand; the script does not delete caches or packages itself:
#   rm -rf ~/.cargo/registry ~/.cargo/git; apt-get remove -y protobuf-compiler
# Usage: bash benches/first_build.sh [work-dir] [git-rev]   (about 12 minutes on 2 cores)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(realpath -m "${1:-bench-first-build}")"
rev="${2:-HEAD}"
rm -rf "$work/src" "$work/target"
mkdir -p "$work"
git clone -q "$repo" "$work/src"
git -C "$work/src" checkout -q "$rev"
export CARGO_TARGET_DIR="$work/target"
cd "$work/src"
grep -m1 "model name" /proc/cpuinfo
s0=$(date +%s)
bash scripts/setup.sh
bash scripts/fetch-model.sh
s1=$(date +%s)
cargo build --bin memlife --timings
s2=$(date +%s)
bash scripts/demo.sh > "$work/demo.out" 2>&1
s3=$(date +%s)
echo "setup + model $((s1 - s0)) s; build $((s2 - s1)) s; demo $((s3 - s2)) s; total $((s3 - s0)) s"
python3 "$repo/benches/depcost.py" "$CARGO_TARGET_DIR/cargo-timings/cargo-timing.html" "$work/src"
