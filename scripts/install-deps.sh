#!/usr/bin/env bash
# Installs what building and testing dbx-mount needs on Debian (Swift itself must already be there).
# Idempotent: does nothing when everything is present.
set -euo pipefail

packages=(fuse3 libfuse3-dev libcurl4-openssl-dev libsqlite3-dev libgd-dev attr man-db groff-base curl python3 python3-pip)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python side of the test suite: pytest for the mount tests, the official Dropbox SDK for interop.
if ! python3 -c "import pytest, dropbox, cryptography" 2>/dev/null; then
  python3 -m pip install -q pytest dropbox cryptography 2>/dev/null \
    || python3 -m pip install -q --break-system-packages pytest dropbox cryptography
fi
