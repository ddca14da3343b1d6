#!/bin/bash
# Issue 35: how much of a job's day-366 time is the store's history, and how much its
# growth. `bench year` integrates new facts every day (20 a day on 10,000 memories: 1.73x the
# rows by day 365), and a job whose work is a share of a user's memories grows with them.
# This lives a year of the same size as LAST's last day for DAYS days (default 1: its first
# day; 15: the first night the 14-day version window is full), then times the next day on
# copies of that store against LAST's (benches/year_first_and_last.py): the ratios are then
# history alone, the rows being the same.
# Usage: bash benches/year_same_size.sh BIN LAST_DIR OUT_DIR [ROUNDS] [DAYS]
#   OUT_DIR is made by `bench year --keep` (an existing one is reused as is).
set -euo pipefail
BIN=$1; LAST=$2; OUT=$3; ROUNDS=${4:-12}; DAYS=${5:-1}
if [ ! -f "$OUT/year-state.json" ]; then
  N=$("$BIN" --db "$LAST/db" sql "SELECT count(*) AS n FROM memories" --format csv | tail -1)
  echo "a year of $N memories on day 0, $DAYS day(s), kept in $OUT" >&2
  "$BIN" bench year --memories "$N" --days "$DAYS" --repeats 1 --keep "$OUT" --json > "$OUT.json"
fi
python3 "$(dirname "$0")/year_first_and_last.py" "$BIN" "$OUT" "$LAST" "$ROUNDS"
