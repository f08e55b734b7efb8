"""Each per-GPU figure judged three ways, each verdict said: by a band measured the same way (`Band.judge`, through
the GPU's own limits), by the floor under what its GPU can physically do (`Baseline.judge_floor`: a share of the
datasheet peak, a limit), and against its peers: the node's other GPUs of the same model, measured the same way in
the same run. The worst verdict stands.

Peers are judged by THE robust rule (gpuval.baselines.noise): for each GPU, the median and MAD of the OTHER GPUs'
figures (leave one out, so the GPU judged never moves its own reference, and two GPUs still name the slower); a
figure more than max(PEER_FLOOR of that median, 3.5 robust sigmas) under it warns, more than twice that fails. The
floor in percent keeps a tight node (identical GPUs read within 1-2% of each other: the 56 pairs of an ND H100 v5
within 0.7%, tests/data/nvbandwidth) from warning on a GPU 1% slower; the robust sigma keeps a figure whose healthy
spread is wide (copies sharing host links) from failing on noise. One GPU, or GPUs of different models, are "not
judged against peers", said, never a PASS by peers. A figure that is no finite number judges nothing: its GPU is
named as not judged (ERROR) and it is nobody's peer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuval.baselines.model import finite
from gpuval.baselines.noise import OUTLIER_Z, band
from gpuval.checks.base import CheckContext, identity_of, worst
from gpuval.results.model import Status

PEER_FLOOR = 0.10  # share of the peers' median: WARN beyond it (and 3.5 robust sigmas), FAIL beyond twice both
JUDGES = ("band", "floor", "peers")


@dataclass(frozen=True)
class Figure:
    """One figure to judge: who it is ("GPU 3 (00000004:00:00.0)", or a pair), the NVML index of the GPU whose
    model and limits judge it, and the value as measured (None: not measured)."""

    who: str
    gpu: int
    value: float | None


def _model(ctx: CheckContext, index: int) -> str:
    """The GPU model a GPU is (its packaged model's title), else its PCI device id and name: what peers share."""
    layer = ctx.limits_for(index).gpu
    if layer is not None and layer.model is not None:
        return layer.model.title
    gpu = next((g for g in ctx.inventory().gpus if g.index == index), None)
    found = identity_of(gpu) if gpu is not None else None
    device = f"PCI device 0x{found.device_id:04X}" if found and found.device_id is not None else "no PCI id"
    return f"{found.name if found and found.name else 'unknown GPU'} ({device})"


def apart(ctx: CheckContext, indices: list[int]) -> str:
    """Why these GPUs are not judged against each other ("" where they are): one GPU, or GPUs of different models."""
    gpus = sorted(set(indices))
    if len(gpus) < 2:
        return "one GPU: not judged against peers"
    models = sorted({_model(ctx, i) for i in gpus})
    if len(models) > 1:
        return f"GPUs of different models ({', '.join(models)}): not judged against peers"
    return ""


def _named(peers: list[Figure]) -> str:
    """The peers as a reason names them: by NVML index where each is one GPU, else counted (GPU pairs)."""
    indices = [f.gpu for f in peers]
    if len(set(indices)) == len(indices):
        return "GPU " + ", ".join(str(i) for i in sorted(indices))
    return f"the {len(peers)} other pairs"


def against_peers(ctx: CheckContext, figures: list[Figure], words: str, unit: str,
                  why_not: str | None = None) -> tuple[list[tuple[Status, str]], str]:
    """WARN/FAIL findings of each figure against the same figure of its peers (the other GPUs of its model in this
    run, higher is better), and why the peers judged nothing ("" where they judged). `why_not` says why these
    figures are not comparable at all (pairs over different paths)."""
    usable = [f for f in figures if f.value is not None and finite(f.value)]
    why = why_not or apart(ctx, [f.gpu for f in usable])
    if why:
        return [], why
    findings: list[tuple[Status, str]] = []
    for f in usable:
        peers = [p for p in usable if p is not f]
        noise = band([p.value for p in peers], OUTLIER_Z, PEER_FLOOR)  # type: ignore[misc]
        severity = noise.severity(f.value, higher_is_better=True)  # type: ignore[arg-type]
        if not severity:
            continue
        short = noise.shortfall(f.value, True) / noise.center * 100  # type: ignore[arg-type]
        findings.append((Status.FAIL if severity == 2 else Status.WARN,
                         f"{f.who} {words}: {f.value:g} {unit}, {short:.1f}% under the median {noise.center:g} {unit} "
                         f"of its peers ({_named(peers)}; robust sigma {noise.sigma:.3g} {unit}: warn beyond "
                         f"{PEER_FLOOR * 100:g}% and {OUTLIER_Z:g} sigmas, fail beyond twice that)"))
    return findings, ""


def shown(findings: str, summary: str) -> str:
    """A measuring check's reason: its findings with the summary after them, the summary alone when all is well."""
    return f"{findings} ({summary})" if findings else summary


@dataclass
class Verdicts:
    """What the band, the floor and the peers found on a check's per-GPU figures, which of them judged anything,
    and why the peers did not: the check's verdict is the worst, and its reason says each judge's."""

    findings: dict[str, list[tuple[Status, str]]] = field(default_factory=lambda: {j: [] for j in JUDGES})
    judged: set[str] = field(default_factory=set)
    unjudged: list[tuple[Status, str]] = field(default_factory=list)  # figures that are no finite number
    why_no_peers: str = ""

    def judge(self, ctx: CheckContext, metric: str, words: str, figures: list[Figure], unit: str,
              why_not: str | None = None) -> None:
        """Judge the figures of one metric by its band and its floor (each GPU by its own limits) and against
        their peers (`why_not`: why these figures are not comparable at all)."""
        measured = [f for f in figures if f.value is not None]
        for f in measured:
            if not finite(f.value):  # type: ignore[arg-type]
                self.unjudged.append((Status.ERROR, f"{f.who} {words}: {f.value} is not a finite figure: not judged"))
                continue
            limits = ctx.limits_for(f.gpu)
            for judge, found in (("band", limits.judge(metric, f.value)),  # type: ignore[arg-type]
                                 ("floor", limits.judge_floor(metric, f.value))):  # type: ignore[arg-type]
                self.add(judge, found.status, f"{f.who} {words}: {found.reason}")
        against, why = against_peers(ctx, measured, words, unit, why_not)
        if why:
            self.why_no_peers = self.why_no_peers or why
            return
        self.judged.add("peers")
        self.findings["peers"] += against

    def add(self, judge: str, status: Status, reason: str) -> None:
        """One verdict of a judge on one figure (SKIPPED: it had nothing to judge it by); WARN and FAIL are kept."""
        if status is Status.SKIPPED:
            return
        self.judged.add(judge)
        if status in (Status.WARN, Status.FAIL):
            self.findings[judge].append((status, reason))

    def status_of(self, judge: str) -> Status | None:
        """The verdict of one judge (None where it judged nothing)."""
        if judge not in self.judged:
            return None
        return worst(self.findings[judge])[0]

    def verdict(self, named: int | None = None) -> tuple[Status, str]:
        """The worst finding of every judge (PASS where they judged and found nothing; SKIPPED where none judged)
        and the findings of that status, joined: at most `named` of them, the rest counted."""
        every = [f for judge in JUDGES for f in self.findings[judge]] + self.unjudged
        if not every:
            return (Status.PASS if self.judged else Status.SKIPPED), ""
        top, _ = worst(every)
        mine = [r for s, r in every if s is top]
        if named is not None and len(mine) > named:
            mine = mine[:named] + [f"and {len(mine) - named} more"]
        return top, "; ".join(mine)

    def said(self, no_band: str) -> str:
        """Each judge's verdict in words, `no_band` saying why no band judged ("no baseline for it on ..."):
        "judged by band: none (...), floor: pass, peers: fail"; where none judged, "...: reported, not judged"."""
        if not self.judged:
            return f"{no_band}: reported, not judged" + (f"; {self.why_no_peers}" if self.why_no_peers else "")
        words = {"band": f"none ({no_band})", "floor": "none (no peak known)", "peers": self.why_no_peers or "none"}
        parts = [f"{j}: {s.value if (s := self.status_of(j)) else words[j]}" for j in JUDGES]
        return "judged by " + ", ".join(parts)

    def details(self) -> dict[str, Any]:
        """Each judge's verdict for the record (`judged_by`): its status, None where it judged nothing, and the
        peers' reason where they did not judge."""
        out: dict[str, Any] = {j: (s.value if (s := self.status_of(j)) else None) for j in JUDGES}
        if out["peers"] is None and self.why_no_peers:
            out["peers"] = self.why_no_peers
        return out
