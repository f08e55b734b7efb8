"""The readers on real published logs as users paste and collect them (tests/data/*/SOURCE.md names each source):
launcher prefixes (Open MPI --tag-output, srun -l, MPICH -prepend-rank, SkyPilot, pdsh, timestamps), pastes that
start at `# Using devices` or at the column header, nccl-tests 2.18/2.19 headers, cut-off and failed runs, NCCL
versions without "Using network", network plugins (OFI, IBext, FastSocket, Tencent RDMA), GDR, NVLS, CollNet, and
LAMMPS logs from 2007 to 2025. Every file is read through `parse_file`, what `gpuval parse` and `import` use."""

from __future__ import annotations

import pytest

from gpuval.errors import UsageError
from gpuval.workloads.ingest import parse_file
from tests.conftest import DATA


def _docs(kind: str, name: str, of: str) -> list:
    return [doc for reader, doc in parse_file(DATA / kind / name) if reader.kind == of]


@pytest.mark.parametrize("name, collective, nranks, rows, peak, avg, hosts", [
    ("awsbatch-tag-output-from-header.txt", "all_reduce", None, 32, 483.35, 156.742, []),
    ("mpich-prepend-rank-prefix-inside-rows.txt", "all_reduce", None, 10, 29.5, None, []),
    ("mpijob-tag-output-efa-t4.txt", None, 2, 31, 3.15, 1.15327, ["test-nccl-efa-worker-0", "test-nccl-efa-worker-1"]),
    ("mpijob-tag-output-old-error-column-16rank.txt", "all_reduce", 16, 30, 43.81, 11.2432, []),
    ("mpijob-tag-output-socket-elided-with-dots.txt", None, None, 31, 2.03, 0.733914, []),
    ("nccl-tests-2.19.4-a100-8gpu-single-process.txt", "all_reduce", 8, 25, 182.9, 34.9024, ["dkh"]),
    ("nccl-tests-2.19.6-gb10-2node-allgather.txt", "all_gather", 2, 6, 24.2, 22.1205, ["spark-101", "spark-102"]),
    ("nccl-tests-2.19.7-h200-cut-off-after-2-rows.txt", "all_reduce", 4, 2, 356.04, None, ["nccltest08192"]),
    ("skypilot-gke-h200-tag-output-allgather.txt", None, 16, 24, 332.58, 122.073,
     ["nc-d87e1263-head", "nc-d87e1263-worker1"]),
    ("srun-l-h100-2node-validation-off-NA.txt", "all_reduce", 16, 11, 167.87, 142.735, ["node005", "node007"]),
    ("srun-l-p4de-from-header-no-footer.txt", "all_reduce", None, 29, 78.33, None, []),
    ("srun-l-p5-from-header-no-footer.txt", "all_reduce", None, 32, 487.26, None, []),
    ("srun-l-starts-at-using-devices.txt", "all_reduce", 16, 11, 102.27, 85.5294, ["node005", "node007"]),
    ("tag-output-nccl-tests-2.18.0-rtx5090.txt", "all_reduce", 2, 8, 2.31, 1.57614, ["lab"]),
])
def test_nccl_tests_logs_as_pasted(name, collective, nranks, rows, peak, avg, hosts):
    [doc] = _docs("nccl-tests", name, "nccl-tests")
    table = doc.table
    assert (table.collective, table.nranks, len(table.rows)) == (collective, nranks, rows)
    assert table.peak().best_busbw() == peak
    assert table.avg_busbw == avg
    assert table.hosts[:2] == hosts


def test_validation_off_prints_na_and_no_wrong_count():
    [doc] = _docs("nccl-tests", "srun-l-h100-2node-validation-off-NA.txt", "nccl-tests")
    assert all(row.nwrong() is None for row in doc.table.rows)


def test_mpich_tags_inside_rows_are_not_figures():
    [doc] = _docs("nccl-tests", "mpich-prepend-rank-prefix-inside-rows.txt", "nccl-tests")
    first = doc.table.rows[0]
    assert (first.size, first.root, first.out_of_place.time, first.in_place.time) == (1048576, -1, 1626.5, 2302.3)


