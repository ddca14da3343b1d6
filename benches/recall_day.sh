#!/bin/bash
# Issue 35: a day of an agent's recalls before a night's jobs. Each recall logs a RECALL row
# in `audit_log` and writes its activations to `activations`, a Lance commit each. On a copy
# of a `bench year --keep` folder (STORE), runs N recalls (each activating), spread over the
# day after STORE's last, of texts of STORE's memories by their users (hash embedder), and
# prints the mean time of each 10% of them; then times `integrate` (the 20 facts of
# benches/year_next_facts.py), `scores` and `link` at the next night's clock on that
# copy and on a fresh copy of STORE, three times each, and prints `audit_log`'s and
# `activations`' fragments on both.
# Usage: bash benches/recall_day.sh BIN STORE [N]
set -euo pipefail
S=$(realpath "$2"); N=${3:-1000}
# shellcheck source=benches/night_against_fresh.sh
source "$(dirname "$0")/night_against_fresh.sh"
day_of_year "$1" "$S" memlife-recalls; trap 'rm -rf "$W"' EXIT
python3 - "$S" "$D" "$N" "$NIGHT" "$W" <<'PY'
import datetime as dt, json, random, sys
S, d, n, night, W = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
base = [json.loads(l) for l in open(S + "/base.jsonl")]
rng = random.Random(53)
start = dt.datetime(2026, 1, 1, 3, tzinfo=dt.timezone.utc) + dt.timedelta(days=d)
with open(W + "/recalls.tsv", "w") as out:
    for i in range(n):
        r = rng.choice(base)
        words = r["text"].split()
        q = " ".join(words[: max(3, len(words) // 2)])
        at = start + dt.timedelta(seconds=i * 22 * 3600 // n)
        out.write(f"{r['user_id']}\t{q}\t{at.strftime('%Y-%m-%dT%H:%M:%SZ')}\n")
PY
python3 "$(dirname "$0")/year_next_facts.py" "$S" "$NIGHT" "$W/facts.jsonl"
C="--db $W/day --config $W/memlife.toml"
step=$(( N / 10 > 0 ? N / 10 : 1 )); i=0; last=$(date +%s.%N)
while IFS=$'\t' read -r u q at; do
  "$BIN" $C recall "$q" --user "$u" --embedder hash --now "$at" > /dev/null
  i=$((i+1))
  if (( i % step == 0 )); then
    now=$(date +%s.%N)
    echo "recalls $((i-step+1))-$i: $(python3 -c "print(round(($now-$last)/$step, 3))") s each"
    last=$now
  fi
done < "$W/recalls.tsv"
tables() {
  "$BIN" --db "$1" --config "$W/memlife.toml" --json stats | python3 -c "
import json,sys
for t in json.load(sys.stdin)['storage']:
    if t['table'] in ('audit_log','activations'):
        print(f\"  {t['table']}: {t['rows']} rows, {t['fragments']} fragments, {t['versions']} versions\")"
}
echo "after the day:"; tables "$W/day"
night_against_fresh "$BIN" "$S" "$W" "$NIGHT" \
  "integrate $W/facts.jsonl --embedder hash --llm offline" "scores" "link --llm offline"
echo "STORE:"; tables "$W/fresh"
