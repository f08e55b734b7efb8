"""A stand-in for nccl4py's low-level bindings: see nccl.py."""
