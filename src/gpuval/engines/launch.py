"""Command lines shared by engines: the process argv, under mpirun or torchrun, as argv lists (never shell text);
and gpuval's own container image, which engines run when the user names none."""

from __future__ import annotations

import os
from pathlib import Path

from gpuval.engines.inert import check_inert
from gpuval.engines.spec import JobSpec
from gpuval.errors import UsageError
from gpuval.node.unshadowed import module_argv

# Where a job's container sees gpuval's source checkout when it installs gpuval itself.
SOURCE_IN_CONTAINER = "/opt/gpuval-src"

# gpuval's image, built from the repository's Dockerfile and tagged with gpuval's version (docs/engines.md says how
# to build and push it). GPUVAL_IMAGE names another (a private registry, a local build).
IMAGE_REPOSITORY = "ghcr.io/gpuval/gpuval"
IMAGE_VARIABLE = "GPUVAL_IMAGE"


def default_image() -> str:
    """The image a job runs in when the user gives no --image: $GPUVAL_IMAGE, else gpuval's at this version."""
    from gpuval import __version__

    image = os.environ.get(IMAGE_VARIABLE) or f"{IMAGE_REPOSITORY}:{__version__}"
    try:
        return check_inert(image, IMAGE_VARIABLE)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def gpuval_source() -> Path | None:
    """The source checkout this gpuval runs from (an editable install), or None (installed from a wheel)."""
    import gpuval

    root = Path(gpuval.__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    return root if pyproject.exists() and 'name = "gpuval"' in pyproject.read_text() else None


def install_gpuval_argv(source: str) -> list[str]:
    """Install gpuval into a container that lacks it, from the checkout at `source` (else from PyPI at this
    version); a no-op where the image already has it. It asks from / (`python -c` imports from its working
    folder: the job's, where anyone may have put a `gpuval/`)."""
    from gpuval import __version__

    target = source if source else f"gpuval=={__version__}"
    return ["sh", "-c", f'cd / && {{ python -c "import gpuval" 2>/dev/null || pip install --quiet {target}; }}']


def process_argv(spec: JobSpec, python: str | None) -> list[str]:
    """The argv of one process. Without an image, `gpuval` runs from `python` (the submitting interpreter), never
    shadowed by the job's working folder (node/unshadowed.py)."""
    argv = list(spec.command)
    if python and spec.image is None and argv[0] == "gpuval":
        return [*module_argv("gpuval", python), *argv[1:]]
    return argv


def mpirun_argv(spec: JobSpec, argv: list[str], nprocs: int, extra: list[str] | None = None) -> list[str]:
    """mpirun starting `nprocs` copies of argv, exporting the job's environment to every rank."""
    exports = [item for key in spec.full_env() for item in ("-x", key)]
    binding = [a.format(procs_per_node=spec.procs_per_node) for a in spec.network.mpi_args] if spec.network else []
    return ["mpirun", "-np", str(nprocs), *binding, *(extra or []), *exports, *argv]


def torchrun_argv(spec: JobSpec, argv: list[str], rdzv: list[str], python: str | None = None) -> list[str]:
    """torchrun starting procs_per_node copies of argv (as a program, not a Python script) on one node. Without an
    image it runs from `python` (the submitting interpreter, whose venv's bin need not be on the job's PATH), never
    shadowed by the job's working folder (node/unshadowed.py)."""
    program = module_argv("torch.distributed.run", python) if python and spec.image is None else ["torchrun"]
    return [*program, f"--nproc-per-node={spec.procs_per_node}", *rdzv, "--no-python", *argv]
