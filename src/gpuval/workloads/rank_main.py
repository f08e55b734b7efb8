"""The shared ending of a rank that gpuval spawned (bench, train): errors as one line, Ctrl-C as 130."""

from __future__ import annotations

import sys
from typing import Callable

from gpuval.errors import EXIT_CANNOT_RUN, GpuvalError


def rank_exit_code(work: Callable[[], int]) -> int:
    """Run one spawned rank's work and return its exit code: gpuval's errors print one line on stderr and give 2,
    Ctrl-C gives 130 (what the rank measured was saved on the way out)."""
    try:
        return work()
    except GpuvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        return 130
