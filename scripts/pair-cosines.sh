#!/usr/bin/env bash
# The local model's cosine of each pair of a pairs file ({"a", "b", ...} per line, e.g.
# data/eval/cosine_probes.jsonl): the texts are imported into a scratch store, embedded with the
# local model (all-MiniLM-L6-v2), exported, and the cosines computed from the vectors.
# Usage: bash scripts/pair-cosines.sh [PAIRS.jsonl]   (EVALUATION.md, issue 34, session 21)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs="${1:-data/eval/cosine_probes.jsonl}"
bash scripts/fetch-model.sh >/dev/null
cargo build --bin memlife -q
bin="${CARGO_TARGET_DIR:-target}/debug/memlife"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$pairs" "$work/texts.jsonl" <<'PY'
import json, sys
texts = sorted({t for line in open(sys.argv[1]) for r in [json.loads(line)] for t in (r["a"], r["b"])})
with open(sys.argv[2], "w") as f:
    for i, t in enumerate(texts):
        f.write(json.dumps({"id": f"t{i}", "user_id": "u", "text": t, "created_at": "2025-01-01T00:00:00Z"}) + "\n")
PY
"$bin" --db "$work/db" init >/dev/null
"$bin" --db "$work/db" import "$work/texts.jsonl" >/dev/null
"$bin" --db "$work/db" embed --embedder local >/dev/null
"$bin" --db "$work/db" export --table memories -o "$work/vectors.jsonl" >/dev/null
python3 - "$pairs" "$work/vectors.jsonl" <<'PY'
import json, math, sys
vec = {r["text"]: r["embedding"] for r in map(json.loads, open(sys.argv[2]))}
def cos(a, b):
    x, y = vec[a], vec[b]
    return sum(p * q for p, q in zip(x, y)) / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y))
rows = [(cos(r["a"], r["b"]), r) for r in map(json.loads, open(sys.argv[1]))]
for c, r in sorted(rows, key=lambda x: -x[0]):
    print(f'{c:.3f}  same_fact={str(r.get("same_fact", "?")):<5}  {r["a"]} / {r["b"]}')
PY
