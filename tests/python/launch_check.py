"""Run by test_launchers.py under shoal-run or torchrun: init_process_group("shoal") from the
launcher's environment, a collective on the world and on a subgroup, then "OK <rank>"."""

import torch
import torch.distributed as dist

import shoal.torch

dist.init_process_group("shoal")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank))
dist.all_reduce(t)
assert t[0].item() == sum(range(world)), t[0].item()
g = dist.new_group(list(range(world - 1, -1, -1)))
u = torch.ones(3)
dist.all_reduce(u, group=g)
assert u.tolist() == [float(world)] * 3
print("describe", shoal.torch.describe(), flush=True)
dist.barrier()
dist.destroy_process_group()
print(f"OK {rank}", flush=True)
