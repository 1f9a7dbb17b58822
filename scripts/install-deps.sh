#!/usr/bin/env bash
# Installs what building and testing dbx-mount needs on Debian (Swift itself must already be there).
# Idempotent: does nothing when everything is present.
set -euo pipefail

# install_missing [apt-get option...] -- package...: installs those of the packages not installed yet.
install_missing() {
  local options=() missing=()
  while [ "$1" != "--" ]; do options+=("$1"); shift; done
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${options[@]}" "${missing[@]}" >/dev/null
}

install_missing -- fuse3 libfuse3-dev libcurl4-openssl-dev libsqlite3-dev libgd-dev attr man-db groff-base curl openssl rsync \
  python3 python3-pip
# Real file managers for the desktop tests (Tests/Desktop): an X server, a session bus, Nautilus,
# Thunar with tumbler, Dolphin with kio-extras (KIO's image thumbnailer), ImageMagick's import for
# screenshots, a Prometheus server that scrapes a mount's metrics (Tests/Mount/test_metrics.py),
# nghttpx, an HTTP/2 front to the emulator, as libcurl asks for over TLS
# (Tests/Mount/test_tls_reads.py, the runner's HTTP/2 rows), and restic and borg, backup tools
# that compare inode numbers across mounts (Tests/Mount/test_everyday_tools.py). Without recommends:
# the GNOME and KDE search and sharing stacks they would pull in play no part in showing a folder.
install_missing --no-install-recommends -- xvfb dbus-x11 nautilus thunar tumbler dolphin kio-extras imagemagick prometheus nghttp2-proxy restic borgbackup

# Python side of the test suite: pytest for the mount tests, the official Dropbox SDK for interop.
if ! python3 -c "import pytest, dropbox, cryptography" 2>/dev/null; then
  python3 -m pip install -q pytest dropbox cryptography 2>/dev/null \
    || python3 -m pip install -q --break-system-packages pytest dropbox cryptography
fi
