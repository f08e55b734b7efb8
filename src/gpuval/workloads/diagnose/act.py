"""What `gpuval jobs diagnose` does after its diagnosis, only where the user asked for it (a flag): the acting step.

1. `--exclude`: the job moved off the nodes its diagnosis nominated (`Engine.exclude`: Slurm requeues it without
   them, Kubernetes keeps its pods off them), so that it goes on while they are re-tested: isolate fast, diagnose
   later (ByteRobust's practice: the job off its suspects first, the slow re-test after). Where the engine may not
   move the job, the exact exclude list and what to do are said, and nothing is sent. A communication slowdown
   nominates the job's links, no node: nothing is excluded for it.
2. `--retest`: what is re-tested (`retest_targets`): the nominated nodes, or with `--links` the nodes the job's
   links join (a communication slowdown's suspect), which the fleet's re-test (gpuval.fleet.act.retests, above this
   layer: the command wires it) pairs with known-good partners from outside the job to name the node or the link.

Neither is tried on a diagnosis that gives it nothing: that is said in its place (exit 2), and the diagnosis kept.
"""

from __future__ import annotations

from gpuval.diagnosis.job_diagnosis import JobDiagnosis, Retest
from gpuval.engines.base import Engine
from gpuval.engines.exclude import Exclusion
from gpuval.results.model import Status, worst_status
from gpuval.results.verdict import exit_code_of

LINKS_HINT = "communication slow nominates the job's links, no node: --retest --links names it"


def suspect_nodes(diag: JobDiagnosis) -> list[str]:
    """The nodes of the job its diagnosis nominated (probed: never a host a process only claims)."""
    return [s.node for s in diag.suspects if s.node in diag.probed]


def _slow_links(diag: JobDiagnosis) -> bool:
    return diag.comm is not None and diag.comm.suspect is not None


def exclude(engine: Engine, diag: JobDiagnosis) -> Exclusion:
    """Move the job off its suspect nodes (see the module); with none, an exclusion that says why nothing was."""
    nodes = suspect_nodes(diag)
    if nodes:
        return engine.exclude(diag.job_id, nodes)
    return Exclusion(diag.job_id, engine.name, [], advice="the diagnosis nominates no node: nothing to exclude" + (
        f" ({LINKS_HINT})" if _slow_links(diag) else ""))


def retest_targets(diag: JobDiagnosis, links: bool) -> tuple[list[str], str]:
    """(the nodes a re-test takes, why there are none): the nominated nodes, or with `links` the nodes of the job's
    links where its communication was found slow (by its own past, or under its fleet's band: a link slow from the
    job's start without a band is not judged, and said)."""
    if not links:
        nodes = suspect_nodes(diag)
        return nodes, "" if nodes else "the diagnosis nominates no node" + (
            f" ({LINKS_HINT})" if _slow_links(diag) else "")
    comm = diag.comm
    if comm is None or comm.suspect is None:
        why = comm.reason if comm is not None else "no communication analysis"
        return [], f"the diagnosis does not find the job's communication slow ({why})"
    nodes = [n for n in comm.suspect.nodes if n in diag.probed]
    return nodes, "" if nodes else "the job's links join no node the engine places the job on"


def not_retested(run_id: str, why: str) -> Retest:
    """A re-test that could not start, as the diagnosis reports it: ERROR (could not re-test), with why."""
    return Retest(run_id, Status.ERROR, f"not re-tested: {why}")


def act_exit(diag: JobDiagnosis) -> int:
    """0 diagnosed (and what was asked done: every suspect passed its re-test, the job moved), 1 a suspect failed
    its re-test, 2 what was asked could not be done (not re-tested, not judged, the job not moved)."""
    done = [a.status for a in (diag.retest, diag.exclusion) if a is not None]
    return exit_code_of(worst_status(done)) if done else 0
