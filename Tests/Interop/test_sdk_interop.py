"""Interop: the official Dropbox Python SDK (PyPI `dropbox`) against dbx-emulator over TLS.

The SDK validates every response against Dropbox's own type definitions, so this catches shape
errors that the emulator's Swift tests, written from the same reading of the spec, cannot.
It runs the already-built `.build/debug/dbx-emulator`; it builds nothing itself.
"""
import datetime
import ipaddress
import json
import os
import struct
import subprocess
import sys
import textwrap
import time
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, ".build", "debug", "dbx-emulator")


def make_ca_and_cert(directory):
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dbx-emulator test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {name: os.path.join(directory, name) for name in ("ca.pem", "cert.pem", "key.pem")}
    with open(paths["ca.pem"], "wb") as f:
        f.write(ca_cert.public_bytes(serialization.Encoding.PEM))
    with open(paths["cert.pem"], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths["key.pem"], "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return paths


@pytest.fixture
def emulator(tmp_path):
    if not os.path.exists(BINARY):
        message = f"{BINARY} is missing: run `swift build --product dbx-emulator` first"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    served = tmp_path / "served"
    (served / "Docs" / "Deep").mkdir(parents=True)
    for i in range(7):
        (served / "Docs" / f"file{i}.txt").write_text(f"content {i}\n")
    (served / "Docs" / "Deep" / "inner.bin").write_bytes(bytes(range(256)) * 4099)
    (served / "Ünïcode name.txt").write_text("ü\n")
    (served / "Notes.paper").write_text("<p>paper</p>")
    certs = make_ca_and_cert(str(tmp_path))
    proc = subprocess.Popen(
        [BINARY, "--root", str(served), "--port", "0", "--tls-cert", certs["cert.pem"], "--tls-key", certs["key.pem"],
         "--refresh-token", "interop-refresh", "--app-key", "interop-app", "--token-lifetime", "2",
         "--shared-link", "/Docs", "--shared-link", "/Docs/Deep/inner.bin:s3cret"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("dbx-emulator listening on https://127.0.0.1:"), (line, proc.stderr.read())
        port = line.rsplit(":", 1)[1]
        links = [proc.stdout.readline().strip().split(": ", 1)[1] for _ in range(2)]
        yield {"port": port, "ca": certs["ca.pem"], "served": served, "links": links}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_sdk(emulator, body):
    """Runs `body` in a fresh interpreter: the SDK reads its host variables at import time."""
    env = dict(os.environ)
    host = f"127.0.0.1:{emulator['port']}"
    env.update({
        "DROPBOX_API_HOST": host, "DROPBOX_API_CONTENT_HOST": host, "DROPBOX_API_NOTIFY_HOST": host,
        "REQUESTS_CA_BUNDLE": emulator["ca"], "SERVED": str(emulator["served"]),
        "FOLDER_LINK": emulator["links"][0], "FILE_LINK": emulator["links"][1],
        "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
    })
    script = "import os, sys, time, json\nimport dropbox\n" + textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def test_listing_paging_and_recursive(emulator):
    out = run_sdk(emulator, """
        dbx = dropbox.Dropbox("emulator-token")
        res = dbx.files_list_folder("/Docs", limit=2)
        names = [e.name for e in res.entries]
        pages = 1
        while res.has_more:
            res = dbx.files_list_folder_continue(res.cursor)
            names += [e.name for e in res.entries]
            pages += 1
        assert pages >= 4, pages
        assert sorted(names) == sorted([f"file{i}.txt" for i in range(7)] + ["Deep"]), names
        rec = dbx.files_list_folder("", recursive=True)
        entries = list(rec.entries)
        while rec.has_more:
            rec = dbx.files_list_folder_continue(rec.cursor)
            entries += rec.entries
        paths = [e.path_display for e in entries]
        assert "/Docs/Deep/inner.bin" in paths and "/Ünïcode name.txt" in paths, paths
        assert paths.index("/Docs") < paths.index("/Docs/Deep") < paths.index("/Docs/Deep/inner.bin")
        # A recursive listing of a folder other than the root starts with that folder, as Dropbox's does.
        sub = dbx.files_list_folder("/Docs", recursive=True)
        assert isinstance(sub.entries[0], dropbox.files.FolderMetadata) and sub.entries[0].path_display == "/Docs"
        assert dbx.files_list_folder("/Docs").entries[0].path_display != "/Docs", "not in a plain listing"
        paper = [e for e in entries if e.name == "Notes.paper"][0]
        assert paper.is_downloadable is False and paper.export_info.export_as
        files = [e for e in entries if isinstance(e, dropbox.files.FileMetadata)]
        assert all(len(f.content_hash) == 64 and len(f.rev) >= 9 for f in files)
        latest = dbx.files_list_folder_get_latest_cursor("", recursive=True).cursor
        open(os.path.join(os.environ["SERVED"], "added.txt"), "w").write("new")
        poll = dbx.files_list_folder_longpoll(latest, timeout=30)
        assert poll.changes
        changed = dbx.files_list_folder_continue(latest)
        assert [e.name for e in changed.entries] == ["added.txt"], changed.entries
        print("ok")
    """)
    assert "ok" in out


def test_metadata_errors_download_and_account(emulator):
    run_sdk(emulator, """
        dbx = dropbox.Dropbox("emulator-token")
        md = dbx.files_get_metadata("/docs/FILE3.TXT")
        assert isinstance(md, dropbox.files.FileMetadata) and md.name == "file3.txt" and md.size == 10
        assert md.client_modified.year >= 2000
        folder = dbx.files_get_metadata("/Docs/Deep")
        assert isinstance(folder, dropbox.files.FolderMetadata)
        try:
            dbx.files_get_metadata("/does/not/exist")
            raise SystemExit("expected ApiError")
        except dropbox.exceptions.ApiError as e:
            assert e.error.is_path() and e.error.get_path().is_not_found(), e.error
        try:
            dbx.files_download("/Notes.paper")
            raise SystemExit("expected ApiError")
        except dropbox.exceptions.ApiError as e:
            assert e.error.is_unsupported_file(), e.error
        served = os.environ["SERVED"]
        meta, resp = dbx.files_download("/Docs/Deep/inner.bin")
        assert resp.content == open(os.path.join(served, "Docs/Deep/inner.bin"), "rb").read()
        assert meta.size == len(resp.content)
        meta, resp = dbx.files_download("/Ünïcode name.txt")
        assert resp.content == "ü\\n".encode() and meta.name == "Ünïcode name.txt"
        meta, resp = dbx.files_download("rev:" + md.rev)
        assert resp.content == b"content 3\\n"
        exported, resp = dbx.files_export("/Notes.paper")
        assert resp.content == b"<p>paper</p>"
        account = dbx.users_get_current_account()
        assert account.account_id.startswith("dbid:") and account.root_info.root_namespace_id
        usage = dbx.users_get_space_usage()
        assert usage.used > 0 and usage.allocation.is_individual()
        try:
            dropbox.Dropbox("not-a-token").users_get_current_account()
            raise SystemExit("expected AuthError")
        except dropbox.exceptions.AuthError as e:
            assert e.error.is_invalid_access_token()
    """)


def test_refresh_token_session_survives_expiry(emulator):
    out = run_sdk(emulator, """
        dbx = dropbox.Dropbox(oauth2_refresh_token="interop-refresh", app_key="interop-app")
        first = dbx.users_get_current_account()
        token = dbx._oauth2_access_token
        # Tokens live 2 s. The SDK refreshes early within 300 s of the expiry it was told, so
        # to reach the server's 401 expired_access_token (then refresh and retry) it is told
        # the stale token is good for an hour.
        import datetime
        time.sleep(2.5)
        stale = dropbox.Dropbox(oauth2_access_token=token, oauth2_refresh_token="interop-refresh", app_key="interop-app",
                                oauth2_access_token_expiration=datetime.datetime.utcnow() + datetime.timedelta(hours=1))
        assert stale.users_get_current_account().account_id == first.account_id
        assert stale._oauth2_access_token != token
        for _ in range(3):
            dbx.files_list_folder("")
            time.sleep(1)
        print("ok")
    """)
    assert "ok" in out


def png_image(width, height):
    """A real RGB PNG (a gradient), written with the standard library."""
    rows = b"".join(b"\x00" + bytes(c for x in range(width) for c in (x * 255 // width, y * 255 // height, 128))
                    for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_thumbnails_batch_and_v2(emulator):
    photos = emulator["served"] / "Photos"
    # Real JPEGs from the emulator's own sample photos, and a PNG made here.
    subprocess.run([BINARY, "make-photos", str(photos), "--count", "3", "--seed", "5"], check=True, capture_output=True)
    (photos / "hand.png").write_bytes(png_image(90, 60))
    out = run_sdk(emulator, """
        import base64, struct
        from dropbox.files import (PathOrLink, SharedLinkFileInfo, ThumbnailArg, ThumbnailFormat, ThumbnailMode,
                                   ThumbnailSize)

        def png_size(data):
            assert data[:8] == bytes([0x89]) + b"PNG" + bytes([13, 10, 26, 10]), data[:8]
            return struct.unpack(">II", data[16:24])

        def jpeg_size(data):
            assert data[:3] == bytes([0xFF, 0xD8, 0xFF])
            sof = data.index(bytes([0xFF, 0xC0]))   # baseline, as libgd writes it
            height, width = struct.unpack(">HH", data[sof + 5:sof + 9])
            return width, height

        folder = os.path.join(os.environ["SERVED"], "Photos")
        jpg = sorted(n for n in os.listdir(folder) if n.endswith(".jpg"))[0]
        width, height = jpeg_size(open(os.path.join(folder, jpg), "rb").read())
        dbx = dropbox.Dropbox("emulator-token")
        res = dbx.files_get_thumbnail_batch([
            ThumbnailArg("/Photos/" + jpg, format=ThumbnailFormat.png, size=ThumbnailSize.w128h128),
            ThumbnailArg("/Photos/hand.png", format=ThumbnailFormat.png, size=ThumbnailSize.w480h320,
                         mode=ThumbnailMode.bestfit),
            ThumbnailArg("/Docs/file0.txt"),
            ThumbnailArg("/Photos/missing.jpg"),
            ThumbnailArg("/Photos/hand.png"),
        ])
        first, hand, text, missing, default = res.entries
        assert first.is_success(), first
        w, h = png_size(base64.b64decode(first.get_success().thumbnail))
        assert max(w, h) == 128 and abs(w / h - width / height) < 0.02, (w, h, width, height)
        assert first.get_success().metadata.name == jpg and first.get_success().metadata.size > 0
        assert png_size(base64.b64decode(hand.get_success().thumbnail)) == (90, 60), "never scaled up"
        assert text.is_failure() and text.get_failure().is_unsupported_extension(), text
        assert missing.get_failure().is_path() and missing.get_failure().get_path().is_not_found(), missing
        assert base64.b64decode(default.get_success().thumbnail)[:3] == bytes([0xFF, 0xD8, 0xFF]), "jpeg by default"
        try:
            dbx.files_get_thumbnail_batch([ThumbnailArg("/Photos/hand.png")] * 26)
            raise SystemExit("expected ApiError")
        except dropbox.exceptions.ApiError as e:
            assert e.error.is_too_many_files(), e.error

        md, resp = dbx.files_get_thumbnail_v2(PathOrLink.path("/Photos/" + jpg), format=ThumbnailFormat.jpeg,
                                              size=ThumbnailSize.w256h256, mode=ThumbnailMode.strict)
        assert md.file_metadata.name == jpg and md.link_metadata is None
        assert max(jpeg_size(resp.content)) == 256, jpeg_size(resp.content)
        md, resp = dbx.files_get_thumbnail_v2(PathOrLink.path("/photos/HAND.PNG"), format=ThumbnailFormat.webp)
        assert resp.content[:4] == b"RIFF" and resp.content[8:12] == b"WEBP"
        assert md.file_metadata.path_display == "/Photos/hand.png"
        try:
            dbx.files_get_thumbnail_v2(PathOrLink.path("/Photos/nope.png"))
            raise SystemExit("expected ApiError")
        except dropbox.exceptions.ApiError as e:
            assert e.error.is_path() and e.error.get_path().is_not_found(), e.error
        try:
            dbx.files_get_thumbnail_v2(PathOrLink.link(SharedLinkFileInfo("https://www.dropbox.com/s/abc/x.png")))
            raise SystemExit("expected ApiError")
        except dropbox.exceptions.ApiError as e:
            assert e.error.is_not_found(), e.error
        # Through a (password-protected) shared link of the folder: the link's own metadata, no path.
        import requests
        url = requests.post(f"https://{os.environ['DROPBOX_API_HOST']}/__admin/shared_links",
                            data=json.dumps({"path": "/Photos", "password": "pw"})).json()["url"]
        md, resp = dbx.files_get_thumbnail_v2(PathOrLink.link(SharedLinkFileInfo(url, path="/hand.png", password="pw")),
                                              format=ThumbnailFormat.png, size=ThumbnailSize.w128h128)
        assert png_size(resp.content) == (90, 60), png_size(resp.content)
        assert md.link_metadata.rev and md.file_metadata is None, md
        try:
            dbx.files_get_thumbnail_v2(PathOrLink.link(SharedLinkFileInfo(url, path="/hand.png", password="no")))
            raise SystemExit("expected ApiError")
        except dropbox.exceptions.ApiError as e:
            assert e.error.is_access_denied(), e.error
        print("ok")
    """)
    assert "ok" in out


def test_shared_links(emulator):
    run_sdk(emulator, """
        dbx = dropbox.Dropbox("emulator-token")
        served = os.environ["SERVED"]
        folder_url, file_url = os.environ["FOLDER_LINK"], os.environ["FILE_LINK"]
        meta = dbx.sharing_get_shared_link_metadata(folder_url)
        assert isinstance(meta, dropbox.sharing.FolderLinkMetadata) and meta.name == "Docs", meta
        inner = dbx.sharing_get_shared_link_metadata(folder_url, path="/Deep/inner.bin")
        assert isinstance(inner, dropbox.sharing.FileLinkMetadata) and inner.size == 256 * 4099 and inner.rev
        # A link's folder is listed one level at a time, paths relative to the link, entries without paths.
        link = dropbox.files.SharedLink(url=folder_url)
        res = dbx.files_list_folder("", shared_link=link, limit=3)
        entries = list(res.entries)
        while res.has_more:
            res = dbx.files_list_folder_continue(res.cursor)
            entries += res.entries
        assert sorted(e.name for e in entries) == sorted([f"file{i}.txt" for i in range(7)] + ["Deep"])
        assert all(e.path_lower is None and e.path_display is None for e in entries)
        deep = dbx.files_list_folder("/Deep", shared_link=link)
        assert [e.name for e in deep.entries] == ["inner.bin"]
        got, resp = dbx.sharing_get_shared_link_file(folder_url, path="/file3.txt")
        assert resp.content == b"content 3\\n" and got.size == 10
        for bad_call, check in (
            (lambda: dbx.sharing_get_shared_link_metadata(folder_url.replace("rlkey=", "rlkey=x")),
             lambda e: e.is_shared_link_not_found()),
            (lambda: dbx.sharing_get_shared_link_file(folder_url), lambda e: e.is_shared_link_is_directory()),
            (lambda: dbx.sharing_get_shared_link_file(file_url), lambda e: e.is_shared_link_access_denied()),
            (lambda: dbx.sharing_get_shared_link_file(file_url, link_password="wrong"), lambda e: e.is_shared_link_access_denied()),
        ):
            try:
                bad_call()
                raise SystemExit("expected ApiError")
            except dropbox.exceptions.ApiError as e:
                assert check(e.error), e.error
        # The password-protected file link, whole and by Range.
        whole = open(os.path.join(served, "Docs/Deep/inner.bin"), "rb").read()
        meta, resp = dbx.sharing_get_shared_link_file(file_url, link_password="s3cret")
        assert isinstance(meta, dropbox.sharing.FileLinkMetadata) and resp.content == whole
        import requests
        arg = json.dumps({"url": file_url, "link_password": "s3cret"})
        r = requests.post(f"https://{os.environ['DROPBOX_API_CONTENT_HOST']}/2/sharing/get_shared_link_file",
                          headers={"Authorization": "Bearer emulator-token", "Dropbox-API-Arg": arg, "Range": "bytes=1000-1999"})
        assert r.status_code == 206 and r.content == whole[1000:2000], r.status_code
        print("ok")
    """)
