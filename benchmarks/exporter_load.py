"""What the exporter's input costs: THE latest-run rule (`prometheus.LatestRuns`) and a render, against floors
measured in the same run (the reliability review's D12 cases).

1. Latest run: a host's newest run of N records, then N older one-record runs (the old rule took a max over the
   kept run for every record: 51 s at N = 5,000, 183 s at 10,000). Floor: one dict update per record, keyed by
   host and kind, the least any latest-run rule does. Printed: seconds, the ratio to the floor (at most 20), and
   the growth from N to 2N (at most 3: linear, about 2).
2. Render: the exposition of H hosts (one health record each, 8 GPUs x 6 figures), for H = 500 .. 4,000.
   Floor: the same samples written as text lines with one f-string each. Printed: seconds, ms per host (flat:
   linear; the largest over the smallest at most 3) and the ratio to the floor (prometheus_client's escaping of
   every label is most of it).
3. Bound: 50,000 host names (the review's 770 MB, 21 s a render) fed to the default LatestRuns: the hosts kept, the
   records dropped, one render's seconds.

    python benchmarks/exporter_load.py [--n 5000] [--hosts 500,1000,2000,4000]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpuval.operate.prometheus import LatestRuns, metric_families, registry  # noqa: E402
from gpuval.results.model import Result, Status, Where  # noqa: E402

NOW = datetime.now(timezone.utc)
GPUS = [{"index": g, "bus_id": f"0000:{g:02x}:00.0", **{f"figure_{k}": float(k) for k in range(6)}} for g in range(8)]


def _record(run: str, host: str, name: str = "ecc", at: datetime = NOW, gpus: bool = False) -> Result:
    data = {"fault_code": "ECC_ERRORS", **({"details": {"gpus": GPUS}} if gpus else {})}
    return Result(run_id=run, kind="health", name=name, where=Where(hostname=host), status=Status.PASS,
                  started_at=at, finished_at=at, data=data)


def _timed(work) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def latest_runs(n: int) -> tuple[float, float]:
    """(seconds of LatestRuns, seconds of the floor) over the review's worst case of 2n records."""
    records = [_record("newest", "n1", name=f"check{i}") for i in range(n)]
    records += [_record(f"old{i}", "n1", at=NOW - timedelta(hours=1)) for i in range(n)]

    def floor() -> None:
        kept: dict[tuple[str, str], Result] = {}
        for r in records:
            kept[(r.where.hostname, r.kind)] = r

    def rule() -> None:
        runs = LatestRuns()
        runs.add(records)
        assert len(runs.records()) == n

    return min(_timed(rule) for _ in range(3)), min(_timed(floor) for _ in range(3))  # best of 3: a shared machine


def render(hosts: int) -> tuple[float, float, int]:
    """(seconds of one exposition, seconds of the floor, bytes) of `hosts` hosts."""
    from prometheus_client import generate_latest

    records = [_record(f"r{i}", f"host-{i:05d}", gpus=True) for i in range(hosts)]
    text: list[bytes] = []
    took = min(_timed(lambda: text.append(generate_latest(registry(metric_families(records))))) for _ in range(2))

    def floor() -> None:
        lines = [f'gpuval_check_value{{host="{r.where.hostname}",check="{r.name}",metric="{k}",gpu="{g["index"]}"}} '
                 f'{v}\n' for r in records for g in GPUS for k, v in g.items() if k.startswith("figure")]
        "".join(lines).encode()

    return took, min(_timed(floor) for _ in range(2)), len(text[0])


def bound(hosts: int) -> tuple[int, int, float]:
    """(hosts kept, records dropped, seconds of one render) after `hosts` host names."""
    from prometheus_client import generate_latest

    runs = LatestRuns()
    runs.add(_record(f"r{i}", f"h{i}") for i in range(hosts))
    took = _timed(lambda: generate_latest(registry(metric_families(runs.records()))))
    return len(runs.hosts), runs.dropped, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--hosts", default="500,1000,2000,4000")
    parser.add_argument("--bound", type=int, default=50_000)
    args = parser.parse_args()
    ok = True
    first = None
    for n in (args.n, 2 * args.n):
        took, floor = latest_runs(n)
        growth = "" if first is None else f", x{took / first:.2f} from N={args.n}"
        first = first or took
        ratio = took / floor
        ok &= ratio <= 20 and (first == took or took / first <= 3)
        print(f"latest run, N={n}: {took:.3f} s, floor {floor:.3f} s, ratio {ratio:.1f}{growth}")
    per_host = []
    for hosts in (int(h) for h in args.hosts.split(",")):
        took, floor, size = render(hosts)
        per_host.append(took / hosts)
        print(f"render, {hosts} hosts: {took:.2f} s ({1000 * took / hosts:.2f} ms a host), floor {floor:.2f} s, "
              f"ratio {took / floor:.1f}, {size / 1e6:.1f} MB")
    flat = max(per_host) / min(per_host)
    ok &= flat <= 3
    print(f"render cost per host, largest over smallest: {flat:.2f} (linear: about 1)")
    kept, dropped, took = bound(args.bound)
    print(f"{args.bound} host names: {kept} kept, {dropped} records dropped, one render {took:.2f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
