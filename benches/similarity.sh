#!/usr/bin/env bash
# Issue 13: the all-pairs top-10 search (`cluster --mode full`, `link`) on 100k x 384 vectors,
# per instruction set and with or without the partition, on lexical-hash vectors of synthetic
# texts and on uniform random vectors; then the same search over MiniLM embeddings of 40k
# synthetic memories (embedded by the local model: ~6 min on 2 cores), written out of a real
# store. On an AVX-512 VNNI CPU `--isa avx2` runs the AVX2 kernel too; on an AVX2-only CPU the
# VNNI runs are refused with an error and skipped.
# Usage: bash benches/similarity.sh [work-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-model.sh
cargo build --profile perf --bin memlife
bin="${CARGO_TARGET_DIR:-target}/perf/memlife"
work="${1:-bench-data}"
mkdir -p "$work"
grep -m1 "model name" /proc/cpuinfo
grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_vnni)$' | tr '\n' ' '
echo

run() { echo "== bench similarity $*"; "$bin" bench similarity --naive-queries 500 "$@" || true; }
for isa in avx512-vnni avx2; do
    run --vectors 100000 --dim 384 --k 10 --isa "$isa"
    run --vectors 100000 --dim 384 --k 10 --isa "$isa" --no-partition
    run --vectors 100000 --dim 384 --k 10 --isa "$isa" --data random
done

echo "== MiniLM embeddings of 40k synthetic memories"
vectors="$work/minilm-40000.f32"
if [ ! -f "$vectors" ]; then
    db="$work/db-minilm-40000"
    rm -rf "$db"
    "$bin" synth --users 1 --memories 40000 --seed 5 -o "$work/synth-40000.jsonl" >/dev/null
    "$bin" --db "$db" init >/dev/null
    "$bin" --db "$db" import "$work/synth-40000.jsonl" >/dev/null
    "$bin" --db "$db" embed --model-dir models/all-MiniLM-L6-v2 >/dev/null
    "$bin" --db "$db" export -o "$work/minilm-40000.jsonl" >/dev/null
    python3 - "$work/minilm-40000.jsonl" "$vectors" <<'PY'
import json, struct, sys
with open(sys.argv[2], "wb") as out:
    for line in open(sys.argv[1]):
        vector = json.loads(line)["embedding"]
        out.write(struct.pack("<%df" % len(vector), *vector))
PY
fi
for isa in avx512-vnni avx2; do
    run --vectors-file "$vectors" --dim 384 --k 10 --isa "$isa"
    run --vectors-file "$vectors" --dim 384 --k 10 --isa "$isa" --no-partition
done