def test_fragments_and_failed_runs_hold_no_table():
    with pytest.raises(UsageError, match="no test or log gpuval can read"):
        parse_file(DATA / "nccl-tests" / "nccl-tests-2.19.7-h200-cuda-failure-no-rows.txt")
    # a row's tail with an NCCL tuning line joined on: no row, but NCCL's algorithm choice (Algo 0 = Tree)
    found = parse_file(DATA / "nccl-tests" / "mpich-prepend-rank-info-line-inside-row.txt")
    assert [(reader.kind, doc.algorithms) for reader, doc in found] == [("nccl-debug", ["Tree"])]


def test_tag_output_log_carries_its_network_too():
    [net] = _docs("nccl-tests", "mpijob-tag-output-efa-t4.txt", "nccl-debug")
    assert (net.transport, net.network_name, net.ranks) == ("OFI", "AWS Libfabric", 2)
    [sock] = _docs("nccl-tests", "mpijob-tag-output-socket-elided-with-dots.txt", "nccl-debug")
    assert sock.transport == "Socket"


@pytest.mark.parametrize("name, transport, network, hosts, gdr, gdr_capable, gdr_used, net_channels", [
    ("gdr-disabled-no-module-ib-nccl-issue899.log", "IB", "IB", ["21346d5cefce", "6a5a91752e39"], False, False, False,
     11),
    ("ib-nccl-2.4.8-ring-no-using-network.log", "IB", "IB", ["node01"], None, None, False, 2),
    ("ib-pdsh-deepspeed-host-prefix.log", "IB", "IB", ["gadi-gpu-v100-0010", "gadi-gpu-v100-0062"], None, None, False,
     2),
    ("ibext-sharp-collnet-plugin-nccl-issue1357.log", "IB", "IBext", ["qh100-gpu19", "qh100-gpu20"], None, None, None,
     0),
    ("ofi-gdrdma-tag-output-p4d-nccl2.9.9.log", "OFI", "AWS Libfabric",
     ["nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1"], True, None, True, 12),
    ("ofi-plugin-fails-socket-fallback-warn-timestamps-nccl2.27.3.log", "Socket", "Socket", ["llama-3-8b-node-0-0"],
     None, None, False, 4),
    ("tencent-rdma-plugin-v6-ibext-load-nccl2.26.5.log", "IB", "NCCL RDMA Plugin v6", ["vm-host40", "vm-host38"], None,
     None, None, 0),
    ("tencent-rdma-plugin-v6-pxn-gdrdma-shared-alltoall.log", "IB", "NCCL RDMA Plugin v6", ["vm-host40", "vm-host38"],
     True, None, True, 32),
])
def test_nccl_debug_logs_of_many_versions_and_plugins(name, transport, network, hosts, gdr, gdr_capable, gdr_used,
                                                      net_channels):
    [net] = _docs("nccl-debug", name, "nccl-debug")
    assert (net.transport, net.network_name, net.hosts[:2]) == (transport, network, hosts)
    assert (net.gdr, net.gdr_capable, net.gdr_used, net.net_channels) == (gdr, gdr_capable, gdr_used, net_channels)
    assert net.evidence in (DATA / "nccl-debug" / name).read_text()  # the line as NCCL wrote it


def test_no_device_after_no_device_found_is_sockets_not_ib():
    [net] = _docs("nccl-debug", "ofi-plugin-fails-socket-fallback-warn-timestamps-nccl2.27.3.log", "nccl-debug")
    assert net.no_ib_device and net.transport == "Socket"
    assert any(d.startswith("[RO]") for d in net.devices)
    assert net.algorithms == ["Ring"]


def test_old_nccl_without_using_network_reads_the_net_lines():
    [net] = _docs("nccl-debug", "ib-nccl-2.4.8-ring-no-using-network.log", "nccl-debug")
    assert net.evidence.endswith("NET/IB : Using [0]mlx4_0:1/IB ; OOB ib0:192.168.33.11<0>")
    assert net.nccl_version == "2.4.8" and net.paths == {"NET/IB": 2}


