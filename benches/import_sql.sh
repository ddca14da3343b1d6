#!/usr/bin/env bash
# Benchmarks of issue 2: import of 100k and 1M synthetic memories with 384-dim embeddings
# (rows/s, peak RSS) from Parquet and JSON Lines, and a `memlife sql` aggregate over 1M
# memories. Builds with the `perf` profile (dev plus optimised hot crates; see Cargo.toml).
# Usage: bash benches/import_sql.sh [work-dir]   (needs ~8 GB of free disk)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
command -v /usr/bin/time >/dev/null || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
cargo build --profile perf --bin memlife
bin="${CARGO_TARGET_DIR:-target}/perf/memlife"
work="${1:-bench-data}"
mkdir -p "$work"

measure() { # label, command...: prints wall seconds and peak RSS (MB)
    local label="$1"; shift
    /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" > "$work/out.txt"
    read -r secs kb < "$work/time.txt"
    printf '%-40s %8.2f s  peak RSS %6d MB\n' "$label" "$secs" "$((kb / 1024))"
    echo "$secs"  > "$work/last_secs"
}

for n in 100000 1000000; do
    users=$((n / 1000))
    for fmt in parquet jsonl; do
        [ "$fmt" = jsonl ] && [ "$n" -gt 100000 ] && continue
        file="$work/synth-$n.$fmt"
        [ -f "$file" ] || measure "synth $n ($fmt, 384-d)" "$bin" synth --users "$users" --memories "$n" --dim 384 --seed 1 -o "$file"
        db="$work/db-$n-$fmt"
        rm -rf "$db"
        "$bin" --db "$db" init >/dev/null
        measure "import $n from $fmt" "$bin" --db "$db" import "$file"
        secs=$(cat "$work/last_secs")
        python3 -c "print(f'  -> {$n / $secs:,.0f} rows/s')"
    done
done

db="$work/db-1000000-parquet"
query="SELECT user_id, state, tier, COUNT(*) AS n, AVG(salience) AS mean_salience FROM memories GROUP BY user_id, state, tier ORDER BY n DESC LIMIT 5"
measure "sql aggregate over 1M (group by 3 keys)" "$bin" --db "$db" sql "$query"
measure "sql count by state over 1M" "$bin" --db "$db" sql "SELECT state, COUNT(*) FROM memories GROUP BY state"
measure "stats over 1M" "$bin" --db "$db" stats
