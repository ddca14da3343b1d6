#!/usr/bin/env python3
"""Issue 35: where a store's bytes are, table by table: the data files the current version
reads and those only older versions in the window read (by the columns they hold: whole rows,
or a column update's few columns), and the index files, current or not. Reads the Lance
folders with pylance at the lance version memlife is built on (python3 -m venv /tmp/pyl &&
/tmp/pyl/bin/pip install pylance==14.0.2).

Usage: /tmp/pyl/bin/python benches/table_files.py DB [TABLE...]
  DB: a memlife database folder (e.g. a kept year's DIR/db); default tables: memories,
  audit_log, links, memory_entities.
"""
import collections
import os
import sys

import lance


def size_of(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path) if os.path.exists(path) else 0


def table(db, name):
    path = f"{db}/{name}.lance"
    current = lance.dataset(path)
    names = {f.id(): f.name() for f in current.lance_schema.fields()}
    width = len(names)
    live_files, live_indexes, fields_of = set(), set(), {}
    for version in current.versions():
        try:
            ds = lance.dataset(path, version=version["version"])
        except Exception:  # a version whose files are gone: not in the window
            continue
        for fragment in ds.get_fragments():
            for f in fragment.metadata.files:
                fields_of[f.path] = tuple(f.fields)
    for fragment in current.get_fragments():
        for f in fragment.metadata.files:
            live_files.add(f.path)
    for index in current.describe_indices():
        for segment in index.segments:
            live_indexes.add(str(segment.uuid))
    data = collections.Counter()
    files = collections.Counter()
    for f in os.listdir(f"{path}/data"):
        fields = fields_of.get(f, ())
        kind = (
            "whole rows"
            if len(fields) >= width - 1
            else ",".join(names.get(i, str(i)) for i in fields) or "?"
        )
        state = "current" if f in live_files else "old only"
        data[(state, kind)] += size_of(f"{path}/data/{f}")
        files[(state, kind)] += 1
    indexes = collections.Counter()
    if os.path.isdir(f"{path}/_indices"):
        for u in os.listdir(f"{path}/_indices"):
            state = "current" if u in live_indexes else "old only"
            indexes[state] += size_of(f"{path}/_indices/{u}")
            files[(state, "index")] += 1
    other = sum(size_of(f"{path}/{d}") for d in ("_versions", "_transactions", "_deletions"))
    print(f"{name}: {sum(data.values()) / 1e6:.1f} MB data, "
          f"{sum(indexes.values()) / 1e6:.1f} MB indexes, {other / 1e6:.1f} MB manifests, "
          "transactions and deletion files")
    for (state, kind), b in sorted(data.items(), key=lambda kv: -kv[1]):
        print(f"  data {state:8} {b / 1e6:7.2f} MB {files[(state, kind)]:4d} files  {kind}")
    for state, b in sorted(indexes.items()):
        print(f"  index {state:7} {b / 1e6:7.2f} MB {files[(state, 'index')]:4d} segments")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    tables = sys.argv[2:] or ["memories", "audit_log", "links", "memory_entities"]
    for name in tables:
        table(sys.argv[1], name)


if __name__ == "__main__":
    main()
