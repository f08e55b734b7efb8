"""The test session's one real Slurm cluster, shared by the engine, operate and fleet tests (tests/conftest.py's
`slurm` fixture starts it the first time a test asks for it and stops it by PID when the session ends).

Nine fake nodes on this host, each test's state kept apart by partition and node name, never by a second cluster:

- debug (the default partition), n1 and n2 (NodeAddr 127.0.0.1): the engine tests' jobs (`--nodes 1` or `2`, no
  node named) and the operate tests' node actions (drain, resume) land here.
- timelimit, n3: one job from the start, `sleep` past its one-minute --time (Slurm's least), judged by the engine
  tests' time-limit test; submitted when the cluster starts, its minute runs beside the other tests.
- fleet, f1..f6: the fleet check's six nodes. Where this machine can build a network between fake nodes
  (tests/helpers/slurm_fabric.py), they sit on it: f3 is broken (its tasks are pointed at a network interface that
  does not exist) and f5 is slow (its slurmd sits behind a 200 Mbit/s link); outside the fleet partition no job
  reaches them, so no other test sees those faults.

MinJobAge=2: finished jobs leave squeue within seconds, so job status must fall back to the job-completion record
(no slurmdbd here, so sacct is disabled), the path clusters without accounting take.

A session's tests run one at a time (each pytest-xdist worker is a session with a cluster of its own), so a node's
state is the running test's alone; `in_service` lifts every drain a test
left behind before the next test starts.

Two tests keep a private cluster, because what they need is a cluster-wide setting that would change every other
test's cluster: the HealthCheckProgram that slurmd runs on every node every 2 s (tests/operate/test_health_drain.py)
and TopologyPlugin=topology/tree, which makes every node's jobs follow switches (the fleet's topology test).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.helpers.slurm import SlurmCluster
from tests.helpers.slurm_fabric import FabricCluster, available

FLEET = [f"f{i}" for i in range(1, 7)]
NODES = ["n1", "n2", "n3", *FLEET]
PARTITIONS = {"debug": "n[1-2]", "timelimit": "n3", "fleet": "f[1-6]"}
FLEET_BROKEN, FLEET_SLOW = "f3", "f5"
OVERTIME_NODE = "n3"


def session_cluster(root: Path) -> SlurmCluster:
    """The shared cluster under `root` (not started): with the fleet's fabric where this machine can build it,
    else plain fake nodes (`no_fabric` then says why, and the fleet test that needs the fabric skips)."""
    why = available()
    common = dict(nodes=NODES, min_job_age=2, partitions=PARTITIONS)
    cluster: SlurmCluster
    if why:
        cluster = SlurmCluster(root, **common)  # type: ignore[arg-type]
    else:
        cluster = FabricCluster(root, slow={FLEET_SLOW: "200mbit"}, broken={FLEET_BROKEN}, fabric=set(FLEET),
                                **common)
    cluster.no_fabric = why  # type: ignore[attr-defined]
    return cluster


def submit_overtime(cluster: SlurmCluster) -> str:
    """A one-CPU job on n3 that Slurm must stop at its one-minute time limit; its job id."""
    proc = subprocess.run(["sbatch", "--parsable", "--job-name=overtime", "--time=1", "--partition=timelimit",
                           f"--nodelist={OVERTIME_NODE}", "--ntasks=1", f"--output={cluster.root / 'overtime.out'}",
                           "--wrap", "sleep 300"], capture_output=True, text=True, env=cluster.cmd_env(), timeout=60)
    if proc.returncode:
        raise RuntimeError(f"sbatch of the time-limit job failed: {proc.stderr.strip()}")
    return proc.stdout.strip().split(";")[0]


def in_service(cluster: SlurmCluster) -> None:
    """Delete the re-test reservations a killed `fleet retest` leaves (by design: its lifted nodes stay out of
    everyone's jobs) and resume every drained node (a drain is how a test acts on a node; the next test starts with
    none), so that one test that failed mid re-test fails alone."""
    shown = cluster.command("scontrol", "show", "reservation", "-o", check=False)
    for name in re.findall(r"ReservationName=(gpuval-retest-\S+)", shown):
        cluster.scontrol("delete", f"reservationname={name}")
    for node in sorted(cluster.drained()):
        cluster.scontrol("update", f"nodename={node}", "state=resume")
