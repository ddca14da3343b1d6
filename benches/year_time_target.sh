#!/bin/bash
# Issue 35's time target (each job's time on day 365 within 1.25x of day 1) read five ways in
# one command, on one morning. `bench year` adds 20 facts a day, so its day 365 holds 1.73x
# day 1's memories, and a job whose work is a share of the users' memories grows with them
# however young the store. So day 366 is timed (benches/year_first_and_last.py: the same facts,
# recalls and nightly jobs on copies, alternating, paired medians) against:
#   day1    day 1 itself, the issue's comparison, lived on a year of the same options paused
#           after day 0's night (`--until-day 0`). Its `scores` recomputes every memory
#           day 0's links point at, more than any later night (6,256 in the year of
#           BENCHMARKS.md, session 55), and no version is old enough to remove;
#   day2    the year's day 2 (the comparison of sessions 30-54, from its copy after day 1):
#           the night after that, when few memories are due yet (1,103), window still empty;
#   day31   the year's day 31: the first day after `scores`' 30-day due horizon and the
#           14-day version window have filled, with 1.63x fewer memories than day 366;
#   same2   day 2 of a year as large as day 365 (history apart from growth);
#   same16  day 16 of that year, the first night its version window is full.
# Usage: bash benches/year_time_target.sh BIN WORK [ROUNDS]
#   WORK is made; the stores in it are reused by a second call (delete WORK to start again).
set -euo pipefail
BIN=$1; WORK=$2; ROUNDS=${3:-12}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
opts=(bench year --memories 10000 --days 365 --json)
year=("${opts[@]}" --keep "$WORK/year")
done_day() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['day_done'])" "$1/year-state.json" 2>/dev/null || echo 0; }
# Day 0's night alone, then the year, copied as it stood after days 1 and 30.
[ -d "$WORK/day0" ] || "$BIN" "${opts[@]}" --keep "$WORK/day0" --until-day 0 > /dev/null
for day in 1 30; do
  if [ ! -d "$WORK/day$day" ]; then
    if [ "$(done_day "$WORK/year")" = 0 ]; then "$BIN" "${year[@]}" --until-day "$day" > /dev/null
    else "$BIN" "${year[@]}" --resume --until-day "$day" > /dev/null; fi
    cp -a "$WORK/year" "$WORK/day$day"
  fi
done
[ "$(done_day "$WORK/year")" -ge 365 ] || "$BIN" "${year[@]}" --resume > /dev/null
N=$("$BIN" --db "$WORK/year/db" sql "SELECT count(*) AS n FROM memories" --format csv | tail -1)
for days in 1 15; do
  [ -d "$WORK/same$((days + 1))" ] || "$BIN" bench year --memories "$N" --days "$days" \
    --repeats 1 --keep "$WORK/same$((days + 1))" --json > /dev/null
done
for first in day1:day0 day2:day1 day31:day30 same2:same2 same16:same16; do
  name=${first%%:*}; dir=${first#*:}
  echo "== day 366 against $name" >&2
  python3 "$HERE/year_first_and_last.py" "$BIN" "$WORK/$dir" "$WORK/year" "$ROUNDS" \
    "$WORK/$name.samples.json" | tee "$WORK/$name.txt" >&2
done
python3 - "$WORK" <<'PY'
import json, statistics, sys
from pathlib import Path
work = Path(sys.argv[1])
refs = ["day1", "day2", "day31", "same2", "same16"]
seen = {r: json.loads((work / f"{r}.samples.json").read_text()) for r in refs}
print("day 366 over each reference: paired median (rounds' last over first); * over 1.25x")
print(f"{'job':<16}" + "".join(f"{r:>10}" for r in refs))
for job in seen[refs[0]]["first"][0]:
    cells = []
    for r in refs:
        s = seen[r]
        x = statistics.median(l[job] / f[job] for f, l in zip(s["first"], s["last"]))
        cells.append(f"{x:9.2f}{'*' if x > 1.25 else ' '}")
    print(f"{job:<16}" + "".join(cells))
PY
