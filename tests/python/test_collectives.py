"""Every collective of the "shoal" torch backend, on several dtypes, contiguous or not."""

import pytest
import torch
import torch.distributed as dist

from ranks import run_ranks

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64]
WORLDS = [2, 3]


def value(rank, n, dtype):
    """Small, exactly representable values that differ per rank and per element."""
    return (torch.arange(n, dtype=torch.int64) % 7 + rank + 1).to(dtype)


def noncontig(t):
    """A non-contiguous tensor with t's values (a transposed view)."""
    base = torch.zeros((t.numel(), 2), dtype=t.dtype)
    base[:, 0] = t.reshape(-1)
    view = base[:, 0]
    assert not view.is_contiguous()
    return view


def _all_reduce(rank, world):
    n = 37
    for dtype in DTYPES:
        cases = [(dist.ReduceOp.SUM, sum), (dist.ReduceOp.MAX, max), (dist.ReduceOp.MIN, min)]
        if not dtype.is_floating_point and dtype != torch.uint8 and dtype != torch.int8:
            cases.append((dist.ReduceOp.PRODUCT, None))
        for op, _ in cases:
            for contiguous in (True, False):
                t = value(rank, n, dtype)
                if not contiguous:
                    t = noncontig(t)
                dist.all_reduce(t, op=op)
                vals = [value(r, n, torch.float64) for r in range(world)]
                if op == dist.ReduceOp.SUM:
                    want = sum(vals)
                elif op == dist.ReduceOp.MAX:
                    want = torch.stack(vals).max(0).values
                elif op == dist.ReduceOp.MIN:
                    want = torch.stack(vals).min(0).values
                else:
                    want = torch.stack(vals).prod(0)
                assert torch.equal(t.to(torch.float64), want.to(dtype).to(torch.float64)), (dtype, op, contiguous)
    # AVG (float), bool as logical or/and, complex sum
    t = value(rank, n, torch.float32)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t, sum(value(r, n, torch.float32) for r in range(world)) / world)
    b = torch.tensor([rank == 0, False, True])
    dist.all_reduce(b, op=dist.ReduceOp.SUM)
    assert b.tolist() == [True, False, True]
    b = torch.tensor([rank == 0, False, True])
    dist.all_reduce(b, op=dist.ReduceOp.MIN)
    assert b.tolist() == [False, False, True]
    c = torch.tensor([1 + 2j, rank * 1j], dtype=torch.complex64)
    dist.all_reduce(c)
    assert torch.allclose(c, torch.tensor([world * (1 + 2j), sum(range(world)) * 1j], dtype=torch.complex64))
    return True


@pytest.mark.parametrize("world", WORLDS)
def test_all_reduce(world):
    run_ranks(_all_reduce, world)


def _unsupported_ops(rank, world):
    t = torch.ones(4, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="BAND on Float.*integer and bool tensors only"):
        dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND)
    with pytest.raises(RuntimeError, match="complex tensors reduce with SUM or AVG"):
        _raise_complex_max()
    # the group still works after rejected calls
    dist.all_reduce(t)
    assert t.tolist() == [world] * 4
    return True


def _raise_complex_max():
    # torch's Python layer rejects MAX on complex itself: call the process group directly
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MAX
    pg.allreduce([torch.ones(2, dtype=torch.complex64)], opts).wait()


def test_unsupported_ops_raise():
    run_ranks(_unsupported_ops, 2)


def _coalesced(rank, world, scale):
    a, b = 3 * scale, 5 * scale
    ts = [torch.full((a,), float(rank)), noncontig(torch.full((b,), float(rank + 1))), torch.tensor(float(rank))]
    dist.all_reduce_coalesced(ts)
    s = sum(range(world))
    assert torch.equal(ts[0], torch.full((a,), float(s))) and torch.equal(ts[1], torch.full((b,), float(s + world)))
    assert ts[2].item() == s
    a, b = 2 * scale, 3 * scale
    outs = [[torch.zeros(a), torch.zeros(b, dtype=torch.float32)] for _ in range(world)]
    dist.all_gather_coalesced(outs, [torch.full((a,), float(rank)), torch.full((b,), 10.0 + rank)])
    for r in range(world):
        assert torch.equal(outs[r][0], torch.full((a,), float(r))) and torch.equal(outs[r][1], torch.full((b,), 10.0 + r))
    return True


