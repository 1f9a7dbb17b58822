"""Drop-behind through a real mount: a file of 512 MiB or more read sequentially leaves only its
first 4 MiB and the last 32 MiB or so behind its reader in the kernel's page cache, reads exactly
the served bytes, and downloads each byte once; `--keep-page-cache` (and `-o keep_page_cache`)
drop nothing, and neither does a mount while another handle has the file open. What the mount
dropped is its own counter (`dbxmount_page_cache_dropped_bytes_total`); what is cached is the
kernel's answer (mincore(2) on a mapping of the file)."""
import ctypes
import hashlib
import mmap
import os
import subprocess
import urllib.request

import pytest

from conftest import Emulator, free_port, write_numbered_blocks

MiB = 1 << 20
SIZE = 520 * MiB
PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("page-cache")
    write_numbered_blocks(root / "stream.bin", SIZE // MiB, os.urandom(MiB))
    return root


@pytest.fixture(scope="module")
def emulator(served):
    """This module's own emulator, which conftest's `mount` fixture mounts."""
    emulator = Emulator(served)
    yield emulator
    emulator.stop()


@pytest.fixture(scope="module")
def served_digest(served):
    return sha256_of(served / "stream.bin")


def sha256_of(path):
    """Read with dd in 1 MiB blocks, as a streaming reader would."""
    dd = subprocess.Popen(["dd", f"if={path}", "bs=1M", "status=none"], stdout=subprocess.PIPE)
    digest = hashlib.sha256()
    while chunk := dd.stdout.read(MiB):
        digest.update(chunk)
    assert dd.wait(timeout=120) == 0
    return digest.hexdigest()


def resident_pages(path):
    """Which pages of `path` are in the page cache (1 each, else 0): mincore(2) on a shared
    mapping of it, which touches none of them."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        base = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if base is None or base == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vector = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
            if libc.mincore(base, size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return [v & 1 for v in vector]
        finally:
            libc.munmap(base, size)
    finally:
        os.close(fd)


def metered_mount(mount, *args):
    """A mount with metrics, and a function that reads its page-cache bytes dropped so far."""
    port = free_port()
    mnt = mount(*args, "--metrics-addr", f"127.0.0.1:{port}")

    def dropped():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            lines = response.read().decode().splitlines()
        values = [float(line.rsplit(" ", 1)[1]) for line in lines
                  if line.startswith("dbxmount_page_cache_dropped_bytes_total{")]
        assert len(values) == 1, lines
        return values[0]

    return mnt, dropped


# Residency is asserted only where the kernel's own reclaim could not make it fail: reclaim only
# takes pages away (CI runs under memory pressure, where it took some of a 520 MiB file's oldest
# pages), so what the mount itself dropped is checked with its counter.

def test_a_long_stream_leaves_its_head_and_what_is_just_behind_its_reader_in_the_page_cache(
        served, emulator, served_digest, mount):
    mnt, dropped = metered_mount(mount)
    emulator.reset_stats()
    assert sha256_of(mnt / "stream.bin") == served_digest
    assert emulator.stats()["download_bytes"] <= SIZE + 8 * MiB, "every byte downloaded once"
    # Dropped: everything but the first 4 MiB and the 32 MiB behind the end, in 8 MiB steps.
    assert SIZE - (4 + 32 + 8) * MiB <= dropped() <= SIZE - (4 + 32) * MiB, dropped()
    pages = resident_pages(mnt / "stream.bin")
    resident = sum(pages) * PAGE
    assert resident <= (4 + 32 + 8) * MiB, f"{resident / MiB:.1f} MiB of the file still cached"
    head = 4 * MiB // PAGE
    assert not any(pages[head:len(pages) - 48 * MiB // PAGE]), "the pages the reader passed are dropped"


@pytest.mark.parametrize("args", [["--keep-page-cache"], ["-o", "keep_page_cache"]])
def test_keep_page_cache_drops_nothing_and_a_second_read_comes_from_the_page_cache(
        served, emulator, served_digest, mount, args):
    mnt, dropped = metered_mount(mount, *args)
    emulator.reset_stats()
    assert sha256_of(mnt / "stream.bin") == served_digest
    assert dropped() == 0
    missing = (len(pages := resident_pages(mnt / "stream.bin")) - sum(pages)) * PAGE
    assert missing < SIZE // 2, f"{missing / MiB:.1f} MiB not cached: the pages were dropped"
    assert sha256_of(mnt / "stream.bin") == served_digest
    # Both reads together (the emulator may count a part's last bytes after the reader has them,
    # so no reset between them): the second downloaded only what reclaim had taken.
    assert emulator.stats()["download_bytes"] <= SIZE + missing + 8 * MiB


def test_nothing_is_dropped_while_another_handle_has_the_file_open(served, emulator, served_digest, mount):
    mnt, dropped = metered_mount(mount)
    with open(mnt / "stream.bin", "rb"):
        assert sha256_of(mnt / "stream.bin") == served_digest
        assert dropped() == 0, "the other handle's reader may still need them"
        pages = resident_pages(mnt / "stream.bin")
        assert sum(pages) * PAGE > SIZE // 2


def test_a_reader_that_maps_a_long_file_reads_the_served_bytes(served, emulator, served_digest, mount):
    """Dropped pages are unmapped from a reader's mapping too: touched again they are read again."""
    mnt = mount()
    with open(mnt / "stream.bin", "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapping:
        digest = hashlib.sha256()
        for offset in range(0, SIZE, MiB):
            digest.update(mapping[offset:offset + MiB])
        assert digest.hexdigest() == served_digest
        with open(served / "stream.bin", "rb") as original:
            original.seek(100 * MiB)
            assert mapping[100 * MiB:101 * MiB] == original.read(MiB), "a dropped page, touched again"
