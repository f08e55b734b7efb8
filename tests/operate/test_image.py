"""The gpuval image: its default name, and the Dockerfile at the repository root. No Docker engine runs here: the
Dockerfile is read by BuildKit's own parser (the `dockerfile` package wraps the Go code Docker uses), every RUN is
checked as POSIX sh, the nccl-tests and perftest builds are checked against the build lines their READMEs give,
and the files the Dockerfile copies are enough to build gpuval's wheel. Its gpuval stage is built and run for real
by scripts/image-check.sh (buildah and podman on a Debian base; .ci/run runs it after the suite)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import dockerfile
import pytest

from gpuval import __version__
from gpuval.engines.launch import IMAGE_REPOSITORY, default_image

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def instructions() -> list:
    return list(dockerfile.parse_file(str(ROOT / "Dockerfile")))


def _runs(instructions: list) -> list[str]:
    return [i.value[0] for i in instructions if i.cmd == "RUN"]


def test_default_image_is_the_repository_at_this_version(monkeypatch: pytest.MonkeyPatch):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__
    monkeypatch.delenv("GPUVAL_IMAGE", raising=False)
    assert default_image() == f"{IMAGE_REPOSITORY}:{__version__}" == f"ghcr.io/gpuval/gpuval:{__version__}"
    monkeypatch.setenv("GPUVAL_IMAGE", "myacr.azurecr.io/gpuval:7")
    assert default_image() == "myacr.azurecr.io/gpuval:7"


def test_dockerfile_builds_from_nvidias_pytorch_image(instructions: list):
    """The published image (the last stage) is the gpuval stage plus the tools; the gpuval stage's base is an
    argument whose default is NVIDIA's PyTorch image (scripts/image-check.sh builds it on a Debian base)."""
    args = {i.value[0].split("=")[0]: i.value[0].partition("=")[2] for i in instructions if i.cmd == "ARG"}
    stages = [i.value for i in instructions if i.cmd == "FROM"]
    assert stages == [("${BASE_IMAGE}", "AS", "gpuval"), ("gpuval",)]
    assert args["BASE_IMAGE"] == "nvcr.io/nvidia/pytorch:${PYTORCH_TAG}" and args["PYTORCH_TAG"].endswith("-py3")
    assert args["NCCL_TESTS_VERSION"].startswith("v2.") and args["PERFTEST_VERSION"]
    gpuval_stage = instructions[:next(n for n, i in enumerate(instructions) if i.value == ("gpuval",))]
    assert not any("git clone" in i.value[0] or "torch" in i.value[0] for i in gpuval_stage if i.cmd == "RUN")


def test_every_run_is_valid_sh(instructions: list):
    for script in _runs(instructions):
        proc = subprocess.run(["sh", "-n", "-c", script], capture_output=True, text=True)
        assert proc.returncode == 0, f"{script}\n{proc.stderr}"


def test_nccl_tests_and_perftest_are_built_as_their_readmes_say(instructions: list):
    nccl, perftest = [r for r in _runs(instructions) if "git clone" in r]
    # nccl-tests README: make MPI=1 MPI_HOME=/path/to/mpi CUDA_HOME=/path/to/cuda [NCCL_HOME=...]
    make = shlex.split(nccl.split("&&")[1])
    assert make[0] == "make" and {"MPI=1", "MPI_HOME=/usr/local/mpi", "CUDA_HOME=/usr/local/cuda"} <= set(make)
    assert "https://github.com/NVIDIA/nccl-tests.git" in nccl
    assert any(i.cmd == "ENV" and "/opt/nccl-tests/bin" in i.value[1] for i in instructions)  # *_perf on PATH
    # perftest README (GPUDirect usage): ./autogen.sh && ./configure CUDA_H_PATH=/usr/local/cuda/include/cuda.h && make
    steps = [s.strip() for s in perftest.split("&&")]
    assert steps.index("./autogen.sh") < next(i for i, s in enumerate(steps) if s.startswith("./configure"))
    assert "CUDA_H_PATH=/usr/local/cuda/include/cuda.h" in perftest and "make install" in steps


def test_the_copied_files_build_gpuval(instructions: list, tmp_path: Path):
    """What the COPY lines bring (and .dockerignore lets through) is enough for pip to build gpuval."""
    copied = [i.value[:-1] for i in instructions if i.cmd == "COPY"]
    assert copied == [("pyproject.toml", "README.md"), ("src",)]
    ignored = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert {".git", ".venv", "tests"} <= set(ignored) and not {"src", "pyproject.toml", "README.md"} & set(ignored)
    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (context / name).write_bytes((ROOT / name).read_bytes())
    subprocess.run(["cp", "-r", str(ROOT / "src"), str(context / "src")], check=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(tmp_path / "wheels"), str(context)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    [wheel] = (tmp_path / "wheels").glob("gpuval-*.whl")
    assert wheel.name.startswith(f"gpuval-{__version__}-")


@pytest.mark.parametrize("gencode", ["", "-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100,code=sm_100"])
def test_the_nccl_tests_build_line_as_sh_runs_it(instructions: list, tmp_path: Path, gencode: str):
    """The nccl-tests RUN line run by sh with the Dockerfile's build arguments in the environment (as Docker sets
    them) and stand-ins for git, make and cp that record their arguments: make gets the README's variables, and
    NVCC_GENCODE only when given, as one argument."""
    [nccl] = [r for r in _runs(instructions) if "nccl-tests.git" in r]
    args = {i.value[0].split("=")[0]: i.value[0].partition("=")[2] for i in instructions if i.cmd == "ARG"}
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for tool in ("git", "make", "cp", "rm"):
        (stubs / tool).write_text(f'#!/bin/sh\nprintf "%s\\n" "{tool}" "$@" "--" >> {tmp_path / "calls"}\n')
        (stubs / tool).chmod(0o755)
    env = {**args, "NVCC_GENCODE": gencode, "PATH": f"{stubs}:/usr/bin:/bin"}
    subprocess.run(["sh", "-e", "-c", nccl], env=env, check=True)
    calls = [c.split("\n")[:-1] for c in (tmp_path / "calls").read_text().split("--\n") if c]
    git, make = calls[0], calls[1]
    assert git == ["git", "clone", "--depth", "1", "--branch", args["NCCL_TESTS_VERSION"],
                   "https://github.com/NVIDIA/nccl-tests.git", "/tmp/nccl-tests"]
    expected = ["make", "-C", "/tmp/nccl-tests", make[3], "MPI=1", "MPI_HOME=/usr/local/mpi",
                "CUDA_HOME=/usr/local/cuda", "BUILDDIR=/opt/nccl-tests/bin"]
    assert make == expected + ([f"NVCC_GENCODE={gencode}"] if gencode else []) and make[3].startswith("-j")
