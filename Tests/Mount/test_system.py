"""issue 9: dbx-mount as part of the system: mount(8) and fstab, systemd, logs, the manual.

Every mount made here is unmounted, and only processes these tests started are signalled.
"""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, DBX_MOUNT, TOKEN, REPO, is_mounted, mount_entry


def emulator_options(emulator, tmp_path: Path) -> str:
    """The -o options that point a mount at the emulator, as an fstab line would carry them."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    return (f"api_url={emulator.url},content_url={emulator.url},notify_url={emulator.url},"
            f"token_file={token_file},cache_dir={tmp_path / 'cache'}")


def wait_unmounted(path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while is_mounted(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_mount_fuse3_runs_dbx_mount_from_path_with_fstab_options(emulator, served, tmp_path):
    mnt = tmp_path / "photos"
    mnt.mkdir()
    env = dict(os.environ, PATH=f"{BUILD}:{os.environ['PATH']}")
    env.pop("DBX_ACCESS_TOKEN", None)
    # What mount(8) hands a helper for an fstab line: rw and the helper words included.
    options = (emulator_options(emulator, tmp_path)
               + ",rw,allow_other,uid=1000,gid=1000,umask=022,_netdev,nofail,noauto,x-systemd.automount,dev,suid,exec")
    result = subprocess.run(["mount.fuse3", "dropbox:/Photos", str(mnt), "-t", "fuse.dbx-mount", "-o", options],
                            env=env, capture_output=True, text=True, timeout=60)
    try:
        assert result.returncode == 0, result.stderr
        fields = mount_entry(mnt)
        assert fields[0] == "dropbox:/Photos" and fields[2] == "fuse.dbx-mount"
        assert "ro" in fields[3].split(",") and "allow_other" in fields[3].split(",")
        st = os.stat(mnt / "cat.jpg")
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1000, 1000, 0o644)
        assert (mnt / "cat.jpg").read_bytes() == (served / "Photos" / "cat.jpg").read_bytes()
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        wait_unmounted(mnt)
    assert not is_mounted(mnt)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="mount(8) needs root, and a private mount namespace to put dbx-mount on its PATH")
def test_mount_t_fuse_dbx_mount_and_umount(emulator, served, tmp_path):
    """`mount -t fuse.dbx-mount` as fstab runs it. mount(8) clears PATH before running mount.fuse3,
    whose shell then finds dbx-mount in /usr/local/bin, /usr/bin, ...: so the test runs in a private
    mount namespace where /usr/local/bin holds the build's dbx-mount, and nothing leaks out."""
    mnt = tmp_path / "photos"
    mnt.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dbx-mount").symlink_to(DBX_MOUNT)
    options = emulator_options(emulator, tmp_path) + ",allow_other,uid=1000,gid=1000,umask=022,_netdev,nofail"
    script = f"""
        set -e
        mount --bind '{bindir}' /usr/local/bin
        mount -t fuse.dbx-mount /Photos '{mnt}' -o '{options}'
        trap "umount '{mnt}'" EXIT
        grep ' {mnt} ' /proc/self/mounts
        stat -c '%u %g %a %s' '{mnt}/cat.jpg'
        cmp '{mnt}/Album/dog.jpg' '{served}/Photos/Album/dog.jpg' && echo same
        umount '{mnt}'
        trap - EXIT
        grep -c ' {mnt} ' /proc/self/mounts || echo unmounted
    """
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    fields = lines[0].split()
    assert fields[0] == "dropbox:/Photos" and fields[2] == "fuse.dbx-mount" and "ro" in fields[3].split(",")
    assert lines[1] == f"1000 1000 644 {(served / 'Photos' / 'cat.jpg').stat().st_size}"
    assert lines[2] == "same"
    assert lines[-1] == "unmounted"


def test_fstab_words_and_rw_are_accepted_and_unknown_options_refused(emulator, tmp_path):
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url)
    result = subprocess.run([str(DBX_MOUNT), "-o", "rw,defaults,frobnicate", str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 64
    assert "unknown mount option 'frobnicate'" in result.stderr and "rw" not in result.stderr


def test_every_long_option_has_an_o_form():
    """fstab can say everything the command line can: each --option of `mount --help` has an -o form."""
    help_text = subprocess.run([str(DBX_MOUNT), "mount", "--help"], capture_output=True, text=True).stdout
    source = (REPO / "Sources" / "DBXMount" / "MountOptionList.swift").read_text()
    flags = {word.strip("-,") for word in help_text.split() if word.startswith("--")} - {"help", "version"}
    singles = {"-f": "foreground", "-d": "debug"}
    missing = [f for f in flags if f'"{f.replace("-", "_")}"' not in source]
    missing += [s for s, o in singles.items() if f'"{o}"' not in source]
    assert not missing, missing
