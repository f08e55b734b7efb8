"""Azure ML without the service: the job YAML loads back with azure-ai-ml's own `load_job`, compute and
environment round-trip through `load_compute`/`load_environment`, and submit and workspace set-up run through the
real SDK with an HttpTransport that records each request and answers it locally (no network, no real credential).
Status, logs, follow and cancel against recorded service responses: test_azureml_service.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from azure.ai.ml import MLClient, load_compute, load_environment, load_job
from azure.core.credentials import AccessToken
from azure.core.pipeline.transport import HttpTransport

from typer.testing import CliRunner

from gpuval.cli import app
from gpuval.engines.azureml import DEFAULT_ENVIRONMENT, AzureMLEngine, command_text, dump_yaml, gpuval_source
from gpuval.engines.azureml_setup import compute_entity, create, environment_entity, workspace_options
from tests.conftest import run_gpuval
from tests.engines.specs import nccl_spec


def test_acceptance_job_yaml_loads_back(tmp_path):
    """The issue's command, without --image: the curated ACPT environment, gpuval's source as the job's code."""
    proc = run_gpuval("submit", "nccl", "--on", "azureml", "--nodes", "2", "--gpus-per-node", "8", "--sku",
                      "Standard_ND96asr_v4", "--dry-run", "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    job = load_job(tmp_path / "job.yml")
    assert job.resources.instance_count == 2
    assert job.distribution.type == "mpi" and job.distribution.process_count_per_instance == 8
    assert job.environment == DEFAULT_ENVIRONMENT
    assert Path(job.code) == gpuval_source() and (Path(job.code) / "src" / "gpuval").is_dir()
    assert job.command.endswith(" && gpuval bench all_reduce -b 8 -e 8G -f 2")
    assert job.environment_variables["NCCL_TOPO_FILE"] == "/opt/microsoft/ndv4-topo.xml"
    assert job.environment_variables["CUDA_VISIBLE_DEVICES"] == "2,1,7,5,3,0,6,4"


def test_with_an_image_gpuval_is_not_installed(tmp_path):
    proc = run_gpuval("submit", "nccl", "--on", "azureml", "--image", "img:1", "--dry-run", "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    job = load_job(tmp_path / "job.yml")
    # no SKU and no GPUs asked: CPU ranks, so the default sweep stops at 64M (workloads/collective/job.default_args)
    assert job.command == "gpuval bench all_reduce -b 8 -e 64M -f 2" and job.code is None
    assert job.environment.image == "img:1"


def test_no_source_to_upload_is_one_line(tmp_path):
    proc = run_gpuval("submit", "nccl", "--on", "azureml", "--opt", f"code={tmp_path}", "--dry-run")
    assert proc.returncode == 2 and "no gpuval source" in proc.stderr and "Traceback" not in proc.stderr


def test_every_rank_runs_the_install_line_and_one_installs(tmp_path):
    """The job command's install prefix for real under sh, 4 ranks at once, with stand-ins for python and pip:
    the first rank on the node installs, the others find gpuval importable once the lock is theirs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    installed, calls = tmp_path / "installed", tmp_path / "pip-calls"
    (bin_dir / "python").write_text(f"#!/bin/sh\ntest -e {installed}\n")
    (bin_dir / "pip").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nsleep 0.3\ntouch {installed}\n")
    (bin_dir / "gpuval").write_text("#!/bin/sh\necho ran \"$@\"\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    line = command_text(nccl_spec(image=None), install=True)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    ranks = [subprocess.Popen(["sh", "-c", line], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    outputs = [p.communicate(timeout=30)[0] for p in ranks]
    assert all(p.returncode == 0 for p in ranks)
    assert all(out.startswith("ran bench all_reduce") for out in outputs)
    assert calls.read_text().splitlines() == ["install --quiet ."]


def test_pytorch_distribution_and_shm(tmp_path):
    from gpuval.engines.spec import Launcher

    spec = nccl_spec(launcher=Launcher.TORCHRUN, shm_size="64g")
    text = AzureMLEngine({"compute": "aks-h100", "instance_type": "gpu8"}).render(spec).files["job.yml"]
    (tmp_path / "job.yml").write_text(text)
    job = load_job(tmp_path / "job.yml")
    assert job.distribution.type == "pytorch" and job.resources.shm_size == "64g"
    assert job.compute.endswith("aks-h100") and job.resources.instance_type == "gpu8"


def test_compute_and_environment_round_trip(tmp_path):
    compute = compute_entity("NDv4", "Standard_ND96asr_v4", 0, 2, 120, "ssh-rsa AAAA", "azureuser", True)
    (tmp_path / "c.yml").write_text(dump_yaml(compute))
    back = load_compute(tmp_path / "c.yml")
    assert (back.size, back.min_instances, back.max_instances, back.idle_time_before_scale_down) == \
        ("Standard_ND96asr_v4", 0, 2, 120)
    assert back.identity.type == "system_assigned" and back.ssh_settings.admin_username == "azureuser"
    attached = compute_entity("aks", "", 0, 0, 0, None, "", False, "/subscriptions/s/resourceGroups/r/providers/"
                              "Microsoft.ContainerService/managedClusters/aks", "gpu")
    assert attached.type == "kubernetes" and attached.namespace == "gpu"
    env = environment_entity("NCCL-Benchmark-Env", "1.0", "img:1", None)
    (tmp_path / "e.yml").write_text(dump_yaml(env))
    assert load_environment(tmp_path / "e.yml").image == "img:1"


class _Credential:
    def get_token(self, *scopes, **kwargs):
        return AccessToken("fake-token", 4102444800)


class RecordingTransport(HttpTransport):
    """Records every request; answers PUTs by echoing the body (with an id), as the service does, and a GET of
    what was PUT with it (a long-running create polls the resource)."""

    def __init__(self):
        self.requests = []
        self.stored = {}

    def __enter__(self):
        return self

    def __exit__(self, *args):
        pass

    def open(self):
        pass

    def close(self):
        pass

    def send(self, request, **kwargs):
        import requests
        from azure.core.rest._requests_basic import RestRequestsTransportResponse

        body = request.body if isinstance(request.body, (str, bytes)) else b""
        self.requests.append((request.method, request.url, json.loads(body) if body else None))
        path = request.url.split("?")[0]
        answer = json.loads(body) if body else dict(self.stored.get(path, {}))
        if request.method == "PUT":
            self.stored[path] = answer
        answer.setdefault("id", path.split("management.azure.com")[-1])
        answer["name"] = answer["id"].rstrip("/").split("/")[-1]
        raw = requests.Response()
        raw.status_code = 200 if request.method != "PUT" else 201
        raw.headers["Content-Type"] = "application/json"
        raw.raw = io.BytesIO(json.dumps(answer).encode())
        raw.url = request.url
        response = RestRequestsTransportResponse(request=request, internal_response=raw)
        response.read()
        return response


def test_submit_sends_one_job_put_with_the_rest_body():
    transport = RecordingTransport()
    client = MLClient(_Credential(), "sub-1", "rg-1", "ws-1", transport=transport)
    engine = AzureMLEngine({"compute": "NDv4", "environment": "NCCL-Benchmark-Env:1.0"}, client=client)
    job_id = engine.submit(nccl_spec())
    puts = [(url, body) for method, url, body in transport.requests if method == "PUT" and "/jobs/" in url]
    assert len(puts) == 1
    url, body = puts[0]
    assert "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.MachineLearningServices/workspaces/ws-1/jobs/" in url
    assert url.split("?")[0].endswith(job_id)
    props = body["properties"]
    assert props["jobType"] == "Command"
    assert props["command"] == "gpuval bench all_reduce -b 8 -e 8G -f 2"
    assert props["distribution"] == {"distributionType": "Mpi", "processCountPerInstance": 8}
    assert props["resources"]["instanceCount"] == 2
    assert props["computeId"].endswith("/computes/NDv4")
    assert props["environmentId"].endswith("/environments/NCCL-Benchmark-Env/versions/1.0")
    assert props["environmentVariables"]["NCCL_IB_PCI_RELAXED_ORDERING"] == "1"
    assert all("169.254.169.254" not in u for _, u, _ in transport.requests)


def _put_body(transport: RecordingTransport) -> dict:
    [body] = [b for method, url, b in transport.requests if method == "PUT" and "/jobs/" in url]
    transport.requests.clear()
    return body


@pytest.mark.parametrize("options", [{"compute": "NDv4", "environment": "NCCL-Benchmark-Env:1.0"},
                                     {"compute": "NDv4"}])
def test_dry_run_is_what_submit_puts(options):
    """torchx's contract: submit sends job.yml as the dry run shows it (read back with load_job), the job's name
    set in render; its REST body is the one the SDK makes from the in-memory command() object itself, so the
    YAML loses nothing on the way (an --image job's anonymous environment included)."""
    transport = RecordingTransport()
    client = MLClient(_Credential(), "sub-1", "rg-1", "ws-1", transport=transport)
    engine = AzureMLEngine(options, client=client)
    spec = nccl_spec(shm_size="64g", time_limit_min=30)
    rendered = engine.dryrun(spec)
    assert f"name: {rendered.job_name}\n" in rendered.text() and rendered.job_name.startswith("gpuval-nccl-")
    assert engine.submit(spec) == rendered.job_name
    sent = _put_body(transport)
    client.jobs.create_or_update(rendered.objects[0])  # the command() behind the YAML
    assert sent == _put_body(transport)
    assert sent["properties"]["resources"]["shmSize"] == "64g"
    assert sent["properties"]["limits"] == {"jobLimitsType": "Command", "timeout": "PT30M"}


def test_compute_create_checks_its_values_and_options():
    """C12: an empty name, max -1 below min 5, negative idle time and an unknown --opt were all accepted."""
    cases = [(["", "--dry-run"], "compute name"), (["bad name/../x", "--dry-run"], "compute name"),
             (["NDv4", "--max-instances", "-1", "--dry-run"], "--max-instances"),
             (["NDv4", "--min-instances", "5", "--max-instances", "2", "--dry-run"], "above --max-instances"),
             (["NDv4", "--idle-seconds", "-1", "--dry-run"], "--idle-seconds"),
             (["NDv4", "--opt", "ssh_password=x", "--dry-run"], "azureml option ssh_password"),
             (["NDv4", "--opt", "compute=x", "--dry-run"], "azureml option compute"),
             (["NDv4", "--ssh-key", "ssh-rsa AAAA\nmore", "--dry-run"], "control character")]
    for args, message in cases:  # in process (the same typer app and error handler; 2 s of SDK import saved each)
        proc = CliRunner().invoke(app, ["azureml", "compute", "create", *args])
        assert proc.exit_code == 2 and message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    ok = run_gpuval("azureml", "compute", "create", "NDv4", "--opt", "workspace=ws", "--dry-run")
    assert ok.returncode == 0 and "name: NDv4" in ok.stdout
    env = run_gpuval("azureml", "environment", "create", "bad name", "--image", "i:1", "--dry-run")
    assert env.returncode == 2 and "environment name" in env.stderr


def test_create_dispatches_on_the_entity_type_not_its_name():
    """A compute is created with begin_create_or_update (PUT .../computes/NAME), an environment with
    environments.create_or_update (PUT .../environments/NAME/versions/V), through the real SDK."""
    transport = RecordingTransport()
    client = MLClient(_Credential(), "sub-1", "rg-1", "ws-1", transport=transport)
    options = workspace_options({})
    create(options, compute_entity("NDv4", "Standard_ND96asr_v4", 0, 2, 120, None, "azureuser", False), client)
    create(options, environment_entity("NCCL-Benchmark-Env", "1.0", "img:1", None), client)
    puts = [url.split("?")[0] for method, url, _ in transport.requests if method == "PUT"]
    assert any(url.endswith("/workspaces/ws-1/computes/NDv4") for url in puts)
    assert any(url.endswith("/environments/NCCL-Benchmark-Env/versions/1.0") for url in puts)
    with pytest.raises(TypeError):
        create(options, object(), client)
