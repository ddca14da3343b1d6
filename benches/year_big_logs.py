#!/usr/bin/env python3
"""Issue 35: a kept year's store with its run log and audit log grown, to time what the jobs'
lookups in them cost at the size a store of many shards or many years reaches.

Copies SRC (a `--keep` folder of `memlife bench year`) to DST and appends to `runs` RUNS
copies of its rows and to `audit_log` AUDIT copies of its rows, each copy under new keys
(`run_id`, `id` suffixed), then brings the existing indexes of both tables up to date (a
store in service keeps them current). With --index it also builds the indexes session 49
added (`runs.run_id`, `runs.job`, `audit_log.operation`, `audit_log.run_id`), as the jobs
would. Needs pylance (the Lance version of Cargo.lock, 14.0.2).

Usage: python3 benches/year_big_logs.py SRC DST RUNS AUDIT [--index]
Then: python3 benches/year_first_and_last.py BIN DST_WITHOUT DST_WITH ROUNDS
"""
import shutil
import sys

import lance
import pyarrow as pa
import pyarrow.compute as pc

src, dst = sys.argv[1], sys.argv[2]
copies = {"runs": ("run_id", int(sys.argv[3])), "audit_log": ("id", int(sys.argv[4]))}
index = "--index" in sys.argv[5:]
shutil.copytree(src, dst)
for table, (key, n) in copies.items():
    path = f"{dst}/db/{table}.lance"
    base = lance.dataset(path).to_table()
    at = base.schema.get_field_index(key)
    parts = [
        base.set_column(at, key, pc.binary_join_element_wise(base[key], pa.scalar(f"-x{k}"), ""))
        for k in range(n)
    ]
    if parts:
        lance.write_dataset(pa.concat_tables(parts), path, mode="append")
    if index:
        added = {"runs": [("run_id", "BTREE"), ("job", "BITMAP")],
                 "audit_log": [("operation", "BITMAP"), ("run_id", "BTREE")]}[table]
        for column, kind in added:
            lance.dataset(path).create_scalar_index(column, index_type=kind)
    ds = lance.dataset(path)
    if ds.list_indices():
        ds.optimize.optimize_indices()
    print(table, lance.dataset(path).count_rows(), "rows")
