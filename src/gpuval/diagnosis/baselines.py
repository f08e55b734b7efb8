"""Expectations from gpuval's SKU baselines (gpuval.checks.baselines, the data files of the health checks).

Only the figures the diagnosis compares with a sweep are taken: the one-node all_reduce bus bandwidth, judged at
the size the baseline names and only for runs over that node's GPUs. Without the baselines module, nothing is judged
against a baseline and the report says so.
"""

from __future__ import annotations

from functools import lru_cache

from gpuval.diagnosis.expectations import Expectation, ExpectationSource, no_expectations

# baseline band name -> (Result kind, test name, metric)
_FROM_BANDS = {"allreduce_busbw_gbps": ("collective", "all_reduce", "busbw")}


def default_expectations() -> ExpectationSource:
    """The packaged SKU baselines as an ExpectationSource."""
    try:
        from gpuval.checks.baselines import find_baseline
    except ImportError:
        return no_expectations

    @lru_cache(maxsize=None)
    def for_sku(sku: str | None) -> tuple[Expectation, ...]:
        base = find_baseline(sku) if sku else None
        if base is None:
            return ()
        gpus = base.band("gpu_count")
        found = []
        for band_name, (kind, name, metric) in _FROM_BANDS.items():
            band = base.band(band_name)
            if band is None or band.expected is None:
                continue
            found.append(Expectation(
                metric=metric, expected=band.expected, kind=kind, name=name, unit=band.unit,
                # the limits Band.judge applies in `gpuval health`/`validate`: no warn limit means no warn zone
                fail_at=band.fail_below if band.fail_below is not None else 0.0, size_bytes=band.size_bytes,
                warn_at=band.warn_below if band.warn_below is not None else
                (band.fail_below if band.fail_below is not None else 0.0),
                ranks=int(gpus.expected) if gpus and gpus.expected else None,
                source=band.fail_source or band.expected_source,
            ))
        return tuple(found)

    return lambda sku: list(for_sku(sku))
