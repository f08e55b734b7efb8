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
