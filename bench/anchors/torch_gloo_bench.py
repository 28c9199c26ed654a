#!/usr/bin/python3
"""torch.distributed gloo anchor (CPU float32 tensors), all traffic on 127.0.0.1.

Spawns --np ranks with torch.multiprocessing.spawn:

  GLOO_SOCKET_IFNAME=lo /usr/bin/python3 bench/anchors/torch_gloo_bench.py --np 2 \\
      --json /tmp/gloo.json

or, when RANK and WORLD_SIZE are set in the environment (torchrun style, with
MASTER_ADDR/MASTER_PORT), runs as that one rank.

Every rank uses init_process_group("gloo") with MASTER_ADDR=127.0.0.1,
GLOO_SOCKET_IFNAME=lo and torch.set_num_threads(1).
Ops: allreduce (all_reduce, in place), allgather (all_gather, list form),
broadcast, alltoall (all_to_all_single), reducescatter (reduce_scatter, list
form: gloo in torch 1.13 has none, so it is reported as 'unsupported' rows),
barrier.  Method, sizes and output: see anchor_common.py and --help.
"""

import argparse
import datetime
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import anchor_common as ac  # noqa: E402


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def worker(rank, world_size, args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=args.timeout))
    n = world_size

    class GlooComm(ac.Comm):
        def barrier(self):
            dist.barrier()

        def max_f64(self, values):
            t = torch.tensor(values, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return [float(x) for x in t.tolist()]

        def sum_int(self, value):
            t = torch.tensor([value], dtype=torch.int64)
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            return int(t.item())

    comm = GlooComm()
    comm.rank, comm.size = rank, n

    # Probe once whether this gloo has reduce_scatter (torch 1.13: it has not;
    # ProcessGroupGloo raises before any communication, on every rank alike).
    try:
        dist.reduce_scatter(torch.zeros(1), [torch.zeros(1) for _ in range(n)])
        has_reduce_scatter = True
    except RuntimeError:
        has_reduce_scatter = False

    def empty(count):
        t = torch.empty(count, dtype=torch.float32)
        return t, t.numpy()  # the numpy view shares memory; used for fill/check only

    def make_case(op, size):
        if op == "barrier":
            return ac.Case(0, dist.barrier, lambda: 0)

        if op == "allreduce":
            count = max(1, size // ac.ELEM)
            t, a = empty(count)
            mine, want = ac.pattern_base(rank), ac.sum_base(n)

            def check():
                ac.fill_periodic(a, mine)
                dist.all_reduce(t)
                return ac.count_wrong(a, want)

            # all_reduce is in place: K back-to-back sums of the pattern would
            # grow without bound, so the timed loop runs on zeros.
            return ac.Case(count * ac.ELEM, lambda: dist.all_reduce(t), check,
                           before_timing=lambda: a.fill(0.0))

        if op == "broadcast":
            count = max(1, size // ac.ELEM)
            t, a = empty(count)
            want = ac.pattern_base(0)

            def check():
                if rank == 0:
                    ac.fill_periodic(a, want)
                else:
                    a.fill(-1.0)
                dist.broadcast(t, src=0)
                return ac.count_wrong(a, want)

            return ac.Case(count * ac.ELEM, lambda: dist.broadcast(t, src=0), check)

        if op == "sendrecv":
            # Ring shift (nccl-tests' sendrecv): send right, receive from the left.
            count = max(1, size // ac.ELEM)
            st, sa = empty(count)
            rt, ra = empty(count)
            right, left = (rank + 1) % n, (rank - 1) % n

            def shift():
                reqs = [dist.isend(st, right), dist.irecv(rt, left)]
                for r in reqs:
                    r.wait()

            def check():
                ac.fill_periodic(sa, ac.pattern_base(rank))
                ra.fill(-1.0)
                shift()
                return ac.count_wrong(ra, ac.pattern_base(left))

            return ac.Case(count * ac.ELEM, shift, check)

        c = ac.piece_count(size, n)

        if op == "allgather":
            st, sa = empty(c)
            rt, ra = empty(n * c)
            outs = list(rt.split(c))  # n contiguous views of one output buffer
            mine = ac.pattern_base(rank)
            wants = [ac.pattern_base(q) for q in range(n)]

            def check():
                ac.fill_periodic(sa, mine)
                ra.fill(-1.0)
                dist.all_gather(outs, st)
                return sum(ac.count_wrong(ra[q * c:(q + 1) * c], wants[q]) for q in range(n))

            return ac.Case(n * c * ac.ELEM, lambda: dist.all_gather(outs, st), check)

        if op == "reducescatter":
            if not has_reduce_scatter:
                raise ac.Unsupported(op)
            st, sa = empty(n * c)
            rt, ra = empty(c)
            ins = list(st.split(c))
            mine, want = ac.pattern_base(rank), ac.sum_base(n, offset=rank * c)

            def check():
                ac.fill_periodic(sa, mine)
                ra.fill(-1.0)
                dist.reduce_scatter(rt, ins)
                return ac.count_wrong(ra, want)

            return ac.Case(n * c * ac.ELEM, lambda: dist.reduce_scatter(rt, ins), check)

        if op == "alltoall":
            st, sa = empty(n * c)
            rt, ra = empty(n * c)
            mine = ac.pattern_base(rank)
            wants = [ac.pattern_base(q, offset=rank * c) for q in range(n)]

            def check():
                ac.fill_periodic(sa, mine)
                ra.fill(-1.0)
                dist.all_to_all_single(rt, st)
                return sum(ac.count_wrong(ra[q * c:(q + 1) * c], wants[q]) for q in range(n))

            return ac.Case(n * c * ac.ELEM, lambda: dist.all_to_all_single(rt, st), check)

        raise ac.Unsupported(op)

    impl = "torch %s gloo" % torch.__version__
    try:
        _, total_wrong = ac.run_all(comm, args.system, impl, args, make_case)
    finally:
        dist.destroy_process_group()
    if total_wrong:
        raise SystemExit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="number of ranks to spawn (default %(default)s)")
    ac.add_common_args(p)
    p.add_argument("--system", "--tag", dest="system", default="gloo",
                   help="value of the 'system' key (default: %(default)s)")
    p.add_argument("--timeout", type=int, default=1800,
                   help="gloo collective timeout in seconds (default %(default)s)")
    args = p.parse_args()
    ac.sweep_sizes(args)
    ac.parse_ops(args.ops)

    # Loopback only; children inherit the environment.
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    try:
        import torch.distributed as dist
    except ImportError as e:
        sys.exit("torch_gloo_bench.py: %s\nRun it with Debian's /usr/bin/python3; install with\n"
                 "  apt-get install -y python3-torch python3-numpy openmpi-bin libopenmpi-dev python3-mpi4py" % e)
    if not (dist.is_available() and dist.is_gloo_available()):
        sys.exit("torch_gloo_bench.py: this torch has no gloo backend (torch.distributed.is_gloo_available() is False)")

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        os.environ.setdefault("MASTER_PORT", "29500")
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0

    if args.np < 1:
        raise SystemExit("--np must be >= 1")
    os.environ["MASTER_PORT"] = str(free_port())
    import torch.multiprocessing as mp

    try:
        mp.spawn(worker, args=(args.np, args), nprocs=args.np, join=True)
    except mp.ProcessExitedException as e:
        sys.stderr.write("torch_gloo_bench: a rank failed: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
