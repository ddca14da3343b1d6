# Issue 35: sourced by the day scripts (benches/run_due_day.sh, benches/recall_day.sh).
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
