"""issue 17: Prometheus metrics. A mount with --metrics-addr serves /metrics in the text format,
with the mount label, `_total` counters and latency histograms; a real Prometheus server (Debian's)
scrapes it, and its query API answers with the mount's download bytes and request-latency
histogram after a read. Bad addresses fail in one line."""
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import DBX_MOUNT, TOKEN, Mount, free_port, required_tool, stop_process

MiB = 1 << 20


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode()


def samples(text):
    """{(name, labels-string): value} of every sample line."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name, _, labels = series.partition("{")
            found[(name, "{" + labels if labels else "")] = float(value)
    return found


def value(found, name, **labels):
    matches = [v for (n, l), v in found.items() if n == name and all(f'{k}="{w}"' in l for k, w in labels.items())]
    assert matches, f"no {name} with {labels}"
    return sum(matches)


@pytest.fixture
def metrics_mount(served, emulator, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    port = free_port()
    m = Mount(emulator, tmp_path / "mnt", "--metrics-addr", f"127.0.0.1:{port}")
    yield m, port
    m.unmount()


def biggest_file(root: Path) -> Path:
    return max((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def test_metrics_count_what_a_read_did(served, metrics_mount):
    m, port = metrics_mount
    target = biggest_file(served)
    relative = target.relative_to(served)
    assert (m.mountpoint / relative).read_bytes() == target.read_bytes()
    text = scrape(port)
    found = samples(text)
    mount = str(m.mountpoint.resolve())
    assert value(found, "dbxmount_download_bytes_total", mount=mount) >= target.stat().st_size
    assert value(found, "dbxmount_dropbox_requests_total", mount=mount, route="files/download") >= 1
    assert value(found, "dbxmount_dropbox_request_duration_seconds_count", mount=mount, route="files/download") >= 1
    assert value(found, "dbxmount_dropbox_request_duration_seconds_bucket", mount=mount, route="files/download", le="+Inf") >= 1
    assert value(found, "dbxmount_fuse_operation_duration_seconds_count", mount=mount, operation="read") >= 1
    assert value(found, "dbxmount_fuse_operation_duration_seconds_count", mount=mount, operation="lookup") >= 1
    assert value(found, "dbxmount_entries", mount=mount) > 0
    assert "# TYPE dbxmount_download_bytes_total counter" in text
    assert "# TYPE dbxmount_dropbox_request_duration_seconds histogram" in text
    # Every series is the mount's, and counters end in _total.
    assert all('mount="' in labels for (name, labels) in found), [k for k in found if 'mount="' not in k[1]][:3]
    for line in text.splitlines():
        if line.startswith("# TYPE ") and line.endswith(" counter"):
            assert line.split()[2].endswith("_total"), line

    # Every family says what it measures, and Prometheus' own linter passes the exposition.
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert all(f"# HELP {family} " in text for family in families), families
    promtool = required_tool("promtool", "prometheus")
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    # A path other than /metrics is a 404, not the metrics.
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    assert missing.value.code == 404


def test_slow_and_idle_clients_do_not_hold_up_a_scrape_or_status(metrics_mount):
    """A port scan's idle connections and a client trickling its request a byte a second (held
    for up to 2 minutes before) each hold only their own connection, and only for seconds."""
    m, port = metrics_mount
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    trickler = socket.create_connection(("127.0.0.1", port))
    stop = time.monotonic() + 20

    def trickle():
        try:
            while time.monotonic() < stop:
                trickler.send(b"G")
                time.sleep(1)
        except OSError:
            pass   # the server gave up on it, as it should

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        time.sleep(0.5)
        started = time.monotonic()
        assert "dbxmount_entries" in scrape(port)
        assert time.monotonic() - started < 3, "the scrape waited behind the slow clients"
        started = time.monotonic()
        status = subprocess.run([str(DBX_MOUNT), "status", str(m.mountpoint)], capture_output=True, text=True,
                                timeout=30)
        assert status.returncode == 0, status.stderr
        assert time.monotonic() - started < 5
    finally:
        stop = 0
        for connection in idle + [trickler]:
            connection.close()


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:0", "no-such-host.invalid:9100", "127.0.0.1:99999"])
def test_a_bad_metrics_address_fails_in_one_line(emulator, tmp_path, address):
    (tmp_path / "mnt").mkdir()
    env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
               DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_RUNTIME_DIR=str(tmp_path))
    result = subprocess.run([str(DBX_MOUNT), "-f", "--metrics-addr", address, str(tmp_path / "mnt")], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 64, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "metrics-addr" in result.stderr, result.stderr


def test_a_metrics_port_in_use_fails_in_one_line(emulator, tmp_path):
    (tmp_path / "mnt").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = dict(os.environ, DBX_ACCESS_TOKEN=TOKEN, DBX_API_URL=emulator.url, DBX_CONTENT_URL=emulator.url,
                   DBX_NOTIFY_URL=emulator.url, XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_RUNTIME_DIR=str(tmp_path))
        result = subprocess.run([str(DBX_MOUNT), "-f", "-o", f"metrics_addr=127.0.0.1:{port}", str(tmp_path / "mnt")],
                                env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 64, result.stderr
    assert "Address already in use" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def prometheus_binary():
    return required_tool("prometheus", "prometheus")


def query(port, expression):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_a_real_prometheus_scrapes_the_mount(served, metrics_mount, tmp_path):
    binary = prometheus_binary()
    m, metrics_port = metrics_mount
    target = biggest_file(served)
    assert (m.mountpoint / target.relative_to(served)).read_bytes() == target.read_bytes()

    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                      f"  - job_name: dbx-mount\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n")
    server = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{web_port}"],
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    try:
        deadline = time.monotonic() + 90
        downloaded = latency = None
        while time.monotonic() < deadline:
            try:
                downloaded = query(web_port, "dbxmount_download_bytes_total")
                latency = query(web_port, 'sum by (route) (dbxmount_dropbox_request_duration_seconds_count{route="files/download"})')
                if downloaded and latency:
                    break
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(1)
        assert downloaded, f"Prometheus never had the download bytes ({(tmp_path / 'prometheus.log').read_text()[-1500:]})"
        assert float(downloaded[0]["value"][1]) >= target.stat().st_size
        assert downloaded[0]["metric"]["mount"] == str(m.mountpoint.resolve())
        assert latency and float(latency[0]["value"][1]) >= 1
        quantile = query(web_port, "histogram_quantile(0.9, sum by (le) (dbxmount_dropbox_request_duration_seconds_bucket))")
        assert quantile and float(quantile[0]["value"][1]) > 0
    finally:
        stop_process(server)
