"""The workloads: what the mount runs for each row, and the table of rows (WORKLOADS and the
opt-in rows)."""
import hashlib
import json
import subprocess
import sys

from .common import BenchError, METADATA, READ, STREAM_START_BYTES, TAIL_BYTES, TOKEN
from .processes import evict_page_cache, run_parallel, run_tool
from .fixtures import fixture_layout
from .baselines import b_change_seen, change_file_name, b_par_read, b_seq_read, b_stream_start, b_tail, b_ttfb


# "bytes" (bytes returned to the reader), fio adds "iops".

class Context:
    def __init__(self, args, spec, root, emulator, timeout):
        self.args = args
        self.tls = emulator.tls if emulator else None
        self.spec = spec
        self.root = root
        self.layout = fixture_layout(spec)
        self.emulator = emulator
        self.timeout = timeout

    def size(self, relative):
        return (self.root / relative).stat().st_size

    def curl(self, relative, byte_range=None, extra=()):
        argv = ["curl", "-sS", "-f", "-o", "/dev/null", "-X", "POST",
                "-H", f"Authorization: Bearer {TOKEN}",
                "-H", "Dropbox-API-Arg: " + json.dumps({"path": "/" + relative}),
                "-w", "%{size_download} %{time_starttransfer} %{time_total}\\n", *extra]
        if self.tls:
            argv += ["--cacert", str(self.tls["ca"])]
        if byte_range:
            argv += ["-H", f"Range: bytes={byte_range}"]
        return argv + [self.emulator.url + "/2/files/download"]


def _lines(output):
    return output.count(b"\n")


def w_ls_wide(ctx, base):
    seconds, out, _ = run_tool(["ls", "-l", str(base / ctx.layout["wide"])], ctx.timeout, stdout=subprocess.PIPE)
    return {"seconds": seconds, "check": _lines(out)}


def w_find_deep(ctx, base):
    seconds, out, _ = run_tool(["find", str(base / ctx.layout["deep"])], ctx.timeout, stdout=subprocess.PIPE)
    return {"seconds": seconds, "check": _lines(out)}


def w_du_deep(ctx, base):
    seconds, out, _ = run_tool(["du", "-s", "--apparent-size", "-B1", str(base / ctx.layout["deep"])], ctx.timeout,
                               stdout=subprocess.PIPE)
    return {"seconds": seconds, "check": int(out.split()[0])}


def w_lsr_deep(ctx, base):
    seconds, out, _ = run_tool(["ls", "-lR", str(base / ctx.layout["deep"])], ctx.timeout, stdout=subprocess.PIPE)
    return {"seconds": seconds, "check": _lines(out)}


def w_find_all(ctx, base):
    """find over the whole served root; its line count (entries + the root) is the check."""
    seconds, out, _ = run_tool(["find", str(base)], ctx.timeout, stdout=subprocess.PIPE)
    return {"seconds": seconds, "check": _lines(out)}


def _dd(path, block="1M"):
    return ["dd", f"if={path}", "of=/dev/null", f"bs={block}"]


def _dd_bytes(stderr):
    for line in stderr.splitlines():
        if "bytes" in line and "copied" in line:
            return int(line.split()[0])
    raise BenchError(f"cannot read dd's byte count from {stderr!r}")


def w_seq_read_in_blocks(block):
    """dd of the first large file, `block` bytes per read(2)."""
    def run(ctx, mnt):
        seconds, _, err = run_tool(_dd(mnt / ctx.layout["large"][0], block), ctx.timeout)
        return {"seconds": seconds, "bytes": _dd_bytes(err), "check": _dd_bytes(err)}
    return run


w_seq_read = w_seq_read_in_blocks("1M")


def w_seq_read_another(ctx, mnt):
    """dd of the second large file, unmeasured, before a row's own read of the first."""
    run_tool(_dd(mnt / ctx.layout["large"][1]), ctx.timeout)


