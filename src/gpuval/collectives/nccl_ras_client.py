"""A client of NCCL's RAS service (NCCL 2.24 and later): the live state of a running job's NCCL processes and
communicators, asked on the node's RAS port.

Every NCCL process of a job runs a RAS thread; one per node listens for clients on NCCL_RAS_ADDR (default
localhost:28028). The protocol is text lines (NVIDIA/nccl src/ras/client.cc and client_support.cc; the docs'
troubleshooting/ras.html):
    -> CLIENT PROTOCOL 2          <- SERVER PROTOCOL 2
    -> TIMEOUT <seconds>          <- OK               (how long RAS waits for other processes; optional)
    -> SET FORMAT json            <- OK               (2.28.7 and later; earlier ones answer "ERROR: Unknown command")
    -> STATUS | VERBOSE STATUS    <- the status, then the server closes the connection
The answer is read by gpuval.collectives.nccl_ras.
"""

from __future__ import annotations

import socket
import time
from typing import Literal

from gpuval.collectives.nccl_ras import RasStatus, RasUnavailable, read_json_status, read_text_status

DEFAULT_PORT = 28028
PROTOCOL = 2
MAX_ANSWER = 16 << 20  # bytes of a status kept: a very large job's verbose text stays far below it


def ras_address(value: str | None) -> tuple[str, int]:
    """NCCL_RAS_ADDR ("host:port", "[v6]:port", "host") as (host, port); unset: localhost:28028."""
    text = (value or "").strip()
    if not text:
        return "localhost", DEFAULT_PORT
    host, port = text, ""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, port = text.split(":")
    if port and not port.isdigit():
        raise RasUnavailable(f"NCCL_RAS_ADDR={value!r}: the port is not a number")
    return host or "localhost", int(port) if port else DEFAULT_PORT


class _Conversation:
    """One connection to the RAS port: whole lines out, whole lines in, under one deadline."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.where = f"{host}:{port}"
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s
        self.buffer = b""
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except socket.timeout:
            raise RasUnavailable(f"NCCL RAS at {self.where} did not accept a connection within {timeout_s:g} s") \
                from None
        except OSError as exc:
            raise RasUnavailable(f"no NCCL RAS service at {self.where} ({exc.strerror or exc}): is a job's NCCL "
                                 "2.24+ process on this node, with RAS enabled (NCCL_RAS_ENABLE) and this "
                                 "address (NCCL_RAS_ADDR)?") from None

    def _recv(self) -> bytes:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise RasUnavailable(f"NCCL RAS at {self.where} did not answer within {self.timeout_s:g} s")
        self.sock.settimeout(left)
        try:
            return self.sock.recv(65536)
        except socket.timeout:
            raise RasUnavailable(f"NCCL RAS at {self.where} did not answer within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise RasUnavailable(f"NCCL RAS at {self.where} broke the connection: {exc.strerror or exc}") from None

    def send(self, command: str) -> None:
        """Send one command line."""
        try:
            self.sock.sendall(command.encode() + b"\n")
        except OSError as exc:
            raise RasUnavailable(f"NCCL RAS at {self.where} closed the connection: {exc.strerror or exc}") from None

    def ask(self, command: str) -> str:
        """Send one command line and return the one line answered (without its newline)."""
        self.send(command)
        while b"\n" not in self.buffer:
            chunk = self._recv()
            if not chunk:
                raise RasUnavailable(f"NCCL RAS at {self.where} closed the connection after {command!r}")
            self.buffer += chunk
            if len(self.buffer) > 4096:
                raise RasUnavailable(f"{self.where} answered {command!r} with no line: not the NCCL RAS protocol")
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", "replace").rstrip("\r")

    def rest(self, command: str) -> str:
        """Send `command` and return everything until the server closes the connection."""
        self.send(command)
        data = bytearray(self.buffer)
        while chunk := self._recv():
            data += chunk
            if len(data) > MAX_ANSWER:
                raise RasUnavailable(f"NCCL RAS at {self.where} sent more than {MAX_ANSWER >> 20} MiB")
        return data.decode("utf-8", "replace")

    def close(self) -> None:
        self.sock.close()


def query_ras(host: str = "localhost", port: int = DEFAULT_PORT, fmt: Literal["auto", "json", "text"] = "auto",
              timeout_s: float = 20.0, verbose: bool = False, ras_timeout_s: int | None = None) -> RasStatus:
    """Ask the RAS service at host:port for the job's status: JSON where NCCL gives it (2.28.7+; `fmt="auto"` falls
    back to text on an older NCCL), else text. `timeout_s` bounds the whole conversation (RAS itself waits up to 5 s
    per unresponsive process, or `ras_timeout_s`); RasUnavailable when it cannot be had."""
    talk = _Conversation(host, port, timeout_s)
    try:
        hello = talk.ask(f"CLIENT PROTOCOL {PROTOCOL}")
        if not hello.upper().startswith("SERVER PROTOCOL "):
            raise RasUnavailable(f"{talk.where} is not NCCL RAS: it answered {hello[:120]!r} to the handshake")
        if ras_timeout_s is not None:
            _ok(talk, f"TIMEOUT {int(ras_timeout_s)}")
        chosen = "text"
        if fmt != "text":
            answer = talk.ask("SET FORMAT json")
            if answer.upper() == "OK":
                chosen = "json"
            elif fmt == "json":
                raise RasUnavailable(f"NCCL RAS at {talk.where} has no JSON status (NCCL before 2.28.7): "
                                     f"{answer[:120]!r}")
        text = talk.rest("VERBOSE STATUS" if verbose else "STATUS")
    finally:
        talk.close()
    status = read_json_status(text) if chosen == "json" else read_text_status(text)
    status.address = talk.where
    return status


def _ok(talk: _Conversation, command: str) -> None:
    answer = talk.ask(command)
    if answer.upper() != "OK":
        raise RasUnavailable(f"NCCL RAS at {talk.where} refused {command!r}: {answer[:120]!r}")
