"""A real Slurm cluster on this host for tests: its own munged (own socket and key), slurmctld, and one slurmd
per fake node, on free ports, under one temp dir, with a fresh ClusterName. Started and stopped by PID only,
so other test runs on the same machine (and their daemons) are never touched.

Nodes share the host; each slurmd gets a private TmpFS (unshare + tmpfs mount) so `srun --mpi=pmix` works
across them. Usage: `with SlurmCluster(tmp, nodes=2) as cluster: env = cluster.env`. The test session's one
shared cluster (tests/conftest.py's `slurm` fixture) is laid out in tests/helpers/slurm_session.py. A test asks the
cluster as an admin would through its methods: `command` (any client command), `scontrol`, `node` (one node's state
and reason, read by gpuval's own parser) and `drained` (every drained node with its reason).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from gpuval.engines.nodes import SlurmNode
from gpuval.engines.slurm.nodes import parse_node

MUNGE_KEY = Path("/etc/munge/munge.key")


# The daemons' ports come from below the kernel's ephemeral range (32768-60999 on Linux by default): a port bind(0)
# hands out is ephemeral, and any outgoing connection on this machine (srun, sinfo, a rank's rendezvous, another
# test's cluster) could take it as its source port between this check and the daemon's own bind; a slurmd then
# exited at start with "Address already in use" in a loaded full run. Chosen at random there, and checked.
DAEMON_PORTS = range(20_000, 32_000)


def free_ports(count: int) -> list[int]:
    """Ports free on every address now, from DAEMON_PORTS, all different (held open together while chosen)."""
    socks: list[socket.socket] = []
    try:
        while len(socks) < count:
            sock = socket.socket()
            try:
                sock.bind(("", DAEMON_PORTS.start + secrets.randbelow(len(DAEMON_PORTS))))
            except OSError:
                sock.close()
                continue
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


class SlurmCluster:
    """munged + slurmctld + N slurmd, all private to one temp dir."""

    def __init__(self, root: Path, nodes: int | list[str] = 2, cpus: int = 2, min_job_age: int = 300,
                 partitions: dict[str, str] | None = None) -> None:
        """`nodes`: fake nodes n1..nN, or their names; `partitions` maps a partition's name to its nodes (a Slurm
        host list), the first one the default; without it one partition, debug, holds every node."""
        self.root = root
        self.nodes = [f"n{i + 1}" for i in range(nodes)] if isinstance(nodes, int) else list(nodes)
        self.partitions = partitions or {"debug": "ALL"}
        self.cpus = cpus
        self.min_job_age = min_job_age
        self.cluster_name = "gv" + secrets.token_hex(4)
        self.procs: list[subprocess.Popen] = []
        self.conf = root / "slurm.conf"
        self.munge_socket = root / "munge" / "munge.socket"
        self.jobcomp = root / "jobcomp.txt"

    @property
    def env(self) -> dict[str, str]:
        """What Slurm's client commands need to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def _start_munge(self) -> None:
        mdir = self.munge_socket.parent
        self.root.chmod(0o755)  # munged (user munge) walks the path to its socket
        mdir.mkdir(parents=True)
        key = mdir / "munge.key"
        if MUNGE_KEY.exists():
            shutil.copy(MUNGE_KEY, key)
        else:
            key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)
        shutil.chown(mdir, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        mdir.chmod(0o755)  # munged wants its socket's folder searchable by all
        self._spawn(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "-F", f"--socket={self.munge_socket}",
                     f"--key-file={key}", f"--pid-file={mdir / 'munged.pid'}", f"--log-file={mdir / 'munged.log'}",
                     f"--seed-file={mdir / 'munged.seed'}"], "munged")
        self._until(lambda: self.munge_socket.exists(), "munged socket")

    def _write_conf(self) -> None:
        ctl_port, *node_ports = free_ports(1 + len(self.nodes))
        lines = [
            f"ClusterName={self.cluster_name}",
            # Job ids of their own: gpuval derives a job's rendezvous port from its id, and other Slurm test
            # clusters on this machine (other sessions) would otherwise number their jobs 1, 2, ... alike.
            f"FirstJobId={secrets.randbelow(60_000_000) + 1_000}",
            f"SlurmctldHost=localhost({self.control_addr})",
            f"SlurmctldPort={ctl_port}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool-%n'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            f"MinJobAge={self.min_job_age}",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp}",
            "SchedulerParameters=sched_interval=1",
            "KillWait=2",
        ]
        # One TmpFS path; each slurmd mounts its own tmpfs there in a private mount namespace.
        (self.root / "tmpfs").mkdir()
        lines.append(f"TmpFS={self.root / 'tmpfs'}")
        for name, port in zip(self.nodes, node_ports):
            lines.append(f"NodeName={name} NodeHostname={socket.gethostname()} NodeAddr={self.node_addr(name)} "
                         f"Port={port} CPUs={self.cpus} RealMemory=4000")
        for i, (partition, members) in enumerate(self.partitions.items()):
            lines.append(f"PartitionName={partition} Nodes={members} Default={'NO' if i else 'YES'} "
                         "MaxTime=INFINITE State=UP")
        lines += self.extra_conf()
        (self.root / "state").mkdir()
        self.conf.write_text("\n".join(lines) + "\n")

    control_addr = "127.0.0.1"  # where slurmd and the client commands reach slurmctld

    def node_addr(self, name: str) -> str:
        """NodeAddr of a node: where slurmctld, srun and a job's other ranks reach it."""
        return "127.0.0.1"

    def extra_conf(self) -> list[str]:
        """slurm.conf lines a variant adds (TaskProlog, ...)."""
        return []

    def slurmd_argv(self, name: str) -> list[str]:
        """How a node's slurmd starts: in a private mount namespace with its own tmpfs at TmpFS (pmix needs it)."""
        script = f"mount -t tmpfs tmpfs {self.root / 'tmpfs'} && exec slurmd -D -N {name} -f {self.conf}"
        return ["unshare", "-m", "--propagation", "private", "sh", "-c", script]

    def slurmd_started(self, name: str, pid: int) -> None:
        """Called once a node's slurmd process exists (a variant moves a network device into its namespace)."""

    def _spawn(self, argv: list[str], name: str) -> None:
        log = open(self.root / f"{name}.stdout", "w")
        env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True))

    def _until(self, ready, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"daemon exited while waiting for {what}: {dead[0]}; see {self.root}")
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}; see {self.root}")

    def _idle(self) -> bool:
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.cmd_env())
        states = proc.stdout.split()
        return proc.returncode == 0 and bool(states) and all(s == "idle" for s in states)

    def cmd_env(self) -> dict[str, str]:
        """os.environ plus this cluster's SLURM_CONF."""
        return dict(os.environ, **self.env)

    def command(self, *argv: str, check: bool = True) -> str:
        """What a Slurm client command (`argv`: sinfo, scontrol, scancel...) prints on this cluster; with `check`
        a failure fails the test."""
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.cmd_env(), timeout=60,
                              check=check).stdout

    def scontrol(self, *args: str) -> str:
        """What `scontrol ARGS` prints on this cluster, run as an admin would (a refusal fails the test)."""
        return self.command("scontrol", *args)

    def node(self, name: str) -> SlurmNode:
        """The node now, as scontrol shows it (its state with flags, its reason, its comment), read by gpuval's own
        parser (scontrol's lines, as gpuval reads them: not one -o line)."""
        return parse_node(name, self.scontrol("show", "node", name))

    def drained(self, partition: str | None = None) -> dict[str, str]:
        """node -> drain reason, of every node draining or drained (of `partition`), as sinfo lists them."""
        scope = ["-p", partition] if partition else ["-a"]  # -a: hidden partitions too (sinfo refuses it with -p)
        listing = self.command("sinfo", "-h", "-N", *scope, "-O", "NodeList:0|,StateComplete:0|,Reason:0")
        rows = [line.split("|", 2) for line in listing.splitlines()]
        return {name: reason for name, state, reason in rows if "drain" in state}

    def start(self) -> "SlurmCluster":
        """Start every daemon and wait until all nodes are idle."""
        self._start_munge()
        self._write_conf()
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        for name in self.nodes:
            self._spawn(self.slurmd_argv(name), f"slurmd-{name}")
            self.slurmd_started(name, self.procs[-1].pid)
        # About a second per node on an idle machine; a shared 2-core machine under load took over 30 s for six.
        self._until(self._idle, "idle nodes", timeout=120)
        return self

    def stop(self) -> None:
        """Cancel the cluster's jobs still running (their slurmstepd outlives slurmd), then stop the daemons we
        started (slurmd, slurmctld, munged), by PID."""
        self._cancel_jobs()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)

    def lose_node(self, name: str) -> str:
        """Kill a node's slurmd with SIGKILL, as a node that hangs or loses power leaves it: its jobs' steps run on,
        but nothing reaches the node through Slurm until `restore_node` (slurmctld notices only after
        SlurmdTimeout). Returns the SlurmdStartTime it had, for `restore_node`."""
        [proc] = [p for p in self.procs if f"slurmd -D -N {name} " in " ".join(map(str, p.args))]
        started = self._slurmd_start_time(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        self.procs.remove(proc)
        return started

    def restore_node(self, name: str, started: str) -> None:
        """Start a lost node's slurmd again and wait until it has registered (a new SlurmdStartTime)."""
        self._spawn(self.slurmd_argv(name), f"slurmd-{name}")
        self.slurmd_started(name, self.procs[-1].pid)
        self._until(lambda: self._slurmd_start_time(name) not in ("", started), f"{name}'s slurmd back", 60)

    def _slurmd_start_time(self, name: str) -> str:
        line = self.scontrol("show", "node", name, "-o")
        return next((f.split("=", 1)[1] for f in line.split() if f.startswith("SlurmdStartTime=")), "")

    def _cancel_jobs(self, wait_s: float = 10) -> None:
        try:
            jobs = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=self.cmd_env(),
                                  timeout=10).stdout.split()
            if not jobs:
                return
            subprocess.run(["scancel", *jobs], capture_output=True, env=self.cmd_env(), timeout=10)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and subprocess.run(
                    ["squeue", "-h", "-t", "RUNNING,COMPLETING", "-o", "%i"], capture_output=True, text=True,
                    env=self.cmd_env(), timeout=10).stdout.strip():
                time.sleep(0.2)
        except (OSError, subprocess.SubprocessError):
            pass  # slurmctld already gone: nothing to ask

    def __enter__(self) -> "SlurmCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
