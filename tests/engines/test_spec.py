"""JobSpec validation: every value that reaches a script or YAML is inert (no control characters), and
--shm-size has one size grammar (collectives.sizes: powers of 1024), checked when the spec is made and rendered
by each engine in its own unit. Pure: no engine runs here."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuval.engines.azureml import docker_size
from gpuval.engines.inert import check_inert, check_inert_tree
from gpuval.engines.kubernetes.manifests import quantity
from gpuval.engines.spec import JobSpec, Mount
from tests.conftest import run_gpuval


def _spec(**values) -> JobSpec:
    return JobSpec(**{"name": "j", "command": ["gpuval", "health"], **values})


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "tab\there", "del\x7f"])
def test_control_characters_are_refused(value):
    with pytest.raises(ValueError, match="control character"):
        check_inert(value, "x")
    with pytest.raises(ValueError, match="opt.key"):
        check_inert_tree({"opt": [{"key": value}]}, "opt")
    for field in ({"env": {"X": value}}, {"command": ["gpuval", value]}, {"image": value}):
        with pytest.raises(ValidationError, match="control character"):
            _spec(**field)


def test_plain_hostile_text_is_kept_as_typed():
    """Quotes, $(...), backticks and # are fine: renders quote them; only control characters end a line."""
    nasty = "a'b\"c $(touch x) `id` ;# ${HOME}"
    spec = _spec(env={"X": nasty}, command=["gpuval", nasty])
    assert spec.env["X"] == nasty and spec.command[1] == nasty


def test_mounts_are_one_path_each():
    with pytest.raises(ValidationError, match="no commas"):
        Mount.parse("/a,/etc:/b")
    with pytest.raises(ValidationError, match="control character"):
        Mount.parse("/a\n:/b")
    assert str(Mount.parse("/data:/data:ro")) == "/data:/data:ro"


@pytest.mark.parametrize("text,nbytes,k8s,docker", [
    ("64g", 64 * 1024**3, "64Gi", "64g"), ("512M", 512 * 1024**2, "512Mi", "512m"),
    ("1T", 1024**4, "1Ti", "1024g"), ("1000", 1000, "1000", "1000b"), ("2GiB", 2 * 1024**3, "2Gi", "2g"),
])
def test_shm_size_has_one_grammar_rendered_per_engine(text, nbytes, k8s, docker):
    spec = _spec(shm_size=text)
    assert spec.shm_bytes == nbytes
    assert quantity(nbytes) == k8s and docker_size(nbytes) == docker


@pytest.mark.parametrize("text", ["abc", "64Gi", "-1g", "0", "1.5g", "64 gb x"])
def test_bad_shm_size_is_refused_when_the_spec_is_made(text):
    with pytest.raises(ValidationError, match="--shm-size"):
        _spec(shm_size=text)


def test_bad_shm_size_on_the_command_line_is_one_line_before_any_engine():
    """C10: `--shm-size abc` rendered an invalid sizeLimit; now it stops at submit, exit 2."""
    for engine in ("kubernetes", "slurm", "azureml"):
        proc = run_gpuval("submit", "nccl", "--on", engine, "--image", "a/b:1", "--shm-size", "abc", "--dry-run")
        assert proc.returncode == 2, (engine, proc.stdout)
        assert "--shm-size" in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
