"""The drain brake's rules (operate.brake) on the simulated Slurm node state of tests/helpers/sim_nodes.py: the cap
as written, whose drains count, what is no new drain, and the count-drain-count-again protocol under every
interleaving of many actors (a wave of `health --drain`). Real concurrency against real Slurm daemons and kmock is
tests/operate/test_brake_slurm.py's and test_brake_kube.py's."""

from __future__ import annotations

import random
import zlib
from datetime import datetime, timezone

import pytest

from gpuval.operate.codes import Acted
from gpuval.engines.nodes import HeldNode, SlurmNode, WindowMark
from gpuval.errors import UsageError
from gpuval.operate import node_state
from gpuval.operate.brake import (
    Brake, DrainCap, beyond_cap, drained_by_gpuval, parse_cap, shared_faults, shared_reason, site_cap,
)
from gpuval.results.model import Status
from tests.helpers.sim_nodes import SimNodes


def run(name: str) -> str:
    """A run id of gpuval's shape (a node action names only such ids), one per name."""
    return f"20261127T120000Z-{zlib.crc32(name.encode()) & 0xFFFFFF:06x}"


@pytest.mark.parametrize("text, count, share", [("5%", None, 0.05), ("12", 12, None), ("0", 0, None),
                                                ("12.5%", None, 0.125), ("all", None, None), ("ALL", None, None)])
def test_a_cap_is_a_count_a_share_0_or_all(text, count, share):
    cap = parse_cap(text, "--max-drain")
    assert (cap.count, cap.share, cap.lifted) == (count, share, count is None and share is None)


@pytest.mark.parametrize("text", ["", "-1", "five", "0%", "150%", "nan%", "1e3", "5 %", "12 nodes", "9" * 9])
def test_anything_else_is_a_one_line_error_naming_where_it_was_set(text):
    with pytest.raises(UsageError, match=r"^GPUVAL_MAX_DRAIN .*: give a number of nodes \(0: drain none\)"):
        parse_cap(text, "GPUVAL_MAX_DRAIN")


def test_the_option_overrides_the_site_which_overrides_the_default():
    assert site_cap(None, {}).text == "5%" and site_cap(None, {}).source == "the default"
    assert (site_cap(None, {"GPUVAL_MAX_DRAIN": "3"}).count, site_cap(None, {"GPUVAL_MAX_DRAIN": "3"}).source) == \
        (3, "GPUVAL_MAX_DRAIN")
    assert site_cap("all", {"GPUVAL_MAX_DRAIN": "3"}).lifted


def test_a_share_of_the_cluster_never_caps_under_two_nodes():
    five = parse_cap("5%", "the default")
    assert [five.limit(n) for n in (1, 3, 40, 41, 256, 4096)] == [2, 2, 2, 3, 13, 205]
    assert parse_cap("7", "x").limit(4096) == 7 and parse_cap("all", "x").limit(4096) is None
    assert five.describe(256) == "13 (5% of 256 nodes, at least 2; the default)"


def _held(*items: tuple[str, int | None]) -> list[HeldNode]:
    return [HeldNode(n, "gpuval: X r", datetime.fromtimestamp(t, timezone.utc) if t is not None else None)
            for n, t in items]


def test_a_new_drain_with_the_caps_worth_ahead_of_it_is_given_back():
    held = _held(("a", 10), ("b", 10), ("c", 11), ("old", 50))
    # Ahead of a new drain: every drain listed earlier by (time, name), and every drain held before it drained,
    # whatever its time now (a held node failing again is drained again: Slurm stamps its reason anew).
    assert beyond_cap(["a", "b", "c"], set(), held, 2) == ["c"]
    assert beyond_cap(["a", "b", "c"], {"old"}, held, 2) == ["b", "c"]
    assert beyond_cap(["b"], set(), held, 1) == ["b"]  # the same second: the name decides
    assert beyond_cap(["a"], set(), _held(("a", 10), ("x", None)), 1) == ["a"]  # a time unknown counts first
    assert beyond_cap(["gone"], set(), held, 0) == []  # lifted meanwhile: nothing to give back


def _fail(sim: SimNodes, node: str, run: str, brake: Brake | None = None, codes=("ECC_ERRORS",)):
    return node_state.apply(Status.FAIL, node, run, list(codes), sim, admit=brake.gate(node) if brake else None)


