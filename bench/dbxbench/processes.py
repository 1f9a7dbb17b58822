"""Process bookkeeping: only what this runner started is ever signalled or unmounted; running
one workload command (or several at once) under a timeout; CPU and memory figures from /proc."""
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

from .common import BenchError


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


def evict_page_cache(path):
    """Drops the page cache of a file, or of every file under a folder, so that the next read
    comes from the disk: written pages are flushed first (sync), as only clean pages drop."""
    os.sync()
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
