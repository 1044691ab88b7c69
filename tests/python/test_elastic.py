"""Elastic jobs: shoal.torch.shrink() after a failure, grow()/join() to admit new processes."""

import datetime
import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

import ranks
import shoal.torch
from ranks import run_ranks

_keep = []  # stores a late process never destroys (see _open_job_store)


def _open_job_store():
    """The job's FileStore, opened by a process that did not call init_process_group. Kept
    alive until the process exits (forked ranks leave through os._exit, without destructors):
    a FileStore's destructor counts itself towards deleting the file, which the job's own
    ranks still use."""
    store = dist.FileStore(ranks.store_path, 1 << 20)
    _keep.append(store)
    return store


def _kill_after_everyone_finished(rank, world, victim):
    """The victim SIGKILLs itself once every other rank has its all_reduce result (a rank that
    has its own result may still owe data to others: dying then fails their call too)."""
    store = dist.distributed_c10d._get_default_store()
    if rank != victim:
        store.set(f"elastic_test/finished/{rank}", "1")
    else:
        store.wait([f"elastic_test/finished/{r}" for r in range(world) if r != victim],
                   datetime.timedelta(seconds=20))
        os.kill(os.getpid(), signal.SIGKILL)


def _survive_and_shrink(rank, world):
    t = torch.ones(1 << 12)
    dist.all_reduce(t)
    assert t[0].item() == world
    old = dist.distributed_c10d._get_default_group()
    _kill_after_everyone_finished(rank, world, world - 1)
    with pytest.raises(RuntimeError, match=f"rank {world - 1}"):
        for _ in range(100):  # the first calls may complete before the death is noticed
            dist.all_reduce(t)

    start = time.monotonic()
    pg = shoal.torch.shrink()
    shrink_s = time.monotonic() - start
    assert pg.size() == world - 1
    assert pg.rank() == rank  # survivors 0..world-2 keep their order
    assert shoal.torch.describe(pg).startswith(f"rank {rank} of {world - 1} ")

    # the process group's own methods, and torch.distributed's unrooted collectives with group=pg
    x = torch.full((5,), float(rank + 1))
    pg.allreduce([x]).wait()
    expected = float(sum(r + 1 for r in range(world - 1)))
    assert x.tolist() == [expected] * 5
    y = torch.arange(6, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(y, group=pg)
    assert y.tolist() == [i * expected for i in range(6)]
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(world - 1)]
    dist.all_gather(gathered, torch.tensor([rank, 10 * rank]), group=pg)
    assert [g.tolist() for g in gathered] == [[r, 10 * r] for r in range(world - 1)]
    b = torch.full((3,), float(rank))
    pg.broadcast(b, 1).wait()  # rooted collectives: the group's methods take group ranks
    assert b.tolist() == [1.0] * 3
    dist.barrier(group=pg)
    # The group is in torch's tables: rooted and point-to-point calls with group=pg translate
    # global ranks, as for any group.
    assert dist.get_rank(pg) == rank and dist.get_process_group_ranks(pg) == list(range(world - 1))
    c = torch.full((2,), float(rank))
    dist.broadcast(c, src=world - 2, group=pg)
    assert c.tolist() == [float(world - 2)] * 2
    r = torch.full((2,), float(rank + 1))
    dist.reduce(r, dst=0, group=pg)
    if rank == 0:
        assert r.tolist() == [expected] * 2
    peer = torch.zeros(1)
    if rank == 0:
        dist.send(torch.tensor([7.0]), dst=1, group=pg)
    elif rank == 1:
        dist.recv(peer, src=0, group=pg)
        assert peer.item() == 7.0

    # DDP on the shrunk group: gradients are averaged over the 3 survivors
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
    ddp(torch.full((1, 2), float(rank + 1))).sum().backward()
    assert model.weight.grad.tolist() == [[expected / (world - 1)] * 2]

    del ddp, model
    del pg  # the new group goes first...
    start = time.monotonic()
    dist.destroy_process_group()  # ...then the broken old one, without hanging
    destroy_s = time.monotonic() - start
    assert destroy_s < 10, f"destroying the broken group took {destroy_s:.1f} s"
    del old
    return shrink_s, destroy_s


def test_shrink_after_a_killed_rank():
    world = 4
    results = run_ranks(_survive_and_shrink, world, timeout_s=20, expect_exit=(world - 1,))
    assert set(results) == set(range(world - 1))
    for rank, (shrink_s, destroy_s) in results.items():
        assert shrink_s < 10, f"rank {rank}: shrink took {shrink_s:.1f} s"


