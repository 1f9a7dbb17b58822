"""issue 16: reads over TLS, as every byte from Dropbox comes. A throw-away CA signs the
emulator's certificate; the mount trusts it through --ca-bundle and verifies it as it would
Dropbox's. What is read equals what is served, under injected faults too; connections are kept
alive across parts; the mount stays within its read-ahead budget. The same over HTTP/2, which
libcurl asks for over TLS, through an nghttpx front (`HTTP2Front`). Outcomes, not speed: speed is
the benchmark runner's (bench/run.py, its TLS and HTTP/2 rows)."""
import collections
import concurrent.futures
import hashlib
import os
import random
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import DBX_MOUNT, TOKEN, Emulator, Mount, free_port, is_mounted, required_tool, stop_process

MiB = 1 << 20


def make_certificates(folder: Path) -> dict:
    """A CA and a server certificate for 127.0.0.1, valid for a day."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(folder / "ca.key"),
            "-out", str(folder / "ca.pem"), "-days", "1", "-subj", "/CN=dbx-mount test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(folder / "server.key"),
            "-out", str(folder / "server.csr"), "-subj", "/CN=127.0.0.1")
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", str(folder / "server.csr"), "-CA", str(folder / "ca.pem"),
            "-CAkey", str(folder / "ca.key"), "-CAcreateserial", "-out", str(folder / "server.pem"),
            "-days", "1", "-extfile", str(folder / "ext.cnf"))
    return {"ca": folder / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Every MiB distinct, and odd sizes, so a misplaced or short range cannot match."""
    root = tmp_path_factory.mktemp("tls-served")
    rng = random.Random(16)
    block = rng.randbytes(MiB)
    for name, size in {"large.bin": 192 * MiB + 4321, "b.bin": 40 * MiB + 7, "c.bin": 40 * MiB,
                       "d.bin": 24 * MiB + 1, "small.bin": 5000}.items():
        with open(root / name, "wb") as f:
            written = 0
            while written < size:
                chunk = min(MiB, size - written)
                f.write((name.encode() + written.to_bytes(8, "little") + block)[:chunk])
                written += chunk
    return root


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while data := f.read(MiB):
            digest.update(data)
    return digest.hexdigest()


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def tls_emulator(served, certificates, *extra):
    emulator = Emulator(served, "--tls-cert", str(certificates["cert"]), "--tls-key", str(certificates["key"]), *extra)
    assert emulator.url.startswith("https://127.0.0.1:"), emulator.url
    emulator.ssl_context = ssl.create_default_context(cafile=str(certificates["ca"]))
    return emulator


def test_reads_over_tls_equal_the_served_files_and_reuse_connections(served, certificates, tmp_path):
    emulator = tls_emulator(served, certificates, "--latency-ms", "20")
    try:
        m = Mount(emulator, tmp_path / "mnt", "--ca-bundle", str(certificates["ca"]), "--readahead-memory", "64")
        try:
            emulator.reset_stats()
            assert sha256(m.mountpoint / "large.bin") == sha256(served / "large.bin")
            stats = emulator.stats()
            downloads = stats["requests"]["files/download"]
            # About once each: on a loaded machine the kernel's read-ahead may overtake the stream
            # and a read or two is fetched beside it.
            size = (served / "large.bin").stat().st_size
            assert size <= stats["download_bytes"] <= size + 16 * MiB, stats
            # Parts go over kept-alive connections: a TLS handshake per part would make one
            # connection per download.
            assert downloads >= 12, stats
            assert stats["connections"] * 2 <= downloads, f"{stats['connections']} connections for {downloads} parts"

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                names = ["b.bin", "c.bin", "d.bin", "small.bin"]
                digests = list(pool.map(lambda n: sha256(m.mountpoint / n), names))
            assert digests == [sha256(served / n) for n in names]

            # The one budget holds over TLS too: 64 MiB of read-ahead, plus what the process
            # needs besides (the bound is the budget + 64 MiB).
            rss = peak_rss(m.process.pid)
            assert rss <= (64 + 64) * MiB, f"peak RSS {rss / MiB:.0f} MiB"
        finally:
            m.unmount()
    finally:
        emulator.stop()


