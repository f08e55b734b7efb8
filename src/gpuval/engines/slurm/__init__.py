"""Slurm, in one place: the engine (engine.py: options, the sbatch script, submit), THE one way its commands run
(commands.py), job status for many jobs at once (status.py), node state and node queries (nodes.py), host lists
(hostlist.py) and the fleet check's view of it (site.py)."""

from __future__ import annotations

from gpuval.engines.slurm.engine import SlurmEngine, SlurmOptions, render_script

__all__ = ["SlurmEngine", "SlurmOptions", "render_script"]
