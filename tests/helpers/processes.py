"""Local processes seen through /proc: whether one still runs, and the ranks of a local run (`gpuval bench
--nprocs N`) found from its launcher's pid."""

from __future__ import annotations

from pathlib import Path


def rank_pids(launcher: int) -> tuple[int, dict[int, int]]:
    """The starter under a launcher and the local ranks it forked, by the name each takes (gpuval-rank-R)."""
    children: dict[int, list[int]] = {}
    names = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
        names[int(entry.name)] = stat[stat.index("(") + 1:stat.rindex(")")]
    [starter] = children[launcher]
    return starter, {int(names[pid].rsplit("-", 1)[1]): pid for pid in children.get(starter, [])
                     if names[pid].startswith("gpuval-rank-")}


def running(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's end waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