def w_stream_start(ctx, mnt):
    f = ctx.layout["large"][0]
    seconds, _, err = run_tool(_dd(mnt / f) + [f"count={STREAM_START_BYTES // (1 << 20)}"], ctx.timeout)
    return {"seconds": seconds, "bytes": _dd_bytes(err), "check": _dd_bytes(err)}


def b_seq_read_from_disk(ctx):
    """w_seq_read of the served file itself, its pages dropped first: a read from this machine's disk."""
    evict_page_cache(ctx.root / ctx.layout["large"][0])
    return w_seq_read(ctx, ctx.root)


def w_par_read(ctx, mnt):
    files = ctx.layout["large"][:4]
    seconds, outputs = run_parallel([_dd(mnt / f) for f in files], ctx.timeout)
    total = sum(_dd_bytes(err) for _, err in outputs)
    return {"seconds": seconds, "bytes": total, "check": total}


TTFB_PROBE = """
import hashlib, os, sys, time
start = time.monotonic()
fd = os.open(sys.argv[1], os.O_RDONLY)
data = os.read(fd, 4096)
seconds = time.monotonic() - start
os.close(fd)
print(seconds, len(data), hashlib.sha256(data).hexdigest())
"""


def w_ttfb(ctx, mnt):
    # A child process, so that a hung read is bounded by the step timeout like every other step.
    _, out, _ = run_tool([sys.executable, "-c", TTFB_PROBE, str(mnt / ctx.layout["huge"])], ctx.timeout,
                         stdout=subprocess.PIPE)
    seconds, size, digest = out.decode().split()
    return {"seconds": float(seconds), "bytes": int(size), "check": digest}


def w_tail(ctx, mnt):
    seconds, out, _ = run_tool(["tail", "-c", str(TAIL_BYTES), str(mnt / ctx.layout["huge"])], ctx.timeout,
                               stdout=subprocess.PIPE)
    return {"seconds": seconds, "bytes": len(out), "check": hashlib.sha256(out).hexdigest()}


# A file written into the served folder, timed until `stat` on the mount finds it at its size;
# then removed, untimed, until the mount no longer shows it, so each run starts from the same
# tree. A child process, so that a hung mount is bounded by the step timeout.
CHANGE_PROBE = """
import os, sys, time
served, shown, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
data = os.path.basename(served).encode()
def size_shown():
    try:
        return os.stat(shown).st_size
    except FileNotFoundError:
        return None
start = time.monotonic()
with open(served, "wb") as f:
    f.write(data)
while size_shown() != len(data):
    if time.monotonic() - start > timeout:
        sys.exit(f"{shown} did not show the file written {timeout:.0f} s ago")
    time.sleep(0.002)
seconds = time.monotonic() - start
os.unlink(served)
gone = time.monotonic()
while size_shown() is not None:
    if time.monotonic() - gone > timeout:
        sys.exit(f"{shown} still shows the file removed {timeout:.0f} s ago")
    time.sleep(0.01)
print(seconds)
"""


def w_change_seen(ctx, mnt):
    name = change_file_name()
    _, out, _ = run_tool([sys.executable, "-c", CHANGE_PROBE, str(ctx.root / name), str(mnt / name),
                          str(ctx.timeout / 2)], ctx.timeout, stdout=subprocess.PIPE)
    return {"seconds": float(out), "check": True}


def _fio(ctx, path, block):
    argv = ["fio", "--name=randread", f"--filename={path}", "--readonly", "--rw=randread", f"--bs={block}",
            "--ioengine=psync", "--iodepth=1", "--numjobs=1", "--direct=0", "--invalidate=0", "--randrepeat=1",
            "--norandommap", "--time_based", f"--runtime={ctx.args.fio_runtime}", f"--size={ctx.size(ctx.layout['large'][0])}",
            "--output-format=json"]
    seconds, out, _ = run_tool(argv, ctx.timeout + ctx.args.fio_runtime, stdout=subprocess.PIPE)
    job = json.loads(out[out.index(b"{"):])["jobs"][0]["read"]
    return {"seconds": job["runtime"] / 1000.0, "bytes": job["io_bytes"], "iops": job["iops"],
            "check": job["io_bytes"] > 0}


