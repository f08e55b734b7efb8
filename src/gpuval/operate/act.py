"""Take a node out and keep why: THE one call every path that acts on a verdict makes (`health --drain` on its node,
a fleet check's `--drain` on Slurm and Kubernetes, `jobs diagnose --retest` on the suspects it convicts).

In that order, so that no write delays or prevents a drain: each node's verdict goes through the one policy
(node_state.apply: drain or taint a failure, lift gpuval's own mark on a pass that re-checked its codes), every new
drain asked of the drain brake first (brake.Brake.gate), the brake settled once after all of them (counted again,
what the cap has no room for given back); then every node this call holds out of service (its action, as settled,
`out_of_service`: drained or tainted now, or a give-back the scheduler refused) keeps its evidence bundle
(evidence.write_bundle, in `directory`), named by the run id its drain reason names, which is what `gpuval nodes`
points at and `gpuval fleet retest` reads. A node left in service (held back by the brake, a shared fault) or left as
it was (already held for these codes: the earlier run's bundle stands) writes none: a fleet of 4,096 nodes failing
one shared fault writes no 4,096 bundles. What goes wrong is said, never raised: a node the scheduler would not
change (`failed`: its action says so), a second count that could not be taken (`recount`: the drains stand), a
bundle that could not be written (`problems`: the drain stands, since the node failed whether or not its evidence
could be kept; the line says what its loss means: a fleet conviction's bundle is what `gpuval fleet retest` repeats,
so without it a person lifts the node; a node's own drain is lifted by its next passing check all the same)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from gpuval.engines.nodes import NodeClient
from gpuval.errors import GpuvalError
from gpuval.operate.brake import Brake, DrainCap
from gpuval.operate.codes import Acted
from gpuval.operate.evidence import Conviction, Grounds, write_bundle
from gpuval.operate.node_state import NodeAction, apply, suggested_actions, verdict_of
from gpuval.results.model import Result, Status


@dataclass(frozen=True)
class Charge:
    """One node to act on: its verdict and fault codes, what the policy weighs beyond them (`hold`: why a pass must
    not lift gpuval's mark; `rechecked`: the codes this run re-checked; `suggested`: the actions a drain reason
    names; `shared`: why the brake must not drain it, its codes failing on too many nodes at once), and the grounds
    its evidence bundle keeps."""

    node: str
    verdict: Status
    codes: Sequence[str]
    grounds: Grounds
    suggested: Sequence[str] = ()
    hold: str = ""
    rechecked: Sequence[str] | None = None
    shared: str = ""


@dataclass
class Acting:
    """What one call did: each node's action (in the charges' order), the brake it ran under (what it held back and
    why, its count), the bundle of each node it holds out of service, and what could not be done."""

    brake: Brake
    actions: dict[str, NodeAction] = field(default_factory=dict)
    bundles: dict[str, Path] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # node -> why the scheduler did not act on it
    recount: str = ""  # why the brake's second count could not be taken ("" when it was)
    problems: list[str] = field(default_factory=list)  # bundles not written, one line each


def act_on_verdicts(charges: Sequence[Charge], client: NodeClient, cap: DrainCap, run_id: str,
                    directory: Path) -> Acting:
    """Act on every charged node through `client` under the drain brake's `cap` (the drains and the bundles name
    `run_id`), then keep the evidence bundle of each node it holds out of service under `directory`; see the
    module's docstring."""
    done = Acting(Brake(client, cap, run_id))
    for charge in charges:
        try:
            done.actions[charge.node] = apply(
                charge.verdict, charge.node, run_id, charge.codes, client, hold=charge.hold,
                rechecked=charge.rechecked, actions=charge.suggested,
                admit=done.brake.gate(charge.node, charge.shared))
        except GpuvalError as exc:
            done.failed[charge.node] = str(exc)
            left = Acted.NOT_DRAINED if charge.verdict is Status.FAIL else Acted.UNCHANGED
            done.actions[charge.node] = NodeAction(client.scheduler, charge.node, charge.verdict, left, str(exc))
    try:
        done.actions.update(done.brake.settle([a for n, a in done.actions.items() if n not in done.failed]))
    except GpuvalError as exc:  # drained, and the second count failed: the drains stand, said
        done.recount = f"the drain brake could not count gpuval's drains again after draining: {exc}"
    for charge in charges:
        if done.actions[charge.node].action.out_of_service:
            _keep(done, charge, run_id, directory)
    return done


def _keep(done: Acting, charge: Charge, run_id: str, directory: Path) -> None:
    """The node's evidence bundle; one that cannot be written is a line in `problems` (the action stands)."""
    grounds = charge.grounds
    conviction = Conviction(run_id, grounds.checks, grounds.records, done.actions[charge.node], grounds.fleet)
    try:
        done.bundles[charge.node] = write_bundle(directory, grounds.machine, grounds.description, conviction)
    except (OSError, GpuvalError) as exc:
        lost = ("no `gpuval fleet retest` can repeat the tests that convicted it, so a person lifts it once it is "
                "repaired" if grounds.fleet is not None else
                "its next passing check lifts it as any drain; only the record of why is lost")
        done.problems.append(f"evidence of node {charge.node} not written ({getattr(exc, 'strerror', None) or exc} "
                             f"under {directory}): it failed, so it stays out of service without it; {lost}")


def records_charge(records: Sequence[Result], node: str, grounds: Grounds, hold: str = "",
                   rechecked: Sequence[str] | None = None) -> Charge:
    """A node's charge from a run's own records (`health --drain`): THE node verdict (node_state.verdict_of) and the
    fault codes of what failed, and the actions the failed records suggest (the Xid catalog's reset-gpu, reboot)."""
    chosen = list(records)
    verdict, codes = verdict_of(chosen)
    return Charge(node, verdict, codes, grounds, suggested_actions(chosen), hold, rechecked)
