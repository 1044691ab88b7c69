"""What the training examples share: a small GPT-style transformer, synthetic sequences with
structure to learn (reproducible per (seed, rank, step)), and their start-up (common flags;
ranks from torchrun/shoal-run, or --nproc N started here)."""

import datetime
import math
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, seq, dim, heads, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def make_model(args):
    """The GPT of the flags, seeded with --seed: the same initial weights in every process, and
    in each example's single-process reference."""
    torch.manual_seed(args.seed)
    return GPT(args.vocab, args.seq, args.dim, args.heads, args.layers)


FORTUNES = "/usr/share/games/fortunes"  # Debian's fortunes: the corpus shoal-swarm trains on too
_corpus = {}


def corpus(path):
    """The bytes of a text file, or of every text file of a directory (fortune's .dat indexes and
    .u8 links left out), as a uint8 tensor; read once per process."""
    if path not in _corpus:
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path)
                           if not n.endswith(".dat") and not os.path.islink(os.path.join(path, n)))
            files = [os.path.join(path, n) for n in names]
        else:
            files = [path]
        parts = []
        for f in files:
            if os.path.isfile(f):
                with open(f, "rb") as fh:
                    parts.append(fh.read())
        data = b"".join(parts)
        if len(data) < 1024:
            sys.exit(f"no training text at '{path}' ({len(data)} bytes); the default corpus is "
                     "Debian's fortunes: apt-get install fortunes (scripts/install-deps.sh)")
        _corpus[path] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return _corpus[path]


def batch(args, rank, step):
    """(inputs, targets) of rank `rank` at step `step`, the same in every process: windows of
    --seq + 1 bytes of the --corpus at offsets drawn from (seed, rank, step), or with --corpus
    synthetic, sequences with structure to learn: x[i+1] = (a * x[i] + c) mod vocab, per row."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
    if args.corpus != "synthetic":
        text = corpus(args.corpus)
        starts = torch.randint(0, len(text) - args.seq - 1, (args.batch, 1), generator=g)
        data = text[starts + torch.arange(args.seq + 1)].long()
        return data[:, :-1], data[:, 1:]
    start = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
    a = torch.randint(1, 4, (args.batch, 1), generator=g)
    c = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
    seq = [start]
    for _ in range(args.seq):
        seq.append((a * seq[-1] + c) % args.vocab)
    data = torch.cat(seq, dim=1)
    return data[:, :-1], data[:, 1:]


def host_tx_bytes():
    """Bytes the network interfaces of this network namespace have sent, loopback left out (the
    kernel's counters: with a rank per emulated host, scripts/netcluster.sh, what that rank
    sent on the wire), or None where there are none."""
    total, found = 0, False
    for name in os.listdir("/sys/class/net"):
        if name == "lo":
            continue
        try:
            with open(f"/sys/class/net/{name}/statistics/tx_bytes") as f:
                total += int(f.read())
            found = True
        except OSError:
            pass
    return total if found else None


def add_common_args(p, layers, corpus="synthetic", dim=64, batch=8, seq=32):
    """The flags every training example takes (model size, data, steps, launch, output)."""
    p.add_argument("--backend", default="shoal", choices=["shoal", "gloo"])
    p.add_argument("--corpus", default=corpus,
                   help=f"text file or directory to train on, bytes as tokens (Debian's fortunes: "
                        f"{FORTUNES}), or 'synthetic' (default {corpus})")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the step time")
    p.add_argument("--batch", type=int, default=batch, help="sequences per rank and step")
    p.add_argument("--seq", type=int, default=seq)
    p.add_argument("--vocab", type=int, default=None,
                   help="token ids (default: 256, bytes, with a corpus; 64 for synthetic data)")
    p.add_argument("--dim", type=int, default=dim)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=layers)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--timeout", type=float, default=300.0, help="process group timeout, seconds")
    p.add_argument("--nproc", type=int, default=0, help="start this many ranks here (no launcher)")
    p.add_argument("--json", action="store_true", help="rank 0 prints one JSON line at the end")
    p.add_argument("--quiet", action="store_true", help="no per-step lines")


def parse_args(p, argv=None):
    """p.parse_args(argv) with the defaults that depend on other flags filled in."""
    args = p.parse_args(argv)
    if args.vocab is None:
        args.vocab = 64 if args.corpus == "synthetic" else 256
    elif args.corpus != "synthetic" and args.vocab < 256:
        p.error(f"--vocab {args.vocab}: a text corpus has byte tokens, 256 of them")
    return args


def init(args, rank=None, world=None, init_method=None):
    if args.backend == "shoal":
        import shoal.torch  # noqa: F401  registers the backend
    torch.set_num_threads(args.threads)
    kwargs = dict(timeout=datetime.timedelta(seconds=args.timeout))
    if init_method:
        kwargs.update(init_method=init_method, rank=rank, world_size=world)
    dist.init_process_group(args.backend, **kwargs)


def _spawned(rank, train, args, world, init_method):
    init(args, rank, world, init_method)
    train(args)
    dist.barrier()
    dist.destroy_process_group()


def from_other_launcher():
    """torch's env:// reads torchrun's variables; srun and mpirun set their own. Maps theirs
    (SLURM_PROCID/NTASKS/LOCALID, OMPI_COMM_WORLD_*, PMI_*) onto torchrun's. Rank 0 hosts the
    store: MASTER_ADDR must name its host unless every rank is on one host."""
    if "RANK" in os.environ:
        return
    for rank, size, local, nodes in (("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NNODES"),
                                     ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                      "OMPI_COMM_WORLD_LOCAL_RANK", None),
                                     ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", None)):
        if rank in os.environ and size in os.environ:
            os.environ["RANK"], os.environ["WORLD_SIZE"] = os.environ[rank], os.environ[size]
            os.environ.setdefault("LOCAL_RANK", os.environ.get(local, "0"))
            if "MASTER_ADDR" not in os.environ:
                if nodes and os.environ.get(nodes, "1") != "1":
                    sys.exit(f"{rank} is set but MASTER_ADDR is not: export MASTER_ADDR=<rank 0's host>")
                os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ.setdefault("MASTER_PORT", "29500")
            return


def launch(train, args, name):
    """Runs train(args) on every rank: the launcher's (torchrun, shoal-run) or --nproc here."""
    if args.nproc:
        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory(prefix="shoal-example-") as tmp:
            mp.spawn(_spawned, args=(train, args, args.nproc, "file://" + os.path.join(tmp, "store")),
                     nprocs=args.nproc, join=True)
        return 0
    from_other_launcher()
    if "RANK" not in os.environ:
        sys.exit(f"{name}: run under torchrun, shoal-run, srun or mpirun, or pass --nproc N")
    init(args)
    train(args)
    dist.barrier()  # nobody tears down while a peer still talks to it (gloo aborts then)
    dist.destroy_process_group()
    return 0
