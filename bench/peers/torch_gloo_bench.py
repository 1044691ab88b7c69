#!/usr/bin/python3
"""torch_gloo_bench: shoal-bench's measurement (nccl-tests' method and output) over
torch.distributed's "gloo" backend, so that what a PyTorch user gets from Gloo can be compared
with shoal line by line. A port to Python of tools/bench/nccl_tests_driver.c: same flags, same
sizes and per-rank counts, same buffer shifts, warmup, timing (per-rank average, then the max
over ranks), bandwidth formulas, check and table, so that bench/compare.sh parses it unchanged.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        .venv/bin/python bench/peers/torch_gloo_bench.py all_reduce -b 8 -e 64M -f 2 -c 1 &
    RANK=1 ...                                                      # one process per rank
    build/bin/shoal-run -n 2 .venv/bin/python bench/peers/torch_gloo_bench.py all_reduce ...

Rank, size and the store come from the environment, as torchrun (or shoal-run) sets it: RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT (init_process_group("gloo"), env://; under torchrun or
shoal-run the launcher hosts the store, TORCHELASTIC_USE_AGENT_STORE=True). GLOO_SOCKET_IFNAME
picks the interface(s) as in torch (comma-separated list for several); TORCH_GLOO_BENCH_TIMEOUT
(seconds, default 300) bounds every collective.

What each collective calls (torch 1.13's gloo backend; its gaps are filled the way a user
would fill them, and the time includes the fill):
  all_reduce      dist.all_reduce; out of place = copy the input into the output, then in place
  all_gather      dist.all_gather into views of one output buffer (gloo has no
                  all_gather_into_tensor/_all_gather_base in 1.13; newer torch is used if it has)
  reduce_scatter  gloo has none in torch 1.13 (neither reduce_scatter nor _reduce_scatter_base):
                  dist.reduce_scatter_tensor when the backend has it, otherwise all_reduce of the
                  whole input and a copy of this rank's block (in place: no copy, the block is
                  already at rank * count)
  broadcast       dist.broadcast; out of place = the root copies its input into the output
  reduce          dist.reduce; out of place = copy the input into the output first
  all_to_all      dist.all_to_all_single (out of place only: in-place columns are N/A)
"""
import datetime
import getopt
import os
import socket
import sys
import time

COLLS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all"]
ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
           "alltoall": "all_to_all", "all2all": "all_to_all", "bcast": "broadcast"}
ELEM = 4  # float32

USAGE = """usage: %s COLLECTIVE [options]
  COLLECTIVE: all_reduce all_gather reduce_scatter broadcast reduce all_to_all
  -b,--minbytes N     smallest size (K/M/G suffixes), default 32M
  -e,--maxbytes N     largest size, default 32M
  -f,--stepfactor N   multiply the size by N each step, default 1 (then -i)
  -i,--stepbytes N    add N bytes each step when -f is 1, default 1M
  -n,--iters N        timed iterations per size, default 20
  -w,--warmup_iters N warmup iterations (at max and min size), default 5
  -W,--warmup_each N  also N warmup iterations at every size before timing it (a
                      library that learns per size is timed once it has), default 0
  -c,--check 0/1      check results (small-integer fill, exact), default 1
  -d,--datatype float only float
  -o,--op sum         only sum
  -r,--root N         root of broadcast/reduce, default 0
  -a,--average 0..3   time over ranks: 0=rank0 1=avg 2=min 3=max, default 3
  -p,--percentiles 0/1 also time every iteration (the slowest rank's time) and add
                      p50 and p99 over them, out of place and in place, to each
                      line; default 0
"""


def parse_size(v):
    """nccl-tests' parsesize: a number with an optional K/M/G suffix (powers of 1024)."""
    v = v.strip()
    mult = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    try:
        if v and v[-1].lower() in mult:
            return int(float(v[:-1]) * mult[v[-1].lower()])
        return int(float(v))
    except ValueError:
        return -1


def parse_int(v):
    return int(v, 0)


