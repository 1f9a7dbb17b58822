"""issue 9: dbx-mount as part of the system: mount(8) and fstab, systemd, logs, the manual.

Every mount made here is unmounted, and only processes these tests started are signalled.
"""
import contextlib
import errno
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, DBX_MOUNT, REPO, TOKEN, Emulator, Mount, is_mounted, mount_entry, stop_mount


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
               + ",rw,allow_other,uid=1000,gid=1000,umask=022,_netdev,nofail,noauto,x-systemd.automount,dev,suid,exec"
               + ",default_permissions,kernel_cache")   # as sshfs lines often carry
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
    source = (REPO / "Sources" / "DBXMount" / "Mount" / "MountOptionList.swift").read_text()
    flags = {word.strip("-,") for word in help_text.split() if word.startswith("--")} - {"help", "version"}
    singles = {"-f": "foreground", "-d": "debug"}
    missing = [f for f in flags if f'"{f.replace("-", "_")}"' not in source]
    missing += [s for s, o in singles.items() if f'"{o}"' not in source]
    assert not missing, missing


# --- systemd -----------------------------------------------------------------------------------

def mount_env(emulator, tmp_path: Path, **extra) -> dict:
    return dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
                DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(tmp_path / "cache"), **extra)


def notify_socket(tmp_path: Path, abstract: bool = False):
    """A socket like systemd's: datagrams on a unix socket named by NOTIFY_SOCKET."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if abstract:
        name = f"dbx-mount-test-{os.getpid()}-{time.monotonic_ns()}"
        sock.bind("\0" + name)
        address = "@" + name
    else:
        address = str(tmp_path / "notify.sock")
        sock.bind(address)
    sock.settimeout(30)
    return sock, address


def messages(datagram: bytes) -> dict:
    return dict(line.split("=", 1) for line in datagram.decode().splitlines())


def message_with(sock, key: str) -> dict:
    """The next datagram that holds `key` (the mount reports its status in between)."""
    while True:
        found = messages(sock.recv(4096))
        if key in found:
            return found


@contextlib.contextmanager
def under_systemd(emulator, tmp_path: Path, *args: str, abstract: bool = False, **env):
    """dbx-mount started as a Type=notify unit would start it (`$NOTIFY_SOCKET` set): the process,
    the socket it reports to, and the mount point. Killed and unmounted whatever happens."""
    sock, address = notify_socket(tmp_path, abstract)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)   # as systemd does, to learn the sender
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    process = subprocess.Popen([str(DBX_MOUNT), *args, str(mnt)],
                               env=mount_env(emulator, tmp_path, NOTIFY_SOCKET=address, **env),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield process, sock, mnt
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        sock.close()
    assert not is_mounted(mnt)


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_type_notify_readiness_and_stopping(emulator, tmp_path, abstract):
    with under_systemd(emulator, tmp_path, "-f", abstract=abstract) as (process, sock, mnt):
        assert messages(sock.recv(4096)) == {"READY": "1"}
        assert is_mounted(mnt)          # readiness means the mount is in place
        assert "old.txt" in os.listdir(mnt)
        process.send_signal(signal.SIGTERM)
        stopping = message_with(sock, "STOPPING")
        assert stopping == {"STOPPING": "1", "STATUS": "unmounted: saving the tree for the next mount"}
        assert process.wait(timeout=20) == 0


def test_under_type_notify_the_status_line_and_the_watchdog(emulator, tmp_path):
    """`systemctl status` shows the STATUS= line: how the tree stands and what the mount holds.
    With WatchdogSec= (WATCHDOG_USEC) the mount pings at least twice per interval; a mount whose
    core is stuck would stop, and systemd would restart it."""
    with under_systemd(emulator, tmp_path, "-f", WATCHDOG_USEC="2000000") as (process, sock, mnt):
        assert messages(sock.recv(4096)) == {"READY": "1"}
        below = sum(1 for _ in emulator.root.rglob("*"))
        status, pings = "", []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (status.startswith("live") and len(pings) >= 4):
            found = messages(sock.recv(4096))
            status = found.get("STATUS", status)
            if found.get("WATCHDOG") == "1":
                pings.append(time.monotonic())
        shown = re.fullmatch(r"live: following changes; (\d+) entries, 0 open files", status)
        assert shown and int(shown.group(1)) in (below, below + 1), (status, below)   # the root counted or not
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        assert len(pings) >= 4 and max(gaps) < 1.5, gaps
        process.send_signal(signal.SIGTERM)
        assert message_with(sock, "STOPPING")["STATUS"].startswith("unmounted")
        assert process.wait(timeout=20) == 0


def test_under_type_notify_the_started_process_serves_and_says_ready_even_without_f(emulator, tmp_path):
    """systemd takes READY=1 only from the main process (NotifyAccess=main), which a daemon's fork
    would have ended: with $NOTIFY_SOCKET set, dbx-mount stays the process it was started as."""
    with under_systemd(emulator, tmp_path) as (process, sock, mnt):
        data, ancillary, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(12))
        assert messages(data) == {"READY": "1"}
        [(level, kind, credentials)] = ancillary
        assert (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS)
        sender = struct.unpack("iII", credentials[:12])[0]
        assert sender == process.pid, "readiness came from the process systemd would have started"
        assert process.poll() is None, "it did not fork and exit"
        assert is_mounted(mnt) and "old.txt" in os.listdir(mnt)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0


def read_log_until(mount, needle: str, timeout: float = 10) -> str:
    """The first line of the mount's log holding `needle`, once it is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in mount.log().splitlines():
            if needle in line:
                return line
        time.sleep(0.1)
    raise AssertionError(f"no log line with {needle!r}: {mount.log()[-2000:]}")


