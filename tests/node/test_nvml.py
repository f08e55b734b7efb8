"""The NVML inventory and the CUDA -> NVML mapping against a stand-in pynvml that raises NVML's real exception
classes (tests/node/fake_nvml.py): each GPU opened on its own (a lost GPU fails only its own reads), MIG mode,
default application clocks, CUDA devices named by NVML index and bus id whatever CUDA_VISIBLE_DEVICES says."""

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
    assert gpus[1].mig_uuids == [] and gpus[0].mig_uuids == []
    assert (gpus[4].clocks.sm_application, gpus[4].clocks.sm_default, gpus[4].clocks.sm_max) == (1410, 1755, 1980)


def test_the_uuids_of_mig_instances_are_read_where_mig_is_on(monkeypatch):
    """What CUDA_VISIBLE_DEVICES names a MIG instance by: cuda_init holds a MIG- entry to these."""
    uuids = ["MIG-5c4a3d42-8f2a-5b5e-9d51-1a2b3c4d5e6f", "MIG-0e0c3f1a-77aa-5b6c-8d9e-0f1a2b3c4d5e"]
    install(monkeypatch, h100_node({1: {"mig": (1, 1), "mig_uuids": uuids}, 3: {"mig": (0, 1)}}))
    gpus = read_inventory().gpus
    assert gpus[1].mig_uuids == uuids and gpus[3].mig_uuids == []  # MIG only pending on GPU 3: no instance yet


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


# The H100 values below are those of a real capture (tests/data/nvidia-smi/h100-535.183.01-gpud.txt): 700 W
# enforced and default, 200-700 W, ECC split all 0, fabric completed with success, 120 PCIe replays.
_H100 = {"power_mw": (700_000, 700_000, 200_000, 700_000), "replays": 120, "sram_threshold": 0,
         "fabric": (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS, 0), "recovery_action": 0,
         "ecc_located": {(kind, counter, where): 0 for kind in (0, 1) for counter in (0, 1)
                         for where in (pynvml.NVML_MEMORY_LOCATION_SRAM, pynvml.NVML_MEMORY_LOCATION_DRAM)},
         "nvlink_errors": {}}


def test_readings_power_ecc_split_fabric_replays(monkeypatch):
    changed = {i: dict(_H100) for i in range(8)}
    changed[3] = {**_H100, "power_mw": (500_000, 700_000, 200_000, 700_000), "recovery_action": 1,
                  "fabric": (pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS, pynvml.NVML_SUCCESS, 0),
                  "nvlink_errors": {(5, pynvml.NVML_NVLINK_ERROR_DL_RECOVERY): 2}}
    changed[4] = {**_H100, "ecc_located": {**_H100["ecc_located"], (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                                      pynvml.NVML_VOLATILE_ECC,
                                                                      pynvml.NVML_MEMORY_LOCATION_SRAM): 3},
                  "sram_threshold": 1}
    install(monkeypatch, h100_node(changed))
    gpus = {g.index: g for g in read_inventory().gpus}
    g0 = gpus[0]
    assert (g0.power.enforced_w, g0.power.default_w, g0.power.min_w, g0.power.max_w) == (700.0, 700.0, 200.0, 700.0)
    assert g0.pcie.replays == 120 and g0.recovery_action == 0 and g0.ecc.sram_threshold_exceeded is False
    assert (g0.fabric.state, g0.fabric.status, g0.fabric.clique_id, g0.fabric.degraded_bandwidth) == (
        "completed", "success", 0, False)
    assert g0.ecc.sram_volatile_corrected == 0 and g0.ecc.dram_aggregate_uncorrected == 0
    assert gpus[3].power.enforced_w == 500.0 and gpus[3].recovery_action == 1 and gpus[3].fabric.state == "in_progress"
    [link5] = [e for e in gpus[3].nvlink_errors if e.recovery]
    assert (link5.link, link5.recovery, link5.replay) == (5, 2, 0) and len(gpus[3].nvlink_errors) == 18
    assert gpus[4].ecc.sram_volatile_uncorrected == 3 and gpus[4].ecc.sram_threshold_exceeded is True


def test_readings_power_ecc_fabric_unsupported_stay_unknown(monkeypatch):
    """A GPU or driver without these reads (the stand-in's defaults): None everywhere, nothing unreadable."""
    install(monkeypatch, h100_node())
    g = read_inventory().gpus[0]
    assert g.power.enforced_w is None and g.pcie.replays is None and g.fabric is None and g.nvlink_errors is None
    assert g.recovery_action is None and g.ecc.sram_volatile_corrected is None and not g.unreadable


def test_a_refused_power_read_is_unreadable_not_unsupported(monkeypatch):
    install(monkeypatch, h100_node({2: {"power_mw": (1, 1, 1, 1), "errors": {"power": pynvml.NVML_ERROR_NO_PERMISSION}}}))
    g = read_inventory().gpus[2]
    assert g.power.enforced_w is None and "Insufficient Permissions" in g.unreadable["power"]


def test_the_gpu_identity_is_read_and_names_its_model(monkeypatch):
    """pciDeviceId, pciSubSystemId and the default power limit are what the GPU-level baseline knows a GPU by."""
    from gpuval.baselines import identify
    from gpuval.checks.base import identity_of

    h200 = {"name": "NVIDIA H200", "device_id": 0x233510DE, "subsystem_id": 0x18BF10DE,
            "power_mw": (700_000, 700_000, 200_000, 700_000)}
    install(monkeypatch, h100_node({1: h200}))
    gpus = {g.index: g for g in read_inventory().gpus}
    assert (gpus[0].pci_device_id, gpus[0].pci_subsystem_id) == (0x233010DE, 0x16C110DE)
    assert (gpus[1].pci_device_id, gpus[1].pci_subsystem_id) == (0x233510DE, 0x18BF10DE)
    model, board, how = identify(identity_of(gpus[1]))
    assert model.key == "h200_sxm" and board.power_w == 700 and how == "PCI device 0x2335, subsystem 0x18BF10DE"
    assert identify(identity_of(gpus[0]))[0].key == "h100_sxm5"
