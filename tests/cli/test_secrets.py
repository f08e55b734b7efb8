"""Secrets a user hands a job (`--env GPUVAL_DB=postgresql://gv:TopSecret9@...`, a token) are never printed by a
dry run, plain or `--json`, on any engine, and never sit in a background fleet check's argv, which `ps` shows every
user (reliability review D15 b and c). Dry runs render what would be sent without sending it (Slurm and
Kubernetes are not asked: their discovery becomes a note)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gpuval.fleet.run.request import start_background
from tests.conftest import run_gpuval

SECRET = "TopSecret9"
ENV = ["--env", f"GPUVAL_DB=postgresql://gv:{SECRET}@127.0.0.1:5432/gpuval", "--env", "HF_TOKEN=hf-tok-77",
       "--env", "MARKER=seen-42"]


@pytest.mark.parametrize("on", ["slurm", "kubernetes", "local"])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_submit_dry_run_hides_the_jobs_secrets(on: str, as_json: bool):
    proc = run_gpuval("submit", "health", "--on", on, "--dry-run", *ENV, *(["--json"] if as_json else []))
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout + proc.stderr
    assert SECRET not in shown and "hf-tok-77" not in shown
    assert "seen-42" in shown  # the rest of the environment is shown as it is sent
    if as_json:
        assert "***" in "".join(json.loads(proc.stdout)["files"].values())


@pytest.mark.parametrize("on,env,secret", [
    ("slurm", "GPUVAL_DB=postgresql://gv:pa'ss9@db/gv", "ss9"),  # inside the shell quoting of the whole URL
    ("kubernetes", "HF_TOKEN=café-Secr3t", "Secr3t"),  # YAML writes it "caf\\xE9-Secr3t"
])
def test_a_dry_run_hides_a_secret_however_the_render_quotes_it(on: str, env: str, secret: str):
    """Reliability-4 D17: the dry run redacted the rendered text, and missed these two. It now renders from the
    environment with every secret as *** (engines/base.py dryrun)."""
    proc = run_gpuval("submit", "health", "--on", on, "--dry-run", "--env", env)
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stdout + proc.stderr and "***" in proc.stdout


@pytest.mark.parametrize("on,pairs", [
    ("slurm", ["PGPASSWORD=pgS3cret", "AZURE_SAS_TOKEN=https://a.blob.core.windows.net/c?sv=2022-11-02&sig=SasS3cret"]),
    ("kubernetes", ["MYSQL_PWD=myS3cret", "SLACK_WEBHOOK_SECRET=https://hooks.slack.com/services/T0/B0/W3bh00kS3cret"]),
])
def test_a_dry_run_hides_the_common_password_variables_and_a_secret_named_url(on: str, pairs: list[str]):
    """Red team 5 N8: libpq's PGPASSWORD and MySQL's MYSQL_PWD were no secrets (the rule wanted `_` before the word),
    and a secret-named value that is a URL showed whole but for a URL password it did not have."""
    proc = run_gpuval("submit", "health", "--on", on, "--dry-run", *[a for p in pairs for a in ("--env", p)])
    assert proc.returncode == 0, proc.stderr
    assert "S3cret" not in proc.stdout + proc.stderr
    for name in (p.split("=", 1)[0] for p in pairs):
        assert (f"export {name}='***'" if on == "slurm" else f"{name}: '***'") in proc.stdout


def test_a_fleet_dry_run_hides_the_jobs_secrets():
    for extra in ([], ["--json"]):
        proc = run_gpuval("fleet", "check", "--on", "slurm", "--nodelist", "a1,m1", "--dry-run", *ENV, *extra)
        assert proc.returncode == 0, proc.stderr
        assert SECRET not in proc.stdout + proc.stderr and "seen-42" in proc.stdout


def test_a_background_fleet_check_keeps_no_secret_in_its_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The check started in the background gets its --env pairs through its environment (readable by its owner
    only): its argv holds none, and the pairs still reach its jobs (here: its dry run shows them)."""
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path / "jobs"))
    pid, log = start_background(["fleet", "check", "--on", "slurm", "--nodelist", "a1,m1", "--dry-run", *ENV],
                                "20261127T120000Z-0000b9")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert SECRET not in argv and "hf-tok-77" not in argv and "--env" not in argv.split("\0")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
        time.sleep(0.2)
    text = log.read_text()
    assert "export MARKER=seen-42" in text and SECRET not in text, text
