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


def _loaded_after(argv: list[str], report: str) -> str:
    """Run gpuval's entry point with `argv` in a fresh interpreter; what `report` (an expression over sys.modules)
    says once it has ended."""
    code = f"import sys; sys.argv={['gpuval', *argv]!r}\nfrom gpuval.cli import main\n" \
           f"try:\n    main()\nexcept SystemExit:\n    pass\nprint('LOADED', {report})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return proc.stdout.rsplit("LOADED ", 1)[-1].strip() + proc.stderr


def test_a_command_imports_its_own_module_alone_and_the_list_names_every_one():
    """`gpuval health ...` imports gpuval.cli.health and no other command's module (Slurm's health check and a
    fleet check start gpuval hundreds of times); `gpuval --help` still lists every command."""
    own = "sorted(m for m in sys.modules if m.startswith('gpuval.cli.') and m != 'gpuval.cli._common')"
    assert _loaded_after(["health", "--help"], own) == "['gpuval.cli.health']"
    listed = run_gpuval("--help").stdout
    assert all(f"  {name} " in listed for name in ("validate", "health", "import", "fleet", "nodes", "jobs"))


def test_help_does_not_import_torch():
    heavy = "[m for m in ('torch', 'azure', 'kubernetes') if m in sys.modules]"
    assert _loaded_after(["--help"], heavy) == "[]"
