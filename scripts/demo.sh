#!/usr/bin/env bash
# Installs what is needed, builds dbx-mount, and mounts a Dropbox at ./demo/mnt.
# With no account configured (no DBX_ACCESS_TOKEN, and no account signed in with `dbx-mount auth`),
# it starts the bundled Dropbox emulator serving a sample tree and mounts that.
# `bash scripts/demo.sh stop` unmounts and stops the emulator.
set -euo pipefail
cd "$(dirname "$0")/.."
demo="$PWD/demo"
mnt="$demo/mnt"

if [ "${1:-}" = "stop" ]; then
  mountpoint -q "$mnt" 2>/dev/null && fusermount3 -u "$mnt"
  [ -f "$demo/emulator.pid" ] && kill "$(cat "$demo/emulator.pid")" 2>/dev/null || true
  rm -f "$demo/emulator.pid"
  echo "demo stopped"
  exit 0
fi

bash scripts/install-deps.sh
swift build --product dbx-mount
swift build --product dbx-emulator
bin="$(swift build --show-bin-path)"
mkdir -p "$mnt"
mountpoint -q "$mnt" && fusermount3 -u "$mnt"

config="${XDG_CONFIG_HOME:-$HOME/.config}/dbx-mount/config.json"
if [ -z "${DBX_ACCESS_TOKEN:-}" ] && [ ! -f "$config" ]; then
  [ -f "$demo/emulator.pid" ] && kill "$(cat "$demo/emulator.pid")" 2>/dev/null || true
  if [ ! -d "$demo/sample" ]; then
    bash scripts/make-sample-tree.sh "$demo/sample"
  fi
  "$bin/dbx-emulator" --root "$demo/sample" --port 0 >"$demo/emulator.out" 2>"$demo/emulator.log" &
  echo $! >"$demo/emulator.pid"
  for _ in $(seq 100); do grep -q "listening on" "$demo/emulator.out" 2>/dev/null && break; sleep 0.1; done
  url="$(sed -n 's/.*listening on //p' "$demo/emulator.out")"
  export DBX_ACCESS_TOKEN=emulator-token DBX_API_URL="$url" DBX_CONTENT_URL="$url" DBX_NOTIFY_URL="$url"
  echo "No Dropbox account configured: mounting the emulator at $url, which serves $demo/sample."
fi

"$bin/dbx-mount" "$mnt"
echo
echo "Mounted. Look in: $mnt   (try: ls -l $mnt; find $mnt | head)"
echo "Unmount with:     fusermount3 -u $mnt   (or: bash scripts/demo.sh stop, which also stops the emulator)"
