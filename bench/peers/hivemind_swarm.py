#!/usr/bin/env python3
"""SWARM on hivemind: the peer that `shoal-swarm local` is measured against (bench/swarm_vs_hivemind.sh).

The same GPT as shoal-swarm (byte tokens, learned positions, pre-norm blocks, Adam with betas
0.9/0.95) cut into the same stages; every replica of a stage is a hivemind `Server` hosting one
`ModuleBackend` named `stage{k}.{i}` on hivemind's DHT, and the replicas of a stage average with a
`hivemind.Optimizer` (run_id per stage, target batch = the global batch, as the SWARM paper's
released code trains its stages). Trainers route every micro-batch the way shoal's do and the
released SWARM code did: to the replica of each stage with the least expected finish time
(virtual time charged size / throughput, the throughput an average of the rates measured on that
replica's replies), and retry elsewhere on a failure (the replica banned with exponential
back-off). The peers are emulated as shoal-swarm emulates them: a peer of slowdown s spends
s * (compute + d) per forward and s * (compute + 2 d) per backward per micro-batch.

Per request the two systems do the same work: S-1 forwards (stage 0 .. S-2) and S backwards, the
last stage computing the loss inside its backward (a ModuleBackend subclass returns the loss in
place of the targets' gradient), every backward recomputing its stage's forward.

    hivemind_swarm.py local --stages 3 --peers 9 --trainers 2 --inflight 8 --device-ms 20 \
        --slowdown 1,2,4,2,4,1,4,1,2 --global-batch 144 --rounds 8 --out DIR [--kill-at 20,40 \
        --kill-peers server6,server5] [--delayed-updates]

DIR receives what shoal-swarm local writes (progress.csv, peers.csv, rounds.csv, summary.json, the
same columns and keys) and logs/. Every peer runs in its own session, so that a kill (SIGKILL of
its process group) takes the whole peer: its DHT, p2p daemon, task pools, connection handlers and
averager, as a host that dies.
"""
import argparse
import asyncio
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# hivemind's CompressionType for each --codec: NONE, FLOAT16, UNIFORM_8BIT
CODECS = {"none": 0, "fp16": 2, "int8": 3}

# ---------------------------------------------------------------- model and data (as shoal-swarm's)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)) (src/swarm/train/model.cpp)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln2, self.fc, self.fc_out = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = (y.view(b, t, self.heads, hd).transpose(1, 2) for y in self.qkv(self.ln1(x)).chunk(3, -1))
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = torch.softmax(att.masked_fill(future, float("-inf")), -1)
        x = x + self.proj(torch.matmul(att, v).transpose(1, 2).contiguous().view(b, t, d))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


def stage_blocks(layers, stages, stage):
    base, extra = divmod(layers, stages)
    first = stage * base + min(stage, extra)
    return first, first + base + (1 if stage < extra else 0)


class Stage(nn.Module):
    """Stage 0 maps tokens [B, T] to [B, T, D]; middle stages [B, T, D] to [B, T, D]; the last maps
    ([B, T, D], targets [B, T]) to each sample's mean next-token cross entropy [B]."""

    def __init__(self, a, stage):
        super().__init__()
        self.first, self.last = stage == 0, stage == a.stages - 1
        lo, hi = stage_blocks(a.layers, a.stages, stage)
        if self.first:
            self.tok, self.pos = nn.Embedding(256, a.d_model), nn.Embedding(a.seq_len, a.d_model)
        self.blocks = nn.ModuleList(Block(a.d_model, a.heads) for _ in range(lo, hi))
        if self.last:
            self.ln_f, self.head = nn.LayerNorm(a.d_model), nn.Linear(a.d_model, 256)
        # GPT-2 init (normal 0.02, zero biases, LayerNorm at identity) from (seed, stage) alone:
        # every replica of a stage starts from the same parameters.
        gen = torch.Generator().manual_seed(a.model_seed * 1000 + stage)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    m.weight.normal_(0.0, 0.02, generator=gen)
                    if getattr(m, "bias", None) is not None:
                        m.bias.zero_()

    def forward(self, x, targets=None):
        if self.first:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for block in self.blocks:
            x = block(x)
        if not self.last:
            return x
        logits = self.head(self.ln_f(x))
        loss = F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1), reduction="none")
        return loss.view(targets.shape).mean(1)


def params_of(a):
    d, t = a.d_model, a.seq_len
    return 256 * d + t * d + a.layers * (12 * d * d + 13 * d) + 2 * d + d * 256 + 256


class Corpus:
    """The text shoal-swarm trains on (Debian's fortunes) as bytes; micro-batch i is a pure
    function of (seed, i) (the draws differ from shoal-swarm's generator, their law does not)."""

    def __init__(self, path="/usr/share/games/fortunes", holdout=0.05):
        files = [path] if os.path.isfile(path) else sorted(
            os.path.join(path, n) for n in os.listdir(path)
            if not n.endswith(".dat") and not os.path.islink(os.path.join(path, n))
            and os.path.isfile(os.path.join(path, n)))
        data = b"".join(open(f, "rb").read() for f in files)
        if len(data) < 1 << 16:
            sys.exit(f"hivemind_swarm: no corpus at {path} (Debian package fortunes)")
        self.bytes = np.frombuffer(data, dtype=np.uint8)
        self.train_end = int(len(data) * (1 - holdout))

    def micro_batch(self, index, batch, seq_len, seed=0):
        rng = np.random.default_rng([seed, index])
        starts = rng.integers(0, self.train_end - seq_len - 1, size=batch)
        rows = np.stack([self.bytes[s:s + seq_len + 1] for s in starts]).astype(np.int64)
        rows = torch.from_numpy(rows)
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


# ---------------------------------------------------------------- stage server


