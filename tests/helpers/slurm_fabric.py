"""A real Slurm cluster of N fake nodes on this host with a network between them: some nodes healthy, one whose
network interface is missing (broken), one behind a slow link (slow). Each fault is the node's own configuration,
made by ordinary Linux means; nothing in gpuval knows about it, and every figure measured is real gloo traffic
between real processes.

- The fabric: the healthy nodes share the host's network namespace; their address (NodeAddr, slurmctld's
  ControlAddr, the address gloo binds) is the root end of a veth pair, 10.X.Y.1.
- A slow node: its slurmd runs in a network namespace of its own (unshare -n), whose only link is the other end
  of that veth pair (10.X.Y.2), shaped by a token bucket (tc qdisc tbf) in both directions: a NIC that trained at a
  fraction of its rate. Everything the node sends to or receives from another node crosses that link; its in-node
  traffic stays on its own loopback, full speed (as NVLink does when an IB port is slow).
- A broken node: its tasks are told to use a network interface that does not exist (GLOO_SOCKET_IFNAME set by
  slurm.conf's TaskProlog for that node only): every rank it starts for a multi-node collective fails to create its
  network device, as a node whose IB port is gone; its in-node test binds loopback, as every in-node test does.
- Every node's tasks get GLOO_SOCKET_IFNAME from the TaskProlog (the fabric's interface), which is how a site
  points NCCL/gloo at its fabric (NCCL_SOCKET_IFNAME/NCCL_IB_HCA in /etc/nccl.conf or the prolog).

Needs network namespaces, veth pairs and tc (a Linux kernel; `available()` says whether this machine has them).
Devices are named gv<6 hex><r|n><i> (unique per cluster) and deleted, daemons stopped by PID, at the end.
"""

from __future__ import annotations

import os
import random
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers.slurm import SlurmCluster

MISSING_NIC = "gvnonic0"  # the broken node's "IB port": no such device


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


def _await_own_netns(pid: int, timeout_s: float = 20) -> None:
    """Wait until process `pid` (unshare -n, just spawned) is in a network namespace of its own. Moved into the
    namespace before `unshare` made it, the link would stay in ours (`ip link set ... netns PID` accepts that
    silently) and the node's script would wait for it forever: the cluster then timed out on one start in three."""
    ours = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != ours:
                return
        except FileNotFoundError:
            return  # it died: the cluster's start says so
        time.sleep(0.01)
    raise RuntimeError(f"process {pid} did not enter a network namespace of its own in {timeout_s:.0f} s")


NETS = Path(tempfile.gettempdir()) / "gpuval-fabric-nets"  # one file per 10.X.0.0/16 a live cluster holds


def _reserve_net() -> int:
    """A second octet X for this cluster's 10.X.Y.Z links that no other live cluster on this host holds (test
    sessions side by side: pytest-xdist workers, other checkouts): a file per X, made with O_EXCL, naming its
    owner's pid; a file whose owner is gone is taken over."""
    NETS.mkdir(exist_ok=True)
    for net in random.sample(range(100, 250), 150):
        marker = NETS / str(net)
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(marker.read_text() or "0")
                os.kill(owner, 0)
                continue  # held by a live process
            except (ValueError, ProcessLookupError, FileNotFoundError):
                marker.unlink(missing_ok=True)  # its owner is gone: free, for the next pass or another taker
                continue
            except PermissionError:
                continue
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return net
    raise RuntimeError(f"no free 10.X network for a test fabric ({NETS} holds 150)")


def available() -> str:
    """'' when this machine can build the fabric (netns, veth, tc tbf), else why not."""
    name = "gvprobe" + secrets.token_hex(2)
    try:
        probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10)
        if probe.returncode:
            return "no network namespaces (unshare -n)"
        _ip("link", "add", name, "type", "veth", "peer", "name", name + "p")
        try:
            subprocess.run(["tc", "qdisc", "add", "dev", name, "root", "tbf", "rate", "1mbit", "burst", "32kb",
                            "latency", "50ms"], check=True, capture_output=True, timeout=10)
        finally:
            _ip("link", "del", name)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"no veth pairs or tc here ({exc})"
    return ""


