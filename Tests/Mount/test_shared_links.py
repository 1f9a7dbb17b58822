"""Mounting a Dropbox shared link: the mount equals the linked folder of the served tree (diff -r,
find, stat), follows changes by TTL, takes a password from a file, mounts a file link on a file,
reads correctly from a server that ignores Range, and refuses bad links in one line."""
import hashlib
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import DBX_MOUNT, TOKEN, Emulator, Mount, assert_same_bytes, is_mounted, stop_mount

MiB = 1 << 20


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "served"
    (root / "Course" / "Week 1" / "slides").mkdir(parents=True)
    (root / "Course" / "Week 2").mkdir(parents=True)
    (root / "Private").mkdir()
    (root / "Private" / "diary.txt").write_text("not shared\n")
    (root / "Course" / "README.md").write_text("# Course\n")
    (root / "Course" / "Week 1" / "notes ü.txt").write_text("notes\n")
    for i in range(40):
        (root / "Course" / "Week 1" / "slides" / f"slide-{i:02}.txt").write_text(f"slide {i}\n" * (i + 1))
    (root / "Course" / "Week 2" / "data.bin").write_bytes(os.urandom(6 * MiB + 123))
    (root / "Course" / "empty.txt").write_bytes(b"")
    return root


@pytest.fixture
def emulator(tree):
    emulator = Emulator(tree)
    yield emulator
    emulator.stop()


def publish(emulator, path, password=None, expires=None):
    body = {"path": path}
    if password is not None:
        body["password"] = password
    if expires is not None:
        body["expires"] = expires
    request = urllib.request.Request(emulator.url + "/__admin/shared_links", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)["url"]


def set_knobs(emulator, **knobs):
    request = urllib.request.Request(emulator.url + "/__admin/knobs", data=json.dumps(knobs).encode(), method="POST")
    urllib.request.urlopen(request, timeout=10).read()


def run_mount(emulator, *args, timeout=30):
    """dbx-mount run to completion (for the refusals): its exit status and stderr."""
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
               DBX_NOTIFY_URL=emulator.url)
    result = subprocess.run([str(DBX_MOUNT), "-f", "--no-cache", *args], env=env, capture_output=True, text=True,
                            timeout=timeout)
    return result.returncode, result.stderr.strip()


def find_listing(root):
    out = subprocess.run(["find", ".", "-printf", "%y %s %p\n"], cwd=root, capture_output=True, text=True, check=True)
    return sorted(out.stdout.splitlines())


def test_a_mounted_folder_link_equals_the_linked_folder(emulator, tree, tmp_path):
    url = publish(emulator, "/Course")
    m = Mount(emulator, tmp_path / "mnt", "--no-cache", url)
    try:
        assert_same_bytes(tree / "Course", m.mountpoint)
        assert find_listing(m.mountpoint) == find_listing(tree / "Course")
        assert not (m.mountpoint / "Private").exists(), "only the linked folder is shown"
        for rel in ("README.md", "Week 2/data.bin", "Week 1/notes ü.txt"):
            local, mounted = os.stat(tree / "Course" / rel), os.stat(m.mountpoint / rel)
            assert (mounted.st_size, int(mounted.st_mtime)) == (local.st_size, int(local.st_mtime)), rel
        # Reads at an offset come through Range; the whole file hashes the same.
        data = (tree / "Course" / "Week 2" / "data.bin").read_bytes()
        with open(m.mountpoint / "Week 2" / "data.bin", "rb") as f:
            f.seek(5 * MiB)
            assert f.read(4096) == data[5 * MiB:5 * MiB + 4096]
        # Dropbox's own attributes come through a link as through an account.
        xattrs = subprocess.run(["getfattr", "-d", str(m.mountpoint / "README.md")], capture_output=True, text=True,
                                check=True).stdout
        assert "user.dropbox.rev=" in xattrs and "user.dropbox.content_hash=" in xattrs, xattrs
        with pytest.raises(OSError) as error:
            (m.mountpoint / "new.txt").write_text("x")
        assert error.value.errno == 30  # EROFS
        status = json.loads(subprocess.run([str(DBX_MOUNT), "status", "--json", str(m.mountpoint)], capture_output=True,
                                           text=True, check=True).stdout)
        mounted = status[0] if isinstance(status, list) else status
        assert mounted["change_feed"]["state"] == "none"
        assert mounted["source"].startswith("https://www.dropbox.com/scl/fo/") and "rlkey" not in mounted["source"]
        with open("/proc/mounts") as mounts:
            assert not any("rlkey" in line for line in mounts), "the link's secret part stays out of /proc/mounts"
        # Nor in the process's arguments, which every local user can read.
        cmdline = Path(f"/proc/{m.process.pid}/cmdline").read_bytes()
        assert b"scl/fo/" in cmdline and b"rlkey" not in cmdline, cmdline
    finally:
        m.unmount()


