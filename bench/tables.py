#!/usr/bin/env python3
"""Markdown tables from benchmark JSON (hvdbench and the anchors), standard library only.

Reads any number of JSON files, each a list of row objects with at least
  op, bytes, dtype, time_us, algbw_gbs, busbw_gbs, wrong
and normally system and np (hvdbench --json, bench/anchors/*_bench.py --json).
A file may also be an object with a "rows" list, or JSON lines.  A row without
"system" takes the file name (without .json); a row without "np" counts as np=?.

Prints, per np and op, one Markdown table: one row per size, for each system a
time column (median per-op time, max over ranks) and a busbw column (GB/s =
10^9 B/s, nccl-tests factors), and with --base SYSTEM a ratio column per other
system: that system's time / the base's time (> 1: the base is faster).
Rows for the same (system, np, op, dtype, size) from several files (e.g. three
passes) are combined with --combine (default: median).

  bench/tables.py --base hvd-tcp results/hvd-*.json results/anchors/*.json
"""

import argparse
import json
import os
import statistics
import sys

OP_ORDER = ["allreduce", "allgather", "broadcast", "reducescatter", "alltoall", "barrier", "sendrecv"]
_ALIASES = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "bcast": "broadcast",
    "reduce_scatter": "reducescatter",
    "reduce_scatter_block": "reducescatter",
    "all_to_all": "alltoall",
    "all_to_all_single": "alltoall",
}
DASH = "—"


def norm_op(name):
    n = str(name).strip().lower()
    n = _ALIASES.get(n, n)
    return n.replace("_", "").replace("-", "")


def load(path):
    with open(path) as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        data = data.get("rows", data.get("results", [data]))
    if not isinstance(data, list):
        raise SystemExit("%s: expected a JSON list of rows" % path)
    stem = os.path.splitext(os.path.basename(path))[0]
    rows = []
    for r in data:
        if not isinstance(r, dict) or "op" not in r:
            continue
        r = dict(r)
        r["op"] = norm_op(r["op"])
        r.setdefault("system", stem)
        r["system"] = str(r["system"])
        r["np"] = r.get("np", "?")
        r["bytes"] = int(r.get("bytes") or 0)
        r["dtype"] = "-" if r["op"] == "barrier" else str(r.get("dtype") or "-")
        r["_file"] = path
        rows.append(r)
    return rows


