"""The reference data-parallel training job: a small ResNet-style CNN on synthetic images, torch DDP."""
