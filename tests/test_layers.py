"""The layering docs/architecture.md describes, held by a test: data flows down, never up.

An AST walk of every import in src/gpuval (those inside functions too): each package imports only packages below
it, the foundations (collectives, node, results) import nothing of gpuval but errors and each other, and no CLI
command module imports another one (what commands share is in cli/_common.py and cli/render.py)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "gpuval"

# Bottom to top; a package may import packages on its own floor (no cycle) and on any floor below it.
FLOORS = [
    ["errors"],
    ["results", "node", "collectives"],
    ["baselines"],
    ["engines", "checks", "operate"],
    ["diagnosis"],
    ["report"],
    ["workloads"],
    ["cli"],
]
FOUNDATIONS = {"collectives", "node", "results"}


def _imports() -> dict[Path, set[str]]:
    found: dict[Path, set[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        mods: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module)
                mods |= {f"{node.module}.{a.name}" for a in node.names}
        found[rel] = {m for m in mods if m.startswith("gpuval.")}
    return found


def _package(rel: Path) -> str:
    return rel.parts[0].removesuffix(".py")


def _rank(package: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if package in floor)


def test_every_package_has_a_floor():
    packages = {_package(rel) for rel in _imports()} - {"__init__", "__main__"}
    assert packages <= {p for floor in FLOORS for p in floor}, packages


def test_data_flows_down():
    upward = []
    for rel, mods in _imports().items():
        own = _package(rel)
        if own in ("__init__", "__main__"):
            continue
        for mod in mods:
            other = mod.split(".")[1]
            if other in ("__version__",) or other == own or not any(other in f for f in FLOORS):
                continue
            if _rank(other) > _rank(own):
                upward.append(f"{rel} imports {mod}")
    assert not upward, "\n".join(sorted(upward))


def test_no_package_cycle():
    edges = {(_package(rel), mod.split(".")[1]) for rel, mods in _imports().items() for mod in mods}
    edges = {(a, b) for a, b in edges if a != b}
    assert not {(a, b) for a, b in edges if (b, a) in edges}


def test_foundations_import_only_errors_and_each_other():
    bad = [f"{rel} imports {mod}" for rel, mods in _imports().items() if _package(rel) in FOUNDATIONS
           for mod in mods if mod.split(".")[1] not in FOUNDATIONS | {"errors", "__version__"}]
    assert not bad, "\n".join(sorted(bad))


def test_no_cli_command_imports_another():
    shared = {"gpuval.cli._common", "gpuval.cli.render"}
    bad = [f"{rel} imports {mod}" for rel, mods in _imports().items()
           if rel.parts[0] == "cli" and rel.name != "__init__.py"
           for mod in mods if mod.startswith("gpuval.cli.") and not any(mod.startswith(s) for s in shared)]
    assert not bad, "\n".join(sorted(bad))


def test_no_file_over_400_lines():
    long = {str(rel): n for rel in _imports() if (n := (SRC / rel).read_text().count("\n")) > 400}
    assert not long, long