@pytest.mark.parametrize("scale", [1, 20000])
def test_coalesced(scale):
    run_ranks(_coalesced, 3, scale)


def _broadcast_reduce(rank, world):
    for dtype in DTYPES + [torch.bool, torch.complex128]:
        for root in range(world):
            t = value(rank, 9, torch.int64).to(dtype) if dtype != torch.complex128 else \
                torch.full((9,), complex(rank, -rank), dtype=dtype)
            want = value(root, 9, torch.int64).to(dtype) if dtype != torch.complex128 else \
                torch.full((9,), complex(root, -root), dtype=dtype)
            t = noncontig(t) if root % 2 else t
            dist.broadcast(t, root)
            assert torch.equal(t, want), (dtype, root)
    for dtype in DTYPES:
        for root in range(world):
            t = value(rank, 11, dtype)
            dist.reduce(t, root, op=dist.ReduceOp.SUM)
            if rank == root:
                want = sum(value(r, 11, torch.float64) for r in range(world)).to(dtype)
                assert torch.equal(t, want), (dtype, root)
    return True


@pytest.mark.parametrize("world", WORLDS)
def test_broadcast_reduce(world):
    run_ranks(_broadcast_reduce, world)


# Lists of tensors are one vectored call: packed into the shared slots when small, a schedule
# over the tensors themselves when large.
LIST_SIZES = [6, 60000]


def _gathers(rank, world):
    for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool, torch.int16]:
        for n in LIST_SIZES:
            x = value(rank, n, torch.int64).to(dtype)
            outs = [torch.zeros(n, dtype=dtype) for _ in range(world)]
            outs[0] = noncontig(outs[0])
            dist.all_gather(outs, x)
            for r in range(world):
                assert torch.equal(outs[r], value(r, n, torch.int64).to(dtype)), (dtype, n)
        x = value(rank, 6, torch.int64).to(dtype)
        flat = torch.zeros(world * 6, dtype=dtype)
        dist._all_gather_base(flat, x)
        assert torch.equal(flat, torch.cat([value(r, 6, torch.int64).to(dtype) for r in range(world)]))
        # gather and scatter: the root receives into (sends from) each tensor of its list; a
        # non-contiguous one goes through a staging copy
        for n in LIST_SIZES:
            x = value(rank, n, torch.int64).to(dtype)
            for root in range(world):
                glist = [torch.zeros(n, dtype=dtype) for _ in range(world)] if rank == root else None
                if rank == root:
                    glist[-1] = noncontig(glist[-1])
                dist.gather(x, glist, dst=root)
                if rank == root:
                    for r in range(world):
                        assert torch.equal(glist[r], value(r, n, torch.int64).to(dtype)), (dtype, n, root)
                out = noncontig(torch.zeros(n, dtype=dtype)) if root == 0 else torch.zeros(n, dtype=dtype)
                slist = None
                if rank == root:
                    slist = [(value(r, n, torch.int64) + root).to(dtype) for r in range(world)]
                    slist[0] = noncontig(slist[0])
                dist.scatter(out, slist, src=root)
                assert torch.equal(out, (value(rank, n, torch.int64) + root).to(dtype)), (dtype, n, root)
    return True


@pytest.mark.parametrize("world", WORLDS)
def test_gathers(world):
    run_ranks(_gathers, world)


def _reduce_scatters(rank, world):
    for dtype in [torch.float32, torch.float64, torch.float16, torch.int32, torch.int8, torch.int16]:
        for n in LIST_SIZES:
            ins = [value(rank, n, dtype) + r for r in range(world)]
            ins[1] = noncontig(ins[1])
            out = noncontig(torch.zeros(n, dtype=dtype))
            dist.reduce_scatter(out, ins)
            want = sum(value(q, n, torch.float64) + rank for q in range(world))
            assert torch.equal(out.to(torch.float64), want), (dtype, n)
        n = 5
        flat_in = torch.cat([value(rank, n, dtype) * (r + 1) for r in range(world)])
        out2 = torch.zeros(n, dtype=dtype)
        dist._reduce_scatter_base(out2, flat_in, op=dist.ReduceOp.MAX)
        want2 = torch.stack([value(q, n, torch.float64) * (rank + 1) for q in range(world)]).max(0).values
        assert torch.equal(out2.to(torch.float64), want2), dtype
    return True


