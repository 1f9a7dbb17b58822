"""Real FUSE mounts of dbx-mount against the dbx-emulator binary, driven by real tools.

Each test compares what the mount shows with the directory the emulator serves, which is the
ground truth. Every mount is unmounted with `fusermount3 -u`, and only processes these fixtures
started are ever signalled.
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DBX_BUILD_DIR", REPO / ".build" / "debug"))
DBX_MOUNT = BUILD / "dbx-mount"
DBX_EMULATOR = BUILD / "dbx-emulator"
TOKEN = "emulator-token"


def pytest_collection_modifyitems(config, items):
    problem = None
    if not os.path.exists("/dev/fuse"):
        problem = "/dev/fuse is missing"
    elif not shutil.which("fusermount3"):
        problem = "fusermount3 is not installed (apt-get install fuse3)"
    elif not DBX_MOUNT.exists() or not DBX_EMULATOR.exists():
        problem = f"build dbx-mount and dbx-emulator first (looked in {BUILD})"
    if problem is None:
        return
    if os.environ.get("CI"):
        raise pytest.UsageError(f"mount tests cannot run under CI: {problem}")
    for item in items:
        item.add_marker(pytest.mark.skip(reason=problem))


def run(*args, cwd=None) -> str:
    """A tool's standard output; a failing tool fails the test."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=True).stdout


