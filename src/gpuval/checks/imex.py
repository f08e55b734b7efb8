"""IMEX, where it applies (docs/nvl72.md): the service that exports GPU memory across the trays of a multi-node
NVLink domain. Applicability is half the check, because the loudest complaints about peers are IMEX failures where
none was expected: a single-node p5.48xlarge (NVIDIA/NVSentinel#1471) and idle GB300 trays whose IMEX daemons exist
only while a Kubernetes ComputeDomain does (NVIDIA/aicr#2641, where NVLS all-reduce measured 843 GB/s on the
"unhealthy" nodes). So IMEX is judged:
- only on GPUs of a multi-node NVLink domain (checks.fabric_domain.multi_node): never on an HGX box;
- under Slurm, only inside a job that holds an IMEX channel (switch/nvidia_imex, or a prolog, gives it one);
- in a Kubernetes pod, only where the pod holds a ComputeDomain channel;
- on a node outside both, only where the nvidia-imex service runs (a static domain): a tray where it does not, and
  no channel exists, waits for a job or a ComputeDomain and is not judged.
Where it applies: this node's daemon READY, every node of the domain READY, every From/To cell Connected, the domain
UP (NVIDIA IMEX guide; Crusoe: "If 'C' appears for all nodes ... passed"), and a channel device present.
"""

from __future__ import annotations

from dataclasses import asdict

from gpuval.checks.base import Check, CheckContext, CheckResult, NotApplicable, check, worst
from gpuval.checks.fabric_domain import multi_node
from gpuval.node.imex import IMEX_CHANNELS, ImexDomain, ImexHost, parse_domain, parse_query
from gpuval.results.model import Status

Finding = tuple[Status, str]
_SHOWN = 6  # broken From/To cells named in a reason; the record keeps them all


def _why_not_here(ctx: CheckContext, host: ImexHost) -> str | None:
    """Why IMEX is not expected on this node now (None: it is)."""
    job = ctx.env.get("SLURM_JOB_ID")
    if job:
        return None if host.channels else (f"Slurm job {job} holds no IMEX channel: IMEX is per job here "
                                           "(switch/nvidia_imex or a prolog gives one), not judged")
    if ctx.env.get("KUBERNETES_SERVICE_HOST"):
        return None if host.channels else ("this pod holds no ComputeDomain channel: on Kubernetes IMEX exists only "
                                           "while a ComputeDomain does (NVIDIA/aicr#2641), not judged")
    if host.service in ("active", "activating", "reloading"):
        return None
    state = host.service or f"state unknown: {host.detail}"
    return (f"nvidia-imex is not running here ({state}) and no IMEX domain is formed: this tray's domain is made "
            "per job or per ComputeDomain, none now (an idle tray is not judged)")


def _daemon(host: ImexHost) -> list[Finding]:
    if host.query is None:
        return [(Status.ERROR, f"could not run nvidia-imex-ctl -q: {host.detail or 'no answer'}")]
    state = parse_query(host.query)
    return [] if state == "READY" else [(Status.FAIL, f"this node's IMEX daemon is {state}, not READY")]


def _domain(domain: ImexDomain) -> list[Finding]:
    found: list[Finding] = []
    if domain.state != "UP":
        found.append((Status.FAIL, f"IMEX domain state {domain.state} (of {len(domain.peers)} nodes), not UP"))
    found += [(Status.FAIL, f"IMEX {p.name} is {p.status}") for p in domain.not_ready()]
    broken = domain.broken()
    if broken:
        shown = "; ".join(f"{a.name} -> {b.name}: {what}" for a, b, what in broken[:_SHOWN])
        more = f" and {len(broken) - _SHOWN} more" if len(broken) > _SHOWN else ""
        found.append((Status.FAIL, f"{len(broken)} IMEX connection(s) not Connected: {shown}{more}"))
    return found


def _channels(host: ImexHost) -> list[Finding]:
    if host.channels:
        return []
    return [(Status.FAIL, f"no IMEX channel under /{IMEX_CHANNELS}: fabric memory cannot be imported "
                          "(cuMemCreate fails with CUDA_ERROR_NOT_PERMITTED, NVIDIA/nvbandwidth#39)")]


@check("imex", "IMEX_NOT_READY")
def imex(ctx: CheckContext, me: Check) -> CheckResult:
    """IMEX where this node's GPUs are in a multi-node NVLink domain and a domain is expected now: the daemon READY,
    every node of the domain READY and Connected to every other, the domain UP, an IMEX channel present."""
    inv = ctx.inventory()
    fabric = dict((ctx.baseline.raw.get("fabric") if ctx.baseline else None) or {})
    why = multi_node(inv, fabric)
    if why is None:
        raise NotApplicable("no multi-node NVLink domain here (no NVL72 tray GPU, no fabric clique): IMEX does not "
                            "apply (NVIDIA/NVSentinel#1471)")
    host = ctx.machine.imex()
    if (away := _why_not_here(ctx, host)) is not None:
        raise NotApplicable(away)
    findings = _channels(host)
    if not host.installed:
        parts = ["the domain was not read: nvidia-imex-ctl is not installed here (a workload container: the daemon "
                 "runs on the host or in the ComputeDomain's pod)"]
        domain = None
    else:
        findings += _daemon(host)
        domain = parse_domain(host.domain) if host.domain is not None else None
        findings += _domain(domain) if domain else [(Status.ERROR, f"could not run nvidia-imex-ctl -N -j: "
                                                                   f"{host.detail or 'no answer'}")]
        parts = [f"IMEX domain {domain.state}, {len(domain.peers)} node(s) READY and Connected"] if domain else []
    status, reason = worst(findings)
    channels = ", ".join(host.channels)
    return me.result(status, len(domain.peers) if domain else None, None, "nodes" if domain else "",
                     reason or "; ".join(parts + [f"channel(s) {channels}", f"multi-node NVLink: {why}"]),
                     service=host.service, channels=host.channels, channel_major=host.channel_major,
                     nodes=[asdict(p) for p in domain.peers] if domain else [],
                     broken=[[a.index, b.index, what] for a, b, what in domain.broken()] if domain else [])
