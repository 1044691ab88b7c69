"""shoal.torch.diloco against a reference written apart here (plain tensors, every worker
simulated in one process, no process group): the outer step, streaming fragments, the delayed
outer step; error feedback conserving the sum; the state check; bad options."""

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from ranks import run_ranks
from shoal.torch.diloco import DiLoCo

INNER_LR, OUTER_LR, MOMENTUM = 0.05, 0.7, 0.9


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def _big_model():
    """4.2M parameters: an outer all_reduce of 17 MB, which takes milliseconds, long enough for
    a worker to die while it is in flight."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 2048), torch.nn.Tanh(), torch.nn.Linear(2048, 2048),
                               torch.nn.Tanh(), torch.nn.Linear(2048, 3))


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)


def _inner_step(model, opt, rank, step):
    x, y = _batch(rank, step)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def _fragments_of(params, fragments):
    """The split DiLoCo documents: consecutive tensors, about equal sizes, one tensor at least."""
    total, out, start, acc = sum(p.numel() for p in params), [], 0, 0
    for f in range(fragments):
        end = start + 1
        acc += params[start].numel()
        while end < len(params) - (fragments - f - 1) and acc < total * (f + 1) / fragments:
            acc += params[end].numel()
            end += 1
        out.append(list(range(start, len(params) if f == fragments - 1 else end)))
        start = out[-1][-1] + 1
    return out


def _reference(world, steps, H, fragments=1, delayed=False, dead=None, dead_from=None, joiner=None,
               join_at=None, model=_model):
    """Every worker's model in this process; the outer step by hand: Nesterov SGD on the average
    of (shared - local), buf = m*buf + g, shared -= lr*(g + m*buf). Worker `dead` takes no part
    from step `dead_from` on; worker `joiner` none before step `join_at`, where it starts from the
    shared parameters."""

    def takes_part(w, s):
        return (w != dead or s < dead_from) and (w != joiner or s >= join_at)

    models = [model() for _ in range(world)]
    opts = [torch.optim.SGD(m.parameters(), lr=INNER_LR) for m in models]
    params = [list(m.parameters()) for m in models]
    shared = [p.detach().clone() for p in params[0]]
    momentum = [torch.zeros_like(p) for p in shared]
    frags = _fragments_of(params[0], fragments)
    snap = [[p.detach().clone() for p in params[w]] for w in range(world)]
    pending = [None] * fragments

    def outer(f, avg):
        for i in frags[f]:
            momentum[i] = MOMENTUM * momentum[i] + avg[i]
            shared[i] = shared[i] - OUTER_LR * (avg[i] + MOMENTUM * momentum[i])

    def sync(f, now):
        progress = {i: [params[w][i].detach() - snap[w][i] for w in range(world)] for i in frags[f]}
        live = [w for w in range(world) if takes_part(w, step)]
        avg = {i: sum(-progress[i][w] for w in live) / len(live) for i in frags[f]}
        if now:
            outer(f, avg)
        else:
            if pending[f] is not None:
                outer(f, pending[f])
            pending[f] = avg
        for w in range(world):
            with torch.no_grad():
                for i in frags[f]:
                    params[w][i].copy_(shared[i] if now else shared[i] + progress[i][w])
                    snap[w][i] = params[w][i].detach().clone()

    step = 0
    for s in range(1, steps + 1):
        step = s
        if joiner is not None and s == join_at:
            with torch.no_grad():
                for i, p in enumerate(params[joiner]):
                    p.copy_(shared[i])
                    snap[joiner][i] = p.detach().clone()
        for w in range(world):
            if takes_part(w, s):
                _inner_step(models[w], opts[w], w, s)
        for f in range(fragments):
            offset = (f + 1) * H // fragments
            if s >= offset and (s - offset) % H == 0:
                sync(f, not delayed)
    for f in range(fragments):  # finish()
        if pending[f] is not None:
            outer(f, pending[f])
        sync(f, True)
    return [p.detach() for p in params[0]]


def _killed(rank, world, steps, H, victim, at, where):
    """Worker `victim` dies at step `at`: before its inner step (where="inner": the others are
    then in the outer all_reduce, which it never enters), or inside the outer all_reduce
    (where="outer": its part posted, the transfer under way while the others are in it too)."""
    model = (_big_model if where == "outer" else _model)()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    diloco = DiLoCo(model, inner_steps=H, outer_lr=OUTER_LR, outer_momentum=MOMENTUM, elastic=True)
    armed = False  # the outer all_reduce of step `at`
    if where == "outer":
        import ranks
        entered = os.path.join(os.path.dirname(ranks.store_path), "entered.{}")
        real = dist.all_reduce

        def all_reduce(tensor, *args, **kwargs):
            if not armed:
                return real(tensor, *args, **kwargs)
            if rank != victim:
                open(entered.format(rank), "w").close()
                return real(tensor, *args, **kwargs)
            while not all(os.path.exists(entered.format(r)) for r in range(world) if r != victim):
                time.sleep(0.001)  # the others are inside this all_reduce
            work = real(tensor, *args, **{**kwargs, "async_op": True})
            time.sleep(0.002)
            if work.is_completed():  # too late: the test would not test what it says
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)

        dist.all_reduce = all_reduce  # in this rank's process only (forked)

    for s in range(1, steps + 1):
        if rank == victim and s == at and where == "inner":
            os.kill(os.getpid(), signal.SIGKILL)
        armed = s == at
        _inner_step(model, opt, rank, s)
        diloco.step()
    diloco.finish()
    return [p.detach().tolist() for p in model.parameters()], diloco.outer_steps, diloco.state_hash(), \
        diloco.shrinks, diloco.world


@pytest.mark.parametrize("where", ["inner", "outer"])
def test_a_worker_killed_during_training_leaves_the_others_to_take_the_outer_step_without_it(where):
    """Killed before its inner step, or inside the outer all_reduce: every survivor's outer step
    shrinks the group once and equals the reference's without the dead worker."""
    world, steps, H, victim, at = 3, 10, 3, 2, 6  # dies at step 6, when outer step 2 averages
    got = run_ranks(_killed, world, steps, H, victim, at, where, timeout_s=90, expect_exit=(victim,))
    assert sorted(got) == [0, 1]
    want = _reference(world, steps, H, dead=victim, dead_from=at, model=_big_model if where == "outer" else _model)
    assert got[0][2] == got[1][2], "the survivors share one state"
    for r in (0, 1):
        params, outer_steps, _, shrinks, size = got[r]
        assert (outer_steps, shrinks, size) == (steps // H + 1, 1, 2), "no outer step lost"
        for p, q in zip(params, want):
            torch.testing.assert_close(torch.tensor(p), q, rtol=1e-5, atol=1e-6)


_keep = []  # the joiner's store: never destroyed (its destructor would count towards deleting the file)


def _join_midway(rank, world, steps, H, at, joiner_options):
    import ranks
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    options = dict(inner_steps=H, outer_lr=OUTER_LR, outer_momentum=MOMENTUM)
    if rank < world:
        diloco = DiLoCo(model, elastic=True, **options)
        for s in range(1, at):
            _inner_step(model, opt, rank, s)
            diloco.step()
        diloco.admit(1, "diloco-join")
    else:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)  # other weights than the workers': the state must come from them
        _keep.append(dist.FileStore(ranks.store_path, 1 << 20))
        diloco = DiLoCo.join(model, _keep[-1], "diloco-join", **dict(options, **joiner_options))
        assert diloco.step_count == at - 1
    for s in range(at, steps + 1):
        _inner_step(model, opt, rank, s)
        diloco.step()
    diloco.finish()
    return [p.detach().tolist() for p in model.parameters()], diloco.outer_steps, diloco.state_hash(), diloco.world


