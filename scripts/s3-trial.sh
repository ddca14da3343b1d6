#!/usr/bin/env bash
# A store on object storage: an S3-compatible server on loopback (moto's, from PyPI, in a
# virtual environment cached under ~/.cache/memlife), a bucket, then init, import, the nightly
# pipeline, integrate, recall, check, stats, report and undo against s3://BUCKET/store, each
# step's outcome printed (what works and what does not). Not part of the default tests.
#   bash scripts/s3-trial.sh
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
bash scripts/setup.sh
cargo build --bin memlife || exit 2
bin="$repo/${CARGO_TARGET_DIR:-target}/debug/memlife"
venv="${S3_VENV:-$HOME/.cache/memlife/moto-server}"
if [ ! -x "$venv/bin/moto_server" ]; then
    echo "== installing moto[server] from PyPI into $venv"
    python3 -m venv "$venv" && "$venv/bin/pip" install -q "moto[server]" boto3 || exit 2
fi
work="$(mktemp -d)"
port="${S3_PORT:-5055}"
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do
    curl -s "http://127.0.0.1:$port" >/dev/null 2>&1 && break
    sleep 0.2
done
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
export AWS_ENDPOINT="http://127.0.0.1:$port" AWS_ALLOW_HTTP=true
"$venv/bin/python" - "$port" <<'PY' || exit 2
import sys, boto3
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}", region_name="us-east-1")
s3.create_bucket(Bucket="memlife")
PY
db="s3://memlife/store"
printf '[embedder]\nkind = "hash"\n' >"$work/memlife.toml"
export MEMLIFE_CONFIG="$work/memlife.toml"
failed=0
step() {
    local name="$1"; shift
    local started=$(date +%s.%N)
    if "$bin" --db "$db" "$@" >"$work/$name.out" 2>"$work/$name.err"; then
        printf '%-10s works (%.1f s)\n' "$name" "$(echo "$(date +%s.%N) - $started" | bc)"
    else
        local code=$?
        printf '%-10s FAILED (exit %s): %s\n' "$name" "$code" "$(tail -1 "$work/$name.err")"
        failed=1
    fi
}
step init init
step import import data/sample.jsonl
step nightly nightly --now 2026-01-01T00:00:00Z
step integrate integrate data/new_facts.jsonl --now 2026-01-02T12:00:00Z
step recall recall "Where does the user work?" --user user-01 --k 3 --now 2026-01-02T12:05:00Z
step check check
step stats stats
step report report --html "$work/report.html"
step undo undo --last integrate
step check2 check
grep -A14 "Storage per table" "$work/stats.out" || true
objects=$("$venv/bin/python" - "$port" <<'PY'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}", region_name="us-east-1")
n = size = 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket="memlife", Prefix="store/"):
    for o in page.get("Contents", []):
        n += 1
        size += o["Size"]
print(f"{n} objects, {size} bytes")
PY
)
echo "bucket: $objects"
exit $failed
