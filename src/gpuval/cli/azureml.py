"""`gpuval azureml compute create` and `gpuval azureml environment create`: the workspace pieces a job needs."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import (
    OPT_HELP, command_group, console, err_console, handle_errors, parse_options, print_json,
)

azureml_app = command_group("Azure ML workspace set-up: compute clusters and environments.")
compute_app = command_group("Compute targets.")
environment_app = command_group("Environments (container images).")


def _emit(entity, dry_run: bool, output: Optional[Path], opt: Optional[List[str]], as_json: bool) -> None:
    import yaml

    from gpuval.engines.azureml import dump_yaml
    from gpuval.engines.azureml_setup import create, workspace_options

    options = workspace_options(parse_options(opt))  # unknown keys refused, dry run or not
    text = dump_yaml(entity)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
    if dry_run:
        print_json(yaml.safe_load(text)) if as_json else typer.echo(text, nl=False)
        return
    created = create(options, entity)
    if as_json:
        print_json({"name": created.name, "id": getattr(created, "id", None)})
    else:
        console.print(f"created {type(created).__name__} [bold]{created.name}[/]")


def compute_create(
    name: str = typer.Argument(..., help="Compute name, e.g. NDv4."),
    size: str = typer.Option("Standard_ND96asr_v4", "--size", help="VM size."),
    min_instances: int = typer.Option(0, "--min-instances", help="Nodes kept when idle."),
    max_instances: int = typer.Option(2, "--max-instances", help="Most nodes."),
    idle_seconds: int = typer.Option(120, "--idle-seconds", help="Idle time before scaling down."),
    ssh_key: Optional[str] = typer.Option(None, "--ssh-key", help="SSH public key (enables SSH access)."),
    admin_user: str = typer.Option("azureuser", "--admin-user", help="SSH user name."),
    managed_identity: bool = typer.Option(True, "--managed-identity/--no-managed-identity",
                                          help="System-assigned managed identity (pulls images from ACR)."),
    kubernetes_resource_id: Optional[str] = typer.Option(None, "--kubernetes-resource-id",
                                                         help="Attach this AKS cluster instead of creating AmlCompute."),
    namespace: str = typer.Option("default", "--namespace", help="Namespace of an attached Kubernetes compute."),
    opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the compute YAML; create nothing."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the compute YAML to this file."),
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
) -> None:
    """Create (or update) an AmlCompute GPU cluster, or attach a Kubernetes cluster."""
    from gpuval.engines.azureml_setup import compute_entity

    entity = compute_entity(name, size, min_instances, max_instances, idle_seconds, ssh_key, admin_user,
                            managed_identity, kubernetes_resource_id, namespace)
    _emit(entity, dry_run, output, opt, as_json)


def environment_create(
    name: str = typer.Argument(..., help="Environment name."),
    version: str = typer.Option("1", "--version", help="Environment version."),
    image: Optional[str] = typer.Option(None, "--image", help="Docker image (with gpuval or nccl-tests)."),
    build_context: Optional[str] = typer.Option(None, "--build-context", help="Folder with a Dockerfile."),
    opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the environment YAML; create nothing."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the environment YAML to this file."),
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
) -> None:
    """Register an environment from an image or a build context [default: GPUVAL_IMAGE if set, else this
    checkout's Dockerfile as the build context, else gpuval's image at this version]."""
    from gpuval.engines.azureml_setup import default_environment_source, environment_entity

    if not image and not build_context:
        err_console.print(f"no --image or --build-context: {default_environment_source()[2]}")
    _emit(environment_entity(name, version, image, build_context), dry_run, output, opt, as_json)


def register(app: typer.Typer) -> None:
    compute_app.command("create", no_args_is_help=True)(handle_errors(compute_create))
    environment_app.command("create", no_args_is_help=True)(handle_errors(environment_create))
    azureml_app.add_typer(compute_app, name="compute")
    azureml_app.add_typer(environment_app, name="environment")
    app.add_typer(azureml_app, name="azureml")
