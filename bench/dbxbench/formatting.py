"""Figures as people read them: seconds, bytes, throughput, ratios, calls, CPU per GiB."""
from .common import GiB, MiB


def fmt_seconds(s):
    if s is None:
        return "–"
    if s < 0.001:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1000:.1f} ms"
    return f"{s:.2f} s"


def fmt_bytes(n):
    if n is None:
        return "–"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def fmt_figure(summary, metric):
    if not summary:
        return "–"
    if metric == "throughput":
        return f"{summary['median_mb_per_s']:.0f} MB/s ({fmt_seconds(summary['median_seconds'])})"
    if metric == "iops":
        return f"{summary['median_iops']:,.0f} IOPS ({summary['median_mb_per_s']:.1f} MB/s)"
    return fmt_seconds(summary["median_seconds"])


def fmt_ratio(r):
    if r is None:
        return "–"
    if r < 0.1:
        return f"{r:.2g}×"
    return f"{r:.2f}×" if r < 10 else f"{r:,.0f}×"


def fmt_cpu(summary, baseline):
    """CPU-seconds per GiB read: the mount's, the reader's and the emulator's, then the
    baseline's reader (curl) and emulator; blank for rows that read no bytes."""
    cpu, base = summary.get("cpu_s_per_gib"), (baseline or {}).get("cpu_s_per_gib")
    if not cpu:
        return ""
    text = f"{cpu.get('mount', 0):.2f}, {cpu.get('reader', 0):.2f}, {cpu.get('emulator', 0):.2f}"
    if base:
        text += f" ({base.get('reader', 0):.2f}, {base.get('emulator', 0):.2f})"
    return text


def fmt_calls(summary):
    calls = {route: n for route, n in (summary.get("api_calls") or {}).items() if n}
    if not calls:
        return "0"
    total = summary.get("api_calls_total", 0)
    parts = ", ".join(f"{route.replace('files/', '')} {n:g}" for route, n in sorted(calls.items(), key=lambda kv: -kv[1]))
    return f"{total:g} ({parts})"
