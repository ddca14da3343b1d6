#!/usr/bin/env bash
# Issue 37: nothing prune deleted is lost. Copies a kept year's store (DIR/db), imports every
# export file prune wrote (DIR/db.prune-archive: entities, memories, links, entity rows) into
# the copy (`--keep-existing`: rows still there, entities above all, stay as they are),
# and counts the memories PRUNE audit rows say were deleted that are back, then runs `check`.
# Usage: bash benches/prune_reimport.sh DIR [BIN]   (BIN: default target/debug/memlife)
set -eu
dir="$1"; bin="${2:-target/debug/memlife}"
copy="$(mktemp -d)/db"
cp -r "$dir/db" "$copy"
for table in entities memories links memory_entities; do
    for f in "$dir"/db.prune-archive/*."$table".parquet; do
        [ -e "$f" ] || continue
        "$bin" --db "$copy" import --keep-existing --table "$table" "$f" > /dev/null
    done
done
deleted=$("$bin" --db "$copy" sql --format csv "SELECT COUNT(DISTINCT target_id) AS n FROM audit_log WHERE operation = 'PRUNE' AND classification = 'DELETE'" | tail -1)
back=$("$bin" --db "$copy" sql --format csv "SELECT COUNT(DISTINCT target_id) AS n FROM audit_log WHERE operation = 'PRUNE' AND classification = 'DELETE' AND target_id IN (SELECT id FROM memories WHERE embedding IS NOT NULL)" | tail -1)
echo "{\"deleted_by_prune\": $deleted, \"back_with_their_vectors\": $back}"
"$bin" --db "$copy" check
rm -rf "$(dirname "$copy")"
