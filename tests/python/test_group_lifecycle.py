"""A group's life in torch 2.x: split_group through Communicator::split, shrink_group with a
live excluded rank, batch_isend_irecv as one coalesced batch, pg_options (shoal.torch.Options),
abort with work in flight (shutdown's: test_failures.py). Expected values come from the ranks' inputs alone."""

import datetime
import time

import pytest
import torch
import torch.distributed as dist

import shoal.torch
from ranks import run_ranks


def _split(rank, world):
    # Two disjoint groups in a new order, and one rank in none of them (world 5).
    evens = [r for r in range(world - 1) if r % 2 == 0][::-1]
    odds = [r for r in range(world - 1) if r % 2 == 1]
    g = dist.split_group(split_ranks=[evens, odds])
    if rank == world - 1:
        assert g is None or g == dist.GroupMember.NON_GROUP_MEMBER, g
        dist.barrier()  # the parent still works for everyone
        return "none"
    mine = evens if rank in evens else odds
    assert dist.get_world_size(g) == len(mine)
    assert dist.get_rank(g) == mine.index(rank), (dist.get_rank(g), mine)
    assert dist.get_process_group_ranks(g) == mine
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=g)
    assert t.item() == sum(mine)
    b = torch.tensor([float(rank)])
    dist.broadcast(b, group_src=0, group=g)  # group rank 0 is mine[0]
    assert b.item() == mine[0]
    out = [torch.zeros(1) for _ in mine]
    dist.all_gather(out, torch.tensor([float(rank)]), group=g)
    assert [o.item() for o in out] == mine
    # A split of the split: each pair alone (no new rendezvous through init_process_group).
    sub = dist.split_group(parent_pg=g, split_ranks=[[i] for i in range(len(mine))])
    s = torch.tensor([float(rank)])
    dist.all_reduce(s, group=sub)
    assert s.item() == rank
    dist.barrier()
    return "ok"


def test_split_group_without_a_new_rendezvous():
    world = 5
    assert run_ranks(_split, world) == {**{r: "ok" for r in range(world - 1)}, world - 1: "none"}


def _batch(rank, world):
    n = 6
    sends = [torch.full((n,), float(rank * 10 + k)) for k in range(2)]
    recvs = [torch.zeros(n) for _ in range(2)]
    right, left = (rank + 1) % world, (rank - 1) % world
    # receives first: the batch must not depend on the order
    ops = [dist.P2POp(dist.irecv, recvs[0], left), dist.P2POp(dist.irecv, recvs[1], right),
           dist.P2POp(dist.isend, sends[0], right), dist.P2POp(dist.isend, sends[1], left)]
    works = dist.batch_isend_irecv(ops)
    assert len(works) == 1, works  # one coalesced batch
    works[0].wait()
    assert torch.equal(recvs[0], torch.full((n,), float(left * 10)))
    assert torch.equal(recvs[1], torch.full((n,), float(right * 10 + 1)))
    # A failing member fails the batch's Work: a receive too small for what comes.
    small = torch.zeros(n - 1)
    bad = [dist.P2POp(dist.irecv, small if rank == 0 else torch.zeros(n), left),
           dist.P2POp(dist.isend, sends[0], right)]
    try:
        for w in dist.batch_isend_irecv(bad):
            w.wait()
        return "no error"
    except RuntimeError:
        return "error"


def test_batch_isend_irecv_is_one_batch():
    got = run_ranks(_batch, 3, timeout_s=20)
    assert got[0] == "error", got


def _shrink(rank, world):
    excluded = world - 2
    if rank == excluded:
        return "excluded"  # alive: the others must neither wait for it nor include it
    started = time.monotonic()
    g = dist.shrink_group([excluded])
    took = time.monotonic() - started
    assert g == dist.group.WORLD  # the default group was shrunk: the new one is the default
    assert dist.get_world_size() == world - 1
    assert dist.get_rank() == (rank if rank < excluded else rank - 1)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    assert t.item() == sum(r for r in range(world) if r != excluded)
    return took


def test_shrink_group_excludes_a_live_rank_without_waiting_for_it():
    world = 4
    got = run_ranks(_shrink, world, timeout_s=30)
    assert got[world - 2] == "excluded"
    # SHOAL_SHRINK_WAIT's default is far longer: a shrink that waited for the excluded rank
    # would take it (the bound is loose: this is not a timing test).
    assert all(got[r] < 20 for r in range(world) if r != world - 2), got


def _options(rank, world):
    with pytest.raises(TypeError, match="pg_options must be shoal.torch.Options"):
        dist.new_group(pg_options="ring")
    ring = dist.new_group(pg_options=shoal.torch.Options(all_reduce_algorithm="ring",
                                                         timeout=datetime.timedelta(seconds=20)))
    assert ring._get_backend(torch.device("cpu")).options._timeout == datetime.timedelta(seconds=20)
    t = torch.arange(5, dtype=torch.float32) + rank
    dist.all_reduce(t, group=ring)
    assert torch.equal(t, (torch.arange(5, dtype=torch.float32) * world + sum(range(world))))
    # The option reaches every call of the collective: an unknown row is refused by name.
    bad = dist.new_group(pg_options=shoal.torch.Options(all_gather_algorithm="nonesuch"))
    with pytest.raises(RuntimeError, match="no algorithm 'nonesuch'"):
        dist.all_gather_into_tensor(torch.zeros(world), torch.ones(1), group=bad)
    dist.all_reduce(t, group=bad)  # other collectives keep the usual choice
    return True


def test_pg_options_carry_the_timeout_and_algorithms():
    assert run_ranks(_options, 3) == {r: True for r in range(3)}


def _abort(rank, world):
    dist.barrier()
    if rank == 1:
        time.sleep(5)  # never joins the all_reduce below
        return "idle"
    t = torch.ones(4)
    work = dist.all_reduce(t, async_op=True)
    started = time.monotonic()
    dist.distributed_c10d._abort_process_group()
    with pytest.raises(RuntimeError, match="aborted"):
        work.wait()
    took = time.monotonic() - started
    assert not dist.is_initialized()
    return took


def test_abort_fails_pending_work_at_once():
    got = run_ranks(_abort, 2, timeout_s=20)
    assert got[0] < 3, got  # at once, not after a grace or the 20 s timeout
