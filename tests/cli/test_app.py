"""The front door: start-up speed, version, help, error style."""

from __future__ import annotations

import subprocess
import sys

from gpuval import __version__
from tests.conftest import run_gpuval


def test_version():
    proc = run_gpuval("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"gpuval {__version__}"


def test_help_does_not_import_torch():
    code = "import sys; from gpuval.cli import app; sys.argv=['gpuval','--help']\n" \
           "try:\n    app()\nexcept SystemExit:\n    pass\n" \
           "heavy = [m for m in ('torch', 'azure', 'kubernetes') if m in sys.modules]\n" \
           "print('HEAVY', heavy)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr
