"""Benchmarks: each prints its figures and a ratio against a reference measured in the same run."""
