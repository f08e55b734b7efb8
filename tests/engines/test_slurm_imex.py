"""Slurm jobs on NVL72 racks: the IMEX channel options rendered through the engine's options (golden sbatch), and a
real job of the session's Slurm (22.05: no switch/nvidia_imex plugin, so the channel is the recording's) that asks
for a channel per segment and runs the IMEX check inside, where it applies because the job holds a channel."""

from __future__ import annotations

import json

import pytest

from gpuval.engines.slurm import SlurmEngine
from gpuval.errors import UsageError
from tests.conftest import DATA, run_gpuval
from tests.engines.specs import nccl_spec
from tests.engines.test_render import _golden


def test_a_job_asks_for_a_channel_per_segment():
    """4 GB200 trays in segments of 2, one IMEX channel per segment (sbatch --network=unique-channel-per-segment,
    Slurm 25.11+ with switch/nvidia_imex and topology/block): golden. The default, one channel for the whole job
    (what switch/nvidia_imex gives every job), adds no directive; a word Slurm lacks is one line."""
    spec = nccl_spec(sku=None, nodes=4, gpus_per_node=4, cpus_per_proc=18, time_limit_min=30,
                     extras={"slurm": {"partition": "gb200", "workdir": "/shared/gpuval",
                                       "source": "/shared/src/gpuval", "segment": 2, "imex_channels": "segment"}})
    text = SlurmEngine({"python": "/usr/bin/python3"}).render(spec).files["job.sbatch"]
    assert text == _golden("gb200-nccl.sbatch", text)
    assert "#SBATCH --segment=2\n#SBATCH --network=unique-channel-per-segment\n" in text
    plain = SlurmEngine({}).render(nccl_spec(sku=None, nodes=4, gpus_per_node=4)).files["job.sbatch"]
    assert "--network" not in plain and "--segment" not in plain
    with pytest.raises(UsageError, match=r"slurm option imex_channels: Input should be 'job' or 'segment'"):
        SlurmEngine({"imex_channels": "node"})
    with pytest.raises(UsageError, match=r"slurm option segment: Input should be greater than or equal to 1"):
        SlurmEngine({"segment": "0"})


def test_the_imex_check_applies_inside_a_real_job_holding_a_channel(slurm, tmp_path):
    """sbatch (22.05) takes the job with --network=unique-channel-per-segment, and `gpuval health --check imex` in
    the job, on a GB200 tray holding the channel Slurm job 74 held (tests/data/imex: a workload container without
    nvidia-imex-ctl), judges the channel: PASS, where the same tray outside any job is an idle tray, not judged."""
    channel = (DATA / "imex" / "imex-channel-slinky.txt").read_text().split("\n")[3]
    tray = tmp_path / "tray-in-job.yaml"
    tray.write_text(f"based_on: gb200-tray\nimex: {{service: inactive, installed: false, channels: [{channel}]}}\n")
    proc = run_gpuval("submit", "health", "--on", "slurm", "--nodes", "1", "--opt", "imex_channels=segment",
                      "--opt", f"workdir={tmp_path / 'job'}", "--wait", "--json", "--", "--recorded", str(tray),
                      "--check", "imex", env=slurm.env, timeout=120)
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "succeeded", proc.stderr
    script = (tmp_path / "job" / "job.sbatch").read_text()
    assert "#SBATCH --network=unique-channel-per-segment\n" in script
    [record] = out["results"]
    assert record["name"] == "imex" and record["status"] == "pass", record["reason"]
    assert "channel(s) channel1" in record["reason"] and "the domain was not read" in record["reason"]
    outside = run_gpuval("health", "--recorded", str(tray), "--check", "imex", "--json",
                         env={"SLURM_JOB_ID": "", "KUBERNETES_SERVICE_HOST": ""})
    assert "an idle tray is not judged" in outside.stdout, outside.stdout
