"""issue 15: the first listing runs as parallel subtree listings while the served tree changes at
random (files created, rewritten, deleted and renamed, folders created, deleted and replaced by
files); once the change feed has caught up, the mount equals the tree, for several seeds."""
import os
import random
import shutil
import subprocess
import threading
import time

import pytest

from conftest import Emulator, Mount, assert_same_bytes, mount_status, wait_until_listed


def tree(root):
    """Every path below root with a file's bytes (None for a folder)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            found[os.path.relpath(os.path.join(folder, d), root)] = None
        for f in files:
            path = os.path.join(folder, f)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = handle.read()
    return found


def two_level_tree(served, tops, subs, files):
    """`d<N>/s<M>/f<I>.txt` holding `N/M/I`: top folders that each become a subtree listing."""
    for d in range(tops):
        for s in range(subs):
            folder = served / f"d{d}" / f"s{s}"
            folder.mkdir(parents=True)
            for i in range(files):
                (folder / f"f{i}.txt").write_text(f"{d}/{s}/{i}\n")
    return served


def walk_meanwhile(mountpoint, stop):
    """A reader walking ahead of the first listing: it lists folders on its own or waits for the
    listing, and the kernel keeps what it read, which the end of the listing must correct."""
    while not stop.is_set():
        try:
            for _ in os.walk(mountpoint):
                if stop.is_set():
                    break
        except OSError:
            pass
        time.sleep(0.05)


def churn(served, rng, stop):
    n = 0
    while not stop.is_set():
        n += 1
        folders = sorted(str(p) for p in served.rglob("*") if p.is_dir())
        files = sorted(str(p) for p in served.rglob("*") if p.is_file())
        action = rng.randrange(7)
        try:
            if action == 0 and folders:
                with open(os.path.join(rng.choice(folders), f"new{n}.txt"), "w") as f:
                    f.write(f"new {n}\n")
            elif action == 1 and files:
                with open(rng.choice(files), "w") as f:
                    f.write(f"rewritten {n}\n")
            elif action == 2 and files:
                os.unlink(rng.choice(files))
            elif action == 3 and files:
                source = rng.choice(files)
                os.rename(source, source + ".moved")
            elif action == 4:
                os.makedirs(served / f"made{n}" / "inner", exist_ok=True)
                (served / f"made{n}" / "inner" / "x.txt").write_text("x\n")
            elif action == 5 and len(folders) > 2:
                shutil.rmtree(rng.choice(folders), ignore_errors=True)
            elif action == 6 and len(folders) > 2:
                folder = rng.choice(folders)
                shutil.rmtree(folder, ignore_errors=True)
                with open(folder, "w") as f:
                    f.write("a file where a folder was\n")
        except OSError:
            pass   # raced with another change of ours: skip it
        time.sleep(0.01)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_changes_during_the_parallel_listing(tmp_path, seed):
    rng = random.Random(seed)
    served = tmp_path / "served"
    for d in range(12):
        for s in range(rng.randrange(1, 4)):
            folder = served / f"d{d}" / f"s{s}"
            folder.mkdir(parents=True)
            for i in range(rng.randrange(3, 30)):
                (folder / f"f{i}.txt").write_text(f"{d}/{s}/{i}\n")
    # Small pages and a round trip per call keep the listing running while the tree changes.
    emulator = Emulator(served, "--latency-ms", "30", "--page-size", "5")
    stop = threading.Event()
    changer = threading.Thread(target=churn, args=(served, rng, stop))
    changer.start()
    mount = None
    walker = None
    try:
        mount = Mount(emulator, tmp_path / "mnt", "--listing-concurrency", "4")
        if seed % 2:   # odd seeds also walk the mount while it lists
            walker = threading.Thread(target=walk_meanwhile, args=(mount.mountpoint, stop))
            walker.start()
        time.sleep(2.5)   # the listing runs meanwhile
        stop.set()
        changer.join()
        if walker:
            walker.join()
        expected = tree(served)
        deadline = time.monotonic() + 20

        def settled():
            # Until the feed has caught up, the mount may still show a file the tree no longer
            # has, and reading it fails: that is the catch-up under way, not the answer.
            try:
                return tree(mount.mountpoint)
            except OSError:
                return None

        seen = settled()
        while seen != expected and time.monotonic() < deadline:
            time.sleep(0.5)
            seen = settled()
        seen = tree(mount.mountpoint)
        missing = sorted(set(expected) - set(seen))[:5]
        extra = sorted(set(seen) - set(expected))[:5]
        assert seen == expected, f"seed {seed}: missing {missing}, extra {extra}"
        assert_same_bytes(served, mount.mountpoint)
    finally:
        stop.set()
        changer.join()
        if walker:
            walker.join()
        if mount:
            mount.unmount()
        emulator.stop()


def test_the_listing_degrades_gracefully_under_dropbox_rate_limit(tmp_path):
    """Parallel subtree listings make Dropbox answer 429 (too_many_requests) when they exceed its
    rate; the client waits as Retry-After says and retries, so `find` right after mounting sees
    the whole tree and no error."""
    served = two_level_tree(tmp_path / "served", tops=16, subs=3, files=12)
    # Pages of 5 entries: about 170 list calls in all, against 25 admitted per second.
    emulator = Emulator(served, "--latency-ms", "5", "--page-size", "5", "--rate-limit", "25")
    mount = None
    try:
        mount = Mount(emulator, tmp_path / "mnt", "--listing-concurrency", "8")
        result = subprocess.run(["find", "."], cwd=mount.mountpoint, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
        expected = subprocess.run(["find", "."], cwd=served, capture_output=True, text=True).stdout
        assert sorted(result.stdout.splitlines()) == sorted(expected.splitlines())
        stats = emulator.stats()
        assert stats["rate_limited"] > 0, "the listing stayed under the limit: the test proves nothing"
        assert_same_bytes(served, mount.mountpoint)
    finally:
        if mount:
            mount.unmount()
        emulator.stop()


def test_a_path_named_right_after_mounting_is_answered_before_its_subtree_is_listed(tmp_path):
    """`stat`, `ls` and `cat` of a path two folders deep, right after mounting, while the first
    listing is still listing the subtree around it: each name is asked of Dropbox alone
    (get_metadata) and the folder read is listed alone, instead of each level waiting for the
    subtree listing (up to two seconds a level). What they show is the served tree."""
    served = two_level_tree(tmp_path / "served", tops=10, subs=10, files=40)
    # Pages of 5 entries at 50 ms: each top folder's subtree (410 entries) takes 82 pages, about
    # four seconds, all ten at once.
    emulator = Emulator(served, "--latency-ms", "50", "--page-size", "5")
    mount = None
    try:
        mount = Mount(emulator, tmp_path / "mnt", "--listing-concurrency", "10")
        deadline = time.monotonic() + 30
        while (mount_status(mount.mountpoint).get("first_listing") or {}).get("listings_started", 0) < 11:
            assert time.monotonic() < deadline, "the subtree listings did not start"
            time.sleep(0.02)
        deep = mount.mountpoint / "d7" / "s3"
        assert deep.is_dir()
        assert sorted(os.listdir(deep)) == sorted(os.listdir(served / "d7" / "s3"))
        assert (deep / "f17.txt").read_text() == "7/3/17\n"
        assert mount_status(mount.mountpoint)["change_feed"]["state"] != "live", \
            "the first listing had ended: the test proves nothing"
        requests = emulator.stats()["requests"]
        # d7/s3 by name, then s3 listed alone: the mounted folder, the ten subtrees and s3.
        assert requests.get("files/get_metadata", 0) >= 1, requests
        assert requests.get("files/list_folder", 0) <= 12, requests
        wait_until_listed(mount.mountpoint)
        # Names and sizes (reading 4,000 files at 50 ms each would take minutes).
        def sizes(root):
            return sorted(subprocess.run(["find", ".", "-printf", "%p %s %y\n"], cwd=root, capture_output=True,
                                         text=True, check=True).stdout.splitlines())
        assert sizes(mount.mountpoint) == sizes(served)
    finally:
        if mount:
            mount.unmount()
        emulator.stop()