def _wave(seed: int, actors: int, cap: int, pre_held: int, at_once: bool,
          rewriters: int = 0) -> tuple[SimNodes, list[str], list[str]]:
    """One wave of `actors` nodes failing, each counting, draining and counting again at random times on one
    clock (at_once: every count before any drain), `pre_held` nodes gpuval drained earlier, half of them failing
    again during the wave (drained again: a new reason time), and `rewriters` other runs (a fleet check's actors)
    each convicting one of the wave's nodes again mid-wave with a code of its own, under its own brake, then
    counting again. Returns the node state, the wave's and the older drains."""
    rng = random.Random(seed)
    now = [1000.0]
    sim = SimNodes(actors + pre_held + 3, clock=lambda: now[0])
    names = list(sim.states)
    older, wave = names[:pre_held], names[pre_held:pre_held + actors]
    for node in older:
        _fail(sim, node, run("old"))
    events = [(1001 + rng.uniform(0, 5), "again", n) for n in older[::2]]
    for node in wave:
        counted = 1001 + (rng.uniform(0, 0.5) if at_once else rng.uniform(0, 4))
        drained = max(counted, 1001.5 if at_once else counted) + rng.uniform(0, 1.5)
        events += [(counted, "count", node), (drained, "drain", node), (drained + 1 + rng.uniform(0, 2), "settle", node)]
    targets = {}
    for i in range(rewriters):
        at, targets[f"x{i}"] = 1001 + rng.uniform(0.5, 6), rng.choice(wave)
        events += [(at, "rewrite", f"x{i}"), (at + 1 + rng.uniform(0, 2), "settle", f"x{i}")]
    brakes = {n: Brake(sim, DrainCap(count=cap, text=str(cap), source="test"), run(n), settle_s=0)
              for n in [*wave, *targets]}
    actions = {}
    for when, what, node in sorted(events):
        now[0] = when
        if what == "count":
            brakes[node].gate(node)()
        elif what == "drain":
            actions[node] = _fail(sim, node, run(node), brakes[node])
        elif what == "rewrite":
            actions[node] = _fail(sim, targets[node], run(node), brakes[node], codes=(f"R{node[1:]}",))
        elif what == "settle":
            brakes[node].settle([actions[node]])
        else:
            _fail(sim, node, run("again"), codes=("OLD",))
    return sim, wave, older


@pytest.mark.parametrize("at_once", [False, True], ids=["spread", "at-once"])
def test_at_most_the_cap_stays_drained_whatever_the_interleaving(at_once):
    """Every actor counts, drains if gpuval holds fewer than the cap, waits past the second its drain was stamped,
    counts again and gives back what has the cap's worth ahead of it: over 400 random waves (up to 12 actors, caps
    0-5, up to 3 older drains of which half fail again mid-wave), never more than the cap stays drained. When every
    actor counted before any drained (a HealthCheckInterval firing everywhere at once), exactly the cap stays."""
    rng = random.Random(7)
    for seed in range(200):
        actors, cap, pre_held = rng.randint(1, 12), rng.randint(1, 5), rng.randint(0, 3)
        sim, wave, older = _wave(seed, actors, cap, pre_held, at_once)
        kept = [n for n in sim.drained if n in wave]
        assert set(older) <= set(sim.drained)  # a drain older than the wave is never given back
        assert len(kept) <= max(0, cap - pre_held), (seed, actors, cap, pre_held, kept)
        if at_once and not pre_held:
            assert len(kept) == min(cap, actors), (seed, actors, cap, kept)


def test_the_cap_holds_when_other_runs_rewrite_the_waves_drains_mid_wave():
    """reliability-4 D8 under every interleaving: another run's conviction of a wave's node rewrites its mark (a new
    reason time); that run takes the mark on, counts it at its new place and gives it back when the cap has no room
    for it. Over 200 random waves with up to 4 such runs, never more than the cap stays drained (before: a rewritten
    drain moved to the end of the order, and its first actor could no longer give it back)."""
    rng = random.Random(8)
    for seed in range(200):
        actors, cap, rewriters = rng.randint(2, 10), rng.randint(1, 4), rng.randint(1, 4)
        sim, wave, _older = _wave(seed, actors, cap, 0, rng.random() < 0.5, rewriters)
        kept = [n for n in sim.drained if n in wave]
        assert len(kept) <= cap, (seed, actors, cap, rewriters, kept)


def test_a_node_gpuval_holds_is_no_new_drain_and_others_drains_are_not_counted():
    sim = SimNodes(6)
    sim.drain("node00000", "NHC: GPU 3 fell off the bus")
    sim.drain("node00001", "admin: replace fan 3")
    _fail(sim, "node00002", run("old"))  # gpuval's
    brake = Brake(sim, parse_cap("2", "--max-drain"), run("new"), settle_s=0)
    again = _fail(sim, "node00002", run("new"), brake, codes=("XID_ERROR",))
    assert again.action == Acted.DRAINED and "node00002" not in brake.decided  # never asked: not a new drain
    assert sim.states["node00002"].reason == f"gpuval: ECC_ERRORS XID_ERROR {run('new')}"
    first = _fail(sim, "node00003", run("new"), brake)
    second = _fail(sim, "node00004", run("new"), brake)
    assert (first.action, second.action) == (Acted.DRAINED, Acted.NOT_DRAINED)
    assert second.detail == ("the drain brake: gpuval holds 2 nodes drained, its cap is 2 (--max-drain)")
    assert brake.settle([first, second]) == {}  # counted again: two of gpuval's, the cap
    assert sim.drained == ["node00000", "node00001", "node00002", "node00003"]
    assert [h.name for h in drained_by_gpuval(sim).held] == ["node00002", "node00003"]


