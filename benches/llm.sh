#!/usr/bin/env bash
# Benchmark of issue 4: 1000 classification requests in online mode against the mock server
# at 1000 ms latency and concurrency 64; the target is 1.3x the ideal ceil(1000/64) x 1 s.
# Usage: bash benches/llm.sh [requests] [concurrency] [latency-ms]
set -euo pipefail
cd "$(dirname "$0")/.."
requests="${1:-1000}"
concurrency="${2:-64}"
latency="${3:-1000}"
command -v /usr/bin/time >/dev/null || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
cargo build --bin memlife
bin="${CARGO_TARGET_DIR:-target}/debug/memlife"
port=18189
"$bin" mock-llm --port "$port" --latency-ms "$latency" > /dev/null &
mock=$!
trap 'kill $mock 2>/dev/null || true' EXIT
sleep 1
/usr/bin/time -f "bench llm: wall %e s, peak RSS %M KB" \
  "$bin" bench llm --url "http://127.0.0.1:$port/v1" --requests "$requests" \
  --concurrency "$concurrency" --latency-ms "$latency"
