"""gpuval: tells whether a GPU cluster is healthy and performs as it should."""

__version__ = "0.1.0"
