"""A stand-in for NCCL's RAS listener on 127.0.0.1 (no NCCL job can run here): it speaks RAS's client protocol as
NVIDIA/nccl src/ras/client_support.cc answers it and replays a recorded status (tests/data/nccl-ras/), or
misbehaves on purpose: slow, silent, or answering something else."""

from __future__ import annotations

import socketserver
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Replay:
    """What the stand-in answers: the text status, the JSON status (None: an NCCL before 2.28.7, which refuses
    SET FORMAT), the handshake line, a delay before the status, and a delay before the handshake."""

    text: str = ""
    json: str | None = None
    hello: str = "SERVER PROTOCOL 2"
    status_delay_s: float = 0.0
    hello_delay_s: float = 0.0
    commands: list[str] = field(default_factory=list)


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        replay: Replay = self.server.replay  # type: ignore[attr-defined]
        fmt = "text"
        for raw in self.rfile:
            cmd = raw.decode().strip()
            replay.commands.append(cmd)
            upper = cmd.upper()
            if upper.startswith("CLIENT PROTOCOL "):
                time.sleep(replay.hello_delay_s)
                self._send(replay.hello + "\n")
            elif upper.startswith("TIMEOUT "):
                self._send("OK\n" if cmd[8:].isdigit() else f"ERROR: Invalid timeout value {cmd[8:]}\n")
            elif upper.startswith("SET FORMAT ") and replay.json is not None:
                fmt = cmd[11:].lower()
                self._send("OK\n" if fmt in ("text", "json") else f"ERROR: Invalid format {cmd[11:]}\n")
            elif upper in ("STATUS", "VERBOSE STATUS"):
                time.sleep(replay.status_delay_s)
                self._send(replay.json if fmt == "json" and replay.json is not None else replay.text)
                return  # RAS closes the connection once the status is sent
            else:
                self._send(f"ERROR: Unknown command {cmd}\n")

    def _send(self, text: str) -> None:
        try:
            self.wfile.write(text.encode())
            self.wfile.flush()
        except OSError:
            pass  # the client gave up (a timeout test)


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class RasStandIn:
    """`with RasStandIn(Replay(...)) as port:` a listener on 127.0.0.1:port until the block ends."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.replay = self.replay  # type: ignore[attr-defined]

    def __enter__(self) -> int:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.server.server_address[1]

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
