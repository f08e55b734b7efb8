"""The collective benchmark (torch.distributed: nccl on GPU, gloo on CPU) and the nccl-tests formats."""
