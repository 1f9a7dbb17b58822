#!/bin/bash
# Builds page_cache_store.c and reads its 1 GiB file once per mode at 300 MB/s (a reader paced
# as at a link that fast), printing the daemon's and the reader's CPU ticks (1/100 s) for that
# GiB. As root (it raises the mount's read_ahead_kb to 4 MiB, as dbx-mount does).
# docs/reads-over-tls.md, "What the design could still change".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'fusermount3 -u "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
gcc -O2 -o "$work/probe" "$here/page_cache_store.c" $(pkg-config --cflags --libs fuse3) -lpthread
mkdir "$work/mnt"
# Modes as arguments (each may repeat, for alternating runs); all three once by default.
for m in ${*:-reply store reply-keep}; do
    "$work/probe" "$work/mnt" "$m" 2> "$work/probe.log" & pid=$!
    for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.05; done
    device=$(awk -v m="$work/mnt" '$5 == m { print $3 }' /proc/self/mountinfo | tail -1)
    echo 4096 > "/sys/class/bdi/$device/read_ahead_kb"
    before=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    reader=$(python3 - "$work/mnt/f" 300 <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); rate = float(sys.argv[2]) * 1e6
view = memoryview(bytearray(1 << 20)); start = time.monotonic(); total = 0
while (n := os.readv(fd, [view])) > 0:
    total += n
    ahead = total / rate - (time.monotonic() - start)
    if ahead > 0: time.sleep(ahead)
t = os.times(); print(f"reader {round((t.user + t.system) * 100)} ticks", end="")
PY
)
    after=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    fusermount3 -u "$work/mnt"; wait "$pid"
    echo "$m: daemon $((after - before)) ticks for 1 GiB, $reader; $(cat "$work/probe.log")"
done
