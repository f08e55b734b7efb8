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


def test_a_command_imports_its_own_module_alone_and_the_list_names_every_one():
    """`gpuval health ...` imports gpuval.cli.health and no other command's module (Slurm's health check and a
    fleet check start gpuval hundreds of times); `gpuval --help` still lists every command."""
    code = "import sys; sys.argv=['gpuval','health','--help']\n" \
           "from gpuval.cli import main\n" \
           "try:\n    main()\nexcept SystemExit:\n    pass\n" \
           "print('LOADED', sorted(m for m in sys.modules if m.startswith('gpuval.cli.') and m != 'gpuval.cli._common'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "LOADED ['gpuval.cli.health']" in proc.stdout, proc.stdout + proc.stderr
    listed = run_gpuval("--help").stdout
    assert all(f"  {name} " in listed for name in ("validate", "health", "import", "fleet", "nodes", "jobs"))


def test_help_does_not_import_torch():
    code = "import sys; from gpuval.cli import app; sys.argv=['gpuval','--help']\n" \
           "try:\n    app()\nexcept SystemExit:\n    pass\n" \
           "heavy = [m for m in ('torch', 'azure', 'kubernetes') if m in sys.modules]\n" \
           "print('HEAVY', heavy)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr
