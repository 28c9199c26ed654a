"""Shared method for the anchor benchmarks (torch gloo and Open MPI via mpi4py).

Both torch_gloo_bench.py and mpi_bench.py drive their collectives through
``measure()`` below, so the two anchors use literally the same timing code.
The method follows /work/shared/reference/perf-anchors.md section 2:

* buffers are allocated and first-touched once per size (outside timing);
* one untimed call of the op (it doubles as the correctness check);
* a sample is: barrier; t0; K back-to-back ops; t1  ->  (t1 - t0) / K per rank;
* the per-sample time is the max over ranks, reduced after all samples were
  taken (outside the timed region);
* the reported time is the median of the samples (after discarding the
  warm-up samples);
* bytes and bus bandwidth are counted as nccl-tests does.

Correctness: before and after the timed samples the output buffers are
poisoned, inputs are filled with a rank-dependent pattern of small integers
(exact in float32), one op is run and every output element is compared with
the expected value.  ``wrong`` is the number of wrong elements summed over
both checks and all ranks.

Only the Python standard library and numpy are used here.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time

try:
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the interpreter
    sys.exit("%s: %s\nUse Debian's /usr/bin/python3 with python3-numpy (apt-get install -y python3-numpy)."
             % (os.path.basename(sys.argv[0]), e))

DTYPE = "float32"
ELEM = 4  # bytes per float32

ALL_OPS = ["allreduce", "allgather", "broadcast", "reducescatter", "alltoall", "barrier", "sendrecv"]

# Default size list of perf-anchors.md section 2.
DEFAULT_SIZES = [8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20]

_OP_ALIASES = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "bcast": "broadcast",
    "reduce_scatter": "reducescatter",
    "reduce_scatter_block": "reducescatter",
    "all_to_all": "alltoall",
    "all_to_all_single": "alltoall",
}


def norm_op(name):
    """Normalise an op name: 'all_reduce', 'AllReduce' -> 'allreduce'."""
    n = name.strip().lower()
    n = _OP_ALIASES.get(n, n)
    return n.replace("_", "").replace("-", "")


# ---------------------------------------------------------------- sizes

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text):
    """Parse '8', '1K', '64KiB', '256M', '1G' (powers of 1024, like nccl-tests)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise argparse.ArgumentTypeError("bad size %r (use e.g. 8, 1K, 64K, 256M, 1G)" % text)
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(m.group(1)) * mult


