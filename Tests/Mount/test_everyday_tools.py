"""The tools the brief names besides ls and find: rsync -a, cp -a, tar, grep -r and du work on a
mount as on the served folder, and a backup made with rsync, restic or borg stays up to date across
mounts without reading the files again."""
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Emulator, Mount, assert_same_bytes, file_listing, required_tool, run, wait_until_listed


def assert_same_tree(copy: Path, served: Path):
    assert_same_bytes(served, copy)
    # File sizes and modification times came across too (`-a` keeps them), not only the bytes.
    assert file_listing(copy) == file_listing(served)


@pytest.fixture
def scratch(tmp_path):
    """A folder for copies of the served tree (about 270 MiB each), removed after the test."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    yield folder
    shutil.rmtree(folder)


def transferred_files(itemized: str) -> list[str]:
    """The files an `rsync --itemize-changes` run sent: lines starting `>f`."""
    return [line for line in itemized.splitlines() if line.startswith(">f")]


def test_rsync_a_backs_up_the_tree_and_a_second_run_on_a_new_mount_sends_nothing(served, shared_mount, mount, scratch):
    backup = scratch / "backup"
    # A folder's time is final once the folders below it are listed (README, Attributes).
    wait_until_listed(shared_mount)
    run("rsync", "-a", f"{shared_mount}/", f"{backup}/")
    assert_same_tree(backup, served)
    # rsync's quick check compares size and modification time: the same on the same mount...
    assert transferred_files(run("rsync", "-a", "--itemize-changes", f"{shared_mount}/", f"{backup}/")) == []
    # ...and on a mount made afresh, so a nightly backup does not copy the whole Dropbox again,
    # nor set every folder's time again: a folder shows the newest file below it, on any mount.
    again = mount()
    wait_until_listed(again)
    assert run("rsync", "-a", "--itemize-changes", f"{again}/", f"{backup}/") == ""


def expected_folder_times(served: Path) -> dict[str, int]:
    """Each folder's time as the mount shows it: the newest mtime of the files below it, or
    with none below, that of the nearest folder above that has one."""
    newest: dict[str, int | None] = {}
    for folder, folders, files in os.walk(served, topdown=False):   # children before their folder
        times = [int(os.stat(os.path.join(folder, f)).st_mtime) for f in files]
        times += [newest[os.path.join(folder, d)] for d in folders if newest.get(os.path.join(folder, d)) is not None]
        newest[folder] = max(times, default=None)
    shown: dict[str, int] = {}
    for folder, _, _ in os.walk(served):   # a folder before its children
        shown[folder] = newest[folder] if newest[folder] is not None else shown[os.path.dirname(folder)]
    return {os.path.relpath(folder, served): mtime for folder, mtime in shown.items()}


def test_a_folder_shows_the_newest_file_below_it(served, shared_mount):
    expected = expected_folder_times(served)
    wait_until_listed(shared_mount)
    shown = {rel: int(os.stat(shared_mount / rel).st_mtime) for rel in expected}
    assert shown == expected
    # Folders with files, with only folders, and empty; some older than the rest.
    assert expected["Photos"] == 1_650_000_000 and expected["Photos/Album"] == 1_600_000_000
    assert expected["empty-folder"] == expected["."]


def test_rsync_a_sends_a_file_whose_bytes_it_lacks(served, shared_mount, scratch):
    backup = scratch / "backup"
    run("rsync", "-a", f"{shared_mount}/d1/", f"{backup}/")
    (backup / "d2" / "middle.txt").write_bytes(b"changed locally\n")
    sent = transferred_files(run("rsync", "-a", "--itemize-changes", f"{shared_mount}/d1/", f"{backup}/"))
    assert [line.split(" ", 1)[1] for line in sent] == ["d2/middle.txt"]
    assert (backup / "d2" / "middle.txt").read_bytes() == (served / "d1" / "d2" / "middle.txt").read_bytes()


def test_cp_a_copies_the_tree(served, shared_mount, scratch):
    copy = scratch / "copy"
    run("cp", "-a", str(shared_mount), str(copy))
    assert_same_tree(copy, served)


def test_tar_archives_the_tree(served, shared_mount, scratch):
    archive = scratch / "tree.tar"
    run("tar", "-cf", str(archive), "-C", str(shared_mount), ".")
    unpacked = scratch / "unpacked"
    unpacked.mkdir()
    run("tar", "-xf", str(archive), "-C", str(unpacked))
    assert_same_tree(unpacked, served)


def test_grep_r_finds_what_it_finds_in_the_served_folder(served, shared_mount):
    def matches(root: Path) -> list[str]:
        # -I skips binary files (which grep must still open and start reading to recognise).
        found = subprocess.run(["grep", "-r", "-n", "-I", "down", "."], cwd=root, capture_output=True, text=True)
        assert found.returncode == 0, found.stderr
        return sorted(found.stdout.splitlines())
    local = matches(served)
    assert local == ["./d1/d2/d3/d4/d5/d6/bottom.txt:1:six folders down", "./d1/d2/middle.txt:1:two down"]
    assert matches(shared_mount) == local


def test_du_counts_the_files_and_their_space(served, shared_mount):
    def files_apparent(root: Path) -> dict[str, str]:
        sizes = {}
        for line in run("du", "-a", "-b", "--apparent-size", ".", cwd=root).splitlines():
            size, path = line.split("\t", 1)
            if os.path.isfile(root / path):
                sizes[path] = size
        return sizes
    assert files_apparent(shared_mount) == files_apparent(served)
    assert run("du", "-s", "--inodes", ".", cwd=shared_mount) == run("du", "-s", "--inodes", ".", cwd=served)
    # `du` without --apparent-size adds st_blocks: a file takes its size in 512-byte blocks,
    # rounded up, as on a disk without holes, so "how much would this take locally" is answered.
    for line in run("find", ".", "-type", "f", "-printf", "%b %s %P\\n", cwd=shared_mount).splitlines():
        blocks, size, path = line.split(" ", 2)
        assert int(blocks) == (int(size) + 511) // 512, path
    total_kib = int(run("du", "-s", "-k", ".", cwd=shared_mount).split()[0])
    assert total_kib * 1024 >= sum(p.stat().st_size for p in served.rglob("*") if p.is_file())


def inode_numbers(root: Path) -> dict[str, int]:
    """Every entry's st_ino below `root`, by relative path, checked against its d_ino."""
    numbers = {".": os.lstat(root).st_ino}
    for folder, folders, files in os.walk(root):
        with os.scandir(folder) as entries:
            for entry in entries:
                rel = os.path.relpath(entry.path, root)
                numbers[rel] = entry.stat(follow_symlinks=False).st_ino
                assert entry.inode() == numbers[rel], f"readdir's d_ino of {rel} is stat's st_ino"
    return numbers