@pytest.mark.parametrize("world", WORLDS)
def test_reduce_scatter(world):
    run_ranks(_reduce_scatters, world)


def _all_to_all(rank, world):
    # even, single tensor
    x = torch.arange(world * 4, dtype=torch.float32) + 100 * rank
    y = torch.zeros_like(x)
    dist.all_to_all_single(y, x)
    for r in range(world):
        assert torch.equal(y[r * 4:(r + 1) * 4], torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) + 100 * r)
    # uneven splits: rank r sends (q + r + 1) rows of 3 to rank q
    in_splits = [q + rank + 1 for q in range(world)]
    out_splits = [rank + q + 1 for q in range(world)]
    x = torch.cat([torch.full((in_splits[q], 3), float(10 * rank + q)) for q in range(world)])
    y = torch.zeros(sum(out_splits), 3)
    dist.all_to_all_single(y, x, out_splits, in_splits)
    off = 0
    for q in range(world):
        assert torch.equal(y[off:off + out_splits[q]], torch.full((out_splits[q], 3), float(10 * q + rank)))
        off += out_splits[q]
    # list form, even and uneven, int64
    ins = [torch.full((2,), 10 * rank + q, dtype=torch.int64) for q in range(world)]
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
    dist.all_to_all(outs, ins)
    assert [o.tolist() for o in outs] == [[10 * q + rank] * 2 for q in range(world)]
    ins = [torch.full((q + rank + 1,), 10 * rank + q, dtype=torch.int64) for q in range(world)]
    outs = [torch.zeros(rank + q + 1, dtype=torch.int64) for q in range(world)]
    dist.all_to_all(outs, ins)
    assert [o.tolist() for o in outs] == [[10 * q + rank] * (rank + q + 1) for q in range(world)]
    # zero rows to some peers
    in_splits = [0 if q == (rank + 1) % world else 2 for q in range(world)]
    out_splits = [0 if rank == (q + 1) % world else 2 for q in range(world)]
    x = torch.full((sum(in_splits),), float(rank))
    y = torch.full((sum(out_splits),), -1.0)
    dist.all_to_all_single(y, x, out_splits, in_splits)
    want = torch.cat([torch.full((out_splits[q],), float(q)) for q in range(world)])
    assert torch.equal(y, want)
    # split sizes that disagree between two ranks fail on every rank, before any data moves
    in_splits, out_splits = [1] * world, [1] * world
    if rank == 0:
        out_splits[1] = 2  # rank 0 expects 2 rows from rank 1, which sends it 1
    with pytest.raises(RuntimeError, match="all_to_all_v"):
        dist.all_to_all_single(torch.zeros(sum(out_splits)), torch.zeros(world), out_splits, in_splits)
    return True


@pytest.mark.parametrize("world", WORLDS)
def test_all_to_all(world):
    run_ranks(_all_to_all, world)


def _barrier(rank, world):
    for _ in range(5):
        dist.barrier()
    return True


def test_barrier():
    run_ranks(_barrier, 3)


def _links(rank, world):
    import shoal.torch
    before = shoal.torch.ring_order()
    rates = shoal.torch.measure_links()
    t = torch.arange(1 << 16, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(t)  # the planner now prices the rows on the links
    return before, rates, shoal.torch.ring_order(), t[:3].tolist()


def test_measured_links_are_equal_on_every_rank():
    world = 3
    got = run_ranks(_links, world)
    before, rates, order, head = got[0]
    assert before == [0, 1, 2]
    assert len(rates) == world and all(len(row) == world for row in rates)
    assert all((rates[i][j] == 0) == (i == j) and rates[i][j] >= 0 for i in range(world) for j in range(world))
    assert sorted(order) == [0, 1, 2] and order[0] == 0
    assert all(got[r][1] == rates and got[r][2] == order for r in range(world)), "one matrix, one order"
    assert head == [0.0, 6.0, 12.0]
