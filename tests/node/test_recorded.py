"""The recorded machines' measurements are the published figures they cite, not numbers made to pass: the
ND96isr_H100_v5's GPU-to-GPU matrix is nvbandwidth's on that SKU cell for cell, its all_reduce AzNHC's figure."""

from __future__ import annotations

import re

from gpuval.node.recorded import recorded_data
from tests.conftest import DATA


def test_h100_recording_carries_nvbandwidths_read_matrix_and_aznhcs_allreduce():
    text = (DATA / "nvbandwidth" / "h100-nd96isr-v5-d2d-read-ce.txt").read_text()
    matrix = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 9 and cells[0].isdigit():
            for peer, cell in enumerate(cells[1:]):
                if cell != "N/A":  # row: the GPU that reads (the copy's destination context), column: its peer
                    matrix[f"{cells[0]}<-{peer}"] = float(cell)
    recorded = recorded_data("Standard_ND96isr_H100_v5")["measurements"]
    assert recorded["p2p_read_gbps"] == matrix and len(matrix) == 56
    log = (DATA / "nvbandwidth" / "aznhc-health-log-nd96isr-h100-v5.txt").read_text()
    assert float(re.search(r"NCCL all reduce bandwidth test passed, ([\d.]+) GB/s", log).group(1)) == \
        recorded["allreduce_busbw_gbps"]
