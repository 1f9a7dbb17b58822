"""issue 3: mount a Dropbox read-only and browse it end to end."""
import errno
import json
import os
import random
import signal
import stat
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import DBX_MOUNT, TOKEN, Emulator, Mount, assert_same_bytes, file_listing, is_mounted, mount_entry, run


def test_diff_r_shows_no_difference(served, shared_mount):
    assert_same_bytes(served, shared_mount)


def test_find_and_stat_match_the_served_tree(served, shared_mount):
    assert file_listing(shared_mount) == file_listing(served)


def test_ls_lR_lists_every_name(served, shared_mount):
    mounted = run("ls", "-lR", "--time-style=+%s", ".", cwd=shared_mount)
    local = run("ls", "-lR", "--time-style=+%s", ".", cwd=served)
    # Permissions, owners and folder times differ by design; names, sizes of files and file times match.
    def names_sizes(listing):
        rows = []
        for line in listing.splitlines():
            fields = line.split(None, 6)
            if len(fields) == 7 and fields[0].startswith("-"):
                rows.append((fields[4], fields[5], fields[6]))
            elif line.endswith(":") or (len(fields) == 7 and fields[0].startswith("d")):
                rows.append((fields[-1],))
        return rows
    assert names_sizes(mounted) == names_sizes(local)


def test_modes_links_and_owner_by_default(shared_mount):
    f = os.stat(shared_mount / "empty.txt")
    d = os.stat(shared_mount / "d1")
    assert stat.S_IMODE(f.st_mode) == 0o444 and stat.S_ISREG(f.st_mode)
    assert stat.S_IMODE(d.st_mode) == 0o555 and stat.S_ISDIR(d.st_mode)
    assert f.st_nlink == 1
    os.listdir(shared_mount / "d1")
    assert os.stat(shared_mount / "d1").st_nlink == 3          # ".", the entry in /, and d2's ".."
    assert f.st_uid == os.getuid() and f.st_gid == os.getgid()


def test_uid_gid_umask_options(mount):
    mnt = mount("-o", "uid=1234,gid=4321,umask=027")
    f = os.stat(mnt / "empty.txt")
    d = os.stat(mnt / "d1")
    assert (f.st_uid, f.st_gid) == (1234, 4321)
    assert stat.S_IMODE(f.st_mode) == 0o640
    assert stat.S_IMODE(d.st_mode) == 0o750


def test_wide_folder_lists_completely(served, shared_mount):
    names = os.listdir(shared_mount / "wide")
    assert len(names) == 10_000
    assert sorted(names) == sorted(os.listdir(served / "wide"))


def test_reads_at_random_offsets_match(served, shared_mount):
    rng = random.Random(7)
    for name in ["sizes/big.bin", "sizes/file-4194305.bin", "sizes/file-131073.bin"]:
        local = (served / name).read_bytes()
        with open(shared_mount / name, "rb") as f:
            for _ in range(40):
                offset = rng.randrange(0, len(local) + 10)
                size = rng.choice([1, 17, 4096, 65536, 200_000, 1 << 20])
                f.seek(offset)
                assert f.read(size) == local[offset:offset + size], (name, offset, size)


def test_dd_skip_reads_the_same_bytes(served, shared_mount):
    out = subprocess.run(["dd", f"if={shared_mount / 'sizes/big.bin'}", "bs=1M", "skip=100", "count=3", "status=none"],
                         capture_output=True, check=True).stdout
    with open(served / "sizes/big.bin", "rb") as f:
        f.seek(100 << 20)
        assert out == f.read(3 << 20)


def test_read_past_end_returns_nothing(shared_mount):
    with open(shared_mount / "sizes/file-1000.bin", "rb") as f:
        f.seek(5000)
        assert f.read(100) == b""
    with open(shared_mount / "empty.txt", "rb") as f:
        assert f.read() == b""


