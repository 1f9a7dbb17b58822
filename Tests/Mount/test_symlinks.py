"""Symbolic links as Dropbox keeps them (a computer that synced a folder with links in it): the
mount shows them as links with their targets, as the served directory has them, never followed
by the mount and never downloaded; tools follow them as they would on a disk."""
import os
import stat
import subprocess
import time

from conftest import Emulator, Mount, run, wait_until_listed


def links_below(root):
    """Every link below `root`, by relative path, with its target."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                found[os.path.relpath(path, root)] = os.readlink(path)
    return found


def test_links_show_as_links_and_tools_follow_them_as_on_a_disk(tmp_path):
    served = tmp_path / "served"
    (served / "app" / "v2").mkdir(parents=True)
    (served / "app" / "v2" / "run.sh").write_text("echo v2\n")
    os.symlink("v2", served / "app" / "current")                       # to a folder
    os.symlink("current/run.sh", served / "app" / "run")               # to a file, through a link
    os.symlink("/nowhere/at/all", served / "app" / "dangling")         # to nothing
    os.symlink("../" * 90 + "etc/hostname", served / "app" / "long")   # 282 bytes: more than a length byte holds
    emulator = Emulator(served)
    m = Mount(emulator, tmp_path / "mnt")
    try:
        wait_until_listed(m.mountpoint)
        mnt = m.mountpoint
        assert links_below(mnt) == links_below(served)
        shown = os.lstat(mnt / "app" / "current")
        assert stat.S_ISLNK(shown.st_mode) and shown.st_size == 2
        # Followed by the kernel, as on a disk: into the folder, and to the file's bytes.
        assert sorted(os.listdir(mnt / "app" / "current")) == ["run.sh"]
        assert (mnt / "app" / "run").read_text() == "echo v2\n"
        assert not os.path.exists(mnt / "app" / "dangling")
        assert sorted(run("find", ".", "-type", "l", cwd=mnt).split()) == sorted(run("find", ".", "-type", "l", cwd=served).split())
        assert run("ls", "-l", "app/current", cwd=mnt).split()[-3:] == ["app/current", "->", "v2"]
        # rsync -a copies the links as links; diff -r follows them on both sides.
        copy = tmp_path / "copy"
        subprocess.run(["rsync", "-a", f"{mnt}/", f"{copy}/"], check=True)
        assert links_below(copy) == links_below(served)
        assert subprocess.run(["diff", "-r", str(served / "app" / "v2"), str(copy / "app" / "current")]).returncode == 0
        # The links' own content was never downloaded: only run.sh, once.
        assert emulator.stats()["requests"].get("files/download", 0) <= 1

        # Pointed elsewhere on Dropbox, the mount follows.
        os.unlink(served / "app" / "current")
        os.symlink("v1", served / "app" / "current")
        deadline = time.monotonic() + 20
        while os.readlink(mnt / "app" / "current") != "v1" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.readlink(mnt / "app" / "current") == "v1"
    finally:
        m.unmount()
        emulator.stop()
