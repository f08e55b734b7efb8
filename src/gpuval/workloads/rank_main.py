"""The shared ending of a rank that gpuval spawned (bench, train): errors as one line, Ctrl-C as 130."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

from gpuval.errors import EXIT_CANNOT_RUN, GpuvalError


def rank_exit_code(work: Callable[[], int]) -> int:
    """Run one spawned rank's work and return its exit code: errors print one line on stderr and give 2 (exit 1
    stays "a check failed"), Ctrl-C gives 130 (what the rank measured was saved on the way out)."""
    try:
        return work()
    except GpuvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the top of a process: an unexpected failure is "could not run", never exit 1
        if os.environ.get("GPUVAL_DEBUG"):
            traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc} (GPUVAL_DEBUG=1 shows where)", file=sys.stderr)
        return EXIT_CANNOT_RUN
