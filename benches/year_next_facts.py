#!/usr/bin/env python3
"""Issue 35: the 20 facts a kept year's next day integrates in the day scripts
(benches/year_day_logs.sh, benches/recall_day.sh): the store's last 20 memories again, each
text marked as a restatement, created an hour before NOW.

Usage: python3 benches/year_next_facts.py STORE NOW OUT
  STORE: a `bench year --keep` folder; NOW: the day's clock (RFC 3339); OUT: JSON Lines.
"""
import datetime as dt
import json
import sys

store, now, out_path = sys.argv[1:4]
clock = dt.datetime.fromisoformat(now)
rows = [json.loads(line) for line in open(store + "/all.jsonl")]
dropped = ("id", "last_accessed_at", "access_count", "recall_frequency", "state")
with open(out_path, "w") as out:
    for i, r in enumerate(rows[-20:]):
        r = {k: v for k, v in r.items() if k not in dropped}
        r["text"] = r["text"] + f" (again, {i})"
        r["created_at"] = (clock - dt.timedelta(hours=1)).isoformat()
        out.write(json.dumps(r) + "\n")
