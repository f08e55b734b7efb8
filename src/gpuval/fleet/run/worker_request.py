"""What a fleet check's job asks of the worker on a node, as one model per kind of test: the job writes it as the
worker's command line (`argv`) and the worker reads it back (`parse`), so the flags and the worker's arguments are one
contract with one home (before: eleven positional arguments, written in job.py and read back in order in cli/fleet.py).

`argv` is one `--flag value` per field, in the model's order (`--run-id` for run_id), a sequence field once per
item; `parse` takes exactly that back and validates it (a missing, unknown, repeated or ill-typed flag is a one-line
error, exit 2: a job whose command line was mangled never runs a test on made-up settings)."""

from __future__ import annotations

from typing import Any, Sequence, TypeVar, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpuval.errors import UsageError, validation_error
from gpuval.results.model import is_run_id

R = TypeVar("R", bound="WorkerRequest")


class WorkerRequest(BaseModel):
    """What every test's worker is asked: its round, `samples` cycles at `size` bytes, `iters` timed and `warmup`
    untimed launches a cycle, the backend, and how long a rank waits for its peers (`timeout`, seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    round: int = Field(ge=0)
    samples: int = Field(ge=1)
    size: int = Field(ge=1)
    iters: int = Field(ge=1)
    warmup: int = Field(ge=0)
    backend: str = Field(pattern=r"^(auto|nccl|gloo)$")
    timeout: float = Field(gt=0, allow_inf_nan=False)

    def argv(self) -> list[str]:
        """The worker's command-line arguments for this request."""
        out: list[str] = []
        for name, value in self:
            flag = "--" + name.replace("_", "-")
            for one in value if isinstance(value, tuple) else () if value is None else (value,):
                out += [flag, f"{one:g}" if isinstance(one, float) else str(one)]
        return out

    @classmethod
    def parse(cls: type[R], args: Sequence[str]) -> R:
        """The request the arguments `argv` wrote; a one-line UsageError for anything else."""
        given: dict[str, Any] = {}
        items = iter(args)
        for flag in items:
            name = flag[2:].replace("-", "_") if flag.startswith("--") else ""
            value = next(items, None)
            if name not in cls.model_fields or value is None:
                raise UsageError(f"{flag[:40]!r}: not a flag of this worker, or no value after it")
            if get_origin(cls.model_fields[name].annotation) is tuple:
                given.setdefault(name, []).append(value)
            elif name in given:
                raise UsageError(f"{flag} given twice")
            else:
                given[name] = value
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            raise validation_error(exc) from None


class NodeTestRequest(WorkerRequest):
    """A node test (`gpuval fleet node-test`): the health suite judged by the packaged baselines and the user's files
    (`baseline`, paths on the node) for `sku`, then the in-node all_reduce over `procs` ranks [default: the node's
    GPUs, 2 without], its records under `run_id`."""

    run_id: str
    procs: int | None = Field(default=None, ge=1)
    sku: str | None = None
    baseline: tuple[str, ...] = ()

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str) -> str:
        if not is_run_id(value):
            raise ValueError("gpuval's own run id (YYYYMMDDTHHMMSSZ-hhhhhh)")
        return value


class RankTestRequest(WorkerRequest):
    """One rank of a pair or group test (`gpuval fleet rank-test`): test `test`, each of its `collectives`; `nvlink`
    (an NVL72 rack's test): NCCL's log of this rank is read for its proof of multi-node NVLink (racks_read.py)."""

    test: str = Field(min_length=1, max_length=200)
    collectives: tuple[str, ...] = Field(min_length=1)
    nvlink: bool | None = None

