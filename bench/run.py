#!/usr/bin/env python3
"""dbx-mount benchmark runner: every speed figure beside a baseline measured in the same run.

    python3 bench/run.py [--quick] [--latency-ms N] [--bandwidth BPS] [--repeats N]
                         [--out DIR] [--only WORKLOAD ...]

It builds the release binaries, generates deterministic fixtures (cached under bench/.fixtures),
starts dbx-emulator over them with added latency, and runs every workload on a fresh mount
(cold) and again on the same mount (warm). Baselines cannot flatter dbx-mount:
  * metadata workloads run the same command on the local directory the emulator serves;
  * read workloads compare with curl downloading the same bytes from the same emulator
    (fio random reads compare with fio on the local file).
list-million (a fresh mount's cold full listing of an account of 10^6 entries, with a fixture and
an emulator of its own) runs only when --only names it.
Writes results.json, results.md and ratios.svg into the output directory (default
bench-results/). Python 3 standard library only. Every mount it makes is unmounted and every
process it starts is stopped, also on errors, timeouts, Ctrl-C and SIGTERM.
"""
import argparse
import atexit
import datetime
import hashlib
import http.client
import json
import os
import platform
import random
import resource
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

REPO = Path(__file__).resolve().parents[1]
TOKEN = "emulator-token"
MiB = 1 << 20
GiB = 1 << 30
FIXTURE_VERSION = 1

# Fixture sets. The deep tree is fanout[0] x fanout[1] x fanout[2] folders, with
# deep_files files in each of the innermost (leaf) folders.
SPECS = {
    "full": {"wide_files": 10_000, "deep_fanout": [10, 10, 10], "deep_files": 100,
             "large_size": 1 * GiB, "large_count": 4, "huge_size": 2 * GiB},
    "quick": {"wide_files": 1_000, "deep_fanout": [5, 5, 4], "deep_files": 50,
              "large_size": 64 * MiB, "large_count": 4, "huge_size": 128 * MiB},
}

METADATA, READ = "metadata", "read"


class BenchError(Exception):
    """A problem worth one clear line, not a traceback."""


def log(message):
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Process bookkeeping: only what this runner started is ever signalled or unmounted.

_children = []      # Popen objects started by this runner (emulator, dbx-mount, workload tools)
_mounts = []        # mount points this runner mounted


def _is_mounted(path):
    target = os.path.realpath(path)
    try:
        with open("/proc/mounts") as mounts:
            return any(line.split()[1] == target for line in mounts)
    except OSError:
        return False


def _stop(process, timeout=10):
    if process.poll() is not None:
        return
    try:
        process.terminate()
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _kill_group(process):
    """Kills a workload tool started in its own session (the children it forked included).
    Once reaped, its pid (and group id) may belong to someone else: then nothing is signalled."""
    if process.returncode is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)      # its group id is its pid: start_new_session
    except (ProcessLookupError, PermissionError):
        pass


_stopping = False


def cleanup():
    """Stops our workload tools, unmounts our mounts, then stops the rest of our processes,
    newest first. Safe to call twice."""
    global _stopping
    _stopping = True
    for process in reversed(list(_children)):
        if process.args and Path(str(process.args[0])).name not in ("dbx-mount", "dbx-emulator"):
            _kill_group(process)
    for mountpoint in list(_mounts):
        if _is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", str(mountpoint)], stderr=subprocess.DEVNULL, check=False, timeout=30)
        if _is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], stderr=subprocess.DEVNULL, check=False, timeout=30)
        _mounts.remove(mountpoint)
    for process in reversed(list(_children)):
        _stop(process)
        _children.remove(process)


def _on_signal(signum, _frame):
    global _stopping
    if _stopping:           # already cleaning up: let it finish
        return
    _stopping = True
    raise SystemExit(128 + signum)


def run_tool(argv, timeout, stdout=subprocess.DEVNULL, env=None):
    """Runs one workload or baseline command in its own session; returns (seconds, stdout, stderr).

    A timeout kills that command's process group and raises BenchError; so does any interruption
    (a signal), before the mount under it is unmounted."""
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, env=env, start_new_session=True)
    _children.append(process)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{argv[0]} timed out after {timeout:.0f} s: {' '.join(map(str, argv))}")
    finally:
        _kill_group(process)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if process in _children and process.poll() is not None:
            _children.remove(process)
    elapsed = time.monotonic() - start
    if process.returncode != 0:
        message = (err or b"").decode(errors="replace").strip().splitlines()
        raise BenchError(f"{' '.join(map(str, argv))} exited {process.returncode}: {message[-1] if message else ''}")
    return elapsed, out, (err or b"").decode(errors="replace")


def run_parallel(argvs, timeout):
    """Starts every command at once; returns the wall time until the last one finished."""
    start = time.monotonic()
    processes = []
    try:
        for argv in argvs:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            _children.append(p)
            processes.append(p)
        outputs = []
        for p, argv in zip(processes, argvs):
            remaining = max(1.0, timeout - (time.monotonic() - start))
            try:
                out, err = p.communicate(timeout=remaining)
            except subprocess.TimeoutExpired:
                raise BenchError(f"{argv[0]} timed out after {timeout:.0f} s: {' '.join(map(str, argv))}")
            if p.returncode != 0:
                raise BenchError(f"{' '.join(map(str, argv))} exited {p.returncode}: {err.decode(errors='replace').strip()[-200:]}")
            outputs.append((out, err.decode(errors="replace")))
        return time.monotonic() - start, outputs
    finally:
        for p in processes:
            _kill_group(p)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if p in _children and p.poll() is not None:
                _children.remove(p)


# --------------------------------------------------------------------------------------------
# Preconditions, build, fixtures

