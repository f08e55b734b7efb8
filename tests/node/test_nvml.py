"""The NVML inventory and the CUDA -> NVML mapping against a stand-in pynvml that raises NVML's real exception
classes (tests/node/fake_nvml.py): each GPU opened on its own (review F1), MIG mode (F17), default application
clocks (F13), CUDA devices named by NVML index and bus id whatever CUDA_VISIBLE_DEVICES says (F3)."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml

from gpuval.node.gpus import cuda_ids, nvml_gpus_of
from gpuval.node.nvml import read_inventory
from tests.node.fake_nvml import h100_node, install


def test_a_lost_gpu_is_kept_apart_and_the_others_are_read(monkeypatch):
    install(monkeypatch, h100_node({2: {"errors": {"handle": pynvml.NVML_ERROR_GPU_IS_LOST}},
                                    6: {"errors": {"handle": pynvml.NVML_ERROR_NO_PERMISSION}}}))
    inv = read_inventory()
    assert [g.index for g in inv.gpus] == [0, 1, 3, 4, 5, 7]
    [lost] = inv.lost
    assert lost.index == 2 and lost.lost and lost.error == "NVML says GPU is lost" and lost.pci_bus_id == ""
    [other] = inv.not_ours
    assert other.index == 6 and "Insufficient Permissions" in other.error and not other.lost
    assert inv.driver_version == "550.54.15" and inv.cuda_version == "12.4"


def test_a_gpu_lost_while_it_is_read_is_lost_not_a_crash(monkeypatch):
    install(monkeypatch, h100_node({4: {"errors": {"pci": pynvml.NVML_ERROR_GPU_IS_LOST}},
                                    5: {"errors": {"handle": pynvml.NVML_ERROR_UNKNOWN}}}))
    inv = read_inventory()
    assert [(g.index, g.error) for g in inv.lost] == [(4, "NVML says GPU is lost"), (5, "NVML says Unknown Error")]
    assert len(inv.gpus) == 6


def test_mig_mode_and_default_application_clocks_are_read(monkeypatch):
    install(monkeypatch, h100_node({1: {"mig": (1, 1)}, 3: {"mig": (0, 1)}, 4: {"sm_app": 1410}}))
    gpus = {g.index: g for g in read_inventory().gpus}
    assert (gpus[1].mig_current, gpus[1].mig_pending) == (True, True)
    assert (gpus[3].mig_current, gpus[3].mig_pending) == (False, True)  # MIG on after the next reset
    assert gpus[0].mig_current is None  # this GPU has no MIG at all
    assert (gpus[4].clocks.sm_application, gpus[4].clocks.sm_default, gpus[4].clocks.sm_max) == (1410, 1755, 1980)


def test_cuda_devices_are_named_by_nvml_index_and_bus_id(monkeypatch):
    """CUDA_VISIBLE_DEVICES=2,1,7,... (the NDv4 preset) makes CUDA device 0 physical GPU 2: the mapping says so,
    by UUID as torch reports it (no "GPU-" prefix), or by PCI bus id when the UUID is not NVML's (MIG)."""
    install(monkeypatch, h100_node({2: {"uuid": "GPU-6e5c1c1e-aaaa-bbbb-cccc-000000000002"}}))
    cuda0 = SimpleNamespace(pci_domain_id=3, pci_bus_id=0, pci_device_id=0,
                            uuid="6e5c1c1e-aaaa-bbbb-cccc-000000000002")
    cuda1 = SimpleNamespace(pci_domain_id=0x0b, pci_bus_id=0, pci_device_id=0, uuid="MIG-not-nvml")
    assert cuda_ids(cuda0) == ("0003:00:00.0", "6e5c1c1e-aaaa-bbbb-cccc-000000000002")
    first, second, unknown = nvml_gpus_of([cuda_ids(cuda0), cuda_ids(cuda1), ("00ff:00:00.0", None)])
    assert first.label() == "GPU 2 (0003:00:00.0)"
    assert (second.index, second.pci_bus_id) == (6, "000b:00:00.0")
    assert unknown is None
