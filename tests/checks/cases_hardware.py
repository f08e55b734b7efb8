"""The pass / warn / fail / error / skipped rows of the fabric, counter, limit, perftest, DCGM and Xid-window
checks, for tests/checks/test_suite.py's matrix.

Each row changes the recorded A100 or H100 node with a real capture (tests/data/*/SOURCE.md) or one field of it:
nvidia-smi -q figures, published kernel logs, GPUd's InfiniBand tree, procfs's AER files, SuperBench's
ib_write_bw loopback, DCGM's pasted JSON, the stand-in values this machine really has (/dev/shm 24 GiB here,
ulimit -l 8 MiB here).
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

from gpuval.results.model import Status
from tests.conftest import DATA
from tests.health_support import A100, H100, data_set, gpu, unreadable
from tests.node.sysfs_trees import SYSFS
from tests.node.test_dcgm import dcgm3_fail_doc, dcgm3_skip_doc, dcgm4_doc

P, W, F, E, S = Status.PASS, Status.WARN, Status.FAIL, Status.ERROR, Status.SKIPPED
Change = Callable[[dict[str, Any]], None]
_DENIED = "NVML says Insufficient Permissions"


def changes(*steps: Change) -> Change:
    def apply(data: dict[str, Any]) -> None:
        for step in steps:
            step(data)
    return apply


def defaults(**fields: Any) -> Change:
    """Set fields every GPU of the recording shares."""
    def apply(data: dict[str, Any]) -> None:
        data["gpu_defaults"].update(copy.deepcopy(fields))
    return apply


def every_gpu_denied(field: str, **cleared: Any) -> Change:
    """NVML refused `field` on every GPU (no permission), the field itself unknown."""
    def apply(data: dict[str, Any]) -> None:
        data["gpu_defaults"].update(cleared)
        for g in data["gpus"]:
            g["unreadable"] = {field: f"could not read {field}: {_DENIED}"}
    return apply


def _log(name: str) -> list[str]:
    return (DATA / "kernel-log" / name).read_text().splitlines()


def _kernel(*names: str) -> Change:
    return data_set("kernel_log", [line for n in names for line in _log(n)])


def _no_ib(data: dict[str, Any]) -> None:
    data["ib_ports"] = [p for p in data["ib_ports"] if p["hca"] == "mlx5_an0"]
    data["rdma_device_files"] = []


def _port_counters(**values: int) -> Change:
    zeros = {"link_downed": 0, "link_error_recovery": 0, "local_link_integrity_errors": 0,
             "excessive_buffer_overrun_errors": 0, "symbol_error": 0}
    return lambda d: d["ib_port_defaults"].update(counters={**zeros, **values})


# AzNHC's syslogs with and without six carrier losses of ib6 on Aug 17; judged at noon that day
_FLAPS = changes(data_set("now", "2025-08-17T12:00:00+00:00"), data_set("boot_time", "2025-08-10T00:00:00+00:00"))


def _aer(**totals: int) -> Change:
    """procfs's AER files (all zero), with the TOTAL lines changed as given."""
    text = (SYSFS / "aer-short-names-procfs.ttar").read_text()
    files = {}
    for kind in ("correctable", "fatal", "nonfatal"):
        block = text.split(f"aer_dev_{kind}\n", 1)[1].split("Mode:", 1)[0]
        files[kind] = {line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in block.splitlines()[1:]
                       if line.strip()}
    for key, value in totals.items():
        kind = {"TOTAL_ERR_COR": "correctable", "TOTAL_ERR_FATAL": "fatal", "TOTAL_ERR_NONFATAL": "nonfatal"}[key]
        files[kind][key] = value
    return defaults(aer=files)


