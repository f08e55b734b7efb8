"""nccl-tests' text output, byte for byte in the layout of src/util.cu (v2.17+), so scripts that read it read gpuval."""

from __future__ import annotations

from gpuval.collectives.table import Row, Side


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2 decimals while they fit in `width`, then fewer, then exponent form."""
    power, bound = 0, 1
    while value >= bound:
        power += 1
        bound *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def config_line(
    min_bytes: int, max_bytes: int, step_factor: int, step_bytes: int, warmup: int, iters: int, agg: int,
    check: int, graph: int,
) -> str:
    step = f"{step_factor}(factor)" if step_factor > 1 else f"{step_bytes}(bytes)"
    return (
        f"# nThread 1 nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: {step} warmup iters: {warmup} "
        f"iters: {iters} agg iters: {agg} validation: {check} graph: {graph}"
    )


def device_line(rank: int, group: int, pid: int, host: str, device: int, device_hex: str, info: str) -> str:
    return f"#  Rank {rank:2d} Group {group:2d} Pid {pid:6d} on {host:>10s} device {device:2d} [{device_hex}] {info}"


def column_header(time_label: str = "time") -> list[str]:
    blank = f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}"
    names = ("size", "count", "type", "redop", "root")
    units = ("(B)", "(elements)", "", "", "")
    side = (time_label, "algbw", "busbw", "#wrong")
    side_units = ("(us)", "(GB/s)", "(GB/s)", "")

    def line(first: tuple[str, ...], rest: tuple[str, ...]) -> str:
        head = f"# {first[0]:>10s}  {first[1]:>12s}  {first[2]:>8s}  {first[3]:>6s}  {first[4]:>6s}"
        cells = "".join(f"  {c:>7s}  {a:>6s}  {b:>6s}  {w:>6s}" for c, a, b, w in (rest, rest))
        return head + cells + " "

    return [
        blank + "           out-of-place                       in-place          ",
        line(names, side),
        line(units, side_units),
    ]


def _side(side: Side | None) -> str:
    if side is None:  # a side the path does not have (torch.distributed's all_reduce on NCCL has no out-of-place)
        return f"  {'N/A':>7s}  {'N/A':>6s}  {'N/A':>6s}  {'N/A':>6s}"
    wrong = "   N/A" if side.nwrong is None else f"{side.nwrong:6g}"
    return f"  {float_str(side.time, 7)}  {float_str(side.alg_bw, 6)}  {float_str(side.bus_bw, 6)}  {wrong}"


def row_line(row: Row) -> str:
    root = -1 if row.root is None else row.root
    return f"{row.size:12d}  {row.count:12d}  {row.type:>8s}  {row.redop or 'none':>6s}  {root:6d}" + _side(
        row.out_of_place
    ) + _side(row.in_place)


def footer_lines(out_of_bounds: int, avg_busbw: float, program: str, min_bw: float | None = None) -> list[str]:
    verdict = "" if min_bw is None else ("FAILED" if avg_busbw < min_bw * 0.9 else "OK")
    return [
        f"# {'Out of bounds values':<20s} : {out_of_bounds} {'FAILED' if out_of_bounds else 'OK'}",
        f"# {'Avg bus bandwidth':<20s} : {avg_busbw:g} {verdict}",
        "#",
        f"# Collective test concluded: {program}",
    ]
