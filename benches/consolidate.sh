#!/usr/bin/env bash
# Benchmark of issue 13: the whole consolidation (cluster, both LLM passes, apply) over N
# synthetic memories against `memlife mock-llm` at L ms per call, concurrency C.
# Usage: bash benches/consolidate.sh [memories=1000] [latency-ms=1500] [concurrency=64] [mode=full]
# Prints each step's wall time and the LLM critical path (two rounds of ceil(calls/C) x L).
set -euo pipefail
cd "$(dirname "$0")/.."
memories="${1:-1000}"
latency="${2:-1500}"
concurrency="${3:-64}"
mode="${4:-full}"
bin="${MEMLIFE_BIN:-${CARGO_TARGET_DIR:-target}/debug/memlife}"
[ -x "$bin" ] || { cargo build --bin memlife; }
work="$(mktemp -d)"
trap 'kill $mock 2>/dev/null || true; rm -rf "$work"' EXIT
db="$work/db"
"$bin" synth --memories "$memories" --users 4 --output "$work/memories.jsonl" > /dev/null
"$bin" --db "$db" init > /dev/null
"$bin" --db "$db" import "$work/memories.jsonl" > /dev/null
"$bin" --db "$db" embed --embedder hash > /dev/null
"$bin" mock-llm --port 0 --latency-ms "$latency" > "$work/mock.out" &
mock=$!
for _ in $(seq 50); do [ -s "$work/mock.out" ] && break; sleep 0.1; done
url="$(head -1 "$work/mock.out" | awk '{print $NF}')"
cat > "$work/memlife.toml" <<TOML
[providers.mock]
base_url = "$url"
model = "mock"
max_concurrency = $concurrency
[roles]
fast = ["mock"]
reasoning = ["mock"]
TOML
now() { date +%s.%N; }
t0=$(now)
"$bin" --db "$db" --json cluster --mode "$mode" > "$work/cluster.json"
t1=$(now)
"$bin" --db "$db" --json --config "$work/memlife.toml" consolidate --llm providers --embedder hash > "$work/consolidate.json"
t2=$(now)
python3 - "$work" "$t0" "$t1" "$t2" "$latency" "$concurrency" "$memories" <<'PY'
import json, math, sys
work, t0, t1, t2, latency, conc, n = sys.argv[1], *map(float, sys.argv[2:5]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
c = json.load(open(f"{work}/cluster.json")); k = json.load(open(f"{work}/consolidate.json"))
counts = k["counts"]
proposals = counts.get("clusters", 0) - counts.get("clusters_stale", 0) - counts.get("clusters_changed", 0) - counts.get("clusters_declined_before", 0)
verifies = counts.get("groups_proposed", 0)
critical = (math.ceil(proposals / conc) + math.ceil(verifies / conc)) * latency / 1000
wall = t2 - t0
print(json.dumps({
    "bench": "consolidate", "memories": n, "latency_ms": latency, "concurrency": conc,
    "clusters": c["counts"].get("clusters", 0), "cluster_seconds": round(t1 - t0, 2),
    "consolidate_seconds": round(t2 - t1, 2), "wall_seconds": round(wall, 2),
    "llm_calls": k["llm"]["items"], "proposals": proposals, "verifications": verifies,
    "llm_critical_path_seconds": critical,
    "ratio_to_critical_path": round(wall / critical, 2) if critical else None,
    "consolidated": counts.get("consolidated", 0), "memories_archived": counts.get("memories_archived", 0),
}, indent=1))
PY
