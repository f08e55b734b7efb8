"""One interface for every engine, after torchx's Scheduler: `render` is pure (no side effect, golden-testable),
`submit` sends what `render` made; `status`, `logs`, `wait` and `cancel` talk to the engine about a job id.

An engine module defines an options model (pydantic, each field documented where it is declared: the help of
`--opt KEY=VALUE`) and an `Engine` subclass. Options come from `--opt` on the command line and from
`JobSpec.extras[<engine name>]`; the spec's values win.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuval.engines.spec import JobSpec, JobState, JobStatus
from gpuval.errors import EngineError, UsageError


class EngineOptions(BaseModel):
    """Base of every engine's options: unknown keys are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


O = TypeVar("O", bound=EngineOptions)


@dataclass
class Rendered:
    """What an engine would send: named files (sbatch script, manifests, job YAML) and the objects behind them."""

    engine: str
    files: dict[str, str]
    objects: list[Any] = field(default_factory=list)

    def text(self) -> str:
        """All files, each under a `# ---- NAME` line when there are several (what --dry-run prints)."""
        if len(self.files) == 1:
            return next(iter(self.files.values()))
        return "\n".join(f"# ---- {name}\n{body}" for name, body in self.files.items())

    def write(self, directory: Path) -> list[Path]:
        """Write every file into `directory` (created); returns the paths."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, body in self.files.items():
            path = directory / name
            path.write_text(body)
            paths.append(path)
        return paths


class Engine(ABC, Generic[O]):
    """Where a JobSpec runs. Subclasses set `name` and `Options` and implement the abstract methods."""

    name: ClassVar[str]
    Options: ClassVar[type[EngineOptions]]

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self._raw = dict(options or {})
        self.options: O = self._validate(self._raw)  # type: ignore[assignment]

    def _validate(self, raw: dict[str, Any]) -> EngineOptions:
        try:
            return self.Options.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "option"
            known = ", ".join(self.Options.model_fields)
            raise UsageError(f"{self.name} option {where}: {first['msg']} (options: {known})") from None

    def options_for(self, spec: JobSpec) -> O:
        """This engine's options with the spec's own extras on top."""
        return self._validate({**self._raw, **spec.extra(self.name)})  # type: ignore[return-value]

    @abstractmethod
    def render(self, spec: JobSpec) -> Rendered:
        """What submit would send, with no side effect."""

    @abstractmethod
    def submit(self, spec: JobSpec) -> str:
        """Send the job; returns the engine's job id."""

    @abstractmethod
    def status(self, job_id: str) -> JobStatus:
        """The job's state now."""

    @abstractmethod
    def logs(self, job_id: str) -> str:
        """The job's output so far (all of it once the job ended)."""

    @abstractmethod
    def cancel(self, job_id: str) -> None:
        """Ask the engine to stop the job."""

    def wait(self, job_id: str, timeout_s: float | None = None, poll_s: float = 1.0) -> JobStatus:
        """Poll until the job ends; a timeout is an EngineError naming the last state seen."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            current = self.status(job_id)
            if current.state.done:
                return current
            if deadline is not None and time.monotonic() > deadline:
                raise EngineError(f"job {job_id} still {current.state.value} after {timeout_s:.0f} s")
            time.sleep(poll_s)


def unknown(engine: str, job_id: str, detail: str) -> JobStatus:
    """A status for a job the engine cannot tell anything about."""
    return JobStatus(job_id=job_id, engine=engine, state=JobState.UNKNOWN, detail=detail)