def serve(a):
    import hivemind
    from hivemind.moe.server import ModuleBackend, Server
    from hivemind.utils.tensor_descr import BatchTensorDescriptor

    torch.set_num_threads(a.threads)
    stage = a.stage
    module = Stage(a, stage)
    stats = {"samples": 0.0, "busy": 0.0, "step": 0.0}
    lock = threading.Lock()

    def emulate(compute_s, units):
        extra = (a.slowdown - 1) * compute_s + a.slowdown * a.device_ms * 1e-3 * units
        if extra > 0:
            time.sleep(extra)

    class EmulatedBackend(ModuleBackend):
        """A replica on the emulated device (busy s * (compute + d) per forward, s * (compute + 2d)
        per backward and micro-batch); the last stage's backward returns each sample's loss in the
        place of the targets' gradient. The optimizer step that hivemind runs inside every backward
        (hivemind.Optimizer: accumulate; at an epoch's end, average and step) is neither slowed down
        nor counted as busy: the ideal is the replicas' compute, as shoal-swarm's."""

        step_s = 0.0

        def on_backward(self, batch_size):
            start = time.perf_counter()
            super().on_backward(batch_size)
            self.step_s = time.perf_counter() - start

        def forward(self, *inputs):
            start = time.perf_counter()
            out = super().forward(*inputs)
            emulate(time.perf_counter() - start, inputs[0].shape[0] / a.micro_batch)
            with lock:
                stats["busy"] += time.perf_counter() - start
            return out

        def backward(self, *inputs):
            start = time.perf_counter()
            self.step_s = 0.0
            n = inputs[0].shape[0]
            if module.last:
                h, targets, grad = inputs
                with torch.enable_grad():
                    h = h.detach().requires_grad_(True)
                    loss = module(h, targets)
                    torch.autograd.backward(loss, grad_tensors=grad.to(loss.dtype))
                self.on_backward(n)
                out = (h.grad, loss.detach())
            else:
                out = super().backward(*inputs)
            emulate(time.perf_counter() - start - self.step_s, 2 * n / a.micro_batch)
            with lock:
                stats["busy"] += time.perf_counter() - start - self.step_s
                stats["step"] += self.step_s
                stats["samples"] += n
            return out

    initial_peers = a.initial_peers.split(",")
    if a.dial_servers:
        # Across emulated hosts libp2p's routing cannot look a peer up (see local()): this server
        # dials every server started before it, and the later ones dial it, so that each pair of
        # replicas that may average has a connection whose addresses both daemons know.
        here = os.path.dirname(a.stats)
        for i in range(a.index):
            path = os.path.join(here, f"server{i}.stats.maddrs")
            while not os.path.exists(path):
                time.sleep(0.2)
            initial_peers += open(path).read().strip().split(",")
    dht = hivemind.DHT(initial_peers=initial_peers, start=True, host_maddrs=[f"/ip4/{a.host}/tcp/0"])
    opt = hivemind.Optimizer(
        dht=dht, run_id=f"{a.run_id}-stage{stage}", params=module.parameters(),
        optimizer=lambda params: torch.optim.Adam(params, lr=a.lr, betas=(0.9, 0.95)),
        target_batch_size=a.global_batch * a.micro_batch, batch_size_per_step=a.micro_batch,
        matchmaking_time=a.matchmaking_time, averaging_timeout=a.averaging_timeout,
        delay_optimizer_step=a.delayed_updates, delay_grad_averaging=a.delayed_updates,
        offload_optimizer=True if a.delayed_updates else None, verbose=False)
    compression = CODECS[a.codec]
    hidden = BatchTensorDescriptor(a.seq_len, a.d_model, compression=compression)
    tokens = BatchTensorDescriptor(a.seq_len, dtype=torch.int64)
    args_schema = (tokens,) if module.first else (hidden, tokens) if module.last else (hidden,)
    backend = EmulatedBackend(
        name=f"stage{stage}.{a.index}", module=module, optimizer=opt, args_schema=args_schema,
        outputs_schema=BatchTensorDescriptor(compression=0) if module.last else hidden,
        max_batch_size=a.micro_batch * 8)
    server = Server(dht, {backend.name: backend}, num_connection_handlers=a.handlers,
                    update_period=a.announce_period, expiration=3 * a.announce_period, start=True)
    with open(a.stats + ".maddrs", "w") as f:  # where trainers dial it (local, --netns)
        f.write(",".join(str(m) for m in dht.get_visible_maddrs()))
    print(f"server {backend.name} up (slowdown {a.slowdown})", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(a.stats, "w") as f:
        while not stop.wait(0.5):
            with lock:
                f.write(f"{time.time()},{stats['samples']},{stats['busy']},{opt.local_epoch},{stats['step']}\n")
            f.flush()
    server.shutdown()
    os._exit(0)


# ---------------------------------------------------------------- trainer


class Balancer:
    """Least expected finish time per stage and direction (shoal's router, src/swarm/net/router.*)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.table = {}  # uid -> [virtual time, throughput (samples/s) or 0, banned until, failures]
        self.live = {}  # uid -> stub

    def refresh(self, live):
        with self.lock:
            self.live = live
            floor = min((e[0] for u, e in self.table.items() if u in live), default=0.0)
            for uid in live:
                self.table.setdefault(uid, [floor, 0.0, 0.0, 0])  # a newcomer enters at the minimum

    def choose(self, size):
        with self.lock:
            now = time.monotonic()
            ready = [u for u in self.live if self.table[u][2] <= now]
            if not ready:
                return None, None, 0.0
            uid = min(ready, key=lambda u: self.table[u][0])
            known = [e[1] for e in self.table.values() if e[1] > 0]
            rate = self.table[uid][1] or (sum(known) / len(known) if known else 1.0)
            charge = size / rate
            self.table[uid][0] += charge
            return uid, self.live[uid], charge

    def done(self, uid, size, seconds):
        with self.lock:
            e = self.table[uid]
            rate = size / max(seconds, 1e-6)
            e[1] = rate if e[1] == 0 else 0.8 * e[1] + 0.2 * rate
            e[3] = 0

    def failed(self, uid, charge):
        with self.lock:
            e = self.table[uid]
            e[0] -= charge
            e[3] += 1
            e[2] = time.monotonic() + min(30.0, 0.5 * 2 ** (e[3] - 1))


def train(a):
    import hivemind
    from hivemind.compression import deserialize_torch_tensor, serialize_torch_tensor
    from hivemind.moe.client.expert import get_server_stub
    from hivemind.moe.client.remote_expert_worker import RemoteExpertWorker
    from hivemind.moe.server.dht_handler import get_experts
    from hivemind.proto import runtime_pb2

    torch.set_num_threads(a.threads)
    corpus = Corpus(a.corpus)
    dht = hivemind.DHT(initial_peers=a.initial_peers.split(","), client_mode=True, start=True)
    p2p = RemoteExpertWorker.run_coroutine(dht.replicate_p2p())
    uids = [[f"stage{i % a.stages}.{i}" for i in range(a.peers) if i % a.stages == k] for k in range(a.stages)]
    fwd = [Balancer() for _ in range(a.stages)]
    bwd = [Balancer() for _ in range(a.stages)]
    compression = CODECS[a.codec]
    stop = threading.Event()

    def discover():
        while not stop.is_set():
            try:
                for k in range(a.stages):
                    infos = get_experts(dht, uids[k])
                    live = {e.uid: get_server_stub(p2p, e.peer_id) for e in infos if e is not None}
                    fwd[k].refresh(live)
                    bwd[k].refresh(live)
            except Exception as e:  # the DHT answers again later
                print(f"trainer {a.trainer}: discovery failed: {e!r}", file=sys.stderr, flush=True)
            stop.wait(1.0)

    threading.Thread(target=discover, daemon=True).start()
    next_index = [a.trainer]
    index_lock = threading.Lock()
    out = open(a.done, "w")
    out_lock = threading.Lock()
    total = a.rounds * a.global_batch

    def call(balancers, k, method, tensors, codecs):
        """One request to some replica of stage k; retried elsewhere until one answers."""
        deadline = time.monotonic() + a.give_up
        while True:
            uid, stub, charge = balancers[k].choose(a.micro_batch)
            if uid is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no replica of stage {k} for {a.give_up} s")
                time.sleep(0.1)
                continue
            parts = [serialize_torch_tensor(t, c) for t, c in zip(tensors, codecs)]
            start = time.monotonic()
            try:
                request = runtime_pb2.ExpertRequest(uid=uid, tensors=parts)
                reply = RemoteExpertWorker.run_coroutine(
                    asyncio.wait_for(getattr(stub, method)(request), a.request_timeout))
                result = [deserialize_torch_tensor(t) for t in reply.tensors]
            except Exception as e:
                balancers[k].failed(uid, charge)
                print(f"trainer {a.trainer}: {method} on {uid} failed ({type(e).__name__}: {str(e)[:300]}), retrying",
                      file=sys.stderr, flush=True)
                continue
            balancers[k].done(uid, a.micro_batch, time.monotonic() - start)
            nbytes = sum(len(p.buffer) for p in parts) + sum(len(t.buffer) for t in reply.tensors)
            return result, nbytes

    def worker():
        while True:
            with index_lock:
                index = next_index[0]
                next_index[0] += a.trainers
            if index >= total:
                return
            tokens, targets = corpus.micro_batch(index, a.micro_batch, a.seq_len, a.data_seed)
            inputs, nbytes = [tokens], 0
            for k in range(a.stages - 1):
                (h,), b = call(fwd, k, "rpc_forward", [inputs[-1]], [0 if k == 0 else compression])
                inputs.append(h)
                nbytes += b
            grad = torch.full((a.micro_batch,), 1.0 / a.micro_batch)
            last = a.stages - 1
            (grad_h, loss), b = call(bwd, last, "rpc_backward", [inputs[last], targets, grad],
                                     [0 if last == 0 else compression, 0, 0])
            nbytes += b
            for k in range(last - 1, -1, -1):
                (grad_h, *_), b = call(bwd, k, "rpc_backward", [inputs[k], grad_h],
                                       [0 if k == 0 else compression, compression])
                nbytes += b
            with out_lock:
                out.write(f"{time.time()},{index},{loss.mean().item()},{nbytes}\n")
                out.flush()

    threads = [threading.Thread(target=worker) for _ in range(a.inflight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    out.close()
    os._exit(0)


# ---------------------------------------------------------------- launcher


def new_lines(path, offsets):
    """The complete lines appended to path since the last call (offsets: where each file was read to)."""
    try:
        with open(path) as f:
            f.seek(offsets.get(path, 0))
            chunk = f.read()
    except OSError:
        return []
    keep = chunk[:chunk.rfind("\n") + 1]
    offsets[path] = offsets.get(path, 0) + len(keep)
    return keep.splitlines()


def address_of_netns(ns):
    """The first global IPv4 address of network namespace `ns` (scripts/netcluster.sh's hosts)."""
    out = subprocess.run(["ip", "-n", ns, "-4", "-o", "addr", "show", "scope", "global"],
                         capture_output=True, text=True).stdout
    words = out.split()
    if "inet" not in words:
        sys.exit(f"hivemind_swarm: no address in network namespace {ns!r} (scripts/netcluster.sh up makes them)")
    return words[words.index("inet") + 1].split("/")[0]


def local(a):
    import hivemind

    out = a.out
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    slowdown = [float(s) for s in a.slowdown.split(",")] if a.slowdown else [1.0]
    dht = hivemind.DHT(start=True, host_maddrs=[f"/ip4/{a.host}/tcp/0"])
    peers_addr = ",".join(str(m) for m in dht.get_visible_maddrs())
    common = ["--stages", a.stages, "--d-model", a.d_model, "--layers", a.layers, "--heads", a.heads,
              "--seq-len", a.seq_len, "--micro-batch", a.micro_batch, "--global-batch", a.global_batch,
              "--lr", a.lr, "--model-seed", a.model_seed, "--codec", a.codec, "--threads", a.threads,
              "--initial-peers", peers_addr, "--run-id", a.run_id, "--host", a.host,
              "--matchmaking-time", a.matchmaking_time, "--averaging-timeout", a.averaging_timeout]
    common += ["--delayed-updates"] if a.delayed_updates else []
    me = [sys.executable, os.path.abspath(__file__)]
    procs = {}  # name -> Popen (own session: a kill takes the whole peer)
    netns = [n for n in a.netns.split(",") if n]

    def spawn(name, args, ns=""):
        # `ip netns exec` execs the peer in place, so the Popen's pid is the peer's.
        where = ["ip", "netns", "exec", ns] if ns else []
        log = open(os.path.join(out, "logs", name + ".log"), "w")
        procs[name] = subprocess.Popen(where + me + [str(x) for x in args], stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)

    for i in range(a.peers):
        # shoal-swarm local's placement: consecutive stages on consecutive hosts, a stage's
        # replicas on different ones; trainers from the last host down.
        ns = netns[(i + i // a.stages) % len(netns)] if netns else ""
        host = ["--host", address_of_netns(ns), "--dial-servers"] if ns else []
        spawn(f"server{i}", ["serve"] + common + host + ["--stage", i % a.stages, "--index", i,
                                                         "--slowdown", slowdown[i % len(slowdown)],
                                                         "--device-ms", a.device_ms, "--handlers", a.handlers,
                                                         "--stats", os.path.join(out, "logs", f"server{i}.stats")],
              ns)
    from hivemind.moe.server.dht_handler import get_experts

    uids = [f"stage{i % a.stages}.{i}" for i in range(a.peers)]
    t_up = time.time()
    while sum(e is not None for e in get_experts(dht, uids)) < a.peers:
        if time.time() - t_up > 180 or any(p.poll() is not None for p in procs.values()):
            for p in procs.values():
                os.killpg(p.pid, signal.SIGKILL)
            sys.exit(f"hivemind_swarm: the servers did not all come up; see {out}/logs")
        time.sleep(1)
    print(f"{a.peers} servers up in {time.time() - t_up:.1f} s", flush=True)
    if netns:
        # libp2p's routing drops the emulated hosts' addresses (198.18.0.0/15 is no public
        # range), so a trainer's daemon could never look a server up: it dials every server at
        # start instead, as hivemind users list their peers in initial_peers.
        maddrs = []
        for i in range(a.peers):
            path = os.path.join(out, "logs", f"server{i}.stats.maddrs")
            while not os.path.exists(path) and time.time() - t_up < 180:
                time.sleep(0.5)
            maddrs.append(open(path).read().strip())
        common[common.index("--initial-peers") + 1] = ",".join([peers_addr] + maddrs)
    start = time.time()
    for t in range(a.trainers):
        spawn(f"trainer{t}", ["train"] + common + ["--trainer", t, "--trainers", a.trainers, "--peers", a.peers,
                                                   "--inflight", a.inflight, "--rounds", a.rounds,
                                                   "--corpus", a.corpus, "--data-seed", a.data_seed,
                                                   "--done", os.path.join(out, "logs", f"trainer{t}.done")],
              netns[(len(netns) - 1 - t % len(netns)) % len(netns)] if netns else "")
    kill_at = [float(x) for x in a.kill_at.split(",")] if a.kill_at else []
    kill_peers = a.kill_peers.split(",") if a.kill_peers else []
    rng = random.Random(12345)
    killed, kills = set(), []
    done = []  # (time, index, loss, bytes)
    offsets = {}  # file -> characters read (new_lines)
    latest_stats = {}  # server -> its newest stats line
    history = [(0.0, 0)]
    rates = {}  # server -> [smoothed throughput, last samples, last busy]
    progress = open(os.path.join(out, "progress.csv"), "w")
    progress.write("time_s,samples,samples_per_s,rounds_done,loss,live_peers,replicas_per_stage,"
                   "capacity_per_stage,ideal_samples_per_s\n")
    peers_csv = open(os.path.join(out, "peers.csv"), "w")
    peers_csv.write("time_s,peer,stage,throughput,round\n")
    ideal_series = []
    total = a.rounds * a.global_batch
    trainers = [f"trainer{t}" for t in range(a.trainers)]
    while any(procs[t].poll() is None for t in trainers):
        time.sleep(1.0)
        t = time.time() - start
        if len(kills) < len(kill_at) and t >= kill_at[len(kills)]:
            live = [f"server{i}" for i in range(a.peers) if f"server{i}" not in killed]
            per_stage = {}
            for n in live:
                per_stage[int(n[6:]) % a.stages] = per_stage.get(int(n[6:]) % a.stages, 0) + 1
            if len(kills) < len(kill_peers):
                victim = kill_peers[len(kills)]
            else:
                candidates = [n for n in live if per_stage[int(n[6:]) % a.stages] >= 2]
                victim = rng.choice(candidates) if candidates else None
            if victim:
                os.killpg(procs[victim].pid, signal.SIGKILL)
                killed.add(victim)
                kills.append({"time_s": t, "peer": victim})
                print(f"t={t:.1f}s: killed {victim}", flush=True)
        for tr in trainers:
            for line in new_lines(os.path.join(out, "logs", f"{tr}.done"), offsets):
                ts, idx, loss, nb = line.split(",")
                done.append((float(ts) - start, int(idx), float(loss), int(nb)))
        samples = len(done) * a.micro_batch
        history.append((t, samples))
        while len(history) > 2 and t - history[1][0] >= 5.0:
            history.pop(0)
        rate = (samples - history[0][1]) / (t - history[0][0]) if t > history[0][0] else 0.0
        capacity = [0.0] * a.stages
        replicas = [0] * a.stages
        for i in range(a.peers):
            name = f"server{i}"
            if name in killed:
                continue
            lines = new_lines(os.path.join(out, "logs", f"{name}.stats"), offsets)
            if lines:
                latest_stats[name] = lines[-1]
            if name not in latest_stats:
                continue
            last = latest_stats[name].split(",")
            n, busy, epoch = float(last[1]), float(last[2]), int(last[3])
            r = rates.setdefault(name, [0.0, 0.0, 0.0])
            if busy - r[2] > 1.0:  # windows of at least a second of work, smoothed, as shoal's servers
                w = (n - r[1]) / (busy - r[2])
                r[0] = w if r[0] == 0 else 0.7 * r[0] + 0.3 * w
                r[1], r[2] = n, busy
            capacity[i % a.stages] += r[0]
            replicas[i % a.stages] += 1
            peers_csv.write(f"{t},{name},{i % a.stages},{r[0]},{epoch}\n")
        ideal = min(capacity)
        ideal_series.append((t, ideal))
        rounds_done = len(done) // a.global_batch
        progress.write(f"{t},{samples},{rate},{rounds_done},nan,{a.peers - len(killed)},"
                       f"{'/'.join(map(str, replicas))},{'/'.join('%.1f' % c for c in capacity)},{ideal}\n")
        for f in (progress, peers_csv):
            f.flush()
        if int(t) % 5 == 0:
            print(f"t={t:6.1f}s samples {samples:6d} {rate:6.1f} samples/s ideal {ideal:6.1f}", flush=True)
        if t > a.time_limit:
            print(f"time limit {a.time_limit:.0f} s reached", flush=True)
            break
    elapsed = time.time() - start
    for p in procs.values():
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    time.sleep(3)
    for p in procs.values():
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    dht.shutdown()
    failures = sum(1 for t in trainers if procs[t].returncode != 0)
    # Rounds: micro-batches r*M .. (r+1)*M - 1; a round ends when the last of its samples' count has
    # completed (in completion order), as shoal's rounds end when the last stage steps.
    done.sort()
    losses = {}
    for _, idx, loss, _ in done:
        losses.setdefault(idx // a.global_batch, []).append(loss)
    round_loss = [sum(losses[r]) / len(losses[r]) for r in range(a.rounds) if r in losses]
    round_time = [done[(r + 1) * a.global_batch - 1][0] for r in range(len(done) // a.global_batch)]
    with open(os.path.join(out, "rounds.csv"), "w") as f:
        f.write("round,time_s,loss\n")
        for r, (tt, loss) in enumerate(zip(round_time, round_loss)):
            f.write(f"{r},{tt},{loss}\n")
    samples = len(done) * a.micro_batch
    summary = {
        "system": "hivemind", "hivemind": hivemind.__version__,
        "model": f"gpt d{a.d_model} h{a.heads} L{a.layers} T{a.seq_len} / {a.stages} stages, "
                 f"{params_of(a) / 1e6:.2f} M params",
        "peers": a.peers, "trainers": a.trainers, "codec": a.codec, "delayed_updates": a.delayed_updates,
        "slowdown": slowdown, "rounds": a.rounds, "rounds_done": len(round_time), "samples": samples,
        "elapsed_s": elapsed, "samples_per_s": samples / elapsed,
        "bytes_between_stages_per_sample": sum(d[3] for d in done) / max(samples, 1),
        "round_time_s": round_time, "round_loss": round_loss, "kills": kills,
        "trainer_failures": failures,
        "completed": len(round_time) == a.rounds and failures == 0 and len(done) == total,
    }
    if len(round_time) >= 3:
        t0, t1 = round_time[0], round_time[-1]
        steady = (len(round_time) - 1) * a.global_batch * a.micro_batch / (t1 - t0)
        window = [i for t, i in ideal_series if t0 <= t <= t1]
        summary["steady_samples_per_s"] = steady
        if window and sum(window) > 0:
            summary["ideal_samples_per_s"] = sum(window) / len(window)
            summary["fraction_of_ideal"] = steady / summary["ideal_samples_per_s"]
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"done: {samples} samples in {elapsed:.1f} s, {len(round_time)}/{a.rounds} rounds, "
          f"steady {summary.get('steady_samples_per_s', float('nan')):.1f} samples/s, "
          f"fraction of ideal {summary.get('fraction_of_ideal', float('nan')):.2f}", flush=True)
    # hivemind's P2P objects complain from their finalizers at interpreter exit: leave without them.
    os._exit(0 if summary["completed"] else 1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["local", "serve", "train"])
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--global-batch", type=int, default=48, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--model-seed", type=int, default=1234)
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--codec", choices=list(CODECS), default="none",
                   help="activations and gradients between stages (hivemind: NONE, FLOAT16, UNIFORM_8BIT)")
    p.add_argument("--delayed-updates", action="store_true",
                   help="hivemind.Optimizer(delay_optimizer_step=True, delay_grad_averaging=True)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--peers", type=int, default=9)
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--inflight", type=int, default=8)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--slowdown", default="")
    p.add_argument("--device-ms", type=float, default=20.0)
    p.add_argument("--kill-at", default="", help="comma list of seconds: at each, kill one server")
    p.add_argument("--kill-peers", default="", help="which servers the kills take, in order (default: random)")
    p.add_argument("--corpus", default="/usr/share/games/fortunes")
    p.add_argument("--matchmaking-time", type=float, default=5.0)
    p.add_argument("--averaging-timeout", type=float, default=60.0)
    p.add_argument("--handlers", type=int, default=2, help="connection handler processes per server")
    p.add_argument("--announce-period", type=float, default=2.0)
    p.add_argument("--request-timeout", type=float, default=20.0)
    p.add_argument("--give-up", type=float, default=180.0)
    p.add_argument("--time-limit", type=float, default=900.0)
    p.add_argument("--host", default="127.0.0.1",
                   help="this process's address (local: the bootstrap DHT's; run it inside a host's namespace)")
    p.add_argument("--netns", default="",
                   help="local: comma list of network namespaces (emulated hosts) the peers are spread over, "
                        "as shoal-swarm local --netns places them")
    p.add_argument("--run-id", default="hm")
    p.add_argument("--out", default="hivemind-swarm")
    # internal: what the launcher hands its children
    p.add_argument("--initial-peers", default="")
    p.add_argument("--dial-servers", action="store_true",
                   help="serve: also dial the servers of lower index (their .maddrs files beside --stats)")
    p.add_argument("--stage", type=int, default=0)
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--trainer", type=int, default=0)
    p.add_argument("--stats", default="")
    p.add_argument("--done", default="")
    a = p.parse_args()
    if a.role == "serve":
        a.slowdown = float(a.slowdown or 1)
        return serve(a)
    if a.role == "train":
        return train(a)
    return local(a)


if __name__ == "__main__":
    sys.exit(main())
