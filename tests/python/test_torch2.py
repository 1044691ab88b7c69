"""The torch 2.x Backend calls beyond the classic collectives: the coalesced tensor forms that
DTensor and FSDP2 call, PREMUL_SUM, the bitwise ops, monitored_barrier. Every expected value is
computed on each rank from the ranks' inputs alone."""

import datetime

import pytest
import torch
import torch.distributed as dist

from ranks import run_ranks

WORLDS = [2, 3]


def inputs(rank, n, dtype=torch.float32, salt=0):
    return (torch.arange(n, dtype=torch.float64) * (salt + 1) + rank * 10 + salt).to(dtype)


def _coalesced_all_gather(rank, world, scale, mixed):
    sizes = [5 * scale, 1, 12 * scale]
    ins = [inputs(rank, n, torch.int64 if mixed and i == 1 else torch.float32, i) for i, n in enumerate(sizes)]
    outs = [torch.full((n * world,), -1, dtype=t.dtype) for n, t in zip(sizes, ins)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    for i, (n, o) in enumerate(zip(sizes, outs)):
        want = torch.cat([inputs(r, n, o.dtype, i) for r in range(world)])
        assert torch.equal(o, want), (i, o, want)
    return True


def _coalesced_reduce_scatter(rank, world, op_name, scale):
    op = getattr(dist.ReduceOp, op_name)
    sizes = [4 * scale, 7 * scale]
    ins = [inputs(rank, n * world, torch.float64, i) for i, n in enumerate(sizes)]
    outs = [torch.zeros(n, dtype=torch.float64) for n in sizes]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i, op=op)
    cm.wait()
    for i, (n, o) in enumerate(zip(sizes, outs)):
        total = sum(inputs(r, n * world, torch.float64, i) for r in range(world))
        if op_name == "AVG":
            total = total / world
        want = total[rank * n:(rank + 1) * n]
        assert torch.allclose(o, want, rtol=0, atol=1e-12), (i, o, want)
    return True


def _premul_sum(rank, world):
    factor = 0.25 * (1 + rank)  # each rank's own factor, as FSDP's gradient pre-division uses it
    t = inputs(rank, 9)
    original = t.clone()
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
    want = sum(inputs(r, 9) * (0.25 * (1 + r)) for r in range(world))
    assert torch.allclose(t, want), (t, want)
    # reduce_scatter_tensor with a tensor factor; the input is left as it was
    x = inputs(rank, 3 * world, torch.float64)
    x_before = x.clone()
    out = torch.zeros(3, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, x, op=dist._make_nccl_premul_sum(torch.tensor(2.0, dtype=torch.float64)))
    want = (sum(inputs(r, 3 * world, torch.float64) for r in range(world)) * 2)[rank * 3:(rank + 1) * 3]
    assert torch.allclose(out, want), (out, want)
    assert torch.equal(x, x_before)
    # integers have no PREMUL_SUM: a clear error before anything is sent, the tensor untouched
    i = torch.arange(4)
    with pytest.raises(RuntimeError, match="PREMUL_SUM scales floating-point tensors only"):
        dist.all_reduce(i, op=dist._make_nccl_premul_sum(2.0))
    assert torch.equal(i, torch.arange(4)) and torch.equal(original, inputs(rank, 9))
    return True


def bits(rank, n, dtype):
    """Values that set different bits per rank and element (negative ones too, for signed types)."""
    if dtype == torch.bool:
        return (torch.arange(n) * (rank + 1)) % 3 != 0
    x = (torch.arange(n, dtype=torch.int64) * 37 + rank * 11) % 128
    if dtype != torch.uint8:
        x = x - 60
    return x.to(dtype)


