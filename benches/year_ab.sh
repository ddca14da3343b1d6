#!/bin/bash
# Issue 35: two builds A/B on the same next day of one kept year's store, in the same rounds.
# Copies STORE (a `--keep` folder of `memlife bench year`) to a sibling folder, writes a
# wrapper that runs BIN_A for the copies of STORE and BIN_B for those of the sibling, and runs
# benches/year_first_and_last.py through it: "first" is BIN_A, "last" is BIN_B, so each job's
# paired ratio is B's time over A's. Run it a second time with the builds swapped: a build can
# be faster on every job, changed or not, and only what shows both ways round is the change's.
# Usage: bash benches/year_ab.sh BIN_A BIN_B STORE [ROUNDS]
# Both builds are copied afresh first: a binary written minutes ago ran about a tenth faster
# than the same bytes in an older file, in both orders (BENCHMARKS.md, session 52), so a new
# build against an old one seemed faster on every job.
set -euo pipefail
S=$(realpath "$3"); ROUNDS=${4:-16}
COPY="$S.ab-copy"
WRAP=$(mktemp "${TMPDIR:-/tmp}/memlife-ab.XXXX")
BINS=$(mktemp -d "${TMPDIR:-/tmp}/memlife-ab-bins.XXXX")
trap 'rm -rf "$COPY" "$WRAP" "$BINS"' EXIT
cp "$1" "$BINS/a"; cp "$2" "$BINS/b"
A="$BINS/a"; B="$BINS/b"
rm -rf "$COPY"
cp -r "$S" "$COPY"
cat > "$WRAP" <<EOF
#!/bin/bash
case "\$*" in *"$COPY/"*) exec "$B" "\$@";; *) exec "$A" "\$@";; esac
EOF
chmod +x "$WRAP"
python3 "$(dirname "$0")/year_first_and_last.py" "$WRAP" "$S" "$COPY" "$ROUNDS"
