#!/usr/bin/env bash
# Writes a small sample Dropbox into $1 for the demo: folders, photos, documents, awkward names.
# The photos are real JPEGs and PNGs drawn by `dbx-emulator make-photos` (built here if missing;
# $DBX_EMULATOR names another binary), so a file manager on the mount shows their thumbnails.
set -euo pipefail
root="$1"
repo="$(cd "$(dirname "$0")/.." && pwd)"
emulator="${DBX_EMULATOR:-}"
if [ -z "$emulator" ]; then
  emulator="$(cd "$repo" && swift build --show-bin-path)/dbx-emulator"
  [ -x "$emulator" ] || (cd "$repo" && swift build --product dbx-emulator)
fi
mkdir -p "$root/Photos/2024 Holiday" "$root/Documents/Reports/Quarterly" "$root/Music" "$root/Empty folder"
printf 'Welcome to the dbx-mount demo.\nEverything here is served by dbx-emulator.\n' >"$root/README.txt"
"$emulator" make-photos "$root/Photos/2024 Holiday" --count 12 --seed 2024 >/dev/null
head -c 3000000 /dev/urandom >"$root/Music/song.mp3"
for q in 1 2 3 4; do printf 'Quarter %s report\n' "$q" >"$root/Documents/Reports/Quarterly/Q$q.txt"; done
printf 'naïve café – ünïcödé ✓\n' >"$root/Documents/ünïcödé notes.txt"
printf 'budget\n' >"$root/Documents/-leading dash.txt"
: >"$root/Documents/empty.txt"
