"""Logs with their times: the kernel ring buffer (/dev/kmsg), `journalctl -k` where /dev/kmsg is closed to us,
syslog files, and the formats people save them in (dmesg -T, dmesg, journalctl, syslog, RFC 3339).

A line's time decides whether it falls in a check's window (`gpuval health --since`, the default being the last
time the xid check passed on this machine, else boot). Where a source gives no time, `LogLine.at` is None and the
line counts: a window can only leave out what it can date.

Formats (each seen in published logs; tests/data/kernel-log/SOURCE.md):
- /dev/kmsg records: `prio,seq,usec,flags;message`, usec since boot
- `journalctl -o short-unix`: `1700000000.123456 host kernel: message`
- `dmesg -T`: `[Wed Jul 31 23:14:18 2024] message` (local time); plain dmesg: `[6781741.548768] message`
- syslog and `journalctl` (short): `Aug 17 06:18:01 host proc[pid]: message`, the year being the one closest to now
- RFC 3339 anywhere near the start: `2026-04-22T21:30:51.870495804Z` (Talos `kern:` lines, journalctl short-iso),
  `2025-01-21T04:41:44,283302+00:00` (`dmesg --decode --time-format iso`)
"""

from __future__ import annotations

import codecs
import os
import re
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable

import platformdirs

from gpuval.node.machine import HardwareUnavailable, LogLine

_KMSG = re.compile(r"^\d+,\d+,(\d+),[^;]*;(.*)$")
_KMSG_PROPERTY = re.compile(r"^ [A-Z_]+=")
_UNIX = re.compile(r"^(\d{9,}(?:\.\d+)?)\s+\S+\s+(.*)$")
_CTIME = re.compile(r"^\[(\w{3} \w{3} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]\s?(.*)$")
_UPTIME = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
_SYSLOG = re.compile(r"^(\w{3}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (.*)$")
_ISO = re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})([.,]\d+)?(Z|[+-]\d{2}:?\d{2})?")
_READ_BYTES = 65536  # /dev/kmsg gives one record per read whatever the size; a saved file, this much at a time
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}


def _local(naive: datetime) -> datetime:
    """A naive time read from a log, taken as this machine's local time (what dmesg -T and syslog print)."""
    return naive.astimezone(timezone.utc)


def _syslog_time(match: re.Match[str], now: datetime) -> datetime | None:
    """Syslog names no year: the year that puts the line closest to now (as AzNHC's link-flap check does)."""
    month = _MONTHS.get(match.group(1))
    if month is None:
        return None
    day, hour, minute, second = (int(match.group(i)) for i in range(2, 6))
    candidates = []
    for year in (now.year, now.year - 1):
        try:
            candidates.append(_local(datetime(year, month, day, hour, minute, second)))
        except ValueError:  # Feb 29 of a year without one
            continue
    return min(candidates, key=lambda t: abs(t - now)) if candidates else None