def w_fio(block):
    return lambda ctx, base: _fio(ctx, base / ctx.layout["large"][0], block)


# A link as fast as the one the read-engine issue measured curl on (945 MB/s): there the link,
# not this machine's CPU, bounds a download, as on any real link to Dropbox.
LINK_1G = 1_000_000_000
# A link to Dropbox faster than almost any user has (2.4 Gbit/s), and slower than this machine can
# decrypt with the mount, the reader and the emulator sharing its two cores: with TLS rows capped
# here, the round trip and the bytes kept in flight are measured, not the machine's CPU.
LINK_TLS = 300_000_000
# A home link of 100 Mbit/s, slower than the window a fast link needs: the stream-start row
# shows that the window's parts do not share it with the part its reader waits for.
LINK_HOME = 12_500_000

# name, kind, what the mount runs, what the baseline runs, how the baseline is measured,
# the metric ("time", "throughput" or "iops").
WORKLOADS = [
    {"name": "ls-l-wide", "kind": METADATA, "metric": "time", "run": w_ls_wide, "baseline": "local",
     "what": "ls -l of the wide folder", "baseline_what": "ls -l of the served directory"},
    {"name": "find-deep", "kind": METADATA, "metric": "time", "run": w_find_deep, "baseline": "local",
     "what": "find over the deep tree", "baseline_what": "find over the served directory"},
    {"name": "du-s-deep", "kind": METADATA, "metric": "time", "run": w_du_deep, "baseline": "local",
     "what": "du -s of the deep tree", "baseline_what": "du -s of the served directory"},
    {"name": "ls-lR-deep", "kind": METADATA, "metric": "time", "run": w_lsr_deep, "baseline": "local",
     "what": "ls -lR of the deep tree", "baseline_what": "ls -lR of the served directory"},
    {"name": "find-deep-remount", "kind": METADATA, "metric": "time", "run": w_find_deep, "baseline": "local",
     "prime": True, "what": "find over the deep tree on a new mount whose persistent cache an earlier mount filled",
     "baseline_what": "find over the served directory"},
    # Issue 5's "a change shows within about 2 s", measured: the mount settled on its change feed
    # (longpoll), then a file written into the served folder until `stat` finds it.
    {"name": "change-seen", "kind": METADATA, "metric": "time", "run": w_change_seen, "baseline": b_change_seen,
     "settle": True,
     "what": "a file written into the served folder, until stat on the mount (its change feed live) finds it",
     "baseline_what": "a client of the API alone: its list_folder/longpoll (waiting when the file is written) "
                      "returns, then list_folder/continue brings the file"},
    {"name": "seq-read", "kind": READ, "metric": "throughput", "run": w_seq_read, "baseline": b_seq_read,
     "what": "dd bs=1M of one large file", "baseline_what": "curl of the same file from the same emulator"},
    {"name": "par-read-4", "kind": READ, "metric": "throughput", "run": w_par_read, "baseline": b_par_read,
     "what": "4 parallel dd bs=1M of 4 different large files", "baseline_what": "4 parallel curls of the same files"},
    {"name": "ttfb", "kind": READ, "metric": "time", "run": w_ttfb, "baseline": b_ttfb,
     "what": "open + first 4 KiB read of the huge file", "baseline_what": "curl time_starttransfer for its first 4 KiB"},
    {"name": "ttfb-fresh-mount", "kind": READ, "metric": "time", "run": w_ttfb, "baseline": b_ttfb, "settle": False,
     "what": "open + first 4 KiB read of the huge file at once after mounting, while the mount still lists the "
             "account: the path's lookups (a list_folder per unlisted folder on the way) are included",
     "baseline_what": "curl time_starttransfer for its first 4 KiB"},
    {"name": "tail-1m", "kind": READ, "metric": "time", "run": w_tail, "baseline": b_tail,
     "what": "tail -c 1M of the huge file", "baseline_what": "curl of the same last 1 MiB (Range)"},
    {"name": "seq-read-link-1g", "kind": READ, "metric": "throughput", "run": w_seq_read, "baseline": b_seq_read,
     "bandwidth": LINK_1G, "what": "dd bs=1M of one large file, the emulator capped at 1 GB/s",
     "baseline_what": "curl of the same file through the same cap"},
    {"name": "par-read-4-link-1g", "kind": READ, "metric": "throughput", "run": w_par_read, "baseline": b_par_read,
     "bandwidth": LINK_1G, "what": "4 parallel dd bs=1M of 4 different large files, the emulator capped at 1 GB/s in all",
     "baseline_what": "4 parallel curls of the same files through the same cap"},
    # Dropbox's real conditions: every byte over TLS (the emulator's own CA, trusted by the mount
    # through --ca-bundle and by curl through --cacert), every request a round trip of 50 or
    # 100 ms. These rows keep their latency whatever --latency-ms says.
    {"name": "seq-read-tls-50ms", "kind": READ, "metric": "throughput", "run": w_seq_read, "baseline": b_seq_read,
     "tls": True, "latency_ms": 50, "what": "dd bs=1M of one large file over TLS, 50 ms per request",
     "baseline_what": "curl of the same file over TLS from the same emulator"},
    {"name": "seq-read-tls-100ms", "kind": READ, "metric": "throughput", "run": w_seq_read, "baseline": b_seq_read,
     "tls": True, "latency_ms": 100, "what": "dd bs=1M of one large file over TLS, 100 ms per request",
     "baseline_what": "curl of the same file over TLS from the same emulator"},
    {"name": "par-read-4-tls-50ms", "kind": READ, "metric": "throughput", "run": w_par_read, "baseline": b_par_read,
     "tls": True, "latency_ms": 50, "what": "4 parallel dd bs=1M of 4 different large files over TLS, 50 ms per request",
     "baseline_what": "4 parallel curls of the same files over TLS"},
    # The same three through a 2.4 Gbit/s link (LINK_TLS): uncapped, the rows above measure
    # this machine's CPU (README, "Reads at Dropbox's real conditions").
    {"name": "seq-read-tls-50ms-link-300m", "kind": READ, "metric": "throughput", "run": w_seq_read,
     "baseline": b_seq_read, "tls": True, "latency_ms": 50, "bandwidth": LINK_TLS,
     "what": "dd bs=1M of one large file over TLS, 50 ms per request, the emulator capped at 300 MB/s",
     "baseline_what": "curl of the same file over TLS through the same cap"},
    {"name": "seq-read-tls-100ms-link-300m", "kind": READ, "metric": "throughput", "run": w_seq_read,
     "baseline": b_seq_read, "tls": True, "latency_ms": 100, "bandwidth": LINK_TLS,
     "what": "dd bs=1M of one large file over TLS, 100 ms per request, the emulator capped at 300 MB/s",
     "baseline_what": "curl of the same file over TLS through the same cap"},
    {"name": "par-read-4-tls-50ms-link-300m", "kind": READ, "metric": "throughput", "run": w_par_read,
     "baseline": b_par_read, "tls": True, "latency_ms": 50, "bandwidth": LINK_TLS,
     "what": "4 parallel dd bs=1M of 4 different large files over TLS, 50 ms per request, the emulator "
             "capped at 300 MB/s in all",
     "baseline_what": "4 parallel curls of the same files over TLS through the same cap"},
    {"name": "stream-start-tls-50ms-link-12m", "kind": READ, "metric": "throughput", "run": w_stream_start,
     "baseline": b_stream_start, "tls": True, "latency_ms": 50, "bandwidth": LINK_HOME,
     "what": "dd bs=1M count=32 from the start of one large file over TLS, 50 ms per request, the emulator capped "
             "at 12.5 MB/s (100 Mbit/s)",
     "baseline_what": "curl of the same first 32 MiB (Range) over TLS through the same cap"},
    # Issue 19: the same read through a shared link (of the account's root, so paths stay the
    # same), beside seq-read-tls-50ms through the account. No change feed goes through a link, so
    # the read starts at once after mounting (the link's folders are listed as they are reached).
    {"name": "seq-read-shared-link-tls-50ms", "kind": READ, "metric": "throughput", "run": w_seq_read,
     "baseline": b_seq_read, "tls": True, "latency_ms": 50, "link": "/", "settle": False,
     "what": "dd bs=1M of one large file through a shared link, over TLS, 50 ms per request",
     "baseline_what": "curl of the same file (files/download) over TLS from the same emulator"},
    {"name": "fio-rand-4k", "kind": READ, "metric": "iops", "run": w_fio("4k"), "baseline": "local", "block": 4096,
     "what": "fio randread 4 KiB, time-bounded, on one large file", "baseline_what": "the same fio on the local file"},
    {"name": "fio-rand-128k", "kind": READ, "metric": "iops", "run": w_fio("128k"), "baseline": "local", "block": 131072,
     "what": "fio randread 128 KiB, time-bounded, on one large file", "baseline_what": "the same fio on the local file"},
]
WORKLOAD_NAMES = [w["name"] for w in WORKLOADS]