def is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def fmt_size(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def fmt_time(us):
    if us < 1000:
        return "%.1f µs" % us
    if us < 1e6:
        return "%.2f ms" % (us / 1e3)
    return "%.2f s" % (us / 1e6)


class Cell:
    """Combined result of one system at one (np, op, dtype, size)."""

    def __init__(self, rows, combine):
        self.n = len(rows)
        self.unsupported = all(r.get("unsupported") for r in rows)
        good = [r for r in rows if not r.get("unsupported") and is_number(r.get("time_us"))]
        self.wrong = sum(int(r.get("wrong") or 0) for r in rows)
        self.time_us = self.busbw = None
        if good:
            self.time_us = combine([float(r["time_us"]) for r in good])
            bus = [float(r["busbw_gbs"]) for r in good if is_number(r.get("busbw_gbs"))]
            self.busbw = combine(bus) if bus else None

    def time_text(self):
        if self.time_us is None:
            return "unsupported" if self.unsupported else DASH
        t = fmt_time(self.time_us)
        if self.wrong:
            t += " (%d wrong!)" % self.wrong
        return t

    def busbw_text(self):
        return DASH if self.busbw is None else "%.3f" % self.busbw


def ratio_text(base, other):
    if base is None or other is None or base.time_us is None or other.time_us is None or base.time_us <= 0:
        return DASH
    r = other.time_us / base.time_us
    return ("%.2f×" if r >= 0.1 else "%.3f×") % r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE.json")
    p.add_argument("--base", default=None,
                   help="system for the ratio columns (default: hvd-tcp if present, else none)")
    p.add_argument("--systems", default=None,
                   help="comma list: which systems, in which column order (default: all, base first)")
    p.add_argument("--np", dest="nps", default=None, help="comma list of np values to show")
    p.add_argument("--ops", default=None, help="comma list of ops to show")
    p.add_argument("--combine", choices=["median", "min", "max", "mean"], default="median",
                   help="how rows repeated across files are combined (default: median)")
    p.add_argument("--metric", choices=["both", "time", "busbw"], default="both",
                   help="per-system columns: time and busbw (default), or only one of them")
    p.add_argument("--no-header", action="store_true", help="omit the sources/legend lines")
    args = p.parse_args(argv)

    combine = {"median": statistics.median, "min": min, "max": max, "mean": statistics.mean}[args.combine]
    rows = []
    for f in args.files:
        rows.extend(load(f))
    if not rows:
        raise SystemExit("no rows in %s" % ", ".join(args.files))

    seen = []
    for r in rows:
        if r["system"] not in seen:
            seen.append(r["system"])
    base = args.base
    if base is None and "hvd-tcp" in seen:
        base = "hvd-tcp"
    if base is not None and base not in seen:
        sys.stderr.write("tables.py: base system %r not in the data (have: %s); no ratio columns\n"
                         % (base, ", ".join(seen)))
        base = None
    if args.systems:
        systems = [s.strip() for s in args.systems.split(",") if s.strip()]
        rows = [r for r in rows if r["system"] in systems]
    else:
        systems = ([base] if base else []) + [s for s in seen if s != base]
    if args.nps:
        want = {s.strip() for s in args.nps.split(",")}
        rows = [r for r in rows if str(r["np"]) in want]
    if args.ops:
        want = {norm_op(o) for o in args.ops.split(",")}
        rows = [r for r in rows if r["op"] in want]
    others = [s for s in systems if s != base] if base else []

    groups = {}
    for r in rows:
        key = (str(r["np"]), r["op"], r["dtype"])
        groups.setdefault(key, {}).setdefault((r["system"], r["bytes"]), []).append(r)

    def np_key(v):
        return (0, int(v)) if v.isdigit() else (1, v)

    def op_key(o):
        return (OP_ORDER.index(o), o) if o in OP_ORDER else (len(OP_ORDER), o)

    out = sys.stdout
    if not args.no_header:
        out.write("<!-- generated by bench/tables.py from: %s -->\n\n" % " ".join(args.files))
        impls = {}
        for r in rows:
            impls.setdefault((r["system"], str(r["np"])), set()).add(r.get("impl") or "")
        for s in systems:
            desc = sorted({i for (sy, _), v in impls.items() if sy == s for i in v if i})
            out.write("* **%s**%s\n" % (s, (": " + "; ".join(desc)) if desc else ""))
        out.write("\ntime = median over samples of the per-op time (slowest rank); busbw in GB/s "
                  "(10^9 B/s) with the nccl-tests factors")
        if base:
            out.write("; `%s vs X` = X's time / %s's time (> 1: %s is faster)" % (base, base, base))
        out.write(".\n")
        if any(r.get("quick") for r in rows):
            out.write("\n**Includes --quick smoke-test data: not for publication.**\n")
        out.write("\n")

    for key in sorted(groups, key=lambda k: (np_key(k[0]), op_key(k[1]), k[2])):
        np_, op, dtype = key
        cells_in = groups[key]
        present = [s for s in systems if any(sy == s for sy, _ in cells_in)]
        if not present:
            continue
        cells = {k: Cell(v, combine) for k, v in cells_in.items()}
        ratio_to = [s for s in others if s in present] if base in present else []
        title = "#### %s (np=%s%s)\n\n" % (op, np_, "" if dtype in ("-", "float32") else ", " + dtype)
        out.write(title)
        if op == "barrier":
            hdr = [""] + present + ["%s vs %s" % (base, s) for s in ratio_to]
            out.write("| " + " | ".join(hdr) + " |\n")
            out.write("|" + "---|" * len(hdr) + "\n")
            row = ["barrier latency"]
            pick = {s: cells.get((s, 0)) or next((c for (sy, _), c in cells.items() if sy == s), None)
                    for s in present}
            row += [pick[s].time_text() if pick[s] else DASH for s in present]
            row += [ratio_text(pick[base], pick[s]) for s in ratio_to]
            out.write("| " + " | ".join(row) + " |\n\n")
            continue
        show_t, show_b = args.metric in ("both", "time"), args.metric in ("both", "busbw")
        hdr = ["size"]
        for s in present:
            hdr += (["%s time" % s] if show_t else []) + (["%s busbw GB/s" % s] if show_b else [])
        hdr += ["%s vs %s" % (base, s) for s in ratio_to]
        out.write("| " + " | ".join(hdr) + " |\n")
        out.write("|" + "---|" * len(hdr) + "\n")
        for size in sorted({b for _, b in cells_in}):
            row = [fmt_size(size)]
            for s in present:
                c = cells.get((s, size))
                if show_t:
                    row.append(c.time_text() if c else DASH)
                if show_b:
                    row.append(c.busbw_text() if c else DASH)
            row += [ratio_text(cells.get((base, size)), cells.get((s, size))) for s in ratio_to]
            out.write("| " + " | ".join(row) + " |\n")
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
