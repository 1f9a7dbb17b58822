"""ratios.svg: one bar per row and run, the mount's figure against its baseline."""
from xml.sax.saxutils import escape

from .formatting import fmt_ratio


def ratios_svg(results):
    """A diverging bar chart on a log scale: bars grow right of the 1.0 line when dbx-mount is slower."""
    import math
    bars = []
    for w in results["workloads"]:
        if "error" in w:
            continue
        for run in ("cold", "warm"):
            r = w[run].get("ratio")
            if r and r > 0:
                bars.append((f"{w['name']} ({run})", run, r))
    left, label_w, right_pad, top, row, bar_h = 20, 190, 90, 92, 26, 16
    plot_w = 560
    width = left + label_w + plot_w + right_pad
    height = top + row * max(len(bars), 1) + 60
    lo = min([r for _, _, r in bars] + [0.5])
    hi = max([r for _, _, r in bars] + [2.0])
    lo_exp, hi_exp = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if hi_exp == lo_exp:
        hi_exp += 1

    def x(v):
        return left + label_w + (math.log10(v) - lo_exp) / (hi_exp - lo_exp) * plot_w

    m = results["machine"]
    c = results["config"]
    title = "dbx-mount ÷ baseline, time ratio (log scale; 1.0 = as fast as the baseline, lower is better)"
    subtitle = f"{m.get('cpu_model', '')}, {m.get('cpus')} CPUs, Linux {m.get('kernel')} · {results['date']}"
    subtitle2 = (f"emulator latency {c['metadata_latency_ms']} ms (metadata) / {c['read_latency_ms']} ms (reads)"
                 f" · median of {c['repeats']} · dbx-mount {results.get('git_commit') or '?'}"
                 f"{' · --quick' if c['quick'] else ''}")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
           f'<text x="{left}" y="42" fill="#555">{escape(subtitle)}</text>',
           f'<text x="{left}" y="58" fill="#555">{escape(subtitle2)}</text>']
    axis_y = top + row * len(bars) + 6
    for e in range(lo_exp, hi_exp + 1):
        for mult in (1, 2, 5):
            v = mult * 10 ** e
            if v < 10 ** lo_exp or v > 10 ** hi_exp:
                continue
            xv = x(v)
            stroke = "#bbb" if mult == 1 else "#eee"
            out.append(f'<line x1="{xv:.1f}" y1="{top - 8}" x2="{xv:.1f}" y2="{axis_y}" stroke="{stroke}"/>')
            if mult == 1:
                label = f"{v:g}" if v < 1000 else f"{v:,.0f}"
                out.append(f'<text x="{xv:.1f}" y="{axis_y + 16}" text-anchor="middle" fill="#333">{label}×</text>')
    colors = {"cold": "#3b6fb6", "warm": "#e39b2d"}
    for i, (label, run, r) in enumerate(bars):
        y = top + i * row
        x1, xr = x(1.0), x(r)
        bx, bw = (x1, xr - x1) if r >= 1 else (xr, x1 - xr)
        out.append(f'<text x="{left + label_w - 8}" y="{y + bar_h - 3}" text-anchor="end">{escape(label)}</text>')
        out.append(f'<rect x="{bx:.1f}" y="{y}" width="{max(bw, 1):.1f}" height="{bar_h}" fill="{colors[run]}"/>')
        tx = max(xr, x1) + 6
        out.append(f'<text x="{tx:.1f}" y="{y + bar_h - 3}" fill="#222">{escape(fmt_ratio(r))}</text>')
    x1 = x(1.0)
    out.append(f'<line x1="{x1:.1f}" y1="{top - 12}" x2="{x1:.1f}" y2="{axis_y}" stroke="#c00" stroke-width="2"/>')
    out.append(f'<text x="{x1:.1f}" y="{top - 16}" text-anchor="middle" fill="#c00">1.0 = baseline</text>')
    ly = height - 16
    out.append(f'<rect x="{left}" y="{ly - 10}" width="12" height="12" fill="{colors["cold"]}"/>')
    out.append(f'<text x="{left + 18}" y="{ly}">cold (fresh mount)</text>')
    out.append(f'<rect x="{left + 150}" y="{ly - 10}" width="12" height="12" fill="{colors["warm"]}"/>')
    out.append(f'<text x="{left + 168}" y="{ly}">warm (same mount, again)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
