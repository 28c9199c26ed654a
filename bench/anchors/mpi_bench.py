#!/usr/bin/python3
"""Open MPI anchor: collectives through mpi4py, numpy float32, buffer interface.

Run under mpirun, e.g. (shared memory, Open MPI's default transport on one host):

  mpirun --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo -np 2 \\
      --mca btl self,vader /usr/bin/python3 bench/anchors/mpi_bench.py \\
      --system mpi-shm --json /tmp/mpi-shm.json

or over loopback TCP: replace '--mca btl self,vader' with
'--mca btl self,tcp --mca btl_tcp_if_include lo' and use --system mpi-tcp.

Ops: allreduce (Allreduce), allgather (Allgather), broadcast (Bcast),
reducescatter (Reduce_scatter_block), alltoall (Alltoall), barrier (Barrier).
Method, sizes and output: see anchor_common.py and --help.
"""

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import anchor_common as ac  # noqa: E402  (first: it explains a missing numpy)

import numpy as np  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ac.add_common_args(p)
    p.add_argument("--system", "--tag", dest="system", default="mpi",
                   help="value of the 'system' key, e.g. mpi-shm or mpi-tcp (default: %(default)s)")
    args = p.parse_args()
    # Validate arguments before MPI_Init so that errors are cheap.
    ac.sweep_sizes(args)
    ac.parse_ops(args.ops)

    try:
        from mpi4py import MPI
    except ImportError as e:
        sys.exit("mpi_bench.py: %s\nRun it with Debian's /usr/bin/python3 under mpirun; install with\n"
                 "  apt-get install -y python3-torch python3-numpy openmpi-bin libopenmpi-dev python3-mpi4py" % e)

    world = MPI.COMM_WORLD
    rank, n = world.Get_rank(), world.Get_size()
    FLOAT, SUM, MAX = MPI.FLOAT, MPI.SUM, MPI.MAX

    class MPIComm(ac.Comm):
        def barrier(self):
            world.Barrier()

        def max_f64(self, values):
            a = np.array(values, dtype=np.float64)
            world.Allreduce(MPI.IN_PLACE, a, op=MAX)
            return [float(x) for x in a]

        def sum_int(self, value):
            a = np.array([value], dtype=np.int64)
            world.Allreduce(MPI.IN_PLACE, a, op=SUM)
            return int(a[0])

    comm = MPIComm()
    comm.rank, comm.size = rank, n

    def empty(count):
        return np.empty(count, dtype=np.float32)

    def make_case(op, size):
        if op == "barrier":
            return ac.Case(0, world.Barrier, lambda: 0)

        if op == "allreduce":
            count = max(1, size // ac.ELEM)
            sbuf, rbuf = empty(count), empty(count)
            mine, want = ac.pattern_base(rank), ac.sum_base(n)

            def check():
                ac.fill_periodic(sbuf, mine)
                rbuf.fill(-1.0)
                world.Allreduce([sbuf, FLOAT], [rbuf, FLOAT], op=SUM)
                return ac.count_wrong(rbuf, want)

            run = functools.partial(world.Allreduce, [sbuf, FLOAT], [rbuf, FLOAT], SUM)
            return ac.Case(count * ac.ELEM, run, check)

        if op == "broadcast":
            count = max(1, size // ac.ELEM)
            buf = empty(count)
            want = ac.pattern_base(0)

            def check():
                if rank == 0:
                    ac.fill_periodic(buf, want)
                else:
                    buf.fill(-1.0)
                world.Bcast([buf, FLOAT], root=0)
                return ac.count_wrong(buf, want)

            run = functools.partial(world.Bcast, [buf, FLOAT], 0)
            return ac.Case(count * ac.ELEM, run, check)

        if op == "sendrecv":
            # Ring shift (nccl-tests' sendrecv): send right, receive from the left.
            count = max(1, size // ac.ELEM)
            sbuf, rbuf = empty(count), empty(count)
            right, left = (rank + 1) % n, (rank - 1) % n

            def check():
                ac.fill_periodic(sbuf, ac.pattern_base(rank))
                rbuf.fill(-1.0)
                world.Sendrecv([sbuf, FLOAT], right, 0, [rbuf, FLOAT], left, 0)
                return ac.count_wrong(rbuf, ac.pattern_base(left))

            run = functools.partial(world.Sendrecv, [sbuf, FLOAT], right, 0, [rbuf, FLOAT], left, 0)
            return ac.Case(count * ac.ELEM, run, check)

        c = ac.piece_count(size, n)

        if op == "allgather":
            sbuf, rbuf = empty(c), empty(n * c)
            mine = ac.pattern_base(rank)
            wants = [ac.pattern_base(q) for q in range(n)]

            def check():
                ac.fill_periodic(sbuf, mine)
                rbuf.fill(-1.0)
                world.Allgather([sbuf, FLOAT], [rbuf, FLOAT])
                return sum(ac.count_wrong(rbuf[q * c:(q + 1) * c], wants[q]) for q in range(n))

            run = functools.partial(world.Allgather, [sbuf, FLOAT], [rbuf, FLOAT])
            return ac.Case(n * c * ac.ELEM, run, check)

        if op == "reducescatter":
            sbuf, rbuf = empty(n * c), empty(c)
            mine, want = ac.pattern_base(rank), ac.sum_base(n, offset=rank * c)

            def check():
                ac.fill_periodic(sbuf, mine)
                rbuf.fill(-1.0)
                world.Reduce_scatter_block([sbuf, FLOAT], [rbuf, FLOAT], op=SUM)
                return ac.count_wrong(rbuf, want)

            run = functools.partial(world.Reduce_scatter_block, [sbuf, FLOAT], [rbuf, FLOAT], SUM)
            return ac.Case(n * c * ac.ELEM, run, check)

        if op == "alltoall":
            sbuf, rbuf = empty(n * c), empty(n * c)
            mine = ac.pattern_base(rank)
            # chunk q of rbuf is chunk `rank` of rank q's send buffer
            wants = [ac.pattern_base(q, offset=rank * c) for q in range(n)]

            def check():
                ac.fill_periodic(sbuf, mine)
                rbuf.fill(-1.0)
                world.Alltoall([sbuf, FLOAT], [rbuf, FLOAT])
                return sum(ac.count_wrong(rbuf[q * c:(q + 1) * c], wants[q]) for q in range(n))

            run = functools.partial(world.Alltoall, [sbuf, FLOAT], [rbuf, FLOAT])
            return ac.Case(n * c * ac.ELEM, run, check)

        raise ac.Unsupported(op)

    import mpi4py
    impl = "Open MPI via mpi4py %s (%s)" % (mpi4py.__version__, MPI.Get_library_version().split(",")[0].strip())
    _, total_wrong = ac.run_all(comm, args.system, impl, args, make_case)
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
