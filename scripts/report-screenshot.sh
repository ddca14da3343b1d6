#!/usr/bin/env bash
# Checks `memlife report --html` in a real browser: a store lives a few simulated days
# (`memlife bench year`, small), the report is written, headless Chromium (Debian's, installed
# if missing) renders it to a PNG, and the PNG is checked to hold a drawn page (not blank, not an
# error page). Not part of the default tests (it takes minutes in a debug build).
#   bash scripts/report-screenshot.sh [OUT.png] [--db EXISTING_STORE]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-report.png}"
db=""
if [ "${2:-}" = "--db" ]; then db="$3"; fi
bash scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1; then
    echo "installing chromium (Debian's) for the screenshot..." >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
cargo build --bin memlife
bin="${CARGO_TARGET_DIR:-target}/debug/memlife"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -z "$db" ]; then
    echo "== a store living 14 simulated days (300 memories; a few minutes in a debug build)"
    "$bin" bench year --memories 300 --days 14 --sample-every 7 --keep "$work/year" >/dev/null
    db="$work/year/db"
fi
page="$work/report.html"
"$bin" --db "$db" report --html "$page"
# The flags this machine kind needs: no sandbox as root, no background connections to a
# closed network, a fresh profile.
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$work/profile" --hide-scrollbars --window-size=900,3600 \
    --screenshot="$out" "file://$page" 2>"$work/chromium.log" || {
    cat "$work/chromium.log" >&2
    exit 2
}
python3 - "$out" <<'PY'
import struct, sys, zlib
path = sys.argv[1]
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
pos, idat, width, height, colour_type = 8, b"", 0, 0, 0
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, colour_type = struct.unpack(">IIBB", body[:10])
        assert depth == 8, f"bit depth {depth}"
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
channels = {2: 3, 6: 4}[colour_type]
raw = zlib.decompress(idat)
stride = width * channels + 1
# Unfilter only what is needed: count distinct colours on sampled rows (filters other than
# None and Sub make exact colours uncertain, so count the row's bytes as written instead).
colours = set()
for y in range(0, height, max(1, height // 200)):
    row = raw[y * stride + 1:(y + 1) * stride]
    for x in range(0, width * channels, channels * 7):
        colours.add(row[x:x + 3])
print(f"{path}: {width}x{height}, {len(colours)} distinct sampled pixel values")
assert len(colours) > 50, "the page looks blank"
PY
echo "screenshot: $out"