def test_every_write_operation_fails_with_erofs(shared_mount):
    m = shared_mount
    attempts = {
        "create": lambda: os.open(m / "new.txt", os.O_CREAT | os.O_WRONLY, 0o644),
        "open for writing": lambda: os.open(m / "empty.txt", os.O_WRONLY),
        "truncate": lambda: os.truncate(m / "old.txt", 0),
        "mkdir": lambda: os.mkdir(m / "newdir"),
        "unlink": lambda: os.unlink(m / "old.txt"),
        "rmdir": lambda: os.rmdir(m / "empty-folder"),
        "rename": lambda: os.rename(m / "old.txt", m / "renamed.txt"),
        "chmod": lambda: os.chmod(m / "old.txt", 0o600),
        "chown": lambda: os.chown(m / "old.txt", 1, 1),
        "utime": lambda: os.utime(m / "old.txt", (1, 1)),
        "symlink": lambda: os.symlink("old.txt", m / "link"),
        "link": lambda: os.link(m / "old.txt", m / "hardlink"),
        "setxattr": lambda: os.setxattr(m / "old.txt", "user.x", b"1"),
        "removexattr": lambda: os.removexattr(m / "old.txt", "user.dropbox.rev"),
        "mknod": lambda: os.mkfifo(m / "fifo"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(OSError) as caught:
            attempt()
        assert caught.value.errno == errno.EROFS, what


def test_proc_mounts_shows_a_read_only_dbx_mount(shared_mount):
    fields = mount_entry(shared_mount)
    assert fields[2] == "fuse.dbx-mount"
    assert "ro" in fields[3].split(",")


def test_inode_numbers_are_stable(shared_mount):
    first = os.stat(shared_mount / "d1" / "d2" / "middle.txt").st_ino
    os.listdir(shared_mount / "d1" / "d2")
    assert os.stat(shared_mount / "d1" / "d2" / "middle.txt").st_ino == first
    assert first != os.stat(shared_mount / "old.txt").st_ino


def test_statfs_comes_from_space_usage(emulator, shared_mount):
    request = urllib.request.Request(emulator.url + "/2/users/get_space_usage", data=b"null", method="POST",
                                     headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    usage = json.load(urllib.request.urlopen(request, timeout=10))
    vfs = os.statvfs(shared_mount)
    assert vfs.f_blocks * vfs.f_frsize == usage["allocation"]["allocated"] // 4096 * 4096
    assert (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize == pytest.approx(usage["used"], abs=8192)
    # `df -i`: the entries shown are in use, and there is room for more (none free reads as full).
    entries = sum(len(dirs) + len(files) for _, dirs, files in os.walk(shared_mount))
    vfs = os.statvfs(shared_mount)
    assert vfs.f_files - vfs.f_ffree == entries + 1    # and the root
    assert vfs.f_ffree > 0 and vfs.f_favail == vfs.f_ffree


def test_xattrs_carry_the_dropbox_rev(emulator, shared_mount):
    out = run("getfattr", "-d", "--absolute-names", str(shared_mount / "old.txt"))
    request = urllib.request.Request(emulator.url + "/2/files/get_metadata", method="POST",
                                     data=json.dumps({"path": "/old.txt"}).encode(),
                                     headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    metadata = json.load(urllib.request.urlopen(request, timeout=10))
    assert f'user.dropbox.rev="{metadata["rev"]}"' in out
    assert f'user.dropbox.id="{metadata["id"]}"' in out


def test_subfolder_source_shows_only_that_folder(served, mount):
    mnt = mount(source="/Photos")
    assert sorted(os.listdir(mnt)) == sorted(os.listdir(served / "Photos"))
    assert_same_bytes(served / "Photos", mnt)


def test_case_insensitive_option(mount):
    exact = mount()
    assert not (exact / "NAMES" / "upper LOWER.txt").exists()
    folded = mount("-o", "case_insensitive")
    assert (folded / "NAMES" / "upper LOWER.txt").read_bytes() == b"UPPER lower.TXT\n"
    assert "UPPER lower.TXT" in os.listdir(folded / "names")


def test_names_compare_as_dropbox_lowercases_them(tmp_path):
    # Dropbox lowercases with Unicode 4.1's one-to-one mappings: İ is i, and ẞ (Unicode 5.1) is
    # not ß, so both files are there. The mounted folder is named in another case.
    served = tmp_path / "served"
    (served / "\u0130zmir \u0130\u015f").mkdir(parents=True)
    (served / "\u0130zmir \u0130\u015f" / "plan.txt").write_bytes(b"plan\n")
    (served / "\u1e9ex.txt").write_bytes(b"capital sharp s\n")
    (served / "\u00dfx.txt").write_bytes(b"sharp s\n")
    # Written decomposed, as macOS writes names; Dropbox's path_lower is composed (NFC).
    (served / "Cafe\u0301 Me\u0301mo").mkdir()
    (served / "Cafe\u0301 Me\u0301mo" / "menu.txt").write_bytes(b"menu\n")
    emulator = Emulator(served)
    mounts = []
    try:
        mounts.append(Mount(emulator, tmp_path / "whole", "--no-cache"))
        whole = mounts[-1].mountpoint
        assert sorted(os.listdir(whole)) == sorted(os.listdir(served))
        assert (whole / "\u1e9ex.txt").read_bytes() == b"capital sharp s\n"
        assert (whole / "\u00dfx.txt").read_bytes() == b"sharp s\n"
        mounts.append(Mount(emulator, tmp_path / "sub", "--no-cache", "/izmir i\u015f"))
        sub = mounts[-1].mountpoint
        assert os.listdir(sub) == ["plan.txt"]
        assert (sub / "plan.txt").read_bytes() == b"plan\n"
        # Named composed and in lower case, the decomposed folder still shows what it holds.
        mounts.append(Mount(emulator, tmp_path / "composed", "--no-cache", "/caf\u00e9 m\u00e9mo"))
        composed = mounts[-1].mountpoint
        assert os.listdir(composed) == ["menu.txt"]
        assert (composed / "menu.txt").read_bytes() == b"menu\n"
    finally:
        for m in mounts:
            m.unmount()
        emulator.stop()


def test_bad_token_fails_with_a_clear_message(emulator, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, DBX_ACCESS_TOKEN="not-a-valid-token", DBX_API_URL=emulator.url,
               DBX_CONTENT_URL=emulator.url, DBX_NOTIFY_URL=emulator.url)
    result = subprocess.run([str(DBX_MOUNT), str(mnt)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "access token" in result.stderr and "invalid_access_token" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "not-a-valid-token" not in result.stderr
    assert not is_mounted(mnt)


@pytest.mark.parametrize("content", ["Bearer sl.SECRET-abc", '{"access_token": "sl.SECRET-abc", "refresh_token": "SECRET-r"}',
                                     "sl.SECRET abc"])
def test_a_token_file_holding_more_than_a_token_fails_without_printing_it(emulator, tmp_path, content):
    # Dropbox quotes such an Authorization value back in its 400 answer; nothing is sent at all.
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    token_file = tmp_path / "token"
    token_file.write_text(content + "\n")
    env = dict(os.environ, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url, DBX_NOTIFY_URL=emulator.url)
    env.pop("DBX_ACCESS_TOKEN", None)
    result = subprocess.run([str(DBX_MOUNT), "--token-file", str(token_file), str(mnt)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"token file {token_file} does not hold an access token alone" in result.stderr
    assert "SECRET" not in result.stderr
    assert not is_mounted(mnt)


def test_missing_mount_point_fails_with_a_clear_message(emulator, tmp_path):
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url)
    result = subprocess.run([str(DBX_MOUNT), str(tmp_path / "nope")], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stderr.strip() == f"dbx-mount: mount point {tmp_path / 'nope'} does not exist"


def test_missing_source_folder_fails(emulator, tmp_path):
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url)
    result = subprocess.run([str(DBX_MOUNT), "/No Such Folder", str(tmp_path)], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0
    assert "no such folder" in result.stderr
    assert not is_mounted(tmp_path)


def test_unknown_option_fails(emulator, tmp_path):
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url)
    result = subprocess.run([str(DBX_MOUNT), "-o", "frobnicate", str(tmp_path)], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0
    assert "unknown mount option 'frobnicate'" in result.stderr


def test_daemon_mode_returns_once_mounted(emulator, served, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
               DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(tmp_path / "cache"))
    try:
        result = subprocess.run([str(DBX_MOUNT), str(mnt)], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert is_mounted(mnt)
        assert (mnt / "old.txt").read_bytes() == b"old\n"
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
    assert not is_mounted(mnt)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_unmount_cleanly(emulator, tmp_path, sig):
    m = Mount(emulator, tmp_path / "mnt")
    try:
        os.listdir(m.mountpoint)
        m.process.send_signal(sig)
        assert m.process.wait(timeout=20) == 0
        assert not is_mounted(m.mountpoint)
    finally:
        m.unmount()


def test_a_mount_point_named_relative_to_the_current_folder_works_to_the_end(emulator, tmp_path):
    """libfuse moves the mount's process to / as it serves. Named `mnt` from its own folder, the
    mount used to unmount `/mnt` on SIGTERM (failing with EINVAL and leaving a dead mount behind,
    or unmounting another file system there) and never found itself to raise the read-ahead."""
    m = Mount(emulator, tmp_path / "mnt", cwd=tmp_path)
    try:
        assert m.process.args[-1] == "mnt"
        assert (m.mountpoint / "old.txt").read_bytes() == b"old\n"
        device = os.stat(m.mountpoint).st_dev
        bdi = Path(f"/sys/class/bdi/{os.major(device)}:{os.minor(device)}/read_ahead_kb")
        if os.geteuid() == 0:   # only root may raise it
            assert int(bdi.read_text()) >= 4096
        m.process.send_signal(signal.SIGTERM)
        assert m.process.wait(timeout=20) == 0
        assert not is_mounted(m.mountpoint), m.log()
        assert "failed to unmount" not in m.log()
    finally:
        m.unmount()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_mount_at_once_with_a_read_waiting_on_a_dead_link(emulator, tmp_path, silent_server_url, sig):
    """libfuse unmounts only once every request being served has been answered, and a read waiting
    for a download that never comes held SIGTERM (systemctl stop) for the call's whole deadline,
    2 minutes. The signal now cancels the calls in flight: the read fails and the mount is gone."""
    m = Mount(emulator, tmp_path / "mnt", "-o", f"content_url={silent_server_url}")
    outcome = {}

    def read():
        try:
            outcome["data"] = (m.mountpoint / "old.txt").read_bytes()
        except OSError as error:
            outcome["error"] = error.errno

    reader = threading.Thread(target=read)
    try:
        reader.start()
        reader.join(timeout=2)
        assert reader.is_alive(), f"the read should wait on the silent server: {outcome}"
        m.process.send_signal(sig)
        assert m.process.wait(timeout=30) == 0, m.log()   # not the 120 s deadline
        reader.join(timeout=10)
        assert not reader.is_alive() and "error" in outcome, outcome
        assert not is_mounted(m.mountpoint), m.log()
        assert "cancelling the Dropbox calls in flight" in m.log()
        assert "change feed is down" not in m.log()
    finally:
        m.unmount()
        reader.join(timeout=10)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_signal_ends_a_read_waiting_on_a_dead_link_without_ending_the_mount(emulator, tmp_path, silent_server_url, sig):
    """The kernel waits for a request the mount is serving even through SIGKILL, and sends
    FUSE_INTERRUPT: the mount answers it EINTR at once, so Ctrl-C or kill -9 ends a `cat` waiting on
    a download that never comes, not the call's 2-minute deadline. (--direct-io makes every read a
    request of the reader's own; the kernel's read-ahead requests wait killably anyway.)"""
    m = Mount(emulator, tmp_path / "mnt", "--direct-io", "-o", f"content_url={silent_server_url}")
    try:
        assert (m.mountpoint / "old.txt").stat().st_size > 0
        reader = subprocess.Popen(["cat", str(m.mountpoint / "old.txt")], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        with pytest.raises(subprocess.TimeoutExpired):
            reader.wait(timeout=2)   # waiting on the silent server
        reader.send_signal(sig)
        assert reader.wait(timeout=10) != 0
        # The mount serves on: its worker's late answer to the interrupted read is dropped.
        assert sorted(os.listdir(m.mountpoint)) == sorted(os.listdir(emulator.root))
        assert m.process.poll() is None, m.log()
    finally:
        m.unmount()


def test_a_signal_the_mount_was_started_ignoring_stays_ignored(emulator, tmp_path):
    """A script's background job starts with SIGINT ignored, and libfuse leaves it so. The mount
    must too: catching it would cancel every Dropbox call (reads fail) and not end the session."""
    m = Mount(emulator, tmp_path / "mnt", ignored_signals=(signal.SIGINT,))
    try:
        os.listdir(m.mountpoint)
        m.process.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert m.process.poll() is None and is_mounted(m.mountpoint)
        assert (m.mountpoint / "old.txt").read_bytes() == b"old\n"
        assert "cancelling" not in m.log()
        m.process.send_signal(signal.SIGTERM)
        assert m.process.wait(timeout=20) == 0
        assert not is_mounted(m.mountpoint)
    finally:
        m.unmount()


def test_a_killed_mount_is_cleared_by_fusermount(emulator, tmp_path):
    m = Mount(emulator, tmp_path / "mnt")
    try:
        m.process.kill()
        m.process.wait(timeout=20)
        assert is_mounted(m.mountpoint)
        subprocess.run(["fusermount3", "-u", str(m.mountpoint)], check=True)
        assert not is_mounted(m.mountpoint)
    finally:
        m.unmount()


def test_only_the_user_xattr_namespace_exists(shared_mount):
    path = shared_mount / "old.txt"
    assert os.getxattr(path, "user.dropbox.rev")
    with pytest.raises(OSError) as absent:
        os.getxattr(path, "user.nothing.here")
    assert absent.value.errno == errno.ENODATA
    # ACLs and security labels are not supported: saying so (EOPNOTSUPP, not ENODATA) lets
    # `ls -l` stop asking for every file, which would cost two round trips each.
    for name in ["system.posix_acl_access", "security.selinux", "trusted.x"]:
        with pytest.raises(OSError) as unsupported:
            os.getxattr(path, name)
        assert unsupported.value.errno == errno.EOPNOTSUPP, name
    assert sorted(os.listxattr(path)) == ["user.dropbox.content_hash", "user.dropbox.id", "user.dropbox.rev"]
