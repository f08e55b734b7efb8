"""Log text as users paste and collect it: what launchers put in front of each line, and limits that keep every
reader linear in the size of its input.

Launchers prefix each line of a rank's output: Open MPI `--tag-output` (`[1,0]<stdout>:`, which Kubernetes MPIJob
logs carry), `srun -l` (`0: `, ` 3: `), MPICH `-prepend-rank` (`[0] `), SkyPilot (`(head, rank=0, pid=3808) `),
`kubectl logs --timestamps` (`2024-05-30T12:26:47.123Z `) and timestamped launchers (`[2025-12-28 16:04:25] `).
Every pattern here is anchored or starts only at a token boundary, so no line costs more than linear time.
"""

from __future__ import annotations

import re

MAX_LINE = 64 * 1024  # characters of one line a reader looks at; the rest of a longer line is never a log field

_PREFIX = re.compile(
    r"(?:\([\w-]{1,64}, rank=\d+[^()\n]{0,200}\) "  # SkyPilot: (head, rank=0, pid=3808)
    r"|\[\d{1,6},\d{1,6}\]<std(?:out|err)>: ?"  # Open MPI --tag-output
    r"|\[\d{1,6}\] ?"  # MPICH -prepend-rank
    r"|[ \t]*\d{1,6}: "  # srun -l
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? "  # RFC 3339 (kubectl --timestamps)
    r"|\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\] ?"  # [2025-12-28 16:04:25]
    r")+"
)
_INLINE_TAG = re.compile(r"\[\d{1,6}(?:,\d{1,6})?\](?:<std(?:out|err)>:)?")  # a tag that recurs inside a line


def strip_prefix(line: str) -> str:
    """The line as the program wrote it: launcher prefixes (possibly stacked, SkyPilot's before Open MPI's) removed."""
    if line[:1] in "[(0123456789 \t":
        found = _PREFIX.match(line)
        if found:
            return line[found.end():]
    return line


def strip_inline_tags(line: str) -> str:
    """A line with the launcher tags that recur inside it (stdout flushed in pieces, each piece tagged) removed."""
    return _INLINE_TAG.sub(" ", line) if "[" in line else line


def clip(line: str) -> str:
    """At most MAX_LINE characters of a line."""
    return line if len(line) <= MAX_LINE else line[:MAX_LINE]
