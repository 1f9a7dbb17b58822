"""issue 8: stress. 32 concurrent readers and `find` loops against one mount for a bounded time:
no reader error, no wrong byte, the mount's thread count and RSS stay bounded, and unmounting
afterwards is prompt. Bounds are generous (a loaded 2-core CI machine), never speed targets."""
import os
import random
import subprocess
import threading
import time

import pytest

from conftest import Emulator, Mount

MiB = 1 << 20
READERS = 32
SECONDS = 20


@pytest.fixture(scope="module")
def stress_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("stress")
    rng = random.Random(32)
    pool = rng.randbytes(MiB)
    for i in range(6):
        with open(root / f"big-{i}.bin", "wb") as f:
            for block in range(8):
                f.write(bytes([i, block]) + pool[2:])
    for d in range(10):
        folder = root / f"dir-{d}" / "sub"
        folder.mkdir(parents=True)
        for i in range(30):
            start = rng.randrange(MiB)
            (folder / f"s{i}.txt").write_bytes((f"{d}/{i}".encode() + pool[start:] + pool)[:rng.randrange(1, 300_000)])
    return root


def proc_status(pid: int) -> dict:
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


HEAP_MAX = 64 * MiB


def malloc_arenas(pid: int) -> int:
    """glibc's arenas in use: the main one, plus each thread arena's heap, which glibc maps as a
    64 MiB-aligned, 64 MiB reservation whose used front is read-write and whose rest is
    inaccessible, so two adjacent anonymous mappings that together span exactly 64 MiB."""
    regions = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            anonymous = len(fields) < 6
            regions.append((start, end, fields[1], anonymous))
    heaps = 0
    for (start, end, perms, anonymous), (next_start, next_end, next_perms, next_anonymous) in zip(regions, regions[1:]):
        if (anonymous and next_anonymous and perms == "rw-p" and next_perms == "---p" and start % HEAP_MAX == 0
                and next_start == end and next_end - start == HEAP_MAX):
            heaps += 1
    return 1 + heaps


def test_32_readers_and_find_loops_then_a_prompt_unmount(stress_tree, tmp_path):
    root = stress_tree
    files = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
    source = {f: (root / f).read_bytes() for f in files}
    emulator = Emulator(root)
    try:
        m = Mount(emulator, tmp_path / "mnt")
        pid = m.process.pid
        try:
            mnt = m.mountpoint
            stop = time.monotonic() + SECONDS
            errors, reads, finds = [], [0] * READERS, [0]

            def reader(n: int):
                rng = random.Random(n)
                while time.monotonic() < stop:
                    name = rng.choice(files)
                    want = source[name]
                    try:
                        with open(mnt / name, "rb") as f:
                            # Half the time the kernel's page cache is dropped for the file, so the
                            # reads reach the mount (and Dropbox), not only the kernel.
                            if rng.random() < 0.5:
                                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                            if rng.random() < 0.3:
                                got = f.read()
                                if got != want:
                                    errors.append(f"{name}: whole read differs ({len(got)} of {len(want)} bytes)")
                            else:
                                for _ in range(4):
                                    offset = rng.randrange(max(1, len(want)))
                                    size = rng.choice([1, 4096, 65536, 300_000])
                                    got = os.pread(f.fileno(), size, offset)
                                    if got != want[offset:offset + size]:
                                        errors.append(f"{name}: pread({size}, {offset}) differs")
                    except OSError as e:
                        errors.append(f"{name}: {e}")
                    reads[n] += 1

            def finder():
                while time.monotonic() < stop:
                    result = subprocess.run(["find", str(mnt), "-type", "f"], capture_output=True, text=True,
                                            timeout=120)
                    if result.returncode != 0 or len(result.stdout.splitlines()) != len(files):
                        errors.append(f"find: exit {result.returncode}, {len(result.stdout.splitlines())} files, "
                                      f"{result.stderr[-300:]}")
                    finds[0] += 1

            threads = [threading.Thread(target=reader, args=(n,)) for n in range(READERS)]
            threads += [threading.Thread(target=finder) for _ in range(2)]
            baseline = int(proc_status(pid)["Threads"])
            for t in threads:
                t.start()
            peak_threads, peak_rss_kib = baseline, 0
            while any(t.is_alive() for t in threads):
                status = proc_status(pid)
                peak_threads = max(peak_threads, int(status["Threads"]))
                peak_rss_kib = max(peak_rss_kib, int(status["VmRSS"].split()[0]))
                time.sleep(0.2)
            for t in threads:
                t.join()
            time.sleep(1)
            after = int(proc_status(pid)["Threads"])
            print(f"{sum(reads)} reads and {finds[0]} find runs in {SECONDS} s; threads {baseline} -> peak "
                  f"{peak_threads} -> {after}; peak RSS {peak_rss_kib // 1024} MiB; {len(errors)} errors")
            assert errors == [], errors[:10]
            assert sum(reads) > READERS and finds[0] >= 1
            # Bounded: FUSE's worker pool, curl and the read engine's fixed pools, not one per reader.
            assert peak_threads < 200
            assert after <= peak_threads
            assert peak_rss_kib < 1536 * 1024
            # One malloc arena per core (at least two), not glibc's eight per core, each keeping
            # what its threads freed (ProcessMemory.limitArenasToCores).
            arenas = malloc_arenas(pid)
            assert arenas <= max(2, os.cpu_count() or 1), f"{arenas} malloc arenas"

            started = time.monotonic()
            subprocess.run(["fusermount3", "-u", str(mnt)], check=True, timeout=30)
            m.process.wait(timeout=30)
            unmount_seconds = time.monotonic() - started
            print(f"unmount after the load took {unmount_seconds:.2f} s")
            assert unmount_seconds < 10
        finally:
            m.unmount()
    finally:
        emulator.stop()
