"""Robust centre and spread (median and MAD), and how far a value falls short of them: the one rule lives in
gpuval.baselines.noise (the health checks judge a GPU against its peers by it too); re-exported here for the
diagnosis, the fleet and the straggler rule. Beside it, the direction of each metric the diagnosis compares."""

from __future__ import annotations

from gpuval.baselines.noise import MAD_TO_SIGMA, OUTLIER_Z, RELATIVE_FLOOR, NoiseBand, band

__all__ = ["HIGHER_IS_BETTER", "MAD_TO_SIGMA", "OUTLIER_Z", "RELATIVE_FLOOR", "NoiseBand", "band"]

# Direction of each metric gpuval judges by comparison; metrics not listed (wrong elements, loss) are not compared.
HIGHER_IS_BETTER = {
    "busbw": True,  # at the largest size; peak and algbw say the same less reliably
    "timesteps_per_s": True, "atom_steps_per_s": True, "tau_per_day": True, "ns_per_day": True,
    "samples_per_s": True,
    "loop_time_s": False, "step_time_p50_s": False, "step_time_p95_s": False,
}
