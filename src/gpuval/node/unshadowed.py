"""The command lines that start gpuval's own Python processes (a module run as `python -m`) so that nothing in the
folder they start in can stand in for gpuval, torch or any module they import.

`python -m MODULE` puts its working folder first on sys.path, so a `gpuval/` package (or `torch/`, `runpy.py`)
that anyone could write there runs instead, with the rights of whoever started it: root's, where an operator runs
gpuval from a shared project folder, or where a Slurm job's working folder is one (red team 5 N1, reliability-4
D2). Every Python process gpuval starts, here or in a job, is started by one of these:

- `module_argv`: the module, unshadowed by the working folder, everything else as for `python -m` (PYTHONPATH, the
  user's site-packages and PYTHON* variables still apply: users install gpuval through them, and a test points a
  node's sitecustomize at a fleet's jobs through PYTHONPATH). This interpreter on Python 3.11+ runs
  `python -P -m MODULE`. On 3.10, which has no -P, and for another interpreter (a job's `--opt python=`, whose
  version is not known here), `python -c UNSHADOW MODULE`: it drops the working folder that `-c` put first on
  sys.path before it imports anything, then runs the module as `-m` would (runpy).
- `isolated_module_argv`: `python -I -m MODULE`, also blind to PYTHONPATH, PYTHON* variables and the user's
  site-packages: the probe of `jobs diagnose`, which runs inside another user's job and needs none of them (it runs
  from / as well: engines/probe.py).
- `child_env`: the environment of a child started here, with PYTHONSAFEPATH=1, so that what third-party code in
  it starts in turn (torch's and multiprocessing's helpers) leaves the working folder off sys.path too (Python
  3.11+; 3.10 ignores it).

A console script (`gpuval`, `torchrun` in an image) is safe as it is: Python puts the script's own folder first.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

# Run as `python -c UNSHADOW MODULE ARGS...`: the same as `python -P -m MODULE ARGS...` on every Python 3. `-c` puts
# "" (the working folder) first on sys.path unless PYTHONSAFEPATH or -P says not to; only `sys`, built in, is
# imported before it goes.
UNSHADOW = ('import sys; sys.path[:1] == [""] and sys.path.pop(0); del sys.argv[0]; import runpy; '
            'runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)')  # no ' : shell-quoted as it is
SAFE_PATH = "PYTHONSAFEPATH"


def module_argv(module: str, python: str | None = None) -> list[str]:
    """The argv that runs `python -m MODULE` (python: this interpreter when None) without importing from its
    working folder; its arguments follow."""
    python = python or sys.executable
    if python == sys.executable and sys.version_info >= (3, 11):
        return [python, "-P", "-m", module]
    return [python, "-c", UNSHADOW, module]


def isolated_module_argv(module: str, python: str) -> list[str]:
    """The argv that runs `python -m MODULE` isolated: neither its working folder nor PYTHON* variables nor the
    user's site-packages reach its sys.path."""
    return [python, "-I", "-m", module]


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (this process's environment when None) for a Python child started here: PYTHONSAFEPATH=1 added."""
    return {**(os.environ if env is None else env), SAFE_PATH: "1"}