def test_changes_show_once_the_ttl_ends(emulator, tree, tmp_path):
    url = publish(emulator, "/Course")
    m = Mount(emulator, tmp_path / "mnt", "--no-cache", "--ttl", "1", url)
    try:
        assert (m.mountpoint / "README.md").read_text() == "# Course\n"
        (tree / "Course" / "README.md").write_text("# Course, second edition\n")
        (tree / "Course" / "Week 2" / "late.txt").write_text("late\n")
        (tree / "Course" / "empty.txt").unlink()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            names = set(os.listdir(m.mountpoint)) | set(os.listdir(m.mountpoint / "Week 2"))
            if "late.txt" in names and "empty.txt" not in names:
                break
            time.sleep(0.3)
        assert_same_bytes(tree / "Course", m.mountpoint)
    finally:
        m.unmount()


def test_a_password_protected_link_needs_its_password(emulator, tree, tmp_path):
    url = publish(emulator, "/Course", password="open sesame")
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("open sesame\n")
    bad.write_text("open says me\n")
    (tmp_path / "mnt").mkdir()
    code, err = run_mount(emulator, url, str(tmp_path / "mnt"))
    assert code == 1 and len(err.splitlines()) == 1 and "--link-password-file" in err, err
    code, err = run_mount(emulator, "--link-password-file", str(bad), url, str(tmp_path / "mnt"))
    assert code == 1 and len(err.splitlines()) == 1 and "wrong password" in err, err
    assert "open" not in err
    # The fstab form: the URL as the source, the password file as a mount option.
    m = Mount(emulator, tmp_path / "mnt", "--no-cache", "-o", f"link_password_file={good}", "dropbox:" + url)
    try:
        assert_same_bytes(tree / "Course", m.mountpoint)
    finally:
        m.unmount()


