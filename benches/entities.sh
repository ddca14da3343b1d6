#!/usr/bin/env bash
# Benchmarks of issue 14: `memlife entities` over 100k synth memories (target <= 10 s), depth-3
# traversal from 1000 random starts on 100k memories and 1M links (target median <= 20 ms),
# and `memlife entity-gc` over 100k entities (a seeded synthetic store, generated below: 100
# users, 1000 memories and 1000 entities each, 3% with a planted near-duplicate, one entity in
# ten named by no memory). Figures in BENCHMARKS.md.
# Usage: bash benches/entities.sh [work-dir] [embedder: hash|local]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
command -v /usr/bin/time >/dev/null || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
cargo build --profile perf --bin memlife
bin="${CARGO_TARGET_DIR:-target}/perf/memlife"
work="${1:-bench-data}"
embedder="${2:-hash}"
mkdir -p "$work"
t() { /usr/bin/time -f "  wall %e s, peak RSS %M KB" "$@"; }

echo "== entities over 100k memories (--embedder $embedder)"
[ -f "$work/s100k.jsonl" ] || "$bin" synth --users 100 --memories 100000 --seed 7 -o "$work/s100k.jsonl" >/dev/null
rm -rf "$work/db-entities"
"$bin" --db "$work/db-entities" init >/dev/null
"$bin" --db "$work/db-entities" import "$work/s100k.jsonl" >/dev/null
t "$bin" --db "$work/db-entities" entities --embedder "$embedder" | grep -E "entities_new|links|memories_read|duration"
echo "-- rerun, nothing changed"
t "$bin" --db "$work/db-entities" entities --embedder "$embedder" | grep -E "memories_read|duration"

echo "== depth-3 traversal, 100k memories, 1M links"
"$bin" bench graph --memories 100000 --links 1000000 --starts 1000 --depth 3

echo "== entity-gc over 100k entities"
python3 - "$work" <<'PY'
import json, random, sys
work = sys.argv[1]
random.seed(7)
syl = ["ka","lo","mi","ra","ven","tor","sa","bel","dor","ni","qu","zel","mar","ta","fin","gro","pe","lux"]
types = ["person","place","tool","organization","project"]
with open(f"{work}/gc_memories.jsonl","w") as mem, open(f"{work}/gc_entities.jsonl","w") as ent, \
     open(f"{work}/gc_memory_entities.jsonl","w") as me:
    for u in range(100):
        user = f"u{u:03}"
        for i in range(1000):
            mem.write(json.dumps({"id": f"{user}-m{i:04}", "user_id": user, "text": f"Memory {i} of {user}",
                                  "created_at": "2025-01-01T00:00:00Z"}) + "\n")
        names, made = set(), 0
        while made < 1000:
            name = "".join(random.choice(syl) for _ in range(random.randint(3, 4))).capitalize()
            if name in names:
                continue
            names.add(name)
            t = random.choice(types)
            rows = [(name, t)]
            if random.random() < 0.03 and made < 999:
                rows.append(("Dr. " + name, t) if t == "person" else (name + "ql", t))
            for n, ty in rows:
                eid = f"{user}-e{made:04}"
                ent.write(json.dumps({"id": eid, "user_id": user, "name": n, "entity_type": ty}) + "\n")
                if random.random() >= 0.1:
                    for m in random.sample(range(1000), random.randint(1, 3)):
                        me.write(json.dumps({"memory_id": f"{user}-m{m:04}", "entity_id": eid, "user_id": user}) + "\n")
                made += 1
PY
db="$work/db-gc"
rm -rf "$db"
"$bin" --db "$db" init >/dev/null
"$bin" --db "$db" import "$work/gc_memories.jsonl" >/dev/null
"$bin" --db "$db" import --table entities "$work/gc_entities.jsonl" >/dev/null
"$bin" --db "$db" import --table memory_entities "$work/gc_memory_entities.jsonl" >/dev/null
for args in "--dry-run" "" "" "--now 2027-01-01T00:00:00Z"; do
  echo "-- entity-gc $args"
  # shellcheck disable=SC2086
  t "$bin" --db "$db" entity-gc $args | grep -E "^  (archived|merged|deleted|links_rewritten|duration)"
done
"$bin" --db "$db" check >/dev/null && echo "check: ok"
