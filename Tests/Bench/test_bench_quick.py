"""The benchmark runner must never rot: `bench/run.py --quick` completes and writes well-formed output.

No speed is asserted here, ever: only that every workload ran, its figures are positive numbers,
results.md has its table and ratios.svg is valid XML. Like the mount tests, it needs /dev/fuse and
fusermount3; outside CI it skips without them, under CI (`CI=true`) it fails.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "bench" / "run.py"

def _load_runner():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_run", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_runner()    # bench/run.py, for its list of workloads


def _missing():
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if not shutil.which("fusermount3"):
        return "fusermount3 is not installed (apt-get install fuse3)"
    return None


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    problem = _missing()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"the benchmark runner cannot run under CI: {problem}")
        pytest.skip(problem)
    out = tmp_path_factory.mktemp("bench-quick")
    # The runner builds the release binaries itself; allow for a cold build on a slow machine.
    result = subprocess.run([sys.executable, str(RUNNER), "--quick", "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=3600)
    assert result.returncode == 0, f"bench/run.py --quick failed:\n{result.stderr[-4000:]}"
    return out, result


def positive(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def non_negative(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def test_results_json_has_every_workload_with_positive_figures(quick_run):
    out, _ = quick_run
    results = json.loads((out / "results.json").read_text())
    for key in ("cpu_model", "kernel", "cpus"):
        assert results["machine"].get(key), key
    assert results["date"]
    assert results["config"]["quick"] is True
    names = [w["name"] for w in results["workloads"]]
    assert names == bench.WORKLOAD_NAMES
    for w in results["workloads"]:
        assert "error" not in w, w
        assert isinstance(w["output_matches_baseline"], bool), w["name"]
        for run in ("baseline", "cold", "warm"):
            s = w[run]
            assert positive(s["median_seconds"]), (w["name"], run)
            assert len(s["runs"]) == results["config"]["repeats"]
            if w["metric"] == "throughput":
                assert positive(s["median_mb_per_s"]), (w["name"], run)
            if w["metric"] == "iops":
                assert positive(s["median_iops"]), (w["name"], run)
            assert non_negative(s["api_calls_total"]), (w["name"], run)
            assert all(non_negative(n) for n in s["api_calls"].values())
            assert non_negative(s["bytes_downloaded"]), (w["name"], run)
        for run in ("cold", "warm"):
            assert positive(w[run]["ratio"]), (w["name"], run)
            assert positive(w[run]["peak_rss_bytes"]), (w["name"], run)
        if w["kind"] == "read" and w["metric"] == "throughput":
            # CPU per GiB, of the mount and the reader, and of curl for the baseline (/proc, rusage).
            for run in ("cold", "warm"):
                assert positive(w[run]["cpu_s_per_gib"]["mount"]) or run == "warm", (w["name"], run, w[run]["cpu_s_per_gib"])
            assert positive(w["baseline"]["cpu_s_per_gib"]["reader"]), (w["name"], w["baseline"])
        if w["name"].startswith(("seq-read-tls", "par-read-4-tls")):
            assert w["tls"] is True and w["scheme"] == "https" and w["latency_ms"] in (50, 100), w["name"]


def test_results_md_has_the_table(quick_run):
    out, result = quick_run
    text = (out / "results.md").read_text()
    assert "Machine:" in text and "Date:" in text
    assert "| workload | run | median | baseline | ratio | API calls | bytes downloaded | peak RSS | CPU s/GiB" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| workload")]
    for name in bench.WORKLOAD_NAMES:
        for run in ("cold", "warm"):
            assert any(row.startswith(f"| {name} | {run} |") for row in rows), (name, run)
    for row in rows:
        assert row.count("|") == 10, row
    assert "| workload |" in result.stdout     # the table is also printed


def test_ratios_svg_parses_and_has_a_bar_per_run(quick_run):
    out, _ = quick_run
    root = ET.parse(out / "ratios.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    for name in bench.WORKLOAD_NAMES:
        for run in ("cold", "warm"):
            assert f"{name} ({run})" in texts
    assert any("baseline" in t for t in texts)
    rects = list(root.iter("{http://www.w3.org/2000/svg}rect"))
    assert len(rects) >= 2 * len(bench.WORKLOAD_NAMES)
    for rect in rects:
        assert float(rect.get("width")) > 0 and float(rect.get("height")) > 0


@pytest.fixture(scope="module")
def opt_in_run(quick_run, tmp_path_factory):
    """Three opt-in rows in quick mode: one over HTTP/2 (nghttpx must be there), one after another
    read, one read 16 KiB at a time with --direct-io."""
    if not shutil.which("nghttpx"):
        if os.environ.get("CI"):
            pytest.fail("nghttpx is missing: .ci/run installs Debian's nghttp2-proxy package")
        pytest.skip("nghttpx is not installed (apt-get install nghttp2-proxy)")
    out = tmp_path_factory.mktemp("bench-opt-in")
    # quick_run has built the release binaries; this build finds nothing to do.
    result = subprocess.run([sys.executable, str(RUNNER), "--quick", "--only", "seq-read-http2-50ms-link-300m",
                             "seq-read-tls-50ms-link-300m-after-another", "seq-read-tls-50ms-link-300m-16k-direct-io",
                             "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
    assert result.returncode == 0, f"bench/run.py failed:\n{result.stderr[-4000:]}"
    rows = {w["name"]: w for w in json.loads((out / "results.json").read_text())["workloads"]}
    for row in rows.values():
        assert "error" not in row, row
        assert row["output_matches_baseline"] is True, row["name"]
        assert positive(row["cold"]["median_mb_per_s"]) and positive(row["baseline"]["median_mb_per_s"])
    return out, rows


def test_the_http2_rows_go_over_http2_through_an_nghttpx_front(opt_in_run):
    """The opt-in HTTP/2 rows (libcurl asks for HTTP/2 over TLS): the mount and curl reach the
    emulator through nghttpx, and every request the front passed on came in over HTTP/2."""
    out, rows = opt_in_run
    row = rows["seq-read-http2-50ms-link-300m"]
    assert row["http2"] and row["tls"] and row["scheme"] == "https", row
    protocols = row["front_requests_by_protocol"]
    assert set(protocols) == {"HTTP/2"} and protocols["HTTP/2"] >= 3, protocols
    assert "TLS, HTTP/2" in (out / "results.md").read_text()


def test_a_row_after_another_read_counts_only_its_own_read(opt_in_run):
    """The read run first is not measured: the row's downloads are its own file's, once."""
    _, rows = opt_in_run
    row = rows["seq-read-tls-50ms-link-300m-after-another"]
    returned = row["cold"]["median_bytes_returned"]
    assert positive(returned)
    assert returned <= row["cold"]["bytes_downloaded"] <= 1.1 * returned, row["cold"]


def test_small_reads_with_direct_io_download_the_file_once(opt_in_run):
    """Every 16 KiB read(2) reaches the mount with --direct-io; the stream still downloads each
    byte once, not a request per read."""
    _, rows = opt_in_run
    row = rows["seq-read-tls-50ms-link-300m-16k-direct-io"]
    assert row["mount_args"] == ["--direct-io"], row
    returned = row["cold"]["median_bytes_returned"]
    assert positive(returned)
    assert returned <= row["cold"]["bytes_downloaded"] <= 1.1 * returned, row["cold"]
