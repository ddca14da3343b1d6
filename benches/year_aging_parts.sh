#!/usr/bin/env bash
# Issue 35: which part of a kept year's age slows recall. Makes four copies of the memories
# store and times the same recalls on each (benches/recall_stores.sh): the aged store as the
# year left it; the same with every index's segments merged into one; the same with its
# fragments compacted into one as well (versions still all there); the fresh copy of its rows.
# The merging is done with pylance, at the lance version memlife is built on (Cargo.lock):
#   python3 -m venv /tmp/pyl && /tmp/pyl/bin/pip install pylance==14.0.2
# Usage: bash benches/year_aging_parts.sh DIR BIN ROUNDS [PYTHON]
#   DIR: the --keep folder of a finished `memlife bench year`; PYTHON: one with pylance
set -euo pipefail
dir="$1"; bin="$2"; rounds="$3"; py="${4:-/tmp/pyl/bin/python}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cp -r "$dir/db" "$work/aged"
cp -r "$dir/db" "$work/merged-indexes"
"$py" - "$work/merged-indexes/memories.lance" <<'PY'
import sys, lance
lance.dataset(sys.argv[1]).optimize.optimize_indices(num_indices_to_merge=64)
PY
cp -r "$work/merged-indexes" "$work/merged-indexes-and-fragments"
"$py" - "$work/merged-indexes-and-fragments/memories.lance" <<'PY'
import sys, lance
lance.dataset(sys.argv[1]).optimize.compact_files(
    target_rows_per_fragment=1 << 20, materialize_deletions_threshold=0.0)
lance.dataset(sys.argv[1]).optimize.optimize_indices(num_indices_to_merge=64)
PY
for s in aged merged-indexes merged-indexes-and-fragments; do
    "$py" - "$work/$s/memories.lance" "$s" <<'PY'
import sys, lance, collections
ds = lance.dataset(sys.argv[1])
seg = collections.Counter(i["name"] for i in ds.list_indices())
print(f"{sys.argv[2]}: {len(ds.get_fragments())} fragments, {len(ds.versions())} versions, "
      f"index segments {dict(seg)}")
PY
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
bash "$(dirname "$0")/recall_stores.sh" "$bin" "$dir" "$rounds" \
    "$work/aged" "$work/merged-indexes" "$work/merged-indexes-and-fragments" "$dir/fresh"
