#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine with a Rust toolchain lacks to build memlife:
# protoc (Lance's build needs it). Idempotent; quiet when everything is there.
set -euo pipefail
if ! command -v protoc >/dev/null 2>&1; then
    echo "installing protobuf-compiler (needed to build lance)..." >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi
