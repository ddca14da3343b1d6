#!/usr/bin/env python3
"""Issue 35: each job's time on a year's first day against its last, both measured on one
morning, so the machine's mood on two days months apart does not decide the ratio.

Takes two `--keep` folders of `memlife bench year` (the same --memories and --users): one
stopped after day 1 (`--days 1`), one after its last day. Each round copies both stores and
lives the next day on each copy, alternating: the same 20 new facts integrated, the same 5
recalls (each activating), then `nightly --steps embed,entities,scores,link` and
`optimize --light` at that day's clock, as `bench year` lives a day. Integrate, recall and
optimize are timed as whole processes; the nightly steps as `nightly` reports them, each
whole (from before its lock to after its run row; until session 51, the run's own span). Rounds alternate which
store goes first. Prints the median of each job over the rounds on each store and their ratio
(the issue's target: 1.25x at most), and the paired ratio: each round's last over the same
round's first, whose median and quartiles say how far a machine's mood moved the figure
(two stores measured seconds apart share it; rounds minutes apart need not).

Usage: python3 benches/year_first_and_last.py BIN FIRST_DIR LAST_DIR [ROUNDS [SAMPLES.json]]
"""
import atexit
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

bin_, first, last = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
# Run a fresh copy of the binary: a 390 MB perf build written minutes ago ran about a tenth
# faster than the same bytes in an older file (BENCHMARKS.md, session 52), time added to both
# days alike, which shrinks the ratios as a loaded machine does.
bin_dir = tempfile.mkdtemp(prefix="memlife-bin.")
atexit.register(shutil.rmtree, bin_dir, True)
bin_ = shutil.copy2(bin_, Path(bin_dir) / Path(bin_).name)
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
samples_out = Path(sys.argv[5]) if len(sys.argv) > 5 else None
start = dt.datetime(2026, 1, 1, 2, tzinfo=dt.timezone.utc)


def day_done(d):
    return json.loads((d / "year-state.json").read_text())["day_done"]


# The same facts and queries on both stores: the last synthetic rows (new ids, marked so no
# store holds them) and five rows of the first day's memories.
rows = [json.loads(l) for l in open(last / "all.jsonl")]
base = [json.loads(l) for l in open(last / "base.jsonl")]
queries = [(r["user_id"], r["text"]) for r in base[:: max(1, len(base) // 5)][:5]]


def facts_file(work, clock):
    path = work / "facts.jsonl"
    with open(path, "w") as out:
        for i, r in enumerate(rows[-20:]):
            r = {k: v for k, v in r.items()
                 if k not in ("id", "last_accessed_at", "access_count", "recall_frequency", "state")}
            r["text"] = r["text"] + f" (again, {i})"
            r["created_at"] = (clock - dt.timedelta(hours=1)).isoformat()
            out.write(json.dumps(r) + "\n")
    return path


def run(args):
    began = time.perf_counter()
    out = subprocess.run([bin_, *args], capture_output=True, text=True, check=True)
    return out.stdout, time.perf_counter() - began


def live_next_day(folder, work):
    clock = start + dt.timedelta(days=day_done(folder) + 1)
    now = clock.isoformat()
    db = work / "db"
    shutil.copytree(folder / "db", db)
    common = ["--config", str(folder / "memlife.toml"), "--db", str(db), "--json"]
    times = {}
    _, times["integrate"] = run(common + ["integrate", str(facts_file(work, clock)), "--embedder",
                                          "hash", "--llm", "offline", "--now", now])
    recalls = [run(common + ["recall", q, "--user", u, "--embedder", "hash", "--now", now])[1]
               for u, q in queries]
    times["recall"] = statistics.mean(recalls)
    report, _ = run(common + ["nightly", "--steps", "embed,entities,scores,link", "--now", now,
                              "--embedder", "hash", "--llm", "offline"])
    for step in json.loads(report)["steps"]:
        times[step["step"]] = step["duration_ms"] / 1000
    _, times["optimize-light"] = run(common + ["optimize", "--light", "--now", now])
    return times


load_before = open("/proc/loadavg").read().split()[:3]
seen = {"first": [], "last": []}
for r in range(rounds):
    order = (("first", first), ("last", last))
    for name, folder in order if r % 2 == 0 else order[::-1]:
        with tempfile.TemporaryDirectory() as work:
            seen[name].append(live_next_day(folder, Path(work)))
if samples_out:
    samples_out.write_text(json.dumps(seen, indent=1))


def quartiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]

cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
print(f"CPU: {cpu}; {rounds} rounds; day {day_done(first) + 1} against day {day_done(last) + 1}")
# A loaded machine adds time to both days and shrinks the ratios (BENCHMARKS.md, session 50):
# the load averages say whether the run can be held against the target.
load_after = open("/proc/loadavg").read().split()[:3]
print(f"load average (1, 5, 15 min): {' '.join(load_before)} before, {' '.join(load_after)} after")
print(f"{'job':<16}{'first':>9}{'last':>9}{'last/first':>12}{'paired':>9}{'quartiles':>14}")
for job in seen["first"][0]:
    a = statistics.median(t[job] for t in seen["first"])
    b = statistics.median(t[job] for t in seen["last"])
    paired = [l[job] / f[job] for f, l in zip(seen["first"], seen["last"])]
    low, high = quartiles(paired) if len(paired) > 1 else (paired[0], paired[0])
    print(f"{job:<16}{a:9.3f}{b:9.3f}{b / a:12.2f}{statistics.median(paired):9.2f}"
          f"{low:8.2f}-{high:.2f}")
