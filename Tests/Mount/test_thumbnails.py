"""issue 14: Dropbox's thumbnails in the freedesktop cache, as the real GIO stack judges them.

The emulator makes the thumbnails from the served images (libgd); the mount writes them where GIO,
Nautilus and tumbler look; `gio info` says whether it trusts each one. The emulator's counters show
that no photo was downloaded to get there.
"""
import math
import os
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from conftest import FEED_WAIT, Emulator, Mount, wait_for


def png_image(width: int, height: int, seed: int) -> bytes:
    """A real RGB PNG (a gradient that differs per seed), written with the standard library."""
    rows = bytearray()
    for y in range(height):
        rows.append(0)   # filter: none
        for x in range(width):
            rows += bytes(((x * 255 // width + seed * 37) % 256, (y * 255 // height + seed * 11) % 256, (seed * 53) % 256))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(rows), 6)) + chunk(b"IEND", b""))


def stats(emulator):
    return emulator.stats()["requests"]


def thumbnail_calls(emulator):
    return stats(emulator).get("files/get_thumbnail_batch", 0)


def gio_thumbnail(path: Path, cache_home: Path):
    """(thumbnail path, valid) as GIO reports them for `path`, or (None, False)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home), GIO_USE_VFS="local")
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    out = subprocess.run(["gio", "info", "-a", "thumbnail::path,thumbnail::is-valid", str(path)], env=env,
                         capture_output=True, text=True, timeout=30).stdout
    found, valid = None, False
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("thumbnail::path:"):
            found = line.split(":", 3)[-1].strip()
        elif line.startswith("thumbnail::is-valid:"):
            valid = line.endswith("TRUE")
    return found, valid


PHOTOS = 200


@pytest.fixture
def photos(tmp_path):
    served = tmp_path / "served"
    folder = served / "Photos"
    folder.mkdir(parents=True)
    for i in range(PHOTOS):
        width, height = (96, 64) if i % 3 else (48, 80)   # landscape and portrait
        (folder / f"IMG_{i:04d}.png").write_bytes(png_image(width, height, i))
        os.utime(folder / f"IMG_{i:04d}.png", (1_700_000_000 + i, 1_700_000_000 + i))
    (folder / "notes.txt").write_text("not an image\n")
    emulator = Emulator(served)
    try:
        yield served, emulator, tmp_path
    finally:
        emulator.stop()


def test_ls_fills_the_cache_gio_trusts_without_downloading_a_photo(photos):
    served, emulator, tmp = photos
    mount = Mount(emulator, tmp / "mnt", "--thumbnails")
    cache_home = tmp / "cache"   # the mount's XDG_CACHE_HOME (conftest), so ~/.cache/thumbnails there
    try:
        names = subprocess.run(["ls", str(mount.mountpoint / "Photos")], capture_output=True, text=True,
                               check=True).stdout.split()
        assert len(names) == PHOTOS + 1
        calls = thumbnail_calls(emulator)
        assert 0 < calls <= 3 * math.ceil(PHOTOS / 25), f"{calls} get_thumbnail_batch calls for 3 sizes"
        assert stats(emulator).get("files/download", 0) == 0, "no photo was downloaded"
        for name in names:
            if not name.endswith(".png"):
                continue
            found, valid = gio_thumbnail(mount.mountpoint / "Photos" / name, cache_home)
            assert found and valid, f"GIO does not trust the thumbnail of {name}: {found}"
            assert "/thumbnails/" in found
        assert stats(emulator).get("files/download", 0) == 0, "GIO read no photo either"
        for flavor in ("normal", "large", "x-large"):
            folder = cache_home / "thumbnails" / flavor
            assert len(list(folder.glob("*.png"))) == PHOTOS, flavor
            assert folder.stat().st_mode & 0o777 == 0o700
            assert all(entry.stat().st_mode & 0o777 == 0o600 for entry in folder.glob("*.png"))

        # A second listing asks Dropbox for nothing more.
        subprocess.run(["ls", "-l", str(mount.mountpoint / "Photos")], capture_output=True, check=True)
        assert thumbnail_calls(emulator) == calls

        # A photo rewritten on the served tree gets a new thumbnail through the change feed.
        photo = served / "Photos" / "IMG_0007.png"
        photo.write_bytes(png_image(64, 64, 999))
        os.utime(photo, (1_750_000_000, 1_750_000_000))
        mounted = mount.mountpoint / "Photos" / "IMG_0007.png"
        assert wait_for(lambda: os.stat(mounted).st_mtime == 1_750_000_000, FEED_WAIT), "the feed reports the new mtime"
        assert wait_for(lambda: gio_thumbnail(mounted, cache_home)[1], FEED_WAIT), "GIO trusts the new thumbnail"
        assert stats(emulator).get("files/download", 0) == 0
    finally:
        mount.unmount()


def test_a_mount_point_named_through_a_symlink_and_a_cache_cleared_under_the_mount(photos):
    """GIO files a thumbnail under the path as browsed, symlinks and all; and a cache removed while
    the mount runs is filled again the next time the folder is opened."""
    _, emulator, tmp = photos
    (tmp / "real").mkdir()
    (tmp / "link").symlink_to(tmp / "real")
    cache_home = tmp / "cache"
    mount = Mount(emulator, tmp / "link" / "mnt", "--thumbnails", cache_home=cache_home)
    try:
        for folder in (tmp / "link" / "mnt" / "Photos", tmp / "real" / "mnt" / "Photos"):
            subprocess.run(["ls", str(folder)], capture_output=True, check=True)
            found, valid = gio_thumbnail(folder / "IMG_0003.png", cache_home)
            assert found and valid, f"GIO does not trust the thumbnail under {folder}: {found}"
        calls = thumbnail_calls(emulator)
        shutil.rmtree(cache_home / "thumbnails")
        folder = tmp / "link" / "mnt" / "Photos"
        subprocess.run(["ls", str(folder)], capture_output=True, check=True)
        assert thumbnail_calls(emulator) > calls, "the removed entries were asked for again"
        found, valid = gio_thumbnail(folder / "IMG_0003.png", cache_home)
        assert found and valid, f"GIO does not trust the thumbnail after the cache was cleared: {found}"
        assert stats(emulator).get("files/download", 0) == 0, "no photo was downloaded"
    finally:
        mount.unmount()


def test_without_thumbnails_no_thumbnail_call_is_made(photos):
    _, emulator, tmp = photos
    mount = Mount(emulator, tmp / "mnt")
    try:
        subprocess.run(["ls", "-l", str(mount.mountpoint / "Photos")], capture_output=True, check=True)
        assert thumbnail_calls(emulator) == 0
        assert not (tmp / "cache" / "thumbnails").exists()
    finally:
        mount.unmount()


def test_bad_images_and_awkward_names(tmp_path):
    served = tmp_path / "served"
    folder = served / "Odd"
    folder.mkdir(parents=True)
    (folder / "corrupt.png").write_bytes(png_image(40, 40, 1)[:60])          # cut short
    (folder / "text.jpg").write_text("this is not a JPEG\n")
    (folder / "huge.png").write_bytes(b"\0" * (21 << 20))                    # over Dropbox's 20 MB
    awkward = "a b;c#d%e ünï?.png"
    (folder / awkward).write_bytes(png_image(50, 30, 2))
    emulator = Emulator(served)
    mount = Mount(emulator, tmp_path / "mnt", "--thumbnails")
    cache_home = tmp_path / "cache"
    try:
        listing = subprocess.run(["ls", str(mount.mountpoint / "Odd")], capture_output=True, text=True, check=True)
        assert sorted(listing.stdout.splitlines()) == sorted(["corrupt.png", "text.jpg", "huge.png", awkward])
        found, valid = gio_thumbnail(mount.mountpoint / "Odd" / awkward, cache_home)
        assert found and valid, "a name that needs escaping gets the file name GIO computes"
        for name in ("corrupt.png", "text.jpg", "huge.png"):
            assert gio_thumbnail(mount.mountpoint / "Odd" / name, cache_home) == (None, False), name
        asked = stats(emulator).get("files/get_thumbnail_batch", 0)
        subprocess.run(["ls", str(mount.mountpoint / "Odd")], capture_output=True, check=True)
        assert stats(emulator).get("files/get_thumbnail_batch", 0) == asked, "one attempt per rev"
        # The files themselves read as ever.
        assert (mount.mountpoint / "Odd" / "text.jpg").read_bytes() == b"this is not a JPEG\n"
    finally:
        mount.unmount()
        emulator.stop()


def test_an_unwritable_thumbnail_directory_is_one_line_and_the_mount_works(photos):
    _, emulator, tmp = photos
    blocker = tmp / "not-a-directory"
    blocker.write_text("a file where the cache should be\n")
    mount = Mount(emulator, tmp / "mnt", "--thumbnails", "-o", f"thumbnail_dir={blocker}/thumbnails")
    try:
        for _ in range(2):
            listing = subprocess.run(["ls", str(mount.mountpoint / "Photos")], capture_output=True, text=True, check=True)
            assert len(listing.stdout.split()) == PHOTOS + 1
        assert (mount.mountpoint / "Photos" / "notes.txt").read_text() == "not an image\n"
    finally:
        mount.unmount()
    errors = mount.log()
    assert errors.count("cannot write thumbnails") == 1, errors[-2000:]