def parse_args(argv, rank):
    prog = "torch_gloo_bench"
    o = dict(coll="all_reduce", min_bytes=32 << 20, max_bytes=32 << 20, step_bytes=1 << 20,
             step_factor=1, iters=20, warmup=5, warmup_each=0, check=1, root=0, average=3, percentiles=0)

    def err(msg):
        if rank == 0:
            sys.stderr.write(msg + "\n")
        return None

    if len(argv) < 2 or argv[1].startswith("-"):
        if len(argv) >= 2 and argv[1] in ("-h", "--help"):
            if rank == 0:
                sys.stdout.write(USAGE % prog)
            sys.exit(0)
        if rank == 0:
            sys.stderr.write(USAGE % prog)
        return None
    c = ALIASES.get(argv[1], argv[1])
    if c not in COLLS:
        return err("%s: unknown collective '%s'\n%s" % (prog, argv[1], USAGE % prog))
    o["coll"] = c
    longs = ["minbytes=", "maxbytes=", "stepbytes=", "stepfactor=", "iters=", "warmup_iters=",
             "warmup_each=", "check=", "op=", "datatype=", "root=", "average=", "percentiles=", "help"]
    try:
        opts, rest = getopt.gnu_getopt(argv[2:], "b:e:i:f:n:w:W:c:o:d:r:a:p:h", longs)
    except getopt.GetoptError as e:
        return err("%s: %s\n%s" % (prog, e, USAGE % prog))
    key = {"--minbytes": "-b", "--maxbytes": "-e", "--stepbytes": "-i", "--stepfactor": "-f",
           "--iters": "-n", "--warmup_iters": "-w", "--warmup_each": "-W", "--check": "-c", "--op": "-o",
           "--datatype": "-d", "--root": "-r", "--average": "-a", "--percentiles": "-p",
           "--help": "-h"}
    try:
        for k, v in opts:
            k = key.get(k, k)
            if k in ("-b", "-e"):
                s = parse_size(v)
                if s < 0:
                    return err("invalid size '%s' for %s" % (v, k))
                o["min_bytes" if k == "-b" else "max_bytes"] = s
            elif k == "-i": o["step_bytes"] = parse_int(v)
            elif k == "-f": o["step_factor"] = parse_int(v)
            elif k == "-n": o["iters"] = parse_int(v)
            elif k == "-w": o["warmup"] = parse_int(v)
            elif k == "-W": o["warmup_each"] = parse_int(v)
            elif k == "-c": o["check"] = parse_int(v)
            elif k == "-r": o["root"] = parse_int(v)
            elif k == "-a": o["average"] = parse_int(v)
            elif k == "-p": o["percentiles"] = parse_int(v)
            elif k == "-d":
                if v not in ("float", "float32", "f32"):
                    return err("only -d float is supported (got '%s')" % v)
            elif k == "-o":
                if v != "sum":
                    return err("only -o sum is supported (got '%s')" % v)
            elif k == "-h":
                if rank == 0:
                    sys.stdout.write(USAGE % prog)
                sys.exit(0)
    except ValueError as e:
        return err("%s: bad number: %s" % (prog, e))
    if rest:
        return err("unexpected argument '%s'" % rest[0])
    if o["min_bytes"] > o["max_bytes"]:
        return err("invalid sizes: minbytes %d > maxbytes %d" % (o["min_bytes"], o["max_bytes"]))
    if (o["iters"] < 1 or o["warmup"] < 0 or o["warmup_each"] < 0 or not 0 <= o["average"] <= 3 or
            o["percentiles"] not in (0, 1) or (o["step_factor"] <= 1 and o["step_bytes"] == 0)):
        return err("invalid -n/-w/-W/-a/-p/-f/-i value")
    return o