# Rows that run only when --only names them: too long for every run (list-million needs a
# minute to build its fixture once, and its emulator two to index it), and CI's --quick run
# checks that it ran exactly WORKLOAD_NAMES. Each serves its own fixture with its own emulator.
OPT_IN_WORKLOADS = [
    {"name": "list-million", "kind": METADATA, "metric": "time", "run": w_find_all, "baseline": "local",
     "fixture": "million",
     "what": "an account of 1,000,000 entries (10 x 100 folders, 998 or 999 empty files in each of the 1,000 "
             "inner ones), served by its own emulator. Cold: a fresh mount's first full listing, from starting "
             "dbx-mount until its change feed goes on to longpoll (it does once everything is listed), nobody "
             "reading the mount meanwhile; its peak RSS is the mount's whole life up to then. Warm: find over "
             "that mount once listed; its line count must equal the served tree's",
     "baseline_what": "find over the served directory (1,000,001 lines)"},
]
OPT_IN_WORKLOADS.append(
    {"name": "pin-1g", "kind": READ, "metric": "time", "run": None, "baseline": None, "fixture": "pins", "latency_ms": 50,
     "what": "dbx-mount pin of a folder of 200 files of 5 MiB (1,000 MiB), 50 ms per request, on a fresh mount with "
             "a block cache once it has listed the account, until dbx-mount status says the pin is complete. "
             "Warm: unpin and pin again (everything is cached already)",
     "baseline_what": "one curl downloading the same 200 files one after another over one connection (--next)"})
