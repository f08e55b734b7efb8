"""What `gpuval baseline learn` reads (gpuval.baselines.learn_read): JSON Lines files line by line in memory of
the nodes' newest figures, never of the file's size; the results store page by page; lines that are no record
counted and named, never an end to the reading."""

from __future__ import annotations

import tracemalloc
from datetime import timedelta

from benchmarks.learn_fleet import T0, fleet_lines
from gpuval.baselines.learn import Choice, learn
from gpuval.baselines.learn_read import health_figures, read_files, read_store
from gpuval.checks.base import REGISTRY
from gpuval.checks.suite import run_suite
from gpuval.results.data import HealthData
from gpuval.results.sink import parse_line
from gpuval.results.store import open_store
from tests.health_support import no_imds  # noqa: F401  (the recorded node's SKU is its own, not this host's)
from tests.helpers.learn_records import fleet, recorded_run, write

MEASURING = ('"gemm_tflops"', '"hbm_bandwidth"', '"h2d_d2h_bandwidth"', '"gpu_count"', '"driver"', '"power_limit"')


def _runs(runs: int) -> list[str]:
    """16 nodes' measuring records, `runs` runs each (an hour apart)."""
    template = [line for line in recorded_run() if any(f'"name": {name}' in line for name in MEASURING)]
    return [line for r in range(runs) for line in fleet_lines(template, 16, start=T0 + timedelta(hours=r), seed=r)]


def _peak(path, bad: list[str]):
    tracemalloc.start()
    try:
        found = read_files([path], None, bad.append)
        return found, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_long_file_is_read_in_the_memory_of_its_nodes_not_of_its_size(tmp_path):
    """Twenty runs of 16 nodes (ten times the bytes of two) take no more memory to read than two: each node's
    newest record of each check is held, never the records; a torn line and a line of garbage are counted and
    named, the reading goes on."""
    small = write(tmp_path / "small.jsonl", _runs(2))
    lines = _runs(20)
    lines.insert(7, lines[7][:100] + "\n")  # a write torn by a full disk
    lines.insert(50, "garbage\n")
    big = write(tmp_path / "big.jsonl", lines)
    assert big.stat().st_size > 9 * small.stat().st_size
    _, small_peak = _peak(small, [])
    bad: list[str] = []
    found, big_peak = _peak(big, bad)
    assert big_peak < 1.3 * small_peak, (small_peak, big_peak)
    assert found.records == 20 * 16 * 6 and found.older == 19 * 16 * 6 and found.unreadable == 2
    assert bad[0].startswith(f"{big}:8: not a gpuval Result record") and bad[1].startswith(f"{big}:51: ")
    assert learn(found, Choice()).nodes == [f"n{i:03d}" for i in range(1, 17)]


def test_the_results_store_is_read_page_by_page_as_the_file_is(tmp_path):
    lines = fleet(16)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    open_store(url).add(parse_line(line.encode())[0] for line in lines)
    from_store = learn(read_store(url, None, [].append, page=100), Choice())
    read = read_files([write(tmp_path / "r.jsonl", lines)], None, [].append)
    assert read.records == 16 * 11  # of a health run's 37 records, the 11 checks learning reads are parsed
    from_file = learn(read, Choice())
    assert [(f.measure, f.noise) for f in from_store.figures] == [(f.measure, f.noise) for f in from_file.figures]
    later = read_store(url, T0 + timedelta(minutes=8), [].append)  # --since: nodes 9-16 began from 08:08
    assert sorted(later.nodes) == [f"n{i:03d}" for i in range(9, 17)]


def test_ib_write_bw_is_read_per_hca_at_the_size_its_record_names():
    """The real ib_write_bw check on the recorded ND96asr_v4 with a stand-in perftest (tests/checks/cases_hardware):
    its record names the band metric and message size, so each HCA's figure is learned as that measurement."""
    from tests.checks.cases_hardware import _perftest
    from tests.health_support import A100, context

    [result] = run_suite(context(A100, _perftest()), [REGISTRY["ib_write_bw"]]).results
    figures = health_figures("ib_write_bw", HealthData(value=result.value, details=result.details))
    [(measure, values)] = figures.items()
    assert (measure.metric, measure.unit, measure.size_bytes) == ("ib_write_bw_gdr_gbps", "Gb/s", 8 * 1024**2)
    assert values.who == [f"mlx5_ib{i}" for i in range(8)] and values.value == list(result.details["bandwidth_gbps"]
                                                                                    .values())
