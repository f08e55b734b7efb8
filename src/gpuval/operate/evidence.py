"""The evidence bundle of a node gpuval drained or tainted: why, in one file a person (or a later gpuval) can read
and replay. One YAML per node and run, `DIR/evidence/NODE/RUN.yaml`: the machine as a recording (node/capture.py:
a recording as it was, a live node's GPUs, ports, kernel log and limits as the Machine interface read them, the
figures it measured), so `gpuval health --recorded BUNDLE --check ...` judges the same checks on the same answers
again; and under `evidence:` what convicted it: the run id, the checks that ran, the action and its detail, the
failing records as stored, `nvidia-smi -q` where the node has the tool. The drain reason stays short (codes and the
run id, which names this file); the detail is here.

A fleet check's bundle (the check drained the node from elsewhere: no machine of the node to record) has the same
`evidence:` with a `fleet:` part: the verdict's cause and reason, the tests that convicted the node (kind,
partners, samples, figures against what they were judged against, errors), the settings those tests ran with (what
`gpuval fleet retest` repeats), and the failing health records of its node tests.

Where: the acting process's state directory. `health --drain` acts on the node, so its bundle is on the node
(GPUVAL_STATE_DIR, /var/lib/gpuval in the pods and slurmd's HealthCheckProgram), beside the kept full result.
Written atomically (results.files.write_beside) and bounded (MAX_BYTES: the kernel log is cut first, then the
nvidia-smi text), so a node whose log floods never fills its disk with evidence."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuval.errors import UsageError
from gpuval.node.capture import capture, nvidia_smi_query
from gpuval.node.machine import Machine
from gpuval.node.yaml_input import read_yaml
from gpuval.operate.node_state import NodeAction, check_node, check_run_id
from gpuval.results.files import write_beside
from gpuval.results.model import Result, Status

MAX_BYTES = 4 * 1024**2
MAX_RECORDS = 200
FOLDER = "evidence"


def bundle_path(directory: Path, node: str, run_id: str) -> Path:
    """Where the bundle of `node` for run `run_id` is kept under `directory` (a state directory)."""
    return directory / FOLDER / check_node(node) / f"{check_run_id(run_id)}.yaml"


@dataclass(frozen=True)
class Grounds:
    """What a node's bundle keeps of why it failed, known before it is acted on: a description of where it was judged,
    the checks that ran, their records (the failing ones are kept), a fleet check's part (`fleet`: its verdict,
    tests and settings), and the machine as it was read (None: judged from elsewhere, as a fleet check judges)."""

    description: str
    checks: list[str]
    records: list[Result]
    fleet: dict[str, Any] | None = None
    machine: Machine | None = None


@dataclass(frozen=True)
class Conviction:
    """What a bundle says convicted the node: the run, the checks it ran, its records and the action taken."""

    run_id: str
    checks: list[str]
    records: list[Result]
    action: NodeAction
    fleet: dict[str, Any] | None = None  # a fleet check's conviction: its verdict, tests and settings

    def to_json(self, smi: str | None) -> dict[str, Any]:
        failing = [r for r in self.records if r.status is Status.FAIL][:MAX_RECORDS]
        return {"version": 1, "node": self.action.node, "run_id": self.run_id, "scheduler": self.action.scheduler,
                "verdict": self.action.verdict.value, "action": self.action.action.value, "detail": self.action.detail,
                "checks": self.checks, "records": [r.model_dump(mode="json") for r in failing],
                "nvidia_smi_q": smi, **({"fleet": self.fleet} if self.fleet is not None else {})}


def _dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=False, width=120)


def _bounded(data: dict[str, Any]) -> str:
    """The bundle's YAML within MAX_BYTES: the kernel log halved (oldest lines first) until it fits, then the
    nvidia-smi text dropped, then the records; each cut said in the bundle."""
    text = _dump(data)
    cuts: list[str] = []
    while len(text.encode()) > MAX_BYTES and len(data.get("kernel_log") or []) > 1:
        data["kernel_log"] = data["kernel_log"][len(data["kernel_log"]) // 2:]
        cuts.append(f"kernel_log cut to its last {len(data['kernel_log'])} lines")
        text = _dump(data)
    for key in ("nvidia_smi_q", "records"):
        if len(text.encode()) > MAX_BYTES:
            data["evidence"][key] = None
            cuts.append(f"{key} left out")
            text = _dump(data)
    if cuts:
        data["evidence"]["cut"] = cuts[-3:]
        text = _dump(data)
    return text


def write_bundle(directory: Path, machine: Machine | None, description: str, conviction: Conviction,
                 measurements: dict[str, Any] | None = None) -> Path:
    """Write the node's bundle for this conviction (atomic, bounded); returns its path. `machine` None: the node
    was judged from elsewhere (a fleet check), so neither its machine nor this host's nvidia-smi is recorded."""
    data = capture(machine, description, measurements) if machine is not None else \
        {"description": description}
    data["evidence"] = conviction.to_json(nvidia_smi_query() if machine is not None else None)
    target = bundle_path(directory, conviction.action.node, conviction.run_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_beside(target.parent, target.name, _bounded(data), 0o644)


def read_conviction(directory: Path, node: str, run_id: str | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The `evidence:` part of the node's bundle of run `run_id` (None: its newest bundle that has a `fleet` part,
    where the scheduler keeps no run id: a Kubernetes annotation) and its path; None when there is none. A file over
    twice MAX_BYTES, of no bundle's shape or with a YAML alias is refused (one-line error)."""
    folder = directory / FOLDER / check_node(node)
    if run_id is not None:
        paths = [bundle_path(directory, node, run_id)]
    else:
        paths = sorted(folder.glob("*.yaml"), reverse=True) if folder.is_dir() else []  # run ids sort by time
    for path in paths:
        if not path.is_file():
            continue
        if path.stat().st_size > 2 * MAX_BYTES:
            raise UsageError(f"{path}: larger than any evidence bundle gpuval writes")
        data = read_yaml(path.read_text(errors="replace"), str(path))
        found = data.get("evidence") if isinstance(data, dict) else None
        if isinstance(found, dict) and (run_id is not None or isinstance(found.get("fleet"), dict)):
            return path, found
    return None


def retest_settings(directory: Path, node: str, run_id: str | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The bundle of the node's fleet conviction under `directory` (of run `run_id`; None: its newest,
    `read_conviction`) and the settings of the tests that convicted it, which `gpuval fleet retest` repeats; None
    when no bundle here keeps them (never written, or written where the check ran on another host)."""
    found = read_conviction(directory, node, run_id)
    fleet = found[1].get("fleet") if found else None
    settings = fleet.get("settings") if isinstance(fleet, dict) else None
    return (found[0], settings) if found and isinstance(settings, dict) else None
