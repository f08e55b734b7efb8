"""A planner's Round as engine jobs: the node tests of a round as ONE job (one task per node, each pinned node
running `gpuval fleet node-test` with its NodeTestRequest as flags: worker_request.py), each pair or group test as a job of its own on exactly its nodes (every rank
running `gpuval fleet rank-test`), all sent at once: the tests of a round share no node, so they run side by side.
The node tests of one job are each their own (`Site.pin(..., together=False)`: one that fails never ends the
others); the ranks of a pair or group test are one test and share one fate.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from gpuval.engines.presets import preset_for
from gpuval.engines.site import Site
from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import validation_error
from gpuval.fleet.plan.expect import TestSizes
from gpuval.fleet.plan.racks_book import RACK_PURPOSES
from gpuval.fleet.plan.terms import Round, Test
from gpuval.fleet.run.worker_request import NodeTestRequest, RankTestRequest, WorkerRequest

R = TypeVar("R", bound=WorkerRequest)
START_MINUTES = 5  # a job's time limit beyond the test timeout: start-up, imports, the node's health suite


@dataclass(frozen=True)
class JobSettings:
    """How every test job of a check is built (from `gpuval fleet check`'s options).

    iters/warmup: timed and untimed launches per sample (each of a test's `samples` cycles); timeout_s: how long a
    rank waits for its peers, and how long a test may run before it counts as hung; procs_per_node: ranks per node
    of pair and group tests [default: one per GPU, at least one]; node_procs: ranks of the in-node all_reduce
    [default: the node's visible GPUs, 2 without GPUs].
    """

    run_id: str
    sizes: TestSizes
    iters: int = 20
    warmup: int = 5
    backend: str = "auto"
    timeout_s: float = 900.0
    gpus_per_node: int = 0
    procs_per_node: int | None = None
    node_procs: int | None = None
    sku: str | None = None
    baselines: tuple[str, ...] = ()  # the user's --baseline / --profile files, for the node tests' health suite
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundJob:
    """One job of a round and the tests it runs."""

    spec: JobSpec
    tests: tuple[Test, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for t in self.tests for n in t.nodes)


def round_jobs(rnd: Round, settings: JobSettings, site: Site) -> list[RoundJob]:
    """The jobs of one round: node tests together (one job per sample count, in practice one), the others one each."""
    jobs: list[RoundJob] = []
    node_tests: dict[int, list[Test]] = {}
    for test in rnd.tests:
        if test.kind == "node":
            node_tests.setdefault(test.samples, []).append(test)
        else:
            jobs.append(RoundJob(_rank_spec(rnd.index, test, settings, site), (test,)))
    for i, (samples, tests) in enumerate(sorted(node_tests.items())):
        name = f"gpuval-fleet-r{rnd.index}-nodes" + (f"-{i}" if i else "")
        jobs.insert(i, RoundJob(_node_spec(name, rnd.index, tests, samples, settings, site), tuple(tests)))
    return jobs


def _common(settings: JobSettings) -> dict[str, Any]:
    return {"iters": settings.iters, "warmup": settings.warmup, "backend": settings.backend,
            "timeout": settings.timeout_s}


def _node_spec(name: str, index: int, tests: list[Test], samples: int, settings: JobSettings, site: Site) -> JobSpec:
    req = _request(NodeTestRequest, round=index, samples=samples, size=settings.sizes.node, **_common(settings),
                   run_id=settings.run_id, procs=settings.node_procs or None, sku=settings.sku,
                   baseline=settings.baselines)
    nodes = tuple(t.nodes[0] for t in tests)
    return _spec(name, ["gpuval", "fleet", "node-test", *req.argv()], nodes, 1, Launcher.NONE, settings, site,
                 together=False)


def _rank_spec(index: int, test: Test, settings: JobSettings, site: Site) -> JobSpec:
    req = _request(RankTestRequest, round=index, samples=test.samples, size=settings.sizes.of(test.kind, test.purpose),
                   **_common(settings), test=test.id, collectives=test.collectives,
                   nvlink=True if test.purpose in RACK_PURPOSES else None)  # a rack's: NCCL's proof read
    command = ["gpuval", "fleet", "rank-test", *req.argv()]
    procs = settings.procs_per_node or max(settings.gpus_per_node, 1)
    return _spec(f"gpuval-fleet-{test.id}", command, test.nodes, procs, site.launcher, settings, site, together=True)


def _request(kind: type[R], **fields: Any) -> R:
    """The worker's request (worker_request.py), its values checked before any job is built (a bad one is the
    one-line error every option gets)."""
    try:
        return kind(**fields)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _spec(name: str, command: list[str], nodes: tuple[str, ...], procs: int, launcher: Launcher,
          settings: JobSettings, site: Site, together: bool) -> JobSpec:
    # The submitting side stores every record from the job's lines: the job keeps no results file or database. The
    # site's variables come last: they are what ties each line to its node (Engine.node_lines).
    env = {"GPUVAL_RESULTS": os.devnull, "GPUVAL_DB": "none", "GPUVAL_RUN_ID": settings.run_id, **settings.env,
           **site.job_env()}
    try:
        return JobSpec(
            name=name[:52].rstrip("-"), command=command, image=settings.image, env=env, nodes=len(nodes),
            procs_per_node=procs, gpus_per_node=settings.gpus_per_node, launcher=launcher,
            network=preset_for(settings.sku) if settings.sku else None,
            time_limit_min=math.ceil(settings.timeout_s / 60) + START_MINUTES,
            extras={site.engine.name: site.pin(nodes, together)},
        )
    except ValidationError as exc:
        raise validation_error(exc, with_field=False) from None
