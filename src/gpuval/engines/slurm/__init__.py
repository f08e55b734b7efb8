"""Slurm, in one place: the engine (engine.py: the sbatch script, submit; its options in options.py), THE one way
its commands run (commands.py), job status for many jobs at once (status.py), node state and node queries
(nodes.py), host lists (hostlist.py) and the fleet check's view of it (site.py), the last two handed out by the
engine (`SlurmEngine.node_client`, `SlurmEngine.site`).

The engine's names are imported on first use: a module of the package (nodes.py, commands.py) loads no other."""

from __future__ import annotations

from typing import Any

__all__ = ["SlurmEngine", "SlurmOptions", "render_script"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpuval.engines.slurm import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
