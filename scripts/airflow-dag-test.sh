#!/usr/bin/env bash
# Runs the Airflow DAGs memlife generates (jobs/memlife_dag.py, from jobs/schedule.toml) for
# real: Airflow from PyPI in a virtual environment, `airflow dags test` on every DAG, against a
# sample store (data/sample.jsonl and data/new_facts.jsonl as the inboxes), the per-user jobs
# fanned out over 2 shards, the LLM providers served by `memlife mock-llm` on loopback, vectors
# by the hash embedder. Then `memlife check` on the store, and every sharded job must have run
# once per shard. Not part of the default tests (Airflow is large: about a minute to install,
# cached under ~/.cache/memlife).
#   bash scripts/airflow-dag-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
bash scripts/setup.sh
cargo build --bin memlife
bin="$repo/${CARGO_TARGET_DIR:-target}/debug/memlife"
airflow_version="2.10.5"
venv="${AIRFLOW_VENV:-$HOME/.cache/memlife/airflow-$airflow_version}"
if [ ! -x "$venv/bin/airflow" ]; then
    echo "== installing Airflow $airflow_version from PyPI into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "apache-airflow==$airflow_version"
fi
work="$(mktemp -d)"
mock_pid=""
cleanup() {
    [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

echo "== a sample store, its inboxes, and a mock LLM server on loopback"
mkdir -p "$work/inbox" "$work/airflow/dags"
cp data/sample.jsonl "$work/inbox/memories.jsonl"
cp data/new_facts.jsonl "$work/inbox/facts.jsonl"
"$bin" --db "$work/db" init >/dev/null
"$bin" mock-llm --port 0 >"$work/mock.out" 2>/dev/null &
mock_pid=$!
for _ in $(seq 50); do [ -s "$work/mock.out" ] && break; sleep 0.1; done
url="$(head -1 "$work/mock.out" | awk '{print $NF}')"
cat >"$work/memlife.toml" <<TOML
[providers.mock]
base_url = "$url"
model = "mock"
batch = true

[roles]
reasoning = ["mock"]
fast = ["mock"]

[embedder]
kind = "hash"
TOML
sed -e "s|/var/lib/memlife/inbox|$work/inbox|g" \
    -e "s|^db = .*|db = \"$work/db\"|" \
    -e "s|^config = .*|config = \"$work/memlife.toml\"|" \
    -e "s|^shards = .*|shards = 2|" \
    jobs/schedule.toml >"$work/schedule.toml"
"$bin" schedule dag --file "$work/schedule.toml" >"$work/airflow/dags/memlife_dag.py"

export AIRFLOW_HOME="$work/airflow"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$work/airflow/dags"
export PATH="$(dirname "$bin"):$venv/bin:$PATH"
airflow db migrate >"$work/migrate.log" 2>&1 || { tail -20 "$work/migrate.log"; exit 2; }
dags="$(grep -o 'dag_id="[a-z_]*"' "$work/airflow/dags/memlife_dag.py" | cut -d'"' -f2)"
failed=0
# The order a night would see: the nightly DAG, the poll that applies its link batches, new
# facts, the weekly and monthly DAGs, the batch retry.
for dag in memlife_nightly memlife_batches memlife_integrate memlife_weekly memlife_monthly memlife_batches_retry; do
    echo "$dags" | grep -qx "$dag" || { echo "no DAG $dag in the generated file"; exit 2; }
    started=$(date +%s)
    if airflow dags test "$dag" 2026-01-01 >"$work/$dag.log" 2>&1 \
        && grep -q "state=success" "$work/$dag.log"; then
        echo "$dag: success ($(( $(date +%s) - started )) s)"
    else
        echo "$dag: FAILED"
        grep -E "ERROR|Traceback|exit code|state=" "$work/$dag.log" | tail -20
        failed=1
    fi
done
# Any DAG in the file this loop does not know of is a DAG nobody tried.
for dag in $dags; do
    case " memlife_nightly memlife_batches memlife_integrate memlife_weekly memlife_monthly memlife_batches_retry " in
        *" $dag "*) ;;
        *) echo "DAG $dag is not exercised by this script"; failed=1 ;;
    esac
done

echo "== the store after the DAGs"
"$bin" --db "$work/db" check || failed=1
"$bin" --db "$work/db" --config "$work/memlife.toml" sql \
    "SELECT job, COUNT(*) AS runs, COUNT(DISTINCT params) AS distinct_params, MIN(status) AS min_status, MAX(status) AS max_status FROM runs GROUP BY job ORDER BY job"
# Every job the DAG fans out ran once per shard, each recording its shard.
python3 - "$bin" "$work" <<'PY' || failed=1
import json, subprocess, sys
bin, work = sys.argv[1], sys.argv[2]
rows = json.loads(subprocess.run(
    [bin, "--db", f"{work}/db", "sql", "--format", "json",
     "SELECT job, params, status, counts FROM runs WHERE job <> 'run-due'"],
    check=True, capture_output=True, text=True).stdout)
shards = {}
for r in rows:
    shard = json.loads(r["params"] or "{}").get("shard")
    if shard:
        shards.setdefault(r["job"], []).append((shard, r["status"]))
expected = {"import", "embed", "entities", "describe", "link", "scores", "integrate",
            "cluster", "consolidate", "refine", "entity-gc"}
missing = expected - set(shards)
assert not missing, f"jobs with no sharded run: {sorted(missing)}"
for job, runs in sorted(shards.items()):
    got = sorted(s for s, _ in runs)
    assert got == ["0/2", "1/2"], f"{job}: shards {got}"
    assert all(status in ("done", "partial") for _, status in runs), f"{job}: {runs}"
    print(f"{job}: shards {', '.join(got)} ({', '.join(st for _, st in runs)})")
# The shards between them imported the whole inbox, each row once.
lines = sum(1 for line in open(f"{work}/inbox/memories.jsonl") if line.strip())
inserted = sum(json.loads(r["counts"] or "{}").get("inserted", 0)
               for r in rows if r["job"] == "import")
assert inserted == lines, f"imported {inserted} of {lines} rows over the shards"
print(f"import: {inserted} of {lines} rows over the shards")
for r in rows:
    if r["job"] == "batches.poll":
        print(f"batches poll: {r['counts']}")
PY
if [ "$failed" != 0 ]; then
    echo "airflow dag test: FAILED (logs were in $work)"
    trap - EXIT
    [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null || true
    exit 1
fi
echo "airflow dag test: every DAG succeeded, the store checks clean"