def test_every_mount_shows_the_same_inode_numbers(served, shared_mount, emulator, mount, tmp_path):
    # Backup tools (restic, borg) take a file whose inode number changed for a changed file and
    # read it again: numbers that changed with every mount made each backup read the whole Dropbox.
    wait_until_listed(shared_mount)
    shown = inode_numbers(shared_mount)
    assert shown.keys() == inode_numbers(served).keys()
    assert shown["."] == 1
    assert len(set(shown.values())) == len(shown), "no two entries share a number"
    # A new mount that lists afresh, and one that starts from the tree a mount before it saved.
    fresh = mount()
    wait_until_listed(fresh)
    assert inode_numbers(fresh) == shown
    cache = tmp_path / "saved-tree-cache"
    first = Mount(emulator, tmp_path / "remounted", cache_home=cache)
    try:
        wait_until_listed(first.mountpoint)
    finally:
        first.unmount()
    second = Mount(emulator, tmp_path / "remounted", "--log-level", "info", cache_home=cache)
    try:
        assert inode_numbers(second.mountpoint) == shown
        assert "loaded saved tree" in second.log()
    finally:
        second.unmount()


def test_restic_backs_up_again_after_a_remount_without_reading_a_file(served, emulator, tmp_path):
    restic = required_tool("restic", "restic")
    env = dict(os.environ, RESTIC_REPOSITORY=str(tmp_path / "repository"), RESTIC_PASSWORD="not a secret",
               RESTIC_CACHE_DIR=str(tmp_path / "restic-cache"))
    subprocess.run([restic, "init", "--quiet"], env=env, check=True, capture_output=True)
    folders = ["Photos", "names", "d1", "old.txt"]
    expected_files = sum(1 for f in folders for p in [served / f, *(served / f).rglob("*")] if p.is_file())

    def backup() -> dict:
        # The same mount point each time: restic compares with the last snapshot of the same paths.
        m = Mount(emulator, tmp_path / "mnt", cache_home=tmp_path / "cache")
        try:
            wait_until_listed(m.mountpoint)
            emulator.reset_stats()
            done = subprocess.run([restic, "backup", "--json", *folders], cwd=m.mountpoint, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            summary = next(json.loads(line) for line in done.stdout.splitlines() if '"summary"' in line)
            summary["downloaded"] = emulator.stats().get("download_bytes", 0)
            return summary
        finally:
            m.unmount()

    first = backup()
    assert first["files_new"] == expected_files and first["downloaded"] > 0
    again = backup()
    assert (again["files_new"], again["files_changed"], again["files_unmodified"]) == (0, 0, expected_files)
    assert again["downloaded"] == 0, "no file read again"


def test_borg_backs_up_again_after_a_remount_reading_only_the_newest_file(tmp_path):
    borg = required_tool("borg", "borgbackup")
    # Files of distinct times: borg never keeps the newest file (by ctime) of a backup in its
    # files cache, against changes within one timestamp's tick, and reads it again each time;
    # every file within the newest second would be read again, whatever the mount showed.
    served = tmp_path / "served"
    (served / "a" / "b").mkdir(parents=True)
    rng = random.Random(7)
    files = [served / "a" / f"f{i}.bin" for i in range(12)] + [served / "a" / "b" / f"g{i}.bin" for i in range(4)]
    for hour, path in enumerate(files):
        path.write_bytes(rng.randbytes(20_000))
        os.utime(path, (1_600_000_000 + hour * 3600,) * 2)
    emulator = Emulator(served)
    env = dict(os.environ, BORG_REPO=str(tmp_path / "repository"), BORG_BASE_DIR=str(tmp_path / "borg-home"),
               BORG_PASSPHRASE="", BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK="yes")
    try:
        subprocess.run([borg, "init", "--encryption", "none"], env=env, check=True, capture_output=True)

        def backup(name: str) -> tuple[list[str], int]:
            m = Mount(emulator, tmp_path / "mnt", cache_home=tmp_path / "cache")
            try:
                wait_until_listed(m.mountpoint)
                emulator.reset_stats()
                # --list with A and M: the files borg read (added or modified); unchanged ones are not listed.
                done = subprocess.run([borg, "create", "--list", "--filter", "AM", f"::{name}", "a"], cwd=m.mountpoint,
                                      env=env, capture_output=True, text=True, timeout=300)
                assert done.returncode == 0, done.stderr
                read = sorted(line.split(" ", 1)[1] for line in done.stderr.splitlines() if line[:2] in ("A ", "M "))
                return read, emulator.stats().get("download_bytes", 0)
            finally:
                m.unmount()

        first, downloaded = backup("first")
        assert len(first) == len(files) and downloaded == 20_000 * len(files)
        again, downloaded = backup("again")
        assert again == ["a/b/g3.bin"], "only the newest file, by borg's own rule"
        assert downloaded == 20_000
    finally:
        emulator.stop()
