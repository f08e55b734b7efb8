"""The engine registry is one table (engines/__init__.py `_ENGINES`): every engine is found there by name and hands
out the rest itself, its fleet check's Site and the client of its nodes, also to a caller that holds no engine
(`health --drain`, `gpuval nodes`). Pure: nothing here reaches a scheduler (a kubeconfig file is read, and its
context asked for, without a connection)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuval.engines import get_engine, node_client
from gpuval.engines.azureml import AZUREML_REFUSAL
from gpuval.engines.kubernetes.nodes import KubernetesNodes
from gpuval.engines.kubernetes.site import KubernetesSite
from gpuval.engines.site import Site
from gpuval.engines.slurm.nodes import SlurmNodes
from gpuval.engines.slurm.site import SlurmSite
from gpuval.errors import EngineError, UsageError


def test_each_engine_hands_out_its_site_or_says_why_it_has_none():
    """local, slurm and kubernetes hand out their own Site (Kubernetes with the SKU and the switch and rack labels
    it reads); Azure ML refuses with its reason; a switch label on a site whose switches come from elsewhere is
    refused, as is a rack label."""
    assert type(get_engine("local").site()) is Site
    assert type(get_engine("slurm").site()) is SlurmSite
    kube = get_engine("kubernetes").site("Standard_ND96isr_H100_v5", "topology.example/leaf", "nvidia.com/gpu.clique")
    assert isinstance(kube, KubernetesSite) and (kube.sku, kube.switch_label, kube.rack_label) == (
        "Standard_ND96isr_H100_v5", "topology.example/leaf", "nvidia.com/gpu.clique")
    with pytest.raises(UsageError) as refused:
        get_engine("azureml").site()
    assert str(refused.value) == AZUREML_REFUSAL
    for name, where in (("slurm", "Slurm's switches come from its topology"), ("local", "no switch")):
        with pytest.raises(UsageError, match=f"--switch-label names a Kubernetes node label; .*{where}"):
            get_engine(name).site(switch_label="leaf")
        with pytest.raises(UsageError, match="--rack-label names a Kubernetes node label"):
            get_engine(name).site(rack_label="nvidia.com/gpu.clique")


def test_a_node_client_by_name_is_the_one_its_engine_hands_out_with_the_engines_options(tmp_path: Path,
                                                                                          monkeypatch):
    """`node_client(NAME, OPTIONS)` is what the engine of NAME, made with OPTIONS, hands out: Kubernetes' asks for
    the kubeconfig context named in its options (`gpuval nodes --context`); a name that is no scheduler (an engine
    without nodes of its own, or none) and an option the engine does not take are each a one-line error, as is
    `--drain` on an engine without nodes (the base class's refusal)."""
    assert type(node_client("slurm")) is SlurmNodes
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": n, "cluster": {"server": f"http://127.0.0.1:{port}"}} for n, port in (("a", 9), ("b", 7))],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "u"}} for n in ("a", "b")],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    chosen = node_client("kubernetes", {"context": "b"})
    assert isinstance(chosen, KubernetesNodes) and chosen.connect().configuration.host == "http://127.0.0.1:7"
    with pytest.raises(EngineError, match="Expected object with name nosuch"):
        node_client("kubernetes", {"context": "nosuch"}).connect()
    for name in ("pbs", "local"):
        with pytest.raises(UsageError, match=f"unknown scheduler '{name}': use slurm or kubernetes"):
            node_client(name)
    with pytest.raises(UsageError, match="--drain: the local engine has no pool"):  # a fleet check's --drain
        get_engine("local").node_client()
    with pytest.raises(UsageError, match="slurm option context"):
        node_client("slurm", {"context": "b"})

