#!/usr/bin/env bash
# Benchmark of issue 5: `memlife scores` over 1M memories end to end (read, compute, write),
# target <= 5 s wall and <= 1.5 GB peak RSS on a 2-core machine; the compute-only part is the
# report's compute_ms. Runs three recalculations: the first adopts anchors, the second is a day
# later (every salience moves: the daily case), the third repeats the second's --now (nothing
# changes: idempotence).
# Usage: bash benches/scores.sh [work-dir] [memories]   (needs ~3 GB of free disk)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
command -v /usr/bin/time >/dev/null || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
cargo build --profile perf --bin memlife
bin="${CARGO_TARGET_DIR:-target}/perf/memlife"
work="${1:-bench-data}"
n="${2:-1000000}"
mkdir -p "$work"
file="$work/synth-$n.parquet"
[ -f "$file" ] || "$bin" synth --users $((n / 1000)) --memories "$n" --dim 384 --seed 5 -o "$file" >/dev/null
db="$work/db-scores-$n"
rm -rf "$db"
"$bin" --db "$db" init >/dev/null
"$bin" --db "$db" import "$file" >/dev/null
for now in 2026-01-01T00:00:00Z 2026-01-02T00:00:00Z 2026-01-02T00:00:00Z; do
  echo "== scores --now $now"
  /usr/bin/time -f "scores wall %e s, peak RSS %M KB" "$bin" --db "$db" --json scores --now "$now" \
    | grep -E '"(processed|changed|compute_ms|archived|promoted|made_core|duration_ms)"'
done
