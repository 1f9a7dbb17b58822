"""issue 17: `dbx-mount status` through each mount's control socket. Progress of a first listing
rises and ends done; --json parses; a path that is not a dbx-mount fails in one line; the socket
is the mounting user's alone; a socket left by a killed mount is replaced."""
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import DBX_MOUNT, Emulator, Mount, is_mounted


@pytest.fixture
def runtime_dir(tmp_path, monkeypatch):
    """A private XDG_RUNTIME_DIR for the mounts this test starts and the status commands it runs."""
    folder = tmp_path / "runtime"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def large_tree(tmp_path_factory):
    """12,000 files in 120 folders: a first listing of many pages at the latency below."""
    root = tmp_path_factory.mktemp("status-tree")
    for f in range(12):
        for g in range(10):
            folder = root / f"top-{f:02d}" / f"sub-{g:02d}"
            folder.mkdir(parents=True)
            for i in range(100):
                (folder / f"file-{i:03d}.txt").write_bytes(b"x" * i)
    return root


def status(*args, check=True):
    result = subprocess.run([str(DBX_MOUNT), "status", *args], capture_output=True, text=True, timeout=30)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def served_count(root: Path) -> int:
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(root))


def test_status_shows_the_first_listing_rising_then_done(large_tree, runtime_dir, tmp_path):
    emulator = Emulator(large_tree, "--latency-ms", "30", "--page-size", "100")
    try:
        m = Mount(emulator, tmp_path / "mnt", "--listing-concurrency", "2")
        try:
            seen = []
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                report = json.loads(status("--json", str(m.mountpoint)).stdout)
                listing = report.get("first_listing")
                if listing:
                    seen.append((listing["done"], listing["entries"], listing["fraction"]))
                    if listing["done"]:
                        break
                time.sleep(0.1)
            running = [s for s in seen if not s[0]]
            assert running, f"never saw the listing under way: {seen[:5]}"
            entries = [s[1] for s in running]
            assert entries == sorted(entries) and entries[-1] > entries[0], f"entries did not rise: {entries}"
            assert all(0 <= s[2] < 1 for s in running)
            done = seen[-1]
            assert done[0] and done[2] == 1, seen[-3:]
            assert done[1] >= served_count(large_tree), (done, served_count(large_tree))
            assert report["change_feed"]["state"] in ("live", "starting")
            assert report["mountpoint"] == str(m.mountpoint.resolve())
            assert report["source"] == "/"
            assert report["cache"]["entries"] >= served_count(large_tree)
            assert report["dropbox"]["calls"] > 100

            text = status(str(m.mountpoint)).stdout
            assert "listing     done: " in text and "entries" in text, text
            assert "changes     live" in text or "changes     starting" in text, text
        finally:
            m.unmount()
    finally:
        emulator.stop()


def test_status_of_every_mount_and_of_a_path_that_is_no_mount(served, emulator, runtime_dir, tmp_path):
    first = Mount(emulator, tmp_path / "one", cache_home=tmp_path / "cache-one")
    second = Mount(emulator, tmp_path / "two", cache_home=tmp_path / "cache-two")
    try:
        reports = json.loads(status("--json").stdout)
        assert sorted(r["mountpoint"] for r in reports) == sorted(str(p.resolve()) for p in (first.mountpoint, second.mountpoint))
        # Not a terminal: --watch prints once and returns.
        assert status("--watch", str(first.mountpoint)).stdout.count("(pid ") == 1

        plain = tmp_path / "plain"
        plain.mkdir()
        result = status(str(plain), check=False)
        assert result.returncode == 1
        assert result.stdout == ""
        assert result.stderr.strip().splitlines() == [f"dbx-mount status: {plain.resolve()} is not a dbx-mount mount point"]
        missing = status(str(tmp_path / "missing"), check=False)
        assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    finally:
        first.unmount()
        second.unmount()
    assert [p for p in (runtime_dir / "dbx-mount").iterdir()] == [], "unmounting removes the sockets"
    none = status(check=False)
    assert none.returncode == 1 and "no dbx-mount is mounted" in none.stderr


def test_status_finds_a_mount_started_with_another_runtime_dir(served, emulator, runtime_dir, tmp_path, monkeypatch):
    """A mount started without XDG_RUNTIME_DIR (at boot, from fstab) is found from a login that has one."""
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    m = Mount(emulator, tmp_path / "mnt")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    try:
        report = json.loads(status("--json", str(m.mountpoint)).stdout)
        assert report["mountpoint"] == str(m.mountpoint.resolve())
        assert str(m.mountpoint.resolve()) in [r["mountpoint"] for r in json.loads(status("--json").stdout)]
        # A named path that is no mount leaves stdout empty for a JSON reader.
        plain = tmp_path / "plain"
        plain.mkdir()
        result = status("--json", str(plain), check=False)
        assert result.returncode == 1 and result.stdout == "", result.stdout
    finally:
        m.unmount()
    none = status("--json", check=False)
    assert none.returncode == 1 and json.loads(none.stdout) == []


def run_as_nobody(code: str) -> subprocess.CompletedProcess:
    def drop():
        os.setgid(65534)
        os.setuid(65534)
    return subprocess.run(["python3", "-c", code], capture_output=True, text=True, timeout=30, preexec_fn=drop)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_cannot_use_the_control_socket(emulator, tmp_path, monkeypatch):
    # Outside pytest's own 0700 folders, so that opening this one up below really opens it.
    runtime_dir = Path(tempfile.mkdtemp(prefix="dbx-mount-test-runtime-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    m = Mount(emulator, tmp_path / "mnt")
    try:
        [sock] = list((runtime_dir / "dbx-mount").iterdir())
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE((runtime_dir / "dbx-mount").stat().st_mode) == 0o700
        probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.settimeout(5)\n"
                 "try:\n s.connect(sys.argv[1] if len(sys.argv)>1 else %r)\n"
                 "except PermissionError: print('refused'); sys.exit(0)\n"
                 "try:\n s.sendall(b'{\"command\":\"status\"}\\n'); data = s.recv(100000)\n"
                 "except (BrokenPipeError, ConnectionResetError): data = b''\n"
                 "print('answer:', data)\n") % str(sock)
        assert run_as_nobody(probe).stdout.strip() == "refused"

        # Even with the folder and socket opened up, the mount answers no one but its user.
        os.chmod(runtime_dir, 0o755)
        os.chmod(runtime_dir / "dbx-mount", 0o755)
        os.chmod(sock, 0o666)
        result = run_as_nobody(probe)
        assert result.stdout.strip() == "answer: b''", result
    finally:
        m.unmount()
        shutil.rmtree(runtime_dir, ignore_errors=True)


def test_a_socket_left_by_a_killed_mount_is_replaced(emulator, runtime_dir, tmp_path):
    m = Mount(emulator, tmp_path / "mnt")
    m.process.send_signal(signal.SIGKILL)
    m.process.wait()
    subprocess.run(["fusermount3", "-u", str(m.mountpoint)], capture_output=True)
    [left] = list((runtime_dir / "dbx-mount").iterdir())
    assert not is_mounted(m.mountpoint)

    again = Mount(emulator, tmp_path / "mnt")
    try:
        report = json.loads(status("--json", str(again.mountpoint)).stdout)
        assert report["pid"] == again.process.pid
        assert list((runtime_dir / "dbx-mount").iterdir()) == [left]
    finally:
        again.unmount()