def read_until_both_faults(m, served, stats):
    """Reads four files through the mount, each equal to the served one, until the emulator has
    both failed a request and cut a body. The four take only about 40 downloads (parts grow to
    8-16 MiB), and the emulator draws faults in arrival order, which concurrency reorders: at 2%
    no body is cut in about half the passes. So they are read again, from Dropbox and not from the
    page cache, until both kinds happened; ten passes leave a chance of about 1e-3."""
    for _ in range(10):
        for name in ["large.bin", "b.bin", "d.bin", "small.bin"]:
            assert sha256(m.mountpoint / name) == sha256(served / name), name
        counts = stats()
        if counts["injected_failures"] > 0 and counts["truncated_bodies"] > 0:
            return
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    assert counts["injected_failures"] > 0 and counts["truncated_bodies"] > 0, counts


def test_reads_over_tls_survive_failed_requests_and_cut_bodies(served, certificates, tmp_path):
    emulator = tls_emulator(served, certificates, "--latency-ms", "5", "--fail-rate", "0.10",
                            "--truncate-rate", "0.02", "--seed", "16")
    try:
        m = Mount(emulator, tmp_path / "mnt", "--ca-bundle", str(certificates["ca"]))
        try:
            read_until_both_faults(m, served, emulator.stats)
        finally:
            m.unmount()
    finally:
        emulator.stop()


def test_relative_paths_name_files_in_the_folder_the_mount_started_in(served, certificates, tmp_path):
    """libfuse moves the mount's process to / as it starts serving. curl reads the CA bundle at each
    new connection and the caches are written for the mount's whole life, so relative paths must
    be taken against the starting folder: before, reads failed with EIO once a new connection was
    needed ('error setting certificate file: ca.pem')."""
    (tmp_path / "ca.pem").write_bytes(certificates["ca"].read_bytes())
    emulator = tls_emulator(served, certificates)
    try:
        m = Mount(emulator, tmp_path / "mnt", "--ca-bundle", "ca.pem", "--block-cache-dir", "blocks",
                  "-o", "cache_dir=saved", cwd=tmp_path)
        try:
            names = ["large.bin", "b.bin", "c.bin", "d.bin", "small.bin"]
            with concurrent.futures.ThreadPoolExecutor(4) as pool:      # several connections at once
                digests = list(pool.map(lambda n: sha256(m.mountpoint / n), names))
            assert digests == [sha256(served / n) for n in names]
            assert "certificate" not in m.log(), m.log()
        finally:
            m.unmount()
        blocks = [p for p in (tmp_path / "blocks").rglob("*") if p.is_file() and p.name != ".lock"]
        assert blocks, "the block cache was written where the mount started"
        assert list((tmp_path / "saved").glob("*.sqlite*")), sorted(p.name for p in (tmp_path / "saved").iterdir())
    finally:
        emulator.stop()


def test_a_mount_without_the_ca_fails_in_one_line(served, certificates, tmp_path):
    emulator = tls_emulator(served, certificates)
    try:
        with pytest.raises(RuntimeError) as failure:
            Mount(emulator, tmp_path / "mnt")
        message = str(failure.value)
        assert "certificate" in message.lower() or "ssl" in message.lower() or "tls" in message.lower(), message
    finally:
        emulator.stop()