# seq-read-tls-50ms with --direct-io: the reader's bytes skip the kernel's page cache, whose
# fresh pages are what a buffered read pays most for on a VM that hands free memory back to its
# host (README, "Reads at Dropbox's real conditions").
OPT_IN_WORKLOADS.append(
    {"name": "seq-read-tls-50ms-direct-io", "kind": READ, "metric": "throughput", "run": w_seq_read,
     "baseline": b_seq_read, "tls": True, "latency_ms": 50, "mount_args": ["--direct-io"],
     "what": "dd bs=1M of one large file over TLS, 50 ms per request, mounted with --direct-io",
     "baseline_what": "curl of the same file over TLS from the same emulator"})
# A file read again from the block cache (kept on disk across mounts, and by pinned folders):
# as quick as reading the file from this machine's disk is the bar. Both sides start with the
# bytes out of the page cache.
OPT_IN_WORKLOADS.append(
    {"name": "seq-read-block-cache", "kind": READ, "metric": "throughput", "run": w_seq_read,
     "baseline": b_seq_read_from_disk, "block_cache": True,
     "what": "dd bs=1M of one large file on a new mount whose block cache an earlier mount filled by reading it, "
             "the blocks' pages dropped from the page cache first: no download",
     "baseline_what": "dd bs=1M of the served file, its pages dropped from the page cache first"})
