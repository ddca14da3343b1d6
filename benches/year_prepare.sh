#!/bin/bash
# Issue 35: makes a `bench year --keep` folder of an older binary fit for
# benches/year_first_and_last.py with a newer one. Copies SRC to DST, lets BIN migrate it,
# builds or updates its scalar indexes (`index --scalar`, so both compared stores hold the same
# indexes), and runs entities, scores and link once at the store's own clock, so the marks
# and due dates a nightly run of BIN leaves exist before the next day is measured. With
# --optimize, a full `optimize` at the same clock ends it, so both stores hold their indexes
# and fragments as BIN's weekly run leaves them.
#
# Usage: bash benches/year_prepare.sh BIN SRC DST [--optimize]
set -euo pipefail
BIN=$1; SRC=$2; DST=$3; OPTIMIZE=${4:-}
rm -rf "$DST"; cp -r "$SRC" "$DST"
DAY=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['day_done'])" "$DST/year-state.json")
NOW=$(python3 -c "import datetime as dt,sys;print((dt.datetime(2026,1,1,2,tzinfo=dt.timezone.utc)+dt.timedelta(days=int(sys.argv[1]))).isoformat())" "$DAY")
C=(--config "$DST/memlife.toml" --db "$DST/db" --json)
for step in "entities --embedder hash" "scores" "link --llm offline"; do
  # shellcheck disable=SC2086
  "$BIN" "${C[@]}" $step --now "$NOW" | python3 -c "import json,sys;r=json.load(sys.stdin);print(r['job'],r['status'],r['duration_ms'],'ms')"
done
"$BIN" --db "$DST/db" --json index --scalar > /dev/null
if [ "$OPTIMIZE" = --optimize ]; then
  "$BIN" "${C[@]}" optimize --now "$NOW" | python3 -c "import json,sys;r=json.load(sys.stdin);print(r['job'],r['status'],r['duration_ms'],'ms')"
elif [ -n "$OPTIMIZE" ]; then
  echo "unknown option $OPTIMIZE (only --optimize)" >&2; exit 2
fi
echo "prepared $DST (day $DAY, clock $NOW)"
