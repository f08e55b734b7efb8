"""`gpuval fleet check` as one call: from the request (what the command line said) to the engine, the nodes,
the SKU's expectation, the job settings and the planner's knobs; then run it, print what it would send, or start
it in the background."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from gpuval.engines.site import Site
from gpuval.errors import UsageError
from gpuval.fleet.plan.expect import DEFAULT_SIZE, TestRanks, TestSizes, expectation, message_sizes, rack_spec
from gpuval.fleet.run.job import JobSettings, round_jobs
from gpuval.fleet.plan.terms import FleetConfig, Round, Test
from gpuval.fleet.run.outcome import FleetOutcome, RoundLog
from gpuval.fleet.plan.planner import plan_next
from gpuval.fleet.run.driver import FleetRun, fleet_nodes
from gpuval.fleet.plan.knowledge import new_fleet
from gpuval.node.unshadowed import child_env, module_argv
from gpuval.results.model import is_run_id


@dataclass
class CheckRequest:
    """Everything `gpuval fleet check` was asked (sizes in bytes, times in seconds)."""

    on: str
    run_id: str
    nodes: int | None = None
    nodelist: str | None = None
    sku: str | None = None
    baselines: tuple[Path, ...] = ()  # the user's --baseline / --profile files, on the packaged baselines
    options: dict[str, Any] = field(default_factory=dict)
    size: int | None = None
    samples: tuple[int, int, int] | None = None  # SUITE, SCREEN, RETEST [default: as the devices call for]
    iters: int | None = None
    warmup: int | None = None
    backend: str = "auto"
    timeout_s: float = 900.0
    queue_timeout_s: float = 3600.0
    poll_s: float = 10.0
    gpus_per_node: int | None = None
    procs_per_node: int | None = None
    node_procs: int | None = None
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    switch_label: str | None = None
    rack_label: str | None = None  # a Kubernetes node label naming each node's NVL72 rack
    drain: bool = False
    max_drain: str | None = None  # the drain brake's cap as written [default: the site's, GPUVAL_MAX_DRAIN, else 5%]
    config: FleetConfig = field(default_factory=FleetConfig)
    results: Path | None = None


@dataclass(frozen=True)
class DevicePlan:
    """The defaults a check's tests take on its devices: message size, samples (suite, screen, re-test), timed and
    untimed iterations per sample."""

    size: int
    samples: tuple[int, int, int]
    iters: int
    warmup: int


GPU_PLAN = DevicePlan(DEFAULT_SIZE, (32, 8, 32), 20, 5)
# CPU ranks (no GPU per node): gloo over the host's network moves ~1 GB/s, where a GPU fabric moves hundreds; 1 GiB
# x 32 samples there is tens of minutes per round measuring nothing a pair test needs. 1 MiB is past gloo's latency
# regime, and 8/4/8 samples keep six nodes' rounds to seconds (`gpuval submit nccl` stops at 64 MiB on CPU).
CPU_PLAN = DevicePlan(1024**2, (8, 4, 8), 5, 1)


def device_defaults(gpus_per_node: int) -> DevicePlan:
    """What the tests run by default: a GPU node's figures at the SKU's size, CPU ranks' small and few."""
    return GPU_PLAN if gpus_per_node else CPU_PLAN


def _validate(req: CheckRequest) -> None:
    if (req.nodes is None) == (req.nodelist is None):
        raise UsageError("name the nodes: --nodes N (the engine picks N idle nodes) or --nodelist LIST, not both")
    if req.nodes is not None and req.nodes < 1:
        raise UsageError(f"--nodes {req.nodes}: at least 1")
    validate_settings(req.run_id, req.size, req.config.cut)


def validate_settings(run_id: str, size: int | None, cut: float) -> None:
    """The check's settings that do not depend on its nodes; `jobs diagnose --retest` calls it before its probes."""
    if not is_run_id(run_id):  # a drain names it, and only a reason with a run id of this shape is gpuval's
        raise UsageError(f"--run-id {run_id[:80]!r}: gpuval's own run id (YYYYMMDDTHHMMSSZ-hhhhhh)")
    if size is not None and size < 1:
        raise UsageError(f"--size {size}: at least 1 byte")
    # --timeout, --queue-timeout and --poll are finite and above 0 as every float option is (cli._common)
    if not 0 < cut < 1:  # False for nan too
        raise UsageError(f"--cut {cut}: the shortfall judged slow is a share between 0 and 1 (0.03: 3%)")


