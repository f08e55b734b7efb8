"""Shared test helpers. Real engines (torch gloo ranks, mpirun, Slurm, LAMMPS) run for real; see each test."""

from __future__ import annotations

import http.server
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.cli_server import CliServer

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def run_gpuval(*args: str, env: dict[str, str] | None = None, timeout: float = 240,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real `gpuval` command line in a process of its own, as a user would (forked from one that has
    already imported gpuval: tests/helpers/cli_server.py). The default `timeout` stays under pytest's 300 s per test
    (pyproject.toml), so a hung command fails as this call's TimeoutExpired; a test that waits longer says so with
    its own @pytest.mark.timeout."""
    return _CLI.run(list(args), {**os.environ, **(env or {})}, timeout, cwd)


_CLI = CliServer()


@pytest.fixture(scope="session", autouse=True)
def _cli_server() -> Iterator[None]:
    """The worker's fork server for `run_gpuval`, ended with the session."""
    yield
    _CLI.close()


@pytest.fixture
def results_file(tmp_path: Path) -> Path:
    """A results file private to the test."""
    return tmp_path / "results.jsonl"


@pytest.fixture(autouse=True)
def _private_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes to the user's real data directory (results, database, reports, job records), and none asks
    Azure's metadata service: IMDS points at a closed port on 127.0.0.1."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))
    monkeypatch.setenv("GPUVAL_RESULTS", str(tmp_path / "default-results.jsonl"))
    monkeypatch.setenv("GPUVAL_DB", str(tmp_path / "default-results.db"))
    monkeypatch.setenv("GPUVAL_IMDS_ENDPOINT", "http://127.0.0.1:9/metadata/instance/compute/vmSize")
    monkeypatch.delenv("GPUVAL_SKU", raising=False)
    monkeypatch.setenv("GPUVAL_BASELINE_DIR", "")  # no site baseline folder of this machine's judges a test


class _Imds(http.server.BaseHTTPRequestHandler):
    delay = 0.0
    hits: list[str] = []

    def do_GET(self):  # noqa: N802
        self.hits.append(self.path)
        time.sleep(self.delay)
        ok = self.headers.get("Metadata") == "true" and "vmSize" in self.path
        try:
            self.send_response(200 if ok else 400)
            self.end_headers()
            self.wfile.write(b"Standard_ND96isr_H100_v5" if ok else b"Bad request")
        except OSError:
            # The client gave up (a timeout test). Unhandled, socketserver prints the traceback on this process's
            # stderr, perhaps after the test ended, into whatever the next test is capturing there.
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def imds_server():
    """A local stand-in for Azure's instance metadata service: start(delay) gives its URL; `.hits` the requests."""
    servers = []
    hits: list[str] = []

    def start(delay: float = 0.0) -> str:
        handler = type("H", (_Imds,), {"delay": delay, "hits": hits})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/metadata/instance/compute/vmSize?api-version=2021-02-01&format=text"

    start.hits = hits  # type: ignore[attr-defined]
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def _fresh_store_cache() -> Iterator[None]:
    """Stores are cached per process; each test starts with none open."""
    from gpuval.results.store import close_stores

    close_stores()
    yield
    close_stores()


@pytest.fixture
def kmock_options(kmock_options: dict) -> dict:
    """Every kmock test talks to tests/helpers/kube.py's ApiServer (kmock's emulator that gives objects a uid and
    honours label selectors, as an API server does) unless its `kmock` marker names another class."""
    from kmock import KubernetesEmulator

    from tests.helpers.kube import ApiServer

    return {**kmock_options, "cls": ApiServer} if kmock_options.get("cls") is KubernetesEmulator else kmock_options


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on the session's real Slurm cluster is `slow` (pyproject.toml): `-m "not slow"` leaves the
    daemons unstarted for a quick loop. Tests with a private cluster carry the mark themselves. Under
    pytest-xdist the slow tests are dealt to the workers first (`_slow_first`)."""
    for item in items:
        if "_slurm_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    items[:] = _slow_first(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def _budget(item: pytest.Item) -> float:
    """The seconds a test may take: its timeout mark, else pyproject.toml's --timeout (300)."""
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker and marker.args else 300.0


def _slow_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The order the workers get their tests in. worksteal (scripts/test.sh) hands each of N workers one
    contiguous Nth of the list at the start, and an idle worker later steals the tail of the longest queue. So the
    slow tests (real Slurm jobs, mostly waiting) go to the heads of the shares, each, longest time budget first, to
    the share with the least budget so far; the quick ones (mostly computing) follow in file order. The three fleet
    checks then neither meet on one worker nor start last and run on alone at the end."""
    if workers < 2:
        return items
    heads: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for item in sorted((i for i in items if i.get_closest_marker("slow")), key=_budget, reverse=True):
        lightest = loads.index(min(loads))
        heads[lightest].append(item)
        loads[lightest] += _budget(item)
    quick = iter([i for i in items if not i.get_closest_marker("slow")])
    order, left = [], len(items)
    for worker, head in enumerate(heads):
        size = left // (workers - worker)  # worksteal's split: what is left, evenly among the workers left
        order += [*head, *itertools.islice(quick, max(size - len(head), 0))]
        left -= size
    return order + list(quick)


@pytest.fixture(scope="session")
def _slurm_session() -> Iterator[object]:
    """The session's one real Slurm cluster (tests/helpers/slurm_session.py), started the first time a test asks
    for it, with the time-limit job submitted; its daemons stopped by PID when the session ends."""
    from tests.helpers.slurm_session import session_cluster, submit_overtime

    # Not under pytest's temp dir: munged (user munge) must reach its socket, and that dir is root-only.
    root = Path(tempfile.mkdtemp(prefix="gpuval-slurm-"))
    try:
        with session_cluster(root) as cluster:
            cluster.overtime_job = submit_overtime(cluster)  # type: ignore[attr-defined]
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm(_slurm_session):
    """The session's Slurm cluster with every node in service (no drain left by an earlier test): `.env` is what
    Slurm's client commands need (SLURM_CONF), `.overtime_job` the job Slurm stops at its time limit."""
    from tests.helpers.slurm_session import in_service

    in_service(_slurm_session)
    return _slurm_session


@pytest.fixture
def fabric(slurm):
    """`slurm` where its fleet partition's six nodes sit on the test fabric (f3 broken, f5 slow:
    tests/helpers/slurm_session.py); skipped, saying why, where this machine cannot build it."""
    from tests.helpers.slurm_fabric import FabricCluster

    if not isinstance(slurm, FabricCluster):
        pytest.skip(f"the fabric needs network namespaces, veth pairs and tc qdiscs: {slurm.no_fabric}")
    return slurm