def test_a_node_in_a_retest_window_counts_and_its_own_failure_there_is_no_new_drain():
    """node00000 is lifted into a `fleet retest` window (not drained; gpuval's note in its comment): the brake counts
    it (red team 5 N3: before, two more nodes failing under a cap of 2 were both drained, and the window's close
    drained the third). A failure of the windowed node itself (its own health check while it is re-tested) is no new
    drain: taken whatever the count, never given back."""
    sim = SimNodes(6)
    note = WindowMark("gpuval-retest-20261129T004000Z-3e7e57", datetime(2026, 11, 29, tzinfo=timezone.utc),
                      f"gpuval: FLEET_NODE_CRASH {run('conviction')}")
    sim.states["node00000"] = SlurmNode("node00000", "IDLE", "", note.text())
    brake = Brake(sim, parse_cap("2", "--max-drain"), run("wave"), settle_s=0)
    first, second = _fail(sim, "node00001", run("wave"), brake), _fail(sim, "node00002", run("wave"), brake)
    assert (first.action, second.action) == (Acted.DRAINED, Acted.NOT_DRAINED), second.detail
    assert second.detail == "the drain brake: gpuval holds 2 nodes drained, its cap is 2 (--max-drain)"
    own = _fail(sim, "node00000", run("wave"), brake)
    assert own.action == Acted.DRAINED and brake.admitted == ["node00001"]
    assert brake.settle([first, own]) == {}  # counted again: the windowed node was held before; two, the cap
    assert [h.name for h in drained_by_gpuval(sim).held] == ["node00000", "node00001"]


def test_a_cap_of_0_reports_only_and_all_lifts_the_cap_both_without_counting():
    sim = SimNodes(4)
    report = Brake(sim, parse_cap("0", "--max-drain"), run("r"), settle_s=0)
    action = _fail(sim, "node00000", run("r"), report)
    assert action.action == Acted.NOT_DRAINED and "report only, drain nothing" in action.detail
    lifted = Brake(sim, parse_cap("all", "--max-drain"), run("r"), settle_s=0)
    done = [_fail(sim, n, run("r"), lifted) for n in list(sim.states)[1:]]
    assert [a.action for a in done] == [Acted.DRAINED] * 3 and lifted.settle(done) == {}
    assert "census" not in sim.calls and sim.drained == ["node00001", "node00002", "node00003"]


def test_giving_back_lifts_this_runs_own_drain_only():
    """Two actors at once, cap 1: this one counts (none held), another gpuval run drains node00002, this one drains
    node00000 and node00001 a second later, then counts again: node00002 is ahead of both, so both go back, but
    node00001, which a third run drained again meanwhile with its own reason, stays as that run left it."""
    now = [100.0]
    sim = SimNodes(4, clock=lambda: now[0])
    brake = Brake(sim, parse_cap("1", "x"), run("mine"), settle_s=0)
    assert brake.gate("node00000")() == ""  # counted: gpuval holds nothing
    sim.drain("node00002", f"gpuval: ECC_ERRORS {run('other')}")
    now[0] = 101.0
    mine = _fail(sim, "node00000", run("mine"), brake)
    assert mine.action == Acted.DRAINED
    sim.drain("node00001", f"gpuval: XID_ERROR {run('third')}")
    brake.admitted.append("node00001")  # as if this run had drained it just before the third run did
    now[0] = 103.0
    given = brake.settle([mine, node_state.NodeAction("slurm", "node00001", Status.FAIL, Acted.DRAINED, "")])
    assert given["node00000"].action == Acted.NOT_DRAINED
    assert given["node00000"].detail.startswith("drained, then given back: the drain brake: more nodes than its cap")
    assert given["node00001"].action == Acted.DRAINED
    assert given["node00001"].detail.startswith("its drain changed since (another run or a person): left as it is")
    assert sim.drained == ["node00001", "node00002"] and sim.states["node00001"].reason.endswith(run("third"))


def test_a_code_on_more_nodes_than_the_cap_allows_is_shared_and_holds_back_only_nodes_with_nothing_else():
    codes = {f"n{i}": ["GEMM_SLOW"] for i in range(20)} | {"n0": ["GEMM_SLOW", "ECC_ERRORS"], "x": ["XID_ERROR"]}
    five = parse_cap("5%", "the default")
    assert shared_faults(codes, 40, five) == {"GEMM_SLOW": [f"n{i}" for i in range(20)]}  # 20 > 2 of 40
    shared = shared_faults(codes, 40, five)
    assert shared_reason(["GEMM_SLOW"], shared, 40).startswith("GEMM_SLOW fails on 20 of 40 nodes: suspect the "
                                                               "baseline, the software or a shared part")
    assert shared_reason(["GEMM_SLOW", "ECC_ERRORS"], shared, 40) == ""  # a code of its own: still judged on it
    assert shared_faults(codes, 400, five) == {}  # 20 of 400 is the cap (5%: 20)
    assert shared_faults({"a": ["X"], "b": ["X"]}, 2, parse_cap("0", "x")) == {}  # never under 2 nodes
    assert shared_faults(codes, 40, parse_cap("all", "x")) == {}