def test_a_ca_bundle_that_holds_no_certificate_is_refused_before_mounting_offline(served, certificates, tmp_path):
    """libcurl tells of a CA bundle it cannot use only when it connects, as a failure to reach
    Dropbox; with a saved tree that would mount offline. The bundle is checked first instead."""
    emulator = tls_emulator(served, certificates)
    cache = tmp_path / "cache"
    # OpenSSL's other PEM form of a CA ("BEGIN TRUSTED CERTIFICATE"), which libcurl takes too.
    trusted = tmp_path / "trusted.pem"
    subprocess.run(["openssl", "x509", "-in", str(certificates["ca"]), "-addtrust", "serverAuth", "-trustout",
                    "-out", str(trusted)], check=True, capture_output=True)
    assert trusted.read_text().startswith("-----BEGIN TRUSTED CERTIFICATE-----")
    try:
        m = Mount(emulator, tmp_path / "mnt", "--ca-bundle", str(trusted), cache_home=cache)
        try:
            assert (m.mountpoint / "small.bin").read_bytes() == (served / "small.bin").read_bytes()
        finally:
            m.unmount()
        assert list((cache / "dbx-mount").rglob("*.sqlite*")), "the tree was saved: a failed connection would mount offline"
        not_pem = tmp_path / "not-a-bundle.pem"
        not_pem.write_text("not a certificate\n")
        env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url,
                   DBX_CONTENT_URL=emulator.url, DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(cache))
        for bundle, words in ((not_pem, "holds no PEM certificate"), (tmp_path / "absent.pem", "No such file"),
                              (tmp_path, "is not a file")):
            result = subprocess.run([str(DBX_MOUNT), "-f", "--ca-bundle", str(bundle), str(tmp_path / "mnt")], env=env,
                                    capture_output=True, text=True, timeout=60)
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 64 and len(lines) == 1 and words in lines[0], (bundle, result)
            assert not is_mounted(tmp_path / "mnt")
    finally:
        if is_mounted(tmp_path / "mnt"):     # only if the bundle was taken for an outage
            subprocess.run(["fusermount3", "-u", "-z", str(tmp_path / "mnt")], capture_output=True, check=False)
        emulator.stop()


class HandshakeRecorder:
    """A TLS 1.3 server that follows the client's order of cipher suites (as OpenSSL does unless
    told to prefer its own), records the suite of each handshake, and answers every request with
    Dropbox's 401 for a token it does not know."""

    def __init__(self, certificates: dict):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certificates["cert"], certificates["key"])
        self.context.minimum_version = ssl.TLSVersion.TLSv1_3
        self.context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.suites: list[str] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        body = b'{"error_summary": "invalid_access_token/", "error": {".tag": "invalid_access_token"}}'
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            try:
                with self.context.wrap_socket(connection, server_side=True) as tls:
                    self.suites.append(tls.cipher()[0])
                    tls.settimeout(10)
                    tls.recv(65536)
                    tls.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
                                b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            except (ssl.SSLError, OSError):
                connection.close()

    def stop(self):
        self.listener.close()
        self.thread.join(timeout=10)


def test_the_mount_offers_aes_128_gcm_first(certificates, tmp_path):
    """Every byte read is decrypted; with AES hardware AES-128-GCM decrypts faster than the
    AES-256-GCM that OpenSSL's default order puts first (README, "Reads at Dropbox's real
    conditions"), so the mount asks for it first, as browsers do."""
    server = HandshakeRecorder(certificates)
    try:
        # The server follows its client: asked for AES-256-GCM first, it agrees.
        subprocess.run(["curl", "-sS", "--cacert", str(certificates["ca"]), "--tls13-ciphers",
                        "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256", "-o", "/dev/null", "-X", "POST",
                        server.url + "/2/users/get_current_account"], check=True, capture_output=True, timeout=60)
        assert server.suites == ["TLS_AES_256_GCM_SHA384"]
        env = dict(os.environ, DBX_ACCESS_TOKEN="not-a-token", DBX_API_URL=server.url, DBX_CONTENT_URL=server.url,
                   DBX_NOTIFY_URL=server.url, XDG_CACHE_HOME=str(tmp_path / "cache"))
        (tmp_path / "mnt").mkdir()
        result = subprocess.run([str(DBX_MOUNT), "-f", "--ca-bundle", str(certificates["ca"]), str(tmp_path / "mnt")],
                                env=env, capture_output=True, text=True, timeout=60)
        # It got past the handshake to the server's answer, and said so without the token.
        assert result.returncode != 0 and not is_mounted(tmp_path / "mnt"), result
        assert "rejected the access token" in result.stderr and "not-a-token" not in result.stderr, result.stderr
        assert len(server.suites) >= 2 and set(server.suites[1:]) == {"TLS_AES_128_GCM_SHA256"}, server.suites
    finally:
        server.stop()


