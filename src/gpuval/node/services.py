"""What runs beside the GPUs on this host: the fabric manager service, loaded kernel modules, the process limits
NCCL needs, and where a tool is installed. Each read says why it could not answer instead of guessing."""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
from pathlib import Path

from gpuval.node.imex import IMEX_CHANNELS, ImexHost
from gpuval.node.machine import FabricManager, HardwareUnavailable, ResourceLimits

FM_SERVICE = "nvidia-fabricmanager"
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)*)")


def _run(argv: list[str], timeout_s: float = 15) -> tuple[int, str, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not installed"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer in {timeout_s:g} s"
    return done.returncode, done.stdout.strip(), done.stderr.strip()


def unit_state(unit: str) -> tuple[str | None, str]:
    """systemd's state of a unit (`systemctl is-active`: active, inactive, failed, activating ...), or None and why
    it cannot say."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return None, "systemctl is not installed"
    code, out, err = _run([systemctl, "is-active", unit])
    # is-active prints the state and exits non-zero unless active; without systemd as init (a container) it prints
    # nothing useful and explains on stderr
    if out and re.fullmatch(r"[a-z-]+", out.splitlines()[-1]):
        return out.splitlines()[-1], ""
    return None, f"systemctl cannot say: {(err or out or f'exit code {code}').splitlines()[0]}"


def fabric_manager() -> FabricManager:
    """systemd's state of nvidia-fabricmanager (`systemctl is-active`) and `nv-fabricmanager --version`."""
    service, why = unit_state(FM_SERVICE)
    details = [why] if why else []
    version = None
    exe = shutil.which("nv-fabricmanager") or next((p for p in ("/usr/bin/nv-fabricmanager",) if Path(p).exists()),
                                                   None)
    if exe is None:
        details.append("nv-fabricmanager is not installed here")
    else:
        code, out, err = _run([exe, "--version"])
        match = _VERSION.search(out or err)
        version = match.group(1) if match else None
        if version is None:
            details.append(f"nv-fabricmanager --version said {(out or err or f'exit code {code}')!r}")
    return FabricManager(service, version, "; ".join(details))


def resource_limits(root: Path = Path("/")) -> ResourceLimits:
    """RLIMIT_MEMLOCK (soft) of this process (None: unlimited) and the size of /dev/shm (None: there is none)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    memlock = None if soft == resource.RLIM_INFINITY else int(soft)
    try:
        fs = os.statvfs(root / "dev/shm")
        shm: int | None = fs.f_blocks * fs.f_frsize
    except OSError:
        shm = None
    return ResourceLimits(memlock_bytes=memlock, shm_bytes=shm)


def kernel_modules(root: Path = Path("/")) -> set[str]:
    """Loaded modules (/proc/modules) and built-in ones that show in /sys/module."""
    names: set[str] = set()
    try:
        names.update(line.split()[0] for line in (root / "proc/modules").read_text().splitlines() if line.strip())
    except OSError as exc:
        if not (root / "sys/module").is_dir():
            raise HardwareUnavailable(f"cannot read {root / 'proc/modules'}: {exc.strerror}") from None
    try:
        names.update(p.name for p in (root / "sys/module").iterdir())
    except OSError:
        pass
    return names


def kernel_release(root: Path = Path("/")) -> str:
    """uname -r of the running kernel."""
    try:
        return (root / "proc/sys/kernel/osrelease").read_text().strip()
    except OSError:
        return os.uname().release


IMEX_SERVICE = "nvidia-imex"


def imex_host(root: Path = Path("/")) -> ImexHost:
    """IMEX on this node: the service's state, `nvidia-imex-ctl -q` and `-N -j` (their raw answers; node.imex reads
    them), the channel devices and their major number."""
    service, why = unit_state(IMEX_SERVICE)
    host = ImexHost(service=service, detail=why)
    exe = shutil.which("nvidia-imex-ctl")
    host.installed = exe is not None
    problems = [why] if why else []
    try:
        host.channels = sorted(p.name for p in (root / IMEX_CHANNELS).iterdir() if re.fullmatch(r"channel\d+", p.name))
    except OSError:
        host.channels = []
    # a daemon that is not running has nothing to say: an idle tray is not kept waiting on two time-outs
    if exe is not None and (host.channels or service in (None, "active", "activating", "reloading")):
        for flag, key in ((["-q"], "query"), (["-N", "-j"], "domain")):
            code, out, err = _run([exe, *flag], timeout_s=10)
            if code == 0 and out:
                setattr(host, key, out)
            else:
                said = (err or out or f"exit code {code}").splitlines()[0]
                problems.append(f"nvidia-imex-ctl {' '.join(flag)}: {said}")
    try:
        devices = (root / "proc/devices").read_text()
    except OSError:
        devices = ""
    major = re.search(r"^\s*(\d+) nvidia-caps-imex-channels$", devices, re.M)
    host.channel_major = int(major.group(1)) if major else None
    host.detail = "; ".join(problems)
    return host
