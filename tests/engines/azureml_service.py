"""A stand-in for the Azure ML service that answers the real SDK offline, with the service's own response shapes.

Every azure-core client (MLClient's ARM and run-history clients, its plain request pipeline, and the
azure-storage-blob client the SDK makes for a datastore) sends through `RequestsTransport`; the fixture below
replaces its `send` with `FakeAzureML.send`, so no request leaves the process. Bodies come from
tests/engines/data/azureml/ (where each file says which recording or document it copies); the fake fills in the job's
name and status and keeps the job's state (status sequence, cancel) and its blobs (the job's log files).

A request the fake does not know is answered 404 and recorded in `unknown`; tests assert it stays empty, so a
new SDK version that asks something else fails loudly instead of silently reaching for the network. A socket guard
refuses any connection that is not to 127.0.0.1 besides.
"""

from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import requests
from azure.core.rest._requests_basic import RestRequestsTransportResponse

DATA = Path(__file__).parent / "data" / "azureml"
SUBSCRIPTION, GROUP, WORKSPACE = "00000000-0000-0000-0000-000000000", "00000", "00000"
ARM = (f"https://management.azure.com/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/"
       f"Microsoft.MachineLearningServices/workspaces/{WORKSPACE}")
HISTORY = (f"https://eastus2.api.azureml.ms/history/v1.0/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/"
           f"providers/Microsoft.MachineLearningServices/workspaces/{WORKSPACE}")
BLOB = "https://sano4nluz7tny6e.blob.core.windows.net"


def _template(file: str, **values: str) -> str:
    text = (DATA / file).read_text()
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


