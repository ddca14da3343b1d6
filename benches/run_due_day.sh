#!/bin/bash
# Issue 35: a day of the README's one cron line, `* * * * * memlife run-due`, before a night's
# jobs. On a copy of a `bench year --keep` folder (STORE), runs MINUTES run-dues, one a minute
# of the day after STORE's last, of a schedule of the two entries of minutes of
# jobs/schedule.toml: `batches poll` every minute (no batch pending: it writes nothing) and
# `integrate` every 15 minutes (an empty inbox). Then times `scores`, `embed` and `entities`
# at the next night's clock on that copy and on a fresh copy of STORE, three times each, and
# prints `runs`' rows, fragments and versions on both.
# Usage: bash benches/run_due_day.sh BIN STORE [MINUTES]
set -euo pipefail
S=$(realpath "$2"); N=${3:-1440}
# shellcheck source=benches/night_against_fresh.sh
source "$(dirname "$0")/night_against_fresh.sh"
day_of_year "$1" "$S" memlife-rundue; trap 'rm -rf "$W"' EXIT
START=$(python3 -c "import datetime as dt;print((dt.datetime(2026,1,1,2,1,tzinfo=dt.timezone.utc)+dt.timedelta(days=$D)).isoformat())")
: > "$W/inbox.jsonl"
cat > "$W/schedule.toml" <<EOF
[settings]
db = "$W/day"
config = "$W/memlife.toml"
logs = "$W/logs"

[[job]]
name = "batches-poll"
run = "batches poll"
cadence = "every 1 minute"
dag = "memlife_batches"
about = "apply finished batches"

[[job]]
name = "integrate"
run = "integrate --llm offline --embedder hash --on-error skip $W/inbox.jsonl"
cadence = "every 15 minutes"
dag = "memlife_integrate"
about = "integrate the inbox"
EOF
C="--db $W/day --config $W/memlife.toml"
t0=$(date +%s.%N); last=$t0
python3 -c "
import datetime as dt
t=dt.datetime.fromisoformat('$START')
for i in range($N): print((t+dt.timedelta(minutes=i)).strftime('%Y-%m-%dT%H:%M:%SZ'))" | {
  i=0
  while read -r c; do
    "$BIN" $C run-due --file "$W/schedule.toml" --now "$c" > /dev/null
    i=$((i+1))
    if (( i % 240 == 0 )); then
      now=$(date +%s.%N)
      echo "run-dues $((i-239))-$i: $(python3 -c "print(round(($now-$last)/240, 3))") s each"
      last=$now
    fi
  done
}
runs() {
  "$BIN" --db "$1" --config "$W/memlife.toml" --json stats | python3 -c "
import json,sys
t=[t for t in json.load(sys.stdin)['storage'] if t['table']=='runs'][0]
print(f\"runs: {t['rows']} rows, {t['fragments']} fragments, {t['versions']} versions\")"
}
echo "after the day: $(runs "$W/day")"
night_against_fresh "$BIN" "$S" "$W" "$NIGHT" "scores" "embed --embedder hash" "entities --embedder hash"
echo "STORE: $(runs "$W/fresh")"
