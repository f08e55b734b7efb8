"""What this machine is: GPUs, PCI, NUMA, InfiniBand, SKU, and the rank it holds in a job."""
