"""p2p_bandwidth and hbm_bandwidth on the recorded nodes with measurers that return what a real node can: pairs
without peer access, reads that could not be measured, GPUs in MIG mode."""

from __future__ import annotations

from gpuval.checks.base import REGISTRY
from gpuval.checks.measured import PeerFigure
from gpuval.results.model import Status
from tests.health_support import A100, H100, context, gpu, no_imds  # noqa: F401


class Peers:
    """A measurer whose GPU pairs are given: (src, dst) -> (read, write); every other pair at 370/370."""

    def __init__(self, special: dict[tuple[int, int], tuple[float | None, float | None]]) -> None:
        self.special = special

    def p2p_bandwidth(self, gpus):
        return [PeerFigure(s, d, *self.special.get((s.index, d.index), (370.0, 370.0)))
                for s in gpus for d in gpus if s.index != d.index]


def test_no_peer_access_on_an_nvlink_sku_fails_naming_the_pair():
    result = REGISTRY["p2p_bandwidth"].run(context(H100, measurer=Peers({(2, 7): (None, None)})))
    assert result.status is Status.FAIL
    assert "GPU 7 (0000000C:00:00.0) <- GPU 2 (00000003:00:00.0): no peer access" in result.reason


def test_reads_not_measured_are_not_judged():
    everything = {(s, d): (None, 370.0) for s in range(8) for d in range(8)}
    result = REGISTRY["p2p_bandwidth"].run(context(H100, measurer=Peers(everything)))
    assert result.status is Status.SKIPPED and "read not measured" in result.reason


def test_mig_gpus_are_left_out_with_the_reason():
    """GPU 2 in MIG mode is not measured (its instances share it); the seven others are judged."""
    seen = []

    class Hbm:
        def hbm_bandwidth(self, gpus):
            from gpuval.checks.measured import HbmFigure

            seen.extend(g.index for g in gpus)
            return [HbmFigure(g, 4203.0, None) for g in gpus]

    def h200s(data):  # GPUs whose model has an HBM band of gpuval's own measurement (the H200 SXM), no SKU
        data["sku"] = None
        data["gpu_defaults"].update(pci_device_id=0x233510DE, pci_subsystem_id=0x18BF10DE)
        gpu(2, mig_current=True)(data)

    result = REGISTRY["hbm_bandwidth"].run(context(A100, h200s, measurer=Hbm()))
    assert result.status is Status.PASS and seen == [0, 1, 3, 4, 5, 6, 7]
    assert "GPU 2 (00000003:00:00.0) in MIG mode: not measured" in result.reason