# The capped TLS rows over HTTP/2, which libcurl asks for over TLS: through nghttpx (Debian's nghttp2-proxy) in
# front of the runner's emulator, which the mount and curl both reach over HTTP/2 (ALPN).
OPT_IN_WORKLOADS += [
    {"name": "seq-read-http2-50ms-link-300m", "kind": READ, "metric": "throughput", "run": w_seq_read,
     "baseline": b_seq_read, "tls": True, "http2": True, "latency_ms": 50, "bandwidth": LINK_TLS,
     "what": "dd bs=1M of one large file over TLS and HTTP/2 (an nghttpx front), 50 ms per request, the emulator "
             "capped at 300 MB/s",
     "baseline_what": "curl of the same file over TLS and HTTP/2 through the same front and cap"},
    {"name": "par-read-4-http2-50ms-link-300m", "kind": READ, "metric": "throughput", "run": w_par_read,
     "baseline": b_par_read, "tls": True, "http2": True, "latency_ms": 50, "bandwidth": LINK_TLS,
     "what": "4 parallel dd bs=1M of 4 different large files over TLS and HTTP/2 (an nghttpx front), 50 ms per "
             "request, the emulator capped at 300 MB/s in all",
     "baseline_what": "4 parallel curls of the same files over TLS and HTTP/2 through the same front and cap"},
]
# The capped single-reader TLS row at 50 ms on a mount that has just read another 1 GiB file the
# same way (unmeasured), buffered and with --direct-io. A fresh mount pays once for touching its
# read-ahead memory; a mount in use pays per GiB what these rows measure. Buffered, the kernel's
# page cache keeps the first file and grows by the second: on a VM that hands free memory back to
# its host, each new page-cache page costs a host fault when the mount first writes it (README,
# "Reads at Dropbox's real conditions"). With --direct-io no page cache is filled.
OPT_IN_WORKLOADS += [
    {"name": f"seq-read-tls-50ms-link-300m-after-another{suffix}", "kind": READ, "metric": "throughput",
     "run": w_seq_read, "prepare": w_seq_read_another, "baseline": b_seq_read, "tls": True, "latency_ms": 50,
     "bandwidth": LINK_TLS, "mount_args": mount_args,
     "what": "dd bs=1M of one large file over TLS, 50 ms per request, the emulator capped at 300 MB/s, on a mount"
             f"{' with --direct-io' if mount_args else ''} that has just read another large file the same way "
             "(not measured)",
     "baseline_what": "curl of the same file over TLS through the same cap"}
    for suffix, mount_args in (("", []), ("-direct-io", ["--direct-io"]))
]
# The capped single-reader TLS row at 50 ms read 16 KiB at a time, buffered and with --direct-io:
# why --direct-io is not the default. Buffered, the kernel's read-ahead turns small reads into
# large requests; with --direct-io every read(2) is one request to the mount, and each costs two
# thread wake-ups (README, "Reads at Dropbox's real conditions").
OPT_IN_WORKLOADS += [
    {"name": f"seq-read-tls-50ms-link-300m-16k{suffix}", "kind": READ, "metric": "throughput",
     "run": w_seq_read_in_blocks("16k"), "baseline": b_seq_read, "tls": True, "latency_ms": 50,
     "bandwidth": LINK_TLS, "mount_args": mount_args,
     "what": "dd bs=16k of one large file over TLS, 50 ms per request, the emulator capped at 300 MB/s"
             f"{', mounted with --direct-io' if mount_args else ''}",
     "baseline_what": "curl of the same file over TLS through the same cap"}
    for suffix, mount_args in (("", []), ("-direct-io", ["--direct-io"]))
]
OPT_IN_NAMES = [w["name"] for w in OPT_IN_WORKLOADS]
