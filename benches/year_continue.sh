#!/usr/bin/env bash
# Issue 35: lives a finished `memlife bench year` on for more days from its last state, with
# every day recorded: to compare two policies (a config, or two binaries) from the same aged
# store. The copy's fresh copy is written anew at the end.
# Usage: bash benches/year_continue.sh SRC DST BIN DAYS [CONFIG]
#   SRC: a finished year's --keep folder (not changed); DST: the copy to live on (replaced);
#   BIN: the memlife binary; DAYS: the day to live until (more than SRC's last);
#   CONFIG: a memlife.toml whose [retention] replaces the year's, optional.
# Facts run out after the year's own days: the days beyond have recalls and the nightly jobs.
set -euo pipefail
src="$1"; dst="$2"; bin="$3"; days="$4"; config="${5:-$src/memlife.toml}"
rm -rf "$dst"; cp -a "$src" "$dst"; rm -rf "$dst/fresh"
python3 - "$dst/year-state.json" "$days" "$config" <<'PY'
import json, sys, tomllib
path, days, config = sys.argv[1], int(sys.argv[2]), sys.argv[3]
state = json.load(open(path))
state["shape"]["days"] = days
retention = tomllib.load(open(config, "rb")).get("retention", {})
state["shape"]["retention"].update(retention)
json.dump(state, open(path, "w"))
PY
"$bin" bench year --memories 10000 --days "$days" --config "$config" --keep "$dst" --resume \
    --sample-every 1
