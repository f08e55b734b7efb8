"""`gpuval tune` without an NVIDIA driver: one line, exit 2."""

from __future__ import annotations

from tests.conftest import run_gpuval


def test_tune_without_driver_is_one_line_exit_2():
    for args in (("tune", "clocks", "--list"), ("tune", "clocks", "--max"), ("tune", "persistence", "on")):
        proc = run_gpuval(*args)
        assert proc.returncode == 2, args
        assert "no NVIDIA driver" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_gpuval("tune", "clocks", "--max", "--reset")
    assert proc.returncode == 2 and "exactly one of" in proc.stderr
