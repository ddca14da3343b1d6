#!/usr/bin/env python3
"""Issue 35: a kept `memlife bench year`'s bytes against its fresh copies, table by table.

Each sampled day's record holds the store's storage and that of a freshly written copy of the
same rows (`bench year` makes one per sampled day). Prints, per sampled day, each table's MB in
the store and in the copy, and the ratio of the tables the copy holds.

Usage: python3 benches/year_bytes.py DIR   (DIR: the year's --keep folder)
"""
import json
import sys

COPIED = ["memories", "links", "entities", "memory_entities", "runs", "audit_log"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = f"{sys.argv[1]}/year-state.json"
    try:
        with open(path) as f:
            records = json.load(f)["records"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{path}: not a kept year's state ({e})")
    mb = lambda b: b / 1e6
    print("day  " + "  ".join(f"{t:>22}" for t in COPIED) + "   total (store/fresh)")
    for r in records:
        fresh = r.get("fresh_copy")
        if not fresh:
            continue
        cells, store_sum, fresh_sum = [], 0, 0
        for t in COPIED:
            s = r["storage"].get(t, {}).get("bytes", 0)
            c = fresh.get(t, {}).get("bytes", 0)
            store_sum, fresh_sum = store_sum + s, fresh_sum + c
            cells.append(f"{mb(s):9.1f} / {mb(c):6.1f} MB")
        ratio = store_sum / fresh_sum if fresh_sum else 0
        print(f"{r['day']:>3}  " + "  ".join(cells)
              + f"   {mb(store_sum):.1f} / {mb(fresh_sum):.1f} MB = {ratio:.2f}x")


if __name__ == "__main__":
    main()
