"""Real file managers on a real mount, under Xvfb: what they download to show a folder of photos.

Used by test_file_managers.py, and runnable by hand to refresh the README's figures and screenshots:

    python3 Tests/Desktop/desktop.py nautilus|thunar|dolphin [--thumbnails] [--shot FILE.png]

Each run is fresh: its own X server (Xvfb), session bus (dbus-run-session), HOME (so an empty
thumbnail cache and default settings), emulator and mount. Needs Debian's xvfb, dbus-x11,
nautilus, thunar and tumbler, dolphin and kio-extras (KIO's image thumbnailer), and imagemagick
for the screenshot.
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from pathlib import Path



def _mount_fixtures():
    """Tests/Mount/conftest.py (Emulator, Mount), loaded under its own name so that it never
    clashes with another conftest."""
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "Mount" / "conftest.py"
    spec = importlib.util.spec_from_file_location("dbx_mount_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fixtures = _mount_fixtures()
Emulator, Mount = _fixtures.Emulator, _fixtures.Mount

PHOTOS = 40
TOOLS = {"nautilus": ["nautilus", "--new-window"], "thunar": ["thunar"], "dolphin": ["dolphin", "--new-window"]}


def photo(width: int, height: int, seed: int) -> bytes:
    """A PNG that looks like a picture (bands of colour) and compresses like one (fine noise), so
    its size is a photo's, not a gradient's few KB."""
    rng = random.Random(seed)
    base = [(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(4)]
    rows = bytearray()
    for y in range(height):
        rows.append(0)
        band = base[(y * 4) // height]
        noise = os.urandom(width * 3)
        for x in range(width):
            shade = x * 96 // width
            rows += bytes(((band[0] + shade + (noise[3 * x] & 31)) % 256, (band[1] + (noise[3 * x + 1] & 31)) % 256,
                           (band[2] + shade // 2 + (noise[3 * x + 2] & 31)) % 256))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(rows), 6)) + chunk(b"IEND", b""))


def write_photos(folder: Path, count: int = PHOTOS) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(count):
        width, height = (800, 600) if i % 4 else (480, 640)
        data = photo(width, height, i)
        (folder / f"IMG_{i + 1:04d}.png").write_bytes(data)
        total += len(data)
    return total


def stats(emulator) -> dict:
    return json.load(urllib.request.urlopen(emulator.url + "/__stats", timeout=10))


def blocked_in(session: int) -> dict:
    """Where the threads of the file manager's process group sleep in the kernel (`wchan`), with
    how many sleep there: a thread waiting on the mount shows `request_wait_answer`."""
    places = {}
    for pid in os.listdir("/proc"):
        try:
            if not pid.isdigit() or os.getpgid(int(pid)) != session:
                continue
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/wchan") as f:
                    place = f.read().strip() or "running"
                places[place] = places.get(place, 0) + 1
        except OSError:
            continue
    return places


def wait_quiet(emulator, settle: float, limit: float) -> dict:
    """Waits until the emulator has seen no new request for `settle` seconds (at most `limit`)."""
    deadline = time.monotonic() + limit
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = stats(emulator)
        key = json.dumps(now["requests"], sort_keys=True) + str(now["download_bytes"])
        if key != last:
            last, since = key, time.monotonic()
        elif time.monotonic() - since >= settle:
            return now
        time.sleep(0.5)
    return stats(emulator)


def run(tool: str, thumbnails: bool, shot: Path = None, settle: float = 8, limit: float = 90) -> dict:
    """Opens the photo folder in `tool` on a fresh mount; returns the emulator's counters."""
    work = Path(tempfile.mkdtemp(prefix=f"dbx-{tool}-"))
    home = work / "home"
    for sub in (".cache", ".config", ".local/share", "runtime"):
        (home / sub).mkdir(parents=True)
    os.chmod(home / "runtime", 0o700)
    photos_bytes = write_photos(work / "served" / "Photos")
    display = f":{90 + os.getpid() % 9}"
    xvfb = subprocess.Popen(["Xvfb", display, "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    emulator = Emulator(work / "served")
    app = None
    mount = None
    try:
        # Xvfb is ready when its socket appears; a file manager started before that exits at once
        # (on a loaded machine one second was not always enough).
        socket_path = Path(f"/tmp/.X11-unix/X{display[1:]}")
        deadline = time.monotonic() + 30
        while not socket_path.exists():
            assert xvfb.poll() is None, f"Xvfb {display} exited with {xvfb.returncode}"
            assert time.monotonic() < deadline, f"Xvfb {display} did not start"
            time.sleep(0.1)
        # conftest's Mount puts the mount's XDG_CACHE_HOME beside the mount point: the file
        # manager's HOME below is the same folder's parent, so both see one thumbnail cache.
        mount = Mount(emulator, home / "mnt", *(["--thumbnails", "--thumbnail-dir", str(work / "cache" / "thumbnails")]
                                                if thumbnails else []))
        before = stats(emulator)
        env = dict(os.environ, DISPLAY=display, HOME=str(home), XDG_CACHE_HOME=str(work / "cache"),
                   XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
                   XDG_RUNTIME_DIR=str(home / "runtime"), NO_AT_BRIDGE="1", GTK_A11Y="none",
                   # GTK 4 (Nautilus) draws with GL by default, here Mesa's llvmpipe on Xvfb, and
                   # in about one run in three its main thread never came back from ending its
                   # first frame (gdb: gdk_draw_context_end_frame, in a condition wait), leaving
                   # the window at "Loading..." before it even opened the folder; the mount had
                   # answered every call. Cairo draws without GL.
                   GSK_RENDERER="cairo")
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        app = subprocess.Popen(["dbus-run-session", "--", *TOOLS[tool], str(mount.mountpoint / "Photos")], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        cache = work / "cache" / "thumbnails"
        if thumbnails:
            # The emulator makes thumbnails from the full images, far slower than Dropbox serves
            # them; the listing (and the window) waits for them before the file manager goes on.
            deadline = time.monotonic() + limit
            while len(list(cache.glob("*/*.png"))) < 3 * PHOTOS and time.monotonic() < deadline:
                time.sleep(0.5)
        after = wait_quiet(emulator, settle, limit)
        app_blocked_in = blocked_in(app.pid)
        if shot:
            subprocess.run(["import", "-display", display, "-window", "root", str(shot)], check=False,
                           capture_output=True, timeout=30)
        requests = {k: v - before["requests"].get(k, 0) for k, v in after["requests"].items()}
        return {"tool": tool, "thumbnails": thumbnails, "photos": PHOTOS, "photo_bytes": photos_bytes,
                "download_bytes": after["download_bytes"] - before["download_bytes"],
                "downloads": requests.get("files/download", 0),
                "thumbnail_calls": requests.get("files/get_thumbnail_batch", 0),
                "thumbnails_in_cache": len(list(cache.glob("*/*.png"))),
                # For a run that went wrong: every call, the end of the mount's log, and where
                # the file manager's threads waited.
                "requests": requests, "mount_log": mount.log()[-3000:], "app_blocked_in": app_blocked_in}
    finally:
        if app and app.poll() is None:
            os.killpg(app.pid, 15)
            try:
                app.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(app.pid, 9)
        if mount:
            mount.unmount()
        emulator.stop()
        xvfb.terminate()
        xvfb.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def available(tool: str) -> str:
    """Why `tool` cannot run here, or '' when it can."""
    for program in ["Xvfb", "dbus-run-session", TOOLS[tool][0], "import"]:
        if not shutil.which(program):
            return f"{program} is not installed"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    return ""


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("tool", choices=sorted(TOOLS))
    parser.add_argument("--thumbnails", action="store_true")
    parser.add_argument("--shot", type=Path)
    args = parser.parse_args()
    print(json.dumps(run(args.tool, args.thumbnails, args.shot), indent=1))