def counts(coll, nbytes, n):
    """nccl-tests' getCollByteCount (no 16-byte alignment), as pb_counts():
    (send_count, recv_count, param_count, send_inplace_offset, recv_inplace_offset)."""
    c = nbytes // ELEM
    if coll in ("all_reduce", "broadcast", "reduce"):
        return c, c, c, 0, 0
    if coll == "all_gather":
        return c // n, (c // n) * n, c // n, c // n, 0
    if coll == "reduce_scatter":
        return (c // n) * n, c // n, c // n, 0, c // n
    return (c // n) * n, (c // n) * n, c // n, 0, 0  # all_to_all


def bus_bw(coll, param_count, sec, n):
    nbytes = float(param_count * ELEM)
    factor = 1.0
    if coll == "all_reduce":
        factor = 2.0 * (n - 1) / n
    elif coll in ("all_gather", "reduce_scatter", "all_to_all"):
        nbytes *= n
        factor = (n - 1.0) / n
    alg = nbytes / 1.0e9 / sec if sec > 0 else 0.0
    return alg, alg * factor


def fmt_time(usec):
    if usec >= 10000.0:
        return "%7.0f" % usec
    if usec >= 100.0:
        return "%7.1f" % usec
    return "%7.2f" % usec


class Bench:
    def __init__(self, o, torch, dist):
        self.o, self.torch, self.dist = o, torch, dist
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        nelem = (o["max_bytes"] + 63) // 64 * 64 // ELEM or 16
        # nccl-tests allocates max_bytes for each of send and recv; offsets stay inside
        self.send = torch.zeros(nelem, dtype=torch.float32)
        self.recv = torch.zeros(nelem, dtype=torch.float32)
        self.expected = torch.zeros(nelem, dtype=torch.float32)
        # reduce_scatter's all_reduce emulation works on a copy of the input (out of place)
        self.scratch = torch.zeros(nelem if o["coll"] == "reduce_scatter" else 1, dtype=torch.float32)
        self.k = counts(o["coll"], 0, self.n)
        self.rep = 0
        self.pct = {False: None, True: None}  # -p 1: (p50, p99) seconds per place
        self.bw_sum, self.bw_count, self.errors = 0.0, 0, 0
        self.has_rs_tensor = hasattr(dist, "reduce_scatter_tensor")
        self.has_ag_tensor = hasattr(dist, "all_gather_into_tensor")
        self.rs_native = False
        self.ag_native = False

    # -- probing what this torch's gloo backend has (newer torch adds native forms) --
    def probe(self):
        t, d = self.torch, self.dist
        if self.o["coll"] == "all_gather" and self.has_ag_tensor:
            try:
                d.all_gather_into_tensor(t.zeros(self.n), t.zeros(1))
                self.ag_native = True
            except RuntimeError:
                pass
        if self.o["coll"] == "reduce_scatter" and self.has_rs_tensor:
            try:
                d.reduce_scatter_tensor(t.zeros(1), t.zeros(self.n))
                self.rs_native = True
            except RuntimeError:
                pass

    def details(self):
        c = self.o["coll"]
        what = {
            "all_reduce": "dist.all_reduce (out of place: copy, then in place)",
            "all_gather": "dist.all_gather_into_tensor" if self.ag_native
            else "dist.all_gather into views of one buffer (no all_gather_into_tensor in this gloo)",
            "reduce_scatter": "dist.reduce_scatter_tensor" if self.rs_native
            else "emulated: dist.all_reduce of the whole input + copy of this rank's block "
                 "(this gloo has no reduce_scatter)",
            "broadcast": "dist.broadcast (out of place: the root copies first)",
            "reduce": "dist.reduce (out of place: copy first)",
            "all_to_all": "dist.all_to_all_single (no in-place form)",
        }[c]
        ifname = os.environ.get("GLOO_SOCKET_IFNAME", "")
        return "torch.distributed gloo backend: %s; GLOO_SOCKET_IFNAME=%s" % (what, ifname or "(unset)")

    def has_inplace(self):
        return self.o["coll"] != "all_to_all"

    # -- buffers, as pb_send_ptr/pb_recv_ptr/pb_shift (element offsets) --
    def shift(self, iter_):
        send_c, recv_c = self.k[0], self.k[1]
        total = max(send_c, recv_c) * ELEM
        steps = self.o["max_bytes"] // total if total else 1
        steps = steps or 1
        return total * (iter_ % steps) // ELEM

    def send_off(self, in_place, sh):
        return sh + (self.k[3] * self.rank if in_place else 0)

    def recv_off(self, in_place, sh):
        return sh + (self.k[4] * self.rank if in_place else 0)

    def run(self, in_place, iter_):
        c, p = self.o["coll"], self.k[2]
        if p == 0:
            return  # as nccl-tests' alltoall: nothing to move
        d, n, root = self.dist, self.n, self.o["root"]
        sh = self.shift(iter_)
        sbuf = self.recv if in_place else self.send
        s0, r0 = self.send_off(in_place, sh), self.recv_off(in_place, sh)
        if c == "all_reduce":
            out = self.recv[r0:r0 + p]
            if not in_place:
                out.copy_(self.send[s0:s0 + p])
            d.all_reduce(out)
        elif c == "all_gather":
            inp = sbuf[s0:s0 + p]
            if self.ag_native:
                d.all_gather_into_tensor(self.recv[r0:r0 + p * n], inp)
            else:
                d.all_gather([self.recv[r0 + i * p:r0 + (i + 1) * p] for i in range(n)], inp)
        elif c == "reduce_scatter":
            inp = sbuf[s0:s0 + p * n]
            if self.rs_native:
                d.reduce_scatter_tensor(self.recv[r0:r0 + p], inp)
            elif in_place:
                d.all_reduce(inp)  # this rank's block is already at rank * count
            else:
                tmp = self.scratch[:p * n]
                tmp.copy_(inp)
                d.all_reduce(tmp)
                self.recv[r0:r0 + p].copy_(tmp[self.rank * p:(self.rank + 1) * p])
        elif c == "broadcast":
            out = self.recv[r0:r0 + p]
            if not in_place and self.rank == root:
                out.copy_(self.send[s0:s0 + p])
            d.broadcast(out, root)
        elif c == "reduce":
            out = self.recv[r0:r0 + p]
            if not in_place:
                out.copy_(self.send[s0:s0 + p])
            d.reduce(out, root)
        elif c == "all_to_all":
            d.all_to_all_single(self.recv[r0:r0 + p * n], self.send[s0:s0 + p * n])

    # -- the peers' fill and check (pb_init_data / pb_check) --
    def vals(self, r, j0, cnt, rep):
        t = self.torch
        j = t.arange(j0, j0 + cnt, dtype=t.int64)
        return ((j * 3 + r * 5 + rep) % 17).to(t.float32)

    def init_data(self, in_place, rep):
        t, c, n, rank, root = self.torch, self.o["coll"], self.n, self.rank, self.o["root"]
        send_c, recv_c, p = self.k[0], self.k[1], self.k[2]
        self.recv[:max(send_c, recv_c)].fill_(-1.0)
        s0 = self.send_off(in_place, 0)
        sbuf = self.recv if in_place else self.send
        sbuf[s0:s0 + send_c].copy_(self.vals(rank, 0, send_c, rep))
        e = self.expected
        if c in ("all_reduce", "reduce"):
            e[:p] = sum(self.vals(r, 0, p, rep) for r in range(n)) if p else 0
        elif c == "broadcast":
            e[:p] = self.vals(root, 0, p, rep)
        elif c == "all_gather":
            for r in range(n):
                e[r * p:(r + 1) * p] = self.vals(r, 0, p, rep)
        elif c == "reduce_scatter":
            if p:
                e[:p] = sum(self.vals(r, rank * p, p, rep) for r in range(n))
        elif c == "all_to_all":
            for r in range(n):
                e[r * p:(r + 1) * p] = self.vals(r, rank * p, p, rep)

    def check(self, in_place):
        c, rank, root = self.o["coll"], self.rank, self.o["root"]
        cnt = self.k[1]
        if c == "reduce" and rank != root:
            return 0
        r0 = self.recv_off(in_place, 0)
        got = self.recv[r0:r0 + cnt]
        if c == "broadcast" and rank == root and not in_place and cnt > 0 and got[0].item() == -1.0:
            got = self.send[:cnt]
        return int((got != self.expected[:cnt]).sum().item())

    # -- reductions over ranks --
    def reduce_double(self, v, op):
        t, d = self.torch, self.dist
        x = t.tensor([v], dtype=t.float64)
        d.all_reduce(x, op={1: d.ReduceOp.SUM, 2: d.ReduceOp.MIN, 3: d.ReduceOp.MAX}[op])
        return x.item()

    def sum_ll(self, v):
        t = self.torch
        x = t.tensor([v], dtype=t.int64)
        self.dist.all_reduce(x)
        return int(x.item())

    # -- nccl-tests' BenchTime for one (size, in_place) --
    def bench_time(self, in_place):
        o, d = self.o, self.dist
        self.pct[in_place] = None
        if in_place and not self.has_inplace():
            if self.rank == 0:
                sys.stdout.write("  %7s  %6s  %6s  %5s" % ("N/A", "N/A", "N/A", "N/A"))
            return
        if o["check"]:
            self.init_data(in_place, 99)
        self.run(in_place, 0)  # sync
        d.barrier()
        t0 = time.perf_counter()
        laps, lap_start = [], t0
        for it in range(o["iters"]):
            self.run(in_place, it)
            if o["percentiles"]:
                t = time.perf_counter()
                laps.append(t - lap_start)
                lap_start = t
        sec = (time.perf_counter() - t0) / o["iters"]
        if o["percentiles"]:  # as pb_laps: each iteration the slowest rank's, then p50 and p99
            laps = sorted(self.reduce_double(x, 3) for x in laps)
            m = len(laps)
            p50 = laps[m // 2] if m % 2 else (laps[m // 2 - 1] + laps[m // 2]) / 2
            self.pct[in_place] = (p50, laps[(99 * m + 99) // 100 - 1])
        if o["average"] == 0:
            sec = self.reduce_double(sec if self.rank == 0 else 0.0, 1)
        else:
            sec = self.reduce_double(sec, o["average"])
            if o["average"] == 1:
                sec /= self.n
        alg, bus = bus_bw(o["coll"], self.k[2], sec, self.n)
        d.barrier()
        wrong = 0
        self.rep += 1
        if o["check"]:
            self.init_data(in_place, self.rep)
            self.run(in_place, 0)
            wrong = self.sum_ll(self.check(in_place))
            if wrong:
                self.errors += 1
        if self.rank == 0:
            ts = fmt_time(sec * 1e6)
            if o["check"]:
                sys.stdout.write("  %7s  %6.2f  %6.2f  %5d" % (ts, alg, bus, wrong))
            else:
                sys.stdout.write("  %7s  %6.2f  %6.2f  %5s" % (ts, alg, bus, "N/A"))
        self.bw_sum += bus
        self.bw_count += 1

    def main(self, library):
        o, c, n = self.o, self.o["coll"], self.n
        redop = "sum" if c in ("all_reduce", "reduce_scatter", "reduce") else "none"
        root = o["root"] if c in ("broadcast", "reduce") else -1
        if self.rank == 0:
            w = sys.stdout.write
            w("# torch_gloo_bench %s: %d ranks on %s, %s\n" % (c, n, socket.gethostname(), library))
            w("# %s\n" % self.details())
            w("# minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d validation: %d "
              "time: %s over ranks of the per-rank average%s\n" % (
                  o["min_bytes"], o["max_bytes"],
                  o["step_factor"] if o["step_factor"] > 1 else o["step_bytes"],
                  "factor" if o["step_factor"] > 1 else "bytes", o["warmup"], o["iters"], o["check"],
                  ["rank 0", "mean", "min", "max"][o["average"]],
                  "; p50/p99: over the iterations, each the slowest rank's time" if o["percentiles"] else ""))
            w("#\n")
            pct = o["percentiles"]
            w("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          %s\n"
              % ("", "", "", "", "", "   out-of-place        in-place" if pct else ""))
            w("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s\n" % (
                "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                "time", "algbw", "busbw", "#wrong", "      p50      p99      p50      p99" if pct else ""))
            w("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s%s\n" % (
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "", "     (us)     (us)     (us)     (us)" if pct else ""))
            sys.stdout.flush()
        self.dist.barrier()
        # warmup at the largest and the smallest size, out of place, like nccl-tests' TimeTest
        for size in (o["max_bytes"], o["min_bytes"]):
            self.k = counts(c, size, n)
            for it in range(o["warmup"]):
                self.run(False, it)
        size = o["min_bytes"]
        while size <= o["max_bytes"]:
            self.k = counts(c, size, n)
            if o["warmup_each"] > 0:
                for it in range(o["warmup_each"]):
                    self.run(False, it)
                self.dist.barrier()
            if self.rank == 0:
                sys.stdout.write("%12d  %12d  %8s  %6s  %6i" % (
                    max(self.k[0], self.k[1]) * ELEM, self.k[2], "float", redop, root))
            self.bench_time(False)
            self.bench_time(True)
            if self.rank == 0:
                if o["percentiles"]:
                    for q in (self.pct[False], self.pct[True]):
                        sys.stdout.write("".join("  %7s" % (fmt_time(x * 1e6) if q else "N/A")
                                                 for x in (q or (0, 0))))
                sys.stdout.write("\n")
                sys.stdout.flush()
            if size == 0:
                break  # -b 0 with a factor would loop forever
            size = size * o["step_factor"] if o["step_factor"] > 1 else size + o["step_bytes"]
        if self.rank == 0:
            sys.stdout.write("# Out of bounds values : %d %s\n" % (self.errors, "FAILED" if self.errors else "OK"))
            sys.stdout.write("# Avg bus bandwidth    : %g \n" % (self.bw_sum / self.bw_count if self.bw_count else 0.0))
            sys.stdout.write("#\n")
            sys.stdout.flush()
        return 1 if self.errors else 0


def main():
    rank_env = os.environ.get("RANK")
    rank_guess = int(rank_env) if rank_env and rank_env.isdigit() else 0
    o = parse_args(sys.argv, rank_guess)
    if o is None:
        return 2
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(v):
            sys.stderr.write("torch_gloo_bench: %s is not set: launch one process per rank with "
                             "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun, shoal-run)\n" % v)
            return 2
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)  # as a rank per core: the collectives are what is measured
    timeout = int(os.environ.get("TORCH_GLOO_BENCH_TIMEOUT", "300"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    n = dist.get_world_size()
    if not 0 <= o["root"] < n:
        if dist.get_rank() == 0:
            sys.stderr.write("torch_gloo_bench: root %d out of range for %d ranks\n" % (o["root"], n))
        return 2
    b = Bench(o, torch, dist)
    b.probe()
    rc = b.main("torch %s gloo" % torch.__version__)
    dist.barrier()
    dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
