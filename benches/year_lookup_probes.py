#!/usr/bin/env python3
"""Issue 35: probes of a kept year's tables with pylance 14.0.2 (`pip install
pylance==14.0.2`), each on copies, so the store is not changed (BENCHMARKS.md, session 51).

1. Every job's look for its runs still running (`job = 'link' AND status = 'running'`),
   counted on `runs` as it is and with a bitmap index on `status` added: best of 15, each
   on a reopened dataset.
2. What new keys sorting together would save a night's merges: 20 `memory_entities` rows
   (new `memory_id`s, existing `entity_id`s) and 139 `links` rows from 9 new memories
   (existing targets), merged on the tables' keys with the new ids random (v4 uuids) or
   sharing a prefix, as ids with a time prefix would; the median of 7 merges each, twice.
3. `link`'s look for the pairs judged before (session 52): by the pairs' older memories
   (`target_id IN (..)`, its BTree index), as `link` asks, against by the night's new
   memories (`array_has_any(source_ids, [..])`) without and with a label-list index on
   `source_ids`: the 9 latest memories as the night's, 5 older live memories of each one's
   user as its neighbours (seeded); medians of 15 reads of `source_ids`, each reopened.
4. `scores`' read of its earlier runs for its pass choice (session 54): every `scores` run
   (`job = 'scores'`, the columns it reads) on `runs` as it is and after compacting it, and,
   as a stand-in for a lookup of the latest runs by an index, the 1 and 30 latest by
   `run_id` (its BTree index); medians of 15, each reopened.
5. `link`'s read of every user's live vectors (session 54: `user_id IN (every user) AND
   state != 'archived'`) with Lance's scalar indexes and without them (`use_scalar_index`);
   medians of 7, twice.

Usage: python3 benches/year_lookup_probes.py DB   (DB: a kept year's `db` folder)
"""
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import lance
import pyarrow as pa

db = Path(sys.argv[1])
work = Path(tempfile.mkdtemp(prefix="memlife-probes."))


def copy(table):
    dst = work / f"{table}-{uuid.uuid4().hex[:8]}.lance"
    shutil.copytree(db / f"{table}.lance", dst)
    return dst


def running_lookup():
    path = copy("runs")
    query = "job = 'link' AND status = 'running'"

    def best():
        times = []
        for _ in range(15):
            ds = lance.dataset(str(path))
            began = time.perf_counter()
            ds.count_rows(filter=query)
            times.append((time.perf_counter() - began) * 1000)
        return min(times)

    before = best()
    lance.dataset(str(path)).create_scalar_index("status", "BITMAP")
    after = best()
    print(f"runs, {query}: {before:.2f} ms without an index on status, {after:.2f} ms with one")


def merges(table, key, column, rows, new_ids):
    sample = lance.dataset(str(db / f"{table}.lance")).to_table(limit=rows)

    def median(clustered):
        times = []
        for r in range(7):
            path = copy(table)
            ids = [str(uuid.uuid4()) for _ in range(new_ids)]
            if clustered:
                ids = [f"ffff{r:02x}{i:02x}-{s[9:]}" for i, s in enumerate(ids)]
            values = pa.array([ids[i % new_ids] for i in range(rows)])
            batch = sample.set_column(sample.schema.get_field_index(column), column, values)
            ds = lance.dataset(str(path))
            began = time.perf_counter()
            (ds.merge_insert(key).when_matched_update_all().when_not_matched_insert_all()
             .execute(batch))
            times.append((time.perf_counter() - began) * 1000)
            shutil.rmtree(path)
        return sorted(times)[len(times) // 2]

    for _ in range(2):
        print(f"{table}, {rows} rows from {new_ids} new ids: "
              f"{median(False):.1f} ms random, {median(True):.1f} ms clustered")


def judged_lookup():
    path = copy("audit_log")
    memories = lance.dataset(str(db / "memories.lance")).to_table(
        columns=["id", "user_id", "created_at", "state"]).to_pylist()
    memories.sort(key=lambda r: r["created_at"])
    new = memories[-9:]
    by_user = {}
    for r in memories[:-9]:
        if r["state"] != "archived":
            by_user.setdefault(r["user_id"], []).append(r["id"])
    random.seed(1)
    targets = sorted({t for n in new for t in random.sample(by_user[n["user_id"]], 5)})
    listed = lambda ids: ", ".join(f"'{i}'" for i in ids)
    judged = "operation = 'LINK' AND classification != 'FAILED'"
    by_target = f"target_id IN ({listed(targets)}) AND {judged}"
    by_source = f"array_has_any(source_ids, [{listed(n['id'] for n in new)}]) AND {judged}"

    def median(query):
        return median_read(path, ["source_ids"], query)

    print("audit_log, pairs judged before: by target_id %.2f ms (%d rows)" % median(by_target))
    print("  by source_ids, no index %.2f ms (%d rows)" % median(by_source))
    lance.dataset(str(path)).create_scalar_index("source_ids", "LABEL_LIST")
    print("  by source_ids, label list %.2f ms (%d rows)" % median(by_source))
    print("  by target_id again %.2f ms (%d rows)" % median(by_target))


def median_read(path, columns, query, rounds=15, **options):
    times, rows = [], 0
    for _ in range(rounds):
        ds = lance.dataset(str(path))
        began = time.perf_counter()
        rows = ds.to_table(columns=columns, filter=query, **options).num_rows
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), rows


def scores_runs_read():
    path = copy("runs")
    columns = ["started_at", "status", "dry_run", "user_id", "params"]
    runs = lance.dataset(str(path)).to_table(
        columns=["run_id", "started_at"], filter="job = 'scores'").to_pylist()
    runs.sort(key=lambda r: r["started_at"])
    listed = lambda rs: ", ".join(f"'{r['run_id']}'" for r in rs)
    fragments = len(lance.dataset(str(path)).get_fragments())
    print("runs, every scores run: %.2f ms (%d rows)" % median_read(path, columns, "job = 'scores'")
          + f", {fragments} fragments")
    for n in (1, 30):
        print(f"  the {n} latest by run_id: %.2f ms (%d rows)"
              % median_read(path, columns, f"run_id IN ({listed(runs[-n:])})"))
    lance.dataset(str(path)).optimize.compact_files(target_rows_per_fragment=1024 * 1024)
    fragments = len(lance.dataset(str(path)).get_fragments())
    print("  every scores run, compacted: %.2f ms (%d rows)"
          % median_read(path, columns, "job = 'scores'") + f", {fragments} fragments")


def link_vectors_read():
    path = db / "memories.lance"  # read only
    users = sorted(set(lance.dataset(str(path)).to_table(columns=["user_id"])
                       .column("user_id").to_pylist()))
    query = (f"user_id IN ({', '.join(repr(u) for u in users)}) AND state != 'archived' "
             "AND embedding IS NOT NULL")
    columns = ["id", "user_id", "created_at", "embedding_model", "link_mark", "embedding"]
    for _ in range(2):
        for indexed in (True, False):
            print(f"memories, link's read of {len(users)} users, scalar indexes "
                  f"{'used' if indexed else 'not used'}: %.2f ms (%d rows)"
                  % median_read(path, columns, query, 7, use_scalar_index=indexed))


try:
    running_lookup()
    merges("memory_entities", ["memory_id", "entity_id"], "memory_id", 20, 20)
    merges("links", ["source_id", "target_id", "link_type"], "source_id", 139, 9)
    judged_lookup()
    scores_runs_read()
    link_vectors_read()
finally:
    shutil.rmtree(work, ignore_errors=True)
