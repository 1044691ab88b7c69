#!/usr/bin/env python3
"""Overlap efficiency: an asynchronous all_reduce of a DDP bucket while torch computes on every
core of the rank, over "shoal" and "gloo" in the same job, rounds alternating.

    build/bin/shoal-run -n 2 .venv/bin/python bench/overlap.py [--mib 25] [--threads 2]
                        [--rounds 5] [--iters 5] [--bind-note TEXT]

Per backend and round, every rank times (the slowest rank counts, medians over --iters):
  comm     all_reduce of --mib MiB of float32 alone (async, then wait)
  compute  matmuls on torch's intra-op threads (--threads, default: every core) alone, as many
           as take about as long as comm over gloo (the case where overlap matters most)
  both     the all_reduce issued async, the same matmuls, then wait (DDP's overlap)
efficiency = max(comm, compute) / both: 1 when communication hides entirely behind compute,
0.5 when the two run one after the other. Prints one markdown table (medians over rounds).
"""

import argparse
import statistics
import time
import warnings


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=float, default=25.0, help="all_reduce size (DDP's bucket: 25)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: every core)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--dim", type=int, default=256, help="matmul size")
    args = ap.parse_args()

    import os

    import torch
    import torch.distributed as dist

    import shoal.torch  # noqa: F401

    torch.set_num_threads(args.threads or os.cpu_count())
    warnings.filterwarnings("ignore", message=".*private function.*")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    groups = {"shoal": dist.new_group(backend="shoal"), "gloo": dist.group.WORLD}
    buf = torch.ones(int(args.mib * (1 << 20)) // 4)
    a = torch.randn(args.dim, args.dim)
    b = torch.randn(args.dim, args.dim)

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # gloo world group: not part of the timing
        return t.item()

    def compute(n):
        for _ in range(n):
            torch.mm(a, b)

    def timed(fn):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        return slowest(time.perf_counter() - t0)

    def comm_alone(g):
        dist.all_reduce(buf, group=g, async_op=True).wait()

    # Matmuls that take as long as gloo's all_reduce alone.
    for g in groups.values():
        comm_alone(g)
    t_comm = statistics.median(timed(lambda: comm_alone(groups["gloo"])) for _ in range(3))
    t_one = statistics.median(timed(lambda: compute(20)) for _ in range(3)) / 20
    n_mm = max(1, round(t_comm / t_one))

    rows = {name: {"comm": [], "compute": [], "both": []} for name in groups}
    for r in range(args.rounds):
        order = list(groups) if r % 2 == 0 else list(reversed(groups))
        for name in order:
            g = groups[name]

            def both():
                w = dist.all_reduce(buf, group=g, async_op=True)
                compute(n_mm)
                w.wait()

            for key, fn in (("comm", lambda: comm_alone(g)), ("compute", lambda: compute(n_mm)), ("both", both)):
                rows[name][key].append(statistics.median(timed(fn) for _ in range(args.iters)))

    if rank == 0:
        ms = lambda v: f"{1e3 * v:.1f}"  # noqa: E731
        print(f"all_reduce {args.mib:g} MiB float32, {dist.get_world_size()} ranks, "
              f"{torch.get_num_threads()} torch threads per rank, {n_mm} matmuls {args.dim}x{args.dim}; "
              f"medians of {args.rounds} rounds x {args.iters} iterations (slowest rank)\n")
        print("| backend | comm alone (ms) | compute alone (ms) | both (ms) | overlap efficiency |")
        print("|---|---|---|---|---|")
        for name, v in rows.items():
            c, k, bo = (statistics.median(v[x]) for x in ("comm", "compute", "both"))
            effs = [max(cm, cp) / bt for cm, cp, bt in zip(v["comm"], v["compute"], v["both"])]
            print(f"| {name} | {ms(c)} | {ms(k)} | {ms(bo)} | {statistics.median(effs):.2f} "
                  f"({min(effs):.2f}–{max(effs):.2f}) |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
