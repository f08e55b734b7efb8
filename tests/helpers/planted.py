"""What a job's user plants on a node against the operator's gpuval (reliability-4 D1, D3), and the operator's
timed process it is planted against; for the real-Slurm test in tests/workloads/diagnose/test_slurm.py.

- `PLANT`, run by user nobody's system Python (it cannot read gpuval's venv) inside nobody's job on the node: makes
  root's hooks folder first, in the task's TMPDIR, writable by all; puts links at the names root's timed process
  will use (`<pid>.rank`, `<pid>.stacks`) to two of root's files; and forges a state file, as the review did, that
  names a root process outside any job, SIGKILL as its stack signal, no job, a start far in the future, no process
  start time and /etc/hostname as its stacks.
- `plant_gpuval`: a `gpuval/` package in a folder, whose import notes that it ran, in PWNED beside it
  (reliability-4 D2; red team 5 N1: `-m gpuval.workloads.rank_starter` imports the planted `__init__` first).
- `TIMED`, root's process on the node: writes its pid, waits for the plant, then times ten steps with gpuval.hooks'
  StepTimer and sleeps (a job to diagnose, its timer still open).
"""

from __future__ import annotations

from pathlib import Path

PLANT = r'''
import json, os, struct, sys, time
root_pid, target, first, second = sys.argv[1:5]
folder = os.path.join(os.environ["TMPDIR"], "gpuval-ranks-0")
os.mkdir(folder)
os.chmod(folder, 0o777)
os.symlink(first, os.path.join(folder, root_pid + ".rank"))
os.symlink(second, os.path.join(folder, root_pid + ".stacks"))
now = time.time()
doc = json.dumps({"rank": 0, "local_rank": 0, "world": 1, "host": "forged", "pid": int(target), "job": "",
                  "started": 4102444800, "proc_start": None, "signal": 9, "stacks": "/etc/hostname"}).encode()
data = struct.pack("<4sH2x5q2d", b"GPVR", 1, 5, 5, 5, 5, 0, now, now) + struct.pack("<I", len(doc)) + doc
with open(os.path.join(folder, "4242.rank"), "wb") as handle:
    handle.write(data.ljust(4096, b"\0"))
print("plant done", flush=True)
'''

TIMED = r'''
import os, sys, time
from pathlib import Path
Path(sys.argv[1]).write_text(str(os.getpid()))
while not Path(sys.argv[2]).exists():
    time.sleep(0.1)
from gpuval.hooks import StepTimer
timer = StepTimer(every=5)
for _ in range(10):
    with timer.step():
        time.sleep(0.01)
Path(sys.argv[3]).write_text("stepped")
time.sleep(300)
'''

PLANTED = r'''
import os, sys
beside = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
open(os.path.join(beside, "PWNED"), "a").write(f"uid={os.getuid()} cwd={os.getcwd()} {sys.argv}\n")
'''


def plant_gpuval(folder: Path) -> Path:
    """A `gpuval/` package in `folder` whose import (its `__init__`, and its `__main__` under `python -m gpuval`)
    appends a line to PWNED in `folder`; that path."""
    (folder / "gpuval").mkdir()
    for name in ("__init__.py", "__main__.py"):
        (folder / "gpuval" / name).write_text(PLANTED)
    return folder / "PWNED"
