"""Each GPU's clock event reason counters as the last health check on this machine read them, so the check judges
what accumulated between two runs: the counters count from the driver's load, and a hardware slowdown of months ago
would otherwise warn on every run until the driver reloads. A JSON file beside the xid check's pass mark (this
machine only, never a recording's), keyed by GPU UUID."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from gpuval.node.gpu_state import ClockEventCounters
from gpuval.node.kernel_log import PassMark

FILE = "clock-counters.json"


@dataclass(frozen=True)
class LastCounters:
    """The counters of one GPU at the last run, and when that was."""

    counters: ClockEventCounters
    at: datetime


class CounterMark:
    """Where the last run's counters are kept."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def beside(cls, mark: PassMark) -> "CounterMark":
        """The file beside the xid pass mark (GPUVAL_XID_MARK moves both)."""
        return cls(mark.path.parent / FILE)

    def read(self) -> dict[str, LastCounters]:
        """GPU UUID -> its counters at the last run; empty when there was none (or the file is unreadable)."""
        try:
            data = json.loads(self.path.read_text())
            return {uuid: LastCounters(ClockEventCounters(**v["counters"]), datetime.fromisoformat(v["at"]))
                    for uuid, v in data.items()}
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def write(self, counters: dict[str, ClockEventCounters], at: datetime) -> str | None:
        """Keep these counters (GPU UUID -> counters); the reason they could not be kept, else None."""
        data = {uuid: {"counters": asdict(c), "at": at.astimezone(timezone.utc).isoformat()}
                for uuid, c in counters.items()}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(data, indent=1) + "\n")
        except OSError as exc:
            return f"could not keep the clock counters in {self.path}: {exc.strerror}"
        return None
