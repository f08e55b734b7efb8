"""The report of a fleet check: its section (bad nodes first, links, rounds, the pair matrix or, past 64 nodes, the
histogram), in HTML and Markdown, built from a store holding a scripted check's records (scripted.py: n3 crashes
with everyone, n5 is 20% slow, 16 or 200 nodes); and rendering that stays linear in the nodes (the node-status
lookup is a dict, the context is built once for both outputs)."""

from __future__ import annotations

from pathlib import Path

from gpuval.report import build
from gpuval.report.build import gather, render_html, render_markdown, write_report
from gpuval.report.fleet import MATRIX_LIMIT, fleet_section
from gpuval.results.store import open_store
from gpuval.fleet.plan import verdicts
from gpuval.fleet.run.outcome import fault_codes
from gpuval.fleet.run.records import verdict_records
from tests.fleet import scripted


def _truth(kind: str, nodes: tuple[str, ...]) -> float | str:
    if kind != "node" and "n3" in nodes:
        return "rank died"
    return 0.8 if kind != "node" and "n5" in nodes else 1.0


def _stored_check(db: str, n: int, run_id: str = "fleet-run") -> None:
    state, records = scripted.run_stored([f"n{i}" for i in range(1, n + 1)], _truth, seed=4, run_id=run_id)
    found = verdicts(state)
    codes = {node: fault_codes(v, []) for node, v in found.nodes.items()}
    open_store(db).add(records + list(verdict_records(found, run_id, "slurm", codes=codes)))


def test_the_fleet_section_bad_nodes_first_with_its_pair_matrix(tmp_path: Path):
    db = str(tmp_path / "r.db")
    _stored_check(db, 16)
    html_path, md_path = tmp_path / "r.html", tmp_path / "r.md"
    write_report("fleet-run", db, html_path, md_path)
    html, md = html_path.read_text(), md_path.read_text()
    assert '<h2 id="fleet">Fleet check</h2>' in html and "Failing: <b>n3, n5</b>" in html
    assert html.index(">n3<") < html.index(">n1<")  # bad nodes first
    assert "FLEET_BROKEN" in html and "FLEET_SLOW" in html and "Pair matrix" in html
    # The pairs, with their tests as tooltips (each pair named in sorted order: n3 with n1, n13, ...).
    assert '<svg class="chart matrix"' in html and ("n3 &amp; " in html or "&amp; n3: " in html)
    assert "### Fleet check" in md and "Failing: **n3, n5**" in md and "- round 0: 16 suite (16 pass)" in md
    # The node table counts each node's fleet verdict: n3's partners pass though their tests with n3 crashed.
    inp = gather(open_store(db), "fleet-run")
    assert {n.host: n.status.value for n in inp.diagnosis.nodes if n.status.value != "pass"} == {"n3": "fail",
                                                                                                  "n5": "fail"}


def test_past_the_matrix_limit_a_histogram_and_passing_nodes_counted(tmp_path: Path):
    db = str(tmp_path / "r.db")
    _stored_check(db, 240)
    section = fleet_section(gather(open_store(db), "fleet-run").records)
    assert section is not None and 240 > MATRIX_LIMIT and not section["matrix"]
    assert '<svg class="chart bars"' in section["chart"] and "pair tests by shortfall" in section["chart"]
    assert [n["name"] for n in section["nodes"][:2]] == ["n3", "n5"]
    assert len(section["nodes"]) == 2 + 200 and section["more_passing"] == 38
    assert section["rounds"] == max(r["round"] for r in section["round_rows"]) + 1


def test_the_context_is_built_once_for_html_and_markdown(tmp_path: Path, monkeypatch):
    """One context for both outputs of a fleet report (the O(n) path). How the report scales with the nodes is
    measured by benchmarks/fleet_scale.py (4,096 vs 512 nodes), not timed here: a shared 2-core machine's timings
    at these sizes swing past any bound a test could hold."""
    built = []
    real = build.context
    monkeypatch.setattr(build, "context", lambda inp: built.append(1) or real(inp))
    for n in (60, 240):
        db = str(tmp_path / f"r{n}.db")
        _stored_check(db, n, f"run-{n}")
        built.clear()
        write_report(f"run-{n}", db, tmp_path / f"{n}.html", tmp_path / f"{n}.md")
        assert built == [1]  # once for both outputs
    inp = gather(open_store(str(tmp_path / "r240.db")), "run-240")
    assert render_html(inp) and render_markdown(inp)  # still callable on their own
