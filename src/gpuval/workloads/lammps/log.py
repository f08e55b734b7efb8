"""Read log.lammps (or LAMMPS' screen output) of any version, 2006 to today, into one document per finished run.

Each run ends with `Loop time of T on P procs for S steps with A atoms`. What follows depends on the version:
- the Performance line: `X tau/day` (lj units) or `X ns/day, Y hours/ns`, then `Z timesteps/s`, and since 2023
  `N atom-step/s` with a k, M or G prefix; 2014-2016 builds separate the figures with spaces, not commas;
- `C% CPU use with M MPI tasks x N OpenMP threads` (2014 on);
- the `MPI task timing breakdown` table (`Section | min | avg | max | %varavg | %total`), or before 2013 lines
  like `Pair  time (%) = 34.5536 (79.421)`.
Figures a version does not print but that follow from the Loop line by LAMMPS' own definitions (timesteps/s =
steps / loop time, atom-step/s = that times atoms) are filled in and named in `derived`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuval.errors import UsageError
from gpuval.workloads.lammps.inputs import benchmark_of_log

KIND = "lammps"

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_VERSION = re.compile(r"^LAMMPS \((.+?)\)\s*$", re.MULTILINE)
_UNITS = re.compile(r"^\s*(?:units\s+(\w+)|Unit style\s*:\s*(\w+))", re.MULTILINE)
_LOOP = re.compile(rf"^Loop time of ({_NUM}) on (\d+) procs(?: \([^)]*\))? for (\d+) steps with (\d+) atoms",
                   re.MULTILINE)
_PERF_FIGURE = re.compile(rf"({_NUM})\s+(tau/day|ns/day|hours/ns|timesteps/s|([kMGT]?)atom-step/s)")
_CPU_USE = re.compile(rf"({_NUM})% CPU use with (\d+) MPI tasks x (\d+) OpenMP threads")
_OLD_OMP = re.compile(r"using (\d+) OpenMP thread\(s\) per MPI task")
_NEW_ROW = re.compile(r"^(\w+)\s*\|(.*)$")
_OLD_ROW = re.compile(rf"^(\w+)\s+time \(%\) = ({_NUM}) \(({_NUM})\)")
_ERROR = re.compile(r"^(ERROR(?: on proc \d+)?: .*)$", re.MULTILINE)
_DIED = re.compile(r"^.*(?:exited on signal \d+|Segmentation fault|Killed|MPI_ABORT was invoked).*$", re.MULTILINE)
_PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_PERF_KEYS = {"tau/day": "tau_per_day", "ns/day": "ns_per_day", "hours/ns": "hours_per_ns",
              "timesteps/s": "timesteps_per_s"}
# Pre-2013 logs abbreviate Output; keep the names the timing table uses today.
_OLD_SECTION_NAMES = {"Outpt": "Output"}


@dataclass
class Section:
    """One row of the MPI task timing breakdown; times in seconds over the ranks (old logs: avg only)."""

    min_s: float | None
    avg_s: float | None
    max_s: float | None
    varavg_pct: float | None
    total_pct: float | None


@dataclass
class LammpsRun:
    """The figures of one finished run."""

    source: str
    version: str | None
    units: str | None
    loop_time_s: float
    procs: int
    steps: int
    atoms: int
    mpi_tasks: int | None = None
    omp_threads: int | None = None
    cpu_use_pct: float | None = None
    timesteps_per_s: float | None = None
    atom_steps_per_s: float | None = None
    tau_per_day: float | None = None
    ns_per_day: float | None = None
    hours_per_ns: float | None = None
    performance_line: str | None = None
    breakdown: dict[str, Section] = field(default_factory=dict)
    derived: list[str] = field(default_factory=list)
    run_index: int = 0
    benchmark: str | None = None  # gpuval's benchmark that wrote the input (its first comment says so), if any

    def to_json(self) -> dict[str, Any]:
        """The document `gpuval parse --json` prints."""
        return {"kind": KIND, **asdict(self)}


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _performance(run: LammpsRun, line: str) -> None:
    run.performance_line = line.strip()
    for value, unit, prefix in _PERF_FIGURE.findall(line):
        if unit.endswith("atom-step/s"):
            run.atom_steps_per_s = float(value) * _PREFIX[prefix]
        else:
            setattr(run, _PERF_KEYS[unit], float(value))


def _new_table(lines: list[str]) -> dict[str, Section]:
    """Rows after `Section |  min time  |  avg time ...`: split on '|', an empty cell is None."""
    sections: dict[str, Section] = {}
    for line in lines:
        if line.startswith("---"):
            continue
        row = _NEW_ROW.match(line)
        if not row:
            break
        cells = [_float(c.strip()) if c.strip() else None for c in row.group(2).split("|")]
        if len(cells) != 5:
            break
        sections[row.group(1)] = Section(*cells)
    return sections


def _old_table(lines: list[str]) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    for line in lines:
        row = _OLD_ROW.match(line)
        if row:
            name = _OLD_SECTION_NAMES.get(row.group(1), row.group(1))
            sections[name] = Section(None, float(row.group(2)), None, None, float(row.group(3)))
        elif sections and line.strip():
            break
    return sections


def _block_after_loop(run: LammpsRun, lines: list[str]) -> None:
    """Read what a version prints after the Loop line, up to the next run's output."""
    for i, line in enumerate(lines):
        if line.startswith("Performance:"):
            _performance(run, line.split(":", 1)[1])
        elif cpu := _CPU_USE.search(line):
            run.cpu_use_pct, run.mpi_tasks, run.omp_threads = float(cpu.group(1)), int(cpu.group(2)), int(cpu.group(3))
        elif line.startswith("Section |"):
            run.breakdown = _new_table(lines[i + 1:])
        elif _OLD_ROW.match(line) and not run.breakdown:
            run.breakdown = _old_table(lines[i:])
        elif line.startswith(("Nlocal:", "Loop time of")):
            break


