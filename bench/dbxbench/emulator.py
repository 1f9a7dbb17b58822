"""Starting and stopping dbx-emulator, its admin calls (stats, knobs), warming it up, the
throw-away CA of the TLS rows, and the HTTP/2 front of the HTTP/2 rows."""
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request

from .common import BenchError, MiB, TOKEN
from .processes import _children, _stop, peak_rss


def make_tls(folder):
    """A throw-away CA and a certificate for 127.0.0.1 signed by it (openssl), for the TLS rows:
    the mount trusts the CA through --ca-bundle, curl through --cacert, the runner through an
    ssl context. Returns {"ca", "cert", "key"} paths."""
    folder.mkdir(parents=True, exist_ok=True)
    def openssl(*argv):
        result = subprocess.run(["openssl", *map(str, argv)], capture_output=True, timeout=60)
        if result.returncode != 0:
            raise BenchError(f"openssl {argv[0]} failed: {result.stderr.decode(errors='replace').strip()[-200:]}")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", folder / "ca.key", "-out", folder / "ca.pem",
            "-days", "2", "-subj", "/CN=dbx-mount bench CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", folder / "server.key", "-out", folder / "server.csr",
            "-subj", "/CN=127.0.0.1")
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", folder / "server.csr", "-CA", folder / "ca.pem", "-CAkey", folder / "ca.key",
            "-CAcreateserial", "-out", folder / "server.pem", "-days", "2", "-extfile", folder / "ext.cnf")
    return {"ca": folder / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}


class Emulator:
    def __init__(self, binary, root, latency_ms, bandwidth, logdir, name="emulator", start_timeout=120, tls=None):
        argv = [str(binary), "--root", str(root), "--port", "0", "--latency-ms", str(latency_ms)]
        if bandwidth:
            argv += ["--bandwidth", str(bandwidth)]
        self.tls = tls
        if tls:
            argv += ["--tls-cert", str(tls["cert"]), "--tls-key", str(tls["key"])]
        self.log_path = logdir / f"{name}.log"
        self.log_file = open(self.log_path, "ab")
        start_offset = self.log_path.stat().st_size
        started = time.monotonic()
        self.process = subprocess.Popen(argv, stdout=self.log_file, stderr=self.log_file)
        _children.append(self.process)
        deadline = started + start_timeout      # it indexes and hashes the served tree before it listens
        line = ""
        while "listening on " not in line:
            if self.process.poll() is not None or time.monotonic() > deadline:
                timed_out = self.process.poll() is None
                _stop(self.process)
                text = self.log_path.read_text(errors="replace").strip().splitlines()
                reason = f"not listening after {start_timeout:.0f} s" if timed_out else (text[-1] if text else "no output")
                raise BenchError(f"dbx-emulator did not start: {reason} (see {self.log_path})")
            time.sleep(0.02)
            text = self.log_path.read_bytes()[start_offset:].decode(errors="replace")
            line = next((l for l in text.splitlines() if "listening on " in l), "")
        # What indexing the tree costs, for the rows that serve a large one.
        self.start_seconds = time.monotonic() - started
        self.rss_at_start = peak_rss(self.process.pid)
        self.url = line.split("listening on ", 1)[1].strip()
        self._admin = None      # the runner's one connection for stats and knobs (see _call)
        self.latency_ms = latency_ms
        self.bandwidth = bandwidth

    def alive(self):
        return self.process.poll() is None

    def _call(self, method, path, body=None):
        """An admin request over one kept-alive connection. The emulator counts every TCP
        connection it accepts: a new one per call would put the runner's own calls in a measured
        run's count (wait_for_longpoll asks ten times a second: 300 for a 30 s listing)."""
        for attempt in (1, 2):
            try:
                if self._admin is None:
                    host, port = self.url.split("//", 1)[1].rsplit(":", 1)
                    if self.tls:
                        self._admin = http.client.HTTPSConnection(host, int(port), timeout=30, context=self.ssl_context())
                    else:
                        self._admin = http.client.HTTPConnection(host, int(port), timeout=30)
                self._admin.request(method, path, body=body)
                response = self._admin.getresponse()
                data = response.read()
                if response.status >= 400:
                    raise BenchError(f"dbx-emulator answered {response.status} to {method} {path}: {data[:200]!r}")
                return json.loads(data or b"null")
            except (OSError, http.client.HTTPException) as error:
                self._admin.close()
                self._admin = None
                # Once again on a new connection, in case the emulator dropped the idle one.
                if attempt == 2 or not self.alive():
                    state = "running" if self.alive() else f"exited with status {self.process.returncode}"
                    raise BenchError(f"cannot reach dbx-emulator at {self.url}{path} ({state}): {error}")

    def ssl_context(self):
        return ssl.create_default_context(cafile=str(self.tls["ca"])) if self.tls else None

    def stats(self):
        return self._call("GET", "/__stats")

    def reset_stats(self):
        self._call("POST", "/__stats/reset", b"")

    def set_latency(self, ms):
        if ms != self.latency_ms:
            self._call("POST", "/__admin/knobs", json.dumps({"latency_ms": ms}).encode())
            self.latency_ms = ms

    def set_bandwidth(self, bytes_per_second):
        """None removes the cap (the knob takes 0 for that)."""
        if bytes_per_second != self.bandwidth:
            self._call("POST", "/__admin/knobs", json.dumps({"bandwidth": bytes_per_second or 0}).encode())
            self.bandwidth = bytes_per_second

    def publish_link(self, path):
        """Publishes a served path as a shared link; returns its URL."""
        return self._call("POST", "/__admin/shared_links", json.dumps({"path": path}).encode())["url"]

    def requests(self, route):
        return self.stats().get("requests", {}).get(route, 0)

    def wait_for_longpoll(self, timeout):
        """Until some mount's change feed has listed everything and gone on to longpoll: the
        feed calls longpoll only once its first full listing is in."""
        deadline = time.monotonic() + timeout
        while self.requests("files/list_folder/longpoll") < 1:
            if time.monotonic() > deadline:
                raise BenchError("the mount never finished its first full listing (no longpoll)")
            time.sleep(0.1)

    def warm_up(self, root, layout):
        """Nobody pays for first-touch costs: the served files go into the page cache, the tree
        into the dentry cache, and the emulator computes its content hashes (a listing does)."""
        buffer = bytearray(8 * MiB)
        for relative in layout["large"] + [layout["huge"]]:
            with open(root / relative, "rb", buffering=0) as f:
                while f.readinto(buffer):
                    pass
        subprocess.run(["find", str(root)], stdout=subprocess.DEVNULL, check=False, timeout=600)
        for folder in ("big", "wide"):
            request = urllib.request.Request(self.url + "/2/files/list_folder", method="POST",
                                             data=json.dumps({"path": "/" + folder, "recursive": False}).encode(),
                                             headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600, context=self.ssl_context()) as response:
                response.read()

    def peak_rss(self):
        return peak_rss(self.process.pid)

    def stop(self):
        if self._admin is not None:
            self._admin.close()
        _stop(self.process)
        if self.process in _children:
            _children.remove(self.process)
        self.log_file.close()


