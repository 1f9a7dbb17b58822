"""issue 6: the read engine through a real mount: what is read equals what is served, under
faults and with parallel readers; tail and random reads download little; the block cache serves a
second read without a download call."""
import contextlib
import hashlib
import mmap
import os
import random
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import DBX_MOUNT, TOKEN, Emulator, Mount, write_numbered_blocks

MiB = 1 << 20


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Distinct content everywhere, so a misplaced range cannot match."""
    root = tmp_path_factory.mktemp("reads")
    rng = random.Random(6)
    sizes = {"a.bin": 24 * MiB + 123, "b.bin": 17 * MiB, "c.bin": 9 * MiB + 1, "d.bin": 33 * MiB,
             "small.bin": 4097, "one.bin": 1, "empty.bin": 0}
    for name, size in sizes.items():
        with open(root / name, "wb") as f:
            written = 0
            while written < size:
                chunk = min(MiB, size - written)
                f.write(rng.randbytes(chunk))
                written += chunk
    write_numbered_blocks(root / "big.bin", 96, rng.randbytes(MiB))
    return root


@pytest.fixture(scope="module")
def reads_emulator(files):
    emulator = Emulator(files)
    yield emulator
    emulator.stop()


@pytest.fixture
def mount(reads_emulator, tmp_path):
    """Mounts of the files above; all unmounted at the end of the test."""
    mounts = []

    def make(*args):
        m = Mount(reads_emulator, tmp_path / f"mnt{len(mounts)}", *args, cache_home=tmp_path / f"cache{len(mounts)}")
        mounts.append(m)
        return m.mountpoint

    yield make
    for m in mounts:
        m.unmount()


def sha256(path, chunk=MiB):
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            data = f.read(chunk)
            if not data:
                return digest.hexdigest()
            digest.update(data)


def names(root):
    return sorted(p.name for p in Path(root).iterdir() if p.is_file())


def test_everything_read_has_the_served_checksum(files, reads_emulator, mount):
    mnt = mount()
    for name in names(files):
        for chunk in (MiB, 128 << 10, 4096 + 17):
            assert sha256(mnt / name, chunk) == sha256(files / name), f"{name} read in {chunk}-byte reads"
            # Read again with a fresh page cache, so the second pass goes through the engine too.
            subprocess.run(["sh", "-c", f"echo 1 > /proc/sys/vm/drop_caches"], check=False, capture_output=True)


def test_four_parallel_readers_get_their_own_bytes(files, reads_emulator, mount):
    mnt = mount("--readahead-memory", "32")
    wanted = ["a.bin", "b.bin", "d.bin", "big.bin"]
    results = {}

    def read(name):
        results[name] = sha256(mnt / name)

    threads = [threading.Thread(target=read, args=(name,)) for name in wanted]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert results == {name: sha256(files / name) for name in wanted}


def test_random_offsets_and_forward_seeks_read_the_served_bytes(files, reads_emulator, mount):
    mnt = mount()
    rng = random.Random(7)
    local = (files / "big.bin").read_bytes()
    fd = os.open(mnt / "big.bin", os.O_RDONLY)
    try:
        offset = 0
        for _ in range(200):
            if rng.random() < 0.5:
                offset = rng.randrange(len(local))
            else:
                offset = min(len(local) - 1, offset + rng.randrange(256 << 10))   # a small forward seek
            size = rng.choice([1, 4096, 65536, MiB])
            assert os.pread(fd, size, offset) == local[offset:offset + size]
    finally:
        os.close(fd)


@pytest.mark.parametrize("knobs", [["--truncate-rate", "0.05"], ["--fail-rate", "0.05"],
                                   ["--truncate-rate", "0.05", "--fail-rate", "0.05"]])
def test_cut_and_failed_downloads_still_read_correctly(files, tmp_path, knobs):
    emulator = Emulator(files, *knobs, "--seed", "3")
    m = None
    try:
        m = Mount(emulator, tmp_path / "mnt")
        for name in ["a.bin", "d.bin", "big.bin", "small.bin"]:
            assert sha256(m.mountpoint / name) == sha256(files / name), f"{name} with {knobs}"
    finally:
        if m:
            m.unmount()
        emulator.stop()


def test_a_tail_read_downloads_at_most_4_mib(files, reads_emulator, mount):
    mnt = mount()
    reads_emulator.reset_stats()
    out = subprocess.run(["tail", "-c", "1M", str(mnt / "big.bin")], capture_output=True, check=True).stdout
    assert out == (files / "big.bin").read_bytes()[-MiB:]
    downloaded = reads_emulator.stats()["download_bytes"]
    assert downloaded <= 4 * MiB, f"tail -c 1M downloaded {downloaded} bytes"


@contextlib.contextmanager
def mounted_through(files, tmp_path, *emulator_args, mount_args=()):
    """A fresh emulator of `files` with these flags, and a fresh mount of it; both go at the end."""
    emulator = Emulator(files, *emulator_args)
    m = None
    try:
        m = Mount(emulator, tmp_path / "mnt", *mount_args)
        yield emulator, m.mountpoint
    finally:
        if m:
            m.unmount()
        emulator.stop()


def read_mib_by_mib(f, size: int) -> bytes:
    """The first `size` bytes of an unbuffered file, read as a streaming reader (dd bs=1M) does:
    into one page-aligned buffer, so that with direct_io each read reaches the mount as one 1 MiB
    request (a buffer that is not page-aligned spans one page more, and the kernel splits it)."""
    got = bytearray()
    with mmap.mmap(-1, MiB) as buffer, memoryview(buffer) as view:
        while len(got) < size:
            n = f.readinto(view[:min(MiB, size - len(got))])
            assert n, f"end of file at {len(got)} bytes, before {size}"
            got += view[:n]
    return bytes(got)


def test_on_a_slow_link_a_stream_keeps_seconds_not_its_whole_window_ahead_of_its_reader(files, tmp_path):
    """At 8 MB/s the window's 64 MiB floor is 8 s of the link, and its parts share the link: the
    part the reader waits for arrived at a fraction of the link's rate while the rest of the
    window took the remainder (15 MiB read in the first 11 s at 6 MB/s). A stream keeps about two
    seconds of what arrives ahead of its reader: what the emulator has sent when the reader has
    16 MiB is that, not a window."""
    with mounted_through(files, tmp_path, "--bandwidth", "8000000") as (emulator, mnt):
        expected = (files / "big.bin").read_bytes()[:16 * MiB]
        with open(mnt / "big.bin", "rb", buffering=0) as f:
            got = read_mib_by_mib(f, len(expected))
            ahead = emulator.stats()["download_bytes"] - len(got)
        assert got == expected
        # Two seconds of 8 MB/s is 16 MB; the window's first parts (1 + 2 + 4 + 8 MiB) go out
        # before anything is measured. Without the pace it was about 48 MiB.
        assert ahead <= 32 * MiB, f"{ahead >> 20} MiB downloaded ahead of a reader at 16 MiB"


@pytest.mark.parametrize("mount_args", [(), ("--direct-io",)], ids=["page-cache", "direct-io"])
def test_when_each_connection_is_slow_a_stream_keeps_the_parts_that_bring_more(files, tmp_path, mount_args):
    """A far server gives each connection 3 MB/s and the link no limit: an 8 MiB part spends
    2.8 s in flight, longer than the two seconds of its rate the pace keeps ahead, and only more
    parts at once bring more. Capped at its rate alone the stream grew by about a part per part
    (six at most in 48 MiB); it grows while more in flight brings more, then keeps what it found.
    With direct_io the reads come one at a time, not as the kernel's read-ahead: there the stream
    took its parts' uneven starts for a shared link and kept three (64 MiB took 19 s, not 5)."""
    with mounted_through(files, tmp_path, "--connection-bandwidth", "3000000", "--latency-ms", "100",
                         mount_args=mount_args) as (emulator, mnt):
        expected = (files / "big.bin").read_bytes()[:64 * MiB]
        with open(mnt / "big.bin", "rb", buffering=0) as f:
            got = read_mib_by_mib(f, len(expected))
        assert got == expected
        peak = emulator.stats()["download_peak"]
        # The window's floor at this round trip is 128 MiB: sixteen 8 MiB parts.
        assert peak >= 10, f"at most {peak} downloads in flight at once"


