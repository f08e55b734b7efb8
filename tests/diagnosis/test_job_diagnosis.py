"""The diagnosis of a job (tests/helpers/job_case.py): each node nominated once with every reason, most-named first,
and the whole as plain JSON."""

from __future__ import annotations

import json
import math

from gpuval.diagnosis.job_diagnosis import JobDiagnosis, nominate, plain
from tests.helpers.job_case import job_diagnosis


def test_each_node_is_one_suspect_with_every_reason():
    diag = job_diagnosis()
    assert diag.straggler.outcome == "straggler" and diag.hang.outcome == "hang"
    by_node = {s.node: s for s in diag.suspects}
    assert list(by_node) == ["node-2", "node-1"]  # three sources, then two
    two = by_node["node-2"]
    assert two.sources == ["straggler", "transport", "events"] and two.ranks == [5]
    assert two.gpus == ["cuda:1 (0000:1a:00.0)"] and any("ECC" in w for w in two.why)
    one = by_node["node-1"]
    assert one.sources == ["hang", "ras"] and one.ranks == [3, 2]
    assert one.gpus == ["cuda:1 (0000:1a:00.0)", "cuda:0 (0000:19:00.0)"]
    assert any("its process is stopped" in w for w in one.why)
    assert any("considered dead" in w for w in one.why) and any("aborted" in w for w in one.why)


def test_a_gpu_is_named_by_its_nodes_nvml_index_where_the_probe_read_it():
    """CUDA's device index is the process's own (CUDA_VISIBLE_DEVICES reorders it); the node's NVML index of the
    same PCI bus id is what the node's checks and drains call that GPU."""
    diag = job_diagnosis()
    diag.gpus = {"node-2": {"0000:1a:00.0": 6}}
    two = next(s for s in nominate(diag) if s.node == "node-2")
    assert two.gpus == ["GPU 6 (0000:1a:00.0)"]


def test_nothing_found_nominates_nothing():
    assert nominate(JobDiagnosis(job_id="1", engine="local")) == []


def test_a_node_that_does_not_answer_while_others_do_is_nominated_and_none_answering_nominates_none():
    """The engine reached the job but not that node: lost, hung, or its scheduler's daemon down. Where no node
    answered nothing says which is at fault (diagnose refuses that as could-not-diagnose)."""
    lost = "srun on d2: exit 1: srun: error: Task launch for StepId=7.3 failed on node d2: Communication failure"
    diag = JobDiagnosis(job_id="7", engine="slurm", probed={"d1": "", "d2": lost, "d3": ""})
    [suspect] = nominate(diag)
    assert (suspect.node, suspect.sources, suspect.ranks) == ("d2", ["unreachable"], [])
    assert suspect.why == [f"did not answer inside the job while 2 other node(s) of it did: {lost}"]
    assert nominate(JobDiagnosis(job_id="7", engine="slurm", probed={"d1": "no answer", "d2": lost})) == []


def test_the_json_is_plain():
    doc = json.loads(json.dumps(job_diagnosis().to_json()))
    assert doc["job_id"] == "4242" and doc["straggler"]["stragglers"][0]["rank"] == 5
    assert [(t["node"], t["status"]) for t in doc["transport"]] == [("node-2", "fail")]
    assert doc["transport"][0]["ranks"][1]["rank"] == 5 and doc["since"] == "2026-11-27T09:00:00+00:00"
    assert doc["ras"]["node-1"]["communicators"][0]["missing"][0]["considered_dead"] is True
    assert doc["hang"]["stacks"]["0"]["threads"][0]["frames"][0]["function"] == "all_reduce"
    assert plain({"x": math.nan, "y": [math.inf, 1.5]}) == {"x": None, "y": [None, 1.5]}
