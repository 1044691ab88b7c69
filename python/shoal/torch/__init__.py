"""torch.distributed backend "shoal".

Importing this module registers the backend, after which::

    import shoal.torch
    import torch.distributed as dist  # noqa: E402
    dist.init_process_group("shoal")      # under torchrun or shoal-run, or with init_method=...

works like "gloo" for CPU tensors. See docs/torch.md.
"""

import atexit
import datetime


def _autoload():
    """torch's entry point ("torch.backends" in pyproject.toml). Defined before `import torch`:
    a program that imports shoal.torch first makes torch, while it is imported from here, load
    this entry point from the half-initialised module; registration then happens at the end of
    this module, as it does when torch imports it."""
    register = globals().get("_register")
    if register is not None:
        register()


import torch  # noqa: E402  (after _autoload, above)
import torch.distributed as dist

from .. import _C  # noqa: E402

__all__ = ["BACKEND", "Options", "describe", "grow", "is_registered", "join", "shrink"]

BACKEND = "shoal"
_CPU = torch.device("cpu")


Options = _C.Options


def _create_process_group(dist_opts, pg_options):
    """The creator torch.distributed calls (extended API): its _DistributedBackendOptions and
    the pg_options the user passed (None, or shoal.torch.Options). Returns the whole
    ProcessGroup (its CPU backend shoal's), so that the group names its backend "shoal"."""
    if pg_options is not None and not isinstance(pg_options, torch._C._distributed_c10d.Backend.Options):
        raise TypeError(f"shoal: pg_options must be shoal.torch.Options, got {type(pg_options).__name__}")
    # dist_opts.store is the group's store under a prefix for the device: the group keeps the one
    # below it, as torch's own groups do.
    pg_store = dist_opts.store.underlying_store if isinstance(dist_opts.store, dist.PrefixStore) else dist_opts.store
    return _C.create_process_group(dist_opts.store, pg_store, dist_opts.group_rank, dist_opts.group_size,
                                   dist_opts.timeout, pg_options)


def is_registered():
    return BACKEND.upper() in getattr(dist.Backend, "_plugins", {})


def describe(group=None):
    """shoal's description of a process group (default: the world): ranks, hosts, transport."""
    return _C.describe(_backend_of(group, "describe"))


def measure_links(group=None):
    """Times every directed pair of the group's ranks, one pair at a time (collective, between
    the group's calls; SHOAL_LINKS=measure does it when the group is made) and uses the rates:
    the planner prices all_reduce, all_gather and reduce_scatter on them and the link_ring rows
    go around ring_order(). Returns the rates in bytes per second, a list per sending rank."""
    rates = _C.measure_links(_backend_of(group, "measure_links"))
    n = int(len(rates) ** 0.5)
    return [rates[i * n:(i + 1) * n] for i in range(n)]


def ring_order(group=None):
    """The group's ranks in the order the link_ring rows go around them (rank order until
    links are measured)."""
    return list(_C.ring_order(_backend_of(group, "ring_order")))


def _backend_of(group, what):
    """The shoal backend object behind `group` (default: the world); TypeError if it is not one."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    if isinstance(group, dist.ProcessGroup):  # it dispatches each device to a backend
        try:
            group = group._get_backend(_CPU)
        except RuntimeError as e:
            raise TypeError(f"shoal.torch.{what}: the group has no shoal backend for the CPU ({e})") from None
    return group


def _as_group(backend):
    """A ProcessGroup serving the CPU with `backend` (a c10d::Backend made by shrink, grow or join)."""
    pg = dist.ProcessGroup(dist.HashStore(), backend.rank(), backend.size())
    backend_type = dist.ProcessGroup.BackendType.CUSTOM
    pg._set_default_backend(backend_type)
    pg._register_backend(_CPU, backend_type, backend)
    return pg


_elastic_groups = 0  # elastic groups this process entered in torch's tables (names them)


def _enter_tables(pg, kind, store):
    """Enters an elastic group in torch's group tables, so that every torch call takes
    group=pg: this process's global rank maps to its rank in pg. A process without a default
    group (a joiner) makes pg its default group; the members' global ranks stay as they were and
    a joiner counts as a new global rank after the largest. Collective over pg."""
    global _elastic_groups
    c10d = dist.distributed_c10d
    mine = dist.get_rank() if dist.is_initialized() else -1
    ids = [torch.zeros(1, dtype=torch.int64) for _ in range(pg.size())]
    pg.allgather([ids], [torch.tensor([mine])]).wait()
    ids = [int(t.item()) for t in ids]
    fresh = max(ids) + 1
    for i, g in enumerate(ids):
        if g < 0:
            ids[i], fresh = fresh, fresh + 1
    _elastic_groups += 1
    name = f"shoal_{kind}_{_elastic_groups}_" + "_".join(map(str, ids))
    if not dist.is_initialized():
        c10d._update_default_pg(pg)
        ids = list(range(pg.size()))  # in its own world, global ranks are pg's
    c10d._register_pg_in_world(pg, backend_name=BACKEND, store=store, group_name=name,
                               backend_config=f"cpu:{BACKEND}",
                               rank_mapping={g: i for i, g in enumerate(ids)})
    return pg


def _timedelta(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout
    return datetime.timedelta(seconds=float(timeout))


def shrink(group=None):
    """After a failure, every surviving rank of `group` (default: the world) calls this: the
    survivors agree through the group's store and form a new shoal group of them, ranked in their
    old order. Works on a broken group; the old group is left as it is (destroy it, or let it go).
    The new group is entered in torch.distributed's group tables: every call takes group=pg.
    Raises TypeError for a group that is not shoal's, RuntimeError with shoal's message if the
    shrink fails (e.g. this rank arrived after the survivors were decided)."""
    return _enter_tables(_as_group(_C.shrink(_backend_of(group, "shrink"))), "shrink",
                     dist.distributed_c10d._get_default_store())


def grow(joining, name, group=None):
    """Every rank of `group` (default: the world) calls this while `joining` new processes call
    join(store, name): returns a group of size(group) + joining in which this group's ranks keep
    their numbers and the joiners follow in order of arrival. `name` must be new to the job's store."""
    return _enter_tables(_as_group(_C.grow(_backend_of(group, "grow"), int(joining), str(name))),
                     "grow", dist.distributed_c10d._get_default_store())


def join(store, name, timeout=datetime.timedelta(minutes=30)):
    """The new process's side of grow(joining, name): `store` is the job's store (the TCPStore or
    FileStore of init_process_group, or any PrefixStore over it), waited on for at most `timeout`.
    Returns the grown group, which becomes this process's default group when it has none
    (it need not have called init_process_group)."""
    if not isinstance(store, dist.Store):
        raise TypeError(f"shoal.torch.join: expected a torch.distributed Store, got {type(store).__name__}")
    return _enter_tables(_as_group(_C.join(store, str(name), _timedelta(timeout))), "grow", store)


def _register():
    if is_registered():
        return
    # The creator returns a c10d::Backend; torch wraps it in a ProcessGroup for the CPU, and for
    # CUDA where torch has a GPU (its tensors staged through pinned host memory). Not otherwise:
    # torch would then put barrier()'s tensor on a GPU that is not there.
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    dist.Backend.register_backend(BACKEND, _create_process_group, extended_api=True, devices=devices)


_register()
# Completion threads run torch callbacks and free tensors: let them finish before Python does.
atexit.register(_C.quiesce, 5.0)