def _fill_derived(run: LammpsRun) -> None:
    if run.timesteps_per_s is None and run.loop_time_s > 0:
        run.timesteps_per_s = run.steps / run.loop_time_s
        run.derived.append("timesteps_per_s")
    if run.atom_steps_per_s is None and run.loop_time_s > 0:
        run.atom_steps_per_s = run.steps * run.atoms / run.loop_time_s
        run.derived.append("atom_steps_per_s")


def is_lammps_output(text: str) -> bool:
    """Whether the text comes from LAMMPS at all (its banner line)."""
    return _VERSION.search(text) is not None


def parse_runs(text: str, source: str = "") -> list[LammpsRun]:
    """Every finished run in a LAMMPS log, in order; empty when the text holds none."""
    version = _VERSION.search(text)
    units_match = _UNITS.search(text)
    units = (units_match.group(1) or units_match.group(2)) if units_match else None
    omp = _OLD_OMP.search(text)
    lines = text.splitlines()
    starts = [(i, m) for i, line in enumerate(lines) if (m := _LOOP.match(line))]
    runs = []
    for index, (i, loop) in enumerate(starts):
        run = LammpsRun(source=source, version=version.group(1).strip() if version else None, units=units,
                        loop_time_s=float(loop.group(1)), procs=int(loop.group(2)), steps=int(loop.group(3)),
                        atoms=int(loop.group(4)), run_index=index)
        _block_after_loop(run, lines[i + 1:])
        if run.omp_threads is None and omp:  # 2013-2014 builds state threads only at start-up
            run.omp_threads = int(omp.group(1))
        _fill_derived(run)
        runs.append(run)
    return runs


def unfinished_reason(text: str) -> str:
    """Why a LAMMPS log holds no finished run: its ERROR line, else that it stops before the end of a run."""
    for pattern in (_ERROR, _DIED):
        found = pattern.search(text)
        if found:
            return found.group(0).strip()
    tail = [line for line in text.splitlines() if line.strip(" -=")][-1:] or ["(empty)"]
    return f"no run finished (no 'Loop time' line); the output stops at: {tail[0].strip()[:120]}"


def parse_log(text: str, source: str) -> list[LammpsRun]:
    """The finished runs of a LAMMPS log; a LAMMPS log without one is a one-line error saying why."""
    runs = parse_runs(text, source)
    if not runs:
        if is_lammps_output(text):
            raise UsageError(f"{source}: LAMMPS log without a finished run: {unfinished_reason(text)}")
        raise UsageError(f"{source}: not a LAMMPS log (no 'LAMMPS (version)' banner and no 'Loop time' line)")
    return runs


def read_documents(text: str, source: str) -> list[LammpsRun]:
    """`gpuval parse`/`import`: one document per finished run; a LAMMPS log with none is an error, other text
    yields nothing. A log gpuval's own inputs wrote names its benchmark."""
    if not is_lammps_output(text) and not _LOOP.search(text):
        return []
    runs = parse_log(text, source)
    name = benchmark_of_log(text)
    for run in runs:
        run.benchmark = name
    return runs
