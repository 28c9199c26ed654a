#!/usr/bin/env python3
"""SVG plots of bus bandwidth against message size, standard library only.

Reads the same JSON rows as bench/tables.py (hvdbench --json and the anchors'
--json), combines repeated passes with the median, and writes one SVG per
(np, op): busbw (GB/s, log scale) against size (bytes, log scale), one line
per system.

  bench/plot.py --out docs/img bench/results/X/*.json bench/results/X/anchors-p*/*.json
"""

import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tables  # noqa: E402  (norm_op, loading)

COLORS = {"hvd-shm": "#d62728", "hvd-tcp": "#ff7f0e", "hvd-auto": "#d62728", "gloo": "#1f77b4",
          "torch-gloo": "#1f77b4", "mpi-shm": "#2ca02c", "mpi-tcp": "#9467bd"}
FALLBACK = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def load(files):
    rows = []
    for f in files:
        with open(f) as fh:
            text = fh.read()
        try:
            data = json.loads(text)
            if isinstance(data, dict):
                data = data.get("rows", [])
        except json.JSONDecodeError:
            data = [json.loads(l) for l in text.splitlines() if l.strip()]
        for r in data:
            r.setdefault("system", os.path.basename(f).rsplit(".", 1)[0])
            r["op"] = tables.norm_op(r.get("op", ""))
            rows.append(r)
    return rows


def human(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            v = n / div
            return f"{v:g} {unit}"
    return f"{n} B"


def svg(series, title, width=720, height=420):
    """series: {system: [(bytes, busbw)]} -> SVG text."""
    pts = [(b, v) for s in series.values() for b, v in s if b > 0 and v > 0]
    if not pts:
        return None
    x0, x1 = math.log2(min(b for b, _ in pts)), math.log2(max(b for b, _ in pts))
    y0 = math.floor(math.log10(min(v for _, v in pts)))
    y1 = math.ceil(math.log10(max(v for _, v in pts)))
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    L, R, T, B = 70, 150, 40, 50
    pw, ph = width - L - R, height - T - B
    X = lambda b: L + (math.log2(b) - x0) / (x1 - x0) * pw
    Y = lambda v: T + ph - (math.log10(v) - y0) / (y1 - y0) * ph
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{L}" y="24" font-size="15">{title}</text>']
    for e in range(int(y0), int(y1) + 1):
        y = Y(10 ** e)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{L+pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L-8}" y="{y+4:.1f}" text-anchor="end">{10**e:g}</text>')
    sizes = sorted({b for b, _ in pts})
    for b in sizes:
        x = X(b)
        out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{T+ph}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{T+ph+18}" text-anchor="middle" font-size="10">{human(b)}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{L+pw/2}" y="{height-8}" text-anchor="middle">message size</text>')
    out.append(f'<text transform="translate(16,{T+ph/2}) rotate(-90)" text-anchor="middle">bus bandwidth (GB/s, log)</text>')
    for i, (name, s) in enumerate(sorted(series.items())):
        color = COLORS.get(name, FALLBACK[i % len(FALLBACK)])
        s = sorted((b, v) for b, v in s if b > 0 and v > 0)
        if not s:
            continue
        path = " ".join(f"{'M' if j == 0 else 'L'}{X(b):.1f},{Y(v):.1f}" for j, (b, v) in enumerate(s))
        out.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for b, v in s:
            out.append(f'<circle cx="{X(b):.1f}" cy="{Y(v):.1f}" r="3" fill="{color}"/>')
        ly = T + 16 + 18 * i
        out.append(f'<line x1="{L+pw+12}" y1="{ly-4}" x2="{L+pw+32}" y2="{ly-4}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{L+pw+38}" y="{ly}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--out", required=True, help="directory for busbw_<op>_np<N>.svg")
    p.add_argument("--ops", default=None, help="comma list of ops (default: all found)")
    a = p.parse_args()
    rows = load(a.files)
    groups = {}
    for r in rows:
        if r.get("busbw_gbs") is None or r.get("bytes") in (None, 0):
            continue
        key = (r.get("np"), r["op"])
        groups.setdefault(key, {}).setdefault(r["system"], {}).setdefault(int(r["bytes"]), []).append(float(r["busbw_gbs"]))
    os.makedirs(a.out, exist_ok=True)
    want = set(a.ops.split(",")) if a.ops else None
    for (np_, op), systems in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        if want and op not in want:
            continue
        series = {s: [(b, statistics.median(v)) for b, v in d.items()] for s, d in systems.items()}
        text = svg(series, f"{op}, np={np_}: bus bandwidth vs size (median of passes)")
        if text:
            path = os.path.join(a.out, f"busbw_{op}_np{np_}.svg")
            with open(path, "w") as fh:
                fh.write(text)
            print(path)


if __name__ == "__main__":
    main()
