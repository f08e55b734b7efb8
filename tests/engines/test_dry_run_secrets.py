"""A dry run renders the job twice (engines/base.py `dryrun`): the files that submit sends, with every value as
typed and inert, and the files it prints, rendered from the environment with every secret as *** before any shell
or YAML quoting (results/dsn.py `hide_secrets`, one rule for every engine). Reliability-4 D17: redacting the
rendered text missed a password inside the shell quoting of a URL (Slurm) and a non-ASCII secret in YAML's escape
(Kubernetes); red team 5 N8: PGPASSWORD and a secret-named URL (an Azure SAS URL) were no secrets; red team 6 R4:
SSHPASS, a command line's `--hf-token S --password=S` and an `Authorization: Bearer S` header were printed and went
into the pod spec as plain values. The scripts run in a real bash; the YAML is read back with PyYAML's safe loader."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from gpuval.engines.azureml import AzureMLEngine
from gpuval.engines.kubernetes import KubernetesEngine
from gpuval.engines.local import LocalEngine
from gpuval.engines.slurm import SlurmEngine
from gpuval.engines.spec import JobSpec
from gpuval.results.dsn import hide_secrets
from tests.engines.specs import nccl_spec

ENV = {"GPUVAL_DB": "postgresql://gv:pa'ss9@db/gv", "HF_TOKEN": "café-Secr3t", "API_KEY": 'k"e$(touch x)`y`\\z9',
       "PGPASSWORD": "pg'Pw7", "AZURE_SAS_TOKEN": "https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=SasS1g",
       "PLAIN": "a'b\"c $(touch x) `id` ;# ${HOME} café ✓ - : {x} !!str &a *a", "ANSWER": "yes",
       "SSHPASS": "sshS3cret", "TRAIN_ARGS": "--hf-token hfS3cret --password=argS3cret",
       "EXTRA_HEADERS": "Authorization: Bearer beArerS3cretXYZ"}
SECRETS = ["ss9", "Secr3t", "z9", "Pw7", "SasS1g", "sshS3", "hfS3", "argS3", "beArerS3"]  # unchanged by any quoting
IN_SECRET = ("API_KEY", "AZURE_SAS_TOKEN", "EXTRA_HEADERS", "GPUVAL_DB", "HF_TOKEN", "PGPASSWORD", "SSHPASS",
             "TRAIN_ARGS")  # ENV's secrets, sorted
SHOWN_INSIDE = {"GPUVAL_DB": "postgresql://gv:***@db/gv", "TRAIN_ARGS": "--hf-token *** --password=***",
                "EXTRA_HEADERS": "Authorization: Bearer ***"}  # the values shown with the secrets inside them hidden


def _shell_env(script: str) -> dict[str, str]:
    """What the script's `export` lines of ENV's variables give, as bash runs them (nothing else of it runs)."""
    exports = "\n".join(line for line in script.splitlines() if line.startswith(tuple(f"export {k}=" for k in ENV)))
    probe = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {sorted(ENV)!r}}}))"
    proc = subprocess.run(["bash", "-c", f"set -e\n{exports}\nexec python3 -c {json.dumps(probe)}"],
                          capture_output=True, text=True, timeout=30, cwd="/tmp")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("engine", [SlurmEngine({}), LocalEngine({})], ids=["slurm", "local"])
def test_a_shell_script_dry_run_shows_no_secret_and_sends_every_value_as_typed(engine):
    spec = JobSpec(name="d17", command=["true"], env=ENV)
    rendered = engine.dryrun(spec)
    [(name, sent)] = rendered.files.items()
    assert _shell_env(sent) == ENV  # quotes, $(...), backticks, non-ASCII: all inert, all as typed
    shown = rendered.shown_text()
    assert not [s for s in SECRETS if s in shown], shown
    assert _shell_env(shown) == hide_secrets(ENV)  # what is shown is what would be sent, secrets aside
    assert list(rendered.shown) == [name]


def test_a_kubernetes_dry_run_shows_no_secret_and_sends_every_value_as_typed():
    rendered = KubernetesEngine({"namespace": "gpu"}).dryrun(nccl_spec(env=ENV))
    sent = [yaml.safe_load(body) for body in rendered.files.values()]
    assert sent == rendered.objects  # the YAML reads back as the objects it was dumped from
    secret = next(o for o in sent if o["kind"] == "Secret")
    assert secret["stringData"] == {k: ENV[k] for k in IN_SECRET}
    launcher = sent[-1]["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    plain = {e["name"]: e["value"].replace("$$", "$") for e in launcher["env"] if "value" in e}
    assert plain["PLAIN"] == ENV["PLAIN"] and plain["ANSWER"] == "yes"  # a string, not YAML's true
    refs = {e["name"]: e["valueFrom"].get("secretKeyRef", {}) for e in launcher["env"] if "valueFrom" in e}
    assert {k: refs.get(k, {}).get("key") for k in IN_SECRET} == {k: k for k in IN_SECRET}  # read from the Secret
    shown = rendered.shown_text()
    assert not [s for s in SECRETS if s in shown], shown
    assert list(rendered.shown) == list(rendered.files) and f"name: {rendered.job_name}\n" in shown  # one name
    shown_secret = next(o for o in map(yaml.safe_load, rendered.shown.values()) if o["kind"] == "Secret")
    assert shown_secret["stringData"] == {**{k: "***" for k in IN_SECRET}, **SHOWN_INSIDE}


def test_an_azure_ml_dry_run_shows_no_secret_and_sends_every_value_as_typed():
    rendered = AzureMLEngine({"compute": "NDv4"}).dryrun(nccl_spec(env=ENV))
    [(name, sent)] = rendered.files.items()
    assert {k: yaml.safe_load(sent)["environment_variables"][k] for k in ENV} == ENV
    shown = rendered.shown_text()
    assert not [s for s in SECRETS if s in shown], shown
    assert {k: yaml.safe_load(rendered.shown[name])["environment_variables"][k] for k in ENV} == hide_secrets(ENV)


def test_a_line_break_in_a_secret_is_refused_before_anything_renders():
    with pytest.raises(ValueError, match="environment variable HF_TOKEN: control character"):
        JobSpec(name="d17", command=["true"], env={"HF_TOKEN": "tok\nexport X=1"})
