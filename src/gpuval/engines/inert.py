"""Values that reach a shell script or a YAML document stay inert: no control characters.

shlex.quote keeps a newline inside its quotes, which is safe on a shell line but not on a `#SBATCH` line: sbatch
reads directives line by line, and bash runs the next line as a command. YAML escapes a
newline, but a job name, namespace or path with one is never what the user meant. So every string that goes into a
rendered job is refused here when it holds a C0 control character (tab included) or DEL, before anything renders.
"""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_inert(value: str, what: str) -> str:
    """`value` unchanged, or a ValueError naming `what` and the first control character (as \\n, \\x00...)."""
    found = _CONTROL.search(value)
    if found:
        raise ValueError(f"{what}: control character {found.group()!r} at position {found.start()} "
                         "(values reach shell scripts and YAML: use plain text)")
    return value


def check_inert_tree(value: Any, what: str) -> Any:
    """check_inert on every string inside dicts and lists (keys too); other values pass unchanged."""
    if isinstance(value, str):
        return check_inert(value, what)
    if isinstance(value, dict):
        for key, item in value.items():
            check_inert_tree(key, f"{what} key")
            check_inert_tree(item, f"{what}.{key}")
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_inert_tree(item, what)
    return value
