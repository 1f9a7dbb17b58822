"""The baselines a read row is compared with: curl of the same bytes from the same emulator,
and, for fio rows, a one-at-a-time remote reader for scale."""
import hashlib
import json
import random
import subprocess
import time

from .common import BenchError, STREAM_START_BYTES, TAIL_BYTES, TOKEN
from .processes import run_parallel, run_tool


def _curl_fields(out):
    size, starttransfer, total = out.decode().split()
    return int(size), float(starttransfer), float(total)


def b_seq_read(ctx):
    f = ctx.layout["large"][0]
    seconds, out, _ = run_tool(ctx.curl(f), ctx.timeout, stdout=subprocess.PIPE)
    size = _curl_fields(out)[0]
    return {"seconds": seconds, "bytes": size, "check": size}


def b_stream_start(ctx):
    f = ctx.layout["large"][0]
    seconds, out, _ = run_tool(ctx.curl(f, f"0-{STREAM_START_BYTES - 1}"), ctx.timeout, stdout=subprocess.PIPE)
    size = _curl_fields(out)[0]
    return {"seconds": seconds, "bytes": size, "check": size}


def b_par_read(ctx):
    files = ctx.layout["large"][:4]
    seconds, outputs = run_parallel([ctx.curl(f) for f in files], ctx.timeout)
    total = sum(_curl_fields(out)[0] for out, _ in outputs)
    return {"seconds": seconds, "bytes": total, "check": total}


def b_ttfb(ctx):
    _, out, _ = run_tool(ctx.curl(ctx.layout["huge"], "0-4095"), ctx.timeout, stdout=subprocess.PIPE)
    size, starttransfer, _ = _curl_fields(out)
    with open(ctx.root / ctx.layout["huge"], "rb") as f:
        check = hashlib.sha256(f.read(4096)).hexdigest()
    return {"seconds": starttransfer, "bytes": size, "check": check}


def b_tail(ctx):
    size = ctx.size(ctx.layout["huge"])
    seconds, out, _ = run_tool(ctx.curl(ctx.layout["huge"], f"{size - TAIL_BYTES}-{size - 1}"), ctx.timeout,
                               stdout=subprocess.PIPE)
    with open(ctx.root / ctx.layout["huge"], "rb") as f:
        f.seek(size - TAIL_BYTES)
        check = hashlib.sha256(f.read()).hexdigest()
    return {"seconds": seconds, "bytes": _curl_fields(out)[0], "check": check}


def b_pin_files(emulator, root, folder, timeout):
    """curl of every file of `folder`, one after another, in one process (one kept-alive
    connection), as a user without a mount would fetch a folder."""
    files = sorted(p for p in (root / folder).iterdir() if p.is_file())
    argv = ["curl", "-sS", "-f"]
    for i, path in enumerate(files):
        if i:
            argv.append("--next")
        argv += ["-o", "/dev/null", "-X", "POST", "-H", f"Authorization: Bearer {TOKEN}",
                 "-H", "Dropbox-API-Arg: " + json.dumps({"path": "/" + str(path.relative_to(root))}),
                 emulator.url + "/2/files/download"]
    seconds, _, _ = run_tool(argv, timeout)
    total = sum(p.stat().st_size for p in files)
    return {"seconds": seconds, "bytes": total, "check": total}


def remote_reference(ctx, block_size, seconds):
    """The best one-at-a-time remote reader: random Range requests of block_size over one
    keep-alive connection to the same emulator, for the same time as fio. Informational."""
    import http.client
    from urllib.parse import urlsplit
    relative = ctx.layout["large"][0]
    size = ctx.size(relative)
    url = urlsplit(ctx.emulator.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    headers = {"Authorization": f"Bearer {TOKEN}", "Dropbox-API-Arg": json.dumps({"path": "/" + relative})}
    rng = random.Random(7)
    blocks = size // block_size
    done = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            offset = rng.randrange(blocks) * block_size
            connection.request("POST", "/2/files/download", headers=dict(headers, Range=f"bytes={offset}-{offset + block_size - 1}"))
            response = connection.getresponse()
            if len(response.read()) != block_size:
                raise BenchError("remote reference: short range read")
            done += 1
    finally:
        connection.close()
    elapsed = time.monotonic() - start
    return {"iops": done / elapsed, "mb_per_s": done * block_size / elapsed / 1e6,
            "what": f"one keep-alive HTTP client doing the same random {block_size // 1024} KiB Range reads one at a time"}
