"""THE reader of YAML that comes from a user or a node: baseline and profile files, recordings (and the evidence
bundles that replay as recordings), `--opt KEY={...}` values.

Such text cannot stall or crash a command. A YAML alias (*name) is refused: nine levels of ten aliases are a few
hundred bytes that expand into 10^9 values wherever they are walked. Nesting is bounded (the parser's constructor
recurses once a level: 100,000 `[` are a RecursionError), and so is the size. Each refusal, like text that is not
YAML, is a one-line UsageError (exit 2). The files gpuval ships are read with the plain safe loader (they are ours,
and read by every command that judges).

It lives in node/ because a node's recording is its first reader; the foundations (node, collectives, results)
import nothing but errors, and every layer above reads user YAML through it."""

from __future__ import annotations

from typing import Any

import yaml

from gpuval.errors import UsageError

MAX_BYTES = 16 * 1024 * 1024  # a recording with its evidence is some kilobytes; a baseline file fewer
MAX_DEPTH = 64  # gpuval's deepest document (a recording's GPU fields) is under ten levels
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML has it: ten times the speed


def _refuse_shapes(text: str, where: str) -> None:
    """Walk the parser's events (flat: libyaml keeps its own stack) before anything is built from them."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise UsageError(f"{where}: YAML aliases (*name) are not accepted: write each value out")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise UsageError(f"{where}: YAML nested more than {MAX_DEPTH} levels deep is not accepted")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def read_yaml(text: str, where: str) -> Any:
    """The value of `text`, a YAML document a user or a node wrote; `where` names it in the one-line error."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise UsageError(f"{where}: {size} bytes of YAML, more than the {MAX_BYTES} gpuval reads")
    try:
        _refuse_shapes(text, where)
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        raise UsageError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
