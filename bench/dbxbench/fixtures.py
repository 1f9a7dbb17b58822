"""Deterministic fixtures, generated once and cached under bench/.fixtures: the wide folder,
the deep tree, the large and huge files, and the account of a million entries."""
import json
import os
import random
import shutil
import time

from .common import FIXTURE_VERSION, MiB, log


def fixture_layout(spec):
    """Paths (relative to the served root) and sizes the workloads use."""
    large = [f"big/large-{i}.bin" for i in range(spec["large_count"])]
    return {"wide": "wide", "deep": "deep", "large": large, "huge": "big/huge.bin"}


def _cached_fixture(cache, key):
    """The served root under cache if it was built from this key (spec and version), else None."""
    stamp = cache / "spec.json"
    root = cache / "root"
    if stamp.exists() and root.is_dir():
        try:
            if json.loads(stamp.read_text()) == key:
                return root
        except ValueError:
            pass
    return None


def _fresh_fixture(cache):
    """An empty root in place of whatever an older spec left there."""
    log(f"generating fixtures in {cache} (once; reused while the spec is unchanged)")
    if cache.exists():
        shutil.rmtree(cache)
    root = cache / "root"
    root.mkdir(parents=True)
    return root


def _build_once(cache, key, what, build):
    """The served root under cache: built by build(root) unless a stamp says it was built from
    this key (spec and version) already."""
    root = _cached_fixture(cache, key)
    if root:
        return root
    started = time.monotonic()
    root = _fresh_fixture(cache)
    summary = build(root)
    (cache / "spec.json").write_text(json.dumps(key, sort_keys=True))
    log(f"{what} ready in {time.monotonic() - started:.1f} s{summary or ''}")
    return root


def generate_fixtures(cache, spec):
    """Builds the served tree once per spec; later runs with the same spec reuse it."""
    root = _build_once(cache, dict(spec, version=FIXTURE_VERSION), "fixtures", lambda root: _build_fixtures(root, spec))
    for stray in root.glob("change-seen-*"):    # left by a change-seen run that was interrupted
        stray.unlink()
    return root


def _build_fixtures(root, spec):
    mtime = 1_700_000_000
    # A wide folder: wide_files small files side by side.
    wide = root / "wide"
    wide.mkdir()
    for i in range(spec["wide_files"]):
        path = wide / f"file-{i:05d}.txt"
        path.write_bytes(b"wide %d\n" % i)
        os.utime(path, (mtime + i, mtime + i))
    # A deep tree: three levels of folders, files in the leaves.
    a, b, c = spec["deep_fanout"]
    count = 0
    for i in range(a):
        for j in range(b):
            for k in range(c):
                leaf = root / "deep" / f"a{i:02d}" / f"b{j:02d}" / f"c{k:02d}"
                leaf.mkdir(parents=True)
                for n in range(spec["deep_files"]):
                    path = leaf / f"f{n:03d}.txt"
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.write(fd, b"deep %d\n" % count)
                    os.close(fd)
                    os.utime(path, (mtime + count, mtime + count))
                    count += 1
    # Large files: a seeded 1 MiB block, its first 16 bytes replaced by (file, block) counters so
    # that every block of every file differs. Fast (no /dev/urandom) and deterministic.
    big = root / "big"
    big.mkdir()
    block = random.Random(20240601).randbytes(MiB)
    layout = fixture_layout(spec)
    files = [(p, spec["large_size"]) for p in layout["large"]] + [(layout["huge"], spec["huge_size"])]
    for file_no, (relative, size) in enumerate(files):
        with open(root / relative, "wb", buffering=0) as out:
            tail = memoryview(block)[16:]
            for n in range(size // MiB):
                out.write(file_no.to_bytes(8, "little") + n.to_bytes(8, "little"))
                out.write(tail)
        os.utime(root / relative, (mtime, mtime))


# The account of a million entries (issue 15), served by its own emulator for list-million only.
# Three levels, like the deep tree ten times over: ten folders at the top, as in a user's root
# (Photos, Documents, Projects, ...), a hundred folders in each, and the files spread evenly over
# those thousand leaves, 998 or 999 each: a folder of a thousand files is the common large one
# (a camera-upload month, a project's assets), not a freak of 10^5. Ten top folders are more than
# the mount lists at once (8 by default), as an account's root usually is. File names are 18
# characters ("report-0000123.txt"), like real ones; the files are empty (a million 4 KiB blocks
# would be 4 GiB for nothing: the row measures metadata), each with its own mtime.
MILLION = {"top_folders": 10, "subfolders": 100, "entries": 1_000_000}
MILLION_VERSION = 1


def million_shape(spec):
    """(folders, files, files per leaf folder, leaves holding one more): entries counted
    without the root, as find prints them after the root's own line."""
    folders = spec["top_folders"] * (1 + spec["subfolders"])
    files = spec["entries"] - folders
    leaves = spec["top_folders"] * spec["subfolders"]
    return folders, files, files // leaves, files % leaves


def generate_million(cache, spec):
    """Builds the million-entry tree once per spec (about 30 s: one open, futimens and
    close per file, relative to the folder's descriptor so no path is resolved twice)."""
    return _build_once(cache, dict(spec, version=MILLION_VERSION), "million-entry fixture",
                       lambda root: _build_million(root, spec))


def _build_million(root, spec):
    _, _, per_leaf, extra = million_shape(spec)
    mtime = 1_700_000_000
    count = 0
    leaf_no = 0
    for i in range(spec["top_folders"]):
        top = root / f"folder-{i:02d}"
        top.mkdir()
        for j in range(spec["subfolders"]):
            leaf = top / f"subfolder-{j:03d}"
            leaf.mkdir()
            dir_fd = os.open(leaf, os.O_RDONLY | os.O_DIRECTORY)
            try:
                for _ in range(per_leaf + (1 if leaf_no < extra else 0)):
                    fd = os.open(f"report-{count:07d}.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dir_fd)
                    os.utime(fd, (mtime + count, mtime + count))
                    os.close(fd)
                    count += 1
            finally:
                os.close(dir_fd)
            leaf_no += 1
    return f" ({count:,} files)"


# The folder pin-1g pins (issue 18): 200 files of 5 MiB, 1,000 MiB in all, each 1 MiB block
# distinct. Served by its own emulator.
PINS = {"files": 200, "file_size": 5 * MiB}
PINS_VERSION = 1


def generate_pins(cache, spec):
    return _build_once(cache, dict(spec, version=PINS_VERSION), "pin fixture", lambda root: _build_pins(root, spec))


def _build_pins(root, spec):
    folder = root / "Pinned"
    folder.mkdir()
    block = bytearray(random.Random(18).randbytes(MiB))
    for i in range(spec["files"]):
        with open(folder / f"file-{i:03d}.bin", "wb") as f:
            for b in range(spec["file_size"] // MiB):
                block[:16] = i.to_bytes(8, "little") + b.to_bytes(8, "little")
                f.write(block)
    return f": {spec['files']} files of {spec['file_size'] // MiB} MiB"
