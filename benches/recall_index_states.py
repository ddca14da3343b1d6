#!/usr/bin/env python3
"""Issue 35: what the state of `memories`' indexes costs a recall on an aged store. Makes five
copies of a kept year's store (DIR/db, e.g. one paused mid-week with `bench year
--until-day`) that differ only in the indexes of `memories`, made with pylance at the lance
version memlife is built on (python3 -m venv /tmp/pyl && /tmp/pyl/bin/pip install
pylance==14.0.2):

  aged           as the year left it (the week's rows in no index, deltas since the merge)
  text-alone     the full-text index alone caught up and merged into one segment
  appended       every index takes the unindexed rows as one more delta segment
  text-merged    appended, then the full-text index merged into one segment
  all-merged     every index caught up and merged into one segment

then times the same 5 recalls on each (read only: --no-activate, so the copies stay as
made), ROUNDS rounds alternating, and prints the median of each.

Usage: python3 benches/recall_index_states.py DIR BIN [ROUNDS] [PYTHON]
"""
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

folder, bin_ = Path(sys.argv[1]), sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
python = sys.argv[4] if len(sys.argv) > 4 else "/tmp/pyl/bin/python"
index = {
    "text-alone": "ds.optimize.optimize_indices(num_indices_to_merge=64, index_names=['text_idx'])",
    "appended": "ds.optimize.optimize_indices(num_indices_to_merge=0)",
    "text-merged": "ds.optimize.optimize_indices(num_indices_to_merge=0)\n"
                   "lance.dataset(p).optimize.optimize_indices(num_indices_to_merge=64, "
                   "index_names=['text_idx'])",
    "all-merged": "ds.optimize.optimize_indices(num_indices_to_merge=64)",
}
base = [json.loads(l) for l in open(folder / "base.jsonl")]
queries = [(r["user_id"], r["text"]) for r in base[:: max(1, len(base) // 5)][:5]]
day = json.loads((folder / "year-state.json").read_text())["day_done"]
now = f"2030-01-01T0{day % 10}:00:00Z"
with tempfile.TemporaryDirectory() as work:
    stores = {}
    for name in ["aged", *index]:
        db = Path(work) / name
        shutil.copytree(folder / "db", db)
        if name in index:
            script = f"import lance\np = {str(db / 'memories.lance')!r}\nds = lance.dataset(p)\n"
            subprocess.run([python, "-c", script + index[name]], check=True)
        shape = subprocess.run(
            [python, "-c", "import lance, collections, sys\n"
             "ds = lance.dataset(sys.argv[1])\n"
             "print(dict(collections.Counter(i['name'] for i in ds.list_indices())))",
             str(db / "memories.lance")], capture_output=True, text=True, check=True)
        print(f"{name}: index segments {shape.stdout.strip()}")
        stores[name] = db
    seen = {name: [] for name in stores}
    for _ in range(rounds):
        for name, db in stores.items():
            for user, query in queries:
                began = time.perf_counter()
                subprocess.run([bin_, "--config", str(folder / "memlife.toml"), "--db", str(db),
                                "--json", "recall", query, "--user", user, "--embedder", "hash",
                                "--now", now, "--no-activate"],
                               stdout=subprocess.DEVNULL, check=True)
                seen[name].append(time.perf_counter() - began)
cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
print(f"CPU: {cpu}; day {day}; {rounds} rounds of {len(queries)} recalls (read only)")
for name, times in seen.items():
    print(f"{name:<12} median {1000 * statistics.median(times):6.1f} ms")
