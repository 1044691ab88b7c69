"""Failures reach Python as RuntimeError with shoal's message, and never hang."""

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from ranks import run_ranks


def _killed_peer(rank, world, async_op):
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if rank == world - 1:
        # its last frames may still sit in the socket's send queue, and a kill resets the
        # connection: let them leave, so the survivors' first all_reduce is not the one failing
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=f"rank {world - 1}") as info:
        for _ in range(100):  # the first calls may complete before the death is noticed
            if async_op:
                dist.all_reduce(t, async_op=True).wait()
            else:
                dist.all_reduce(t)
    elapsed = time.monotonic() - start
    assert elapsed < 10, f"the failure took {elapsed:.1f} s to surface"
    # later calls fail at once instead of hanging
    with pytest.raises(RuntimeError):
        dist.broadcast(t, 0)
    return str(info.value)


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_killed_peer(async_op):
    # the group's timeout is 20 s: the survivors must learn of the death well before it
    results = run_ranks(_killed_peer, 3, async_op, timeout_s=20, expect_exit=(2,))
    assert set(results) == {0, 1}


def _mismatch(rank, world):
    t = torch.ones(4 + rank)  # different counts: shoal's MismatchError on both ranks
    with pytest.raises(RuntimeError, match="all_reduce"):
        dist.all_reduce(t)
    return True


def test_mismatched_calls_raise():
    run_ranks(_mismatch, 2, timeout_s=20)


def _bad_arguments(rank, world):
    with pytest.raises(RuntimeError, match="_allgather_base: the output must have"):
        dist._all_gather_base(torch.zeros(3), torch.zeros(2))
    with pytest.raises(RuntimeError, match="BXOR on Double.*integer and bool tensors only"):
        dist.all_reduce(torch.ones(2, dtype=torch.float64), op=dist.ReduceOp.BXOR)
    t = torch.ones(2)
    dist.all_reduce(t)  # the group is still usable
    assert t.tolist() == [2.0, 2.0]
    return True


def test_bad_arguments_raise():
    run_ranks(_bad_arguments, 2)



def _destroy_with_stuck_op(rank, world):
    if rank == 1:
        time.sleep(5)  # alive, but never joins rank 0's all_reduce
        return True
    work = dist.all_reduce(torch.ones(4), async_op=True)
    start = time.monotonic()
    dist.destroy_process_group()  # pending work fails at once: no grace, not the 20 s timeout
    elapsed = time.monotonic() - start
    assert elapsed < 3, f"destroy took {elapsed:.1f} s"
    # The group aborted what was left: it failed, and nothing stays behind.
    assert work.is_completed()
    with pytest.raises(RuntimeError, match="aborted"):
        work.wait()
    return elapsed


def test_destroy_with_stuck_operation_returns():
    run_ranks(_destroy_with_stuck_op, 2, timeout_s=20)
