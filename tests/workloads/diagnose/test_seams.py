"""The diagnosis's seams with its engine are typed (issue 37 item 4): the pipeline holds an `Engine`; a job it
cannot reach is `JobUnreachable`, never told by the text of a message; what a job's ranks see as their job's id is
the engine's to say (`Engine.rank_job_id`), never a list of engine names. Engines built here ask nothing of a
scheduler (each refusal below is the engine's own, before any call), so no cluster runs."""

from __future__ import annotations

import pytest

from gpuval.engines import get_engine
from gpuval.engines.base import JobUnreachable
from gpuval.engines.probe import Placement
from gpuval.workloads.diagnose.run import DiagnoseRequest, placement_of, probe_args


def test_a_job_out_of_reach_is_typed_and_said_once(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path))
    with pytest.raises(JobUnreachable) as azure:  # the engine's own refusal: raised as it is
        placement_of(get_engine("azureml", {"subscription_id": "s", "resource_group": "g", "workspace": "w"}), "j7")
    assert str(azure.value).startswith("could not diagnose azure ml job j7: Azure ML does not say")
    with pytest.raises(JobUnreachable) as local:  # any other error of the engine's: could-not-diagnose, once
        placement_of(get_engine("local"), "4242")
    assert str(local.value) == f"could not diagnose local job 4242: no local job '4242' (see {tmp_path / 'local'})"


@pytest.mark.parametrize(("engine", "job"), [("slurm", ["--job", "8812"]), ("local", []), ("kubernetes", [])])
def test_the_ranks_job_is_the_engines_to_say(engine: str, job: list[str]):
    args = probe_args(DiagnoseRequest("8812", "run-1"), get_engine(engine), Placement(["n1"]))
    assert args == ["jobs", "probe", "--timeout", "10", "--stall", "60", *job]