@dataclass
class FakeAzureML:
    """One workspace with one job: its status over time (one entry per look, the last repeats) and its blobs."""

    job: str = "gpuval-nccl-1a2b3c4d"
    statuses: list[str] = field(default_factory=lambda: ["Completed"])
    blobs: dict[str, bytes] = field(default_factory=dict)  # name in the artifact store container -> content
    requests: list[tuple[str, str]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    cancelled: bool = False

    def add_log(self, path: str, text: str) -> None:
        """A file of the job's artifacts (e.g. user_logs/std_log_process_0.txt)."""
        self.blobs[f"ExperimentRun/dcid.{self.job}/{path}"] = text.encode()

    def _status(self, source: str) -> str:
        """The job's status now: one step of `statuses` per run-history look (the ARM view follows it)."""
        if self.cancelled:
            return "Canceled"
        if source == "details" and len(self.statuses) > 1:
            return self.statuses.pop(0)
        return self.statuses[0]

    def send(self, request: Any, **kwargs: Any) -> Any:
        """The transport's send: route, answer, record."""
        url, method = request.url, request.method
        self.requests.append((method, url))
        status, body, headers = self._route(method, url, request)
        if status == 404 and body is None:
            self.unknown.append(f"{method} {url}")
        raw = requests.Response()
        raw.status_code = status
        raw.headers.update(headers)
        data = body if isinstance(body, bytes) else (body or "").encode()
        raw.raw = _Body(data)
        raw.url = url
        response = RestRequestsTransportResponse(request=request, internal_response=raw)
        if not kwargs.get("stream"):
            response.read()
        return response

    def _route(self, method: str, url: str, request: Any) -> tuple[int, Any, dict[str, str]]:
        path = url.split("?")[0]
        json_type = {"Content-Type": "application/json; charset=utf-8"}
        job = f"{ARM}/jobs/{self.job}"
        if method == "GET" and path == job:
            return 200, _template("job.json", name=self.job, status=self._status("job")), json_type
        if method == "POST" and path == f"{job}/cancel":
            self.cancelled = True
            # As the service answers a long-running action (recording: the DELETE of a batch endpoint; REST
            # reference, Jobs - Cancel: 202 with a Location to poll).
            location = (f"https://management.azure.com/subscriptions/{SUBSCRIPTION}/providers/"
                        "Microsoft.MachineLearningServices/locations/eastus2/mfeOperationResults/"
                        f"jc:ee8c8c7b-8359-4874-b140-2a13f80fdccd:{self.job}?api-version=2023-04-01-preview")
            return 202, "", {"Location": location, "Retry-After": "0", "Content-Length": "0"}
        if method == "GET" and path.startswith(f"{ARM}/jobs/"):
            # Another job: ARM's error contract ({"error": {"code", "message"}}), as for any missing resource.
            error = {"error": {"code": "UserError", "message": f"Job {path.rsplit('/', 1)[1]} not found."}}
            return 404, json.dumps(error), json_type
        if method == "GET" and "/mfeOperationResults/" in path:
            return 200, "", {"Content-Length": "0"}
        if method == "GET" and path == ARM:
            return 200, _template("workspace.json"), json_type
        if method == "GET" and path == "https://eastus2.api.azureml.ms/discovery":
            return 200, _template("discovery.json"), json_type
        if method == "POST" and path == f"{HISTORY}/rundata":
            return 200, _template("rundata.json", name=self.job, status=self._status("job")), json_type
        if method == "GET" and re.fullmatch(rf"{re.escape(HISTORY)}/(experimentids/[^/]+/)?runs/{self.job}/details",
                                            path):
            return 200, _template("run-details.json", name=self.job, status=self._status("details")), json_type
        if method == "GET" and path == f"{ARM}/datastores" and "isDefault=true" in url:
            body = json.loads(_template("datastore-workspaceblobstore.json"))
            return 200, json.dumps({"value": [body]}), json_type
        found = re.fullmatch(rf"{re.escape(ARM)}/datastores/(\w+)(/listSecrets)?", path)
        if found:
            name = "list-secrets.json" if found.group(2) else f"datastore-{found.group(1)}.json"
            if (DATA / name).exists():
                return 200, _template(name), json_type
        if path.startswith(f"{BLOB}/azureml"):
            return self._blob(method, url, request.headers)
        return 404, None, json_type

    def _blob(self, method: str, url: str, sent: Any) -> tuple[int, Any, dict[str, str]]:
        """Azure Blob Storage: List Blobs (XML), Get Blob (ranges, as the recording's 206), a HEAD for existence."""
        parsed = urlparse(url)
        query = parse_qs(parsed.query)
        parts = parsed.path.lstrip("/").split("/", 1)
        container, name = parts[0], unquote(parts[1]) if len(parts) > 1 else ""
        xml = {"Content-Type": "application/xml", "x-ms-version": "2021-08-06"}
        if query.get("comp") == ["list"]:
            prefix = query.get("prefix", [""])[0]
            items = "".join(_template("blob-item.xml", name=n, length=str(len(b)))
                            for n, b in sorted(self.blobs.items()) if n.startswith(prefix))
            return 200, _template("blob-list.xml", container=container, prefix=prefix, blobs=items), xml
        if name not in self.blobs:
            return 404, "", {"x-ms-error-code": "BlobNotFound", "x-ms-version": "2021-08-06"}
        data = self.blobs[name]
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(data)),
                   "ETag": '"0x8DABEAC95A6E769"', "Last-Modified": "Fri, 04 Nov 2022 21:36:08 GMT",
                   "x-ms-blob-type": "BlockBlob", "x-ms-version": "2021-08-06", "Accept-Ranges": "bytes",
                   "x-ms-creation-time": "Fri, 04 Nov 2022 21:36:08 GMT", "x-ms-lease-state": "available",
                   "x-ms-lease-status": "unlocked", "x-ms-server-encrypted": "true"}
        if method == "HEAD":
            return 200, b"", headers
        if "x-ms-range" in sent:
            return 206, data, {**headers, "Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"}
        return 200, data, headers


class _Body:
    """The raw body of a requests.Response: read() and stream() as urllib3's response offers them."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self, amt: int | None = None, decode_content: bool = True) -> bytes:
        data, self._data = (self._data, b"") if amt is None else (self._data[:amt], self._data[amt:])
        return data

    def stream(self, amt: int = 65536, decode_content: bool = True):
        while self._data:
            yield self.read(amt)


def loopback_only(monkeypatch: Any) -> None:
    """Any socket connection to an address other than 127.0.0.1 / ::1 fails the test (before a packet leaves)."""
    original = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"a test tried to connect to {address}")
        return original(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", _local_names_only(socket.getaddrinfo))


def _local_names_only(resolve: Any) -> Any:
    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "::1", "localhost", None):
            raise AssertionError(f"a test tried to resolve {host}")
        return resolve(host, *args, **kwargs)

    return getaddrinfo
