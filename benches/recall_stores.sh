#!/usr/bin/env bash
# Issue 35: the same recalls on copies of several stores, alternated round by round, and the
# median seconds of each (a store's copy takes each recall's activation, the original none).
# Queries come from a year's base rows. Usage:
#   bash benches/recall_stores.sh BIN YEARDIR ROUNDS STORE...
set -euo pipefail
bin="$1"; year="$2"; rounds="$3"; shift 3
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
mapfile -t queries < <(python3 -c "
import json
rows = [json.loads(l) for l in open('$year/base.jsonl')]
for r in rows[::max(1, len(rows) // 5)][:5]: print(r['user_id'] + '\t' + r['text'])")
now=2027-01-02T02:00:00+00:00
i=0
for s in "$@"; do cp -r "$s" "$work/$i"; : > "$work/$i.t"; i=$((i + 1)); done
for _ in $(seq "$rounds"); do
    for j in $(seq 0 $((i - 1))); do
        for q in "${queries[@]}"; do
            a=$(date +%s%N)
            "$bin" --config "$year/memlife.toml" --db "$work/$j" --json recall "${q#*$'\t'}" \
                --user "${q%%$'\t'*}" --embedder hash --now "$now" > /dev/null
            echo $(( ($(date +%s%N) - a) / 1000000 )) >> "$work/$j.t"
        done
    done
done
j=0
for s in "$@"; do
    echo "$s: recall median $(python3 -c "import statistics; print(statistics.median(int(l) for l in open('$work/$j.t')))") ms"
    j=$((j + 1))
done
