"""shoal: collectives for distributed deep learning.

``import shoal.torch`` registers the torch.distributed backend "shoal" (see docs/torch.md).
"""

__all__ = ["torch"]
