#!/usr/bin/env python3
"""What `[scores] due_tolerance` costs recall on real text (issue 35).

Builds the LoCoMo dev store once (`memlife eval recall --keep`), copies it twice, and runs
`scores` on both copies every day for DAYS days up to each conversation's eval clock (one day
after its last session): copy A with the default tolerance (a memory is recomputed only when
due), copy B with `due_tolerance = 0` (every memory whose scores move, every day). Then it
prints how many memories each recomputed, the largest difference between the stored
salience, importance and retention of the two copies, how many tiers and states differ, and
`eval recall --reuse` on each copy (hit@5, hit@10, evidence recall@10, MRR).

Usage: python3 scripts/scores-tolerance.py BIN LOCOMO_JSON WORK_DIR [DAYS]
  e.g. python3 scripts/scores-tolerance.py target/debug/memlife ../shared/data/locomo-dev.json /tmp/tol 60
"""
import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path

bin_, locomo, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
days = int(sys.argv[4]) if len(sys.argv) > 4 else 60
work.mkdir(parents=True, exist_ok=True)
exact = work / "tolerance0.toml"
exact.write_text("[scores]\ndue_tolerance = 0.0\n")


def memlife(*args):
    return subprocess.run([bin_, *args], check=True, capture_output=True, text=True).stdout


def sql(db, query):
    out = memlife("--db", db, "sql", "--format", "jsonl", query)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


built = work / "built"
memlife("eval", "recall", "--locomo", locomo, "--keep", str(built), "--json")
copies = {"A": work / "A", "B": work / "B"}
for folder in copies.values():
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(built, folder)
config = {"A": [], "B": ["--config", str(exact)]}

users = sql(str(built / "db"), "SELECT user_id, max(created_at) AS last FROM memories GROUP BY user_id")
recomputed = {"A": 0, "B": 0}
for user in users:
    last = dt.datetime.fromisoformat(user["last"].replace("Z", "+00:00"))
    clock = last + dt.timedelta(days=1)
    for back in range(days, -1, -1):
        now = (clock - dt.timedelta(days=back)).isoformat()
        for name, folder in copies.items():
            report = json.loads(memlife(*config[name], "--db", str(folder / "db"), "--json",
                                        "scores", "--user", user["user_id"], "--now", now))
            recomputed[name] += report["counts"].get("processed", 0)
print(f"scores runs: {len(users)} conversations x {days + 1} days on each copy")
print("memories recomputed: A (default tolerance)", recomputed["A"], "| B (tolerance 0)", recomputed["B"])

query = "SELECT id, salience, importance, retention, tier, state FROM memories ORDER BY id"
a, b = (sql(str(copies[n] / "db"), query) for n in "AB")
assert [r["id"] for r in a] == [r["id"] for r in b]
for column in ("salience", "importance", "retention"):
    worst = max(abs((x[column] or 0) - (y[column] or 0)) for x, y in zip(a, b))
    print(f"largest |A - B| of {column}: {worst:.4f}")
for column in ("tier", "state"):
    print(f"memories whose {column} differs: {sum(x[column] != y[column] for x, y in zip(a, b))}")

for name, folder in copies.items():
    report = json.loads(memlife(*config[name], "--json", "eval", "recall", "--locomo", locomo,
                                "--keep", str(folder), "--reuse"))
    o = report["before"]["overall"]["recall"]
    print(f"{name}: hit@5 {o['hit']['5']:.3f} hit@10 {o['hit']['10']:.3f} "
          f"evidence recall@10 {o['evidence_recall']['10']:.3f} MRR {o['mrr']:.3f}")