def test_a_thumbnailer_reading_a_header_and_seeking_on_downloads_a_few_mib_not_the_file(files, tmp_path):
    """ffmpegthumbnailer's reads of two videos, as strace shows them: 32 KiB at the start, the index
    at the end, 78-135 KiB from the start again, then a frame 12 or 27 MB in. Under 600 KB read; at
    50 ms per request the mount used to download the whole of each video for them (a file manager
    opening a folder of videos had every one downloaded: 218 MB for eight of 27 MB in Nautilus)."""
    with mounted_through(files, tmp_path, "--latency-ms", "50") as (emulator, mnt):
        emulator.reset_stats()
        returned = 0
        for name, middle, lengths in (("big.bin", 28, (137891, 194778)), ("d.bin", 36, (79310, 116849))):
            expected = (files / name).read_bytes()
            size = len(expected)
            fd = os.open(mnt / name, os.O_RDONLY)
            try:
                for offset, length in [(0, 32768), (size - 4901, 32768), (48, lengths[0]), (size * middle // 100, lengths[1])]:
                    data = os.pread(fd, length, offset)
                    assert data == expected[offset:offset + length]
                    returned += len(data)
            finally:
                os.close(fd)
        downloaded = emulator.stats()["download_bytes"]
    assert downloaded <= 12 * MiB, f"{downloaded} bytes downloaded for {returned} read"


def test_random_4k_reads_download_at_most_4_times_what_they_read(files, reads_emulator, mount):
    mnt = mount()
    size = (files / "big.bin").stat().st_size
    rng = random.Random(8)
    fd = os.open(mnt / "big.bin", os.O_RDONLY)
    reads_emulator.reset_stats()
    returned = 0
    try:
        for _ in range(150):
            returned += len(os.pread(fd, 4096, rng.randrange(size // 4096) * 4096))
    finally:
        os.close(fd)
    downloaded = reads_emulator.stats()["download_bytes"]
    assert downloaded <= 4 * returned, f"{downloaded} bytes downloaded for {returned} read"


def test_the_block_cache_serves_a_second_read_without_downloading(files, reads_emulator, tmp_path):
    cache = tmp_path / "blocks"
    first = Mount(reads_emulator, tmp_path / "m1", "--block-cache-dir", str(cache), "--block-cache-size", "256")
    try:
        assert sha256(first.mountpoint / "a.bin") == sha256(files / "a.bin")
    finally:
        first.unmount()
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    blocks = [b for b in cache.iterdir() if b.name != ".lock"]   # the lock of one mount per cache
    assert len(blocks) == 25, "24 MiB + 123 bytes is 25 blocks"
    assert all(stat.S_IMODE(b.stat().st_mode) == 0o600 for b in blocks)

    # A remount, with the -o spellings, over the same directory.
    second = Mount(reads_emulator, tmp_path / "m2", "-o", f"block_cache_dir={cache},block_cache_size=256")
    try:
        reads_emulator.reset_stats()
        assert sha256(second.mountpoint / "a.bin") == sha256(files / "a.bin")
        assert reads_emulator.stats()["requests"].get("files/download", 0) == 0
    finally:
        second.unmount()


@pytest.mark.parametrize("args", [["--direct-io"], ["-o", "direct_io"]])
def test_direct_io_reads_past_the_page_cache(files, reads_emulator, mount, args):
    mnt = mount(*args)
    size = (files / "a.bin").stat().st_size
    reads_emulator.reset_stats()
    for _ in range(2):
        assert sha256(mnt / "a.bin") == sha256(files / "a.bin")
    # Without direct_io the kernel keeps the pages (keep_cache) and the second read downloads
    # nothing; with it, every read reaches the mount and a new open starts a new stream.
    downloaded = reads_emulator.stats()["download_bytes"]
    assert downloaded >= 2 * size - 2 * MiB, f"{downloaded} bytes downloaded for two reads of {size}"


@pytest.mark.parametrize("args", [["--direct-io"], []])
def test_a_shared_mmap_reads_the_served_bytes_with_and_without_direct_io(files, reads_emulator, mount, args):
    # With direct_io the kernel allows a shared mmap only if the INIT reply asked for
    # FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6+), which dbx-mount adds itself (KernelChannel).
    mnt = mount(*args)
    kernel = tuple(int(part) for part in os.uname().release.split("-")[0].split(".")[:2])
    if args and kernel < (6, 6):
        with open(mnt / "a.bin", "rb") as f, pytest.raises(OSError):
            mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        return
    with open(mnt / "a.bin", "rb") as f, mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) as m:
        assert hashlib.sha256(m).hexdigest() == sha256(files / "a.bin")
        assert m[-5:] == (files / "a.bin").read_bytes()[-5:]


def test_an_application_s_o_direct_reads_the_served_bytes_past_the_page_cache(files, reads_emulator, mount):
    """O_DIRECT (dd iflag=direct) on a default mount: the kernel sends the reads past the page
    cache whatever the open reply says, so each read downloads again; FUSE needs no alignment."""
    mnt = mount()
    size = (files / "a.bin").stat().st_size
    served = (files / "a.bin").read_bytes()
    reads_emulator.reset_stats()
    for _ in range(2):
        out = subprocess.run(["dd", f"if={mnt / 'a.bin'}", "iflag=direct", "bs=1M", "status=none"],
                             capture_output=True, check=True).stdout
        assert hashlib.sha256(out).hexdigest() == hashlib.sha256(served).hexdigest()
    downloaded = reads_emulator.stats()["download_bytes"]
    assert downloaded >= 2 * size - 2 * MiB, f"{downloaded} bytes downloaded for two O_DIRECT reads of {size}"
    odd = subprocess.run(["dd", f"if={mnt / 'a.bin'}", "iflag=direct", "bs=1000", "skip=7", "count=3", "status=none"],
                         capture_output=True, check=True).stdout
    assert odd == served[7000:10000]


def test_without_direct_io_a_second_read_comes_from_the_page_cache(files, reads_emulator, mount):
    mnt = mount()
    size = (files / "c.bin").stat().st_size
    reads_emulator.reset_stats()
    for _ in range(2):
        assert sha256(mnt / "c.bin") == sha256(files / "c.bin")
    assert reads_emulator.stats()["download_bytes"] <= size + MiB


@pytest.mark.parametrize("args", [["--readahead-memory=-1"], ["-o", "readahead_memory=lots"],
                                  ["--block-cache-dir", ""], ["-o", "block_cache_size=-5"]])
def test_bad_read_options_fail_with_usage_errors(reads_emulator, tmp_path, args):
    (tmp_path / "mnt").mkdir()
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=reads_emulator.url,
               DBX_CONTENT_URL=reads_emulator.url, DBX_NOTIFY_URL=reads_emulator.url)
    result = subprocess.run([str(DBX_MOUNT), "-f", *args, str(tmp_path / "mnt")], env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 64, result.stderr
    assert "readahead" in result.stderr or "block" in result.stderr, result.stderr
