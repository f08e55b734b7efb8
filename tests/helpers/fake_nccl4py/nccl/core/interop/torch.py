"""A stand-in for nccl4py's torch allocator (`nccl.core.interop.torch.empty`): a tensor on memory from the stand-in's
ncclMemAlloc (host memory), freed with ncclMemFree once the tensor is collected, as nccl4py's is."""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

from nccl.bindings import nccl as bindings


def empty(*size: Any, dtype: Any = None, device: Any = None, morder: str = "C") -> torch.Tensor:
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    dtype = dtype or torch.get_default_dtype()
    nbytes = math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
    address = bindings.mem_alloc(nbytes)
    raw = torch.frombuffer(bindings.allocated_memory(address), dtype=torch.uint8, count=nbytes)
    tensor = raw.view(dtype).view(shape)
    weakref.finalize(tensor, bindings.mem_free, address)
    return tensor
