#!/usr/bin/env bash
# Makes the demo's database folder anew: removes it only if an earlier demo made it (it holds
# the marker .memlife-demo), with the prune exports beside it (FOLDER.prune-archive, which
# `memlife prune` made for it), refuses (exit 2) to touch anything else at that path, then
# creates it with the marker. Usage: bash scripts/demo-folder.sh FOLDER
set -euo pipefail
db="$1"
if [ -e "$db" ]; then
    if [ -f "$db/.memlife-demo" ]; then
        rm -rf "$db" "$db.prune-archive"
    else
        echo "error: $db exists and was not made by the demo; move it away or remove it yourself" >&2
        exit 2
    fi
fi
mkdir -p "$db"
touch "$db/.memlife-demo"
