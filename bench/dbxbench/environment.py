"""Preconditions (/dev/fuse, fusermount3, curl, fio) and the release build."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .common import BenchError, REPO, log


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
