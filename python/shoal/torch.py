"""torch.distributed backend "shoal".

Importing this module registers the backend, after which::

    import shoal.torch
    import torch.distributed as dist
    dist.init_process_group("shoal")      # under torchrun or shoal-run, or with init_method=...

works like "gloo" for CPU tensors. See docs/torch.md.
"""

import atexit
import datetime

import torch
import torch.distributed as dist

from . import _C

__all__ = ["BACKEND", "Options", "describe", "grow", "is_registered", "join", "shrink"]

BACKEND = "shoal"
_CPU = torch.device("cpu")


Options = _C.Options


def _create_process_group(dist_opts, pg_options):
    """The creator torch.distributed calls (extended API): its _DistributedBackendOptions and
    the pg_options the user passed (None, or shoal.torch.Options)."""
    if pg_options is not None and not isinstance(pg_options, torch._C._distributed_c10d.Backend.Options):
        raise TypeError(f"shoal: pg_options must be shoal.torch.Options, got {type(pg_options).__name__}")
    return _C.create_process_group(dist_opts.store, dist_opts.group_rank, dist_opts.group_size,
                                   dist_opts.timeout, pg_options)


def is_registered():
    return BACKEND.upper() in getattr(dist.Backend, "_plugins", {})


def describe(group=None):
    """shoal's description of a process group (default: the world): ranks, hosts, transport."""
    return _C.describe(_backend_of(group, "describe"))


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


def _timedelta(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout
    return datetime.timedelta(seconds=float(timeout))


def shrink(group=None):
    """After a failure, every surviving rank of `group` (default: the world) calls this: the
    survivors agree through the group's store and form a new shoal group of them, ranked in their
    old order. Works on a broken group; the old group is left as it is (destroy it, or let it go).
    The new group is not registered with torch.distributed (see docs/torch.md for what takes it).
    Raises TypeError for a group that is not shoal's, RuntimeError with shoal's message if the
    shrink fails (e.g. this rank arrived after the survivors were decided)."""
    return _as_group(_C.shrink(_backend_of(group, "shrink")))


def grow(joining, name, group=None):
    """Every rank of `group` (default: the world) calls this while `joining` new processes call
    join(store, name): returns a group of size(group) + joining in which this group's ranks keep
    their numbers and the joiners follow in order of arrival. `name` must be new to the job's store."""
    return _as_group(_C.grow(_backend_of(group, "grow"), int(joining), str(name)))


def join(store, name, timeout=datetime.timedelta(minutes=30)):
    """The new process's side of grow(joining, name): `store` is the job's store (the TCPStore or
    FileStore of init_process_group, or any PrefixStore over it), waited on for at most `timeout`.
    Returns the grown group; this process need not have called init_process_group."""
    if not isinstance(store, dist.Store):
        raise TypeError(f"shoal.torch.join: expected a torch.distributed Store, got {type(store).__name__}")
    return _as_group(_C.join(store, str(name), _timedelta(timeout)))


def _register():
    if is_registered():
        return
    # The creator returns a c10d::Backend; torch wraps it in a ProcessGroup for the CPU.
    dist.Backend.register_backend(BACKEND, _create_process_group, extended_api=True, devices=["cpu"])


_register()
# Completion threads run torch callbacks and free tensors: let them finish before Python does.
atexit.register(_C.quiesce, 5.0)