def _bitwise(rank, world):
    n = 19
    folds = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}
    for dtype in (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        for name, fold in folds.items():
            want = bits(0, n, dtype)
            for r in range(1, world):
                want = fold(want, bits(r, n, dtype))
            t = bits(rank, n, dtype)
            dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
            assert torch.equal(t, want), (dtype, name, t, want)
            strided = torch.stack([bits(rank, n, dtype), bits(rank, n, dtype)], 1)[:, 0]
            dist.all_reduce(strided, op=getattr(dist.ReduceOp, name))
            assert torch.equal(strided, want), (dtype, name, "non-contiguous")
    f = torch.ones(4)
    with pytest.raises(RuntimeError, match=r"allreduce: ReduceOp.BAND on Float .*integer and bool"):
        dist.all_reduce(f, op=dist.ReduceOp.BAND)
    assert torch.equal(f, torch.ones(4))
    dist.all_reduce(f)  # the group still works
    assert torch.equal(f, torch.full((4,), float(world)))
    return True


def _sparse(rank, world):
    # Rank r sets rows r and r+1 (overlapping across ranks), with a dense trailing dimension.
    dense = torch.zeros(world + 2, 3)
    dense[rank] = torch.arange(3.0) + rank
    dense[rank + 1] = 10.0 * (rank + 1)
    t = dense.to_sparse(sparse_dim=1)
    dist.all_reduce(t)
    want = sum(_sparse_rows(r, world) for r in range(world))
    assert t.is_sparse and torch.equal(t.to_dense(), want), (t.to_dense(), want)
    empty = torch.zeros(4, 2).to_sparse() if rank == 0 else torch.ones(4, 2).to_sparse()
    dist.all_reduce(empty)  # one rank contributes nothing
    assert torch.equal(empty.to_dense(), torch.full((4, 2), float(world - 1)))
    with pytest.raises(RuntimeError, match="sparse tensors reduce with SUM only"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return True


def _sparse_rows(rank, world):
    dense = torch.zeros(world + 2, 3)
    dense[rank] = torch.arange(3.0) + rank
    dense[rank + 1] = 10.0 * (rank + 1)
    return dense


@pytest.mark.parametrize("world", WORLDS)
def test_sparse_all_reduce_sums_like_dense(world):
    assert run_ranks(_sparse, world) == {r: True for r in range(world)}


def _monitored_barrier(rank, world):
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=10))
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=10), wait_all_ranks=True)
    # The last rank does not come: rank 0 names it (and every straggler with wait_all_ranks),
    # the others are told that rank 0 did not release them.
    if rank == world - 1:
        return "absent"
    with pytest.raises(RuntimeError) as err:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=2), wait_all_ranks=True)
    return str(err.value)


# One vectored call over every pair, small (packed into the shared slots) and large; mixed
# dtypes: one call per pair.
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("scale,mixed", [(1, False), (1, True), (10000, False), (10000, True)])
def test_all_gather_into_tensor_coalesced(world, scale, mixed):
    assert run_ranks(_coalesced_all_gather, world, scale, mixed) == {r: True for r in range(world)}


@pytest.mark.parametrize("op_name", ["SUM", "AVG", "MAX"])
@pytest.mark.parametrize("scale", [1, 10000])
def test_reduce_scatter_tensor_coalesced(op_name, scale):
    world = 3
    if op_name == "MAX":  # checked apart: MAX's reference is not a sum
        def _max(rank, world):
            x = inputs(rank, 2 * world, torch.float64)
            outs = [torch.zeros(2, dtype=torch.float64)]
            with dist._coalescing_manager(async_ops=True) as cm:
                dist.reduce_scatter_tensor(outs[0], x, op=dist.ReduceOp.MAX)
            cm.wait()
            return outs[0].tolist()
        got = run_ranks(_max, world)
        for r in range(world):
            want = torch.stack([inputs(q, 2 * world, torch.float64) for q in range(world)]).max(0).values
            assert got[r] == want[r * 2:(r + 1) * 2].tolist()
        return
    assert run_ranks(_coalesced_reduce_scatter, world, op_name, scale) == {r: True for r in range(world)}


@pytest.mark.parametrize("world", WORLDS)
def test_premul_sum(world):
    assert run_ranks(_premul_sum, world) == {r: True for r in range(world)}


@pytest.mark.parametrize("world", WORLDS)
def test_bitwise_ops_on_integers_and_bools(world):
    assert run_ranks(_bitwise, world) == {r: True for r in range(world)}


def test_monitored_barrier_names_the_missing_rank():
    world = 3
    results = run_ranks(_monitored_barrier, world, timeout_s=30)
    assert results[world - 1] == "absent"
    assert "Rank 2 failed to pass monitoredBarrier" in results[0], results[0]
    assert "Rank 1 successfully reached monitoredBarrier" in results[1], results[1]
    assert "rank 0: it did not release the barrier" in results[1], results[1]
