"""The Azure VM size (SKU) of this machine, from the instance metadata service (IMDS).

IMDS answers only inside Azure, on 169.254.169.254. The endpoint is injectable (argument or GPUVAL_IMDS_ENDPOINT)
and the timeout short (1 s): off Azure, SKU detection costs at most a second and never fails a command.
"""

from __future__ import annotations

import functools
import os
import urllib.error
import urllib.request

DEFAULT_ENDPOINT = "http://169.254.169.254/metadata/instance/compute/vmSize?api-version=2021-02-01&format=text"
TIMEOUT_S = 1.0


def imds_vm_size(endpoint: str | None = None, timeout: float = TIMEOUT_S) -> str | None:
    """The VM size IMDS reports, e.g. 'Standard_ND96asr_v4'; None when IMDS does not answer in time."""
    url = endpoint or os.environ.get("GPUVAL_IMDS_ENDPOINT") or DEFAULT_ENDPOINT
    request = urllib.request.Request(url, headers={"Metadata": "true"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (fixed scheme)
            text = response.read(256).decode("utf-8", "replace").strip()
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return text or None


@functools.lru_cache(maxsize=8)
def _vm_size_once(url: str, timeout: float) -> str | None:
    # A VM's size does not change while a process runs: ask IMDS once per process, not once per record.
    return imds_vm_size(url, timeout)


def detect_sku(override: str | None = None, endpoint: str | None = None, timeout: float = TIMEOUT_S) -> str | None:
    """`--sku` first, then GPUVAL_SKU, then IMDS (asked once per process and endpoint); None when nothing says."""
    if override or os.environ.get("GPUVAL_SKU"):
        return override or os.environ.get("GPUVAL_SKU")
    return _vm_size_once(endpoint or os.environ.get("GPUVAL_IMDS_ENDPOINT") or DEFAULT_ENDPOINT, timeout)
