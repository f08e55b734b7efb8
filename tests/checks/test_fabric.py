"""The nccl_transport check on the recorded nodes: real NCCL_DEBUG=INFO logs (tests/data/nccl-debug) judged by the
one transport verdict with the machine's fabric HCAs against the SKU's count, GPUDirect RDMA from the
channels NCCL built, and HCAs a container does not see as "could not run", never a hardware verdict.

GDR documents with the reader's new fields (gdr_capable, gdr_used, gdr_disabled, net_channels, nvls, collnet,
algorithms: the contract with the NCCL reader's rewrite) are built here as `Contract` documents until that reader
lands; the real logs run through the reader on this branch."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval.checks.base import REGISTRY
from gpuval.checks.fabric import IB_LOOPBACK_ENV, fabric_ports, judge_log, loopback_env
from gpuval.collectives.nccl_debug import NcclNetwork, read_nccl_network
from gpuval.results.model import Status
from tests.conftest import DATA
from tests.health_support import A100, H100, context, data_set, no_imds  # noqa: F401

LOGS = DATA / "nccl-debug"
ND40 = "Standard_ND40rs_v2"
DISABLED = "comp-0:88:157 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 42000 / HCA 0 (distance 6 > 4)"  # nccl#1657


@dataclass
class Contract(NcclNetwork):
    """An NCCL reader document with the fields the reader's rewrite adds (the contract this branch codes against)."""

    gdr_capable: bool | None = None
    gdr_used: bool | None = None
    gdr_disabled: list[str] = field(default_factory=list)
    net_channels: int = 0
    nvls: bool | None = None
    collnet: bool | None = None
    algorithms: list[str] = field(default_factory=list)


def _ib(**fields) -> Contract:
    line = "node-1:4242:4300 [0] NCCL INFO Using network IB"
    return Contract(transport="IB", evidence=line, network_name="IB", nccl_version="2.21.5", **fields)


def _judge(sku, log, change=None, **ctx_fields):
    ctx = context(sku, change, **ctx_fields)
    return judge_log(read_nccl_network((LOGS / log).read_text()), ctx, REGISTRY["nccl_transport"])


def _no_ports(data):
    data["ib_ports"] = []


def _no_sku(data):
    data["sku"] = None


def test_transport_ib_passes_on_h100():
    result = _judge(H100, "ib-roce-dgxh100.log", libibverbs=True)
    assert result.status is Status.PASS and result.value == "IB" and "Using network IB" in result.reason


def test_transport_ib_without_gdr_warns():
    result = _judge(A100, "ib-gdr-disabled.log", libibverbs=True)
    assert result.status is Status.WARN and "GPUDirect" in result.reason


def test_socket_on_a_node_with_hcas_fails_naming_the_causes():
    result = _judge(A100, "socket-ib-disabled-azureml.log", libibverbs=True, env={"NCCL_IB_DISABLE": "1"})
    assert result.status is Status.FAIL and result.expected == "IB"
    assert "NCCL_IB_DISABLE=1 is set" in result.reason and "Using network Socket" in result.reason
    no_dev = _judge(H100, "socket-no-libibverbs-skypilot.log", data_set("rdma_device_files", []), libibverbs=False,
                    env={})
    assert no_dev.status is Status.FAIL
    assert "/dev/infiniband is missing" in no_dev.reason and "libibverbs cannot be loaded" in no_dev.reason
    down = _judge(A100, "socket-old-aws-ring.log", lambda d: d["ib_ports"][1].update(state="DOWN"), libibverbs=True,
                  env={})
    assert "mlx5_ib0/1 DOWN" in down.reason


def test_sockets_are_expected_only_where_no_hca_is_expected():
    """A machine without HCAs whose SKU has none (here: no SKU at all) passes on sockets; an ND96asr_v4
    whose eight HCAs are not visible on the host fails (before: PASS "sockets expected")."""
    bare = _judge(A100, "socket-old-aws-ring.log", lambda d: (_no_ports(d), _no_sku(d)), env={})
    assert bare.status is Status.PASS and "sockets expected" in bare.reason
    hidden = _judge(A100, "socket-old-aws-ring.log", _no_ports, env={}, libibverbs=True)
    assert hidden.status is Status.FAIL and hidden.expected == "IB" and "fell back to TCP sockets" in hidden.reason


def test_hcas_hidden_by_a_container_are_could_not_run():
    def container(data):
        _no_ports(data)
        data["rdma_device_files"] = []
        data["container_markers"] = ["/.dockerenv", "/proc/self/cgroup names kubepods"]

    result = _judge(H100, "socket-no-libibverbs-skypilot.log", container, env={})
    assert result.status is Status.ERROR and result.value == "Socket"
    assert "not visible in this container" in result.reason and "/.dockerenv" in result.reason


def test_roce_ports_are_the_fabric_where_there_is_no_infiniband():
    """A RoCE GPU fabric (no SKU baseline, Ethernet-link RDMA ports) has HCAs: sockets there are a fault; on an
    InfiniBand SKU the Ethernet RDMA function (Azure's mlx5_an0) is never counted as the fabric."""
    def roce(data):
        _no_sku(data)
        for port in data["ib_ports"]:
            port["link_layer"] = "Ethernet"

    ctx = context(A100, roce)
    assert len(fabric_ports(ctx)) == 9
    result = _judge(A100, "socket-old-aws-ring.log", roce, env={}, libibverbs=True)
    assert result.status is Status.FAIL
    assert [p.hca for p in fabric_ports(context(A100))] == [f"mlx5_ib{i}" for i in range(8)]