def test_a_worker_joins_between_outer_steps_with_the_shared_state():
    world, steps, H, at = 2, 10, 3, 5  # joins after step 4, between outer steps 1 and 2
    got = run_ranks(_join_midway, world, steps, H, at, {}, timeout_s=60, late=1)
    want = _reference(world + 1, steps, H, joiner=world, join_at=at)
    assert len({got[r][2] for r in range(world + 1)}) == 1, "one shared state, the joiner's too"
    for r in range(world + 1):
        params, outer_steps, _, size = got[r]
        assert (outer_steps, size) == (steps // H + 1, world + 1)
        for p, q in zip(params, want):
            torch.testing.assert_close(torch.tensor(p), q, rtol=1e-5, atol=1e-6)


def _join_with_other_options(rank, world):
    try:
        _join_midway(rank, world, 6, 3, 2, {"inner_steps": 4})
    except ValueError as e:
        return str(e)
    return "joined"


def test_a_joiner_with_other_options_fails_on_every_worker():
    got = run_ranks(_join_with_other_options, 2, timeout_s=60, late=1)
    assert set(got) == {0, 1, 2}
    for r in got:
        assert "option inner_steps is 4 on worker 2, 3 on worker 0" in got[r], got[r]


def _inner_groups(rank, world, steps, H, codec):
    """Two hosts of two ranks: a DDP group per host (gradients averaged inside it by hand, as
    DDP does), DiLoCo across hosts among rank-aligned peers."""
    hosts = [[0, 1], [2, 3]]
    local = [dist.new_group(h) for h in hosts][rank // 2]
    aligned = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    diloco = DiLoCo(model, inner_steps=H, outer_lr=OUTER_LR, outer_momentum=MOMENTUM, codec=codec,
                    group=aligned, local_group=local)
    for s in range(1, steps + 1):
        x, y = _batch(rank, s)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, group=local)
            p.grad /= 2
        opt.step()
        diloco.step()
    diloco.finish()
    return [p.detach().tolist() for p in model.parameters()], diloco.bytes_sent


def _reference_inner_groups(steps, H):
    """Worker w = host w: its gradient is the mean of ranks 2w and 2w+1's."""
    models = [_model() for _ in range(2)]
    opts = [torch.optim.SGD(m.parameters(), lr=INNER_LR) for m in models]
    shared = [p.detach().clone() for p in models[0].parameters()]
    momentum = [torch.zeros_like(p) for p in shared]
    for s in range(1, steps + 1):
        for w in range(2):
            opts[w].zero_grad()
            grads = []
            for r in (2 * w, 2 * w + 1):
                x, y = _batch(r, s)
                g = torch.autograd.grad(torch.nn.functional.mse_loss(models[w](x), y), list(models[w].parameters()))
                grads.append(g)
            for p, g0, g1 in zip(models[w].parameters(), *grads):
                p.grad = (g0 + g1) / 2
            opts[w].step()
        if s % H == 0 or s == steps:  # an outer step, or finish()
            avg = [sum(shared[i] - list(models[w].parameters())[i].detach() for w in range(2)) / 2
                   for i in range(len(shared))]
            for i in range(len(shared)):
                momentum[i] = MOMENTUM * momentum[i] + avg[i]
                shared[i] = shared[i] - OUTER_LR * (avg[i] + MOMENTUM * momentum[i])
            for m in models:
                with torch.no_grad():
                    for p, q in zip(m.parameters(), shared):
                        p.copy_(q)
    return shared


def test_workers_that_are_groups_average_their_shares_across_hosts():
    steps, H = 8, 3  # outer steps at 3 and 6, then finish() at 8
    got = run_ranks(_inner_groups, 4, steps, H, "none", timeout_s=60)
    want = _reference_inner_groups(steps, H)
    for r in range(4):
        for p, q in zip(got[r][0], want):
            torch.testing.assert_close(torch.tensor(p), q, rtol=1e-5, atol=1e-6)
    n = sum(p.numel() for p in _model().parameters())
    # Each rank sends its half of the vector across hosts: a 2-worker all_reduce of n/2 floats.
    assert got[0][1] == 3 * (2 * (2 - 1) * ((n + 1) // 2) * 4 // 2)


def test_elastic_needs_a_shoal_group():
    def gloo_rank(rank, world):
        with pytest.raises(TypeError, match="shoal"):
            DiLoCo(_model(), inner_steps=2, elastic=True)
        # gloo may finish connecting on one rank before the other: a rank that left at once
        # would close the pair while its peer is still in init_process_group.
        dist.barrier()
        return True
    assert run_ranks(gloo_rank, 2, backend="gloo") == {0: True, 1: True}


def _train(rank, world, steps, H, options):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    diloco = DiLoCo(model, inner_steps=H, outer_lr=OUTER_LR, outer_momentum=MOMENTUM, **options)
    for s in range(1, steps + 1):
        _inner_step(model, opt, rank, s)
        diloco.step()
    diloco.finish()
    # (lists: tensors through the ranks' queue would need their shared memory after exit)
    return [p.detach().tolist() for p in model.parameters()], diloco.outer_steps, diloco.state_hash()


@pytest.mark.parametrize("world,fragments,delayed", [(2, 1, False), (3, 1, False), (3, 3, False),
                                                     (2, 1, True), (3, 2, True)])
def test_outer_steps_match_the_reference(world, fragments, delayed):
    steps, H = 11, 4
    got = run_ranks(_train, world, steps, H, {"fragments": fragments, "delayed": delayed}, timeout_s=60)
    want = _reference(world, steps, H, fragments, delayed)
    hashes = {got[r][2] for r in range(world)}
    assert len(hashes) == 1, "every worker ends with the same shared state"
    offsets = [(f + 1) * H // fragments for f in range(fragments)]
    syncs = sum(1 for off in offsets for s in range(1, steps + 1) if s >= off and (s - off) % H == 0)
    for r in range(world):
        params, outer_steps, _ = got[r]
        assert outer_steps == syncs + fragments  # finish() adds one a fragment
        for p, q in zip(params, want):
            torch.testing.assert_close(torch.tensor(p), q, rtol=1e-5, atol=1e-6)


def test_a_fragmented_outer_step_equals_the_whole_one_where_fragments_sync_together():
    # H = 1 with 2 fragments: both are due at every step, so each step is the unfragmented one.
    steps = 5
    whole = run_ranks(_train, 2, steps, 1, {"fragments": 1}, timeout_s=60)
    split = run_ranks(_train, 2, steps, 1, {"fragments": 2}, timeout_s=60)
    for p, q in zip(whole[0][0], split[0][0]):
        torch.testing.assert_close(torch.tensor(p), torch.tensor(q), rtol=1e-6, atol=1e-7)


def _conserve(rank, world, codec):
    model = torch.nn.Linear(300, 7)  # 2,107 parameters: parts with padding
    diloco = DiLoCo(model, inner_steps=1, codec=codec, block_size=64, check_state=False)
    n = sum(p.numel() for p in model.parameters())
    sent, true = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for t in range(6):
        vs = [torch.randn(n, generator=torch.Generator().manual_seed(100 * t + w)) * (1 + t) for w in range(world)]
        sent += diloco._average(0, vs[rank]).double()
        true += sum(v.double() for v in vs) / world
    # What is not yet delivered: every worker's residual and every part's sum residual.
    residuals = [torch.zeros(n) for _ in range(world)]
    dist.all_gather(residuals, diloco._residual[0])
    part = diloco._sum_residual[0]
    parts = [torch.zeros_like(part) for _ in range(world)]
    dist.all_gather(parts, part)
    owed = (sum(r.double() for r in residuals) + torch.cat(parts)[:n].double()) / world
    rel = ((sent + owed - true).abs().max() / true.abs().max()).item()
    plain = ((sent - true).abs().max() / true.abs().max()).item()
    return rel, plain, diloco.bytes_sent


@pytest.mark.parametrize("codec", ["bf16", "fp16", "int8", "int4"])
def test_error_feedback_conserves_the_sum(codec):
    got = run_ranks(_conserve, 3, codec, timeout_s=60)
    world, n, steps, part = 3, 2107, 6, 704  # a part: 2,107 / 3 rounded up to blocks of 64
    code = {"bf16": 2 * part, "fp16": 2 * part, "int8": part + part // 64 * 4, "int4": part // 2 + part // 64 * 4}
    float32 = steps * 2 * (world - 1) / world * n * 4  # a ring all_reduce of float32
    for rank, (rel, plain, sent) in got.items():
        assert rel < 1e-5, f"rank {rank}: delivered + owed differs from the true sum by {rel:.2e}"
        assert plain > 1e-6, "the codec drops something (else the check proves nothing)"
        assert sent == steps * 2 * (world - 1) * code[codec]
        assert sent < {"bf16": 0.52, "fp16": 0.52, "int8": 0.28, "int4": 0.16}[codec] * float32


def _compressed_training(rank, world, codec):
    params, _, state_hash = _train(rank, world, 12, 4, {"codec": codec})
    return params, state_hash


@pytest.mark.parametrize("codec", ["fp16", "int8", "int4"])
def test_compressed_training_stays_close_to_the_uncompressed_and_equal_on_every_worker(codec):
    got = run_ranks(_compressed_training, 2, codec, timeout_s=60)
    want = _reference(2, 12, 4)
    assert got[0][1] == got[1][1]
    err = max((torch.tensor(p) - q).abs().max().item() for p, q in zip(got[0][0], want))
    scale = max(q.abs().max().item() for q in want)
    assert err < {"fp16": 1e-3, "int8": 2e-2, "int4": 2e-1}[codec] * scale


def _diverge(rank, world):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    diloco = DiLoCo(model, inner_steps=2)
    _inner_step(model, opt, rank, 1)
    diloco.step()
    if rank == 1:
        with torch.no_grad():
            diloco._global[0][0, 0] += 1  # a worker whose shared copy went wrong
    _inner_step(model, opt, rank, 2)
    with pytest.raises(RuntimeError, match=r"worker\(s\) \[1\] differs"):
        diloco.step()
    return True


def test_a_worker_whose_state_differs_is_named_on_every_worker():
    assert run_ranks(_diverge, 3, timeout_s=60) == {0: True, 1: True, 2: True}


def _copy_state(rank, world):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    diloco = DiLoCo(model, inner_steps=2)
    for s in range(1, 5):  # two outer steps: momentum in the state
        _inner_step(model, opt, rank, s)
        diloco.step()
    state = [diloco.state_dict() if rank == 0 else None]
    dist.broadcast_object_list(state, src=0)
    fresh = DiLoCo(_model(), inner_steps=2, check_state=False)
    fresh.load_state_dict(state[0])
    hashes = [None] * world
    dist.all_gather_object(hashes, fresh.state_hash())
    return hashes, diloco.state_hash()


def test_a_state_copied_from_a_worker_hashes_equal():
    got = run_ranks(_copy_state, 3, timeout_s=60)
    for r in range(3):
        assert set(got[r][0]) == {got[0][1]}


@pytest.mark.parametrize("kwargs,message", [
    ({"inner_steps": 0}, "inner_steps must be an integer >= 1"),
    ({"inner_steps": 2.5}, "inner_steps must be an integer >= 1"),
    ({"inner_steps": 4, "codec": "zip"}, "unknown codec 'zip'"),
    ({"inner_steps": 4, "fragments": 5}, "5 fragments for 4 parameter tensors"),
    ({"inner_steps": 4, "fragments": 0}, "fragments must be an integer >= 1"),
    ({"inner_steps": 4, "block_size": 3}, "block_size must be an even integer"),
    ({"inner_steps": 4, "outer_momentum": 1.0}, "outer_momentum must be in"),
])
def test_bad_options_are_value_errors_before_any_communication(kwargs, message):
    assert not dist.is_initialized()  # no group: anything past the checks would fail otherwise
    with pytest.raises(ValueError, match=message):
        DiLoCo(_model(), **kwargs)
