"""The fork server behind `run_gpuval` (tests/helpers/cli_server.py) answers as `python -m gpuval` in a fresh
interpreter does: same exit code, same output, the call's own arguments, environment and working directory; a call past its timeout is killed and raised as subprocess's TimeoutExpired; and no gpuval module reads the
environment when imported (what lets the server import them once for every call)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuval.node.dist_env import free_port
from tests.conftest import DATA
from tests.helpers.cli_server import CONSOLE_VARIABLES, PRELOAD, CliServer
from tests.helpers.processes import running

LOG = DATA / "nccl-tests" / "h200-1gpu-gpuval-allreduce.txt"


@pytest.fixture(scope="module")
def server():
    cli = CliServer()
    yield cli
    cli.close()


def _fresh(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuval", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, stdin=subprocess.DEVNULL, timeout=120)


@pytest.mark.parametrize("args", [["--version"], ["bench", "--help"], ["parse", "log.txt", "--json"],
                                  ["parse", "missing.txt"], ["history", "--json"],
                                  ["bench", "all_reduce", "-b", "x"], ["nosuchcommand"]])
def test_a_forked_call_answers_as_a_fresh_interpreter(server: CliServer, tmp_path: Path, args: list[str]):
    """Relative paths from the call's directory, its environment (GPUVAL_DB: the store it
    reads), usage errors (exit 2) and an unknown command: byte for byte what a fresh `python -m gpuval` prints."""
    shutil.copy(LOG, tmp_path / "log.txt")
    env = {**os.environ, "GPUVAL_DB": str(tmp_path / "own.db"), "GPUVAL_RESULTS": str(tmp_path / "own.jsonl")}
    fresh = _fresh(args, env, tmp_path)
    forked = server.run(args, env, 120, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    if args[:2] == ["parse", "log.txt"]:
        assert forked.returncode == 0 and "all_reduce" in forked.stdout  # the file was read


def test_the_calls_environment_is_its_own(server: CliServer, tmp_path: Path):
    """Two calls with different stores: each reads its own (nothing of the first call stays in the server)."""
    env = dict(os.environ)
    first = {**env, "GPUVAL_DB": str(tmp_path / "a.db"), "GPUVAL_RESULTS": str(tmp_path / "a.jsonl")}
    second = {**env, "GPUVAL_DB": str(tmp_path / "b.db"), "GPUVAL_RESULTS": str(tmp_path / "b.jsonl")}
    assert server.run(["import", str(LOG)], first, 120, tmp_path).returncode == 0
    assert json.loads(server.run(["history", "--json"], first, 120, tmp_path).stdout)
    assert json.loads(server.run(["history", "--json"], second, 120, tmp_path).stdout or "[]") == []


def test_a_call_whose_interpreter_would_start_differently_runs_as_a_fresh_one(server: CliServer, tmp_path: Path):
    """PYTHONPATH with a sitecustomize (what the suite's hostile-node tests plant): a fresh interpreter runs it as
    it starts, so the call must not be forked from a server that started without it."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.stderr.write('sitecustomize ran\\n')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = server.run(["--version"], env, 60, tmp_path)
    assert proc.returncode == 0 and proc.stderr == "sitecustomize ran\n", proc.stderr


def test_a_call_past_its_timeout_is_killed_and_the_next_one_runs(server: CliServer, tmp_path: Path):
    """The exporter serves until stopped: past 3 s the call raises TimeoutExpired, and the server answers the
    next call."""
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(["exporter", "--port", str(free_port()), "--address", "127.0.0.1"], dict(os.environ), 3,
                   tmp_path)
    assert server.run(["--version"], dict(os.environ), 60, tmp_path).returncode == 0


def test_a_call_cut_short_on_the_callers_side_takes_its_process_and_the_server_with_it(tmp_path: Path,
                                                                                       monkeypatch):
    """pytest's timeout (or Ctrl-C) raised while a call runs: its process is killed and the server replaced, so
    the call's late reply is never read as the next call's answer."""
    cli = CliServer()
    started: list[int] = []

    def interrupted(server, pid, timeout):
        started.append(pid)
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(CliServer, "_wait", staticmethod(interrupted))
        with pytest.raises(KeyboardInterrupt):
            cli.run(["exporter", "--port", str(free_port()), "--address", "127.0.0.1"], dict(os.environ), 60,
                    tmp_path)
    [pid] = started
    deadline = time.monotonic() + 10  # SIGKILL is sent; its end follows within moments
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid)
    try:
        version = cli.run(["--version"], dict(os.environ), 60, tmp_path)
        assert version.returncode == 0 and version.stdout.startswith("gpuval ")
    finally:
        cli.close()


def test_no_gpuval_module_reads_the_environment_when_imported():
    """Every module the server imports, imported with os.environ replaced by one that records who reads it: no
    read comes from gpuval's own code (rich's consoles read theirs, CONSOLE_VARIABLES, and a call whose
    environment differs there runs as a plain subprocess)."""
    probe = (
        "import importlib, os, sys, traceback\n"
        "reads = []\n"
        "class Watched(type(os.environ)):\n"
        "    def __getitem__(self, key):\n"
        "        frame = next((f for f in reversed(traceback.extract_stack()[:-1]) if not f.filename.endswith(('os.py', '_collections_abc.py', '_collections_abc>'))), None)\n"
        "        reads.append((key, frame.filename if frame else ''))\n"
        "        return super().__getitem__(key)\n"
        "os.environ.__class__ = Watched\n"
        "for name in sys.argv[1].split(','): importlib.import_module(name)\n"
        "print('\\n'.join(f'{k} {f}' for k, f in reads if '/gpuval/' in f))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, ",".join(PRELOAD)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", proc.stdout
    assert "NO_COLOR" in CONSOLE_VARIABLES and "COLUMNS" in CONSOLE_VARIABLES
