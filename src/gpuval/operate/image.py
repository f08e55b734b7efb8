"""The gpuval container image (built from the Dockerfile at the repository root): what the Kubernetes manifests run
when the user names no image.

The engines define the same default for their pyxis and Kubernetes paths; one of the two constants goes when the
branches meet (operate may import engines, so this one is the one to drop).
"""

from __future__ import annotations

import os
from typing import Mapping

from gpuval import __version__

IMAGE_REPOSITORY = "ghcr.io/gpuval/gpuval"


def default_image(env: Mapping[str, str] | None = None) -> str:
    """GPUVAL_IMAGE, else `ghcr.io/gpuval/gpuval:<this gpuval's version>` (the tag the Dockerfile's build is pushed
    with, so a node runs the gpuval it was rendered by)."""
    env = os.environ if env is None else env
    return env.get("GPUVAL_IMAGE") or f"{IMAGE_REPOSITORY}:{__version__}"
