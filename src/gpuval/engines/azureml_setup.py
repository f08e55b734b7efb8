"""Azure ML workspace set-up: the compute a job runs on (an AmlCompute GPU cluster, the source documents' script
3, or an attached AKS cluster) and the environment it runs in (an image or a build context, script 4), created
with `gpuval azureml compute|environment create`. Values are checked here, before anything renders, as submit
checks its own: the service would refuse them only after the request, or accept a cluster that can never scale.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from gpuval.engines.azureml import WorkspaceOptions, ml_client, sdk_call
from gpuval.engines.base import parse_options
from gpuval.engines.inert import check_inert_tree
from gpuval.errors import UsageError

# Azure's naming rules for workspaces/computes: 2-16 letters, digits and hyphens, starting with a letter and not
# ending with a hyphen (learn.microsoft.com, azure-resource-manager/management/resource-name-rules).
_COMPUTE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,14}[A-Za-z0-9]$")
# Environment names: letters, digits, _ . - (the SDK's asset names), up to 255.
_ASSET_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$")


def workspace_options(raw: dict[str, Any]) -> WorkspaceOptions:
    """The workspace options of `--opt`: unknown keys (job options, typos, ssh_password=...) are refused."""
    return parse_options(WorkspaceOptions, raw, "azureml")


def _check(values: dict[str, Any]) -> None:
    try:
        check_inert_tree(values, "azureml")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_compute(name: str, min_instances: int, max_instances: int, idle_seconds: int) -> None:
    """The compute's name and scale settings as the service accepts them (one-line error otherwise)."""
    if not _COMPUTE_NAME.match(name):
        raise UsageError(f"compute name {name!r}: use 2-16 letters, digits and -, starting with a letter and not "
                         "ending with -")
    if min_instances < 0:
        raise UsageError(f"--min-instances {min_instances}: must be 0 or more")
    if max_instances < 1:
        raise UsageError(f"--max-instances {max_instances}: must be at least 1")
    if min_instances > max_instances:
        raise UsageError(f"--min-instances {min_instances} is above --max-instances {max_instances}")
    if idle_seconds < 0:
        raise UsageError(f"--idle-seconds {idle_seconds}: must be 0 or more")


def compute_entity(name: str, size: str, min_instances: int, max_instances: int, idle_seconds: int,
                   ssh_key: str | None, admin_user: str, managed_identity: bool,
                   kubernetes_resource_id: str | None = None, namespace: str = "default") -> Any:
    """An AmlCompute cluster (the source documents' script 3), or an attached Kubernetes (AKS) compute."""
    from azure.ai.ml import load_compute
    from azure.ai.ml.constants import ManagedServiceIdentityType
    from azure.ai.ml.entities import AmlCompute, AmlComputeSshSettings, IdentityConfiguration

    _check({"name": name, "size": size, "ssh_key": ssh_key, "admin_user": admin_user,
            "kubernetes_resource_id": kubernetes_resource_id, "namespace": namespace})
    if kubernetes_resource_id:
        if not _COMPUTE_NAME.match(name):
            raise UsageError(f"compute name {name!r}: use 2-16 letters, digits and -, starting with a letter")
        doc = {"name": name, "type": "kubernetes", "resource_id": kubernetes_resource_id, "namespace": namespace}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "compute.yml"
            path.write_text(yaml.safe_dump(doc))
            return load_compute(path)
    check_compute(name, min_instances, max_instances, idle_seconds)
    ssh = AmlComputeSshSettings(admin_username=admin_user, ssh_key_value=ssh_key) if ssh_key else None
    identity = IdentityConfiguration(type=ManagedServiceIdentityType.SYSTEM_ASSIGNED) if managed_identity else None
    return AmlCompute(name=name, size=size, min_instances=min_instances, max_instances=max_instances,
                      idle_time_before_scale_down=idle_seconds, ssh_public_access_enabled=bool(ssh_key),
                      ssh_settings=ssh, identity=identity)


def default_environment_source() -> tuple[str | None, str | None, str]:
    """(image, build context, why) of an environment created with neither --image nor --build-context.

    GPUVAL_IMAGE, when set, names the image (a private registry's copy). Else, from a source checkout, its
    Dockerfile as the build context: Azure ML builds the image in the workspace's own registry, so it exists
    whether or not anyone pushed gpuval's image, and it holds exactly the gpuval that creates it (the checkout's
    .amlignore uploads only what the Dockerfile copies). Installed from a wheel (no checkout), gpuval's
    published image at this version, as the Kubernetes and pyxis paths run it."""
    from gpuval.engines.launch import IMAGE_VARIABLE, default_image, gpuval_source

    if os.environ.get(IMAGE_VARIABLE):
        return default_image(), None, f"{IMAGE_VARIABLE} names the image"
    source = gpuval_source()
    if source is not None and (source / "Dockerfile").exists():
        return None, str(source), f"Azure ML builds gpuval's image from this checkout's Dockerfile ({source})"
    return default_image(), None, "gpuval's image at this version (no source checkout to build from)"


def environment_entity(name: str, version: str, image: str | None, build_context: str | None) -> Any:
    """A registered environment from an image, or from a build context folder holding a Dockerfile (script 4);
    with neither, `default_environment_source()`'s."""
    from azure.ai.ml.entities import BuildContext, Environment

    _check({"name": name, "version": version, "image": image, "build_context": build_context})
    if not _ASSET_NAME.match(name):
        raise UsageError(f"environment name {name!r}: use letters, digits, _ . and -")
    if image and build_context:
        raise UsageError("give one of --image or --build-context, not both")
    if not image and not build_context:
        image, build_context, _ = default_environment_source()
    if build_context:
        if not (Path(build_context) / "Dockerfile").exists():
            raise UsageError(f"{build_context}: no Dockerfile in the build context")
        return Environment(name=name, version=version, build=BuildContext(path=build_context))
    return Environment(name=name, version=version, image=image)


def create(options: WorkspaceOptions, entity: Any, client: Any = None) -> Any:
    """Create or update a compute or an environment in the workspace; returns what the service answered."""
    from azure.ai.ml.entities import Compute, Environment

    ml = client or ml_client(options)
    if isinstance(entity, Environment):
        return sdk_call(f"create environment {entity.name}", ml.environments.create_or_update, entity)
    if isinstance(entity, Compute):
        poller = sdk_call(f"create compute {entity.name}", ml.begin_create_or_update, entity)
        return sdk_call(f"create compute {entity.name}", poller.result)
    raise TypeError(f"not a compute or an environment: {type(entity).__name__}")
