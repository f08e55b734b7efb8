"""Slurm host lists both ways, in pure Python (the syntax the fleet check reads and writes), and a list too large
refused before anything is expanded."""

from __future__ import annotations

import time

import pytest

from gpuval.engines.slurm.hostlist import MAX_NODES, compress, expand
from gpuval.errors import UsageError
from tests.conftest import run_gpuval


@pytest.mark.parametrize("text,hosts", [
    ("n1", ["n1"]), ("n[1-3]", ["n1", "n2", "n3"]), ("gpu-[08-10],m7", ["gpu-08", "gpu-09", "gpu-10", "m7"]),
    ("n[1,3-4],n1", ["n1", "n3", "n4"]),
])
def test_host_lists_expand(text, hosts):
    assert expand(text) == hosts


@pytest.mark.parametrize("bad", ["", "n[3-1]", "n[a-b]", "n;rm", "n[1-2", "n[1-2000000]"])
def test_bad_host_lists_are_one_line_errors(bad):
    with pytest.raises(UsageError):
        expand(bad)


def test_compress_is_the_inverse_and_keeps_padding():
    hosts = [f"gpu-{i:03d}" for i in (1, 2, 3, 5, 10, 11)] + ["login", "n9", "n10"]
    text = compress(hosts)
    assert text == "login,gpu-[001-003,005,010-011],n[9-10]"
    assert sorted(expand(text)) == sorted(hosts)
    assert compress(expand("node[0001-4096]")) == "node[0001-4096]"


def test_a_huge_list_is_refused_at_once_having_expanded_nothing():
    """Forty ranges of a million hosts each took 80 s and ended in MemoryError: each item is counted first."""
    started = time.monotonic()
    with pytest.raises(UsageError, match="range 0-999999 is empty or too large"):
        expand(",".join(["n[0-999999]"] * 40))
    with pytest.raises(UsageError, match=f"2000040 nodes, more than {MAX_NODES}"):
        expand(",".join(["n[0-50000]"] * 40))
    assert time.monotonic() - started < 1.0
    assert len(expand(f"n[1-{MAX_NODES}]")) == MAX_NODES  # the limit itself is accepted


def test_the_command_line_refuses_a_huge_list_in_one_line():
    proc = run_gpuval("fleet", "check", "--on", "slurm", "--nodelist", ",".join(["n[0-999999]"] * 40), "--dry-run")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "too large" in proc.stderr
