"""results.json and results.md: the machine, the commit, and the table of figures."""
import json
import os
import platform
import subprocess

from .common import READ, REPO
from .workloads import WORKLOAD_NAMES
from .formatting import fmt_bytes, fmt_calls, fmt_cpu, fmt_figure, fmt_ratio
from .chart import ratios_svg


def machine_info():
    info = {"hostname": platform.node(), "kernel": platform.release(), "arch": platform.machine(),
            "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["memory_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    info.setdefault("cpu_model", platform.processor() or "unknown")
    return info


def git_commit():
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "Sources"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip()
        return head + ("+local-changes" if dirty else "") if head else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def fixtures_text(results):
    """The fixtures this run's rows served: the shared set, the million-entry account, or both."""
    c = results["config"]
    f = c["fixtures"]
    parts = []
    if any(w["name"] in WORKLOAD_NAMES for w in results["workloads"]):
        parts.append(f"wide folder of {f['wide_files']:,} files; deep tree of {f['deep_entries']:,} entries "
                     f"({f['deep_folders']:,} folders); large files of {fmt_bytes(f['large_size'])}, "
                     f"huge file of {fmt_bytes(f['huge_size'])}")
    million = c.get("million_fixture")
    if million:
        parts.append(f"for list-million, an account of {million['entries']:,} entries "
                     f"({million['folders']:,} folders: {million['top_folders']} x {million['subfolders']}; "
                     f"{million['files']:,} empty files)")
    return "; ".join(parts)


def results_markdown(results):
    m, c = results["machine"], results["config"]
    lines = [
        f"Machine: {m.get('cpu_model')}, {m.get('cpus')} CPUs, {fmt_bytes(m.get('memory_bytes'))} RAM, "
        f"Linux {m.get('kernel')}{', ' + m['os'] if m.get('os') else ''}. Date: {results['date']}. "
        f"dbx-mount {results.get('git_commit') or ''}.",
        "",
        f"Emulator latency: {c['metadata_latency_ms']} ms per request for metadata workloads, "
        f"{c['read_latency_ms']} ms for read workloads; bandwidth cap: "
        f"{str(c['bandwidth']) + ' B/s' if c['bandwidth'] else 'none'}. Median of {c['repeats']} "
        f"repeat(s){'; --quick fixtures' if c['quick'] else ''}. Fixtures: {fixtures_text(results)}.",
        "",
        "Ratio = time through dbx-mount ÷ time of the baseline (1.0 = as fast, 2.0 = twice as slow); "
        "for reads it is curl's throughput ÷ dbx-mount's, for fio the baseline's IOPS ÷ dbx-mount's. "
        "Cold = first run on a fresh mount (its API calls include mounting); warm = the same command again on that mount. "
        "Read workloads other than ttfb-fresh-mount start once the fresh mount has listed the account "
        "(its change feed reached longpoll), so they time the read engine, and their API calls exclude that listing.",
        "",
        "| workload | run | median | baseline | ratio | API calls | bytes downloaded | peak RSS | CPU s/GiB: mount, reader, emulator (baseline: reader, emulator) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w in results["workloads"]:
        if "error" in w:
            lines.append(f"| {w['name']} | – | failed: {w['error']} | | | | | | |")
            continue
        base = fmt_figure(w["baseline"], w["metric"])
        for run in ("cold", "warm"):
            s = w[run]
            downloaded = fmt_bytes(s.get("bytes_downloaded"))
            if w["kind"] == READ and s.get("read_amplification") is not None:
                downloaded += f" ({s['read_amplification']:.2f}× returned)"
            flag = "" if w["output_matches_baseline"] else " **output differs!**"
            lines.append(f"| {w['name']} | {run} | {fmt_figure(s, w['metric'])}{flag} | {base} | "
                         f"{fmt_ratio(s.get('ratio'))} | {fmt_calls(s)} | {downloaded} | "
                         f"{fmt_bytes(s.get('peak_rss_bytes'))} | {fmt_cpu(s, w['baseline']) if w['metric'] == 'throughput' else ''} |")
    lines += ["", "Workloads:", ""]
    for w in results["workloads"]:
        if "error" not in w:
            link = f", {w['bandwidth'] / 1e9:g} GB/s cap" if w.get("bandwidth") else ""
            link += (", TLS, HTTP/2" if w.get("http2") else ", TLS") if w.get("tls") else ""
            lines.append(f"- `{w['name']}` ({w['latency_ms']} ms latency{link}): {w['what']}; baseline: {w['baseline_what']}.")
            if w.get("emulator"):
                e = w["emulator"]
                lines.append(f"  Its own dbx-emulator indexed and hashed the {w['fixture']['entries']:,} entries in "
                             f"{e['start_seconds']:.1f} s before listening ({fmt_bytes(e['rss_at_start_bytes'])} "
                             f"resident then, {fmt_bytes(e['peak_rss_bytes'])} at its peak).")
            if w.get("saved_tree"):
                t = w["saved_tree"]
                lines.append(f"  The listed mount's peak RSS from the warm find through its first save of the whole tree: "
                             f"{fmt_bytes(t['peak_rss_bytes'])}. A remount from that saved tree was live (caught up, "
                             f"on to longpoll) in {t['remount_seconds']:.2f} s, API calls "
                             f"{fmt_calls({'api_calls': t['remount_api_calls'], 'api_calls_total': sum(t['remount_api_calls'].values())})}"
                             f", peak RSS {fmt_bytes(t['remount_peak_rss_bytes'])}.")
            if w.get("remote_reference"):
                ref = w["remote_reference"]
                lines.append(f"  For scale, not the baseline: {ref['what']} reach {ref['iops']:,.0f} IOPS "
                             f"({ref['mb_per_s']:.1f} MB/s) over the same emulator.")
    return "\n".join(lines) + "\n"


def write_outputs(out_dir, results):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "results.md").write_text(results_markdown(results))
    (out_dir / "ratios.svg").write_text(ratios_svg(results))
