"""`gpuval azureml environment create` with no --image: gpuval's own image, by the rule of
`azureml_setup.default_environment_source` (GPUVAL_IMAGE, else this checkout's Dockerfile as the build context,
else the published image). Offline: the real Azure ML SDK renders and reads back the environment, and its own
ignore-file logic lists what it would upload as the build context (no workspace can be reached from here)."""

from __future__ import annotations

from pathlib import Path

import yaml
from azure.ai.ml import load_environment
from azure.ai.ml._utils._asset_utils import get_ignore_file, get_upload_files_from_folder

from gpuval import __version__
from gpuval.engines import launch
from gpuval.engines.azureml import dump_yaml
from gpuval.engines.azureml_setup import default_environment_source, environment_entity
from tests.conftest import ROOT, run_gpuval


def test_from_a_checkout_azure_ml_builds_the_repositorys_dockerfile(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("GPUVAL_IMAGE", raising=False)
    proc = run_gpuval("azureml", "environment", "create", "gpuval", "--dry-run", env={"GPUVAL_IMAGE": ""})
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["build"] == {"path": str(ROOT)}
    assert "builds gpuval's image from this checkout's Dockerfile" in proc.stderr
    env = environment_entity("gpuval", "1", None, None)
    (tmp_path / "e.yml").write_text(dump_yaml(env))
    back = load_environment(tmp_path / "e.yml")
    assert back.image is None and Path(back.build.path) == ROOT  # the Dockerfile at its root: the default name


def test_the_build_context_uploads_only_what_the_dockerfile_copies():
    """What the SDK uploads for that build context, by its own ignore-file logic (.amlignore, which takes over from
    .gitignore): the Dockerfile, .dockerignore, and what the Dockerfile COPYs; no .git, .venv or tests."""
    uploaded = {rel for _, rel in get_upload_files_from_folder(ROOT, ignore_file=get_ignore_file(ROOT))}
    assert {"Dockerfile", "pyproject.toml", "README.md", "src/gpuval/__init__.py"} <= uploaded
    assert {f for f in uploaded if not f.startswith("src/gpuval/")} == {"Dockerfile", ".dockerignore",
                                                                       "pyproject.toml", "README.md"}
    assert not [f for f in uploaded if "__pycache__" in f]
    copied = [line.split()[1:-1] for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ")]
    assert copied == [["pyproject.toml", "README.md"], ["src"]]  # the list above covers every COPY


def test_gpuval_image_wins_and_a_wheel_install_uses_the_published_image(monkeypatch):
    monkeypatch.setenv("GPUVAL_IMAGE", "myacr.azurecr.io/gpuval:0.1.0")
    assert default_environment_source() == ("myacr.azurecr.io/gpuval:0.1.0", None, "GPUVAL_IMAGE names the image")
    assert environment_entity("gpuval", "1", None, None).image == "myacr.azurecr.io/gpuval:0.1.0"
    monkeypatch.delenv("GPUVAL_IMAGE")
    monkeypatch.setattr(launch, "gpuval_source", lambda: None)  # installed from a wheel: no checkout
    image, context, why = default_environment_source()
    assert (image, context) == (f"ghcr.io/gpuval/gpuval:{__version__}", None) and "no source checkout" in why


def test_image_and_build_context_together_are_refused():
    proc = run_gpuval("azureml", "environment", "create", "gpuval", "--image", "i:1", "--build-context", str(ROOT),
                      "--dry-run")
    assert proc.returncode == 2 and "not both" in proc.stderr and "Traceback" not in proc.stderr
