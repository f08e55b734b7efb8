"""The HTML report opened in real headless Chromium (Debian's package): it renders, the plots are there, and the
page asks the network for nothing."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuval.baselines import Band, Baseline
from gpuval.report.build import gather, render_html
from gpuval.results import Metric, Result, Status, Where
from gpuval.results.store import open_store
from benchmarks.synthetic_fleet import SIZES, fleet_run

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
NOW = datetime.now(timezone.utc)
# Resource Timing lists every fetch the page made (images, CSS, fonts, scripts); the test's copy writes the count
# into the DOM so --dump-dom can read it. The report itself carries no script.
_PROBE = ("<script>addEventListener('load', () => { document.body.dataset.resources = "
          "performance.getEntriesByType('resource').map(e => e.name).join(' ') || 'none'; });</script>")


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run scripts/install.sh --test")
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp / 'profile'}",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost", "--proxy-server=127.0.0.1:9",
         "--virtual-time-budget=2000", *args],
        capture_output=True, text=True, timeout=90,
    )


def _png_rows(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the raw (filtered) scanline bytes of a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def _report_inputs(db: str):
    store = open_store(db)
    for week in range(3):
        store.add(fleet_run(f"week{week}", 6, {"node0002": 0.98}, seed=week, started=NOW - timedelta(days=21 - 7 * week)))
    run = fleet_run("today", 6, {"node0002": 0.55, "node0005": 0.91}, seed=7, started=NOW)
    host = run[0].where
    run.append(Result(run_id="today", kind="health", name="ecc", where=host, status=Status.FAIL,
                      metrics=[Metric(name="uncorrectable_volatile", value=3, unit="errors")],
                      reason="GPU 2 has 3 uncorrectable ECC errors", data={"expected": 0}))
    run.append(Result(run_id="today", kind="lammps", name="in.lj", where=Where(hostname="node0001", ranks=2),
                      status=Status.PASS, metrics=[Metric(name="timesteps_per_s", value=107.6, unit="steps/s")],
                      params={"procs": 2, "atoms": 32000, "steps": 100}))
    run.append(Result(run_id="today", kind="train", name="resnet-synthetic", where=Where(hostname="node0001", ranks=2),
                      status=Status.PASS, metrics=[Metric(name="samples_per_s", value=412.0, unit="samples/s"),
                                                   Metric(name="loss_first", value=2.4),
                                                   Metric(name="loss_last", value=1.1)],
                      params={"world_size": 2}))
    store.add(run)
    band = Band("allreduce_busbw_gbps", unit="GB/s", expected=228.0, warn_below=205.0, fail_below=180.0,
                size_bytes=SIZES[-1])
    expect = Baseline(sku="Standard_ND96asr_v4", bands={band.name: band})
    return gather(store, "today", baselines=lambda sku: expect)


def test_report_renders_offline_in_chromium(tmp_path: Path):
    html = render_html(_report_inputs(str(tmp_path / "r.db")))
    page = tmp_path / "report.html"
    page.write_text(html)

    assert not re.search(r"https?://", html), "the report must not point anywhere"
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", html)
    assert "<script" not in html

    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", _PROBE + "</body>"))
    dom = _chromium(tmp_path, "--dump-dom", probe.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-resources="none"' in dom.stdout, re.findall(r'data-resources="[^"]*"', dom.stdout)
    assert dom.stdout.count("<svg") >= 4  # busbw sweep, LAMMPS bars, training bars, history trend
    assert dom.stdout.count('class="series"') >= 6 + 2 + 1  # a line per node, baseline and fail line, a trend
    assert "node0002" in dom.stdout and "GPU 2 has 3 uncorrectable ECC errors" in dom.stdout
    nodes_table = dom.stdout.split('id="nodes"')[1].split("</table>")[0]
    assert nodes_table.index("node0002") < nodes_table.index("node0003")  # worst first

    shot = tmp_path / "shot.png"
    run = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,1800", page.as_uri())
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    width, height, raw = _png_rows(shot)
    assert (width, height) == (1200, 1800)
    assert len(set(raw)) > 50, "the screenshot is blank"
    assert shot.stat().st_size > 40_000
