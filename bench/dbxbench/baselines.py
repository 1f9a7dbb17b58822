"""The baselines a read row is compared with: curl of the same bytes from the same emulator,
and, for fio rows, a one-at-a-time remote reader for scale."""
import hashlib
import json
import random
import subprocess
import threading
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


def change_file_name():
    """A name no run has used: a file change-seen writes into the served root and removes again."""
    return f"change-seen-{time.time_ns()}.txt"


def b_change_seen(ctx):
    """What the API alone allows: a cursor of the whole account, a list_folder/longpoll on it
    waiting when a file is written into the served folder, then list_folder/continue until the
    file is among the entries. Timed from the write, as change-seen is; the file is removed after."""
    import http.client
    from urllib.parse import urlsplit
    url = urlsplit(ctx.emulator.url)

    def call(route, arg, timeout=60):
        if url.scheme == "https":
            connection = http.client.HTTPSConnection(url.hostname, url.port, timeout=timeout,
                                                      context=ctx.emulator.ssl_context())
        else:
            connection = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
        try:
            headers = {"Content-Type": "application/json"}
            if route != "files/list_folder/longpoll":     # the one route without auth
                headers["Authorization"] = f"Bearer {TOKEN}"
            connection.request("POST", f"/2/{route}", body=json.dumps(arg), headers=headers)
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise BenchError(f"{route} answered {response.status}: {body[:200]!r}")
            return json.loads(body)
        finally:
            connection.close()

    name = change_file_name()
    cursor = call("files/list_folder/get_latest_cursor", {"path": "", "recursive": True})["cursor"]
    answer, failure = {}, []

    def longpoll():
        try:
            answer.update(call("files/list_folder/longpoll", {"cursor": cursor, "timeout": 60}, timeout=ctx.timeout))
        except Exception as error:      # reported by the waiting side below
            failure.append(error)
    waiter = threading.Thread(target=longpoll, daemon=True)
    waiter.start()
    time.sleep(0.5)         # the longpoll is waiting at the emulator, as a mount's is
    start = time.monotonic()
    (ctx.root / name).write_bytes(name.encode())
    try:
        found = False
        while not found:
            waiter.join(ctx.timeout)
            if failure or not answer.get("changes"):
                raise BenchError(f"change-seen baseline: the longpoll brought no change ({failure or answer})")
            page = {"has_more": True}
            while page["has_more"] and not found:
                page = call("files/list_folder/continue", {"cursor": cursor})
                cursor = page["cursor"]
                found = any(e.get("name") == name and e.get(".tag") == "file" and e.get("size") == len(name)
                            for e in page["entries"])
            if not found:       # the change was another one: wait for the next
                answer.clear()
                waiter = threading.Thread(target=longpoll, daemon=True)
                waiter.start()
        seconds = time.monotonic() - start
    finally:
        (ctx.root / name).unlink()
    return {"seconds": seconds, "check": True}


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