def test_gdr_nvls_collnet_evidence():
    [far] = _docs("nccl-debug", "gdr-disabled-distance-nccl-issue1657.log", "nccl-debug")
    assert far.gdr_disabled == ["aigc-maas-instance-leader-0:88:157 [0] NCCL INFO GPU Direct RDMA Disabled for GPU "
                                "42000 / HCA 0 (distance 6 > 4)"]
    [fast] = _docs("nccl-debug", "fastsocket-plugin-gdr-disabled-nccl-issue1519.log", "nccl-debug")
    assert (fast.gdr, fast.gdr_capable) == (False, False) and "NET/FastSocket" in fast.gdr_evidence
    [mcast] = _docs("nccl-debug", "nvls-multicast-mpich-rank-prefix-nccl-issue1453.log", "nccl-debug")
    assert (mcast.nvls, mcast.hosts) == (True, ["h100clust-worker-1"])
    [tree] = _docs("nccl-debug", "nvls-tree-tag-output-p5.log", "nccl-debug")
    assert (tree.nvls, tree.algorithms) == (True, ["NVLSTree"])
    [sharp] = _docs("nccl-debug", "collnet-sharp-lines-interleaved-nccl-issue1219.log", "nccl-debug")
    assert sharp.collnet is True and sharp.paths == {"COLLNET": 1}
    [pdsh] = _docs("nccl-debug", "ib-pdsh-deepspeed-host-prefix.log", "nccl-debug")
    assert pdsh.algorithms == ["Tree"]


@pytest.mark.parametrize("name, version, procs, steps, atoms, timesteps, derived", [
    ("gpu-hip-19Jul19-melt-4000atoms-1proc.log", "19 Jul 2019", 1, 250, 4000, 3014.189, ["atom_steps_per_s"]),
    ("kokkos-22Jul25u4-run0-no-performance-line.log", "22 Jul 2025 - Update 4", 1, 0, 216, 0.0,
     ["timesteps_per_s", "atom_steps_per_s"]),
    ("kokkos-cuda-17Apr24dev-reaxff-32gpus-matom.out", "17 Apr 2024 - Development - a8687b5", 32, 100, 19922944, 2.5,
     []),
    ("kokkos-cuda-29Aug24u1-lj-500atoms.log", "29 Aug 2024 - Update 1", 1, 1000, 500, 1432.166, []),
    ("log.15May15.melt.g++.4", "30 Apr 2015", 4, 250, 4000, 1183.432, ["timesteps_per_s", "atom_steps_per_s"]),
    ("log.27Nov18.melt.g++.4", "27 Nov 2018", 4, 250, 4000, 1119.426, ["atom_steps_per_s"]),
    ("log.melt.12Feb07.liberty.4", "12 Feb 2007", 4, 250, 32000, 30.132, ["timesteps_per_s", "atom_steps_per_s"]),
])
def test_lammps_logs_2007_to_2025(name, version, procs, steps, atoms, timesteps, derived):
    [run] = _docs("lammps", name, "lammps")
    assert (run.version, run.procs, run.steps, run.atoms) == (version, procs, steps, atoms)
    assert round(run.timesteps_per_s, 3) == timesteps and run.derived == derived


def test_lammps_matom_and_katom_figures():
    [reax] = _docs("lammps", "kokkos-cuda-17Apr24dev-reaxff-32gpus-matom.out", "lammps")
    assert reax.atom_steps_per_s == 49.801e6 and reax.units == "real"
    [lj] = _docs("lammps", "kokkos-cuda-29Aug24u1-lj-500atoms.log", "lammps")
    assert lj.atom_steps_per_s == 716.083e3


@pytest.mark.parametrize("name, why", [
    ("gpu-hip-19Jul19-melt-4M-atoms-10proc-interrupted.log", "the output stops at: 50    1.6689472"),
    ("kokkos-17Apr24dev-snap-256nodes-cut-off-midrow.out", "Terminated"),
])
def test_lammps_runs_that_never_finished_say_where_they_stop(name, why):
    with pytest.raises(UsageError, match="LAMMPS log without a finished run") as err:
        parse_file(DATA / "lammps" / name)
    assert why in str(err.value)


def test_lammps_banner_fragment_alone_is_not_a_log():
    with pytest.raises(UsageError, match="no test or log gpuval can read"):
        parse_file(DATA / "lammps" / "gpu-package-banner-fragment-02Aug23-h100-nrel.txt")


def test_a_log_without_the_network_line_is_read_but_not_judged():
    """An NVLS-only excerpt says nothing of the network: `parse` shows it, `import` stores no transport verdict
    (an ERROR "could not run" would blame a node for a paste)."""
    from gpuval.workloads.ingest import Origin, import_file

    found = import_file(DATA / "nccl-debug" / "nvls-multicast-mpich-rank-prefix-nccl-issue1453.log", Origin("r"))
    assert found.error is None and found.records == []
