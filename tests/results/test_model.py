"""Result.kind is one of five kinds and Result.data the kind's own model; records stored by gpuval 0.1.0 (untyped
data, tests/data/results) still read back, keep every key they had, and survive the store."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gpuval.results import Result, Status, Where, read_results
from gpuval.results.data import CollectiveData, FleetData, HealthData, LammpsData, TrainData
from gpuval.results.query import Query
from gpuval.results.store import open_store
from tests.conftest import DATA

OLD = DATA / "results" / "gpuval-0.1.0-records.jsonl"
TYPES = {"collective": CollectiveData, "health": HealthData, "lammps": LammpsData, "train": TrainData}


def test_records_of_the_previous_version_read_back_typed_and_whole():
    raw = [json.loads(line) for line in OLD.read_text().splitlines()]
    records = read_results(OLD)
    assert {r.kind for r in records} == set(TYPES)
    for old, record in zip(raw, records):
        assert isinstance(record.data, TYPES[record.kind])
        dumped = record.model_dump(mode="json")["data"]
        assert {k: dumped[k] for k in old["data"]} == old["data"], record.name  # nothing lost, nothing changed
    health = next(r for r in records if r.name == "ecc")
    assert health.data.fault_code == "ECC_ERRORS"
    sweep = next(r for r in records if r.kind == "collective" and r.run_id != "old-import")
    assert sweep.data.results and sweep.data.hosts
    imported = next(r for r in records if r.name == "nccl_transport")
    assert imported.data.fault_code == "" and imported.data.model_extra["transport"] == "Socket"


def test_the_store_keeps_old_records_as_they_were(tmp_path):
    store = open_store(str(tmp_path / "r.db"))
    records = read_results(OLD)
    store.add(records)
    back = {r.id: r for r in store.results(Query())}
    assert {i: r.model_dump() for i, r in back.items()} == {r.id: r.model_dump() for r in records}


def test_kind_is_one_of_five_and_data_follows_it():
    record = Result(run_id="r", kind="train", name="x", where=Where(hostname="h"), status=Status.PASS,
                    data={"pids": [1, 2], "device": "cpu", "new_fact": 3})
    assert isinstance(record.data, TrainData) and record.data.pids == [1, 2] and record.data.model_extra["new_fact"] == 3
    fleet = Result(run_id="r", kind="fleet", name="x", where=Where(hostname="h"), status=Status.PASS)
    assert isinstance(fleet.data, FleetData)
    with pytest.raises(ValidationError):
        Result(run_id="r", kind="nccl", name="x", where=Where(hostname="h"), status=Status.PASS)


def test_per_gpu_figures_read_the_same_from_the_one_form_and_from_earlier_records():
    """Per-GPU figures are stored once, labelled with NVML index and bus id; a record of an earlier gpuval (labelled
    rows without an index, NVML-index lists, the sustained load's figures by label) reads back the same."""
    from gpuval.results.data import GpuFigures

    now = {"gpus": [{"index": 0, "bus_id": "0001:00:00.0", "gpu": "GPU 0 (0001:00:00.0)", "h2d": 55.5, "d2h": 55.3,
                     "placed": "CPUs 0-23"},
                    {"index": 2, "bus_id": "0003:00:00.0", "gpu": "GPU 2 (0003:00:00.0)", "h2d": 40.0, "d2h": 41.0}]}
    before = {"gpus": [{"gpu": "GPU 0 (0001:00:00.0)", "h2d": 55.5, "d2h": 55.3, "placed": "CPUs 0-23"},
                       {"gpu": "GPU 2 (0003:00:00.0)", "h2d": 40.0, "d2h": 41.0}]}
    expected = [GpuFigures(0, "0001:00:00.0", {"h2d": 55.5, "d2h": 55.3}),
                GpuFigures(2, "0003:00:00.0", {"h2d": 40.0, "d2h": 41.0})]
    assert HealthData(details=now).per_gpu() == HealthData(details=before).per_gpu() == expected
    lists = HealthData(details={"bf16": [700.0, 400.0], "fp16": [650.0, None]})  # gemm_tflops before the one form
    assert lists.per_gpu() == [GpuFigures(0, "", {"bf16": 700.0, "fp16": 650.0}), GpuFigures(1, "", {"bf16": 400.0})]
    load = HealthData(details={"by_gpu": {"GPU 1 (0002:00:00.0)": {"alone": 730.0, "together": 728.5}},
                               "together": [0.0, 728.5]})
    assert load.per_gpu()[1] == GpuFigures(1, "0002:00:00.0", {"alone": 730.0, "together": 728.5})
    ib = HealthData(details={"gpus": {"mlx5_ib0": "0001:00:00.0"}})  # ib_write_bw's HCA-to-GPU map: no figures
    assert ib.per_gpu() == []
    assert HealthData(unit="TFLOPS", details={"gpu_units": {"power_w_max": "W"}}).unit_of("power_w_max") == "W"
    assert HealthData(unit="TFLOPS").unit_of("tflops") == "TFLOPS"
