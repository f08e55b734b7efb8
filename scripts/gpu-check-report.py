"""The GPU check's report (scripts/gpu-check.sh): reads the step outputs in OUT and writes OUT/gpu-validation.md,
the tables of docs/gpu-validation.md for this machine: date, device, driver, every command with its exit code and
time, torch's independent figures beside gpuval's, the verdicts, and the bench beside nccl-tests.

    python scripts/gpu-check-report.py OUT
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def read(out: Path, name: str) -> str:
    path = out / name
    return path.read_text(errors="replace") if path.exists() else ""


def machine(env: str) -> list[str]:
    """Device, driver and CUDA from nvidia-smi; torch, NCCL and the bench's path from the env step."""
    rows = []
    for label, pattern in (("device", r"Product Name\s*:\s*(.+)"), ("driver", r"Driver Version\s*:\s*(\S+)"),
                           ("CUDA (driver)", r"CUDA Version\s*:\s*(\S+)"), ("VBIOS", r"VBIOS Version\s*:\s*(\S+)"),
                           ("power limit", r"Default Power Limit\s*:\s*(.+)"), ("versions", r"^(torch .+)$"),
                           ("bench path", r"^((?:NCCL|torch\.distributed) .+)$")):
        found = re.search(pattern, env, re.MULTILINE)
        rows.append(f"| {label} | {found.group(1).strip() if found else 'not read'} |")
    return ["| what | value |", "| --- | --- |", *rows]


def steps(out: Path) -> list[str]:
    lines = ["| step | exit | seconds | command |", "| --- | ---: | ---: | --- |"]
    for line in read(out, "steps.tsv").splitlines()[1:]:
        name, code, seconds, command = (line.split("\t") + ["", "", ""])[:4]
        lines.append(f"| {name} | {code} | {seconds} | `{command}` |")
    return lines


def figure(text: str, pattern: str) -> str:
    found = re.search(pattern, text)
    return found.group(1) if found else "not read"


def figures(out: Path) -> list[str]:
    """gpuval's figures beside torch's own (scripts/gpu-check-reference.py)."""
    try:
        ref = json.loads(read(out, "reference.txt") or "{}")
    except json.JSONDecodeError:
        ref = {}
    health = read(out, "validate.txt") + read(out, "health.txt")

    def r(key: str) -> str:
        return f"{ref[key]:.1f}" if key in ref else "not read"

    burn = read(out, "burn.txt")
    rows = [("HBM copy GB/s (read + write)", figure(health, r"slowest memcpy (\d+) GB/s"), r("d2d_copy_GBps_rw")),
            ("H2D pinned GB/s", figure(health, r"slowest H2D ([\d.]+) GB/s"), r("h2d_pinned_GBps")),
            ("D2H pinned GB/s", figure(health, r"D2H ([\d.]+) GB/s"), r("d2h_pinned_GBps")),
            ("bf16 GEMM 8192^3 burst TFLOPS", figure(health, r"bf16 (\d+) TFLOPS"), r("gemm_bf16_8192_TFLOPS")),
            ("bf16 GEMM sustained TFLOPS", figure(health, r"alone: lowest (\d+) TFLOPS"), "-"),
            ("burn TFLOPS", figure(burn, r"GEMM \d+ s: (\d+)-"), "-")]
    return ["| figure | gpuval | torch reference |", "| --- | ---: | ---: |",
            *(f"| {name} | {ours} | {theirs} |" for name, ours, theirs in rows)]


def probe(out: Path) -> list[str]:
    """What NVML answered (scripts/gpu-check-nvml-probe.py): per GPU its ids, power, thresholds and field values."""
    try:
        doc = json.loads(read(out, "nvml-probe.txt") or "{}")
    except json.JSONDecodeError:
        return ["(the NVML probe printed no JSON: see nvml-probe.txt)"]
    lines = [f"nvidia-ml-py {doc.get('nvidia_ml_py', '?')}, driver {doc.get('driver', '?')}, host PID namespace "
             f"{doc.get('host_pid_namespace', '?')}", "", "| GPU | ids | power default / enforced mW | thresholds C | "
             "fields (name: id = value, or NVML's return) |", "| --- | --- | --- | --- | --- |"]
    for g in doc.get("gpus", []):
        fields = g.get("fields", {})
        shown = "; ".join(f"{name.removeprefix('NVML_FI_')}: {f['id']} = "
                          + (str(f["value"]) if f.get("return") == 0 else f"return {f.get('return')}")
                          for name, f in fields.items() if isinstance(f, dict) and "id" in f) or str(fields)
        lines.append(f"| {g.get('index')} {g.get('name')} | {g.get('pci_device_id')} {g.get('pci_subsystem_id')} | "
                     f"{g.get('power_default_mw')} / {g.get('power_enforced_mw')} | {g.get('thresholds_c')} | "
                     f"{shown} |")
    return lines


