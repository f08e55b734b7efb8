"""The layering docs/architecture.md describes, held by a test: data flows down, never up.

An AST walk of every import in src/gpuval (those inside functions too): each package imports only packages below
it, the foundations (collectives, node, results, hooks) import nothing of gpuval but errors and each other, no CLI
command module imports another one (what commands share is in cli/_common.py and cli/render.py), and no module
reaches itself through imports (a cycle between two modules of one package counts, as does one made by an import
inside a function)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Callable

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "gpuval"

# Bottom to top; a package may import packages on its own floor (no cycle) and on any floor below it.
FLOORS = [
    ["errors"],
    ["results", "node", "collectives", "hooks"],  # hooks: what a training script imports (gpuval.hooks)
    ["baselines"],
    ["engines", "checks", "operate"],
    ["diagnosis"],
    ["report"],
    ["workloads"],
    ["fleet"],  # plans and judges; submits through engines, runs workloads on the node
    ["cli"],
]
FOUNDATIONS = {"collectives", "node", "results", "hooks"}


@functools.cache
def _sources() -> dict[Path, tuple[str, ast.Module]]:
    """Each module's text and syntax tree, by its path under src/gpuval: read and parsed once for every test here
    (each test parsing the whole tree again cost 4 to 5 s in the loaded suite)."""
    return {path.relative_to(SRC): (text, ast.parse(text)) for path in sorted(SRC.rglob("*.py"))
            for text in [path.read_text()]}


def _tree(rel: Path) -> ast.Module:
    return _sources()[rel][1]


@functools.cache
def _imports() -> dict[Path, set[str]]:
    found: dict[Path, set[str]] = {}
    for rel in _sources():
        mods: set[str] = set()
        for node in ast.walk(_tree(rel)):
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


def test_the_lowest_foundations_import_only_errors():
    """collectives, node and results are siblings on the lowest floor: what two of them share (the YAML reader,
    the secret rule) lives in one of them and reaches the other as a value from above, never as an import."""
    bad = [f"{rel} imports {mod}" for rel, mods in _imports().items() if _package(rel) in FOUNDATIONS - {"hooks"}
           for mod in mods if mod.split(".")[1] != _package(rel) and mod.split(".")[1] not in {"errors", "__version__"}]
    assert not bad, "\n".join(sorted(bad))


def test_no_cli_command_imports_another():
    shared = {"gpuval.cli._common", "gpuval.cli.render"}
    bad = [f"{rel} imports {mod}" for rel, mods in _imports().items()
           if rel.parts[0] == "cli" and rel.name != "__init__.py"
           for mod in mods if mod.startswith("gpuval.cli.") and not any(mod.startswith(s) for s in shared)]
    assert not bad, "\n".join(sorted(bad))


def test_no_file_over_400_lines():
    long = {str(rel): n for rel, (text, _) in _sources().items() if (n := text.count("\n")) > 400}
    assert not long, long


def _module_of(rel: Path) -> str:
    return "gpuval." + ".".join(rel.with_suffix("").parts).removesuffix(".__init__")


def _module_graph() -> dict[str, set[str]]:
    """module -> the gpuval modules it imports (anywhere in it). `from P import N` is an edge to the module P.N
    where N is a module, else to P itself (a package's __init__ included)."""
    modules = {_module_of(rel) for rel in _imports()}
    graph: dict[str, set[str]] = {}
    for rel in _sources():
        me = _module_of(rel)
        targets: set[str] = set()
        for node in ast.walk(_tree(rel)):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:  # relative: from the module's own package
                    base = ".".join(me.split(".")[:-node.level] + [node.module])
                targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        graph[me] = {t for t in targets if t in modules and t != me}
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_module_cycle():
    cycles = module_cycles(_module_graph())
    assert not cycles, "\n".join(" <-> ".join(sorted(c)) for c in cycles)


@pytest.mark.parametrize("graph,cycles", [
    ({"a": {"b"}, "b": {"a"}}, [{"a", "b"}]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [{"a", "b", "c"}]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_the_cycle_finder_finds_cycles(graph, cycles):
    assert module_cycles(graph) == cycles


# What only engines/ may name: a scheduler's own package, or its client library.
SCHEDULER_PACKAGES = ("gpuval.engines.slurm", "gpuval.engines.kubernetes", "kubernetes")
# The packages that reach a scheduler through Engine, Site and the node client alone, and the one module among them
# that is about one scheduler by design: `gpuval deploy kubernetes` applies Kubernetes manifests.
NAMELESS = ("fleet", "operate", "workloads", "cli")
ABOUT_ONE_SCHEDULER = {Path("cli/deploy.py")}


def _all_imports(rel: Path) -> set[str]:
    """Every module `rel` imports, gpuval's or not, anywhere in it (inside functions too)."""
    mods: set[str] = set()
    for node in ast.walk(_tree(rel)):
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return mods


def test_only_the_engines_name_a_scheduler():
    """The engine owns every scheduler detail: the fleet check, the node state policy, the workloads and the
    commands reach a scheduler through `Engine`, its `Site` and its node client only (`engines.node_client(name)`
    where no engine is at hand), never through engines/slurm, engines/kubernetes or the kubernetes client, and
    decide nothing by a scheduler's name: no `scheduler ==`, no comparison holding an engine's name
    (`on == "kubernetes"`, `engine_name in ("slurm",)`, `.name == "slurm"`, `case "slurm":`)."""
    from gpuval.engines import engine_names

    mine = [rel for rel in _imports() if rel.parts[0] in NAMELESS and rel not in ABOUT_ONE_SCHEDULER]
    bad = [f"{rel} imports {mod}" for rel in mine
           for mod in _all_imports(rel) if any(mod == p or mod.startswith(p + ".") for p in SCHEDULER_PACKAGES)]
    bad += [f"{rel}:{n} {line.strip()}" for rel in mine
            for n, line in enumerate(_sources()[rel][0].splitlines(), 1) if "scheduler ==" in line]
    bad += [hit for rel in mine for hit in _compared_words(rel, set(engine_names()))]
    assert not bad, "\n".join(sorted(bad))


def test_an_import_inside_a_function_is_an_edge():
    """`gpuval nodes` imports what it runs inside its function (so `gpuval --help` loads none of it), and that is an
    edge; the engines never import operate back (the cycle node_state <-> slurm_node/kube_node came from imports
    inside functions)."""
    graph = _module_graph()
    assert "gpuval.operate.held" in graph["gpuval.cli.nodes"]  # imported inside `nodes`
    assert "gpuval.engines.slurm.site" in graph["gpuval.engines.slurm.engine"]  # the engine hands out its site
    assert not any(m.startswith("gpuval.operate") for m in set().union(*(graph[k] for k in graph
                                                                       if k.startswith("gpuval.engines"))))


def _compared_words(rel: Path, words: set[str], about: Callable[[ast.AST], bool] = lambda _side: True) -> list[str]:
    """`rel`'s comparisons, and `case` patterns, that hold one of `words` as a string; of the comparisons only those
    with a side that is `about` the thing compared."""
    def constants(node: ast.AST) -> list[str]:
        inner = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return [c.value for c in inner if isinstance(c, ast.Constant) and isinstance(c.value, str)]

    found = []
    for node in ast.walk(_tree(rel)):
        if isinstance(node, ast.MatchValue):
            found += [f"{rel}:{node.lineno} case {word!r}" for word in constants(node.value) if word in words]
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(about(s) for s in sides):
            continue
        found += [f"{rel}:{node.lineno} {word!r}" for side in sides for word in constants(side) if word in words]
    return found


def _a_status(side: ast.AST) -> bool:
    """A side that is a status: an enum's `.value`, or anything its text calls a status (`row["status"]`)."""
    return isinstance(side, ast.Attribute) and side.attr == "value" or "status" in ast.unparse(side).lower()


# DCGM's own words for a test's result (dcgmi diag's JSON: pass, fail, skip, warn, "not run"), read in checks/dcgm.py
# and mapped there to a Status: not gpuval's statuses.
OTHERS_STATUS_WORDS = {Path("checks/dcgm.py")}


def test_no_node_action_nor_status_is_decided_by_its_word():
    """What was done to a node is an `operate.codes.Acted`, from the policy to the bundle to the re-test, and a
    verdict a `results.Status`: no comparison in fleet/, operate/, workloads/ or cli/ holds an action's word
    ("drained", "lifted", ...), and none anywhere in src a status's word against a status (`.value == "fail"`,
    `row["status"] != "pass"`): a word is False against the enum, never silently right (`action == "drained"`
    once kept Kubernetes' taints from their evidence bundles)."""
    from gpuval.operate.codes import Acted
    from gpuval.results.model import Status

    acted, statuses = {a.value for a in Acted}, {s.value for s in Status}
    bad = [hit for rel in _imports() if rel.parts[0] in NAMELESS for hit in _compared_words(rel, acted)]
    bad += [hit for rel in _imports() if rel not in OTHERS_STATUS_WORDS
            for hit in _compared_words(rel, statuses, about=_a_status)]
    assert not bad, bad


# What the fleet's pure planner may import (fleet/plan/): itself, the baselines and the one noise rule it judges by,
# the Status vocabulary and the errors.
PLAN_MAY_IMPORT = ("gpuval.fleet.plan", "gpuval.baselines", "gpuval.diagnosis.stats", "gpuval.results.model",
                   "gpuval.errors")


def test_the_fleets_planner_is_pure():
    """fleet/plan/ (planner, judge, knowledge, verdicts: simulated at 16,384 nodes) imports no engine, operate,
    results I/O (store, sink, files), workload or node module, and nothing of fleet/run/ or fleet/act/: a change to
    the driver cannot bring I/O into the planner."""
    bad = []
    for rel in _imports():
        if rel.parts[:2] != ("fleet", "plan"):
            continue
        for node in ast.walk(_tree(rel)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                whole = node.module.startswith(PLAN_MAY_IMPORT)
                names = [node.module] if whole else [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            bad += [f"{rel}:{node.lineno} imports {n}" for n in names
                    if n.startswith("gpuval") and not n.startswith(PLAN_MAY_IMPORT)]
    assert not bad, "\n".join(bad)
