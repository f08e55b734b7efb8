"""A stand-in for nccl4py's nccl.core.interop: see torch.py."""
