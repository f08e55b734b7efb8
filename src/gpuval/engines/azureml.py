"""Azure ML: a command job (MpiDistribution or PyTorchDistribution, instance count, environment variables, shm
size) on an AmlCompute cluster or an attached Kubernetes compute. The job's name (unique in a workspace: the spec's
name and a hash of the spec) is set in render, so the dry run's job.yml is what `jobs.create_or_update` sends.
The workspace comes from options or config.json, credentials from azure-identity; compute and environment set-up
is in azureml_setup.py. The azure SDK is imported only inside the functions that use it. Tested through the real
SDK with a local transport that replays the service's recorded responses (tests/engines/test_azureml*.py).
"""

from __future__ import annotations

import contextlib
import io
import shlex
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from pydantic import Field

from gpuval.engines.base import Engine, EngineOptions, Facts, Rendered, unique_name
from gpuval.engines.launch import gpuval_source
from gpuval.engines.output import file_lines
from gpuval.engines.spec import JobSpec, JobState, JobStatus, Launcher
from gpuval.errors import EngineError, GpuvalError, MissingDependency, UsageError

# Without --image: the curated Azure Container for PyTorch environment
# (ACPT-PyTorch-2.2-cuda12.1), from the azureml registry: CUDA, NCCL, Open MPI and a Python to install gpuval into.
DEFAULT_ENVIRONMENT = "azureml://registries/azureml/environments/acpt-pytorch-2.2-cuda12.1/versions/30"
# Every process of an MPI job runs the command: the first on each node installs gpuval, the others wait on the lock.
_INSTALL = "flock /tmp/gpuval-install.lock sh -c 'python -c \"import gpuval\" 2>/dev/null || pip install --quiet .'"

# Azure ML job states (JobStatus in azure.ai.ml.constants) to the normalized set.
_STATES = {
    "NotStarted": JobState.PENDING, "Queued": JobState.PENDING, "Preparing": JobState.PENDING,
    "Provisioning": JobState.PENDING, "Starting": JobState.PENDING,
    "Running": JobState.RUNNING, "Finalizing": JobState.RUNNING, "CancelRequested": JobState.RUNNING,
    "Completed": JobState.SUCCEEDED,
    "Failed": JobState.FAILED, "NotResponding": JobState.FAILED,
    "Canceled": JobState.CANCELLED,
}


class WorkspaceOptions(EngineOptions):
    """Which Azure ML workspace (`--opt KEY=VALUE`): all that `gpuval azureml compute|environment create` takes."""

    subscription_id: str | None = Field(None, description="Subscription [default: from config.json].")
    resource_group: str | None = Field(None, description="Resource group [default: from config.json].")
    workspace: str | None = Field(None, description="Workspace name [default: from config.json].")
    config: str | None = Field(None, description="Path to the workspace's config.json [default: searched from "
                                                 "the current folder up].")


class AzureMLOptions(WorkspaceOptions):
    """Options of the Azure ML engine (`--opt KEY=VALUE`, or JobSpec.extras["azureml"])."""

    compute: str = Field("gpu-cluster", description="Compute target: an AmlCompute cluster or an attached "
                                                    "Kubernetes compute.")
    environment: str | None = Field(None, description="Registered environment NAME:VERSION (with gpuval "
                                                      "installed) [default: an anonymous one from the job's --image, "
                                                      "else the curated ACPT PyTorch environment, gpuval installed "
                                                      "from `code` when the job starts].")
    code: str | None = Field(None, description="gpuval source folder (with pyproject.toml) uploaded as the job's "
                                               "code when it runs in the curated environment [default: the source "
                                               "checkout this gpuval runs from].")
    instance_type: str | None = Field(None, description="Instance type of an attached Kubernetes compute.")
    experiment: str = Field("gpuval", description="Experiment name.")


def command_text(spec: JobSpec, install: bool) -> str:
    """Azure ML runs the command through a shell: quote every word."""
    return f"{_INSTALL} && {shlex.join(spec.command)}" if install else shlex.join(spec.command)


