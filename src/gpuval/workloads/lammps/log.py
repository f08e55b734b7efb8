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

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuval.errors import UsageError
from gpuval.collectives.logtext import clip
from gpuval.workloads.lammps.inputs import BENCHMARKS

KIND = "lammps"

# Every pattern is tried on one line at a time, after a cheap substring test; a number starts only where no digit
# precedes it and has a bounded length, so no line, however hostile, costs more than linear time.
_NUM = r"(?<![\w.])[-+]?(?:\d{1,30}(?:\.\d{0,30})?|\.\d{1,30})(?:[eE][-+]?\d{1,3})?"
_UNITS = re.compile(r"\s*(?:units\s+(\w{1,32})|Unit style\s*:\s*(\w{1,32}))")
_LOOP = re.compile(rf"Loop time of ({_NUM}) on (\d{{1,12}}) procs(?: \([^)]{{0,200}}\))? for (\d{{1,15}}) steps "
                   rf"with (\d{{1,15}}) atoms")
_PERF_FIGURE = re.compile(rf"({_NUM})\s{{1,64}}(tau/day|ns/day|hours/ns|timesteps/s|([kMGT]?)atom-step/s)")
_CPU_USE = re.compile(rf"({_NUM})% CPU use with (\d{{1,12}}) MPI tasks x (\d{{1,12}}) OpenMP threads")
_OLD_OMP = re.compile(r"using (\d{1,6}) OpenMP thread\(s\) per MPI task")
_NEW_ROW = re.compile(r"(\w{1,64})\s*\|(.*)")
_OLD_ROW = re.compile(rf"(\w{{1,64}})\s+time \(%\) = ({_NUM}) \(({_NUM})\)")
_ERROR = re.compile(r"ERROR(?: on proc \d{1,12})?: ")
_DIED = ("exited on signal", "Segmentation fault", "Killed", "MPI_ABORT was invoked")
_BENCHMARK = re.compile(r"\(LAMMPS bench/in\.(\w{1,64}), written by gpuval")
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
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _performance(run: LammpsRun, line: str) -> None:
    run.performance_line = line.strip()[:500]
    for value, unit, prefix in _PERF_FIGURE.findall(line):
        number = _float(value)
        if number is None:
            continue
        if unit.endswith("atom-step/s"):
            run.atom_steps_per_s = number * _PREFIX[prefix]
        else:
            setattr(run, _PERF_KEYS[unit], number)


def _fill_derived(run: LammpsRun) -> None:
    if run.timesteps_per_s is None and run.loop_time_s > 0:
        run.timesteps_per_s = run.steps / run.loop_time_s
        run.derived.append("timesteps_per_s")
    if run.atom_steps_per_s is None and run.loop_time_s > 0:
        run.atom_steps_per_s = run.steps * run.atoms / run.loop_time_s
        run.derived.append("atom_steps_per_s")