def _grow_or_join(rank, world, name):
    if rank < world:  # the job's ranks
        t = torch.ones(4)
        dist.all_reduce(t)
        assert t.tolist() == [float(world)] * 4
        pg = shoal.torch.grow(1, name)
    else:  # the new process
        assert not dist.is_initialized()
        store = _open_job_store()
        pg = shoal.torch.join(store, name, timeout=datetime.timedelta(seconds=20))
    size = world + 1
    assert pg.size() == size
    assert pg.rank() == rank  # old ranks keep their numbers, the joiner is rank `world`

    x = torch.full((7,), float(rank + 1))
    dist.all_reduce(x, group=pg)
    expected = float(sum(r + 1 for r in range(size)))
    assert x.tolist() == [expected] * 7
    y = torch.full((2,), float(rank))
    pg.allreduce([y]).wait()
    assert y.tolist() == [float(sum(range(size)))] * 2
    gathered = [torch.zeros(1) for _ in range(size)]
    dist.all_gather(gathered, torch.tensor([rank * 1.5]), group=pg)
    assert [g.item() for g in gathered] == [r * 1.5 for r in range(size)]
    b = torch.full((3,), -1.0)
    if rank == world:
        b.fill_(42.0)
    pg.broadcast(b, world).wait()  # from the joiner
    assert b.tolist() == [42.0] * 3
    # In torch's tables: the joiner's default group is the grown one; the job's ranks keep theirs.
    assert dist.get_rank(pg) == rank
    c = torch.full((2,), -1.0)
    if rank == world:
        assert dist.get_rank() == world and dist.get_world_size() == size
        c.fill_(5.0)
    dist.broadcast(c, src=world, group=pg)
    assert c.tolist() == [5.0] * 2
    out = [torch.zeros(1) for _ in range(size)] if rank == 0 else None
    dist.gather(torch.tensor([float(rank)]), out, dst=0, group=pg)
    if rank == 0:
        assert [o.item() for o in out] == [float(r) for r in range(size)]
    dist.destroy_process_group(pg)

    # The job's ranks keep the FileStore until the joiner is done with it.
    done = "elastic_test/joiner_done"
    if rank == world:
        store.set(done, "1")
    else:
        _open_job_store().wait([done], datetime.timedelta(seconds=20))
    return True


def test_grow_admits_a_new_process():
    results = run_ranks(_grow_or_join, 2, "grow-test", timeout_s=20, late=1)
    assert set(results) == {0, 1, 2}


def _shrink_past_a_stuck_operation(rank, world):
    """An operation queued on the old group that no peer joins does not hold shrink up, and the
    old group can still be destroyed afterwards."""
    stuck = dist.all_reduce(torch.ones(16), async_op=True) if rank == 0 else None
    start = time.monotonic()
    pg = shoal.torch.shrink()  # nobody died: the same ranks, in a new group
    shrink_s = time.monotonic() - start
    assert (pg.size(), pg.rank()) == (world, rank)
    x = torch.full((4,), float(rank + 1))
    dist.all_reduce(x, group=pg)
    assert x.tolist() == [float(sum(range(1, world + 1)))] * 4
    if stuck is not None:  # still pending, or failed once rank 1 left the old group: never a success
        assert not stuck.is_success()
    del pg
    start = time.monotonic()
    dist.destroy_process_group()
    destroy_s = time.monotonic() - start
    assert destroy_s < 12, f"destroying the old group took {destroy_s:.1f} s"
    return shrink_s, destroy_s


def test_shrink_does_not_wait_for_a_stuck_operation():
    results = run_ranks(_shrink_past_a_stuck_operation, 2, timeout_s=20)
    for rank, (shrink_s, _) in results.items():
        assert shrink_s < 10, f"rank {rank}: shrink took {shrink_s:.1f} s"


def _replace_a_killed_rank(rank, world):
    """The elastic cycle: a rank dies, the survivors shrink, then grow back with a new process."""
    if rank == world:  # the replacement, started with the job
        pg = shoal.torch.join(_open_job_store(), "replacement", timeout=datetime.timedelta(seconds=20))
    else:
        t = torch.ones(8)
        dist.all_reduce(t)
        _kill_after_everyone_finished(rank, world, 1)  # not the last: survivors 0, 2, 3 become 0, 1, 2
        with pytest.raises(RuntimeError, match="rank 1"):
            for _ in range(100):
                dist.all_reduce(t)
        small = shoal.torch.shrink()
        assert (small.size(), small.rank()) == (world - 1, [0, None, 1, 2][rank])
        pg = shoal.torch.grow(1, "replacement", group=small)
        del small
    assert pg.size() == world
    x = torch.full((3,), float(pg.rank() + 1))
    dist.all_reduce(x, group=pg)
    assert x.tolist() == [float(sum(range(1, world + 1)))] * 3
    return pg.rank()


def test_shrink_then_grow_replaces_a_killed_rank():
    world = 4
    results = run_ranks(_replace_a_killed_rank, world, timeout_s=20, expect_exit=(1,), late=1)
    # survivors keep their order, the new process takes the last rank
    assert results == {0: 0, 2: 1, 3: 2, 4: 3}


def _bad_groups(rank, world):
    with pytest.raises(TypeError):
        shoal.torch.shrink(object())
    gloo = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=5))
    with pytest.raises(TypeError, match="not a shoal process group"):
        shoal.torch.shrink(gloo)
    with pytest.raises(TypeError, match="not a shoal process group"):
        shoal.torch.grow(1, "x", group=gloo)
    with pytest.raises(TypeError, match="Store"):
        shoal.torch.join("not a store", "x")
    # shoal's errors arrive as RuntimeError with its message
    with pytest.raises(RuntimeError, match="empty"):
        shoal.torch.grow(1, "")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="join .nobody-grows.: the job did not call grow"):
        shoal.torch.join(dist.distributed_c10d._get_default_store(), "nobody-grows",
                         timeout=datetime.timedelta(seconds=1))
    assert time.monotonic() - start < 10
    t = torch.ones(2)
    dist.all_reduce(t)  # the world is still usable
    assert t.tolist() == [float(world)] * 2
    return True


def test_bad_groups_and_errors():
    run_ranks(_bad_groups, 1, timeout_s=20)
