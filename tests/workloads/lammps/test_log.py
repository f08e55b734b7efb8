"""log.lammps of several LAMMPS versions (2006 to 2025) and unit styles (lj, metal, real), recorded real logs.

The logs are LAMMPS' own example and bench logs, logs pasted in public repositories and issues, and logs of
Debian's LAMMPS written by gpuval on this machine; tests/data/lammps/SOURCE.md says where each comes from.
"""

from __future__ import annotations

import json

import pytest

from gpuval.errors import UsageError
from gpuval.workloads.lammps.log import parse_log
from tests.conftest import DATA, run_gpuval

LOGS = DATA / "lammps"

# file, version, units, procs, steps, atoms, timesteps/s, atom-step/s, (tau|ns)/day key and value, Pair avg s
CASES = [
    ("log.melt.1Oct06.linux.1", "1 Oct 2006", "lj", 1, 250, 32000, 250 / 43.5069, 250 * 32000 / 43.5069,
     None, None, 34.5536),
    ("log.16Mar18.eam.4", "16 Mar 2018", "metal", 4, 100, 32000, 95.697, 100 * 32000 / 1.04497,
     "ns_per_day", 41.341, 0.88724),
    ("log.8Apr21.melt.g++.4", "8 Apr 2021", "lj", 4, 250, 4000, 509.340, 250 * 4000 / 0.490832,
     "tau_per_day", 220034.754, 0.37256),
    ("log.29Sep21.lj.debian.2", "29 Sep 2021 - Update 2", "lj", 2, 100, 32000, None, None, "tau_per_day", None, None),
    ("reaxff-hns.384procs.17Apr24.log", "17 Apr 2024 - Development - a8687b5", "real", 384, 100, 2490368, 1.392,
     3.467e6, "ns_per_day", 0.012, 42.284),
    ("log.14Jul25.peptide.g++.4", "12 Jun 2025 - Development - patch_12Jun2025-739-g2644e7f6fa-modified", "real",
     4, 300, 2004, 430.591, 862.904e3, "ns_per_day", 74.406, 0.53288),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_parses_every_version(case):
    name, version, units, procs, steps, atoms, tps, asps, rate_key, rate, pair = case
    (run,) = parse_log((LOGS / name).read_text(), name)
    assert (run.version, run.units, run.procs, run.steps, run.atoms) == (version, units, procs, steps, atoms)
    if tps is not None:
        assert run.timesteps_per_s == pytest.approx(tps, rel=1e-6)
        assert run.atom_steps_per_s == pytest.approx(asps, rel=1e-3)
    else:  # our own log: the Performance line agrees with the Loop line
        assert run.timesteps_per_s == pytest.approx(run.steps / run.loop_time_s, rel=2e-3)
    if rate_key:
        assert getattr(run, rate_key) == pytest.approx(rate) if rate is not None else getattr(run, rate_key) > 0
    if pair is not None:
        assert run.breakdown["Pair"].avg_s == pytest.approx(pair)
    assert {"Pair", "Neigh", "Comm", "Output", "Other"} <= set(run.breakdown)


def test_prefixes_and_derived_figures():
    """katom-/Matom-step/s are normalized to atom-step/s; figures a version does not print are marked derived."""
    (peptide,) = parse_log((LOGS / "log.14Jul25.peptide.g++.4").read_text(), "p")
    (reax,) = parse_log((LOGS / "reaxff-hns.384procs.17Apr24.log").read_text(), "r")
    (old,) = parse_log((LOGS / "log.melt.1Oct06.linux.1").read_text(), "o")
    assert peptide.atom_steps_per_s == 862904.0 and peptide.derived == []
    assert reax.atom_steps_per_s == 3467000.0 and reax.hours_per_ns == 1995.544
    assert old.derived == ["timesteps_per_s", "atom_steps_per_s"] and old.breakdown["Output"].total_pct == 8.61363
    assert (peptide.mpi_tasks, peptide.omp_threads, peptide.cpu_use_pct) == (4, 1, 99.3)


def test_parse_json_gives_the_documented_fields():
    proc = run_gpuval("parse", "--json", str(LOGS / "log.16Mar18.eam.4"))
    assert proc.returncode == 0, proc.stderr
    (doc,) = json.loads(proc.stdout)
    assert doc["kind"] == "lammps" and doc["version"] == "16 Mar 2018"
    for key in ("loop_time_s", "procs", "steps", "atoms", "timesteps_per_s", "atom_steps_per_s", "ns_per_day",
                "breakdown"):
        assert doc[key] is not None, key
    assert doc["breakdown"]["Comm"]["max_s"] == 0.022984


def test_parse_table_for_people():
    proc = run_gpuval("parse", str(LOGS / "log.29Sep21.chute.debian.2"))
    assert proc.returncode == 0, proc.stderr
    assert "LAMMPS 29 Sep 2021 - Update 2, 32,000 atoms, 100 steps on 2 procs" in proc.stdout
    assert "Pair" in proc.stdout


def test_crashed_run_log_is_a_one_line_error():
    """A GPU run that died before its first step (ROCm issue 851): no finished run, and the reason."""
    proc = run_gpuval("parse", str(LOGS / "gpu-crash.19Jul19.log"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "without a finished run" in proc.stderr and "exited on signal 6" in proc.stderr


def test_truncated_log_is_a_one_line_error(tmp_path):
    text = (LOGS / "log.29Sep21.lj.debian.2").read_text()
    cut = tmp_path / "log.lammps"
    cut.write_text(text[: text.index("Loop time of") + 20])  # the job was killed while LAMMPS wrote its summary
    proc = run_gpuval("parse", str(cut))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "no run finished" in proc.stderr


def test_binary_garbage_is_not_a_lammps_log(tmp_path):
    junk = tmp_path / "log.lammps"
    junk.write_bytes(bytes(range(256)) * 8)
    proc = run_gpuval("parse", str(junk))
    assert proc.returncode == 2 and "no test or log gpuval can read" in proc.stderr
    with pytest.raises(UsageError, match="not a LAMMPS log"):
        parse_log(junk.read_text(errors="replace"), "junk")