def check_environment(need_fio):
    if not os.path.exists("/dev/fuse"):
        raise BenchError("/dev/fuse is missing: FUSE is needed to mount (modprobe fuse, or run the container with --device /dev/fuse)")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        raise BenchError("/dev/fuse is not readable and writable by this user")
    for tool, package in [("fusermount3", "fuse3"), ("curl", "curl"), ("dd", "coreutils"), ("find", "findutils")]:
        if not shutil.which(tool):
            raise BenchError(f"{tool} is not installed (apt-get install {package})")
    if need_fio and not shutil.which("fio"):
        if os.geteuid() == 0 and shutil.which("apt-get"):
            log("installing fio (apt-get install fio)")
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            if subprocess.run(["apt-get", "install", "-y", "-qq", "fio"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode != 0:
                subprocess.run(["apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                subprocess.run(["apt-get", "install", "-y", "-qq", "fio"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        if not shutil.which("fio"):
            raise BenchError("fio is not installed (apt-get install fio), or leave out the fio workloads with --only")


def build(skip):
    if not skip:
        log("building release binaries (swift build -c release)")
        try:
            result = subprocess.run(["swift", "build", "-c", "release"], cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, timeout=3600)
        except FileNotFoundError:
            raise BenchError("swift is not on PATH (or pass --bin-dir with prebuilt dbx-mount and dbx-emulator)")
        if result.returncode != 0:
            tail = result.stdout.decode(errors="replace").strip().splitlines()[-15:]
            sys.stderr.write("\n".join(tail) + "\n")
            raise BenchError("swift build -c release failed (output above)")
    path = subprocess.run(["swift", "build", "-c", "release", "--show-bin-path"], cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    return Path(path)


def fixture_layout(spec):
    """Paths (relative to the served root) and sizes the workloads use."""
    large = [f"big/large-{i}.bin" for i in range(spec["large_count"])]
    return {"wide": "wide", "deep": "deep", "large": large, "huge": "big/huge.bin"}


def _cached_fixture(cache, key):
    """The served root under cache if it was built from this key (spec and version), else None."""
    stamp = cache / "spec.json"
    root = cache / "root"
    if stamp.exists() and root.is_dir():
        try:
            if json.loads(stamp.read_text()) == key:
                return root
        except ValueError:
            pass
    return None


def _fresh_fixture(cache):
    """An empty root in place of whatever an older spec left there."""
    log(f"generating fixtures in {cache} (once; reused while the spec is unchanged)")
    if cache.exists():
        shutil.rmtree(cache)
    root = cache / "root"
    root.mkdir(parents=True)
    return root


def _build_once(cache, key, what, build):
    """The served root under cache: built by build(root) unless a stamp says it was built from
    this key (spec and version) already."""
    root = _cached_fixture(cache, key)
    if root:
        return root
    started = time.monotonic()
    root = _fresh_fixture(cache)
    summary = build(root)
    (cache / "spec.json").write_text(json.dumps(key, sort_keys=True))
    log(f"{what} ready in {time.monotonic() - started:.1f} s{summary or ''}")
    return root


def generate_fixtures(cache, spec):
    """Builds the served tree once per spec; later runs with the same spec reuse it."""
    return _build_once(cache, dict(spec, version=FIXTURE_VERSION), "fixtures", lambda root: _build_fixtures(root, spec))


def _build_fixtures(root, spec):
    mtime = 1_700_000_000
    # A wide folder: wide_files small files side by side.
    wide = root / "wide"
    wide.mkdir()
    for i in range(spec["wide_files"]):
        path = wide / f"file-{i:05d}.txt"
        path.write_bytes(b"wide %d\n" % i)
        os.utime(path, (mtime + i, mtime + i))
    # A deep tree: three levels of folders, files in the leaves.
    a, b, c = spec["deep_fanout"]
    count = 0
    for i in range(a):
        for j in range(b):
            for k in range(c):
                leaf = root / "deep" / f"a{i:02d}" / f"b{j:02d}" / f"c{k:02d}"
                leaf.mkdir(parents=True)
                for n in range(spec["deep_files"]):
                    path = leaf / f"f{n:03d}.txt"
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.write(fd, b"deep %d\n" % count)
                    os.close(fd)
                    os.utime(path, (mtime + count, mtime + count))
                    count += 1
    # Large files: a seeded 1 MiB block, its first 16 bytes replaced by (file, block) counters so
    # that every block of every file differs. Fast (no /dev/urandom) and deterministic.
    big = root / "big"
    big.mkdir()
    block = random.Random(20240601).randbytes(MiB)
    layout = fixture_layout(spec)
    files = [(p, spec["large_size"]) for p in layout["large"]] + [(layout["huge"], spec["huge_size"])]
    for file_no, (relative, size) in enumerate(files):
        with open(root / relative, "wb", buffering=0) as out:
            tail = memoryview(block)[16:]
            for n in range(size // MiB):
                out.write(file_no.to_bytes(8, "little") + n.to_bytes(8, "little"))
                out.write(tail)
        os.utime(root / relative, (mtime, mtime))


# The account of a million entries (issue 15), served by its own emulator for list-million only.
# Three levels, like the deep tree ten times over: ten folders at the top, as in a user's root
# (Photos, Documents, Projects, ...), a hundred folders in each, and the files spread evenly over
# those thousand leaves, 998 or 999 each: a folder of a thousand files is the common large one
# (a camera-upload month, a project's assets), not a freak of 10^5. Ten top folders are more than
# the mount lists at once (8 by default), as an account's root usually is. File names are 18
# characters ("report-0000123.txt"), like real ones; the files are empty (a million 4 KiB blocks
# would be 4 GiB for nothing: the row measures metadata), each with its own mtime.
MILLION = {"top_folders": 10, "subfolders": 100, "entries": 1_000_000}
MILLION_VERSION = 1


def million_shape(spec):
    """(folders, files, files per leaf folder, leaves holding one more): entries counted
    without the root, as find prints them after the root's own line."""
    folders = spec["top_folders"] * (1 + spec["subfolders"])
    files = spec["entries"] - folders
    leaves = spec["top_folders"] * spec["subfolders"]
    return folders, files, files // leaves, files % leaves


def generate_million(cache, spec):
    """Builds the million-entry tree once per spec (about 30 s: one open, futimens and
    close per file, relative to the folder's descriptor so no path is resolved twice)."""
    return _build_once(cache, dict(spec, version=MILLION_VERSION), "million-entry fixture",
                       lambda root: _build_million(root, spec))


def _build_million(root, spec):
    _, _, per_leaf, extra = million_shape(spec)
    mtime = 1_700_000_000
    count = 0
    leaf_no = 0
    for i in range(spec["top_folders"]):
        top = root / f"folder-{i:02d}"
        top.mkdir()
        for j in range(spec["subfolders"]):
            leaf = top / f"subfolder-{j:03d}"
            leaf.mkdir()
            dir_fd = os.open(leaf, os.O_RDONLY | os.O_DIRECTORY)
            try:
                for _ in range(per_leaf + (1 if leaf_no < extra else 0)):
                    fd = os.open(f"report-{count:07d}.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dir_fd)
                    os.utime(fd, (mtime + count, mtime + count))
                    os.close(fd)
                    count += 1
            finally:
                os.close(dir_fd)
            leaf_no += 1
    return f" ({count:,} files)"


# --------------------------------------------------------------------------------------------
# The emulator and the mount

def peak_rss(pid):
    """VmHWM of a process of ours, in bytes; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def make_tls(folder):
    """A throw-away CA and a certificate for 127.0.0.1 signed by it (openssl), for the TLS rows:
    the mount trusts the CA through --ca-bundle, curl through --cacert, the runner through an
    ssl context. Returns {"ca", "cert", "key"} paths."""
    folder.mkdir(parents=True, exist_ok=True)
    def openssl(*argv):
        result = subprocess.run(["openssl", *map(str, argv)], capture_output=True, timeout=60)
        if result.returncode != 0:
            raise BenchError(f"openssl {argv[0]} failed: {result.stderr.decode(errors='replace').strip()[-200:]}")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", folder / "ca.key", "-out", folder / "ca.pem",
            "-days", "2", "-subj", "/CN=dbx-mount bench CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", folder / "server.key", "-out", folder / "server.csr",
            "-subj", "/CN=127.0.0.1")
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", folder / "server.csr", "-CA", folder / "ca.pem", "-CAkey", folder / "ca.key",
            "-CAcreateserial", "-out", folder / "server.pem", "-days", "2", "-extfile", folder / "ext.cnf")
    return {"ca": folder / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}


def cpu_seconds(pid):
    """utime + stime of a running process, from /proc (the mount's, the emulator's)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def children_cpu_seconds():
    """CPU of the children reaped so far (the reader or curl a workload ran)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Emulator:
    def __init__(self, binary, root, latency_ms, bandwidth, logdir, name="emulator", start_timeout=120, tls=None):
        argv = [str(binary), "--root", str(root), "--port", "0", "--latency-ms", str(latency_ms)]
        if bandwidth:
            argv += ["--bandwidth", str(bandwidth)]
        self.tls = tls
        if tls:
            argv += ["--tls-cert", str(tls["cert"]), "--tls-key", str(tls["key"])]
        self.log_path = logdir / f"{name}.log"
        self.log_file = open(self.log_path, "ab")
        start_offset = self.log_path.stat().st_size
        started = time.monotonic()
        self.process = subprocess.Popen(argv, stdout=self.log_file, stderr=self.log_file)
        _children.append(self.process)
        deadline = started + start_timeout      # it indexes and hashes the served tree before it listens
        line = ""
        while "listening on " not in line:
            if self.process.poll() is not None or time.monotonic() > deadline:
                timed_out = self.process.poll() is None
                _stop(self.process)
                text = self.log_path.read_text(errors="replace").strip().splitlines()
                reason = f"not listening after {start_timeout:.0f} s" if timed_out else (text[-1] if text else "no output")
                raise BenchError(f"dbx-emulator did not start: {reason} (see {self.log_path})")
            time.sleep(0.02)
            text = self.log_path.read_bytes()[start_offset:].decode(errors="replace")
            line = next((l for l in text.splitlines() if "listening on " in l), "")
        # What indexing the tree costs, for the rows that serve a large one.
        self.start_seconds = time.monotonic() - started
        self.rss_at_start = peak_rss(self.process.pid)
        self.url = line.split("listening on ", 1)[1].strip()
        self._admin = None      # the runner's one connection for stats and knobs (see _call)
        self.latency_ms = latency_ms
        self.bandwidth = bandwidth

    def alive(self):
        return self.process.poll() is None

    def _call(self, method, path, body=None):
        """An admin request over one kept-alive connection. The emulator counts every TCP
        connection it accepts: a new one per call would put the runner's own calls in a measured
        run's count (wait_for_longpoll asks ten times a second: 300 for a 30 s listing)."""
        for attempt in (1, 2):
            try:
                if self._admin is None:
                    host, port = self.url.split("//", 1)[1].rsplit(":", 1)
                    if self.tls:
                        self._admin = http.client.HTTPSConnection(host, int(port), timeout=30, context=self.ssl_context())
                    else:
                        self._admin = http.client.HTTPConnection(host, int(port), timeout=30)
                self._admin.request(method, path, body=body)
                response = self._admin.getresponse()
                data = response.read()
                if response.status >= 400:
                    raise BenchError(f"dbx-emulator answered {response.status} to {method} {path}: {data[:200]!r}")
                return json.loads(data or b"null")
            except (OSError, http.client.HTTPException) as error:
                self._admin.close()
                self._admin = None
                # Once again on a new connection, in case the emulator dropped the idle one.
                if attempt == 2 or not self.alive():
                    state = "running" if self.alive() else f"exited with status {self.process.returncode}"
                    raise BenchError(f"cannot reach dbx-emulator at {self.url}{path} ({state}): {error}")

    def ssl_context(self):
        return ssl.create_default_context(cafile=str(self.tls["ca"])) if self.tls else None

    def stats(self):
        return self._call("GET", "/__stats")

    def reset_stats(self):
        self._call("POST", "/__stats/reset", b"")

    def set_latency(self, ms):
        if ms != self.latency_ms:
            self._call("POST", "/__admin/knobs", json.dumps({"latency_ms": ms}).encode())
            self.latency_ms = ms

    def set_bandwidth(self, bytes_per_second):
        """None removes the cap (the knob takes 0 for that)."""
        if bytes_per_second != self.bandwidth:
            self._call("POST", "/__admin/knobs", json.dumps({"bandwidth": bytes_per_second or 0}).encode())
            self.bandwidth = bytes_per_second

    def requests(self, route):
        return self.stats().get("requests", {}).get(route, 0)

    def wait_for_longpoll(self, timeout):
        """Until some mount's change feed has listed everything and gone on to longpoll: the
        feed calls longpoll only once its first full listing is in."""
        deadline = time.monotonic() + timeout
        while self.requests("files/list_folder/longpoll") < 1:
            if time.monotonic() > deadline:
                raise BenchError("the mount never finished its first full listing (no longpoll)")
            time.sleep(0.1)

    def warm_up(self, root, layout):
        """Nobody pays for first-touch costs: the served files go into the page cache, the tree
        into the dentry cache, and the emulator computes its content hashes (a listing does)."""
        buffer = bytearray(8 * MiB)
        for relative in layout["large"] + [layout["huge"]]:
            with open(root / relative, "rb", buffering=0) as f:
                while f.readinto(buffer):
                    pass
        subprocess.run(["find", str(root)], stdout=subprocess.DEVNULL, check=False, timeout=600)
        for folder in ("big", "wide"):
            request = urllib.request.Request(self.url + "/2/files/list_folder", method="POST",
                                             data=json.dumps({"path": "/" + folder, "recursive": False}).encode(),
                                             headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600, context=self.ssl_context()) as response:
                response.read()

    def peak_rss(self):
        return peak_rss(self.process.pid)

    def stop(self):
        if self._admin is not None:
            self._admin.close()
        _stop(self.process)
        if self.process in _children:
            _children.remove(self.process)
        self.log_file.close()


class Mount:
    """dbx-mount -f: the runner owns the process, so it can read its peak RSS and stop it."""

    def __init__(self, binary, emulator, mountpoint, extra_args, log_path, cache_home):
        self.mountpoint = mountpoint
        mountpoint.mkdir(parents=True, exist_ok=True)
        # Whatever dbx-mount keeps in the user's cache directory (its persistent metadata cache,
        # any block cache) goes to cache_home: a fresh one makes a cold mount really cold.
        cache_home.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url,
                   DBX_CONTENT_URL=emulator.url, DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(cache_home))
        self.log_file = open(log_path, "ab")
        self.process = subprocess.Popen([str(binary), "-f", *extra_args, str(mountpoint)], env=env,
                                        stdout=self.log_file, stderr=self.log_file)
        _children.append(self.process)
        _mounts.append(mountpoint)
        deadline = time.monotonic() + 60
        while not _is_mounted(mountpoint):
            if self.process.poll() is not None:
                self.close()
                raise BenchError(f"dbx-mount exited {self.process.returncode} before mounting (see {log_path})")
            if time.monotonic() > deadline:
                self.close()
                raise BenchError(f"dbx-mount did not mount within 60 s (see {log_path})")
            time.sleep(0.02)

    def reset_peak_rss(self):
        try:
            with open(f"/proc/{self.process.pid}/clear_refs", "w") as f:
                f.write("5")     # resets VmHWM to the current RSS (Linux >= 4.0)
        except OSError:
            pass

    def peak_rss(self):
        return peak_rss(self.process.pid)

    def close(self):
        if _is_mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", str(self.mountpoint)], stderr=subprocess.DEVNULL, check=False, timeout=30)
        if not _is_mounted(self.mountpoint):
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        _stop(self.process)     # SIGTERM makes dbx-mount unmount itself
        if _is_mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], stderr=subprocess.DEVNULL, check=False, timeout=30)
        if self.mountpoint in _mounts:
            _mounts.remove(self.mountpoint)
        if self.process in _children:
            _children.remove(self.process)
        self.log_file.close()


# --------------------------------------------------------------------------------------------
# Workloads. Each measure function returns a dict with at least "seconds"; read workloads add
# "bytes" (bytes returned to the reader), fio adds "iops".

class Context:
    def __init__(self, args, spec, root, emulator, timeout):
        self.args = args
        self.tls = emulator.tls
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


def _dd(path):
    return ["dd", f"if={path}", "of=/dev/null", "bs=1M"]


def _dd_bytes(stderr):
    for line in stderr.splitlines():
        if "bytes" in line and "copied" in line:
            return int(line.split()[0])
    raise BenchError(f"cannot read dd's byte count from {stderr!r}")


def _curl_fields(out):
    size, starttransfer, total = out.decode().split()
    return int(size), float(starttransfer), float(total)


def w_seq_read(ctx, mnt):
    f = ctx.layout["large"][0]
    seconds, _, err = run_tool(_dd(mnt / f), ctx.timeout)
    return {"seconds": seconds, "bytes": _dd_bytes(err), "check": _dd_bytes(err)}


def b_seq_read(ctx):
    f = ctx.layout["large"][0]
    seconds, out, _ = run_tool(ctx.curl(f), ctx.timeout, stdout=subprocess.PIPE)
    size = _curl_fields(out)[0]
    return {"seconds": seconds, "bytes": size, "check": size}


def w_par_read(ctx, mnt):
    files = ctx.layout["large"][:4]
    seconds, outputs = run_parallel([_dd(mnt / f) for f in files], ctx.timeout)
    total = sum(_dd_bytes(err) for _, err in outputs)
    return {"seconds": seconds, "bytes": total, "check": total}


def b_par_read(ctx):
    files = ctx.layout["large"][:4]
    seconds, outputs = run_parallel([ctx.curl(f) for f in files], ctx.timeout)
    total = sum(_curl_fields(out)[0] for out, _ in outputs)
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


def b_ttfb(ctx):
    _, out, _ = run_tool(ctx.curl(ctx.layout["huge"], "0-4095"), ctx.timeout, stdout=subprocess.PIPE)
    size, starttransfer, _ = _curl_fields(out)
    with open(ctx.root / ctx.layout["huge"], "rb") as f:
        check = hashlib.sha256(f.read(4096)).hexdigest()
    return {"seconds": starttransfer, "bytes": size, "check": check}


TAIL_BYTES = MiB


def w_tail(ctx, mnt):
    seconds, out, _ = run_tool(["tail", "-c", str(TAIL_BYTES), str(mnt / ctx.layout["huge"])], ctx.timeout,
                               stdout=subprocess.PIPE)
    return {"seconds": seconds, "bytes": len(out), "check": hashlib.sha256(out).hexdigest()}


def b_tail(ctx):
    size = ctx.size(ctx.layout["huge"])
    seconds, out, _ = run_tool(ctx.curl(ctx.layout["huge"], f"{size - TAIL_BYTES}-{size - 1}"), ctx.timeout,
                               stdout=subprocess.PIPE)
    with open(ctx.root / ctx.layout["huge"], "rb") as f:
        f.seek(size - TAIL_BYTES)
        check = hashlib.sha256(f.read()).hexdigest()
    return {"seconds": seconds, "bytes": _curl_fields(out)[0], "check": check}


def _fio(ctx, path, block):
    argv = ["fio", "--name=randread", f"--filename={path}", "--readonly", "--rw=randread", f"--bs={block}",
            "--ioengine=psync", "--iodepth=1", "--numjobs=1", "--direct=0", "--invalidate=0", "--randrepeat=1",
            "--norandommap", "--time_based", f"--runtime={ctx.args.fio_runtime}", f"--size={ctx.size(ctx.layout['large'][0])}",
            "--output-format=json"]
    seconds, out, _ = run_tool(argv, ctx.timeout + ctx.args.fio_runtime, stdout=subprocess.PIPE)
    job = json.loads(out[out.index(b"{"):])["jobs"][0]["read"]
    return {"seconds": job["runtime"] / 1000.0, "bytes": job["io_bytes"], "iops": job["iops"],
            "check": job["io_bytes"] > 0}


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


def w_fio(block):
    return lambda ctx, base: _fio(ctx, base / ctx.layout["large"][0], block)


# A link as fast as the one the read-engine issue measured curl on (945 MB/s): there the link,
# not this machine's CPU, bounds a download, as on any real link to Dropbox.
LINK_1G = 1_000_000_000

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
OPT_IN_NAMES = [w["name"] for w in OPT_IN_WORKLOADS]


# --------------------------------------------------------------------------------------------
# Measuring

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def api_calls(stats):
    return {route: n for route, n in sorted(stats.get("requests", {}).items()) if n}


def summarize(samples, metric):
    """Median figures over repeats; API calls and bytes are medians per route."""
    if not samples:
        return None
    out = {"runs": samples, "median_seconds": median([s["seconds"] for s in samples])}
    if metric == "throughput" or any("bytes" in s for s in samples):
        out["median_bytes_returned"] = median([s.get("bytes") for s in samples])
    if metric == "throughput":
        out["median_mb_per_s"] = median([s["bytes"] / s["seconds"] / 1e6 for s in samples])
    if metric == "iops":
        out["median_iops"] = median([s["iops"] for s in samples])
        out["median_mb_per_s"] = median([s["bytes"] / s["seconds"] / 1e6 for s in samples])
    if any("api_calls" in s for s in samples):
        routes = sorted({r for s in samples for r in s.get("api_calls", {})})
        out["api_calls"] = {r: median([s.get("api_calls", {}).get(r, 0) for s in samples]) for r in routes}
        out["api_calls_total"] = median([sum(s.get("api_calls", {}).values()) for s in samples])
        out["bytes_downloaded"] = median([s.get("bytes_downloaded") for s in samples])
        out["connections"] = median([s.get("connections") for s in samples])
        if metric in ("throughput", "iops") or any("bytes" in s for s in samples):
            amps = [s["bytes_downloaded"] / s["bytes"] for s in samples if s.get("bytes")]
            out["read_amplification"] = median(amps)
    if any(s.get("peak_rss_bytes") for s in samples):
        out["peak_rss_bytes"] = max(s["peak_rss_bytes"] for s in samples if s.get("peak_rss_bytes"))
    return out


def cpu_per_gib(samples):
    """Median CPU-seconds per GiB returned, by process (reader, emulator, mount), for rows that
    read bytes; None for the others."""
    usable = [s for s in samples if s.get("bytes") and s.get("cpu_seconds")]
    if not usable:
        return None
    keys = sorted({k for s in usable for k in s["cpu_seconds"]})
    return {k: round(median([s["cpu_seconds"].get(k, 0) / (s["bytes"] / GiB) for s in usable]), 3) for k in keys}


def ratio(mount, baseline, metric):
    """Time ratio, mount / baseline: 1.0 is as fast as the baseline, 3.0 three times slower."""
    if not mount or not baseline:
        return None
    if metric == "throughput":
        m, b = mount.get("median_mb_per_s"), baseline.get("median_mb_per_s")
        return b / m if m and b else None
    if metric == "iops":
        m, b = mount.get("median_iops"), baseline.get("median_iops")
        return b / m if m and b else None
    m, b = mount.get("median_seconds"), baseline.get("median_seconds")
    return m / b if m and b else None


class Runner:
    def __init__(self, args, bins, root, spec, emulator, workdir, logdir):
        self.args, self.bins, self.root, self.spec = args, bins, root, spec
        self.emulator, self.workdir, self.logdir = emulator, workdir, logdir
        self.ctx = Context(args, spec, root, emulator, args.step_timeout)
        self.mount_count = 0
        self.tls = None     # (emulator, context) of the TLS rows, started by the first of them

    def latency_for(self, workload_or_kind):
        """A row's own latency (the TLS rows model a real link at 50 or 100 ms, whatever
        --latency-ms says), else the runner's latency for its kind."""
        if isinstance(workload_or_kind, dict):
            if "latency_ms" in workload_or_kind:
                return workload_or_kind["latency_ms"]
            workload_or_kind = workload_or_kind["kind"]
        return self.args.metadata_latency_ms if workload_or_kind == METADATA else self.args.read_latency_ms

    def tls_emulator(self):
        """A second emulator over the same fixtures, serving HTTPS with a throw-away CA."""
        if self.tls is None or not self.tls[0].alive():
            if self.tls is not None:
                self.tls[0].stop()
            certificates = make_tls(self.workdir / "tls")
            emulator = Emulator(self.bins / "dbx-emulator", self.root, self.args.read_latency_ms, None, self.logdir,
                                name="emulator-tls", tls=certificates)
            emulator.warm_up(self.root, fixture_layout(self.spec))
            self.tls = (emulator, Context(self.args, self.spec, self.root, emulator, self.args.step_timeout))
        return self.tls

    def close(self):
        if self.tls is not None:
            self.tls[0].stop()
        if self.emulator:
            self.emulator.stop()

    @staticmethod
    def cpu_now(emulator, mount):
        return (children_cpu_seconds(), cpu_seconds(emulator.process.pid),
                cpu_seconds(mount.process.pid) if mount is not None else 0.0)

    @staticmethod
    def cpu_since(before, emulator, mount):
        """CPU-seconds of the reader (dd, find, curl: the children reaped meanwhile), the
        emulator and the mount over one measured run, from /proc and getrusage."""
        after = Runner.cpu_now(emulator, mount)
        cpu = {"reader": after[0] - before[0], "emulator": after[1] - before[1]}
        if mount is not None:
            cpu["mount"] = after[2] - before[2]
        return {k: round(v, 3) for k, v in cpu.items()}

    def measured(self, fn, mount=None, emulator=None):
        """One measured run: emulator counters reset before and read after."""
        emulator = emulator or self.emulator
        if mount is not None:
            mount.reset_peak_rss()
        emulator.reset_stats()
        before = self.cpu_now(emulator, mount)
        sample = fn()
        sample["cpu_seconds"] = self.cpu_since(before, emulator, mount)
        stats = emulator.stats()
        sample["api_calls"] = api_calls(stats)
        sample["bytes_downloaded"] = stats.get("download_bytes", 0)
        sample["connections"] = stats.get("connections", 0)
        if mount is not None:
            sample["peak_rss_bytes"] = mount.peak_rss()
        return sample

    def run_workload(self, workload):
        if workload.get("fixture") == "million":
            return self.run_list_million(workload)
        name, metric = workload["name"], workload["metric"]
        emulator, ctx, mount_args = self.emulator, self.ctx, list(self.args.mount_arg)
        if workload.get("tls"):
            emulator, ctx = self.tls_emulator()
            mount_args += ["--ca-bundle", str(emulator.tls["ca"])]
        emulator.set_latency(self.latency_for(workload))
        emulator.set_bandwidth(workload.get("bandwidth", self.args.bandwidth))
        # Read workloads time the read engine: they start once the mount has listed the account
        # (the metadata workloads time that listing), unless the workload is about a fresh mount.
        settle = workload["kind"] == READ and workload.get("settle", True)
        cold, warm, baseline = [], [], []
        for repeat in range(self.args.repeats):
            # The baseline first, interleaved with the mount's runs so that noise hits both.
            if workload["baseline"] == "local":
                baseline.append(self.measured(lambda: workload["run"](ctx, self.root), emulator=emulator))
            else:
                baseline.append(self.measured(lambda: workload["baseline"](ctx), emulator=emulator))
            cache_home = self.workdir / f"cache-{self.mount_count + 1}"
            if workload.get("prime"):
                self.prime(cache_home, name)
            self.mount_count += 1
            mountpoint = self.workdir / f"mnt-{self.mount_count}"
            emulator.reset_stats()      # the cold run's counts include mounting
            mount = Mount(self.bins / "dbx-mount", emulator, mountpoint, mount_args,
                          self.logdir / f"mount-{name}.log", cache_home)
            try:
                if settle:
                    emulator.wait_for_longpoll(self.args.step_timeout)
                    emulator.reset_stats()
                t0 = time.monotonic()
                before = self.cpu_now(emulator, mount)
                sample = workload["run"](ctx, mountpoint)
                sample["cpu_seconds"] = self.cpu_since(before, emulator, mount)
                stats = emulator.stats()
                sample["api_calls"] = api_calls(stats)
                sample["bytes_downloaded"] = stats.get("download_bytes", 0)
                sample["connections"] = stats.get("connections", 0)
                sample["peak_rss_bytes"] = mount.peak_rss()
                cold.append(sample)
                warm.append(self.measured(lambda: workload["run"](ctx, mountpoint), mount, emulator))
                log(f"  {name} #{repeat + 1}: baseline {self.describe(baseline[-1], metric)}, "
                    f"cold {self.describe(cold[-1], metric)}, warm {self.describe(warm[-1], metric)}"
                    f" ({time.monotonic() - t0:.1f} s)")
            finally:
                mount.close()
        result = self.result(workload, baseline, cold, warm, settle)
        result["scheme"] = emulator.url.split(":", 1)[0]     # https for the TLS rows, as measured
        if "block" in workload:
            result["remote_reference"] = remote_reference(ctx, workload["block"], self.args.fio_runtime)
        return result

    def result(self, workload, baseline, cold, warm, settle):
        """A workload's entry in results.json: medians, ratios, and whether the outputs agree."""
        name, metric = workload["name"], workload["metric"]
        checks = {"baseline": baseline[0].get("check"),
                  "cold": [s.get("check") for s in cold], "warm": [s.get("check") for s in warm]}
        correct = all(c == checks["baseline"] for c in checks["cold"] + checks["warm"])
        for group in (cold, warm, baseline):
            for s in group:
                s.pop("check", None)
        result = {
            "name": name, "kind": workload["kind"], "metric": metric,
            "what": workload["what"], "baseline_what": workload["baseline_what"],
            "latency_ms": self.latency_for(workload),
            "tls": bool(workload.get("tls")),
            "bandwidth": workload.get("bandwidth", self.args.bandwidth),
            "settled": settle,
            "output_matches_baseline": correct,
            "baseline": summarize(baseline, metric),
            "cold": summarize(cold, metric),
            "warm": summarize(warm, metric),
        }
        for group, samples in (("baseline", baseline), ("cold", cold), ("warm", warm)):
            per_gib = cpu_per_gib(samples)
            if per_gib and result[group]:
                result[group]["cpu_s_per_gib"] = per_gib
        result["cold"]["ratio"] = ratio(result["cold"], result["baseline"], metric)
        result["warm"]["ratio"] = ratio(result["warm"], result["baseline"], metric)
        if not correct:
            log(f"  WARNING: {name}: the mount's output differs from the baseline's ({checks})")
        return result

    def run_list_million(self, workload):
        """list-million: its own emulator serves the million-entry tree; each repeat runs find over
        that directory (baseline), times a fresh mount's cold full listing, then runs find over
        the listed mount (warm). The emulator goes when the row is done: it holds the tree in
        memory, and the other rows' emulator stays as it was."""
        name = workload["name"]
        root = generate_million(self.args.fixtures.resolve() / "million", MILLION)
        # Indexing and hashing a million files took 141 s on the 2-core development machine
        # (the README says where it goes): give it room on a busier one.
        emulator = Emulator(self.bins / "dbx-emulator", root, self.latency_for(workload["kind"]), self.args.bandwidth,
                            self.logdir, name=f"emulator-{name}", start_timeout=max(600, self.args.step_timeout))
        log(f"  its emulator indexed {MILLION['entries']:,} entries in {emulator.start_seconds:.1f} s "
            f"(peak RSS {fmt_bytes(emulator.rss_at_start)})")
        ctx = Context(self.args, self.spec, root, emulator, self.args.step_timeout)
        cold, warm, baseline = [], [], []
        try:
            run_tool(["find", str(root)], self.args.step_timeout)    # the baseline's dentries, cached for all
            for repeat in range(self.args.repeats):
                baseline.append(self.measured(lambda: w_find_all(ctx, root), emulator=emulator))
                sample, mount = self.cold_listing(emulator, name)
                try:
                    warm.append(self.measured(lambda: w_find_all(ctx, mount.mountpoint), mount, emulator))
                finally:
                    mount.close()
                sample["check"] = warm[-1]["check"]     # what the listing brought, as find sees it
                cold.append(sample)
                log(f"  {name} #{repeat + 1}: baseline {self.describe(baseline[-1], 'time')}, cold listing "
                    f"{self.describe(sample, 'time')} (peak RSS {fmt_bytes(sample['peak_rss_bytes'])}), then find "
                    f"{self.describe(warm[-1], 'time')}: {warm[-1]['check']:,} lines of {baseline[-1]['check']:,}")
            served = {"start_seconds": round(emulator.start_seconds, 1), "rss_at_start_bytes": emulator.rss_at_start,
                      "peak_rss_bytes": emulator.peak_rss()}
        finally:
            emulator.stop()
        result = self.result(workload, baseline, cold, warm, settle=False)
        folders, files, _, _ = million_shape(MILLION)
        result["fixture"] = dict(MILLION, folders=folders, files=files)
        result["emulator"] = served
        return result

    def cold_listing(self, emulator, name):
        """Starts a fresh mount (empty cache) and waits for its first full listing. Returns the
        sample (mount start to the feed's first longpoll, the calls meanwhile, VmHWM) and the
        mount, still mounted, or raises with the mount gone."""
        cache_home = self.workdir / f"cache-{self.mount_count + 1}"
        self.mount_count += 1
        mountpoint = self.workdir / f"mnt-{self.mount_count}"
        emulator.reset_stats()
        started = time.monotonic()
        mount = Mount(self.bins / "dbx-mount", emulator, mountpoint, self.args.mount_arg,
                      self.logdir / f"mount-{name}.log", cache_home)
        try:
            emulator.wait_for_longpoll(self.args.step_timeout)
            seconds = time.monotonic() - started
            stats = emulator.stats()
            sample = {"seconds": seconds, "api_calls": api_calls(stats), "bytes_downloaded": stats.get("download_bytes", 0),
                      "connections": stats.get("connections", 0), "peak_rss_bytes": mount.peak_rss()}
        except BaseException:
            mount.close()
            raise
        return sample, mount

    def prime(self, cache_home, name):
        """An earlier mount with the same cache directory: it lists everything (the change feed
        reaches longpoll only once the whole tree is in), runs find, and is unmounted."""
        self.mount_count += 1
        mountpoint = self.workdir / f"mnt-{self.mount_count}"
        self.emulator.reset_stats()
        mount = Mount(self.bins / "dbx-mount", self.emulator, mountpoint, self.args.mount_arg,
                      self.logdir / f"mount-{name}.log", cache_home)
        try:
            w_find_deep(self.ctx, mountpoint)
            self.emulator.wait_for_longpoll(self.args.step_timeout)
            time.sleep(1)
        finally:
            mount.close()

    @staticmethod
    def describe(sample, metric):
        if metric == "throughput":
            return f"{sample['bytes'] / sample['seconds'] / 1e6:.1f} MB/s"
        if metric == "iops":
            return f"{sample['iops']:.0f} IOPS"
        return f"{sample['seconds']:.3f} s"


# --------------------------------------------------------------------------------------------
# Reporting

def machine_info():
    info = {"hostname": platform.node(), "kernel": platform.release(), "arch": platform.machine(),
            "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["memory_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    info.setdefault("cpu_model", platform.processor() or "unknown")
    return info


def git_commit():
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "Sources"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip()
        return head + ("+local-changes" if dirty else "") if head else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def fmt_seconds(s):
    if s is None:
        return "–"
    if s < 0.001:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1000:.1f} ms"
    return f"{s:.2f} s"


def fmt_bytes(n):
    if n is None:
        return "–"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def fmt_figure(summary, metric):
    if not summary:
        return "–"
    if metric == "throughput":
        return f"{summary['median_mb_per_s']:.0f} MB/s ({fmt_seconds(summary['median_seconds'])})"
    if metric == "iops":
        return f"{summary['median_iops']:,.0f} IOPS ({summary['median_mb_per_s']:.1f} MB/s)"
    return fmt_seconds(summary["median_seconds"])


def fmt_ratio(r):
    if r is None:
        return "–"
    if r < 0.1:
        return f"{r:.2g}×"
    return f"{r:.2f}×" if r < 10 else f"{r:,.0f}×"


def fmt_cpu(summary, baseline):
    """CPU-seconds per GiB read: the mount's, the reader's and the emulator's, then the
    baseline's reader (curl) and emulator; blank for rows that read no bytes."""
    cpu, base = summary.get("cpu_s_per_gib"), (baseline or {}).get("cpu_s_per_gib")
    if not cpu:
        return ""
    text = f"{cpu.get('mount', 0):.2f}, {cpu.get('reader', 0):.2f}, {cpu.get('emulator', 0):.2f}"
    if base:
        text += f" ({base.get('reader', 0):.2f}, {base.get('emulator', 0):.2f})"
    return text


def fmt_calls(summary):
    calls = {route: n for route, n in (summary.get("api_calls") or {}).items() if n}
    if not calls:
        return "0"
    total = summary.get("api_calls_total", 0)
    parts = ", ".join(f"{route.replace('files/', '')} {n:g}" for route, n in sorted(calls.items(), key=lambda kv: -kv[1]))
    return f"{total:g} ({parts})"


def fixtures_text(results):
    """The fixtures this run's rows served: the shared set, the million-entry account, or both."""
    c = results["config"]
    f = c["fixtures"]
    parts = []
    if any(w["name"] in WORKLOAD_NAMES for w in results["workloads"]):
        parts.append(f"wide folder of {f['wide_files']:,} files; deep tree of {f['deep_entries']:,} entries "
                     f"({f['deep_folders']:,} folders); large files of {fmt_bytes(f['large_size'])}, "
                     f"huge file of {fmt_bytes(f['huge_size'])}")
    million = c.get("million_fixture")
    if million:
        parts.append(f"for list-million, an account of {million['entries']:,} entries "
                     f"({million['folders']:,} folders: {million['top_folders']} x {million['subfolders']}; "
                     f"{million['files']:,} empty files)")
    return "; ".join(parts)


def results_markdown(results):
    m, c = results["machine"], results["config"]
    lines = [
        f"Machine: {m.get('cpu_model')}, {m.get('cpus')} CPUs, {fmt_bytes(m.get('memory_bytes'))} RAM, "
        f"Linux {m.get('kernel')}{', ' + m['os'] if m.get('os') else ''}. Date: {results['date']}. "
        f"dbx-mount {results.get('git_commit') or ''}.",
        "",
        f"Emulator latency: {c['metadata_latency_ms']} ms per request for metadata workloads, "
        f"{c['read_latency_ms']} ms for read workloads; bandwidth cap: "
        f"{str(c['bandwidth']) + ' B/s' if c['bandwidth'] else 'none'}. Median of {c['repeats']} "
        f"repeat(s){'; --quick fixtures' if c['quick'] else ''}. Fixtures: {fixtures_text(results)}.",
        "",
        "Ratio = time through dbx-mount ÷ time of the baseline (1.0 = as fast, 2.0 = twice as slow); "
        "for reads it is curl's throughput ÷ dbx-mount's, for fio the baseline's IOPS ÷ dbx-mount's. "
        "Cold = first run on a fresh mount (its API calls include mounting); warm = the same command again on that mount. "
        "Read workloads other than ttfb-fresh-mount start once the fresh mount has listed the account "
        "(its change feed reached longpoll), so they time the read engine, and their API calls exclude that listing.",
        "",
        "| workload | run | median | baseline | ratio | API calls | bytes downloaded | peak RSS | CPU s/GiB: mount, reader, emulator (baseline: reader, emulator) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w in results["workloads"]:
        if "error" in w:
            lines.append(f"| {w['name']} | – | failed: {w['error']} | | | | | | |")
            continue
        base = fmt_figure(w["baseline"], w["metric"])
        for run in ("cold", "warm"):
            s = w[run]
            downloaded = fmt_bytes(s.get("bytes_downloaded"))
            if w["kind"] == READ and s.get("read_amplification") is not None:
                downloaded += f" ({s['read_amplification']:.2f}× returned)"
            flag = "" if w["output_matches_baseline"] else " **output differs!**"
            lines.append(f"| {w['name']} | {run} | {fmt_figure(s, w['metric'])}{flag} | {base} | "
                         f"{fmt_ratio(s.get('ratio'))} | {fmt_calls(s)} | {downloaded} | "
                         f"{fmt_bytes(s.get('peak_rss_bytes'))} | {fmt_cpu(s, w['baseline'])} |")
    lines += ["", "Workloads:", ""]
    for w in results["workloads"]:
        if "error" not in w:
            link = f", {w['bandwidth'] / 1e9:g} GB/s cap" if w.get("bandwidth") else ""
            link += ", TLS" if w.get("tls") else ""
            lines.append(f"- `{w['name']}` ({w['latency_ms']} ms latency{link}): {w['what']}; baseline: {w['baseline_what']}.")
            if w.get("emulator"):
                e = w["emulator"]
                lines.append(f"  Its own dbx-emulator indexed and hashed the {w['fixture']['entries']:,} entries in "
                             f"{e['start_seconds']:.1f} s before listening ({fmt_bytes(e['rss_at_start_bytes'])} "
                             f"resident then, {fmt_bytes(e['peak_rss_bytes'])} at its peak).")
            if w.get("remote_reference"):
                ref = w["remote_reference"]
                lines.append(f"  For scale, not the baseline: {ref['what']} reach {ref['iops']:,.0f} IOPS "
                             f"({ref['mb_per_s']:.1f} MB/s) over the same emulator.")
    return "\n".join(lines) + "\n"


def ratios_svg(results):
    """A diverging bar chart on a log scale: bars grow right of the 1.0 line when dbx-mount is slower."""
    import math
    bars = []
    for w in results["workloads"]:
        if "error" in w:
            continue
        for run in ("cold", "warm"):
            r = w[run].get("ratio")
            if r and r > 0:
                bars.append((f"{w['name']} ({run})", run, r))
    left, label_w, right_pad, top, row, bar_h = 20, 190, 90, 92, 26, 16
    plot_w = 560
    width = left + label_w + plot_w + right_pad
    height = top + row * max(len(bars), 1) + 60
    lo = min([r for _, _, r in bars] + [0.5])
    hi = max([r for _, _, r in bars] + [2.0])
    lo_exp, hi_exp = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if hi_exp == lo_exp:
        hi_exp += 1

    def x(v):
        return left + label_w + (math.log10(v) - lo_exp) / (hi_exp - lo_exp) * plot_w

    m = results["machine"]
    c = results["config"]
    title = "dbx-mount ÷ baseline, time ratio (log scale; 1.0 = as fast as the baseline, lower is better)"
    subtitle = f"{m.get('cpu_model', '')}, {m.get('cpus')} CPUs, Linux {m.get('kernel')} · {results['date']}"
    subtitle2 = (f"emulator latency {c['metadata_latency_ms']} ms (metadata) / {c['read_latency_ms']} ms (reads)"
                 f" · median of {c['repeats']} · dbx-mount {results.get('git_commit') or '?'}"
                 f"{' · --quick' if c['quick'] else ''}")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
           f'<text x="{left}" y="42" fill="#555">{escape(subtitle)}</text>',
           f'<text x="{left}" y="58" fill="#555">{escape(subtitle2)}</text>']
    axis_y = top + row * len(bars) + 6
    for e in range(lo_exp, hi_exp + 1):
        for mult in (1, 2, 5):
            v = mult * 10 ** e
            if v < 10 ** lo_exp or v > 10 ** hi_exp:
                continue
            xv = x(v)
            stroke = "#bbb" if mult == 1 else "#eee"
            out.append(f'<line x1="{xv:.1f}" y1="{top - 8}" x2="{xv:.1f}" y2="{axis_y}" stroke="{stroke}"/>')
            if mult == 1:
                label = f"{v:g}" if v < 1000 else f"{v:,.0f}"
                out.append(f'<text x="{xv:.1f}" y="{axis_y + 16}" text-anchor="middle" fill="#333">{label}×</text>')
    colors = {"cold": "#3b6fb6", "warm": "#e39b2d"}
    for i, (label, run, r) in enumerate(bars):
        y = top + i * row
        x1, xr = x(1.0), x(r)
        bx, bw = (x1, xr - x1) if r >= 1 else (xr, x1 - xr)
        out.append(f'<text x="{left + label_w - 8}" y="{y + bar_h - 3}" text-anchor="end">{escape(label)}</text>')
        out.append(f'<rect x="{bx:.1f}" y="{y}" width="{max(bw, 1):.1f}" height="{bar_h}" fill="{colors[run]}"/>')
        tx = max(xr, x1) + 6
        out.append(f'<text x="{tx:.1f}" y="{y + bar_h - 3}" fill="#222">{escape(fmt_ratio(r))}</text>')
    x1 = x(1.0)
    out.append(f'<line x1="{x1:.1f}" y1="{top - 12}" x2="{x1:.1f}" y2="{axis_y}" stroke="#c00" stroke-width="2"/>')
    out.append(f'<text x="{x1:.1f}" y="{top - 16}" text-anchor="middle" fill="#c00">1.0 = baseline</text>')
    ly = height - 16
    out.append(f'<rect x="{left}" y="{ly - 10}" width="12" height="12" fill="{colors["cold"]}"/>')
    out.append(f'<text x="{left + 18}" y="{ly}">cold (fresh mount)</text>')
    out.append(f'<rect x="{left + 150}" y="{ly - 10}" width="12" height="12" fill="{colors["warm"]}"/>')
    out.append(f'<text x="{left + 168}" y="{ly}">warm (same mount, again)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_outputs(out_dir, results):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "results.md").write_text(results_markdown(results))
    (out_dir / "ratios.svg").write_text(ratios_svg(results))


# --------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="Benchmark dbx-mount against same-run baselines (see docs/benchmarks.md).")
    p.add_argument("--quick", action="store_true", help="small fixtures, 1 repeat, short fio: under 3 minutes")
    p.add_argument("--latency-ms", type=int, help="emulator latency per request for every workload")
    p.add_argument("--metadata-latency-ms", type=int, help="latency for metadata workloads (default 50)")
    p.add_argument("--read-latency-ms", type=int, help="latency for read workloads (default 20)")
    p.add_argument("--bandwidth", type=int, help="emulator bandwidth cap, bytes per second (default none)")
    p.add_argument("--repeats", type=int, help="repeats per workload (default 3, --quick 1)")
    p.add_argument("--out", type=Path, default=REPO / "bench-results", help="output directory (default bench-results/)")
    p.add_argument("--only", nargs="+", choices=WORKLOAD_NAMES + OPT_IN_NAMES, metavar="WORKLOAD",
                   help="run only these workloads: " + ", ".join(WORKLOAD_NAMES) + "; and these, which "
                        "run only when named: " + ", ".join(OPT_IN_NAMES))
    p.add_argument("--fio-runtime", type=int, help="seconds per fio run (default 15, --quick 3)")
    p.add_argument("--step-timeout", type=float, help="seconds before one command counts as hung (default 900, --quick 120)")
    p.add_argument("--fixtures", type=Path, default=REPO / "bench" / ".fixtures",
                   help="fixture cache directory (default bench/.fixtures)")
    p.add_argument("--mount-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for dbx-mount, e.g. --mount-arg=--ttl=600 (repeatable)")
    p.add_argument("--bin-dir", type=Path, help="use prebuilt dbx-mount and dbx-emulator from here; skip the build")
    p.add_argument("--no-build", action="store_true", help="skip swift build; use the existing release binaries")
    args = p.parse_args(argv)
    if args.latency_ms is not None:
        args.metadata_latency_ms = args.metadata_latency_ms if args.metadata_latency_ms is not None else args.latency_ms
        args.read_latency_ms = args.read_latency_ms if args.read_latency_ms is not None else args.latency_ms
    args.metadata_latency_ms = 50 if args.metadata_latency_ms is None else args.metadata_latency_ms
    args.read_latency_ms = 20 if args.read_latency_ms is None else args.read_latency_ms
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.fio_runtime = args.fio_runtime or (3 if args.quick else 15)
    args.step_timeout = args.step_timeout or (120 if args.quick else 900)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.only:
        selected = [w for w in WORKLOADS + OPT_IN_WORKLOADS if w["name"] in args.only]
    else:
        selected = list(WORKLOADS)
    # The shared fixtures and emulator serve every row but those with a fixture of their own.
    shared = [w for w in selected if not w.get("fixture")]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    atexit.register(cleanup)
    started = time.monotonic()
    workdir = None
    try:
        check_environment(need_fio=any(w["name"].startswith("fio") for w in selected))
        if args.bin_dir:
            bins = args.bin_dir
        else:
            bins = build(skip=args.no_build)
        workdir = Path(tempfile.mkdtemp(prefix="dbx-bench-"))
        # A private copy of the binaries: a rebuild by someone else mid-run cannot change them.
        (workdir / "bin").mkdir()
        for binary in ("dbx-mount", "dbx-emulator"):
            if not (bins / binary).exists():
                raise BenchError(f"{bins / binary} is missing (build with swift build -c release)")
            shutil.copy2(bins / binary, workdir / "bin" / binary)
        bins = workdir / "bin"
        version = subprocess.run([str(bins / "dbx-mount"), "--version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True).stdout.strip()
        spec_name = "quick" if args.quick else "full"
        spec = SPECS[spec_name]
        root = generate_fixtures(args.fixtures.resolve() / spec_name, spec) if shared else None
        args.out.mkdir(parents=True, exist_ok=True)
        logdir = args.out / "logs"
        if logdir.exists():
            shutil.rmtree(logdir)
        logdir.mkdir()
        emulator = None
        if shared:
            emulator = Emulator(bins / "dbx-emulator", root, args.metadata_latency_ms, args.bandwidth, logdir)
            log(f"emulator at {emulator.url} serving {root}; warming the server side")
            emulator.warm_up(root, fixture_layout(spec))
        a, b, c = spec["deep_fanout"]
        results = {
            "schema": 1,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine_info(),
            "git_commit": git_commit(),
            "dbx_mount_version": version,
            "config": {
                "quick": args.quick, "repeats": args.repeats,
                "metadata_latency_ms": args.metadata_latency_ms, "read_latency_ms": args.read_latency_ms,
                "bandwidth": args.bandwidth, "fio_runtime_s": args.fio_runtime, "mount_args": args.mount_arg,
                "fixtures": dict(spec, deep_folders=a * b * c + a * b + a, deep_entries=a * b * c * (spec["deep_files"] + 1) + a * b + a),
                "command": "python3 bench/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
            },
            "workloads": [],
        }
        if emulator:
            results["config"]["emulator_knobs"] = emulator._call("GET", "/__admin/knobs")
        if any(w.get("fixture") == "million" for w in selected):
            folders, files, _, _ = million_shape(MILLION)
            results["config"]["million_fixture"] = dict(MILLION, folders=folders, files=files)
        runner = Runner(args, bins, root, spec, emulator, workdir, logdir)
        failed = []
        for workload in selected:
            own = bool(workload.get("fixture"))     # its own emulator, started and stopped by the row
            if not own and not runner.emulator.alive():
                log(f"dbx-emulator exited with status {runner.emulator.process.returncode}; starting a new one")
                results.setdefault("emulator_restarts", []).append(
                    {"before": workload["name"], "exit_status": runner.emulator.process.returncode})
                runner.emulator.stop()
                runner.emulator = runner.ctx.emulator = Emulator(bins / "dbx-emulator", root, args.metadata_latency_ms,
                                                                 args.bandwidth, logdir)
                runner.emulator.warm_up(root, fixture_layout(spec))
            log(f"{workload['name']}: {workload['what']} (latency {runner.latency_for(workload)} ms"
                f"{', TLS' if workload.get('tls') else ''})")
            try:
                results["workloads"].append(runner.run_workload(workload))
            except BenchError as error:
                if not own and not runner.emulator.alive():
                    error = BenchError(f"{error} [dbx-emulator exited with status {runner.emulator.process.returncode} during this workload]")
                log(f"  {workload['name']} failed: {error}")
                failed.append(workload["name"])
                results["workloads"].append({"name": workload["name"], "kind": workload["kind"],
                                             "metric": workload["metric"], "error": str(error)})
            write_outputs(args.out, results)     # partial results survive a later failure
        runner.close()
        results["elapsed_s"] = round(time.monotonic() - started, 1)
        write_outputs(args.out, results)
        sys.stdout.write(results_markdown(results))
        log(f"wrote {args.out}/results.json, results.md, ratios.svg in {results['elapsed_s']} s")
        if failed:
            raise BenchError(f"workloads failed: {', '.join(failed)} (see {args.out}/results.json and {logdir})")
        return 0
    except BenchError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    except SystemExit as stop:
        print(f"bench: stopped by signal {stop.code - 128 if isinstance(stop.code, int) and stop.code > 128 else ''}",
              file=sys.stderr)
        return stop.code if isinstance(stop.code, int) else 1
    finally:
        cleanup()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
