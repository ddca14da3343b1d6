#!/usr/bin/env bash
# Issue 35: lives `memlife bench year` (10k memories, 365 days) in pieces, so that the days
# whose times are recorded (1, 100, 200, 300, 365) run with no compiler or test on the machine,
# and the days between run beside other work. Waits for quiet before each recorded day.
# Usage: bash benches/year_in_pieces.sh BIN DIR [CONFIG] [BENCH YEAR OPTION...]
#   BIN: the memlife binary (a perf build); DIR: the --keep folder (created);
#   CONFIG: a memlife.toml for the year (its [retention] section), optional ("" for none);
#   further options go to every `bench year` call (e.g. --no-optimize for the baseline).
set -u
bin="$1"; dir="$2"; config="${3:-}"
shift $(( $# < 3 ? $# : 3 ))
year=(bench year --memories 10000 --days 365 --keep "$dir" "$@")
[ -n "$config" ] && year+=(--config "$config")
busy() { pgrep -x rustc >/dev/null || pgrep -f "target/debug/" >/dev/null || pgrep -f "cargo test" >/dev/null; }
quiet() { while busy; do sleep 5; done; }
quiet; "$bin" "${year[@]}" --until-day 1 || exit 1
for day in 100 200 300; do
    "$bin" "${year[@]}" --resume --until-day $((day - 1)) || exit 1
    quiet; "$bin" "${year[@]}" --resume --until-day "$day" || exit 1
done
"$bin" "${year[@]}" --resume --until-day 364 || exit 1
quiet; "$bin" "${year[@]}" --resume