def _code_folder(options: AzureMLOptions) -> str:
    """Where gpuval's source comes from when the job installs it (uploaded by Azure ML, minus .gitignore'd paths)."""
    folder = Path(options.code) if options.code else gpuval_source()
    if folder is None or not (folder / "pyproject.toml").exists():
        raise UsageError("no gpuval source to upload to Azure ML: give --image (with gpuval), "
                         "--opt environment=NAME:VERSION, or --opt code=PATH to a gpuval checkout")
    return str(folder.resolve())


def docker_size(nbytes: int) -> str:
    """Bytes in the notation of docker's --shm-size, which Azure ML takes: NUMBER and b, k, m or g (binary)."""
    for unit, size in (("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return f"{nbytes}b"


def build_command(spec: JobSpec, options: AzureMLOptions, name: str) -> Any:
    """The azure-ai-ml `command()` of a spec, named `name`: what jobs.create_or_update sends (pure: no workspace
    needed)."""
    from azure.ai.ml import MpiDistribution, PyTorchDistribution, command
    from azure.ai.ml.entities import Environment

    # Only gpuval's own commands need gpuval installed: nccl-tests' binaries come with the user's image.
    install = not (spec.image or options.environment) and spec.command[0] == "gpuval"
    environment = options.environment or (Environment(image=spec.image) if spec.image else DEFAULT_ENVIRONMENT)
    distribution = None
    if spec.launcher is Launcher.MPI:
        distribution = MpiDistribution(process_count_per_instance=spec.procs_per_node)
    elif spec.launcher is Launcher.TORCHRUN:
        distribution = PyTorchDistribution(process_count_per_instance=spec.procs_per_node)
    shm = docker_size(spec.shm_bytes) if spec.shm_bytes else None
    resources: dict[str, Any] = {"instance_count": spec.nodes}
    if shm:
        resources["shm_size"] = shm
    if options.instance_type:
        resources["instance_type"] = options.instance_type
    return command(
        name=name, display_name=spec.name, experiment_name=options.experiment, command=command_text(spec, install),
        code=_code_folder(options) if install else None, environment=environment, compute=options.compute,
        distribution=distribution, environment_variables=spec.full_env(), shm_size=shm,
        timeout=spec.time_limit_min * 60 if spec.time_limit_min else None, resources=resources,
    )


def dump_yaml(entity: Any) -> str:
    """An azure-ai-ml entity as the YAML its load_* function reads back."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "entity.yml"
        entity.dump(path)
        return path.read_text()


def ml_client(options: WorkspaceOptions, credential: Any = None, **kwargs: Any) -> Any:
    """An MLClient for the workspace of the options, else of config.json; credentials from azure-identity."""
    try:
        from azure.ai.ml import MLClient
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise MissingDependency("azure-ai-ml is not installed: pip install 'gpuval[engines]'") from None
    credential = credential or DefaultAzureCredential()
    if options.subscription_id and options.resource_group and options.workspace:
        return MLClient(credential, options.subscription_id, options.resource_group, options.workspace, **kwargs)
    try:
        return MLClient.from_config(credential, path=options.config, **kwargs)
    except Exception as exc:  # the SDK's ValidationException when no config.json is found
        raise UsageError("no Azure ML workspace: give --opt subscription_id=... resource_group=... workspace=..., "
                         f"or a config.json ({str(exc).splitlines()[0]})") from None


def sdk_call(what: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """func(*args, **kwargs); the SDK's and azure-core's exceptions become one line (EngineError) naming `what`."""
    try:
        return func(*args, **kwargs)
    except GpuvalError:
        raise
    except Exception as exc:  # azure.core HttpResponseError and the SDK's own exceptions
        text = str(exc).strip()
        raise EngineError(f"azure ml {what}: {text.splitlines()[0] if text else type(exc).__name__}") from None


AZUREML_REFUSAL = (
    "gpuval fleet check cannot run on Azure ML: every test runs on named nodes, and an Azure ML job cannot name "
    "the nodes of its compute. On an AmlCompute cluster run `gpuval submit nccl --on azureml --nodes N` for the "
    "full-scale figure; on an attached AKS compute run `gpuval fleet check --on kubernetes` against that cluster "
    "(docs/fleet.md)")


class AzureMLEngine(Engine[AzureMLOptions]):
    """Runs the job as an Azure ML command job."""

    name = "azureml"
    Options = AzureMLOptions

    def __init__(self, options: dict[str, Any] | None = None, client: Any = None) -> None:
        super().__init__(options)
        self._client_obj = client

    def _client(self) -> Any:
        if self._client_obj is None:
            self._client_obj = ml_client(self.options)
        return self._client_obj

    def render(self, spec: JobSpec, facts: Facts | None = None) -> Rendered:
        """job.yml: the command job with its unique name, as `az ml job create -f job.yml` and `load_job` read it."""
        options = self.options_for(spec, facts)
        name = unique_name(spec, options)
        node = build_command(spec, options, name)
        # A command() node dumps as a pipeline step; its job form dumps as what load_job reads back.
        return Rendered(self.name, {"job.yml": dump_yaml(node._to_job())}, spec, [node], job_name=name)

    def _send(self, rendered: Rendered) -> str:
        """jobs.create_or_update of job.yml as the dry run shows it (read back with the SDK's load_job, as
        `az ml job create -f job.yml` does); the job id is its name in the workspace."""
        from azure.ai.ml import load_job

        job = sdk_call("read job.yml", load_job, io.StringIO(rendered.files["job.yml"]))
        created = sdk_call("submit", self._client().jobs.create_or_update, job)
        return str(created.name)

    def status(self, job_id: str) -> JobStatus:
        """jobs.get(name).status."""
        job = sdk_call("status", self._client().jobs.get, job_id)
        # The SDK gives a str enum (JobStatus.COMPLETED, whose str() is not "Completed"), or a plain string.
        native = str(getattr(job.status, "value", job.status) or "")
        return JobStatus(job_id=job_id, engine=self.name, state=_STATES.get(native, JobState.UNKNOWN),
                         native_state=native, source="jobs.get")

    def log_lines(self, job_id: str) -> Iterator[str]:
        """The job's user logs (every process's std_log, in name order), downloaded from the workspace and read one
        file at a time."""
        with tempfile.TemporaryDirectory() as tmp:
            sdk_call("download logs", self._client().jobs.download, job_id, download_path=tmp, all=False)
            for path in sorted(Path(tmp).rglob("user_logs/std_log*.txt")):
                yield from file_lines(path)

    def node_lines(self, job_id: str) -> Iterator[tuple[str | None, str]]:
        """Refused: an Azure ML job's logs name its processes (std_log_process_N.txt) and the workspace names no
        node of its compute a job ran on, so no line can be tied to a node a scheduler could drain."""
        raise UsageError(f"azure ml job {job_id}: Azure ML does not say which node of its compute ran which "
                         "process, so its lines cannot be read per node; read them whole with `gpuval jobs logs`")

    def no_site(self) -> str:
        return AZUREML_REFUSAL

    def no_probe(self, job_id: str) -> str:
        """Why a job cannot be diagnosed here: no node is named, and nothing runs inside a running job."""
        return (f"could not diagnose azure ml job {job_id}: Azure ML does not say which node of its compute runs "
                "which process, and runs no command inside a running job; read its output with `gpuval jobs logs`")

    def follow(self, job_id: str, out: TextIO, poll_s: float = 2.0) -> JobStatus:
        """The SDK's live stream of the job's logs (`az ml job stream`) onto `out`, until the job ends."""
        from azure.ai.ml.exceptions import JobException

        def stream() -> None:
            try:
                self._client().jobs.stream(job_id)
            except JobException:
                pass  # raised at the end of a failed job's stream: the status below says failed

        with contextlib.redirect_stdout(out):  # the SDK streams to sys.stdout
            sdk_call("stream", stream)
        return self.status(job_id)

    def cancel(self, job_id: str) -> None:
        """jobs.begin_cancel, waited for."""
        poller = sdk_call("cancel", self._client().jobs.begin_cancel, job_id)
        sdk_call("cancel", poller.result)
        self.mark_cancelled(job_id)
