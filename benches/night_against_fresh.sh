# Issue 35: sourced by the day scripts (benches/run_due_day.sh, benches/recall_day.sh).
# day_of_year BIN STORE PREFIX: a work folder (W) holding a fresh copy of BIN (BIN, BENCHMARKS.md
# session 52), of STORE's database (W/day) and its config; D, the last day STORE lived; NIGHT,
# the next night's clock, as `bench year` counts days from 2026-01-01. The caller removes W.
day_of_year() {
  W=$(mktemp -d "${TMPDIR:-/tmp}/$3.XXXX")
  cp "$1" "$W/memlife"; BIN="$W/memlife"
  D=$(python3 -c "import json;print(json.load(open('$2/year-state.json'))['day_done'])")
  NIGHT=$(python3 -c "import datetime as dt;print((dt.datetime(2026,1,1,2,tzinfo=dt.timezone.utc)+dt.timedelta(days=$D+1)).isoformat())")
  cp -r "$2/db" "$W/day"; cp "$2/memlife.toml" "$W/memlife.toml"
}

# night_against_fresh BIN STORE WORK NIGHT JOB...: three times, on a fresh copy of STORE's
# database and on the day's (WORK/day), each on a copy of its own, times each JOB (a memlife
# command line, word-split) at the clock NIGHT, with WORK/memlife.toml, one line per store.
night_against_fresh() {
  local bin=$1 store=$2 work=$3 night=$4; shift 4
  local i kind j a b line
  for i in 1 2 3; do
    rm -rf "$work/fresh"; cp -r "$store/db" "$work/fresh"
    for kind in fresh day; do
      rm -rf "$work/run"; cp -r "$work/$kind" "$work/run"
      line="$kind:"
      for j in "$@"; do
        a=$(date +%s.%N)
        # shellcheck disable=SC2086
        "$bin" --db "$work/run" --config "$work/memlife.toml" $j --now "$night" > /dev/null
        b=$(date +%s.%N)
        line="$line ${j%% *} $(python3 -c "print(round($b-$a, 3))") s"
      done
      echo "$line"
    done
  done
}
