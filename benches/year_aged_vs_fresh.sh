#!/usr/bin/env bash
# Issue 35: how much of a job's slowdown on the last day of `memlife bench year` is the store's
# age (versions, fragments, index segments) and how much its growth. Runs the same recalls
# and the same integration on copies of a kept year's store (`DIR/db`) and of the freshly
# written copy of its rows the bench left beside it (`DIR/fresh`, the same rows and indexes),
# alternating, and prints the median seconds of each on each.
# Usage: bash benches/year_aged_vs_fresh.sh DIR [BIN] [ROUNDS]
#   DIR: the `--keep` folder of a finished `memlife bench year`
#   BIN: the memlife binary (default: target/perf/memlife, built with `--profile perf`)
set -euo pipefail
dir="$1"
bin="${2:-target/perf/memlife}"
rounds="${3:-5}"
[ -d "$dir/db" ] && [ -d "$dir/fresh" ] || { echo "$dir has no db and fresh (a finished year's --keep folder)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$dir/db" "$work/aged"
cp -r "$dir/fresh" "$work/fresh"
config="$dir/memlife.toml"
# The clock of the day after the year's last run, and facts not in the store: the last
# synthetic rows, with new ids and that morning's time.
last=$(python3 -c "import json; print(json.load(open('$dir/year-state.json'))['day_done'])" 2>/dev/null || echo 365)
now=$(python3 -c "import datetime as d; print((d.datetime(2026,1,1,2,tzinfo=d.timezone.utc)+d.timedelta(days=$last+1)).isoformat())")
python3 - "$dir/all.jsonl" "$work/facts.jsonl" "$now" <<'EOF'
import json, sys, datetime as d
rows = [json.loads(l) for l in open(sys.argv[1])]
now = d.datetime.fromisoformat(sys.argv[3]) - d.timedelta(hours=1)
with open(sys.argv[2], "w") as out:
    for i, r in enumerate(rows[-20:]):
        r = {k: v for k, v in r.items() if k not in ("id", "last_accessed_at", "access_count", "recall_frequency", "state")}
        r["text"] = r["text"] + f" (again, {i})"
        r["created_at"] = now.isoformat()
        out.write(json.dumps(r) + "\n")
EOF
mapfile -t queries < <(python3 -c "
import json
rows = [json.loads(l) for l in open('$dir/base.jsonl')]
for r in rows[::max(1, len(rows) // 5)][:5]: print(r['user_id'] + '\t' + r['text'])")

seconds() { local s e; s=$(date +%s%N); "$@" > /dev/null; e=$(date +%s%N); echo "$(( (e - s) / 1000 ))e-6"; }
median() { python3 -c "import sys, statistics; print(statistics.median(float(l) for l in sys.stdin))"; }

for store in aged fresh; do : > "$work/recall-$store"; : > "$work/integrate-$store"; done
for round in $(seq "$rounds"); do
    for store in aged fresh; do
        db="$work/$store"
        for q in "${queries[@]}"; do
            seconds "$bin" --config "$config" --db "$db" --json recall "${q#*$'\t'}" --user "${q%%$'\t'*}" \
                --embedder hash --now "$now" >> "$work/recall-$store"
        done
    done
done
for store in aged fresh; do
    # One integration per store (a second of the same facts would find them all there).
    seconds "$bin" --config "$config" --db "$work/$store" --json integrate "$work/facts.jsonl" \
        --embedder hash --llm offline --now "$now" >> "$work/integrate-$store"
done
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo "CPU: $cpu; $rounds rounds of ${#queries[@]} recalls; day $((last + 1)) clock $now"
for job in recall integrate; do
    a=$(median < "$work/$job-aged"); f=$(median < "$work/$job-fresh")
    python3 -c "print(f'{\"$job\":<10} aged {$a:7.3f} s  fresh copy {$f:7.3f} s  aged/fresh {$a / $f:5.2f}')"
done