def test_a_file_link_mounts_on_a_file(emulator, tree, tmp_path):
    url = publish(emulator, "/Course/Week 2/data.bin")
    target = tmp_path / "data.bin"
    target.write_bytes(b"")
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
               DBX_NOTIFY_URL=emulator.url, XDG_RUNTIME_DIR=str(tmp_path))
    process = subprocess.Popen([str(DBX_MOUNT), "-f", "--no-cache", url, str(target)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not is_mounted(target):
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "did not mount"
            time.sleep(0.05)
        local = (tree / "Course" / "Week 2" / "data.bin").read_bytes()
        assert os.stat(target).st_size == len(local)
        assert hashlib.sha256(target.read_bytes()).hexdigest() == hashlib.sha256(local).hexdigest()
        with open(target, "rb") as f:
            f.seek(3 * MiB + 5)
            assert f.read(1000) == local[3 * MiB + 5:3 * MiB + 1005]
        assert "user.dropbox.rev" in subprocess.run(["getfattr", "-d", str(target)], capture_output=True, text=True).stdout
    finally:
        stop_mount(target, process)
    # The other way round, one line each: a file link on a folder, a folder link on a file.
    (tmp_path / "mnt").mkdir()
    code, err = run_mount(emulator, url, str(tmp_path / "mnt"))
    assert code == 1 and len(err.splitlines()) == 1 and "is to a file (data.bin), not a folder" in err, err
    code, err = run_mount(emulator, publish(emulator, "/Course"), str(target))
    assert code == 1 and len(err.splitlines()) == 1 and "not a directory" in err, err


def test_reads_are_right_when_the_server_ignores_range(emulator, tree, tmp_path):
    url = publish(emulator, "/Course")
    set_knobs(emulator, link_range=False)
    m = Mount(emulator, tmp_path / "mnt", "--no-cache", url)
    try:
        data = (tree / "Course" / "Week 2" / "data.bin").read_bytes()
        out = subprocess.run(["dd", f"if={m.mountpoint / 'Week 2' / 'data.bin'}", "bs=64k", "skip=80", "count=3",
                              "status=none"], capture_output=True, check=True).stdout
        assert out == data[80 * 65536:83 * 65536]
        assert_same_bytes(tree / "Course", m.mountpoint)
    finally:
        m.unmount()
        set_knobs(emulator, link_range=True)


def test_bad_links_are_refused_in_one_line(emulator, tmp_path):
    (tmp_path / "mnt").mkdir()
    url = publish(emulator, "/Course")
    expired = publish(emulator, "/Private", expires=int(time.time()) - 60)
    password_file = tmp_path / "pw"
    password_file.write_text("x\n")
    cases = [
        ([url.replace("rlkey=", "rlkey=zz")], 1, "no such shared link"),
        ([expired], 1, "no such shared link, or it has expired"),
        (["https://www.dropbox.com"], 64, "not a shared link"),
        (["https://www.dropbox.com/scl/fo/a b"], 64, "not a shared link"),
        (["--link-password-file", str(password_file), "/Course"], 64, "goes with a shared link"),
        (["--link-password-file", str(tmp_path / "absent"), url], 64, "cannot read the link password file"),
    ]
    for args, expected_code, words in cases:
        code, err = run_mount(emulator, *args, str(tmp_path / "mnt"))
        assert code == expected_code and len(err.splitlines()) == 1 and words in err, (args, code, err)
        assert "rlkey" not in err, "the link's secret part stays out of messages"


def test_thumbnails_come_through_the_link_without_downloading_a_photo(tmp_path):
    from test_thumbnails import gio_thumbnail, png_image

    album = tmp_path / "served" / "Album"
    album.mkdir(parents=True)
    for i in range(12):
        (album / f"IMG_{i:02d}.png").write_bytes(png_image(96, 64, i))
    (album / "notes.txt").write_text("not an image\n")
    emulator = Emulator(tmp_path / "served")
    try:
        url = publish(emulator, "/Album", password="pw")
        (tmp_path / "pw").write_text("pw\n")
        m = Mount(emulator, tmp_path / "mnt", "--no-cache", "--thumbnails", "--link-password-file", str(tmp_path / "pw"), url)
        try:
            assert len(os.listdir(m.mountpoint)) == 13
            cache_home = tmp_path / "cache"     # the mount's XDG_CACHE_HOME (conftest)
            for flavor in ("normal", "large", "x-large"):
                assert len(list((cache_home / "thumbnails" / flavor).glob("*.png"))) == 12, flavor
            found, valid = gio_thumbnail(m.mountpoint / "IMG_03.png", cache_home)
            assert found and valid, found
            requests = emulator.stats()["requests"]
            assert requests.get("files/get_thumbnail_v2", 0) == 36, requests
            assert requests.get("sharing/get_shared_link_file", 0) == 0, "no photo was downloaded"
        finally:
            m.unmount()
    finally:
        emulator.stop()


def test_a_pinned_folder_of_a_link_is_fetched_kept_and_refreshed(emulator, tree, tmp_path, monkeypatch):
    from test_pins import dbx, pin_status, wait_until

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    url = publish(emulator, "/Course")
    m = Mount(emulator, tmp_path / "mnt", "--no-cache", "--ttl", "1", "--block-cache-dir", str(tmp_path / "blocks"), url)
    try:
        # No change feed lists the folders below a pin on a link mount: the pin lists them itself.
        dbx("pin", m.mountpoint / "Week 1")
        wait_until(lambda: any(p["complete"] for p in pin_status(m.mountpoint)), 30, "the pin to complete")
        pin = pin_status(m.mountpoint)[0]
        assert pin["files"] == 41 and pin["bytes_done"] == pin["bytes_total"], pin
        # A new rev is fetched again once the folder's TTL has passed.
        slide = tree / "Course" / "Week 1" / "slides" / "slide-07.txt"
        slide.write_text("rewritten\n")
        wait_until(lambda: (m.mountpoint / "Week 1" / "slides" / "slide-07.txt").read_text() == "rewritten\n", 20,
                   "the new rev")
        wait_until(lambda: all(p["complete"] for p in pin_status(m.mountpoint)), 30, "the pin to hold the new rev")
        # Whole in the block cache: read with the emulator gone.
        emulator.stop()
        assert_same_bytes(tree / "Course" / "Week 1", m.mountpoint / "Week 1", timeout=60)
    finally:
        m.unmount()
