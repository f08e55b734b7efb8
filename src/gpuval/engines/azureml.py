"""Azure ML: a command job (MpiDistribution or PyTorchDistribution, instance count, environment variables, shm
size) on an AmlCompute cluster or an attached Kubernetes compute; the compute and environment themselves
(`gpuval azureml compute|environment create`). The workspace comes from options or config.json, credentials
from azure-identity. The azure SDK is imported only inside the functions that use it.
"""

from __future__ import annotations

import secrets
import shlex
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from gpuval.engines import records
from gpuval.engines.base import Engine, EngineOptions, Rendered
from gpuval.engines.launch import gpuval_source
from gpuval.engines.spec import JobSpec, JobState, JobStatus, Launcher
from gpuval.errors import EngineError, MissingDependency, UsageError

# Without --image: the curated Azure Container for PyTorch environment of the source documents (seed 004,
# ACPT-PyTorch-2.2-cuda12.1), from the azureml registry: CUDA, NCCL, Open MPI and a Python to install gpuval into.
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


class AzureMLOptions(EngineOptions):
    """Options of the Azure ML engine (`--opt KEY=VALUE`, or JobSpec.extras["azureml"])."""

    subscription_id: str | None = Field(None, description="Subscription [default: from config.json].")
    resource_group: str | None = Field(None, description="Resource group [default: from config.json].")
    workspace: str | None = Field(None, description="Workspace name [default: from config.json].")
    config: str | None = Field(None, description="Path to the workspace's config.json [default: searched from "
                                                 "the current folder up].")
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


def build_command(spec: JobSpec, options: AzureMLOptions) -> Any:
    """The azure-ai-ml `command()` of a spec, what jobs.create_or_update sends (pure: no workspace needed)."""
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
    resources: dict[str, Any] = {"instance_count": spec.nodes}
    if spec.shm_size:
        resources["shm_size"] = spec.shm_size
    if options.instance_type:
        resources["instance_type"] = options.instance_type
    return command(
        name=spec.name, display_name=spec.name, experiment_name=options.experiment,
        command=command_text(spec, install), code=_code_folder(options) if install else None, environment=environment, compute=options.compute, distribution=distribution,
        environment_variables=spec.full_env(), shm_size=spec.shm_size,
        timeout=spec.time_limit_min * 60 if spec.time_limit_min else None, resources=resources,
    )


def dump_yaml(entity: Any) -> str:
    """An azure-ai-ml entity as the YAML its load_* function reads back."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "entity.yml"
        entity.dump(path)
        return path.read_text()


def ml_client(options: AzureMLOptions, credential: Any = None, **kwargs: Any) -> Any:
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

    def render(self, spec: JobSpec) -> Rendered:
        """job.yml: the command job, as `az ml job create -f job.yml` and `load_job` read it."""
        node = build_command(spec, self.options_for(spec))
        # A command() node dumps as a pipeline step; its job form dumps as what load_job reads back.
        return Rendered(self.name, {"job.yml": dump_yaml(node._to_job())}, [node])

    def _sdk(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (UsageError, MissingDependency):
            raise
        except Exception as exc:  # azure.core HttpResponseError and the SDK's own exceptions
            raise EngineError(f"azure ml {what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None

    def submit(self, spec: JobSpec) -> str:
        """jobs.create_or_update; the job id is the job's name in the workspace."""
        job = self.render(spec).objects[0]
        job.name = f"{spec.name}-{secrets.token_hex(4)}"  # job names are unique in a workspace
        created = self._sdk("submit", self._client().jobs.create_or_update, job)
        records.save(records.JobRecord(engine=self.name, job_id=created.name, spec=spec,
                                       run_id=spec.env.get("GPUVAL_RUN_ID", "")))
        return created.name

    def status(self, job_id: str) -> JobStatus:
        """jobs.get(name).status."""
        job = self._sdk("status", self._client().jobs.get, job_id)
        native = str(job.status or "")
        return JobStatus(job_id=job_id, engine=self.name, state=_STATES.get(native, JobState.UNKNOWN),
                         native_state=native, source="jobs.get")

    def logs(self, job_id: str) -> str:
        """The job's user logs (every process's std_log), downloaded from the workspace."""
        with tempfile.TemporaryDirectory() as tmp:
            self._sdk("download logs", self._client().jobs.download, job_id, download_path=tmp, all=False)
            files = sorted(Path(tmp).rglob("user_logs/std_log*.txt"))
            return "\n".join(f.read_text(errors="replace") for f in files)

    def stream(self, job_id: str) -> None:
        """Print the job's output as it runs, until it ends (the SDK's jobs.stream)."""
        self._sdk("stream", self._client().jobs.stream, job_id)

    def cancel(self, job_id: str) -> None:
        """jobs.begin_cancel."""
        self._sdk("cancel", self._client().jobs.begin_cancel, job_id)
        records.mark_cancelled(self.name, job_id)


def compute_entity(name: str, size: str, min_instances: int, max_instances: int, idle_seconds: int,
                   ssh_key: str | None, admin_user: str, managed_identity: bool,
                   kubernetes_resource_id: str | None = None, namespace: str = "default") -> Any:
    """An AmlCompute cluster (the source documents' script 3), or an attached Kubernetes (AKS) compute."""
    from azure.ai.ml import load_compute
    from azure.ai.ml.constants import ManagedServiceIdentityType
    from azure.ai.ml.entities import AmlCompute, AmlComputeSshSettings, IdentityConfiguration

    if kubernetes_resource_id:
        doc = {"name": name, "type": "kubernetes", "resource_id": kubernetes_resource_id, "namespace": namespace}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "compute.yml"
            path.write_text(yaml.safe_dump(doc))
            return load_compute(path)
    ssh = AmlComputeSshSettings(admin_username=admin_user, ssh_key_value=ssh_key) if ssh_key else None
    identity = IdentityConfiguration(type=ManagedServiceIdentityType.SYSTEM_ASSIGNED) if managed_identity else None
    return AmlCompute(name=name, size=size, min_instances=min_instances, max_instances=max_instances,
                      idle_time_before_scale_down=idle_seconds, ssh_public_access_enabled=bool(ssh_key),
                      ssh_settings=ssh, identity=identity)


def environment_entity(name: str, version: str, image: str | None, build_context: str | None) -> Any:
    """A registered environment from an image, or from a build context folder holding a Dockerfile (script 4)."""
    from azure.ai.ml.entities import BuildContext, Environment

    if bool(image) == bool(build_context):
        raise UsageError("give exactly one of --image or --build-context")
    if build_context:
        if not (Path(build_context) / "Dockerfile").exists():
            raise UsageError(f"{build_context}: no Dockerfile in the build context")
        return Environment(name=name, version=version, build=BuildContext(path=build_context))
    return Environment(name=name, version=version, image=image)


def create(options: AzureMLOptions, entity: Any, client: Any = None) -> Any:
    """Create or update a compute or an environment in the workspace; returns what the service answered."""
    ml = client or ml_client(options)
    try:
        if entity.__class__.__name__ == "Environment":
            return ml.environments.create_or_update(entity)
        return ml.begin_create_or_update(entity).result()
    except Exception as exc:
        raise EngineError(f"azure ml create {entity.name}: {str(exc).splitlines()[0]}") from None
