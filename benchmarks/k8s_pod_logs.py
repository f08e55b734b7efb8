"""Kubernetes pod logs of a big job: one by one (what `jobs logs` did) against 16 at a time (what it does now).

    .venv/bin/python benchmarks/k8s_pod_logs.py [--pods 4096] [--delay-ms 20] [--log-kb 4] [--widths 1,4,16,64]

A stand-in API server on 127.0.0.1 (ThreadingHTTPServer) answers the pod list and each pod's log after
`--delay-ms` (an API server's round trip under load); gpuval's KubernetesEngine reads them with the official
client, exactly as `gpuval jobs logs NS/Job/NAME --on kubernetes` does. For each width (log requests in flight;
1 is the old serial fetch) it prints the wall time and pods/s of reading every pod's log; then, at width 16, the
peak Python memory (tracemalloc) of streaming `log_lines` (lines handed on as they come, what readers use) against
`logs` (one joined string, what `jobs logs --json` prints).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuval.engines.kubernetes import engine as kubernetes  # noqa: E402
from gpuval.engines.kubernetes import LABEL, KubernetesEngine  # noqa: E402

JOB = "gpuval-nccl-1a2b3c"


def _server(pods: int, delay_s: float, log_kb: int) -> ThreadingHTTPServer:
    """The pod list of one job (`pods` pods) and a log per pod, each answered after `delay_s`."""
    names = [f"{JOB}-{i}" for i in range(pods)]
    listing = json.dumps({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
        {"metadata": {"name": n, "namespace": "gpu", "labels": {LABEL: JOB, "gpuval.io/role": "worker"}}}
        for n in names]}).encode()
    line = "#  size  count  type  redop  root  time  algbw  busbw  #wrong\n"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body in separate writes would wait on delayed ACKs

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.startswith("/api/v1/namespaces/gpu/pods?") or self.path == "/api/v1/namespaces/gpu/pods":
                self._send(listing, "application/json")
            elif self.path.endswith("/log"):
                time.sleep(delay_s)
                pod = self.path.split("/")[-2]
                body = f"pod {pod}\n" + line * max(1, log_kb * 1024 // len(line))
                self._send(body.encode(), "text/plain")
            else:
                self._send(b"{}", "application/json", 404)

        def _send(self, body: bytes, kind: str, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _engine(server: ThreadingHTTPServer, width: int) -> KubernetesEngine:
    from kubernetes import client

    configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    configuration.connection_pool_maxsize = max(width, 1)
    kubernetes.LOG_FETCHES = width  # the module's one knob: pod logs in flight
    return KubernetesEngine({"namespace": "gpu"}, api_client=client.ApiClient(configuration))


def _read(engine: KubernetesEngine, joined: bool) -> int:
    """Characters read by one full read of the job's logs."""
    if joined:
        return len(engine.logs(f"gpu/Job/{JOB}"))
    return sum(len(line) for line in engine.log_lines(f"gpu/Job/{JOB}"))


def _peak(engine: KubernetesEngine, joined: bool) -> float:
    """Peak traced Python memory (MiB) of one read."""
    tracemalloc.start()
    _read(engine, joined)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=4096)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--log-kb", type=int, default=4)
    parser.add_argument("--widths", default="1,4,16,64", help="Log fetches in flight; 1 is the old serial read.")
    args = parser.parse_args()
    server = _server(args.pods, args.delay_ms / 1000, args.log_kb)
    _read(_engine(server, 16), False)  # warm up: imports, the client's models, connections
    print(f"{args.pods} pods, {args.delay_ms:g} ms per log request, {args.log_kb} KiB per log")
    print(f"{'width':>5} {'seconds':>8} {'pods/s':>8} {'MiB read':>9}")
    serial = None
    for width in (int(w) for w in args.widths.split(",")):
        started = time.perf_counter()
        size = _read(_engine(server, width), False)
        elapsed = time.perf_counter() - started
        serial = serial or elapsed
        speedup = "" if elapsed == serial else f"   {serial / elapsed:.1f}x the first width"
        print(f"{width:>5} {elapsed:8.2f} {args.pods / elapsed:8.0f} {size / 2**20:9.1f}{speedup}")
    engine = _engine(server, 16)
    print(f"peak Python memory at width 16: log_lines {_peak(engine, False):.1f} MiB, "
          f"logs() {_peak(engine, True):.1f} MiB")
    server.shutdown()


if __name__ == "__main__":
    main()
