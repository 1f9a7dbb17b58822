"""Downloads that never come (Dropbox stalling, a proxy that holds connections): many of them at
once must not freeze the mount, keep their readers unkillable, or keep the process alive after an
unmount. The content host here takes connections and never answers; listings still work."""
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import DBX_MOUNT, TOKEN, Mount, is_mounted

READERS = 24   # more than the 16 FUSE worker threads dbx-mount used to run at most


@pytest.fixture
def stalled_content_url():
    """Takes every connection (a backlog for all readers: a full one would drop connects, which
    the mount rightly counts as Dropbox out of reach) and never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def start_readers(folder, count):
    names = sorted(os.listdir(folder))[:count]
    readers = [subprocess.Popen(["cat", str(folder / name)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for name in names]
    time.sleep(2)
    assert all(r.poll() is None for r in readers), "the reads should wait on the stalled server"
    return readers


def test_stalled_downloads_leave_the_mount_answering_and_their_readers_killable(emulator, tmp_path, stalled_content_url):
    """libfuse ran at most 16 workers and a read holds one until its call's deadline (2 minutes):
    with 16 stalled, `stat` and `ls` of what the mount holds in memory waited behind them, and so
    did the interrupt of a killed reader (it stayed in D state). --direct-io makes every read a
    request of the reader's own, so only the interrupt can end it."""
    m = Mount(emulator, tmp_path / "mnt", "--direct-io", "-o", f"content_url={stalled_content_url}")
    readers = []
    try:
        wide = m.mountpoint / "wide"
        readers = start_readers(wide, READERS)
        # Answered from memory, not after the stalled calls' deadline (the old code: 30-60 s at
        # a 30 s deadline, 2-4 minutes at the default).
        shown = subprocess.run(["stat", "-c", "%s", str(m.mountpoint / "old.txt")], capture_output=True, text=True,
                               timeout=20)
        assert shown.stdout.strip() == str((emulator.root / "old.txt").stat().st_size)
        listed = subprocess.run(["ls", str(m.mountpoint / "sizes")], capture_output=True, text=True, timeout=20)
        assert sorted(listed.stdout.split()) == sorted(os.listdir(emulator.root / "sizes"))
        # kill -9 ends every reader at once, and cancels its download.
        for r in readers:
            r.send_signal(signal.SIGKILL)
        for r in readers:
            r.wait(timeout=10)
        assert m.process.poll() is None, m.log()
        assert sorted(os.listdir(m.mountpoint)) == sorted(os.listdir(emulator.root))
    finally:
        for r in readers:
            r.kill()
            r.wait()
        m.unmount()


def test_an_unmount_ends_the_process_at_once_with_downloads_still_stalled(emulator, tmp_path, stalled_content_url):
    """The kernel's read-ahead requests outlive a killed reader, and libfuse waits for every request
    in progress before its loop returns: after `fusermount3 -u` the process lingered until the
    stalled calls' deadline, holding the cache, so a mount started at once failed "in use". The
    unmount now cancels the calls, and a new mount of the same cache comes up."""
    cache = tmp_path / "cache"
    m = Mount(emulator, tmp_path / "mnt", "-o", f"content_url={stalled_content_url}", cache_home=cache)
    again = None
    try:
        readers = start_readers(m.mountpoint / "wide", 4)
        for r in readers:
            r.send_signal(signal.SIGKILL)
            r.wait(timeout=10)
        unmounted = subprocess.run(["fusermount3", "-u", str(m.mountpoint)], capture_output=True, text=True)
        assert unmounted.returncode == 0, unmounted.stderr
        # A mount of the same cache started right away waits for the old process's save.
        again = Mount(emulator, tmp_path / "again", cache_home=cache)
        assert m.process.wait(timeout=20) == 0, m.log()   # not the 120 s deadline
        assert "unmounted: cancelling the Dropbox calls in flight" in m.log()
        assert (again.mountpoint / "old.txt").read_bytes() == (emulator.root / "old.txt").read_bytes()
    finally:
        m.unmount()
        if again:
            again.unmount()


def test_a_mount_is_not_stacked_on_the_mount_point_of_a_killed_one(emulator, tmp_path):
    """`stat` of a killed dbx-mount's mount point is answered from the kernel's cache for a minute,
    so the check for ENOTCONN never fired and a second mount went on top of the dead one (two
    lines in /proc/mounts, and a second unmount needed). It is refused, saying what to do."""
    m = Mount(emulator, tmp_path / "mnt")
    try:
        os.listdir(m.mountpoint)
        m.process.send_signal(signal.SIGKILL)
        m.process.wait(timeout=10)
        env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
                   DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(tmp_path / "cache2"))
        second = subprocess.run([str(DBX_MOUNT), "-f", str(m.mountpoint)], env=env, capture_output=True, text=True,
                                timeout=30)
        assert second.returncode == 1
        assert second.stderr.count("\n") == 1, second.stderr
        assert f"run fusermount3 -u {m.mountpoint}" in second.stderr, second.stderr
        with open("/proc/mounts") as mounts:
            assert sum(line.split()[1] == str(m.mountpoint) for line in mounts) == 1
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(m.mountpoint)], capture_output=True)
    assert not is_mounted(m.mountpoint)


def test_a_mount_is_not_stacked_on_a_live_one(emulator, tmp_path):
    m = Mount(emulator, tmp_path / "mnt")
    try:
        env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
                   DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(tmp_path / "cache2"))
        second = subprocess.run([str(DBX_MOUNT), "-f", str(m.mountpoint)], env=env, capture_output=True, text=True,
                                timeout=30)
        assert second.returncode == 1
        assert "is a dbx-mount mount point already" in second.stderr, second.stderr
        assert sorted(os.listdir(m.mountpoint)) == sorted(os.listdir(emulator.root))
    finally:
        m.unmount()
