"""A multi-node NVLink job's ComputeDomain (NVIDIA's DRA driver for GPUs, `resource.nvidia.com/v1beta1`) and its pods'
claims on it (pure).

On a GB200/GB300 NVL72 rack GPU memory crosses trays through IMEX, and on Kubernetes the DRA driver runs the IMEX
daemons per ComputeDomain: while none exists, a tray has no IMEX domain and its pods no IMEX channel
(NVIDIA/aicr#2641), so NCCL cannot use multi-node NVLink. The shapes follow the driver's documented example exactly
(kubernetes-sigs/dra-driver-nvidia-gpu, demo/specs/imex/nvbandwidth-test-job.yaml, and its guide
site/content/docs/guides/compute-domain-workloads.md): the ComputeDomain names a ResourceClaimTemplate
(`spec.channel.resourceClaimTemplate.name`), which the driver's controller creates in the job's namespace; each GPU
pod lists a claim from that template (`spec.resourceClaims[].resourceClaimTemplateName`) and its container names the
claim (`resources.claims[].name`); the kubelet plugin then puts the channel /dev/nvidia-caps-imex-channels/channelN
into the container. The MPI launcher, which runs no GPU work, claims none (as in the example).

`numNodes` is the job's nodes. The CRD deprecates it and its guide sets 0 where the IMEXDaemonsWithDNSNames gate is
on (the default): there it only makes the ComputeDomain's `status.status` Ready once that many IMEX daemons are, so
`kubectl get computedomain` says whether the job's domain formed; where the gate is off, it must be the job's nodes
(the CRD's description). `allocationMode` is left to its default, Single: one channel per claim.
"""

from __future__ import annotations

from typing import Any

GROUP, VERSION, PLURAL = "resource.nvidia.com", "v1beta1", "computedomains"
CLAIM = "compute-domain-channel"  # the pods' name for their claim, the example's


def domain_name(job: str) -> str:
    """The job's ComputeDomain: named after the job, as its other objects, so cancel knows what to delete."""
    return f"{job}-compute-domain"


def channel_template(job: str) -> str:
    """The ResourceClaimTemplate the driver's controller makes for the job's ComputeDomain."""
    return f"{job}-compute-domain-channel"


def compute_domain(meta: dict[str, Any], job: str, nodes: int) -> dict[str, Any]:
    """The ComputeDomain of job `job` on `nodes` nodes, with object metadata `meta` (its name: domain_name)."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ComputeDomain", "metadata": meta,
            "spec": {"numNodes": nodes, "channel": {"resourceClaimTemplate": {"name": channel_template(job)}}}}


def pod_claims(job: str) -> list[dict[str, Any]]:
    """A GPU pod's `spec.resourceClaims`: one IMEX channel from the job's template."""
    return [{"name": CLAIM, "resourceClaimTemplateName": channel_template(job)}]


def container_claims() -> list[dict[str, Any]]:
    """Its container's `resources.claims`: the pod's claim, by name."""
    return [{"name": CLAIM}]
