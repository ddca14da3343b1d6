#!/usr/bin/env bash
# Benchmarks of issue 3: local embedding throughput on 2 cores; top-10 neighbours of every
# memory of a 100k-memory user (384-d) with the parallel kernel against the naive loop; and a
# Lance vector index on 1M vectors (build time, recall@10 against exact search).
# Usage: bash benches/embeddings.sh [work-dir]   (needs ~4 GB of free disk)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-model.sh
command -v /usr/bin/time >/dev/null || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
cargo build --profile perf --bin memlife
bin="${CARGO_TARGET_DIR:-target}/perf/memlife"
work="${1:-bench-data}"
mkdir -p "$work"

echo "== local embedding throughput (all-MiniLM-L6-v2, candle, CPU)"
"$bin" bench embed --sentences 1000 --batch-size 32
echo "== lexical hash embedder"
"$bin" bench embed --sentences 100000 --batch-size 1024 --embedder hash
echo "== top-10 of every vector, 100k x 384"
"$bin" bench similarity --vectors 100000 --dim 384 --k 10 --naive-queries 300
"$bin" bench similarity --vectors 100000 --dim 384 --k 10 --naive-queries 300 --data random

echo "== vector index on 1M lexical vectors"
file="$work/synth-1000000-hash.parquet"
[ -f "$file" ] || "$bin" synth --users 1000 --memories 1000000 --dim 384 --vectors hash --seed 5 -o "$file" >/dev/null
db="$work/db-index"
rm -rf "$db"
"$bin" --db "$db" init >/dev/null
"$bin" --db "$db" import "$file" >/dev/null
/usr/bin/time -f "index wall %e s, peak RSS %M KB" "$bin" --db "$db" --json index --kind ivf-pq --sample 200
