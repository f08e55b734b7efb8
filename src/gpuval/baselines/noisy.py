"""A mean with its noise against a band: THE one judge (`Band.judge`) asked at the ends of the mean's confidence
interval, so a figure measured many times gets the band's verdict once the noise cannot change it.

`judge_mean(band, mean, se)`: FAIL when the band fails the mean even `z` standard errors on its better side (the
figure is confidently beyond a fail limit); PASS when the band passes it even `clear_z` standard errors on its worse
side (confidently within every limit); the band's own verdict when both ends of the `clear_z` interval get the same
one (confidently in the warn zone: WARN); else WARN, "not sure" (the noise straddles a limit: measure again). With
no noise (se 0) it is `Band.judge(mean)` exactly: one figure, one verdict, on every path. A mean that is no finite number is ERROR (Band.judge's rule): nothing is
judged by it; unknown noise (NaN) is "not sure".
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuval.baselines import Band, Judgement
from gpuval.baselines.model import finite
from gpuval.baselines.noise import OUTLIER_Z
from gpuval.results.model import Status

FAIL_Z = OUTLIER_Z  # standard errors beyond a fail limit for a FAIL: the robust outlier cut (baselines.noise)
CLEAR_Z = 2.0  # standard errors inside every limit for a PASS


@dataclass(frozen=True)
class NoisyJudgement(Judgement):
    """A Judgement of a noisy mean; `sure` is False when the noise straddles a limit (the status is then WARN)."""

    sure: bool = True


def judge_mean(band: Band, mean: float, se: float, z: float = FAIL_Z, clear_z: float = CLEAR_Z) -> NoisyJudgement:
    """Judge `mean` (its standard error `se`, in the band's unit) against `band` through `Band.judge`."""
    plain = band.judge(mean)
    if se == 0 or not finite(mean):  # no noise, or no figure (ERROR): the band's own verdict
        return NoisyJudgement(plain.status, plain.expected, plain.reason)
    if not finite(se):  # unknown noise: nothing is sure
        return NoisyJudgement(Status.WARN, plain.expected, f"not sure: the noise of {mean:g} is not known "
                                                           f"({plain.reason})", sure=False)
    se = abs(se)
    noise = f" ± {se:.3g}"
    low, high = band.judge(mean - z * se).status, band.judge(mean + z * se).status
    if low is Status.FAIL and high is Status.FAIL:
        return NoisyJudgement(Status.FAIL, plain.expected, f"{plain.reason}; {noise.strip()} (sure)")
    clear_low, clear_high = band.judge(mean - clear_z * se).status, band.judge(mean + clear_z * se).status
    if clear_low is clear_high and clear_low is not Status.FAIL:
        return NoisyJudgement(clear_low, plain.expected, f"{plain.reason}; {noise.strip()} (sure)")
    return NoisyJudgement(Status.WARN, plain.expected,
                          f"not sure: {mean:g}{noise} straddles a limit of the band ({plain.reason})", sure=False)
