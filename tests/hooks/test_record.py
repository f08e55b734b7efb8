"""The step record: one line under 960 bytes whatever the host name, read back exactly, found behind launcher
prefixes, and refused when broken (wrong types, non-finite numbers, an unknown version)."""

from __future__ import annotations

import json

import pytest

from gpuval.hooks.record import MAX_BYTES, PREFIX, GpuReading, HostLoad, Stats, StepRecord, Transfer, read_line


def _record(**changes: object) -> StepRecord:
    values = dict(rank=3, local_rank=1, world=8, host="gpu-07", pid=4242, first=100, last=149, n=50,
                  t0=1764150000.125, t1=1764150012.5, step_s=Stats(12.4, 0.248, 0.31),
                  compute_s=Stats(9.1, 0.182, 0.25), wait_s=Stats(3.3, 0.066, 0.09), coll=150, seq=450, gpu=1,
                  bus="0000:19:00.0", job="8812")
    values.update(changes)
    return StepRecord(**values)


def test_a_record_reads_back_as_written():
    record = _record()
    line = record.to_line()
    assert line.startswith(PREFIX) and line.endswith("\n") and line.count("\n") == 1
    assert read_line(line) == record


def test_the_line_stays_under_960_bytes_with_the_longest_fields():
    record = _record(host="h" * 5000, job="j" * 5000, bus="b" * 5000, rank=2**31 - 2, world=2**31 - 1,
                     pid=2**22, first=10**12, last=10**12 + 10**6, n=10**6, coll=10**15, seq=10**15,
                     step_s=Stats(1.23456789e300, 1.23456789e-300, 9.87654321e299))
    line = record.to_line()
    assert len(line.encode()) < MAX_BYTES, len(line.encode())
    back = read_line(line)
    assert back is not None and back.host == "h" * 64 and back.rank == 2**31 - 2


FULL = dict(xfer=Transfer(123456789, 0.25), cpu=HostLoad(cpu_s=9.05, runq=1.25, steal=0.0125),
            gpu_now=GpuReading(sm_mhz=1590, power_w=699.81, temp_c=71, reasons=0x4, held_s=(("pwr", 5.08),)))


def test_the_added_parts_read_back_and_a_record_without_them_reads_as_before():
    record = _record(**FULL)
    assert read_line(record.to_line()) == record
    doc = json.loads(record.to_line()[len(PREFIX):])
    assert doc["v"] == 1 and doc["xfer"] == {"bus": 123456789, "s": 0.25}
    assert doc["gpu_now"] == {"sm": 1590, "w": 699.81, "c": 71, "why": 4, "held": {"pwr": 5.08}}
    version_1 = ('gpuval-step {"v":1,"rank":3,"local_rank":1,"world":8,"host":"gpu-07","pid":4242,"gpu":1,'
                 '"bus":"0000:19:00.0","job":"8812","steps":[100,149],"n":50,"t":[1764150000.125,1764150012.5],'
                 '"step_s":{"sum":12.4,"med":0.248,"max":0.31},"compute_s":{"sum":9.1,"med":0.182,"max":0.25},'
                 '"wait_s":{"sum":3.3,"med":0.066,"max":0.09},"coll":150,"seq":450}')
    assert read_line(version_1) == _record()  # a record of the timer before these parts


def test_the_line_stays_under_960_bytes_with_every_part_at_its_longest():
    huge = 1.23456789e300
    record = _record(host="h" * 5000, job="j" * 5000, bus="0000:19:00.0", rank=2**31 - 2, world=2**31 - 1,
                     pid=2**22, first=10**12, last=10**12 + 10**6, n=10**6, coll=10**15, seq=10**15,
                     step_s=Stats(huge, 1.23456789e-300, huge), compute_s=Stats(huge, huge, huge),
                     wait_s=Stats(huge, huge, huge), xfer=Transfer(10**18, huge),
                     cpu=HostLoad(huge, huge, huge),
                     gpu_now=GpuReading(2**31, huge, -(2**31), 2**64 - 1, tuple((k, huge) for k in
                                                                               ("pwr", "sync", "swt", "hwt", "brk"))))
    line = record.to_line()
    assert len(line.encode()) < MAX_BYTES, len(line.encode())
    back = read_line(line)
    assert back is not None and back.bus == "0000:19:00.0" and back.xfer == Transfer(10**18, 1.23457e300)


@pytest.mark.parametrize("part", [
    {"xfer": {"bus": "1", "s": 0.1}}, {"xfer": {"bus": -1, "s": 0.1}}, {"xfer": {"bus": 1}}, {"xfer": [1]},
    {"cpu": {"rq": -1.0}}, {"cpu": {"st": "0.1"}}, {"cpu": 3},
    {"gpu_now": {"sm": 1.5}}, {"gpu_now": {"held": {"pwr": -1.0}}}, {"gpu_now": {"held": [1]}},
    {"gpu_now": {"why": True}},
])
def test_a_broken_added_part_is_no_record(part):
    assert read_line(_doc(**part)) is None


def test_stats_of_a_window():
    assert Stats.of([3.0, 1.0, 2.0]) == Stats(6.0, 2.0, 3.0)
    assert Stats.of([4.0, 1.0, 2.0, 3.0]) == Stats(10.0, 2.5, 4.0)


@pytest.mark.parametrize("prefix", ["", "0: ", "  3: ", "[1,0]<stderr>:", "2026-11-27T10:00:00.123Z ", "[rank1]: "])
def test_found_behind_launcher_prefixes(prefix):
    assert read_line(prefix + _record().to_line()) == _record()


def _doc(**changes: object) -> str:
    doc = json.loads(_record().to_line()[len(PREFIX):])
    doc.update(changes)
    return PREFIX + json.dumps(doc)


def _swap(old: str, new: str) -> str:
    line = _doc()
    assert old in line
    return line.replace(old, new)


@pytest.mark.parametrize("line", [
    "an ordinary log line", "gpuval-step", "gpuval-step {", "gpuval-step [1, 2]", "xgpuval-step {}",
    _doc(v=2), _doc(v="1"), _doc(rank="3"), _doc(rank=8), _doc(rank=-1), _doc(world=True), _doc(steps=[5, 4]),
    _doc(steps=[1]), _doc(n=0), _doc(t=[1.0]), _doc(gpu="0"), _doc(host=7),
    _doc(step_s={"sum": 1.0, "med": 1.0}), _doc(wait_s={"sum": -1.0, "med": 0.1, "max": 0.1}),
    _doc(compute_s={"sum": 1.0, "med": True, "max": 1.0}),
    _swap('"sum": 12.4', '"sum": NaN'), _swap('"sum": 12.4', '"sum": Infinity'),
])
def test_broken_or_foreign_lines_are_no_record(line):
    assert read_line(line) is None


def test_a_later_versions_extra_keys_are_passed_over():
    assert read_line(_doc(new_field={"a": 1})) == _record()