def prepare(req: CheckRequest, on_round: Callable[[RoundLog], None] = lambda _log: None,
            site: Site | None = None) -> FleetRun:
    """The engine, site, nodes, expectation and settings of a check; every bad option is a one-line error here,
    before anything is sent (a bad host list too, not in the background process's log: the site expands it, once,
    within its caps). `site`: the engine's site already made (a re-test's, which holds its window)."""
    from gpuval.baselines import baseline_source
    from gpuval.engines import get_engine
    from gpuval.operate.brake import site_cap

    _validate(req)
    cap = site_cap(req.max_drain)
    engine = site.engine if site is not None else get_engine(req.on, req.options)
    site = site or engine.site(req.sku, req.switch_label, req.rack_label)
    nodes = fleet_nodes(site, req.nodes, req.nodelist)
    if req.drain:
        engine.node_client()  # an engine with nothing to drain says so now
    baseline = baseline_source(req.baselines)(req.sku)
    if req.sku and baseline is None:
        raise UsageError(f"--sku {req.sku}: no baseline for it; the check judges against its peers only without "
                         "--sku")
    gpus = req.gpus_per_node if req.gpus_per_node is not None else (baseline.gpus if baseline else None) or 0
    plan = device_defaults(gpus)
    ranks = TestRanks(req.node_procs or gpus or None, req.procs_per_node or max(gpus, 1))
    sizes = message_sizes(baseline, req.size, ranks) if gpus or req.size else TestSizes(plan.size, plan.size)
    suite, screen, retest = req.samples or plan.samples
    config = replace(req.config, suite_samples=suite, screen_samples=screen, retest_samples=retest)
    settings = JobSettings(run_id=req.run_id, sizes=sizes, iters=req.iters or plan.iters,
                           warmup=plan.warmup if req.warmup is None else req.warmup, backend=req.backend,
                           timeout_s=req.timeout_s, gpus_per_node=gpus, procs_per_node=req.procs_per_node,
                           node_procs=req.node_procs, sku=req.sku, baselines=tuple(map(str, req.baselines)),
                           image=req.image, env=req.env)
    return FleetRun(site, settings, config, expectation(baseline, sizes, ranks), req.queue_timeout_s, req.poll_s,
                    req.results, on_round, nodes, cap=cap, racks=rack_spec(baseline, sizes, ranks))


def run_check(req: CheckRequest, on_round: Callable[[RoundLog], None] = lambda _log: None) -> FleetOutcome:
    """Run the whole check, then drain (--drain), then store its verdicts; returns its outcome."""
    run = prepare(req, on_round)
    outcome = run.check(run.nodes, run.site.groups(run.nodes), run.site.racks(run.nodes))
    return run.conclude(outcome, req.drain)


def dry_run(req: CheckRequest) -> list[tuple[str, Any]]:
    """What the check would send first: round 0's job, and the job of one screening pair (as round 1 would send
    it if every node passed round 0), each as (title, Rendered)."""
    run = prepare(req)
    nodes = run.nodes
    first = plan_next(new_fleet(nodes, run.config))  # the samples the check would send (--samples, else the plan's)
    assert first is not None  # a fresh fleet always has its node round
    shown: list[tuple[str, Any]] = []
    for job in round_jobs(first, run.settings, run.site):
        shown.append((f"round 0: node tests of {len(job.tests)} nodes", run.engine.dryrun(job.spec)))
    if len(nodes) >= 2:
        pair = Round(1, (Test("r1-screen-0", "pair", (nodes[0], nodes[1]), run.config.screen_samples, "screen"),))
        for job in round_jobs(pair, run.settings, run.site):
            shown.append((f"round 1 (if round 0 passes): a screening pair, {nodes[0]} and {nodes[1]}",
                          run.engine.dryrun(job.spec)))
    return shown


def log_path(run_id: str) -> Path:
    """Where a check started in the background writes its output."""
    from gpuval.engines.records import jobs_dir

    return jobs_dir() / "fleet" / f"{run_id}.log"


ENV_VARIABLE = "GPUVAL_FLEET_ENV"  # the --env pairs of a check started in the background, as JSON
_ENV_FLAGS = ("--env", "-x")


def _env_apart(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv without its --env NAME=VALUE pairs, the pairs)."""
    kept: list[str] = []
    pairs: list[str] = []
    items = iter(argv)
    for item in items:
        if item == "--":
            kept += [item, *items]
        elif item in _ENV_FLAGS:
            pairs.append(next(items, ""))
        elif item.startswith("--env="):
            pairs.append(item.removeprefix("--env="))
        elif item.startswith("-x") and item != "-x":
            pairs.append(item[2:])
        else:
            kept.append(item)
    return kept, pairs


def background_env() -> list[str]:
    """The --env pairs this process was started with by `start_background` (none otherwise); taken out of the
    environment, so the check's own jobs do not inherit them twice."""
    import json

    raw = os.environ.pop(ENV_VARIABLE, "")
    return [str(p) for p in json.loads(raw)] if raw else []


def start_background(argv: list[str], run_id: str) -> tuple[int, Path]:
    """Start this same check detached (`--wait --run-id RUN` added), its output in log_path(run_id); returns its
    pid and the log. It outlives this process and the terminal. Its --env values (a database password, a token)
    go through its environment, readable by its owner only, never its argv, which `ps` shows every user."""
    import json

    log = log_path(run_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    argv, pairs = _env_apart(argv)
    with open(log, "a") as out:
        proc = subprocess.Popen([*module_argv("gpuval"), *argv, "--wait", "--run-id", run_id],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=child_env({**os.environ, ENV_VARIABLE: json.dumps(pairs)}))
    return proc.pid, log
