"""issue 8: the fault suite. Real mounts against an emulator that fails requests, cuts download
bodies short, stops and comes back. Bounds are generous on purpose: these run on loaded CI
machines, so they assert outcomes and "never hangs", not speed."""
import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Emulator, Mount, assert_same_bytes, free_port, start_on

MiB = 1 << 20


def write_gib_tree(root: Path) -> int:
    """About 1 GiB: a few large files and many small ones, every MiB distinct (so a misplaced range
    cannot match), generated from one seeded 1 MiB pool so it takes seconds, not minutes."""
    rng = random.Random(8)
    pool = rng.randbytes(MiB)
    total = 0
    for name, mib in [("large-a.bin", 256), ("large-b.bin", 256), ("large-c.bin", 160)]:
        with open(root / name, "wb") as f:
            for i in range(mib):
                f.write(name.encode() + i.to_bytes(8, "little") + pool[len(name) + 8:])
        total += mib * MiB
    # The odd tail of a large file: not a multiple of any part or block size.
    with open(root / "large-c.bin", "ab") as f:
        f.write(pool[:12345])
    total += 12345
    for d in range(16):
        folder = root / f"small-{d:02d}"
        folder.mkdir()
        for i in range(128):
            size = rng.choice([0, 1, 100, 4096, 65537, 200_000, 1_000_000])
            header = f"{d}/{i}:".encode()
            start = rng.randrange(MiB)
            body = (header + pool[start:] + pool)[:size]
            (folder / f"f{i:03d}.bin").write_bytes(body)
            total += size
    return total


@pytest.fixture(scope="module")
def gib_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults-gib")
    size = write_gib_tree(root)
    return root, size


def test_diff_of_a_gib_tree_passes_with_failures_and_cut_bodies(gib_tree, tmp_path):
    root, size = gib_tree
    assert 900 * MiB < size < 1100 * MiB
    emulator = Emulator(root, "--fail-rate", "0.10", "--truncate-rate", "0.02", "--seed", "8")
    try:
        m = Mount(emulator, tmp_path / "mnt")
        try:
            started = time.monotonic()
            assert_same_bytes(root, m.mountpoint, timeout=1200)
            elapsed = time.monotonic() - started
            print(f"diff -r of {size} bytes under 10% failures + 2% cut bodies: {elapsed:.1f} s")
        finally:
            m.unmount()
    finally:
        emulator.stop()


@pytest.fixture
def outage_tree(tmp_path):
    root = tmp_path / "served"
    (root / "Docs").mkdir(parents=True)
    for i in range(20):
        (root / "Docs" / f"note-{i:02d}.txt").write_bytes(b"note %d\n" % i * 1000)
    (root / "Docs" / "read-before.bin").write_bytes(random.Random(1).randbytes(3 * MiB + 7))
    (root / "Docs" / "unread.bin").write_bytes(random.Random(2).randbytes(2 * MiB + 1))
    return root


def test_outage_lists_cached_folders_fails_uncached_reads_and_recovers(outage_tree, tmp_path):
    root = outage_tree
    port = free_port()
    emulator = start_on(root, port)
    try:
        # A short TTL, so the listings are stale (and revalidated against a dead server) during
        # the outage: the cached answer must still be served.
        m = Mount(emulator, tmp_path / "mnt", "--ttl", "1", "-o", "deadline=20")
        try:
            docs = m.mountpoint / "Docs"
            listed = sorted(os.listdir(docs))
            assert listed == sorted(os.listdir(root / "Docs"))
            assert (docs / "read-before.bin").read_bytes() == (root / "Docs" / "read-before.bin").read_bytes()

            emulator.stop()
            # Past the TTL, and past the change feed noticing the outage (its longpoll retries
            # for a few seconds before it stops vouching for the tree).
            time.sleep(8)

            started = time.monotonic()
            assert sorted(os.listdir(docs)) == listed
            assert os.stat(docs / "unread.bin").st_size == 2 * MiB + 1
            print(f"ls of a cached folder during the outage: {time.monotonic() - started:.2f} s")

            started = time.monotonic()
            result = subprocess.run(["cat", str(docs / "unread.bin")], capture_output=True, timeout=300)
            failed_after = time.monotonic() - started
            assert result.returncode != 0
            assert b"Input/output error" in result.stderr
            assert failed_after < 60, f"cat of an unread file took {failed_after:.1f} s to fail"
            print(f"cat of an unread file during the outage failed after {failed_after:.2f} s")

            emulator = start_on(root, port)
            started = time.monotonic()
            # Back without a remount: the same files read again, and a file never read before too.
            deadline = time.monotonic() + 60
            while True:
                result = subprocess.run(["cat", str(docs / "unread.bin")], capture_output=True, timeout=300)
                if result.returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert result.returncode == 0, result.stderr
            assert result.stdout == (root / "Docs" / "unread.bin").read_bytes()
            print(f"reads restored {time.monotonic() - started:.2f} s after the restart")
            assert sorted(os.listdir(docs)) == listed
            (root / "Docs" / "new-after-restart.txt").write_bytes(b"new\n")
            deadline = time.monotonic() + 60
            while "new-after-restart.txt" not in os.listdir(docs) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert (docs / "new-after-restart.txt").read_bytes() == b"new\n"
        finally:
            m.unmount()
    finally:
        emulator.stop()
