"""`gpuval deploy kubernetes`: render (and apply) what makes the cluster run gpuval health on every GPU node by
itself: a DaemonSet of quick checks, or with --schedule a CronJob of full checks on idle nodes, with the
ServiceAccount and ClusterRole (nodes: get, patch) they need and the ValidatingAdmissionPolicy that guards that
patch."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import command_group, console, handle_errors, print_json
from gpuval.errors import UsageError

deploy_app = command_group("Make the cluster run gpuval by itself.")


def _selector(items: Optional[List[str]]) -> dict[str, str] | None:
    pairs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--node-selector {item!r}: use LABEL=VALUE")
        if key in pairs:
            raise UsageError(f"--node-selector {key}: given twice")
        pairs[key] = value
    return pairs or None


def kubernetes(
    schedule: Optional[str] = typer.Option(None, "--schedule", help="Cron schedule (e.g. '0 3 * * 0'): a CronJob of "
                                           "full checks on idle GPU nodes [default: a DaemonSet of quick checks]."),
    namespace: str = typer.Option("kube-system", "--namespace", "-n", help="Namespace of the objects."),
    create_namespace: bool = typer.Option(False, "--create-namespace", help="Create the namespace too (Pod "
                                          "Security level privileged: the pods mount host paths)."),
    name: str = typer.Option("gpuval-health", "--name", help="Name of the objects."),
    image: Optional[str] = typer.Option(None, "--image", help="Image with gpuval, by tag or pinned by digest "
                                        "(REPOSITORY@sha256:...) [default: GPUVAL_IMAGE, else "
                                        "ghcr.io/gpuval/gpuval:<version>]."),
    interval: int = typer.Option(300, "--interval", help="DaemonSet: seconds between two quick checks."),
    nodes: int = typer.Option(1, "--nodes", "-N", help="CronJob: nodes checked per run, one pod each."),
    gpus: int = typer.Option(8, "--gpus", help="CronJob: GPUs each pod asks for (the whole node)."),
    node_selector: Optional[List[str]] = typer.Option(None, "--node-selector", help="LABEL=VALUE of the GPU nodes "
                                                      "(repeat) [default: nvidia.com/gpu.present=true or an AKS "
                                                      "GPU pool]."),
    sku: Optional[str] = typer.Option(None, "--sku", help="VM size for gpuval health [default: detected]."),
    kernel_log: bool = typer.Option(True, "--kernel-log/--no-kernel-log", help="Mount /dev/kmsg for the Xid "
                                    "check (the pod runs privileged)."),
    textfile_dir: Optional[str] = typer.Option(None, "--textfile-dir", help="node_exporter textfile folder on the "
                                               "nodes: the DaemonSet writes gpuval.prom there."),
    drain: bool = typer.Option(True, "--drain/--no-drain", help="Label and taint nodes on the verdict."),
    max_drain: Optional[str] = typer.Option(None, "--max-drain", metavar="N|P%|all", help="The most nodes gpuval "
                                            "may hold tainted at once [default: 5% of the cluster's nodes, at least "
                                            "2]."),
    admission_policy: bool = typer.Option(True, "--admission-policy/--no-admission-policy", help="Guard the node "
                                          "patch with a ValidatingAdmissionPolicy: the pod's own node, gpuval's own "
                                          "taint, labels and annotations only (Kubernetes 1.30+)."),
    context: Optional[str] = typer.Option(None, "--context", help="kubeconfig context [default: current, else "
                                          "in-cluster]."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the manifests; apply nothing."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the manifests into this folder."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: the manifests, or what was applied."),
) -> None:
    """Run gpuval health on every GPU node of a Kubernetes cluster, by the cluster itself."""
    from pydantic import ValidationError

    from gpuval.engines.kubernetes import KubernetesEngine
    from gpuval.operate import deploy

    try:
        opts = deploy.DeployOptions(
            namespace=namespace, create_namespace=create_namespace, name=name, image=image, schedule=schedule,
            interval_s=interval, nodes=nodes, gpus=gpus, node_selector=_selector(node_selector), sku=sku, kernel_log=kernel_log,
            textfile_dir=textfile_dir, drain=drain, max_drain=max_drain, admission_policy=admission_policy)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise UsageError(f"{'.'.join(map(str, error['loc']))}: {error['msg']}") from None
    rendered = deploy.render(opts)
    for note in (deploy.image_note(opts), "" if admission_policy else deploy.UNGUARDED):
        if note:
            typer.echo(note, err=True)
    written = rendered.write(output) if output else []
    if dry_run:
        if as_json:
            print_json({"files": rendered.files, "written": [str(p) for p in written]})
        else:
            typer.echo(deploy.yaml_stream(rendered), nl=False)
        return
    for path in written:
        console.print(f"[dim]wrote {path}[/]")
    done = KubernetesEngine({"context": context}).apply(rendered.objects)
    if as_json:
        print_json({"applied": done})
        return
    for line in done:
        console.print(line)


def register(app: typer.Typer) -> None:
    deploy_app.command("kubernetes")(handle_errors(kubernetes))
    app.add_typer(deploy_app, name="deploy")
