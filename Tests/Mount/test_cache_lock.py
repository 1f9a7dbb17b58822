"""issue 15: one mount per cache. A second mount of the same saved tree, or of the same block
cache, fails with one line naming the cache and the mount that holds it; once the first is gone,
the cache is free again (a killed mount leaves no stale lock)."""
import os
import signal
import subprocess
import time

from conftest import DBX_MOUNT, TOKEN, Emulator, Mount, is_mounted


def second_mount(emulator, mountpoint, cache_home, *args):
    mountpoint.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
               DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(cache_home))
    return subprocess.run([str(DBX_MOUNT), "-f", *args, str(mountpoint)], env=env, capture_output=True, text=True,
                          timeout=60)


def test_a_second_mount_of_one_cache_fails_in_one_line(tmp_path):
    served = tmp_path / "served"
    (served / "docs").mkdir(parents=True)
    (served / "docs" / "a.txt").write_text("a\n")
    emulator = Emulator(served)
    blocks = tmp_path / "blocks"
    first = Mount(emulator, tmp_path / "first", "--block-cache-dir", str(blocks))
    try:
        # The same account and folder with the same cache directory: the saved tree is shared.
        result = second_mount(emulator, tmp_path / "second", tmp_path / "cache")
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "in use by another dbx-mount" in lines[0] and f"pid {first.process.pid}" in lines[0], lines[0]
        assert not is_mounted(tmp_path / "second")

        # Its own metadata cache but the same block cache: refused too.
        result = second_mount(emulator, tmp_path / "second", tmp_path / "other-cache", "--block-cache-dir", str(blocks))
        assert result.returncode == 1 and "blocks/.lock is in use" in result.stderr, result.stderr

        # Its own caches: mounts beside the first.
        other = Mount(emulator, tmp_path / "third", "--cache-dir", str(tmp_path / "third-cache"))
        assert (other.mountpoint / "docs" / "a.txt").read_text() == "a\n"
        other.unmount()
    finally:
        first.unmount()

    # A mount that was killed leaves no lock behind.
    killed = Mount(emulator, tmp_path / "first", "--block-cache-dir", str(blocks))
    os.kill(killed.process.pid, signal.SIGKILL)
    killed.process.wait(timeout=10)
    subprocess.run(["fusermount3", "-u", "-z", str(tmp_path / "first")], capture_output=True)
    again = Mount(emulator, tmp_path / "again", "--block-cache-dir", str(blocks))
    try:
        assert (again.mountpoint / "docs" / "a.txt").read_text() == "a\n"
    finally:
        again.unmount()
        emulator.stop()
