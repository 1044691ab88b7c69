"""torch.distributed backend "shoal".

Importing this module registers the backend, after which::

    import shoal.torch
    import torch.distributed as dist
    dist.init_process_group("shoal")      # under torchrun or shoal-run, or with init_method=...

works like "gloo" for CPU tensors. See docs/torch.md.
"""

import torch
import torch.distributed as dist

from . import _C

__all__ = ["BACKEND", "describe", "is_registered"]

BACKEND = "shoal"
_TORCH_MAJOR = int(torch.__version__.split(".")[0])


def _create_process_group(store, rank, size, timeout):
    """The creator torch.distributed calls with (store, rank, world_size, timeout)."""
    return _C.create_process_group(store, rank, size, timeout)


def is_registered():
    return BACKEND.upper() in getattr(dist.Backend, "_plugins", {})


def describe(group=None):
    """shoal's description of a process group (default: the world): ranks, hosts, transport."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if _TORCH_MAJOR >= 2:  # torch 2.x: the ProcessGroup wraps per-device backends
        pg = pg._get_backend(torch.device("cpu"))
    return _C.describe(pg)


def _register():
    if is_registered():
        return
    if _TORCH_MAJOR >= 2:
        # torch 2.x: the creator returns a c10d::Backend; say which devices it serves.
        try:
            dist.Backend.register_backend(BACKEND, _create_process_group, devices=["cpu"])
            return
        except TypeError:
            pass
    dist.Backend.register_backend(BACKEND, _create_process_group)


_register()
