"""issue 9: documents Dropbox cannot download appear as their exports and read through files/export."""
import os
import subprocess

from conftest import Emulator, Mount


def test_paper_documents_read_as_their_exports_and_copy_cleanly(tmp_path):
    served = tmp_path / "served"
    (served / "Team" / "Specs").mkdir(parents=True)
    (served / "Team" / "Plan.paper").write_bytes(b"<h1>Plan</h1>\n<p>ship it</p>\n")
    (served / "Team" / "Specs" / "API.paper").write_bytes(b"<h1>API</h1>\n" * 100)
    (served / "Team" / "budget.csv").write_bytes(b"a,b\n1,2\n")
    emulator = Emulator(served)
    mount = Mount(emulator, tmp_path / "mnt")
    try:
        mnt = mount.mountpoint
        assert sorted(os.listdir(mnt / "Team")) == ["Plan.html", "Specs", "budget.csv"]
        # The emulator exports a Paper file as its own bytes, as HTML.
        assert (mnt / "Team" / "Plan.html").read_bytes() == (served / "Team" / "Plan.paper").read_bytes()
        assert os.stat(mnt / "Team" / "Plan.html").st_size == len((served / "Team" / "Plan.paper").read_bytes())
        result = subprocess.run(["cp", "-r", str(mnt / "Team"), str(tmp_path / "copy")], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "copy" / "Specs" / "API.html").read_bytes() == b"<h1>API</h1>\n" * 100
        assert (tmp_path / "copy" / "budget.csv").read_bytes() == b"a,b\n1,2\n"
    finally:
        mount.unmount()
    hidden = Mount(emulator, tmp_path / "mnt2", "--hide-exports")
    try:
        assert sorted(os.listdir(hidden.mountpoint / "Team")) == ["Specs", "budget.csv"]
        assert os.listdir(hidden.mountpoint / "Team" / "Specs") == []
    finally:
        hidden.unmount()
        emulator.stop()
