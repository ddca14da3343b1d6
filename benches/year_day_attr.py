#!/usr/bin/env python3
"""Issue 35: where the time of a day's jobs goes, store against store, from the logs of
benches/year_day_logs.sh. Each log line's time since the line before is charged to that
line's kind (a Lance read by plan, a commit, a table load, a scalar index opened or one of
its parts loaded, a file written); per job, the medians over runs of each kind's time and
count on store A and on store B, largest growth first, then each job's median duration
(its report's `duration_ms`) and their ratio.

Usage: python3 benches/year_day_attr.py A_PREFIX B_PREFIX [LINES] [--tables]
  A_PREFIX, B_PREFIX: the OUTDIRs of year_day_logs.sh are A_PREFIX-1, A_PREFIX-2, ...
  --tables: name the table of each scalar index opened (from the OUTDIR's indexes.txt,
  which year_day_logs.sh writes), so that opens are told apart table by table.
"""
import collections
import datetime as dt
import glob
import json
import os
import re
import statistics
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def events(path):
    out = []
    for line in open(path):
        line = ANSI.sub("", line).strip()
        m = re.match(r"(\S+Z)\s+(\w+)\s+(.*)", line)
        if m:
            out.append((dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")), m.group(3)))
    return out


def kind(msg, owners=None):
    field = lambda name: (re.search(name + r'="?([\w.]+)', msg) or [None, ""])[1]
    table = (re.search(r'uri="[^"]*/db/([^"/]+)\.lance', msg) or [None, ""])[1]
    if "plan_run" in msg:
        return "read " + (re.search(r'plan_summary="([^"(]*)', msg) or [None, "?"])[1]
    if "committed" in msg:
        return f"commit {table}"
    if '"loading"' in msg:
        return f"load {table}"
    if "io_events" in msg:
        named = f"index {field('type')} {field('index_type').lower()}"
        uuid = re.search(r"index_uuid=([\w-]+)", msg)
        if owners is not None and uuid:
            named += " " + owners.get(uuid[1], "?")
        return named
    if "Compaction task" in msg:
        return "compaction task"
    if "file_audit" in msg:
        return "file written " + field("type")
    if "memlife" in msg:
        return "memlife " + msg.split(":", 1)[-1].strip()[:40]
    return msg[:50]


def collect(prefix):
    """job -> kind -> [ms per run], with '#kind' the counts and 'duration' the report's."""
    per = collections.defaultdict(lambda: collections.defaultdict(list))
    for folder in sorted(glob.glob(prefix + "-*")):
        owners = None
        if by_table:
            with open(folder + "/indexes.txt") as f:
                owners = dict(line.split() for line in f if line.strip())
        for log in glob.glob(folder + "/*.log"):
            job = os.path.basename(log)[:-4]
            ev = events(log)
            if not ev:
                continue
            ms, count = collections.Counter(), collections.Counter()
            last = ev[0][0]
            for t, msg in ev:
                ms[kind(msg, owners)] += (t - last).total_seconds() * 1000
                count[kind(msg, owners)] += 1
                last = t
            for k in ms:
                per[job][k].append(ms[k])
                per[job]["#" + k].append(count[k])
            report = json.load(open(log[:-4] + ".json"))
            if report.get("duration_ms") is not None:
                per[job]["duration"].append(report["duration_ms"])
    return per


by_table = "--tables" in sys.argv
args = [x for x in sys.argv[1:] if x != "--tables"]
a, b = collect(args[0]), collect(args[1])
lines = int(args[2]) if len(args) > 2 else 8
med = lambda d, k: statistics.median(d.get(k, [0]))
for job in sorted(a):
    if a[job].get("duration") and b[job].get("duration"):
        da, db = med(a[job], "duration"), med(b[job], "duration")
        print(f"== {job}: {da:.0f} -> {db:.0f} ms ({db / da:.2f}x)")
    else:
        print(f"== {job}")
    kinds = {k for k in set(a[job]) | set(b[job]) if not k.startswith("#") and k != "duration"}
    rows = sorted(((med(b[job], k) - med(a[job], k), k) for k in kinds), reverse=True)
    for growth, k in rows[:lines]:
        print(f"  {k[:56]:<56}{med(a[job], k):8.1f}{med(b[job], k):8.1f}{growth:+8.1f} ms"
              f"   n {med(a[job], '#' + k):.0f} -> {med(b[job], '#' + k):.0f}")
