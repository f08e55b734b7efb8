"""The re-test window of `gpuval fleet retest` (Site.retest_window: Slurm lifts the held nodes' drains into a
reservation, since Slurm 22.05 starts no job on a drained node, a reservation's jobs included), made safe to stop:
a held node never stays in service unproven, however the re-test ends.

- Recorded: before the window opens, each held node's mark as read is written to `DIR/retest-windows/NAME.json`
  (DIR: the state directory, where the convictions' bundles are), and the file is held locked (flock) while the
  window is open: a live re-test's window is never taken for a stopped one.
- SIGTERM and SIGHUP are Ctrl-C while it is open (KeyboardInterrupt: its way out drains every node again, with its
  own reason, and deletes the reservation). A signal that comes while the window closes waits until it is closed.
- `recover`: a re-test killed outright (SIGKILL, a lost host) runs no way out; the next one first closes every
  window whose record no live re-test holds (Site.close_window: each node drained again with the reason recorded,
  unless drained meanwhile; the stale reservation deleted), then re-tests the nodes as held again. Only a reason of
  gpuval's own whole shape (node_state.reason_of) and a node of one name are taken from a record.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Iterator, Mapping

from gpuval.engines.nodes import WINDOW_PREFIX
from gpuval.engines.site import Site
from gpuval.errors import GpuvalError, UsageError
from gpuval.operate.node_state import check_node, reason_of
from gpuval.results.model import is_run_id

FOLDER = "retest-windows"
SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def window_name(run_id: str) -> str:
    """The name of a re-test's window (Slurm: its reservation): gpuval's prefix and the re-test's run id."""
    return WINDOW_PREFIX + run_id


@contextmanager
def recorded_window(site: Site, held: Mapping[str, str], partners: list[str], run_id: str,
                    directory: Path) -> Iterator[None]:
    """The Site's re-test window of `held` (node -> its mark as read) and `partners`, recorded under `directory`
    first and held locked while open, with SIGTERM and SIGHUP taken as Ctrl-C (see the module's docstring)."""
    name = window_name(run_id)
    folder = directory / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{name}.json", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held while the window is open: `recover` leaves a live one alone
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(dict(held)).encode())
        os.fsync(fd)
        with _Shield() as shield, site.retest_window(held, partners, name):
            try:
                yield
            finally:
                shield.closing = True
    finally:
        os.close(fd)
    (folder / f"{name}.json").unlink(missing_ok=True)  # closed on its way out: nothing to recover


def recover(site: Site, directory: Path) -> list[str]:
    """Close every window a stopped re-test left open under `directory` (those no live re-test holds locked); one
    line per node held again and per window that could not be closed (its record kept for the next re-test)."""
    folder = directory / FOLDER
    lines: list[str] = []
    for record in sorted(folder.glob(f"{WINDOW_PREFIX}*.json")) if folder.is_dir() else []:
        name = record.name.removesuffix(".json")
        if not is_run_id(name.removeprefix(WINDOW_PREFIX)):
            continue
        try:
            fd = os.open(record, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue  # gone meanwhile, or not a plain file: nobody's record
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live re-test's window
            try:
                lines += site.close_window(name, _marks(os.read(fd, 1 << 20)))
            except GpuvalError as exc:
                lines.append(f"re-test window {name}: {exc}")
                continue
            record.unlink(missing_ok=True)
        finally:
            os.close(fd)
    return lines


def _marks(raw: bytes) -> dict[str, str]:
    """node -> gpuval's drain reason, from a record: what is not one node name and gpuval's whole reason is left."""
    try:
        data = json.loads(raw)
    except ValueError:
        return {}  # cut short while written: no window was opened yet
    marks = {}
    for node, reason in data.items() if isinstance(data, dict) else []:
        try:
            check_node(node)
        except UsageError:
            continue
        if isinstance(reason, str) and reason_of(reason) is not None:
            marks[node] = reason
    return marks


@dataclass
class _Shield:
    """SIGTERM and SIGHUP as Ctrl-C while a window is open (in the main thread, where Python runs handlers); once
    it closes (`closing`), a signal waits until it is closed, then is Ctrl-C."""

    closing: bool = False
    pending: int = 0
    raised: bool = False

    def __enter__(self) -> "_Shield":
        self.old = {s: signal.signal(s, self._on) for s in SIGNALS} \
            if threading.current_thread() is threading.main_thread() else {}
        return self

    def _on(self, signum: int, _frame: FrameType | None) -> None:
        if self.closing or self.raised:
            self.pending = self.pending or signum
            return
        self.raised = True
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.old.items():
            signal.signal(signum, handler)
        if self.pending and not self.raised:
            raise KeyboardInterrupt(f"signal {self.pending}")