def test_sigusr1_logs_one_stats_line(emulator, served, tmp_path):
    m = Mount(emulator, tmp_path / "mnt")
    try:
        with open(m.mountpoint / "sizes" / "file-1000.bin", "rb") as held:
            assert held.read() == (served / "sizes" / "file-1000.bin").read_bytes()
            m.process.send_signal(signal.SIGUSR1)
            line = read_log_until(m, " stats")
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        assert int(fields["entries"]) >= 3                 # at least what was looked up
        assert int(fields["rss_bytes"]) > 0
        assert int(fields["api_calls"]) >= 2               # the listing and the download at least
        assert int(fields["bytes_downloaded"]) >= 1000
        assert fields["open_files"] == "1"
        assert m.process.poll() is None and is_mounted(m.mountpoint)
    finally:
        m.unmount()


def test_sighup_drops_caches_so_a_folder_changed_behind_its_back_is_fresh(tmp_path, silent_server_url):
    served = tmp_path / "served"
    (served / "docs").mkdir(parents=True)
    (served / "docs" / "a.txt").write_bytes(b"a\n")
    emulator = Emulator(served)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # No change feed (its longpoll is never answered) and a long TTL: what was listed is trusted
    # for an hour, so a change on Dropbox is not seen until SIGHUP.
    env = dict(mount_env(emulator, tmp_path), DBX_NOTIFY_URL=silent_server_url)
    log_path = tmp_path / "mount.log"
    log = open(log_path, "w")
    process = subprocess.Popen([str(DBX_MOUNT), "-f", "-vv", "--ttl", "3600", "--no-cache", str(mnt)], env=env,
                               stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        deadline = time.monotonic() + 30
        while not is_mounted(mnt):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert os.listdir(mnt / "docs") == ["a.txt"]
        # Changed only once the first listing is over: a subtree it listed after the change would
        # show it without SIGHUP.
        while "listed the mounted folder" not in log_path.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (served / "docs" / "b.txt").write_bytes(b"b\n")
        (served / "docs" / "a.txt").write_bytes(b"changed\n")
        time.sleep(2)                                     # past the kernel's one-second cache
        assert os.listdir(mnt / "docs") == ["a.txt"]
        assert os.stat(mnt / "docs" / "a.txt").st_size == 2
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while sorted(os.listdir(mnt / "docs")) != ["a.txt", "b.txt"]:
            assert time.monotonic() < deadline, os.listdir(mnt / "docs")
            time.sleep(0.1)
        assert (mnt / "docs" / "a.txt").read_bytes() == b"changed\n"
        assert (mnt / "docs" / "b.txt").read_bytes() == b"b\n"
        assert process.poll() is None and is_mounted(mnt)   # SIGHUP no longer ends the session
    except (AssertionError, OSError):
        print("the mount's log:\n" + log_path.read_text(errors="replace")[-20_000:])
        raise
    finally:
        stop_mount(mnt, process)
        emulator.stop()
        log.close()


# --- logging -----------------------------------------------------------------------------------

SECRET = "secret-token-for-log-tests"


def test_one_line_per_failed_operation_with_the_request_id_and_no_token(tmp_path, silent_server_url):
    served = tmp_path / "served"
    (served / "docs").mkdir(parents=True)
    (served / "docs" / "a.txt").write_bytes(b"a\n")
    emulator = Emulator(served, "--token", SECRET)
    token_file = tmp_path / "token"
    token_file.write_text(SECRET)
    log = tmp_path / "mount.log"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
               DBX_NOTIFY_URL=silent_server_url, XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("DBX_ACCESS_TOKEN", None)
    process = subprocess.Popen([str(DBX_MOUNT), "-f", "-vv", "--ttl", "3600", "--token-file", str(token_file),
                                "-o", f"no_cache,log_file={log}", "/docs", str(mnt)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not is_mounted(mnt):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert os.listdir(mnt) == ["a.txt"]
        # The first listing ends with the mounted folder listed again; once it has, the one call
        # left to fail is the listing after SIGHUP.
        while "listed the mounted folder" not in log.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        shutil.rmtree(served / "docs")                    # the mounted folder, behind the mount's back (no feed)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "dropped cached listings" not in log.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(OSError):                      # listed again: Dropbox says it is gone
            os.listdir(mnt)
        time.sleep(0.5)
        lines = log.read_text().splitlines()
        failed = [l for l in lines if "Dropbox call failed" in l and "route=files/list_folder " in l]
        assert len(failed) == 1, "\n".join(lines[-30:])
        assert "path/not_found" in failed[0] and "request_id=" in failed[0]
        assert " debug " in "\n".join(lines)              # -vv reaches the file
        assert SECRET not in log.read_text()
    finally:
        stop_mount(mnt, process)
        emulator.stop()
    output = process.stdout.read() + process.stderr.read()
    assert output == ""                                   # everything went to the log file
    assert SECRET not in log.read_text()


def test_a_mount_point_left_by_a_killed_mount_says_how_to_clear_it(emulator, tmp_path):
    m = Mount(emulator, tmp_path / "mnt")
    m.process.kill()   # the mount this test started; its mount point is left "not connected"
    m.process.wait()

    def not_connected():
        try:
            os.stat(m.mountpoint)   # answered from the kernel's attribute cache until it expires
            return False
        except OSError as error:
            return error.errno == errno.ENOTCONN
    deadline = time.monotonic() + 10
    while not not_connected():
        assert time.monotonic() < deadline, "the dead mount point never reported ENOTCONN"
        time.sleep(0.2)
    try:
        result = subprocess.run([str(DBX_MOUNT), "-f", str(m.mountpoint)], env=mount_env(emulator, tmp_path),
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 1
        assert "not connected" in result.stderr and "fusermount3 -u" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    finally:
        for _ in range(3):   # a mount that went on top of the dead one would be unmounted first
            subprocess.run(["fusermount3", "-u", "-z", str(m.mountpoint)], capture_output=True)
    wait_unmounted(m.mountpoint)


def daemon_serving(mountpoint: Path) -> int:
    """The pid of the dbx-mount daemon (started by this test) serving `mountpoint`."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                arguments = (entry / "cmdline").read_bytes().split(b"\0")
                if Path(os.readlink(entry / "exe")) == DBX_MOUNT.resolve() and str(mountpoint).encode() in arguments:
                    return int(entry.name)
            except OSError:
                continue
    raise AssertionError(f"no dbx-mount serves {mountpoint}")


def test_daemonized_mount_logs_to_its_log_file(emulator, tmp_path):
    log = tmp_path / "daemon.log"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        result = subprocess.run([str(DBX_MOUNT), "--log-level", "info", "--log-file", str(log), str(mnt)],
                                env=mount_env(emulator, tmp_path), capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        pid = daemon_serving(mnt)
        os.listdir(mnt)
        os.kill(pid, signal.SIGUSR1)                      # the daemon this test started
        deadline = time.monotonic() + 10
        while " stats" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        text = log.read_text()
        assert f"dbx-mount[{pid}]" in text and " notice " in text and TOKEN not in text
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
    wait_unmounted(mnt)
    assert not is_mounted(mnt)


@pytest.mark.parametrize("args", [["--log-level", "loud"], ["-o", "log_level=chatty"],
                                  ["--log-file", "/nonexistent/dir/x.log"]])
def test_bad_log_options_fail_with_usage_errors(emulator, tmp_path, args):
    result = subprocess.run([str(DBX_MOUNT), *args, str(tmp_path)], env=mount_env(emulator, tmp_path),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 64
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# --- content-hash ------------------------------------------------------------------------------

def test_content_hash_agrees_with_getfattr_for_local_copies(served, shared_mount):
    names = ["empty.txt", "old.txt", "sizes/file-1.bin", "sizes/file-4096.bin", "sizes/file-4194305.bin",
             "sizes/file-10485760.bin", "names/ünïcödé 文件 ✓.txt"]
    out = subprocess.run([str(DBX_MOUNT), "content-hash", *[str(served / n) for n in names]],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == len(names)
    for name, line in zip(names, out):
        local_hash, local_path = line.split("  ", 1)
        assert local_path == str(served / name)
        mounted = subprocess.run(["getfattr", "-n", "user.dropbox.content_hash", "--only-values", "--absolute-names",
                                  str(shared_mount / name)], capture_output=True, text=True, check=True).stdout
        assert local_hash == mounted, name


def test_content_hash_vectors(tmp_path):
    """docs/dropbox-api.md §4; the empty file hashes to SHA-256 of nothing."""
    vectors = {
        b"": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        b"a": "bf5d3affb73efd2ec6c36ad3112dd933efed63c4e1cbffcfa88e2759c144f2d8",
        bytes(4 << 20): "c7e946d101855255d919ef0c70718633adf77d3dfb3adeeecf5d0cb4e951be58",
        bytes((4 << 20) + 1): "14a4d47f23a30177885d9820122f17d2d3a55fe63f7f5c27b95f689e0b2accd6",
    }
    paths = []
    for i, content in enumerate(vectors):
        path = tmp_path / f"v{i}"
        path.write_bytes(content)
        paths.append(str(path))
    out = subprocess.run([str(DBX_MOUNT), "content-hash", *paths], capture_output=True, text=True, check=True).stdout
    assert out == "".join(f"{h}  {p}\n" for h, p in zip(vectors.values(), paths))
    # Standard input, like sha256sum.
    piped = subprocess.run([str(DBX_MOUNT), "content-hash", "-"], input=b"a", capture_output=True, check=True).stdout
    assert piped == b"bf5d3affb73efd2ec6c36ad3112dd933efed63c4e1cbffcfa88e2759c144f2d8  -\n"


def test_content_hash_reports_unreadable_files_and_goes_on(tmp_path):
    (tmp_path / "ok").write_bytes(b"a")
    result = subprocess.run([str(DBX_MOUNT), "content-hash", str(tmp_path / "missing"), str(tmp_path),
                             str(tmp_path / "ok")], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stdout == f"bf5d3affb73efd2ec6c36ad3112dd933efed63c4e1cbffcfa88e2759c144f2d8  {tmp_path / 'ok'}\n"
    errors = result.stderr.splitlines()
    assert len(errors) == 2 and "No such file" in errors[0] and "Is a directory" in errors[1]


# --- the manual ----------------------------------------------------------------------------------

MAN = REPO / "man" / "dbx-mount.1"


@pytest.mark.skipif(not shutil.which("man") and not os.environ.get("CI"), reason="man is not installed")
def test_man_page_renders_without_warnings():
    result = subprocess.run(["man", "--warnings", "-l", str(MAN)], capture_output=True, text=True,
                            env=dict(os.environ, MANWIDTH="80", MANPAGER="cat", PAGER="cat"))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "content-hash" in result.stdout and "NOTIFY_SOCKET" in result.stdout


def test_man_page_and_readme_cover_every_option_of_help():
    man = MAN.read_text().replace("\\-", "-")
    readme = (REPO / "README.md").read_text()
    help_text = subprocess.run([str(DBX_MOUNT), "mount", "--help"], capture_output=True, text=True).stdout
    flags = {word.strip(",") for word in help_text.split() if word.startswith("--")} - {"--help", "--version"}
    assert flags and not [f for f in flags if f not in man or f not in readme]
    source = (REPO / "Sources" / "DBXMount" / "Mount" / "MountOptionList.swift").read_text()
    settings = source.split("settingNames: Set<String> = [", 1)[1].split("]", 1)[0]
    names = [n.strip().strip('"') for n in settings.replace("\n", " ").split(",") if n.strip()]
    assert names and not [n for n in names if n not in man or n not in readme]
    top = subprocess.run([str(DBX_MOUNT), "--help"], capture_output=True, text=True).stdout
    for subcommand in ["mount", "status", "pin", "unpin", "auth", "whoami", "logout", "content-hash"]:
        assert subcommand in top and subcommand in man and subcommand in readme
