"""A dbx-mount in the foreground, owned by the runner: mounted, measured, unmounted."""
import os
import subprocess
import time

from .common import BenchError, TOKEN
from .processes import _children, _is_mounted, _mounts, _stop, peak_rss


class Mount:
    """dbx-mount -f: the runner owns the process, so it can read its peak RSS and stop it."""

    def __init__(self, binary, emulator, mountpoint, extra_args, log_path, cache_home):
        self.mountpoint = mountpoint
        self.cache_home = cache_home
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
