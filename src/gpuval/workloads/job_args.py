"""Parsing a workload's own arguments (the words after `--` on `gpuval submit`): bad ones are a UsageError."""

from __future__ import annotations

import argparse

from gpuval.errors import UsageError


class WorkloadArgs(argparse.ArgumentParser):
    """An argparse parser that reports bad input as one line naming the workload, never exits or prints help."""

    def __init__(self, workload: str) -> None:
        super().__init__(prog=workload, add_help=False, allow_abbrev=False)
        self.workload = workload

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.workload} workload arguments: {message}")