def _links(**errors: int) -> list[dict[str, int]]:
    """18 NVLinks with no error, but link 4 with the counts given."""
    return [{"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0, **(errors if i == 4 else {})} for i in range(18)]


def _perftest(average: str | None = None, hcas: int = 8) -> Change:
    """SuperBench's real NDv4 loopback output through each HCA (BW average 24056.72 MB/s), or one field changed."""
    text = (DATA / "perftest" / "ib_write_bw-8M-ndv4-superbench.log").read_text()
    if average:
        text = text.replace("24056.72", average)
    return data_set("perftest", {"ib_write_bw": {f"mlx5_ib{i}": text for i in range(hcas)}})


def _dcgm(level: int, text: str) -> Change:
    return data_set("dcgm_diag", {level: text})


def _dcgm4_with(**result: Any) -> str:
    doc = json.loads(dcgm4_doc())
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][1].update(result)
    return json.dumps(doc)


def _asked(level: int) -> Change:
    return data_set("_dcgm_level", level)


def _events(*events: dict[str, Any], notes: list[str] | None = None) -> Change:
    return changes(data_set("xid_events_during_run", list(events)), data_set("xid_watch_notes", notes or []))


_H100_BUSES = ("0001", "0002", "0003", "0008", "0009", "000a", "000b", "000c")  # ndv5-topo.xml, as the recording
_MULTICAST_OFF_GPU5 = data_set("cuda_attributes", {f"{b}:00:00.0": {"multicast_supported": 0 if b == "000a" else 1}
                                                   for b in _H100_BUSES})
_MIB = 2**20
TRAY = "gb200-tray"
_RACK = (DATA / "imex" / "imex-N-18-nodes-aws-pcluster.txt").read_text()


def _imex(channels: list[str] | None = None, domain: str = _RACK) -> Change:
    """The tray with a static IMEX domain (the service active): an 18-tray rack's published answer, a channel."""
    return data_set("imex", {"service": "active", "installed": True, "query": "READY", "domain": domain,
                             "channels": ["channel0"] if channels is None else channels})

CASES = [
    ("fabric", H100, None, P, "8/8 GPUs report the fabric completed"),
    ("fabric", A100, None, P, "nvidia-fabricmanager active"),
    ("fabric", H100, gpu(2, fabric={"state": "in_progress"}), W, "GPU 2 (00000003:00:00.0): fabric training in progress"),
    ("fabric", H100, _MULTICAST_OFF_GPU5, W, "NVLS multicast unavailable on GPU 5"),
    ("fabric", H100, gpu(4, fabric={"state": "not_started", "status": None}), F, "GPU 4 (00000009:00:00.0): fabric not started"),
    ("fabric", A100, data_set("fabric_manager", {"service": "failed"}), F, "nvidia-fabricmanager is failed"),
    ("fabric", A100, data_set("fabric_manager", {"service": "active", "version": "470.82.01"}), F,
     "fabric manager 470.82.01 is not driver 470.103.01"),
    ("fabric", H100, unreadable("cuda_attributes", "CUDA cannot start: system not yet initialized (CUDA error 802)"),
     F, "CUDA cannot start"),
    ("fabric", H100, gpu(2, fabric=None, unreadable={"fabric": f"could not read fabric: {_DENIED}"}), E, _DENIED),
    ("fabric", A100, data_set("sku", "Standard_ND40rs_v2"), S, "Standard_ND40rs_v2 has no NVSwitch"),
    ("fabric", A100, data_set("fabric_manager", None), S, "not judged"),
    # IMEX on the recorded GB200 tray (tests/checks/test_imex.py has the published answers and the applicability)
    ("imex", TRAY, _imex(), P, "IMEX domain UP, 18 node(s) READY and Connected"),
    ("imex", TRAY, _imex(channels=[]), F, "no IMEX channel under /dev/nvidia-caps-imex-channels"),
    ("imex", TRAY, _imex(domain=_RACK.replace("Domain State: UP", "")), E, "no 'Domain State:' line"),
    ("imex", H100, None, S, "IMEX does not apply"),
    ("power_limit", H100, None, P, "every GPU at its default power limit (700 W)"),
    ("power_limit", H100, gpu(3, power={"enforced_w": 500.0}), W, "GPU 3: enforced power limit 500 W is under"),
    ("power_limit", A100, defaults(power={"enforced_w": 250.0, "default_w": 250.0}), W, "under the warn limit 400 W"),
    ("power_limit", H100, every_gpu_denied("power", power={}), E, "could not run: GPU 0: could not read power"),
    ("power_limit", A100, defaults(power={}), S, "reports no power limits"),
    ("pcie_errors", H100, defaults(pcie={"replays": 7}), P, "PCIe replays 7 at most"),
    ("pcie_errors", H100, changes(defaults(pcie={"replays": 7}), _aer()), P, "no AER error over its limit"),
    ("pcie_errors", H100, gpu(0, pcie={"replays": 120}), W, "GPU 0 PCIe replays since its last reset: 120"),
    ("pcie_errors", A100, _aer(TOTAL_ERR_NONFATAL=2), W, "AER nonfatal errors since boot: 2"),
    ("pcie_errors", A100, _aer(TOTAL_ERR_FATAL=1), F, "AER fatal errors since boot: 1 errors is over the fail limit 0"),
    ("pcie_errors", H100, every_gpu_denied("pcie_replays"), E, "could not run"),
    ("pcie_errors", A100, None, S, "no PCIe replay counter"),
    ("nvlink_errors", H100, defaults(nvlink_errors=_links()), P, "no NVLink error over its limit on 8 GPUs (144 links)"),
    ("nvlink_errors", H100, gpu(2, nvlink_errors=_links(replay=3)), W, "GPU 2 NVLink replay errors: 3 errors"),
    ("nvlink_errors", A100, gpu(1, nvlink_errors=_links(crc_flit=2, crc_data=1)), W, "(link 4: 3)"),
    ("nvlink_errors", H100, gpu(6, nvlink_errors=_links(recovery=1)), F, "GPU 6 NVLink recovery errors: 1 errors"),
    ("nvlink_errors", H100, every_gpu_denied("nvlink_errors"), E, "could not run"),
    ("nvlink_errors", H100, None, S, "no NVLink error counters"),
    ("ib_errors", A100, changes(_port_counters(), _FLAPS, data_set("link_log", _log("syslog-0-flaps-aznhc"))), P,
     "0 link flaps in 24 h"),
    ("ib_errors", A100, changes(_port_counters(link_downed=1), _FLAPS, data_set("link_log", [])), W,
     "mlx5_ib0 port 1 link_downed: 1 events is over the warn limit 0"),
    ("ib_errors", A100, changes(_port_counters(symbol_error=100_000), _FLAPS), W, "symbol errors per hour since boot"),
    ("ib_errors", H100, changes(_port_counters(), _FLAPS, data_set("link_log", _log("syslog-6-flaps-aznhc"))), F,
     "ib6: 6 carrier losses in 24 h"),
    ("ib_errors", A100, unreadable("ib_ports", "cannot read /sys/class/infiniband"), E, "could not run"),
    ("ib_errors", A100, _no_ib, S, "no InfiniBand HCA"),
    ("ib_errors", A100, None, S, "no port counters and link flaps not read"),
    ("peermem", H100, data_set("kernel_modules", ["nvidia", "nvidia_peermem", "mlx5_ib"]), P, "nvidia_peermem is loaded"),
    ("peermem", H100, changes(data_set("kernel_modules", ["nvidia", "mlx5_ib"]), data_set("kernel_release", "5.15.0"),
                              data_set("cuda_attributes", {f"{b}:00:00.0": {"dma_buf_supported": 1}
                                                           for b in _H100_BUSES})), P,
     "every GPU support DMA-BUF"),
    ("peermem", A100, changes(data_set("kernel_modules", ["nvidia"]), data_set("kernel_release", "5.4.0-1109-azure")),
     W, "kernel 5.4.0-1109-azure is older than 5.12"),
    ("peermem", A100, unreadable("kernel_modules", "cannot read /proc/modules: Permission denied"), E, "could not run"),
    ("peermem", A100, _no_ib, S, "no InfiniBand HCA"),
    ("peermem", A100, None, S, "has no kernel module list recorded"),
    ("shm", H100, data_set("limits", {"memlock_bytes": None, "shm_bytes": 24 * 2**30}), P, "/dev/shm: 24576 MiB"),
    ("shm", H100, data_set("limits", {"memlock_bytes": None, "shm_bytes": 512 * _MIB}), W, "under the warn limit 1024"),
    ("shm", A100, data_set("limits", {"memlock_bytes": None, "shm_bytes": 64 * _MIB}), F, "under the fail limit 65"),
    ("shm", A100, data_set("limits", {"memlock_bytes": None, "shm_bytes": None}), F, "there is no /dev/shm"),
    ("shm", A100, unreadable("resource_limits", "cannot statvfs /dev/shm"), E, "could not run"),
    ("shm", A100, None, S, "has no process limits recorded"),
    ("memlock", H100, data_set("limits", {"memlock_bytes": None, "shm_bytes": 2**30}), P, "unlimited"),
    ("memlock", H100, data_set("limits", {"memlock_bytes": 8 * _MIB, "shm_bytes": 2**30}), W,
     "locked memory is limited to 8 MiB"),
    ("memlock", A100, unreadable("resource_limits", "cannot read the limits"), E, "could not run"),
    ("memlock", A100, _no_ib, S, "no RDMA device"),
    ("ib_write_bw", A100, _perftest(), P, "8 HCAs, slowest mlx5_ib0 201.8 Gb/s"),
    ("ib_write_bw", A100, _perftest("21000.00"), W, "under the warn limit 180 Gb/s"),
    ("ib_write_bw", A100, _perftest("19000.00"), F, "under the fail limit 171 Gb/s"),
    ("ib_write_bw", A100, changes(_perftest(), unreadable("perftest", "ib_write_bw -d mlx5_ib0 localhost failed: "
                                                                      "Couldn't allocate MR")),
     E, "could not run: mlx5_ib0: could not run"),
    ("ib_write_bw", A100, None, S, "ib_write_bw (perftest, linux-rdma/perftest) is not installed"),
    ("ib_write_bw", A100, changes(_perftest(), _no_ib), S, "no InfiniBand HCA"),
    ("dcgm_diag", H100, changes(_dcgm(3, dcgm4_doc()), _asked(3)), P, "dcgmi diag -r 3: 1 of 1 tests passed"),
    ("dcgm_diag", H100, changes(_dcgm(3, _dcgm4_with(warnings=[{
        "error_category": 1, "error_id": 40, "error_severity": 2, "warning": "Unable to allocate memory"}])),
        _asked(3)), W, "diagnostic GPU 1: passed with a warning: Unable to allocate memory (DCGM error 40)"),
    ("dcgm_diag", H100, changes(_dcgm(2, _dcgm4_with(status="Warn")), _asked(2)), W, "diagnostic GPU 1: warn"),
    ("dcgm_diag", H100, changes(_dcgm(3, dcgm3_fail_doc()), _asked(3)), F,
     "Diagnostic GPU 5: fail: GPU 5 Detected 511.70 GFLOPs"),
    ("dcgm_diag", H100, changes(_dcgm(1, "{}"), _asked(1),
                                unreadable("dcgm_diag", "dcgmi diag -r 1: Error: host engine is not running")),
     E, "could not run: dcgmi diag -r 1: Error: host engine is not running"),
    ("dcgm_diag", H100, None, S, "not asked: gpuval health --dcgm 1|2|3"),
    ("dcgm_diag", H100, _asked(2), S, "--dcgm 2: dcgmi is not installed"),
    ("dcgm_diag", A100, changes(_dcgm(3, dcgm3_skip_doc()), _asked(3)), S, "ran no test: all 5 were skipped"),
    ("xid_during_run", H100, _events(), P, "no Xid event while the suite ran"),
    ("xid_during_run", H100, _events({"xid": 13, "gpu": 2, "pci_bus_id": "00000003:00:00.0"}), W,
     "Xid 13 (Graphics Engine Exception) on PCI 0003:00:00.0 (GPU 2), 1 line: restart the application"),
    ("xid_during_run", A100, _events({"xid": 79, "gpu": 5, "pci_bus_id": "0000000C:00:00.0"},
                                     {"xid": 79, "gpu": 5, "pci_bus_id": "0000000C:00:00.0"}), F,
     "Xid 79 (GPU has fallen off the bus) on PCI 000c:00:00.0 (GPU 5), 2 lines: reboot the node"),
    ("xid_during_run", H100, _events(notes=["no NVML Xid events: Unknown Error",
                                            "kernel log not read: cannot read the kernel log"]), E, "could not run"),
    ("xid_during_run", H100, None, S, "has no run recorded to watch for Xid events"),
    ("xid", H100, _kernel("talos-xid154.txt"), F,
     "Xid 154 (GPU Recovery Action Changed) on PCI 0000:0b:00, 1 line: reset the GPU [Xid 154: GPU Reset Required]"),
    ("xid", A100, _kernel("dmesg-xid79-sxid20034-gpud.txt"), F, "4 fatal NVSwitch SXid event(s) [20034]"),
    ("xid", A100, _kernel("dmesg-T-xid43-31-94.txt"), W,
     "Xid 94 (Contained memory error) on PCI 0000:00:08, 1 line: restart the application [catalog: RESTART_APP]"),
    ("xid", H100, _kernel("journal-xid45.txt"), P,  # Xid 45 caused by 149 / 145: not solo, nothing to do
     "7 Xid or SXid line(s), none to act on by NVIDIA's Xid catalog"),
    ("xid", H100, gpu(6, recovery_action=2), F, "GPU 6 (0000000B:00:00.0): NVML's recovery action is node reboot"),
]

CANNOT = {
    ("imex", W): "IMEX is up or it is not: a domain not UP, a node not READY, a cell not Connected or no channel fails",
    ("power_limit", F): "a power limit under the board's is a setting, or a cap from outside the VM: warn at most",
    ("peermem", F): "without GPUDirect RDMA NCCL still runs over InfiniBand, slower: a warn, as nccl_transport's",
    ("memlock", F): "how much locked memory a job needs depends on it; NCCL's guide asks for unlimited: warn",
}
