#!/usr/bin/env python3
"""Issue 35: a kept year's store with its age taken out, for benches/year_first_and_last.py.

Copies the `--keep` folder of a `memlife bench year` (SRC) to DST and, on the copy, rewrites
each table's current rows into as few fragments as Lance writes for a fresh table, merges
each index into one segment over them, and removes every older version. The same rows, the
same indexes (types and parameters kept, as Lance's optimize keeps them), the same marks and
logs: only versions, fragments, deleted rows and index segments differ from SRC. So
`year_first_and_last.py BIN DST SRC` measures each job on the same next day twice, and the
ratio is what the store's age costs, with the growth of its rows taken out.

(The bench's own `fresh` copy holds only the tables `import` writes, so jobs that keep marks
elsewhere, `entity_scans` for one, redo their work on it: a byte baseline, not a time one.)

Needs pylance of Lance's version in Cargo.lock (`pip install pylance==14.0.2`).
Usage: python3 benches/year_made_fresh.py SRC DST [STEPS [TABLES]]
  STEPS: which parts of age to take out, comma-separated, of `fragments` (compaction, which
  merges the index segments too), `indexes` (index segments merged only) and `versions`
  (older versions removed); default all three.
  TABLES: only these tables (comma-separated; default every table).
"""
import datetime as dt
import shutil
import sys
from pathlib import Path

import lance

src, dst = Path(sys.argv[1]), Path(sys.argv[2])
steps = set((sys.argv[3] if len(sys.argv) > 3 else "fragments,indexes,versions").split(","))
if not steps <= {"fragments", "indexes", "versions"}:
    sys.exit(f"unknown steps {steps}")
if dst.exists():
    sys.exit(f"{dst} exists")
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("fresh", "*.parquet"))
only = set(sys.argv[4].split(",")) if len(sys.argv) > 4 else None
for table in sorted((dst / "db").glob("*.lance")):
    if only is not None and table.stem not in only:
        continue
    ds = lance.dataset(str(table))
    before = (len(ds.get_fragments()), len(ds.versions()), len(ds.list_indices()))
    # Compaction leaves fragments covered by different index segments apart, so a second
    # round, after the segments are merged, joins what the first left.
    for _ in range(2):
        if ds.count_rows() == 0 or not steps & {"fragments", "indexes"}:
            break
        if "fragments" in steps:
            ds.optimize.compact_files(
                target_rows_per_fragment=1 << 20,
                materialize_deletions=True,
                materialize_deletions_threshold=0.0,
                num_threads=2,
            )
            ds = lance.dataset(str(table))
        if ds.list_indices():
            ds.optimize.optimize_indices(num_indices_to_merge=1 << 20)
        ds = lance.dataset(str(table))
    if "versions" in steps:
        ds.cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    ds = lance.dataset(str(table))
    after = (len(ds.get_fragments()), len(ds.versions()), len(ds.list_indices()))
    print(f"{table.name}: {ds.count_rows()} rows; fragments, versions, index segments "
          f"{before} -> {after}")
