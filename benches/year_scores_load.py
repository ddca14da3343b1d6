#!/usr/bin/env python3
"""Issue 35: how many memories `scores` recomputed each day of a kept `memlife bench year`,
from the store's `runs` table: the nightly load of the due cadence, day by day.

Prints the first 10 days, the days of the largest loads, and the mean over stretches of the
year, with each day's live memories taken from the run's own counts (the tiers it saw); then
the live memories by tier and state with how many of them the next day's run will find due
(`scores_due_at` at or before that day's clock, 02:00), and their mean salience.

Usage: python3 benches/year_scores_load.py BIN DIR   (DIR: the year's --keep folder)
"""
import json
import subprocess
import sys
from datetime import datetime, timedelta


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, work = sys.argv[1], sys.argv[2]
    sql = "SELECT params, counts, duration_ms FROM runs WHERE job = 'scores' AND status = 'done'"
    out = subprocess.run([binary, "--db", f"{work}/db", "sql", sql, "--format", "jsonl"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{binary} sql on {work}/db failed: {out.stderr.strip()}")
    start = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    days = {}
    for line in out.stdout.splitlines():
        row = json.loads(line)
        params, counts = json.loads(row["params"]), json.loads(row["counts"])
        now = datetime.fromisoformat(params["now"].replace("Z", "+00:00"))
        day = (now - start).days
        days[day] = (counts.get("processed", 0), counts.get("full_pass", 0), row["duration_ms"])
    if not days:
        sys.exit(f"{work}/db: no scores run")
    print("day  processed  full_pass  ms")
    for d in sorted(days)[:10]:
        print(f"{d:>3}  {days[d][0]:>9}  {days[d][1]:>9}  {days[d][2]}")
    busiest = sorted((d for d in days if d > 0), key=lambda d: -days[d][0])[:6]
    print("largest loads (day: processed):",
          ", ".join(f"{d}: {days[d][0]}" for d in sorted(busiest)))
    for lo, hi in [(1, 7), (8, 30), (31, 100), (101, 200), (201, 300), (301, 366)]:
        got = [days[d][0] for d in days if lo <= d <= hi]
        if got:
            print(f"days {lo}-{hi}: mean {sum(got) / len(got):.0f} processed a day")
    state = json.load(open(f"{work}/year-state.json"))
    clock = (start + timedelta(days=state["day_done"] + 1, hours=2)).strftime("%Y-%m-%d %H:%M:%S")
    print(f"day {state['day_done'] + 1} ({clock}): live memories, and those due")
    sql = ("SELECT tier, state, COUNT(*) AS live, SUM(CASE WHEN scores_due_at IS NULL OR "
           f"scores_due_at <= TIMESTAMP '{clock}' THEN 1 ELSE 0 END) AS due, "
           "ROUND(AVG(salience), 3) AS salience FROM memories WHERE state <> 'archived' "
           "GROUP BY tier, state ORDER BY tier, state")
    out = subprocess.run([binary, "--db", f"{work}/db", "sql", sql], capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"{binary} sql on {work}/db failed: {out.stderr.strip()}")
    print(out.stdout, end="")


if __name__ == "__main__":
    main()
