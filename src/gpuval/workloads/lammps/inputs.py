"""The standard benchmark inputs gpuval writes itself, so no file has to exist on the node.

`lj` is LAMMPS' bench/in.lj verbatim (Lennard-Jones melt, 32,000 atoms, 100 steps). `chute` is bench/in.chute
(granular chute flow with a frozen base, tilted 26 degrees, 100 steps) with its one outside file, data.chute,
replaced by a lattice built in the script: 40 x 20 x 40 touching grains of diameter 1, the bottom layer frozen,
32,000 atoms. It exercises what in.lj does not (granular pair style with contact history, shrink-wrapped
boundary, velocity communication) with the GRANULAR package that Debian's and most site builds include.
Both take LAMMPS' bench convention `-var x X -var y Y -var z Z` to replicate the box for weak scaling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpuval.errors import UsageError

_LJ = """\
# 3d Lennard-Jones melt (LAMMPS bench/in.lj, written by gpuval)

variable        x index 1
variable        y index 1
variable        z index 1

variable        xx equal 20*$x
variable        yy equal 20*$y
variable        zz equal 20*$z

units           lj
atom_style      atomic

lattice         fcc 0.8442
region          box block 0 ${xx} 0 ${yy} 0 ${zz}
create_box      1 box
create_atoms    1 box
mass            1 1.0

velocity        all create 1.44 87287 loop geom

pair_style      lj/cut 2.5
pair_coeff      1 1 1.0 1.0 2.5

neighbor        0.3 bin
neigh_modify    delay 0 every 20 check no

fix             1 all nve

run             100
"""

_CHUTE = """\
# Granular chute flow with a frozen base at 26 degrees (LAMMPS bench/in.chute, written by gpuval;
# the grains are built on a lattice here instead of read from data.chute)

variable        x index 1
variable        y index 1
variable        z index 1

variable        xx equal 40*$x
variable        yy equal 20*$y
variable        zz equal 40*$z
variable        ztop equal v_zz-0.5

units           lj
atom_style      sphere
boundary        p p fs
newton          off
comm_modify     vel yes

lattice         sc 1.0
region          box block 0 ${xx} 0 ${yy} 0 ${zz}
create_box      2 box
region          grains block INF INF INF INF INF ${ztop}
create_atoms    1 region grains
region          base block INF INF INF INF INF 0.5
set             region base type 2

pair_style      gran/hooke/history 2000.0 NULL 50.0 NULL 0.5 0
pair_coeff      * *

neighbor        0.1 bin
neigh_modify    every 1 delay 0

timestep        0.0001

group           bottom type 2
group           active subtract all bottom
neigh_modify    exclude type 2 2

fix             1 all gravity 1.0 chute 26.0
fix             2 bottom freeze
fix             3 active nve/sphere

compute         1 all erotate/sphere
thermo_style    custom step atoms ke c_1 vol
thermo          100
thermo_modify   norm no

run             100
"""


@dataclass(frozen=True)
class Benchmark:
    """One standard input: its text, unit style, atoms and steps of the unreplicated box."""

    name: str
    description: str
    units: str
    atoms: int
    steps: int
    text: str


BENCHMARKS: dict[str, Benchmark] = {
    "lj": Benchmark("lj", "Lennard-Jones melt (bench/in.lj)", "lj", 32_000, 100, _LJ),
    "chute": Benchmark("chute", "granular chute flow (bench/in.chute, lattice-built)", "lj", 32_000, 100, _CHUTE),
}


def benchmark_named(name: str) -> Benchmark:
    """The benchmark of that name; an unknown one is a one-line error listing the known ones."""
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise UsageError(f"unknown LAMMPS benchmark {name!r}; known: {', '.join(BENCHMARKS)}") from None


@dataclass(frozen=True)
class Replicas:
    """How many copies of the box along x, y and z (LAMMPS' -var x/y/z)."""

    x: int = 1
    y: int = 1
    z: int = 1

    @property
    def copies(self) -> int:
        return self.x * self.y * self.z

    def __str__(self) -> str:
        return f"{self.x}x{self.y}x{self.z}"


def parse_scale(text: str | int) -> Replicas:
    """`--scale`: "N" copies of the box, split over x, y, z as evenly as can be (8 -> 2x2x2), or "AxBxC"."""
    text = str(text).strip().lower()
    explicit = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text)
    if explicit:
        dims = [int(g) for g in explicit.groups()]
    elif text.isdigit():
        dims, remaining, factor = [1, 1, 1], max(int(text), 1), 2
        while remaining > 1:  # prime factors, each to the axis with the fewest copies so far
            while remaining % factor == 0:
                dims[dims.index(min(dims))] *= factor
                remaining //= factor
            factor += 1
        if int(text) < 1:
            dims = [0, 0, 0]
    else:
        raise UsageError(f"--scale {text!r}: give a number of box copies (8) or copies per axis (2x2x2)")
    if min(dims) < 1:
        raise UsageError(f"--scale {text!r}: every axis needs at least one copy")
    return Replicas(*dims)


def write_input(bench: Benchmark, directory: Path) -> Path:
    """Write the input as in.<name> in the directory and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"in.{bench.name}"
    path.write_text(bench.text)
    return path
