"""Point to point, receives from any source, subgroups, async work and futures, wait timeouts."""

import datetime
import time

import pytest
import torch
import torch.distributed as dist

import shoal.torch
from ranks import run_ranks


def test_registered():
    assert shoal.torch.is_registered()
    assert dist.Backend("shoal") == "shoal"


def _send_recv(rank, world):
    # a ring of blocking send/recv (even ranks send first), then isend/irecv with tags, many dtypes
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for dtype in [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool, torch.complex64]:
        out = torch.full((7,), rank % 2).to(dtype)
        inp = torch.zeros(7, dtype=dtype)
        if rank % 2 == 0:
            dist.send(out, nxt)
            dist.recv(inp, prv)
        else:
            dist.recv(inp, prv)
            dist.send(out, nxt)
        assert torch.equal(inp, torch.full((7,), prv % 2).to(dtype)), dtype
    reqs = []
    buf = torch.zeros(2, 5)
    view = buf.t()  # non-contiguous receive buffer
    reqs.append(dist.isend(torch.arange(10.).reshape(5, 2) + rank, nxt, tag=3))
    reqs.append(dist.irecv(view, prv, tag=3))
    for r in reqs:
        r.wait()
    assert torch.equal(view, torch.arange(10.).reshape(5, 2) + prv)
    ops = [dist.P2POp(dist.isend, torch.full((3,), float(rank)), nxt),
           dist.P2POp(dist.irecv, buf2 := torch.zeros(3), prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert buf2.tolist() == [float(prv)] * 3
    return True


@pytest.mark.parametrize("world", [2, 3])
def test_send_recv(world):
    run_ranks(_send_recv, world)


def _any_source(rank, world):
    # every other rank sends two messages to rank 0, which receives them from any source
    if rank == 0:
        seen = []
        for _ in range(2 * (world - 1)):
            t = torch.zeros(4, dtype=torch.int32)
            src = dist.recv(t)
            assert t.tolist() == [src] * 4
            seen.append(src)
        assert sorted(seen) == sorted(list(range(1, world)) * 2)
        dist.barrier()
        # an ordinary recv from a named rank still matches after any-source receives
        t = torch.zeros(1)
        dist.recv(t, src=1)
        assert t.item() == 42.0
    else:
        for _ in range(2):
            dist.send(torch.full((4,), rank, dtype=torch.int32), 0)
        dist.barrier()  # the next send must not be taken by an any-source receive
        if rank == 1:
            dist.send(torch.tensor([42.0]), 0)
    return True


def test_recv_any_source():
    run_ranks(_any_source, 3)


def _groups(rank, world):
    even = dist.new_group([0, 2])
    odd = dist.new_group([1, 3])
    pair = dist.new_group([1, 2])
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=even if rank % 2 == 0 else odd)
    assert t.item() == (2.0 if rank % 2 == 0 else 4.0)
    if rank in (1, 2):
        assert dist.get_rank(pair) == rank - 1 and dist.get_world_size(pair) == 2
        b = torch.tensor([float(rank)])
        dist.broadcast(b, src=2, group=pair)  # src is a global rank
        assert b.item() == 2.0
        outs = [torch.zeros(1), torch.zeros(1)]
        dist.all_gather(outs, torch.tensor([float(rank)]), group=pair)
        assert [o.item() for o in outs] == [1.0, 2.0]
        if rank == 1:
            dist.send(torch.tensor([7.0]), dst=2, group=pair)
        else:
            r = torch.zeros(1)
            dist.recv(r, src=1, group=pair)
            assert r.item() == 7.0
    assert dist.get_backend(even if rank % 2 == 0 else odd) == "shoal"
    dist.barrier()
    return True


def test_new_group():
    run_ranks(_groups, 4)


def _async_futures(rank, world):
    tensors = [torch.full((1000,), float(rank + i)) for i in range(8)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    futs = [w.get_future().then(lambda f: f.value()[0] * 2) for w in works]
    for i, (w, f) in enumerate(zip(works, futs)):
        w.wait()
        assert w.is_completed() and w.is_success()
        want = sum(float(r + i) for r in range(world))
        assert tensors[i][0].item() == want
        assert torch.equal(f.wait(), torch.full((1000,), 2 * want))
    # the future's value is the output tensor list (what DDP's communication hooks read)
    t = torch.ones(3)
    fut = dist.all_reduce(t, async_op=True).get_future()
    out = fut.wait()
    assert isinstance(out, list) and torch.equal(out[0], torch.full((3,), float(world)))
    w = dist.barrier(async_op=True)
    w.wait()
    return True


def test_async_work_and_futures():
    run_ranks(_async_futures, 2)


def _wait_timeout(rank, world):
    t = torch.ones(16)
    if rank == 1:
        time.sleep(2.0)  # join late: rank 0's first wait times out, its second succeeds
        dist.all_reduce(t)
        return True
    work = dist.all_reduce(t, async_op=True)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="did not complete within the wait's 300 ms timeout"):
        work.wait(timeout=datetime.timedelta(milliseconds=300))
    elapsed = time.monotonic() - start
    assert 0.25 < elapsed < 1.5, elapsed
    assert not work.is_completed()
    work.wait()
    assert work.is_success() and t.tolist() == [2.0] * 16
    return True


def test_wait_timeout():
    run_ranks(_wait_timeout, 2)


def _tags_are_queues(rank, world):
    # as in gloo: tags select a queue, so rank 1 may take tag 2 before tag 1; an any-source
    # receive of tag 5 leaves tag 6 alone
    if rank == 0:
        works = [dist.isend(torch.full((n,), float(tag)), 1, tag=tag)
                 for tag, n in [(1, 3), (2, 100000), (6, 2), (5, 4)]]
        for w in works:
            w.wait()
        return True
    big, small = torch.zeros(100000), torch.zeros(3)
    dist.recv(big, 0, tag=2)
    dist.recv(small, 0, tag=1)
    any5 = torch.zeros(4)
    src = dist.recv(any5, tag=5)
    six = torch.zeros(2)
    dist.recv(six, 0, tag=6)
    assert src == 0 and torch.equal(big, torch.full((100000,), 2.0)) and torch.equal(small, torch.full((3,), 1.0))
    assert torch.equal(any5, torch.full((4,), 5.0)) and torch.equal(six, torch.full((2,), 6.0))
    return True


def test_tags_select_queues():
    run_ranks(_tags_are_queues, 2)


def _later_receive_completes_first(rank, world):
    # rank 0 sends tag 1 only after rank 1 answers tag 2's message: rank 1's Work for tag 2
    # completes while its earlier receive of tag 1 still waits (no completion in issue order)
    if rank == 0:
        dist.send(torch.full((4,), 2.0), 1, tag=2)
        answer = torch.zeros(1)
        dist.recv(answer, 1, tag=3)
        dist.send(torch.full((4,), 1.0) * answer, 1, tag=1)
        return True
    first, second = torch.zeros(4), torch.zeros(4)
    w1 = dist.irecv(first, 0, tag=1)
    w2 = dist.irecv(second, 0, tag=2)
    fut2 = w2.get_future()
    assert w2.wait(datetime.timedelta(seconds=30))
    assert not w1.is_completed()
    dist.send(torch.tensor([7.0]), 0, tag=3)
    w1.wait()
    assert torch.equal(fut2.value()[0], torch.full((4,), 2.0))
    assert torch.equal(first, torch.full((4,), 7.0))
    return True


def test_later_receive_completes_before_earlier():
    run_ranks(_later_receive_completes_first, 2)