def fmt_size(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def sweep_sizes(args):
    """Sizes from --sizes, or from -b/-e/-f (nccl-tests style), else the default list."""
    if args.sizes:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    elif args.minbytes is not None or args.maxbytes is not None:
        lo = parse_size(args.minbytes if args.minbytes is not None else "8")
        hi = parse_size(args.maxbytes if args.maxbytes is not None else lo)
        f = args.stepfactor
        if f < 2:
            raise SystemExit("-f/--stepfactor must be >= 2")
        sizes, s = [], max(lo, 1)
        while s <= hi:
            sizes.append(s)
            s *= f
    else:
        sizes = list(DEFAULT_SIZES)
    if not sizes:
        raise SystemExit("empty size list")
    return sizes


# ---------------------------------------------------------------- schedule


class Schedule:
    def __init__(self, iters, warmup, samples):
        self.iters, self.warmup, self.samples = iters, warmup, samples


def schedule(op, nbytes, quick=False):
    """K / warm-up samples / samples by size, as in perf-anchors.md section 2."""
    if op == "barrier":
        s = Schedule(500, 3, 15)
    elif nbytes <= 64 << 10:
        s = Schedule(200, 3, 15)
    elif nbytes <= 1 << 20:
        s = Schedule(20, 3, 15)
    elif nbytes <= 16 << 20:
        s = Schedule(2, 2, 11)
    elif nbytes <= 64 << 20:
        s = Schedule(1, 2, 9)
    else:
        s = Schedule(1, 1, 5)
    if quick:  # smoke tests only: not for published numbers
        s = Schedule(max(1, s.iters // 10), 1, 3)
    return s


def busbw_factor(op, n):
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if op in ("broadcast", "sendrecv"):
        return 1.0
    return 0.0


def piece_count(nbytes, n):
    """Per-rank piece for allgather/reducescatter/alltoall: size/n, at least 1 float."""
    return max(1, (nbytes // ELEM) // n)


# ---------------------------------------------------------------- data pattern
#
# value(rank, i) = ((7*i + 13*rank) % 31) + rank: small integers, so sums over
# up to a few hundred ranks are exact in float32.  The pattern has period 31 in
# i, so fills and checks work on a (-1, 31) view without large temporaries.

PERIOD = 31


def pattern_base(rank, offset=0):
    i = np.arange(offset, offset + PERIOD, dtype=np.int64)
    return (((7 * i + 13 * rank) % PERIOD) + rank).astype(np.float32)


def sum_base(n, offset=0):
    b = np.zeros(PERIOD, dtype=np.float64)
    for q in range(n):
        b += pattern_base(q, offset)
    return b.astype(np.float32)


def fill_periodic(arr, base):
    """arr[j] = base[j % 31] for a 1-D float32 array."""
    n = arr.shape[0]
    m = n - n % PERIOD
    if m:
        arr[:m].reshape(-1, PERIOD)[:] = base
    if n - m:
        arr[m:] = base[: n - m]


def count_wrong(arr, base):
    """Number of elements with arr[j] != base[j % 31]."""
    n = arr.shape[0]
    m = n - n % PERIOD
    w = 0
    if m:
        w += int(np.count_nonzero(arr[:m].reshape(-1, PERIOD) != base))
    if n - m:
        w += int(np.count_nonzero(arr[m:] != base[: n - m]))
    return w


# ---------------------------------------------------------------- cases


class Unsupported(Exception):
    """The backend has no such collective (reported as an 'unsupported' row)."""


class Case:
    """One op at one size on one rank, prepared by a backend.

    run:     zero-argument callable doing one collective (timed K times).
    check:   untimed; prepares inputs, poisons outputs, runs one op and
             returns the number of wrong output elements on this rank.
    before_timing: optional untimed hook run once before the samples.
    nbytes:  bytes counted as nccl-tests does; count = nbytes / 4.
    """

    def __init__(self, nbytes, run, check, before_timing=None):
        self.nbytes, self.run, self.check, self.before_timing = nbytes, run, check, before_timing


class Comm:
    """What measure() needs from a backend (all calls are collective)."""

    rank = 0
    size = 1

    def barrier(self):
        raise NotImplementedError

    def max_f64(self, values):
        """Elementwise max over ranks of a list of floats (untimed)."""
        raise NotImplementedError

    def sum_int(self, value):
        raise NotImplementedError


def measure(comm, case, sched):
    """Time one case. Returns (median_s, min_s, max_s, wrong) on every rank."""
    wrong = case.check()  # the one untimed call (also first touch of outputs)
    if case.before_timing is not None:
        case.before_timing()
    run, k = case.run, sched.iters
    per_rank = []
    perf = time.perf_counter
    for s in range(sched.warmup + sched.samples):
        comm.barrier()
        t0 = perf()
        for _ in range(k):
            run()
        t1 = perf()
        if s >= sched.warmup:
            per_rank.append((t1 - t0) / k)
    samples = comm.max_f64(per_rank)  # max over ranks, outside the timed region
    wrong += case.check()
    wrong = comm.sum_int(wrong)
    return statistics.median(samples), min(samples), max(samples), wrong


# ---------------------------------------------------------------- output


def make_row(system, n, op, nbytes, sched, res=None, unsupported=False, impl=None, quick=False):
    row = {"op": op, "bytes": nbytes, "dtype": DTYPE if op != "barrier" else "none"}
    if unsupported:
        row.update(time_us=None, algbw_gbs=None, busbw_gbs=None, wrong=0, unsupported=True)
    else:
        med, lo, hi, wrong = res
        algbw = (nbytes / med / 1e9) if (med > 0 and nbytes) else 0.0
        row.update(
            time_us=round(med * 1e6, 3),
            algbw_gbs=round(algbw, 6),
            busbw_gbs=round(algbw * busbw_factor(op, n), 6),
            wrong=wrong,
        )
        row.update(time_us_min=round(lo * 1e6, 3), time_us_max=round(hi * 1e6, 3))
    row.update(system=system, np=n, count=nbytes // ELEM, iters=sched.iters,
               warmup=sched.warmup, samples=sched.samples)
    if impl:
        row["impl"] = impl
    if quick:
        row["quick"] = True
    return row


def table_header(op, system, n, out=sys.stdout):
    out.write("#\n# op: %s   system: %s   np: %d   dtype: %s\n" % (op, system, n, DTYPE if op != "barrier" else "-"))
    out.write("# %12s %12s %8s %6s %4s %12s %9s %9s %7s\n"
              % ("size", "count", "type", "iters", "smp", "time", "algbw", "busbw", "#wrong"))
    out.write("# %12s %12s %8s %6s %4s %12s %9s %9s %7s\n"
              % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""))
    out.flush()


def table_row(row, out=sys.stdout):
    if row.get("unsupported"):
        out.write("  %12d %12d %8s %6s %4s %12s %9s %9s %7s\n"
                  % (row["bytes"], row["count"], "float", "-", "-", "unsupported", "-", "-", "-"))
    else:
        out.write("  %12d %12d %8s %6d %4d %12.2f %9.3f %9.3f %7d\n"
                  % (row["bytes"], row["count"], "float" if row["dtype"] == DTYPE else "-",
                     row["iters"], row["samples"], row["time_us"], row["algbw_gbs"],
                     row["busbw_gbs"], row["wrong"]))
    out.flush()


def write_json(path, rows):
    if not path:
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def add_common_args(p):
    g = p.add_argument_group("sizes (nccl-tests style)")
    g.add_argument("-b", "--minbytes", default=None, help="smallest size, e.g. 8, 1K, 256M")
    g.add_argument("-e", "--maxbytes", default=None, help="largest size")
    g.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier (default 2)")
    g.add_argument("--sizes", default=None,
                   help="comma list, e.g. 8,1K,64K,1M,16M,64M,256M (overrides -b/-e/-f; "
                        "default is that list)")
    p.add_argument("--ops", default=",".join(ALL_OPS),
                   help="comma list of ops (default: %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: K/10, 1 warm-up + 3 samples (not for published numbers)")
    p.add_argument("--json", dest="json", default=None, metavar="FILE",
                   help="write a JSON list of rows to FILE (written after every row)")
    p.add_argument("--out", dest="json", help=argparse.SUPPRESS)


def parse_ops(text):
    ops = []
    for o in text.split(","):
        if not o.strip():
            continue
        n = norm_op(o)
        if n not in ALL_OPS:
            raise SystemExit("unknown op %r (known: %s)" % (o, ", ".join(ALL_OPS)))
        if n not in ops:
            ops.append(n)
    return ops


def run_all(comm, system, impl, args, make_case, out=sys.stdout):
    """The sweep shared by both anchors. make_case(op, size) -> Case or raises Unsupported."""
    sizes = sweep_sizes(args)
    ops = parse_ops(args.ops)
    n = comm.size
    rows = []
    if comm.rank == 0:
        out.write("# %s   np=%d   sizes=%s   ops=%s%s\n" % (
            impl, n, ",".join(fmt_size(s).replace(" ", "") for s in sizes), ",".join(ops),
            "   QUICK (smoke test)" if args.quick else ""))
        out.flush()
    for op in ops:
        if comm.rank == 0:
            table_header(op, system, n, out)
        op_sizes = [0] if op == "barrier" else sizes
        seen = set()
        for size in op_sizes:
            nb = counted_bytes(op, size, n)
            if nb in seen:  # e.g. 4 B and 8 B allgather both round up to 1 float per rank
                continue
            seen.add(nb)
            try:
                case = make_case(op, size)
            except Unsupported:
                row = make_row(system, n, op, nb, schedule(op, nb, args.quick),
                               unsupported=True, impl=impl, quick=args.quick)
            else:
                sched = schedule(op, case.nbytes, args.quick)
                res = measure(comm, case, sched)
                row = make_row(system, n, op, case.nbytes, sched, res, impl=impl, quick=args.quick)
                del case
            rows.append(row)
            if comm.rank == 0:
                table_row(row, out)
                write_json(args.json, rows)
    total_wrong = sum(r["wrong"] or 0 for r in rows)
    if comm.rank == 0:
        out.write("#\n# Out of bounds values : %d %s\n" % (total_wrong, "OK" if total_wrong == 0 else "FAILED"))
        if args.json:
            out.write("# wrote %s (%d rows)\n" % (args.json, len(rows)))
        out.flush()
    return rows, total_wrong


def counted_bytes(op, size, n):
    if op == "barrier":
        return 0
    if op in ("allgather", "reducescatter", "alltoall"):
        return piece_count(size, n) * n * ELEM
    return max(1, size // ELEM) * ELEM