def mount_status(mountpoint) -> dict:
    """What `dbx-mount status --json` says of a mount."""
    result = subprocess.run([str(DBX_MOUNT), "status", "--json", str(mountpoint)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# How long a test waits for the change feed to bring a change: long enough on a loaded machine.
# How soon it comes is the benchmark runner's to measure (bench/run.py, its change-seen row).
FEED_WAIT = 20


def wait_for(condition, seconds: float, interval: float = 0.05) -> bool:
    """Whether `condition` holds within `seconds`. A path it looks at that is not there yet (the
    change feed has not brought it) counts as the condition not holding, not as a failure."""
    def holds() -> bool:
        try:
            return bool(condition())
        except FileNotFoundError:
            return False
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if holds():
            return True
        time.sleep(interval)
    return holds()


def wait_until_listed(mountpoint, timeout: float = 60) -> None:
    """Until the mount has listed its whole folder and follows the change feed."""
    deadline = time.monotonic() + timeout
    while mount_status(mountpoint)["change_feed"]["state"] != "live":
        assert time.monotonic() < deadline, "the first listing did not finish"
        time.sleep(0.1)


def assert_same_bytes(expected: Path, shown: Path, timeout: float | None = None) -> None:
    """`diff -r` finds no difference and prints no error (an unreadable file is an error)."""
    result = subprocess.run(["diff", "-r", str(expected), str(shown)], capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0 and result.stderr == "", (result.stdout[-2000:], result.stderr[-2000:])


def file_listing(root: Path):
    """Every path with its type, and size and mtime for files (a folder's time is what the tree below
    it gives it: `test_everyday_tools.py`)."""
    out = run("find", ".", "-printf", "%y %P\\0", cwd=root)
    entries = {}
    for record in filter(None, out.split("\0")):
        kind, path = record.split(" ", 1)
        if kind == "f":
            st = os.stat(root / path)
            entries[path] = ("f", st.st_size, int(st.st_mtime))
        else:
            entries[path] = (kind,)
    return entries


def write_sample_tree(root: Path, big_file_size: int = 256 << 20) -> None:
    """The tree issue 3 asks for: deep nesting, empties, 1 B to 256 MiB, awkward names."""
    rng = random.Random(1234)
    deep = root.joinpath("d1", "d2", "d3", "d4", "d5", "d6")
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_bytes(b"six folders down\n")
    (root / "d1" / "d2" / "middle.txt").write_bytes(b"two down\n")
    (root / "empty-folder").mkdir()
    (root / "empty.txt").write_bytes(b"")
    sizes = root / "sizes"
    sizes.mkdir()
    for size in [1, 1000, 4096, (128 << 10) + 1, 1 << 20, (4 << 20) + 1, 10 << 20]:
        (sizes / f"file-{size}.bin").write_bytes(rng.randbytes(size))
    write_numbered_blocks(sizes / "big.bin", big_file_size >> 20, rng.randbytes(1 << 20))
    names = root / "names"
    names.mkdir()
    for name in [
        "with space.txt",
        "  two leading spaces.txt",
        "ünïcödé 文件 ✓.txt",
        "quote's \"double\".txt",
        "-leading-dash.txt",
        "L" * 251 + ".txt",              # 255 bytes
        "é" * 127 + "x",                 # 255 bytes of UTF-8
        "UPPER lower.TXT",
    ]:
        (names / name).write_bytes(name.encode() + b"\n")
    (names / ("folder " + "ü" * 20)).mkdir()
    (names / ("folder " + "ü" * 20) / "inside.txt").write_bytes(b"inside\n")
    sub = root / "Photos"
    sub.mkdir()
    (sub / "cat.jpg").write_bytes(rng.randbytes(5000))
    (sub / "Album").mkdir()
    (sub / "Album" / "dog.jpg").write_bytes(rng.randbytes(7000))
    # Older than the rest, and apart, so that folder times (the newest file below) differ.
    os.utime(sub / "cat.jpg", (1_650_000_000, 1_650_000_000))
    os.utime(sub / "Album" / "dog.jpg", (1_600_000_000, 1_600_000_000))
    old = root / "old.txt"
    old.write_bytes(b"old\n")
    os.utime(old, (1_500_000_000, 1_500_000_000))


def write_numbered_blocks(path: Path, count: int, block: bytes) -> None:
    """`count` blocks of `block`'s size, each starting with its own number, so that a misplaced
    range cannot match (and writing a large file costs no more random bytes than one block)."""
    with open(path, "wb") as f:
        for i in range(count):
            f.write(i.to_bytes(8, "little") + block[8:])


def write_wide_folder(folder: Path, count: int) -> None:
    folder.mkdir()
    for i in range(count):
        (folder / f"entry-{i:05d}.txt").write_bytes(b"%d\n" % i)


def stop_process(process: subprocess.Popen):
    """SIGTERM, then SIGKILL after 10 s: for the servers a test starts itself."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def required_tool(name: str, package: str) -> str:
    """The path of a program a test drives: under CI (`CI=true`) a missing one fails the test,
    since .ci/run installs it; elsewhere the test is skipped."""
    found = shutil.which(name)
    if not found:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs Debian's {package} package")
        pytest.skip(f"{name} is not installed (apt-get install {package})")
    return found


class Emulator:
    # The CA to check an HTTPS emulator's counters against (`ssl.create_default_context`).
    ssl_context = None

    def __init__(self, root: Path, *extra: str):
        self.root = root
        self.process = subprocess.Popen(
            [str(DBX_EMULATOR), "--root", str(root), "--port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline().strip()
        if "listening on " not in line:
            self.process.kill()
            raise RuntimeError(f"emulator did not start: {line!r}")
        self.url = line.split("listening on ", 1)[1]

    def stop(self):
        stop_process(self.process)

    def stats(self) -> dict:
        """The emulator's counters (`/__stats`): requests by route, `download_bytes`, ..."""
        with urllib.request.urlopen(self.url + "/__stats", timeout=10, context=self.ssl_context) as response:
            return json.loads(response.read())

    def reset_stats(self) -> None:
        request = urllib.request.Request(self.url + "/__stats/reset", data=b"", method="POST")
        urllib.request.urlopen(request, timeout=10, context=self.ssl_context).read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortEmulator(Emulator):
    """An emulator on a chosen port, so a restart comes back where the mount looks for it."""

    def __init__(self, root: Path, port: int):
        self.root = root
        self.process = subprocess.Popen([str(DBX_EMULATOR), "--root", str(root), "--port", str(port)],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline().strip()
        if "listening on " not in line:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"emulator did not start: {line!r}")
        self.url = line.split("listening on ", 1)[1]


def start_on(root: Path, port: int) -> PortEmulator:
    # The old listener's port may take a moment to be free again.
    deadline = time.monotonic() + 30
    while True:
        try:
            return PortEmulator(root, port)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def is_mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts)


def mount_entry(path: Path) -> list:
    target = os.path.realpath(path)
    with open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if fields[1] == target:
                return fields
    return []


class Mount:
    """dbx-mount in the foreground (-f), so the test owns the process it signals."""

    def __init__(self, emulator: Emulator, mountpoint: Path, *args: str, token: str = TOKEN, cache_home: Path = None,
                 cwd: Path = None, ignored_signals: tuple = ()):
        self.mountpoint = mountpoint
        mountpoint.mkdir(parents=True, exist_ok=True)
        # The persistent cache goes to the test's own folder, never the user's ~/.cache. Mounts
        # that run at the same time need their own: one cache serves one mount.
        env = dict(os.environ, DBX_ACCESS_TOKEN=token, DBX_API_URL=emulator.url,
                   DBX_CONTENT_URL=emulator.url, DBX_NOTIFY_URL=emulator.url,
                   XDG_CACHE_HOME=str(cache_home or mountpoint.parent / "cache"))
        # Its log goes to a file: a pipe nobody reads until the end would block the mount (and
        # with it the operation that logs) once 64 KiB of lines had filled it.
        self.log_path = mountpoint.parent / f"{mountpoint.name}.log"
        with open(self.log_path, "w") as log:
            # Started in `cwd`, the mount is named relative to it, as a user in that folder would.
            named = os.path.relpath(mountpoint, cwd) if cwd else str(mountpoint)
            # Signals ignored from the start, as a shell does for a job it puts in the background.
            ignore = (lambda: [signal.signal(s, signal.SIG_IGN) for s in ignored_signals]) if ignored_signals else None
            self.process = subprocess.Popen([str(DBX_MOUNT), "-f", *args, named], env=env,
                                            stdout=log, stderr=log, cwd=cwd, preexec_fn=ignore)
        deadline = time.monotonic() + 30
        while not is_mounted(mountpoint):
            if self.process.poll() is not None:
                raise RuntimeError(f"dbx-mount exited {self.process.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError("dbx-mount did not mount within 30 s")
            time.sleep(0.05)

    def unmount(self):
        stop_mount(self.mountpoint, self.process)

    def log(self) -> str:
        """What the mount has written to stdout and stderr so far."""
        return self.log_path.read_text(errors="replace")


def stop_mount(mountpoint: Path, process: subprocess.Popen) -> None:
    """Unmounts a dbx-mount this test started and waits for its process; a hung one is killed
    and its mount detached lazily, so no test leaves a mount behind."""
    if is_mounted(mountpoint):
        subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, check=False)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True, check=False)


@pytest.fixture
def silent_server_url():
    """A URL whose server takes connections and never answers: a change feed pointed at it waits
    and reports nothing, a download waits for ever. (A closed port would not do: refused
    connections make the mount count Dropbox as out of reach, and it then answers listings from
    its cache without asking.)"""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    write_sample_tree(root)
    write_wide_folder(root / "wide", 10_000)
    return root


@pytest.fixture(scope="session")
def emulator(served):
    emulator = Emulator(served)
    yield emulator
    emulator.stop()


@pytest.fixture
def mount(emulator, tmp_path):
    mounts = []

    def make(*args, source=None, token=TOKEN):
        extra = [source] if source is not None else []
        m = Mount(emulator, tmp_path / f"mnt{len(mounts)}", *args, *extra, token=token,
                  cache_home=tmp_path / f"cache{len(mounts)}")
        mounts.append(m)
        return m.mountpoint

    yield make
    for m in mounts:
        m.unmount()


@pytest.fixture(scope="module")
def shared_mount(emulator, tmp_path_factory):
    """One mount of the whole served tree, shared by the read-only checks of a module."""
    m = Mount(emulator, tmp_path_factory.mktemp("shared") / "mnt")
    yield m.mountpoint
    m.unmount()
