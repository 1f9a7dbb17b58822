"""issue 18, first half: mounting without Dropbox. With a saved tree, a mount whose first call
cannot reach Dropbox mounts offline: listings from the saved tree, reads from the block cache,
uncached reads fail with EIO at once, `status` says offline; once Dropbox answers again the
mount catches up by itself. Without a saved tree it fails in one line."""
import errno
import os
import random
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DBX_MOUNT, TOKEN, Emulator, Mount, free_port, is_mounted, mount_status, start_on, wait_until_listed

MiB = 1 << 20


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "served"
    (root / "Docs" / "Deep").mkdir(parents=True)
    rng = random.Random(18)
    (root / "Docs" / "read.bin").write_bytes(rng.randbytes(3 * MiB + 11))
    (root / "Docs" / "unread.bin").write_bytes(rng.randbytes(2 * MiB))
    (root / "Docs" / "note.txt").write_bytes(b"version 1\n")
    (root / "Docs" / "Deep" / "leaf.txt").write_bytes(b"leaf\n")
    return root


def listing(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_mount_without_dropbox_serves_the_saved_tree_and_catches_up(tree, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    port = free_port()
    blocks = tmp_path / "blocks"
    args = ("--block-cache-dir", str(blocks), "--ttl", "1")
    emulator = start_on(tree, port)
    try:
        first = Mount(emulator, tmp_path / "mnt", *args)
        try:
            assert listing(first.mountpoint) == listing(tree)
            assert (first.mountpoint / "Docs" / "read.bin").read_bytes() == (tree / "Docs" / "read.bin").read_bytes()
            assert (first.mountpoint / "Docs" / "note.txt").read_bytes() == b"version 1\n"
        finally:
            first.unmount()     # the tree is saved at unmount
    finally:
        emulator.stop()

    started = time.monotonic()
    offline = Mount(emulator, tmp_path / "mnt", *args)
    emulator = None
    try:
        mounted_in = time.monotonic() - started
        assert mounted_in < 20, f"mounting offline took {mounted_in:.1f} s"
        mnt = offline.mountpoint
        assert listing(mnt) == listing(tree), "the saved tree, folders never opened included"
        assert (mnt / "Docs" / "read.bin").read_bytes() == (tree / "Docs" / "read.bin").read_bytes()
        assert (mnt / "Docs" / "note.txt").read_bytes() == b"version 1\n"
        started = time.monotonic()
        with pytest.raises(OSError) as failure:
            (mnt / "Docs" / "unread.bin").read_bytes()
        assert failure.value.errno == errno.EIO
        assert time.monotonic() - started < 2, "an uncached read fails at once, not after the retries"
        report = mount_status(mnt)
        assert report["change_feed"]["state"] == "offline", report["change_feed"]

        # Dropbox comes back, and a file changes there: the mount follows without a remount.
        (tree / "Docs" / "note.txt").write_bytes(b"version 2, longer\n")
        emulator = start_on(tree, port)
        deadline = time.monotonic() + 30
        while True:
            try:
                if (mnt / "Docs" / "note.txt").read_bytes() == b"version 2, longer\n":
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the new content never showed"
            time.sleep(0.5)
        assert mount_status(mnt)["change_feed"]["state"] in ("live", "catching up")
        assert (mnt / "Docs" / "unread.bin").read_bytes() == (tree / "Docs" / "unread.bin").read_bytes()
    finally:
        offline.unmount()
        if emulator:
            emulator.stop()


class DeadRoute:
    """A listener on `port` that never accepts, its queue filled by connections of its own, so the
    kernel drops every further SYN: connects time out as to a host behind a route that died."""

    def __init__(self, port: int):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.listener.bind(("127.0.0.1", port))
                break
            except OSError:
                assert time.monotonic() < deadline, f"port {port} never came free"
                time.sleep(0.5)
        self.listener.listen(1)
        self.fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            self.fillers.append(filler)
        time.sleep(0.2)

    def close(self):
        for s in [self.listener, *self.fillers]:
            s.close()


def test_a_running_mount_whose_route_dies_goes_offline_rather_than_waiting_out_every_read(tree, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    port = free_port()
    emulator = start_on(tree, port)
    mount = Mount(emulator, tmp_path / "mnt", "--block-cache-dir", str(tmp_path / "blocks"))
    dead = None
    try:
        mnt = mount.mountpoint
        wait_until_listed(mnt)
        assert (mnt / "Docs" / "read.bin").read_bytes() == (tree / "Docs" / "read.bin").read_bytes()
        emulator.stop()
        dead = DeadRoute(port)      # connections now time out instead of being refused
        deadline = time.monotonic() + 120
        while mount_status(mnt)["change_feed"]["state"] != "offline":
            assert time.monotonic() < deadline, mount_status(mnt)["change_feed"]
            time.sleep(1)
        started = time.monotonic()
        with pytest.raises(OSError) as failure:
            (mnt / "Docs" / "unread.bin").read_bytes()
        assert failure.value.errno == errno.EIO
        assert time.monotonic() - started < 2, "an uncached read fails at once, not after 4 connect timeouts"
        assert (mnt / "Docs" / "read.bin").read_bytes() == (tree / "Docs" / "read.bin").read_bytes()
    finally:
        mount.unmount()
        if dead:
            dead.close()
        else:
            emulator.stop()


def test_without_a_saved_tree_an_unreachable_dropbox_fails_in_one_line(tmp_path):
    (tmp_path / "mnt").mkdir()
    url = f"http://127.0.0.1:{free_port()}"     # nobody listens there
    env = dict(os.environ, DBX_ACCESS_TOKEN="some-token", DBX_API_URL=url, DBX_CONTENT_URL=url, DBX_NOTIFY_URL=url,
               XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_RUNTIME_DIR=str(tmp_path))
    result = subprocess.run([str(DBX_MOUNT), "-f", str(tmp_path / "mnt")], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "curl error 7" in lines[0], result.stderr
    assert lines[0].count("cannot reach Dropbox") == 1, lines[0]
    assert not is_mounted(tmp_path / "mnt")


def test_a_cache_file_without_a_saved_tree_is_no_tree_to_mount_offline(tree, tmp_path, monkeypatch):
    # A mount that ended before its first save, or a tree cleared by a `reset`, leaves the cache
    # file with no cursor and no entries: "mounted offline" would then show an empty, failing root.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    emulator = Emulator(tree)
    first = Mount(emulator, tmp_path / "mnt")
    first.unmount()
    emulator.stop()
    saved = list((tmp_path / "cache" / "dbx-mount").glob("*.sqlite"))
    assert len(saved) == 1, saved
    with sqlite3.connect(saved[0]) as database:
        database.execute("UPDATE meta SET cursor = NULL")
        database.execute("DELETE FROM entries")
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
               DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(tmp_path / "cache"))
    try:
        result = subprocess.run([str(DBX_MOUNT), "-f", str(tmp_path / "mnt")], env=env, capture_output=True,
                                text=True, timeout=30)
    finally:
        if is_mounted(tmp_path / "mnt"):    # mounted "offline" after all: never left behind
            subprocess.run(["fusermount3", "-u", "-z", str(tmp_path / "mnt")])
    assert result.returncode == 1, result.stderr
    assert "no saved tree" in result.stderr and "mounted offline" not in result.stderr, result.stderr


def test_the_first_listing_is_saved_within_seconds_so_a_killed_mount_can_start_offline(tree, tmp_path, monkeypatch):
    # Saved 5 s after the first listing, not at the feed's next turn after a 30 s longpoll: a
    # mount killed (or a machine that lost power) in between would lose the listing.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    port = free_port()
    emulator = start_on(tree, port)
    first = Mount(emulator, tmp_path / "mnt")
    try:
        wait_until_listed(first.mountpoint)
        saved = tmp_path / "cache" / "dbx-mount"

        def has_cursor():
            for path in saved.glob("*.sqlite"):
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as database:
                    if database.execute("SELECT cursor IS NOT NULL FROM meta").fetchone()[0]:
                        return True
            return False
        deadline = time.monotonic() + 15
        while not has_cursor():
            assert time.monotonic() < deadline, "no save 15 s after the first listing"
            time.sleep(0.5)
        first.process.kill()
        first.process.wait()
    finally:
        if is_mounted(first.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(first.mountpoint)])
        emulator.stop()
    offline = Mount(emulator, tmp_path / "mnt")
    try:
        assert listing(offline.mountpoint) == listing(tree)
    finally:
        offline.unmount()
