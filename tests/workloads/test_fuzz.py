"""A bounded, seeded mutation fuzz of every reader and of the CLI's `parse` and `import` (a short run of
benchmarks/fuzz_readers.py, which runs 20,000 inputs): zero uncaught exceptions, and no input slower than linear.
In process: a few hundred mutations of the real logs under tests/data through import_file, the text summary and
the JSON; in subprocesses: mutated files through the real command line, which must end 0 or 2 with no traceback."""

from __future__ import annotations

import random
import time

import pytest

from benchmarks.fuzz_readers import check_one, corpus, mutate
from tests.conftest import run_gpuval

BUDGET_S = 20.0  # in-process share of the time this test may take (the machine has 2 shared cores)


@pytest.mark.parametrize("seed", [101, 202])
def test_mutated_logs_never_raise_and_stay_linear(tmp_path, seed):
    rng, seeds = random.Random(seed), corpus()
    start, seen, outcomes = time.monotonic(), 0, {"ok": 0, "clean": 0, "uncaught": 0}
    while time.monotonic() - start < BUDGET_S / 2 and seen < 400:
        path = tmp_path / f"in-{seen % 10}"
        path.write_bytes(mutate(rng, rng.choice(seeds), seeds).encode("utf-8", errors="surrogatepass"))
        outcome, detail, seconds = check_one(path)
        outcomes[outcome] += 1
        assert outcome != "uncaught", detail
        size = path.stat().st_size
        assert seconds < 2.0 + size / 1e6, (size, seconds)  # at most 1 s per MB beyond a fixed cost, never hours
        seen += 1
    assert seen >= 50 and outcomes["ok"] > 0


def test_cli_parse_and_import_on_mutated_files(tmp_path):
    rng, seeds = random.Random(777), corpus()
    for n in range(4):
        path = tmp_path / f"m{n}.log"
        path.write_bytes(mutate(rng, rng.choice(seeds), seeds).encode("utf-8", errors="surrogatepass"))
        for args in (("parse", str(path)), ("parse", "--json", str(path)),
                     ("import", str(path), "--db", str(tmp_path / "r.db"))):
            proc = run_gpuval(*args, timeout=60)
            assert proc.returncode in (0, 2), (args, proc.stderr[-2000:])
            assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
