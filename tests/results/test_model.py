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
