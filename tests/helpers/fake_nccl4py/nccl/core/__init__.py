"""A stand-in for nccl4py's nccl.core (only its torch allocator: interop/torch.py). With
GPUVAL_FAKE_NCCL4PY_NO_CORE set it cannot load, as where cuda-core is missing: the bindings still work."""

import os

if os.environ.get("GPUVAL_FAKE_NCCL4PY_NO_CORE"):
    raise ImportError("No module named 'cuda.core'")