def _iso(match: re.Match[str]) -> datetime | None:
    # nanoseconds (Talos) are more than datetime holds; `dmesg --time-format iso` writes a comma before them
    fraction = (match.group(2) or "").replace(",", ".")[:7]
    zone = match.group(3) or ""
    try:
        when = datetime.fromisoformat(match.group(1).replace(" ", "T") + fraction + zone.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else _local(when)


def parse_line(raw: str, boot: datetime | None = None, now: datetime | None = None) -> LogLine:
    """One saved log line with its time, whatever format carries it (see the module's list); the text is kept
    as written, prefix included."""
    now = now or datetime.now(timezone.utc)
    text = raw.rstrip("\n")
    if m := _KMSG.match(text):
        return LogLine(m.group(2), boot + timedelta(microseconds=int(m.group(1))) if boot else None)
    if m := _UNIX.match(text):
        return LogLine(m.group(2), datetime.fromtimestamp(float(m.group(1)), timezone.utc))
    if m := _CTIME.match(text):
        try:
            return LogLine(text, _local(datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")))
        except ValueError:
            return LogLine(text)
    if m := _UPTIME.match(text):
        return LogLine(text, boot + timedelta(seconds=float(m.group(1))) if boot else None)
    if m := _SYSLOG.match(text):
        return LogLine(text, _syslog_time(m, now))
    if (m := _ISO.search(text[:80])) is not None:
        return LogLine(text, _iso(m))
    return LogLine(text)


SINCE_BOOT = datetime.min.replace(tzinfo=timezone.utc)  # `--since boot`: the window starts at this boot
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`--since`: "boot", a span back from now ("30m", "24h", "7d"), or a time ("2026-11-23T10:00", naive = UTC);
    ValueError with what is accepted otherwise."""
    value = text.strip()
    if value.lower() == "boot":
        return SINCE_BOOT
    if m := _RELATIVE.match(value.lower()):
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
        return (now or datetime.now(timezone.utc)) - timedelta(**{unit: float(m.group(1))})
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since {text!r}: give 'boot', a span such as 24h, 30m or 7d, or a time such as "
                         "2026-11-23T10:00 (UTC unless it names its zone)") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def in_window(lines: Iterable[LogLine], since: datetime | None) -> list[LogLine]:
    """The lines at or after `since`; lines without a time are kept (they cannot be placed outside it)."""
    return [line for line in lines if since is None or line.at is None or line.at >= since]


def read_kmsg(path: Path, boot: datetime | None) -> list[LogLine]:
    """The kernel ring buffer, read without blocking from /dev/kmsg (root, or kernel.dmesg_restrict=0), one record
    per read; a plain file (a test's, or a saved dmesg) comes in pieces, and a line a piece cuts is joined to its
    end. Lines end at a newline only."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise HardwareUnavailable(f"{path}: {exc.strerror}") from None
    lines: list[LogLine] = []
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character a piece cuts stays whole
    pending = ""
    try:
        while True:
            try:
                chunk = os.read(fd, _READ_BYTES)
            except BlockingIOError:  # end of the ring buffer
                break
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: the oldest record was overwritten while reading; go on
                    continue
                raise HardwareUnavailable(f"{path}: {exc.strerror}") from None
            if not chunk:
                break
            *complete, pending = (pending + decoder.decode(chunk)).split("\n")
            _add_records(lines, complete, boot)
    finally:
        os.close(fd)
    _add_records(lines, [pending + decoder.decode(b"", final=True)], boot)
    return lines


def _add_records(lines: list[LogLine], raws: list[str], boot: datetime | None) -> None:
    for raw in raws:
        # a record's dictionary follows it on lines starting with a space (" SUBSYSTEM=pci"): not messages
        if not raw or (raw.startswith(" ") and lines and _KMSG_PROPERTY.match(raw)):
            continue
        lines.append(parse_line(raw, boot))


def _journalctl(args: list[str], timeout_s: float) -> str:
    exe = shutil.which("journalctl")
    if exe is None:
        raise HardwareUnavailable("journalctl is not installed")
    try:
        done = subprocess.run([exe, "--no-pager", "-o", "short-unix", *args], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise HardwareUnavailable(f"journalctl did not answer in {timeout_s:g} s") from None
    err = done.stderr.strip()
    # without a journal (containers, systems without systemd) journalctl says so on stderr and exits 0
    if done.returncode != 0 or "No journal files were found" in err:
        raise HardwareUnavailable(f"journalctl: {err.splitlines()[0] if err else f'exit code {done.returncode}'}")
    return done.stdout


def read_journal(since: datetime | None, kernel: bool = True, grep: str | None = None,
                 timeout_s: float = 30) -> list[LogLine]:
    """The journal since `since` (the kernel's messages of this boot with `kernel`), for users in the adm or
    systemd-journal group where /dev/kmsg is closed (kernel.dmesg_restrict=1)."""
    args = ["-k"] if kernel else []
    if since is not None:
        args.append(f"--since=@{since.timestamp():.0f}")
    if grep:
        args += ["-g", grep]
    text = _journalctl(args, timeout_s)
    return [parse_line(raw) for raw in text.splitlines() if raw and not raw.startswith("-- ")]


def read_files(paths: Iterable[Path], since: datetime, now: datetime | None = None,
               contains: str = "") -> tuple[list[LogLine], list[str]]:
    """Lines containing `contains` (case-insensitive) in the readable files of `paths`, since `since`, and the
    files read."""
    wanted = contains.lower()
    lines, read = [], []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                found = [parse_line(raw, now=now) for raw in handle if wanted in raw.lower()]
        except OSError:
            continue
        read.append(str(path))
        lines.extend(in_window(found, since))
    return lines, read


def boot_from_proc(root: Path) -> datetime:
    """Boot time from /proc/stat's btime."""
    try:
        text = (root / "proc/stat").read_text()
    except OSError as exc:
        raise HardwareUnavailable(f"cannot read {root / 'proc/stat'}: {exc.strerror}") from None
    match = re.search(r"^btime (\d+)$", text, re.M)
    if not match:
        raise HardwareUnavailable(f"{root / 'proc/stat'} names no boot time")
    return datetime.fromtimestamp(int(match.group(1)), timezone.utc)


class PassMark:
    """When the xid check last passed on this machine: the default start of its window (`--since`). A file in
    gpuval's data directory (GPUVAL_XID_MARK names another); a mark older than the boot is ignored by the check."""

    def __init__(self, path: Path | None = None) -> None:
        env = os.environ.get("GPUVAL_XID_MARK")
        self.path = path or (Path(env) if env else platformdirs.user_data_path("gpuval") / "xid-pass")

    def read(self) -> datetime | None:
        """The time of the last pass, None when there was none (or the file is unreadable)."""
        try:
            when = datetime.fromisoformat(self.path.read_text().strip())
        except (OSError, ValueError):
            return None
        return when if when.tzinfo else when.replace(tzinfo=timezone.utc)

    def write(self, when: datetime) -> str | None:
        """Record a pass; the reason it could not be written, else None (a read-only home is no failure)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(when.astimezone(timezone.utc).isoformat() + "\n")
        except OSError as exc:
            return f"could not record the pass in {self.path}: {exc.strerror}"
        return None
