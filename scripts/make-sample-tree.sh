#!/usr/bin/env bash
# Writes a small sample Dropbox into $1 for the demo: folders, photos, documents, awkward names.
set -euo pipefail
root="$1"
mkdir -p "$root/Photos/2024 Holiday" "$root/Documents/Reports/Quarterly" "$root/Music" "$root/Empty folder"
printf 'Welcome to the dbx-mount demo.\nEverything here is served by dbx-emulator.\n' >"$root/README.txt"
for i in 1 2 3 4 5; do head -c $((200000 + i * 1000)) /dev/urandom >"$root/Photos/2024 Holiday/IMG_000$i.jpg"; done
head -c 3000000 /dev/urandom >"$root/Music/song.mp3"
for q in 1 2 3 4; do printf 'Quarter %s report\n' "$q" >"$root/Documents/Reports/Quarterly/Q$q.txt"; done
printf 'naïve café – ünïcödé ✓\n' >"$root/Documents/ünïcödé notes.txt"
printf 'budget\n' >"$root/Documents/-leading dash.txt"
: >"$root/Documents/empty.txt"
