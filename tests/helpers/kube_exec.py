"""A stand-in for what kmock cannot serve: `pods/exec` (kmock 0.8 speaks no WebSocket). It sits in front of kmock
on 127.0.0.1: a request to upgrade `.../pods/NAME/exec` to a WebSocket is answered here as an API server and its
kubelet answer one (RFC 6455, Kubernetes' channel protocol v4: channel 1 standard output, 2 standard error, 3 the
status), running the command on this machine the way the pod's container would run it; every other request is
relayed to kmock as it came. The official client's own `stream` code talks to it, so what gpuval sends (the
command, the container) and how it reads the answer are real; only the container is this machine.

`ExecStandIn(kmock_url, env=..., run=...)`: `env` is the container's environment for the commands it runs, `run`
maps the command as sent to what runs here (`gpuval ...` -> this interpreter's `python -m gpuval ...`). `.url` is
the address to give the client; `.execs` what each exec asked (path, pod, container, command).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import socketserver
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qs, urlsplit

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def as_here(argv: list[str]) -> list[str]:
    """A container's `gpuval ...` as this checkout's gpuval."""
    return [sys.executable, "-m", "gpuval", *argv[1:]] if argv[:1] == ["gpuval"] else argv


@dataclass
class Exec:
    path: str
    pod: str
    container: str
    command: list[str]


@dataclass
class ExecStandIn:
    upstream: str
    env: dict[str, str] = field(default_factory=dict)
    run: Callable[[list[str]], list[str]] = as_here
    execs: list[Exec] = field(default_factory=list)

    def __enter__(self) -> "ExecStandIn":
        target = urlsplit(self.upstream)
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._handle(self.request, (target.hostname or "127.0.0.1", target.port or 80))

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, conn: socket.socket, upstream: tuple[str, int]) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                return
            head += chunk
        first, _, rest = head.partition(b"\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.decode().partition(":") for line in rest.split(b"\r\n\r\n")[0].split(b"\r\n"))}
        path = first.decode().split(" ")[1]
        if headers.get("upgrade", "").lower() == "websocket" and "/exec" in urlsplit(path).path:
            self._exec(conn, path, headers)
        else:
            self._relay(conn, upstream, head)

    def _relay(self, conn: socket.socket, upstream: tuple[str, int], head: bytes) -> None:
        with socket.create_connection(upstream) as up:
            up.sendall(head)

            def pump(src: socket.socket, dst: socket.socket) -> None:
                try:
                    while data := src.recv(65536):
                        dst.sendall(data)
                except OSError:
                    pass
                finally:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass

            back = threading.Thread(target=pump, args=(up, conn), daemon=True)
            back.start()
            pump(conn, up)
            back.join(timeout=60)

    def _exec(self, conn: socket.socket, path: str, headers: dict[str, str]) -> None:
        query = parse_qs(urlsplit(path).query)
        parts = urlsplit(path).path.split("/")
        done = Exec(path, parts[parts.index("pods") + 1], query.get("container", [""])[0], query.get("command", []))
        self.execs.append(done)
        accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + _GUID).encode()).digest()).decode()
        conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n").encode())
        proc = subprocess.run(self.run(done.command), capture_output=True, env={**os.environ, **self.env},
                              timeout=300)
        status = {"metadata": {}, "status": "Success"} if proc.returncode == 0 else {
            "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(proc.returncode)}]}}
        try:
            for channel, data in ((1, proc.stdout), (2, proc.stderr)):
                for at in range(0, len(data), 16384):
                    _frame(conn, bytes([channel]) + data[at:at + 16384])
            _frame(conn, b"\x03" + json.dumps(status).encode())
            _frame(conn, struct.pack("!H", 1000), opcode=0x8)
        except OSError:
            pass  # the client closed the exec before its end (gpuval cuts a flood of output)


def _frame(conn: socket.socket, payload: bytes, opcode: int = 0x2) -> None:
    """One unmasked WebSocket frame from the server."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    conn.sendall(head + payload)