class LammpsStream:
    """A LAMMPS log fed in pieces of whole lines; each run is returned once what follows its Loop line has been
    read (the next run, `Nlocal:`, or the end). One pass, each line looked at once: a log of 16,000 runs costs what
    its bytes cost. Text that is no LAMMPS output is skipped a piece at a time."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.version: str | None = None
        self.banner = False
        self.units: str | None = None
        self.omp: int | None = None
        self.benchmark: str | None = None
        self.run: LammpsRun | None = None  # the run whose closing block is being read
        self.table: str | None = None  # "new" or "old": inside that run's timing breakdown
        self.count = 0
        self.error: str | None = None
        self.died: str | None = None
        self.last = ""

    def feed(self, text: str) -> list[LammpsRun]:
        """Read whole lines; the runs that ended in them."""
        if not (self.banner or self.run) and "LAMMPS (" not in text and "Loop time of" not in text:
            return []
        done: list[LammpsRun] = []
        for raw in text.splitlines():
            self._line(clip(raw), done)
        return done

    def close(self) -> list[LammpsRun]:
        """The last run, once the whole log was read."""
        done: list[LammpsRun] = []
        self._end_run(done)
        return done

    def _end_run(self, done: list[LammpsRun]) -> None:
        run, self.run, self.table = self.run, None, None
        if run is None:
            return
        if run.omp_threads is None and self.omp:  # 2013-2014 builds state threads only at start-up
            run.omp_threads = self.omp
        run.benchmark = self.benchmark
        _fill_derived(run)
        done.append(run)

    def _line(self, line: str, done: list[LammpsRun]) -> None:
        if line.strip(" -="):
            self.last = line
        if line.startswith("Loop time of"):
            self._end_run(done)
            self._loop(line)
        elif self.run is not None:
            self._after_loop(line, done)
        elif line.startswith("LAMMPS (") and self.version is None:
            self.banner = True
            body = line.rstrip()
            self.version = body[8:-1].strip() if body.endswith(")") else None
        self._facts(line)

    def _loop(self, line: str) -> None:
        loop = _LOOP.match(line)
        time_s = _float(loop.group(1)) if loop else None
        if loop is None or time_s is None:
            return
        self.run = LammpsRun(source=self.source, version=self.version, units=self.units, loop_time_s=time_s,
                             procs=int(loop.group(2)), steps=int(loop.group(3)), atoms=int(loop.group(4)),
                             run_index=self.count)
        self.count += 1

    def _after_loop(self, line: str, done: list[LammpsRun]) -> None:
        """What a version prints after the Loop line, up to the next run's output."""
        run = self.run
        assert run is not None
        if self.table == "new" and self._new_row(run, line):
            return
        if self.table == "old" and self._old_row(run, line):
            return
        self.table = None
        if line.startswith("Performance:"):
            _performance(run, line.split(":", 1)[1])
        elif "% CPU use with" in line and (cpu := _CPU_USE.search(line)):
            run.cpu_use_pct, run.mpi_tasks, run.omp_threads = _float(cpu.group(1)), int(cpu.group(2)), int(cpu.group(3))
        elif line.startswith("Section |"):
            self.table = "new"
        elif "time (%) =" in line and not run.breakdown and self._old_row(run, line):
            self.table = "old"
        elif line.startswith("Nlocal:"):
            self._end_run(done)

    def _new_row(self, run: LammpsRun, line: str) -> bool:
        """A row of `Section |  min time  |  avg time ...`: split on '|', an empty cell is None."""
        if line.startswith("---"):
            return True
        row = _NEW_ROW.match(line)
        if not row:
            return False
        cells = [_float(c.strip()) if c.strip() else None for c in row.group(2).split("|", 5)]
        if len(cells) != 5:
            return False
        run.breakdown[row.group(1)] = Section(*cells)
        return True

    def _old_row(self, run: LammpsRun, line: str) -> bool:
        row = _OLD_ROW.match(line)
        if row:
            name = _OLD_SECTION_NAMES.get(row.group(1), row.group(1))
            run.breakdown[name] = Section(None, _float(row.group(2)), None, None, _float(row.group(3)))
            return True
        return not line.strip()

    def _facts(self, line: str) -> None:
        """What the whole log says once: units, threads, gpuval's benchmark, the first error."""
        if self.units is None and ("units" in line or "Unit style" in line) and (m := _UNITS.match(line)):
            self.units = m.group(1) or m.group(2)
        if self.omp is None and "OpenMP thread(s)" in line and (m := _OLD_OMP.search(line)):
            self.omp = int(m.group(1))
        if self.benchmark is None and "written by gpuval" in line and (m := _BENCHMARK.search(line)):
            self.benchmark = m.group(1) if m.group(1) in BENCHMARKS else None
        if self.error is None and line.startswith("ERROR") and _ERROR.match(line):
            self.error = line.strip()[:500]
        if self.died is None and any(word in line for word in _DIED):
            self.died = line.strip()[:500]

    def unfinished_reason(self) -> str:
        """Why the log holds no finished run: its ERROR line, else that it stops before the end of a run."""
        return self.error or self.died or (
            f"no run finished (no 'Loop time' line); the output stops at: {self.last.strip()[:120] or '(empty)'}")


def _read(text: str, source: str) -> tuple[list[LammpsRun], LammpsStream]:
    stream = LammpsStream(source)
    stream.banner = True  # a text given whole is read whole, LAMMPS banner or not
    runs = [*stream.feed(text), *stream.close()]
    return runs, stream


def is_lammps_output(text: str) -> bool:
    """Whether the text comes from LAMMPS at all (its banner line)."""
    return any(line.startswith("LAMMPS (") for line in text.splitlines())


def parse_runs(text: str, source: str = "") -> list[LammpsRun]:
    """Every finished run in a LAMMPS log, in order; empty when the text holds none."""
    return _read(text, source)[0]


def unfinished_reason(text: str) -> str:
    """Why a LAMMPS log holds no finished run: its ERROR line, else that it stops before the end of a run."""
    return _read(text, "")[1].unfinished_reason()


class LammpsDocuments(LammpsStream):
    """`gpuval parse`/`import`'s reader: one document per finished run; a LAMMPS log with none is an error saying
    why, other text yields nothing. A log gpuval's own inputs wrote names its benchmark."""

    def close(self) -> list[LammpsRun]:
        """The last run; the error when a LAMMPS log finished none."""
        done = super().close()
        if not self.count and self.banner:
            raise UsageError(f"{self.source}: LAMMPS log without a finished run: {self.unfinished_reason()}")
        return done


def parse_log(text: str, source: str) -> list[LammpsRun]:
    """The finished runs of a LAMMPS log held whole as text; a LAMMPS log without one is a one-line error saying
    why. (The tests' way to read a log; commands stream it through `LammpsDocuments`.)"""
    runs, stream = _read(text, source)
    if not runs:
        if is_lammps_output(text):
            raise UsageError(f"{source}: LAMMPS log without a finished run: {stream.unfinished_reason()}")
        raise UsageError(f"{source}: not a LAMMPS log (no 'LAMMPS (version)' banner and no 'Loop time' line)")
    return runs


def read_documents(text: str, source: str) -> list[LammpsRun]:
    """`gpuval parse`/`import` on a whole text: one document per finished run; see LammpsDocuments."""
    stream = LammpsDocuments(source)
    return [*stream.feed(text), *stream.close()]
