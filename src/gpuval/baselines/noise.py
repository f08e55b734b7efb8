"""THE robust rule: centre and spread (median and MAD) of figures measured the same way, and how far a value falls
short of them. One rule for every comparison of like with like: a GPU against its peers in the node
(gpuval.checks.peers), a node against the run's other nodes and a rank against the job's other ranks
(gpuval.diagnosis, re-exported by diagnosis.stats), a fleet's tests (gpuval.fleet), and the z of a noisy mean
(baselines.noisy's FAIL_Z).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

# 1.4826 x MAD estimates the standard deviation of normal noise; 3.5 robust sigmas is Iglewicz and Hoaglin's
# outlier cut (modified z-score). The relative floor keeps a fleet with near-identical nodes from flagging a
# 0.1% difference: below 5% nobody acts on a bandwidth figure.
MAD_TO_SIGMA = 1.4826
OUTLIER_Z = 3.5
RELATIVE_FLOOR = 0.05


@dataclass(frozen=True)
class NoiseBand:
    """Where values are expected to fall: centre, robust sigma, and the half-width judged as noise (not a baseline's
    threshold band: that is gpuval.baselines.Band)."""

    center: float
    sigma: float
    width: float
    n: int

    def shortfall(self, value: float, higher_is_better: bool) -> float:
        """How far `value` is on the bad side of the centre (0 when on the good side)."""
        gap = self.center - value if higher_is_better else value - self.center
        return max(gap, 0.0)

    def severity(self, value: float, higher_is_better: bool) -> int:
        """0 within the band, 1 beyond it, 2 beyond twice its width."""
        short = self.shortfall(value, higher_is_better)
        if short <= self.width:
            return 0
        return 2 if short > 2 * self.width else 1


def band(values: list[float], z: float = OUTLIER_Z, floor: float = RELATIVE_FLOOR) -> NoiseBand:
    """Median, MAD-based sigma, and the noise half-width max(z sigma, floor x |median|)."""
    center = statistics.median(values)
    mad = statistics.median(abs(v - center) for v in values)
    sigma = MAD_TO_SIGMA * mad
    return NoiseBand(center, sigma, max(z * sigma, floor * abs(center)), len(values))
