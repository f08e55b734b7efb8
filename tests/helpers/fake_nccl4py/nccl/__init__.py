"""A stand-in for nccl4py (tests/helpers/fake_nccl4py/nccl/bindings/nccl.py holds what it stands in for)."""
