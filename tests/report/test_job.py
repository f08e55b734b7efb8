"""The page of a job's diagnosis (tests/helpers/job_case.py): suspects first, the compute and wait charts with the
straggler drawn, the hang's ranks and stacks, RAS, the network and events per node; every value from a job escaped;
no script and no link out; a path that cannot be written is a one-line error."""

from __future__ import annotations

import re

import pytest

from gpuval.diagnosis.job_diagnosis import JobDiagnosis
from gpuval.errors import UsageError
from gpuval.report.job import render_job_html, write_job_report
from tests.helpers.job_case import HOSTILE, job_diagnosis


def test_the_page_shows_every_part():
    page = render_job_html(job_diagnosis())
    suspects = page[page.index('id="suspects"'):page.index('id="straggler"')]
    assert suspects.index("node-2") < suspects.index("node-1") and "straggler, transport, events" in suspects
    assert page.count("<svg") == 2 and "rank 5 (straggler)" in page and "median of the ranks" in page
    assert "Ranks the others wait for" in page and "its process is stopped" in page
    assert "Rank 0: stacks (py-spy)" in page and "all_reduce (torch/distributed/distributed_c10d.py:3252)" in page
    assert "considered dead" in page and "0xcf264af53edbe986" in page
    assert 'class="badge s-fail">fail' in page and "contained ECC error" in page and "Permission denied" in page


def test_job_text_is_escaped_and_the_page_reaches_nothing():
    page = render_job_html(job_diagnosis())
    assert HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page.lower()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)


def test_an_empty_diagnosis_says_what_is_missing():
    page = render_job_html(JobDiagnosis(job_id="7", engine="local"))
    assert "No node is nominated" in page and "No step records read" in page
    assert "The ranks were not probed for a hang" in page and "RAS was not asked" in page


def test_the_page_is_written_or_the_path_refused(tmp_path):
    path = write_job_report(JobDiagnosis(job_id="7", engine="local"), tmp_path / "sub" / "job.html")
    assert path.read_text().startswith("<!DOCTYPE html>")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="cannot write"):
        write_job_report(JobDiagnosis(job_id="7", engine="local"), tmp_path / "file" / "job.html")


def test_the_page_and_the_terminal_say_a_communication_slowdown_and_why_a_straggler_is_slow():
    """A job whose link turned slow (tests/diagnosis/test_comm.py's plan): its links are the suspect, no node; a
    straggler's cause is in its row."""
    from gpuval.cli.render import diagnosis_lines
    from gpuval.diagnosis.comm import find_comm_slow
    from tests.diagnosis.test_comm import NODES, _job

    diag = job_diagnosis()
    diag.comm = find_comm_slow(_job(22, slow_from=14), NODES)
    page = render_job_html(diag)
    part = page[page.index('id="communication"'):page.index('id="hang"')]
    assert "communication slow: every rank waits 400 ms a step" in part
    assert "<strong>Suspect (links):</strong> the job&#39;s links (node-0, node-1, node-2, node-3): every rank" in part
    assert part.count(">reference<") == 10 and part.count(">slow<") == 8 and "not judged" in part
    assert "<th>why slow</th>" in page
    lines = diagnosis_lines(diag)
    assert lines[0].endswith("suspects: node-2, node-1, the job's links")
    assert any(line.startswith("  communication: communication slow: every rank waits 400 ms") for line in lines)
    assert any(line.startswith("  suspect links: the job's links (node-0, node-1, node-2, node-3): every rank")
               for line in lines)