class FabricCluster(SlurmCluster):
    """SlurmCluster whose `slow` nodes sit behind rate-limited links and whose `broken` nodes have no NIC."""

    def __init__(self, root: Path, nodes: int | list[str] = 6, slow: dict[str, str] | None = None,
                 broken: set[str] | None = None, fabric: set[str] | None = None, **kwargs: object) -> None:
        """`fabric`: the nodes on the fabric (all by default); the others keep NodeAddr 127.0.0.1 and no
        GLOO_SOCKET_IFNAME, as a plain SlurmCluster's nodes (torchrun's rendezvous hosts its store only at an
        address it knows as this machine's: loopback or the hostname's)."""
        super().__init__(root, nodes=nodes, **kwargs)  # type: ignore[arg-type]
        self.slow = dict(slow or {})
        self.broken = set(broken or ())
        self.fabric = set(fabric) if fabric is not None else set(self.nodes)
        self.tag = secrets.token_hex(3)
        net = _reserve_net()
        self.net_marker = NETS / str(net)
        self.links = {name: (f"gv{self.tag}r{i}", f"gv{self.tag}n{i}", f"10.{net}.{i}.1", f"10.{net}.{i}.2")
                      for i, name in enumerate(sorted(self.slow))}
        first = next(iter(self.links.values()), None)
        self.control_addr = first[2] if first else "127.0.0.1"
        self.fabric_nic = first[0] if first else "lo"
        self.prolog = root / "task-prolog.sh"

    def node_addr(self, name: str) -> str:
        if name in self.links:
            return self.links[name][3]
        return self.control_addr if name in self.fabric else "127.0.0.1"

    def nic(self, name: str) -> str:
        """The interface a node's tasks are told to use."""
        if name in self.broken:
            return MISSING_NIC
        return self.links[name][1] if name in self.links else self.fabric_nic

    def extra_conf(self) -> list[str]:
        cases = "".join(f'  {name}) echo "export GLOO_SOCKET_IFNAME={self.nic(name)}" ;;\n'
                        for name in self.nodes if name in self.fabric)
        self.prolog.write_text(f'#!/bin/sh\ncase "$SLURMD_NODENAME" in\n{cases}esac\n')
        self.prolog.chmod(0o755)
        return [f"TaskProlog={self.prolog}"]

    def _shape(self, device: str, rate: str, verb: str = "add") -> list[str]:
        return ["tc", "qdisc", verb, "dev", device, "root", "tbf", "rate", rate, "burst", "64kb", "latency", "100ms"]

    def set_rate(self, name: str, rate: str) -> None:
        """Shape slow node `name`'s link to `rate`, both directions, while it runs (tc qdisc change on the host's end
        and, through its slurmd's network namespace, on the node's): a NIC that drops to a fraction of its rate
        under a running job. Give the rate back the same way."""
        root_end, ns_end, *_ = self.links[name]
        [slurmd] = [p for p in self.procs if f"slurmd -D -N {name} " in " ".join(map(str, p.args))]
        for argv in (self._shape(root_end, rate, "change"),
                     ["nsenter", "-t", str(slurmd.pid), "-n", *self._shape(ns_end, rate, "change")]):
            subprocess.run(argv, check=True, capture_output=True, timeout=20)

    def start(self) -> "FabricCluster":
        for name, (root_end, ns_end, root_ip, _) in self.links.items():
            _ip("link", "add", root_end, "type", "veth", "peer", "name", ns_end)
            _ip("addr", "add", f"{root_ip}/24", "dev", root_end)
            _ip("link", "set", root_end, "up")
            subprocess.run(self._shape(root_end, self.slow[name]), check=True, capture_output=True, timeout=10)
        super().start()
        return self

    def slurmd_argv(self, name: str) -> list[str]:
        if name not in self.links:
            return super().slurmd_argv(name)
        _, ns_end, root_ip, ns_ip = self.links[name]
        shape = " ".join(self._shape(ns_end, self.slow[name]))
        # The host's name server is not reachable from the node's namespace (the host forwards nothing): every
        # lookup there (c10d asks for its peer's name) waited out the resolver's timeouts, 13 s per job. The
        # node's own resolv.conf names its loopback, where nothing answers: a lookup fails at once, as on a
        # cluster whose compute nodes have no reverse DNS.
        resolv = self.root / "resolv-netns.conf"
        resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        script = (f"mount -t tmpfs tmpfs {self.root / 'tmpfs'} && mount --bind {resolv} /etc/resolv.conf && "
                  f"while ! ip link show {ns_end} >/dev/null 2>&1; do sleep 0.1; done && "
                  f"ip link set lo up && ip addr add {ns_ip}/24 dev {ns_end} && ip link set {ns_end} up && "
                  f"ip route add default via {root_ip} && {shape} && exec slurmd -D -N {name} -f {self.conf}")
        return ["unshare", "-m", "-n", "--propagation", "private", "sh", "-c", script]

    def slurmd_started(self, name: str, pid: int) -> None:
        if name in self.links:
            _await_own_netns(pid)
            _ip("link", "set", self.links[name][1], "netns", str(pid))

    def stop(self) -> None:
        super().stop()
        for root_end, *_ in self.links.values():
            subprocess.run(["ip", "link", "del", root_end], capture_output=True, timeout=20)
        self.net_marker.unlink(missing_ok=True)
