#!/usr/bin/env python3
"""Activation transfer through hvd.torch, as the generated pipeline moves
them: every rank posts hvd.irecv from its left neighbour and hvd.isend of a
torch tensor to its right one, then synchronizes both (a ring shift,
nccl-tests' sendrecv pattern). Rows in hvdbench's JSON format (system
hvd-torch-p2p), so bench/tables.py puts them next to hvdbench sendrecv
(the Go API on the same backend) and the anchors (gloo isend/irecv, Open MPI
Sendrecv).

  hvdrun -np 2 python3 bench/pipeline/torch_p2p.py --sizes 8,64K,1M --json out.json
"""
import argparse
import json
import statistics
import time

import torch

import hvd.torch as hvd


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if s[-1:] in "KMG" else s) * mult


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="8,4K,32K,64K,256K,1M,16M")
    p.add_argument("--json")
    p.add_argument("--system", default="hvd-torch-p2p")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    n, me = hvd.size(), hvd.rank()
    right, left = (me + 1) % n, (me - 1) % n
    rows = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        count = max(1, size // 4)
        send = torch.full((count,), float(me + 1))
        recv = torch.empty(count)

        def shift():
            hr = hvd.irecv(recv, left, tag=1)
            hs = hvd.isend(send, right, tag=1)
            hvd.synchronize(hr)
            hvd.synchronize(hs)

        shift()
        wrong = int((recv != float(left + 1)).sum())
        iters = 1000 if size <= 64 << 10 else 100 if size <= 1 << 20 else 10
        for _ in range(max(10, iters // 10)):
            shift()
        samples = []
        for _ in range(7):
            hvd.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                shift()
            samples.append((time.perf_counter() - t0) / iters * 1e6)
        # The slowest rank's median, as hvdbench reports.
        med = statistics.median(samples)
        med = hvd.allreduce(torch.tensor([med], dtype=torch.float64), op=hvd.Max, name="t%d" % size).item()
        algbw = count * 4 / (med * 1e3)
        rows.append({"op": "sendrecv", "bytes": count * 4, "dtype": "float32", "time_us": round(med, 3),
                     "algbw_gbs": round(algbw, 6), "busbw_gbs": round(algbw, 6), "wrong": wrong,
                     "system": args.system, "np": n, "count": count, "iters": iters, "samples": len(samples)})
        if me == 0:
            print("%12d B  %10.2f us  %7.3f GB/s  wrong %d" % (count * 4, med, algbw, wrong), flush=True)
    if me == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
