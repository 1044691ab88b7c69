"""DiLoCo: data-parallel training that communicates every H inner steps (Douillard et al., 2023).

Each worker trains its own copy of the model with its inner optimizer; every ``inner_steps``
steps the workers average their *pseudo-gradients* (the parameters of the last outer step minus
their own) with one all_reduce, and an outer optimizer (Nesterov SGD, lr 0.7, momentum 0.9)
applies the average to the shared parameters, which every worker then continues from::

    diloco = shoal.torch.diloco.DiLoCo(model, inner_steps=100)
    for batch in data:
        loss(model, batch).backward()
        inner_optimizer.step(); inner_optimizer.zero_grad()
        diloco.step()           # an outer step every 100 calls
    diloco.finish()             # the last outer step: every worker ends with the same model

Options, each off by default: ``codec`` compresses the pseudo-gradients (``bf16``, ``fp16``,
blockwise ``int8`` or ``int4``) with error feedback (what a worker's rounding drops is added to
its next pseudo-gradient, and what the sum's rounding drops to the next sum); ``fragments``
streams the model in F fragments synchronised at staggered inner steps (fragment f every H steps
from step (f+1)·H/F), so that each outer step moves 1/F of the bytes; ``delayed`` overlaps the
averaging of outer step t with the inner steps of t+1 and applies it one outer step late (a
worker continues from the shared parameters plus its own latest progress). After every outer
step the workers compare a hash of the shared state (``check_state``): a worker that differs is
named in a RuntimeError. ``elastic`` (a shoal group): a worker that dies or freezes during an
outer step makes the others shrink the group (shoal.torch.shrink) and take that step without it,
and new workers join between inner steps (admit() on the workers, DiLoCo.join() on the newcomer).
``local_group``: each worker is itself a group of L ranks on one host with equal parameters (DDP);
``group`` is then the rank's aligned peers on the other hosts, each local rank averages 1/L of
the pseudo-gradient across hosts (every rank and NIC carries a share) and the host gathers them.

Any torch.distributed group serves (shoal's, gloo's); all arguments are checked before any
communication. See docs/diloco.md.
"""

import concurrent.futures
import hashlib

import torch
import torch.distributed as dist

__all__ = ["CODECS", "DiLoCo"]

CODECS = ("none", "bf16", "fp16", "int8", "int4")
_FLOAT_CODECS = {"bf16": torch.bfloat16, "fp16": torch.float16}
_LEVELS = {"int8": 127, "int4": 7}  # symmetric levels of the blockwise codecs


def _quantize(v, codec, block):
    """Blockwise symmetric quantization of a float32 vector whose length is a multiple of
    `block`: (codes as uint8, one float32 scale per block)."""
    levels = _LEVELS[codec]
    blocks = v.view(-1, block)
    scale = blocks.abs().amax(dim=1).clamp_min(1e-30) / levels
    q = torch.round(blocks / scale[:, None]).clamp_(-levels, levels).to(torch.int16) + levels
    q = q.to(torch.uint8).view(-1)
    if codec == "int4":  # two codes a byte
        q = (q[0::2] << 4) | q[1::2]
    return q, scale.to(torch.float32)


def _check_count(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"DiLoCo: {name} must be an integer >= 1, got {value!r}")


