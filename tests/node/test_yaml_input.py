"""No YAML gpuval reads from a user or a node can stall or crash it: recordings (and the evidence bundles that replay
through the same reader), `--opt` values and baseline files go through one reader (node.yaml_input), which
refuses aliases, nesting past a bound and text past a size with a one-line UsageError."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from gpuval.baselines import baseline_source
from gpuval.cli._common import parse_options
from gpuval.errors import UsageError
from gpuval.node.recorded import recorded_data
from gpuval.node.yaml_input import MAX_BYTES, read_yaml

H100 = "Standard_ND96isr_H100_v5"


def _bomb_levels() -> list[str]:
    """Nine levels of ten aliases: 10^9 values once walked, a few hundred bytes."""
    levels = ["  l0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    return levels + [f"  l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]


def _recording_with(tmp_path: Path, tail: str) -> Path:
    """The packaged H100 recording's GPUs, then `tail` (a hostile part), as a file `--recorded` reads."""
    gpus = yaml.safe_dump({"gpus": copy.deepcopy(recorded_data(H100))["gpus"][:1]})
    path = tmp_path / "rec.yaml"
    path.write_text(gpus + tail)
    return path


@pytest.mark.parametrize("key", ["description", "kernel_log"])
def test_an_alias_bomb_in_a_recording_is_refused(tmp_path: Path, key: str):
    """A recording with `padding:` anchors and `description: *a8` stalled `health --recorded` once walked."""
    path = _recording_with(tmp_path, "padding:\n" + "\n".join(_bomb_levels()) + f"\n{key}: *a8\n")
    with pytest.raises(UsageError, match=r"YAML aliases \(\*name\) are not accepted"):
        recorded_data(str(path))


@pytest.mark.parametrize("depth, said", [(100_000, "not valid YAML|YAML nested more than"), (100, "YAML nested more than 64")])
def test_deep_nesting_in_a_recording_is_refused_not_a_traceback(tmp_path: Path, depth: int, said: str):
    """100,000 nested `[` were a RecursionError traceback (only YAMLError was caught); libyaml itself stops at
    10,000 levels, gpuval's bound at 64."""
    path = _recording_with(tmp_path, "description: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(UsageError, match=f"rec.yaml: ({said})"):
        recorded_data(str(path))


@pytest.mark.parametrize("value", [
    "{a0: &a0 [x, x, x, x, x, x, x, x, x, x], " + ", ".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)) + "}",
    "[" * 100_000,
])
def test_a_hostile_opt_value_is_refused(value: str):
    """`--opt x={alias bomb}` hung dry runs (check_inert_tree walked 10^9 strings); deep nesting was a traceback."""
    with pytest.raises(UsageError, match="^--opt x: "):
        parse_options([f"x={value}"])


def test_a_baseline_file_goes_through_the_same_reader(tmp_path: Path):
    path = tmp_path / "bomb.yaml"
    path.write_text(f"sku: {H100}\nmetrics: {{}}\npadding:\n" + "\n".join(_bomb_levels()) + "\n")
    with pytest.raises(UsageError, match=r"YAML aliases \(\*name\) are not accepted"):
        baseline_source([path])


def test_the_reader_bounds_size_and_reads_plain_yaml():
    assert read_yaml("a: [1, {b: 2}]", "x") == {"a": [1, {"b": 2}]}
    with pytest.raises(UsageError, match="more than the"):
        read_yaml("#" * (MAX_BYTES + 1), "big.yaml")
    with pytest.raises(UsageError, match="^x: not valid YAML"):
        read_yaml("a: [", "x")
