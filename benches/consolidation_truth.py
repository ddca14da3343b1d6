#!/usr/bin/env python3
"""Precision and recall of `memlife consolidate` against synth's ground truth.

Usage: python3 benches/consolidation_truth.py DB TRUTH_JSON [MEMLIFE_BIN]
A consolidation is right when all its members belong to one truth group (duplicate_groups or
merge_groups); a false merge puts memories of different groups (or of none) together.
Recall counts truth groups with at least two members folded into one consolidation.
"""
import json
import subprocess
import sys

db, truth_path = sys.argv[1], sys.argv[2]
binary = sys.argv[3] if len(sys.argv) > 3 else "target/debug/memlife"
truth = json.load(open(truth_path))
group_of = {}
groups = []
for kind in ("duplicate_groups", "merge_groups"):
    for g in truth[kind]:
        groups.append((kind, set(g["memory_ids"])))
        for m in g["memory_ids"]:
            group_of[m] = len(groups) - 1
out = subprocess.run(
    [binary, "--db", db, "sql",
     "SELECT id, consolidates_memory_ids FROM memories WHERE source = 'consolidate'",
     "--format", "jsonl"],
    capture_output=True, text=True, check=True).stdout
consolidations = [json.loads(line)["consolidates_memory_ids"] for line in out.splitlines()]
false = [c for c in consolidations
         if len({group_of.get(m, ("none", m)) for m in c}) != 1]
found = {}
for c in consolidations:
    g = group_of.get(c[0])
    if g is not None and all(group_of.get(m) == g for m in c):
        found[g] = max(found.get(g, 0), len(c))
by_kind = {}
for i, (kind, members) in enumerate(groups):
    total, hit = by_kind.get(kind, (0, 0))
    by_kind[kind] = (total + 1, hit + (1 if i in found else 0))
print(json.dumps({
    "consolidations": len(consolidations),
    "false_merges": len(false),
    "precision": (len(consolidations) - len(false)) / len(consolidations) if consolidations else None,
    "recall": {k: {"groups": t, "folded": h, "recall": h / t if t else None} for k, (t, h) in by_kind.items()},
    "false_examples": false[:5],
}, indent=1))