def test_gdr_is_judged_from_the_channels_nccl_built():
    """Real logs: every channel via NET/IB/<n>/GDRDMA passes; channels without GDRDMA after "GPU Direct RDMA
    Disabled for HCA ... (no module)" warn."""
    used = _judge(A100, "gdr-channels-a100-nccl707.log", libibverbs=True)
    assert used.status is Status.PASS
    none = _judge(A100, "ib-no-gdr-module-nccl899.log", libibverbs=True)
    assert none.status is Status.WARN and "(no module)" in none.reason


def test_hca_capable_but_path_not_used_quotes_nccls_decision():
    """The HCA says Enabled, yet NCCL's per-path decision disabled GDR (a flattened Azure vPCI without
    NCCL_TOPO_FILE): the capability line alone must not pass it."""
    doc = _ib(gdr=True, gdr_capable=True, gdr_used=False, gdr_disabled=[DISABLED], net_channels=16)
    result = judge_log(doc, context(A100, libibverbs=True), REGISTRY["nccl_transport"])
    assert result.status is Status.WARN
    assert f'HCA capable, path not used: "{DISABLED}"' in result.reason
    assert result.details["gdr_used"] is False and result.details["gdr_disabled"] == [DISABLED]
    used = judge_log(_ib(gdr=True, gdr_capable=True, gdr_used=True, net_channels=16), context(A100),
                     REGISTRY["nccl_transport"])
    assert used.status is Status.PASS and "with GPUDirect RDMA on its network channels" in used.reason


def test_a_sku_without_gdr_by_design_passes_ib_without_it():
    """ND40rs_v2's HCA carries no GPUDirect RDMA (AzNHC runs its non-GDR IB test there): not a WARN."""
    def nd40(data):
        data["sku"] = ND40
        data["ib_ports"] = data["ib_ports"][:2]

    doc = _ib(gdr=False, gdr_capable=False, gdr_used=False, net_channels=4)
    result = judge_log(doc, context(A100, nd40, libibverbs=True), REGISTRY["nccl_transport"])
    assert result.status is Status.PASS and "without GPUDirect RDMA, as this SKU's HCAs are" in result.reason


def test_plugin_passes_and_missing_log_is_error():
    assert _judge(H100, "ofi-libfabric-p5en.log").status is Status.PASS
    result = judge_log(None, context(H100), REGISTRY["nccl_transport"])
    assert result.status is Status.ERROR


def test_nccl_transport_check_runs_on_a_recorded_log():
    log = (LOGS / "ib-roce-dgxh100.log").read_text()
    ctx = context(H100, data_set("measurements.nccl_debug_log", log), libibverbs=True)
    assert REGISTRY["nccl_transport"].run(ctx).status is Status.PASS
    assert REGISTRY["nccl_transport"].run(context(H100)).status is Status.SKIPPED


def test_loopback_env_turns_off_every_path_but_the_hcas():
    """P2P and SHM off do not stop NVLS or CollNet; AzNHC's loopback also forces Ring, relaxed
    ordering, PCI bus order and its topology file. The packaged ndv4-topo.xml goes in only where the machine names
    no topology file of its own."""
    env = loopback_env(context(A100, data_set("nccl_topology", None)))
    for key, value in {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
                       "NCCL_COLLNET_ENABLE": "0", "NCCL_ALGO": "Ring", "NCCL_IB_PCI_RELAXED_ORDERING": "1",
                       "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NCCL_DEBUG": "INFO"}.items():
        assert env[key] == value, key
    assert env["NCCL_TOPO_FILE"].endswith("recorded/ndv4-topo.xml")
    assert "NCCL_TOPO_FILE" not in loopback_env(context(A100))  # the node's own (recorded) topology file stays
    assert IB_LOOPBACK_ENV["NCCL_DEBUG_SUBSYS"].startswith("INIT,NET")


def test_the_loopback_figure_is_no_verdict_when_nccl_used_nvls_or_collnet(monkeypatch):
    """With NVLS or CollNet in use (the reader's `algorithms` / `collnet`), an IB-loopback figure is not
    the HCAs'; with every channel through the network it is."""
    import gpuval.checks.measure as measure

    docs = {"nvls": _ib(paths={"NET/IB": 16}, algorithms=["Ring", "NVLS"]),
            "collnet": _ib(paths={"NET/IB": 16}, collnet=True, algorithms=["Ring"]),
            "clean": _ib(paths={"NET/IB": 16}, algorithms=["Ring"], gdr_used=True)}
    for name, doc in docs.items():
        monkeypatch.setattr(measure, "read_nccl_network", lambda _text, doc=doc: doc)  # the log's document
        said = measure._off_fabric("the loopback's NCCL_DEBUG log")
        assert (said is None) == (name == "clean"), (name, said)
        if said:
            assert f"NCCL used {'NVLS' if name == 'nvls' else 'CollNet'} besides the network" in said