class HTTP2Front:
    """nghttpx (Debian's nghttp2-proxy) in front of a plain-HTTP emulator. libcurl, like curl, asks
    for HTTP/2 over TLS (ALPN) unless told otherwise, and uses it wherever the server offers it;
    the emulator speaks HTTP/1.1 only. The front ends TLS with the throw-away CA, speaks
    HTTP/2 to the mount and to curl, and HTTP/1.1 to the emulator. `url` and `tls` are the front's;
    the admin calls, stats and knobs go to the emulator behind it (`backend`), whose process is the
    one whose CPU is counted. The front's own CPU is counted in no column."""

    def __init__(self, backend, tls, logdir, start_timeout=20):
        binary = shutil.which("nghttpx")
        if not binary:
            raise BenchError("the HTTP/2 rows need nghttpx: apt-get install nghttp2-proxy")
        self.backend, self.tls = backend, tls
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        backend_port = backend.url.rsplit(":", 1)[1]
        self.log_path = logdir / "nghttpx.log"
        self.log_file = open(self.log_path, "ab")
        self.access_log = logdir / "nghttpx-access.log"
        self.access_log.unlink(missing_ok=True)
        self.front = subprocess.Popen(
            [binary, "--conf=/dev/null", f"--frontend=127.0.0.1,{port}", f"--backend=127.0.0.1,{backend_port}",
             "--workers=1", "--no-ocsp", "--backend-read-timeout=10m", "--log-level=WARN",
             f"--accesslog-file={self.access_log}", str(tls["key"]), str(tls["cert"])],
            stdout=self.log_file, stderr=self.log_file)
        _children.append(self.front)
        self.url = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self.front.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise BenchError(f"nghttpx did not start (see {self.log_path})")
                time.sleep(0.05)

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def protocols(self):
        """Requests the front passed on since it started, by the protocol they came in (its access
        log: `"POST /2/files/download HTTP/2" 206 ...`)."""
        counts = {}
        if self.access_log.exists():
            for line in self.access_log.read_text(errors="replace").splitlines():
                fields = line.split('"')
                request = fields[1].split() if len(fields) > 1 else []
                protocol = request[-1] if len(request) == 3 else "unparsed"
                counts[protocol] = counts.get(protocol, 0) + 1
        return counts

    def alive(self):
        return self.front.poll() is None and self.backend.alive()

    def stop(self):
        """Stops the front only: the emulator behind it is the runner's."""
        _stop(self.front)
        if self.front in _children:
            _children.remove(self.front)
        self.log_file.close()
