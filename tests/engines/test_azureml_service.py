"""Azure ML status, logs, follow (the SDK's live stream) and cancel through the real azure-ai-ml SDK, offline: every
azure-core transport (the ARM and run-history clients, the SDK's plain request pipeline, the storage client it
makes for the artifact store) answers from tests/engines/azureml_service.py, which replays the service's recorded
response shapes (tests/engines/data/azureml/README.md says where each comes from). Nothing reaches the network: a
request the stand-in does not know fails the test, and so does any socket to an address other than 127.0.0.1."""

from __future__ import annotations

import io

import pytest
from azure.ai.ml import MLClient
from azure.ai.ml.operations._run_history_constants import RunHistoryConstants
from azure.core.credentials import AccessToken
from azure.core.pipeline.transport import RequestsTransport

from gpuval.engines import records
from gpuval.engines.azureml import AzureMLEngine
from gpuval.errors import EngineError
from tests.engines.azureml_service import GROUP, SUBSCRIPTION, WORKSPACE, FakeAzureML, loopback_only


class _Credential:
    def get_token(self, *scopes, **kwargs):
        return AccessToken("fake-token", 4102444800)


@pytest.fixture
def service(monkeypatch) -> FakeAzureML:
    loopback_only(monkeypatch)
    fake = FakeAzureML()
    monkeypatch.setattr(RequestsTransport, "send", lambda self, request, **kw: fake.send(request, **kw))
    monkeypatch.setattr(RunHistoryConstants, "_WAIT_COMPLETION_POLLING_INTERVAL_MIN", 0)  # poll without pausing
    yield fake
    assert fake.unknown == [], "the SDK asked something the stand-in does not know"


def _engine() -> AzureMLEngine:
    return AzureMLEngine({}, client=MLClient(_Credential(), SUBSCRIPTION, GROUP, WORKSPACE))


@pytest.mark.parametrize("native,state", [("Queued", "pending"), ("Running", "running"), ("Finalizing", "running"),
                                          ("Completed", "succeeded"), ("Failed", "failed"), ("Canceled", "cancelled")])
def test_status_reads_the_jobs_state(service, native, state):
    service.statuses = [native]
    status = _engine().status(service.job)
    assert (status.state.value, status.native_state, status.source) == (state, native, "jobs.get")


def test_logs_are_every_processs_std_log_read_file_by_file(service):
    """jobs.download of the job's artifacts (run history, the artifact store's datastore and its blobs), then
    each std_log read line by line, in name order."""
    service.add_log("user_logs/std_log_process_1.txt", "rank 1 ready\n")
    service.add_log("user_logs/std_log_process_0.txt", "rank 0 ready\n# Avg bus bandwidth    : 187.5\n")
    service.add_log("system_logs/lifecycler/execution-wrapper.log", "not a user log\n")
    engine = _engine()
    lines = list(engine.log_lines(service.job))
    assert lines == ["rank 0 ready\n", "# Avg bus bandwidth    : 187.5\n", "rank 1 ready\n"]
    assert engine.logs(service.job) == "".join(lines)
    fetched = [url.split("/user_logs/")[1] for method, url in service.requests
               if method == "GET" and url.startswith("https://sano4nluz7tny6e.blob.") and "/user_logs/" in url]
    assert sorted(set(fetched)) == ["std_log_process_0.txt", "std_log_process_1.txt"]


def test_logs_of_a_missing_job_are_one_line(service):
    for call in (lambda e: list(e.log_lines("no-such-job")), lambda e: e.status("no-such-job")):
        with pytest.raises(EngineError, match="azure ml .*: .*not found"):
            call(_engine())


def test_follow_streams_while_the_job_runs(service):
    """The SDK's stream: run details polled until the job ends, rank 0's log printed as it grows."""
    service.statuses = ["Running", "Running", "Completed"]
    service.add_log("user_logs/std_log_process_0.txt", "step 1\nstep 2\n")
    out = io.StringIO()
    status = _engine().follow(service.job, out)
    assert status.state.value == "succeeded"
    text = out.getvalue()
    assert "step 1\nstep 2\n" in text and f"RunId: {service.job}" in text and "Execution Summary" in text


def test_follow_of_a_failed_job_returns_its_status(service):
    """The SDK raises at the end of a failed job's stream; follow says failed instead of erroring."""
    service.statuses = ["Running", "Failed"]
    service.add_log("user_logs/std_log_process_0.txt", "NCCL error\n")
    out = io.StringIO()
    assert _engine().follow(service.job, out).state.value == "failed"
    assert "NCCL error" in out.getvalue()


def test_cancel_waits_for_the_service_and_is_remembered(service):
    """jobs.begin_cancel: POST .../cancel (202 + Location), polled to the end; the job then reads cancelled."""
    engine = _engine()
    records.save(records.JobRecord(engine="azureml", job_id=service.job,
                                   spec={"name": "gpuval-nccl", "command": ["gpuval"]}))
    service.statuses = ["Running"]
    engine.cancel(service.job)
    posts = [url for method, url in service.requests if method == "POST"]
    assert len(posts) == 1 and posts[0].split("?")[0].endswith(f"/jobs/{service.job}/cancel")
    assert any("/mfeOperationResults/" in url for _, url in service.requests)
    assert engine.status(service.job).state.value == "cancelled"
    assert records.load("azureml", service.job).cancelled


def test_a_failed_job_says_why_from_its_user_logs(service):
    """wait on a failed job: the lines of every process's std_log that say why, and how to read them all."""
    service.statuses = ["Failed"]
    service.add_log("user_logs/std_log_process_0.txt", "rank 0 ready\ntorch.distributed.DistBackendError: NCCL "
                    "communicator was aborted on rank 0\n")
    service.add_log("user_logs/std_log_process_1.txt", "rank 1 ready\n")
    ended = _engine().wait(service.job, timeout_s=30, poll_s=0)
    assert ended.state.value == "failed"
    assert ended.why == ["torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0"]
    assert ended.output == f"gpuval jobs logs {service.job} --on azureml"
