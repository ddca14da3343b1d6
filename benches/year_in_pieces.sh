#!/usr/bin/env bash
# Issue 35: lives `memlife bench year` (10k memories, 365 days) in pieces, so that the days
# whose times are recorded (1, 100, 200, 300, 365) run with no compiler or test on the machine,
# and the days between run beside other work. Waits for quiet before each recorded day. Run
# again on the same DIR, it goes on from where the year stopped.
# Usage: bash benches/year_in_pieces.sh BIN DIR [CONFIG] [BENCH YEAR OPTION...]
#   BIN: the memlife binary (a perf build); DIR: the --keep folder (created);
#   CONFIG: a memlife.toml for the year (its [retention] section), optional ("" for none);
#   further options go to every `bench year` call (e.g. --no-optimize for the baseline).
set -u
bin="$1"; dir="$2"; config="${3:-}"
shift $(( $# < 3 ? $# : 3 ))
year=(bench year --memories 10000 --days 365 --keep "$dir" "$@")
[ -n "$config" ] && year+=(--config "$config")
busy() { pgrep -x rustc >/dev/null || pgrep -x clippy-driver >/dev/null || pgrep -f "target/debug/" >/dev/null || pgrep -f "cargo test" >/dev/null; }
quiet() { while busy; do sleep 5; done; }
# A kept year goes on from the day after its last one done (a session cut short, a kill).
done_day() { python3 -c "import json; print(json.load(open('$dir/year-state.json'))['day_done'])" 2>/dev/null || echo 0; }
upto() { [ "$(done_day)" -ge "$1" ] && return 0; "$bin" "${year[@]}" --resume --until-day "$1"; }
if [ "$(done_day)" = 0 ]; then quiet; "$bin" "${year[@]}" --until-day 1 || exit 1; fi
for day in 100 200 300; do
    upto $((day - 1)) || exit 1
    quiet; upto "$day" || exit 1
done
upto 364 || exit 1
quiet; [ "$(done_day)" -ge 365 ] || "$bin" "${year[@]}" --resume
