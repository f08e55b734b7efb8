"""A fleet drain and a node's quick pass race on Kubernetes: the fleet read the node tainted (ECC_ERRORS) and
patches only its annotation (adding FLEET_NODE_SLOW); between its read and its patch a quick pass that re-checked
ECC_ERRORS removes the taint. Every patch carries the resourceVersion read, so the stale one is refused (409), and
the fleet reads the node again and decides again: it taints it. Against kmock, an in-memory Kubernetes API (no API
server runs here): kmock keeps no resourceVersion, so tests/helpers/kube.enforce_resource_version answers as a real
API server does (409 to a stale version)."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client

from gpuval.operate.codes import Acted
from gpuval.engines.kubernetes.nodes import KubernetesNodes
from gpuval.engines.nodes import FAULTS_ANNOTATION, TAINT_KEY, NodePolicy
from gpuval.operate.node_state import apply
from gpuval.results.model import Status
from tests.helpers.kube import enforce_resource_version

NODES = "v1/nodes"
OWN = {"key": TAINT_KEY, "effect": "NoSchedule"}


class _ReadThenWait(KubernetesNodes):
    """The fleet's client: after its read and before its patch, `meanwhile` runs once (the quick pass)."""

    def __init__(self, api: client.ApiClient, meanwhile) -> None:
        super().__init__(lambda: api)
        self.meanwhile = meanwhile

    def edit(self, node: str, policy: NodePolicy) -> None:
        outer = self

        class Late:
            def slurm(self, seen):
                raise AssertionError("a Kubernetes node")

            def kubernetes(self, seen):
                if outer.meanwhile is not None:
                    run, outer.meanwhile = outer.meanwhile, None
                    run()
                return policy.kubernetes(seen)

        super().edit(node, Late())


@pytest.mark.asyncio
async def test_a_fleet_drain_is_decided_again_when_a_quick_pass_untainted_the_node_meanwhile(kmock):
    kmock.resources[NODES] = {"kind": "Node", "namespaced": False}
    api = client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))
    await asyncio.to_thread(client.CoreV1Api(api).create_node, {
        "apiVersion": "v1", "kind": "Node", "spec": {"taints": [OWN]},
        "metadata": {"name": "g1", "resourceVersion": "41", "annotations": {FAULTS_ANNOTATION: "ECC_ERRORS"}}})
    enforce_resource_version(kmock, NODES, "g1")

    def quick_pass() -> None:
        done = apply(Status.PASS, "g1", "20261126T000000Z-90c1c1", [], KubernetesNodes(lambda: api),
                     rechecked=["ECC_ERRORS"])
        assert done.action == Acted.UNTAINTED

    fleet = await asyncio.to_thread(apply, Status.FAIL, "g1", "20261126T000100Z-f1ee71", ["FLEET_NODE_SLOW"],
                                    _ReadThenWait(api, quick_pass))
    node = kmock.objects[NODES, None, "g1"].raw
    patches = [r for r in kmock if r.method == "PATCH"]
    assert node["spec"]["taints"] == [OWN] and node["metadata"]["annotations"][FAULTS_ANNOTATION] == "FLEET_NODE_SLOW"
    assert fleet.action == Acted.TAINTED, fleet
    assert all("resourceVersion" in p.data["metadata"] for p in patches)  # the annotation-only one too