def calibration(out: Path) -> list[str]:
    """The card's figures from the two full health runs, side by side."""
    runs = [read(out, "health.txt"), read(out, "health-2.txt")]
    rows = [("HBM memcpy GB/s", r"slowest memcpy (\d+) GB/s"), ("HBM triad GB/s", r"slowest triad (\d+) GB/s"),
            ("H2D GB/s", r"slowest H2D ([\d.]+) GB/s"), ("bf16 burst TFLOPS", r"bf16 (\d+) TFLOPS"),
            ("fp16 burst TFLOPS", r"fp16 (\d+) TFLOPS"), ("sustained TFLOPS alone", r"alone: lowest (\d+) TFLOPS"),
            ("peak power under load", r"peak power (\d+ W of a [\d.]+ W limit)")]
    return ["| figure | health | health-2 |", "| --- | ---: | ---: |",
            *(f"| {name} | {figure(runs[0], pattern)} | {figure(runs[1], pattern)} |" for name, pattern in rows)]


def burst(out: Path) -> list[str]:
    """The burst-order step's table (scripts/gpu-check-burst.py)."""
    table = [line for line in read(out, "burst-order.txt").splitlines() if line.startswith("|")]
    return table or ["(the burst step printed no table: see burst-order.txt)"]


def ras(out: Path) -> list[str]:
    """What gpuval's RAS client read from this NCCL's RAS (scripts/gpu-check-ras.py), as the step printed it."""
    text = read(out, "nccl-ras.txt").strip()
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return ["(the RAS step printed no JSON: see nccl-ras.txt)"]
    return ["```json", text[:4000], "```"]


def verdicts(out: Path) -> list[str]:
    """Each check's status line as gpuval printed it (validate, health, burn, the busy and cuda_init steps)."""
    keep = re.compile(r"^\s*(PASS|WARN|FAIL|ERROR|SKIPPED)\s+\S+|^(PASS|WARN|FAIL|ERROR) |verdict|pass, ")
    lines = []
    for name in ("validate", "health", "health-2", "burn", "busy", "burn-busy", "pidns-idle", "pidns-busy",
                 "pidns-pausing", "cuda-stale-mig", "cuda-stale-gpu", "cuda-index", "hidden", "health-sku"):
        picked = [line.rstrip()[:160] for line in read(out, f"{name}.txt").splitlines() if keep.search(line)]
        lines += [f"### gpuval {name}", "", "```", *(picked or ["(no check lines: see the step's output)"]), "```", ""]
    return lines


def main(out: Path) -> None:
    doc = ["# GPU validation", "", f"Started {read(out, 'started.txt').strip() or 'unknown'} (UTC), by "
           "scripts/gpu-check.sh.", "", "## Machine", "", *machine(read(out, "env.txt")), "", "## Steps", "",
           *steps(out), "", "## NVML on this GPU", "", *probe(out), "", "## Figures: gpuval beside torch alone", "",
           *figures(out), "", "## Calibration: two full health runs", "", *calibration(out), "",
           "## GEMM burst: order and repeatability", "", *burst(out), "", "## NCCL RAS through gpuval's client", "",
           *ras(out), "", "## Verdicts", "",
           *verdicts(out), "## gpuval bench beside nccl-tests (all_reduce, same GPU, same NCCL)", "",
           read(out, "bench/bench-vs-nccltests.md").strip() or "(the bench step produced no table: see bench.txt)", ""]
    (out / "gpu-validation.md").write_text("\n".join(doc))
    print(f"wrote {out / 'gpu-validation.md'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