def _padded(v, parts, multiple=1):
    """`v` zero-padded to `parts` parts of a multiple of `multiple` elements; (padded, part)."""
    part = -(-v.numel() // (parts * multiple)) * multiple
    padded = torch.zeros(part * parts, dtype=torch.float32)
    padded[:v.numel()] = v
    return padded, part


def _dequantize(q, scale, codec, block):
    levels = _LEVELS[codec]
    if codec == "int4":
        q = torch.stack((q >> 4, q & 15), dim=1).view(-1)
    return ((q.to(torch.float32) - levels).view(-1, block) * scale[:, None]).view(-1)


class DiLoCo:
    """Outer steps of DiLoCo over `model`'s parameters; call step() after every inner step."""

    def __init__(self, model, *, inner_steps, outer_lr=0.7, outer_momentum=0.9, nesterov=True,
                 codec="none", block_size=256, fragments=1, delayed=False, check_state=True,
                 elastic=False, group=None, local_group=None):
        _check_count("inner_steps", inner_steps)
        if codec not in CODECS:
            raise ValueError(f"DiLoCo: unknown codec {codec!r} (one of {', '.join(CODECS)})")
        if not isinstance(block_size, int) or block_size < 2 or block_size % 2:
            raise ValueError(f"DiLoCo: block_size must be an even integer >= 2, got {block_size!r}")
        if not outer_lr > 0:
            raise ValueError(f"DiLoCo: outer_lr must be > 0, got {outer_lr!r}")
        if not 0 <= outer_momentum < 1:
            raise ValueError(f"DiLoCo: outer_momentum must be in [0, 1), got {outer_momentum!r}")
        self._params = [p for p in model.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("DiLoCo: the model has no parameters that require grad")
        _check_count("fragments", fragments)
        if fragments > len(self._params):
            raise ValueError(f"DiLoCo: {fragments} fragments for {len(self._params)} parameter tensors "
                             "(a fragment is one or more whole tensors)")
        if any(p.dtype != torch.float32 for p in self._params):
            raise ValueError("DiLoCo: the parameters must be float32 (the outer state is kept in float32)")
        if elastic and dist.get_backend(group) != "shoal":
            raise TypeError(f"DiLoCo: elastic needs a shoal group (it shrinks it with shoal.torch.shrink), "
                            f"not a {dist.get_backend(group)} one")
        if local_group is not None and elastic:
            raise ValueError("DiLoCo: elastic with a local_group is not supported (shrink one group, not two)")
        self.local_group = local_group
        self.local_size = dist.get_world_size(local_group) if local_group is not None else 1
        self.local_rank = dist.get_rank(local_group) if local_group is not None else 0
        self.elastic = elastic
        self.shrinks = 0  # elastic: how often the group lost workers
        self.inner_steps = inner_steps
        self.codec = codec
        self.block_size = block_size
        self.delayed = delayed
        self.check_state = check_state
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        # Fragments: consecutive tensors of about equal size, each at least one tensor.
        total = sum(p.numel() for p in self._params)
        self._fragments, start, acc = [], 0, 0
        for f in range(fragments):
            end = start + 1
            acc += self._params[start].numel()
            while end < len(self._params) - (fragments - f - 1) and acc < total * (f + 1) / fragments:
                acc += self._params[end].numel()
                end += 1
            if f == fragments - 1:
                end = len(self._params)
            self._fragments.append(list(range(start, end)))
            start = end
        # The inner step of each fragment's first outer step; then every inner_steps.
        self._offsets = [(f + 1) * inner_steps // fragments for f in range(fragments)]
        # The outer (shared) parameters and their optimizer; the start of each fragment's progress.
        with torch.no_grad():
            self._global = [p.detach().clone() for p in self._params]
        self._outer = torch.optim.SGD(self._global, lr=outer_lr, momentum=outer_momentum,
                                      nesterov=nesterov and outer_momentum > 0)
        self._snapshot = [self._flat(f) for f in range(fragments)]
        self._residual = [None] * fragments  # the worker's error feedback, per fragment
        self._sum_residual = [None] * fragments  # the sum's (blockwise codecs: this rank's part)
        self._pending = [None] * fragments  # delayed: the future of the averaging in flight
        # Delayed: the averagings run on one thread, in the order of the calls, as do the state
        # checks meanwhile (the group's calls must come in the same order on every worker).
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1) if delayed else None
        self._checks = []  # delayed: the state checks in flight
        self.step_count = 0
        self.outer_steps = 0
        self.bytes_sent = 0  # what this worker's averaging sent, by the algorithm's count

    # ---- the loop's side ----

    def step(self):
        """After an inner step: the outer step of every fragment that is due."""
        self.step_count += 1
        for f, offset in enumerate(self._offsets):
            if self.step_count >= offset and (self.step_count - offset) % self.inner_steps == 0:
                self._sync(f)

    def finish(self):
        """Applies what is in flight and averages every fragment's remaining progress: every
        worker ends with the same parameters. The object is done after it."""
        self._drain()
        if self._executor:
            self._executor.shutdown()
            self._executor = None
        for f in range(len(self._fragments)):
            self._sync_now(f)

    # ---- membership: workers that join between outer steps ----

    def admit(self, joining, name):
        """Every worker calls this between two inner steps while `joining` new processes call
        DiLoCo.join(model, store, name, ...) with the same options: the group grows
        (shoal.torch.grow), the newcomers receive the shared state from worker 0, and every
        worker checks its hash. What is in flight (delayed) is applied first. Elastic only."""
        if not self.elastic:
            raise ValueError("DiLoCo.admit: workers join an elastic DiLoCo only (elastic=True)")
        from . import grow
        self._drain()
        self._set_group(grow(int(joining), str(name), self.group))
        self._share_state(newcomer=False)

    @classmethod
    def join(cls, model, store, name, **options):
        """The newcomer's side of admit(): joins the job's group through `store` (the job's
        torch.distributed Store) under `name`, takes the shared state of worker 0 (parameters,
        outer momentum, step counts) and returns a DiLoCo that goes on from there. `options`
        must be the workers' (ValueError naming the first that differs)."""
        from . import join
        group = join(store, str(name))
        options = dict(options, elastic=True, group=group)
        diloco = cls(model, **options)
        diloco._share_state(newcomer=True)
        return diloco

    def _set_group(self, group):
        self.group = group
        self.world, self.rank = group.size(), group.rank()
        self._sum_residual = [None] * len(self._fragments)  # parts were laid out for the old size

    def _options(self):
        return {"inner_steps": self.inner_steps, "codec": self.codec, "block_size": self.block_size,
                "fragments": len(self._fragments), "delayed": self.delayed,
                "outer": {k: v for k, v in self._outer.defaults.items() if k in ("lr", "momentum", "nesterov")},
                "shapes": [tuple(p.shape) for p in self._params]}

    def _share_state(self, newcomer):
        """Worker 0's state to the newcomers (the others keep their own progress)."""
        payload = [{"state": self.state_dict(), "options": self._options()} if self.rank == 0 else None]
        dist.broadcast_object_list(payload, group_src=0, group=self.group)
        theirs = payload[0]["options"]
        differ = next((f"option {key} is {mine!r} on worker {self.rank}, {theirs[key]!r} on worker 0"
                       for key, mine in self._options().items() if theirs[key] != mine), "")
        every = [None] * self.world  # every worker fails alike, before anything else is sent
        dist.all_gather_object(every, differ, group=self.group)
        bad = next((d for d in every if d), "")
        if bad:
            raise ValueError(f"DiLoCo.join: {bad}")
        if newcomer:
            self.load_state_dict(payload[0]["state"])
        if self.check_state:
            self._compare(self.state_hash(), f"admitting workers at outer step {self.outer_steps}")

    # ---- state: the joiner's copy, and the check ----

    def state_dict(self):
        return {"step_count": self.step_count, "outer_steps": self.outer_steps,
                "global": [g.clone() for g in self._global], "outer": self._outer.state_dict()}

    def load_state_dict(self, state):
        self.step_count = state["step_count"]
        self.outer_steps = state["outer_steps"]
        with torch.no_grad():
            for g, s in zip(self._global, state["global"]):
                g.copy_(s)
            for p, g in zip(self._params, self._global):
                p.copy_(g)
        self._outer.load_state_dict(state["outer"])
        self._snapshot = [self._flat(f) for f in range(len(self._fragments))]

    def state_hash(self):
        """A 63-bit hash of the shared state: outer parameters, momentum, step counts."""
        h = hashlib.blake2b(digest_size=8)
        h.update(f"{self.step_count} {self.outer_steps}".encode())
        for g in self._global:
            h.update(g.detach().contiguous().view(torch.uint8).numpy().tobytes())
            buf = self._outer.state.get(g, {}).get("momentum_buffer")
            if buf is not None:
                h.update(buf.contiguous().view(torch.uint8).numpy().tobytes())
        return int.from_bytes(h.digest(), "little") >> 1

    # ---- outer steps ----

    def _flat(self, f, tensors=None):
        """Fragment f of the model's parameters (or of `tensors`, e.g. the shared copy), flat."""
        tensors = self._params if tensors is None else tensors
        return torch.cat([tensors[i].detach().reshape(-1) for i in self._fragments[f]])

    def _unflat(self, f, flat, targets):
        offset = 0
        with torch.no_grad():
            for i in self._fragments[f]:
                n = targets[i].numel()
                targets[i].copy_(flat[offset:offset + n].view_as(targets[i]))
                offset += n

    def _sync(self, f):
        if not self.delayed:
            self._sync_now(f)
            return
        # Delayed: this fragment's progress since its last sync goes out now and is applied at
        # its next sync; meanwhile the worker continues from the shared parameters (with last
        # time's average applied) plus that progress.
        self._collect_checks(wait=False)
        local = self._flat(f)
        progress = local - self._snapshot[f]
        self._apply_pending(f)
        self._unflat(f, self._flat(f, self._global) + progress, self._params)
        self._snapshot[f] = self._flat(f)
        self._pending[f] = self._executor.submit(self._average, f, -progress)

    def _sync_now(self, f):
        pseudo = self._snapshot[f] - self._flat(f)
        self._outer_step(f, self._average(f, pseudo))
        self._unflat(f, self._flat(f, self._global), self._params)
        self._snapshot[f] = self._flat(f)

    def _drain(self):
        """Delayed: applies every averaging in flight and reports every state check."""
        for f in range(len(self._fragments)):
            self._apply_pending(f)
        self._collect_checks(wait=True)

    def _apply_pending(self, f):
        if self._pending[f] is not None:
            average = self._pending[f].result()
            self._pending[f] = None
            self._outer_step(f, average)

    def _outer_step(self, f, average):
        """The outer optimizer's step on fragment f with the averaged pseudo-gradient."""
        offset = 0
        for i in self._fragments[f]:
            n = self._global[i].numel()
            self._global[i].grad = average[offset:offset + n].view_as(self._global[i]).clone()
            offset += n
        self._outer.step()
        for i in self._fragments[f]:
            self._global[i].grad = None
        self.outer_steps += 1
        if not self.check_state:
            return
        if self._executor:  # compared on the averaging thread, reported at a later sync
            self._checks.append(self._executor.submit(self._compare, self.state_hash(),
                                                      f"outer step {self.outer_steps} (fragment {f})"))
        else:
            self._compare(self.state_hash(), f"outer step {self.outer_steps} (fragment {f})")

    def _collect_checks(self, wait):
        while self._checks and (wait or self._checks[0].done()):
            self._checks.pop(0).result()  # raises the mismatch

    def _compare(self, state_hash, when):
        mine = torch.tensor([state_hash], dtype=torch.int64)

        def gather():
            every = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
            dist.all_gather(every, mine, group=self.group)
            return every

        every = self._resilient(gather)
        values = [int(t.item()) for t in every]
        most = max(set(values), key=values.count)
        differ = [r for r, v in enumerate(values) if v != most]
        if differ:
            raise RuntimeError(f"DiLoCo: the shared state of worker(s) {differ} differs from the others' after "
                               f"{when}: hashes {values}")

    def _average(self, f, pseudo):
        """The average over the workers of `pseudo` (float32, flat). With a local group (a worker
        that is itself a DDP group of L ranks with equal parameters), local rank l averages the
        l-th L-th of the vector with its rank-aligned peers (`group`), so that every rank, and
        every NIC of a host, carries its share, and the host's ranks then gather the parts."""
        if self.local_group is None:
            return self._average_among_workers(f, pseudo)
        padded, part = _padded(pseudo, self.local_size)
        mine = self._average_among_workers(f, padded[self.local_rank * part:(self.local_rank + 1) * part])
        whole = torch.empty_like(padded)
        dist.all_gather_into_tensor(whole, mine.contiguous(), group=self.local_group)
        return whole[:pseudo.numel()]

    def _average_among_workers(self, f, pseudo):
        """The average over `group` of every worker's `pseudo` (float32, flat). Elastic: a
        failure (a worker died or froze) makes the survivors shrink the group and average again
        among themselves, so that the outer step is taken, without the lost workers."""
        attempt = (self._average_plain if self.codec == "none" else self._average_compressed)
        v = pseudo if self._residual[f] is None else pseudo + self._residual[f]
        return self._resilient(lambda: attempt(f, v))

    def _resilient(self, collective):
        """collective(); elastic: after a failure, on the survivors' shrunk group, until it is
        taken (shoal.torch.shrink raises if this worker was left out)."""
        while True:
            try:
                return collective()
            except RuntimeError:
                if not self.elastic:
                    raise
                from . import shrink
                self._set_group(shrink(self.group))
                self.shrinks += 1

    def _average_plain(self, f, v):
        buf = v.clone()
        self.bytes_sent += 2 * (self.world - 1) * buf.numel() * 4 // self.world
        dist.all_reduce(buf, group=self.group)
        return buf / self.world

    def _encode(self, v):
        """A float32 vector (a multiple of block_size long) as byte tensors, and back."""
        if self.codec in _FLOAT_CODECS:
            return [v.to(_FLOAT_CODECS[self.codec]).view(torch.uint8)]
        codes, scales = _quantize(v, self.codec, self.block_size)
        return [codes, scales.view(torch.uint8)]

    def _decode(self, payload):
        if self.codec in _FLOAT_CODECS:
            return payload[0].view(_FLOAT_CODECS[self.codec]).to(torch.float32)
        return _dequantize(payload[0], payload[1].view(torch.float32), self.codec, self.block_size)

    def _average_compressed(self, f, v):
        """Compressed with error feedback in two phases, so that no sum is taken in the codec:
        every worker's codes of each rank's part go to that rank (all_to_all), which decodes,
        sums in float32 and encodes the sum, then every part goes to everyone (all_gather):
        2(k-1)/k of the codes a worker, as a ring all_reduce. What the worker's encoding drops
        is added to its next pseudo-gradient, what the part's encoding drops to its next sum.
        `v`: the pseudo-gradient plus what the last encoding dropped."""
        n, k = v.numel(), self.world
        padded, part = _padded(v, k, self.block_size)  # a rank's part: whole blocks
        payload = self._encode(padded)
        residual = v - self._decode(payload)[:n]
        got = [torch.empty_like(t) for t in payload]
        for out, t in zip(got, payload):
            dist.all_to_all_single(out, t, group=self.group)
        total = torch.zeros(part, dtype=torch.float32)
        for r in range(k):
            total += self._decode([t.view(k, -1)[r] for t in got])
        if self._sum_residual[f] is not None:
            total += self._sum_residual[f]
        mine = self._encode(total)
        self._sum_residual[f] = total - self._decode(mine)
        every = [torch.empty(t.numel() * k, dtype=torch.uint8) for t in mine]
        for out, t in zip(every, mine):
            dist.all_gather_into_tensor(out, t, group=self.group)
        self.bytes_sent += 2 * (k - 1) * sum(t.numel() for t in mine)
        self._residual[f] = residual  # sent: from now on what the encoding dropped is owed
        average = torch.cat([self._decode([t.view(k, -1)[r] for t in every]) for r in range(k)])
        return average[:n] / k