class HTTP2Front:
    """libcurl asks for HTTP/2 over TLS (ALPN) unless told otherwise, so against a server that
    offers it every call and every ranged part goes over HTTP/2. The emulator speaks HTTP/1.1 only; nghttpx (Debian's nghttp2-proxy) in front of it ends TLS,
    speaks HTTP/2 to the mount and HTTP/1.1 to the emulator, and logs the protocol of each request."""

    def __init__(self, emulator: Emulator, certificates: dict, folder: Path):
        self.access_log = folder / "access.log"
        self.error_log = folder / "error.log"
        port = free_port()
        backend_port = emulator.url.rsplit(":", 1)[1]
        self.process = subprocess.Popen(
            [required_tool("nghttpx", "nghttp2-proxy"), "--conf=/dev/null", f"--frontend=127.0.0.1,{port}",
             f"--backend=127.0.0.1,{backend_port}", "--workers=1", "--no-ocsp",
             # A longpoll may wait minutes for a change; the front must not cut it first.
             "--backend-read-timeout=10m", "--log-level=WARN",
             f"--accesslog-file={self.access_log}", f"--errorlog-file={self.error_log}",
             str(certificates["key"]), str(certificates["cert"])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    log = self.error_log.read_text() if self.error_log.exists() else ""
                    raise RuntimeError(f"nghttpx did not start: {log[-1000:]}")
                time.sleep(0.1)

    def protocols(self) -> collections.Counter:
        """(protocol, route) of every request the front passed on, counted: `"POST
        /2/files/download HTTP/2" 206 ...` counts as ("HTTP/2", "/2/files/download")."""
        counts = collections.Counter()
        for line in self.access_log.read_text().splitlines():
            request = line.split('"')[1].split()
            counts[(request[2], request[1])] += 1
        return counts

    def stop(self):
        stop_process(self.process)


def listing(root: Path) -> list:
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


def test_reads_over_http2_equal_the_served_files(served, certificates, tmp_path):
    emulator = Emulator(served, "--latency-ms", "20")
    front = HTTP2Front(emulator, certificates, tmp_path)
    try:
        m = Mount(front, tmp_path / "mnt", "--ca-bundle", str(certificates["ca"]), "--readahead-memory", "64")
        try:
            assert listing(m.mountpoint) == listing(served)
            assert sha256(m.mountpoint / "large.bin") == sha256(served / "large.bin")
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                names = ["b.bin", "c.bin", "d.bin", "small.bin"]
                digests = list(pool.map(lambda n: sha256(m.mountpoint / n), names))
            assert digests == [sha256(served / n) for n in names]
            size = (served / "large.bin").stat().st_size
            assert emulator.stats()["download_bytes"] >= size
            rss = peak_rss(m.process.pid)
            assert rss <= (64 + 64) * MiB, f"peak RSS {rss / MiB:.0f} MiB"
        finally:
            m.unmount()
        protocols = front.protocols()
        # Every call went over HTTP/2: the listing, the parts, and none fell back to HTTP/1.1.
        assert protocols[("HTTP/2", "/2/files/download")] >= 12, protocols
        assert protocols[("HTTP/2", "/2/files/list_folder")] >= 1, protocols
        assert not [key for key in protocols if key[0] != "HTTP/2"], protocols
    finally:
        front.stop()
        emulator.stop()


def test_reads_over_http2_survive_failed_requests_and_cut_bodies(served, certificates, tmp_path):
    """A body the emulator cuts reaches the mount as an HTTP/2 stream reset by the front (curl
    error 92, "stream was not closed cleanly", not a closed connection): it must be retried like any
    transport failure."""
    emulator = Emulator(served, "--latency-ms", "5", "--fail-rate", "0.10", "--truncate-rate", "0.02", "--seed", "16")
    front = HTTP2Front(emulator, certificates, tmp_path)
    try:
        m = Mount(front, tmp_path / "mnt", "--ca-bundle", str(certificates["ca"]))
        try:
            read_until_both_faults(m, served, emulator.stats)
        finally:
            m.unmount()
        assert front.protocols()[("HTTP/2", "/2/files/download")] > 0
    finally:
        front.stop()
        emulator.stop()
