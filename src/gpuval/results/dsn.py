"""Database URLs and the secrets in them: what `--db` and GPUVAL_DB may be, and what is never printed.

`--db` takes a SQLite file's path, a URL (`sqlite:///PATH`, `postgresql://USER:PASSWORD@HOST:PORT/DB`), or a libpq
keyword string (`host=db port=5432 user=gv password=... dbname=gpuval`, as psql takes it), which is PostgreSQL,
never a file name. Whatever is shown of one (`redact_url`) has its password as ***.

A job's environment has one rule for what is secret (`hide_secrets`): a dry run renders the job from the environment
with every secret as *** before any shell or YAML quoting, so no quoting or escape of a secret can show it; and the
Kubernetes engine keeps exactly those values (`holds_secret`) out of the pod spec."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping
from urllib.parse import urlencode

from gpuval.errors import UsageError

DISABLED = ("none", "off", "")  # GPUVAL_DB / --db values that turn the results store off
_QUERY_SECRET = re.compile(r"((?:^|[?&])(?:password|passwd|sslpassword)=)[^&]*", re.IGNORECASE)
# libpq's connection keywords (PostgreSQL 16, "Parameter Key Words"): a string of them is a connection, not a path
LIBPQ_KEYWORDS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth", "channel_binding",
    "connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name", "keepalives",
    "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication", "gssencmode",
    "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode", "sslrootcert",
    "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version",
    "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
})
_KEYWORD_START = re.compile(r"\s*([A-Za-z_]+)\s*=")
_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)*)")
# A variable whose value is a credential or holds one (the results database URL carries its password).
SECRET_NAME = re.compile(r"(?:^|_)(?:SECRET|PASSWORD|PASSWD|PASS|TOKEN|KEY|CREDENTIALS?|AUTH)(?:_|$)|^GPUVAL_DB$",
                         re.IGNORECASE)
# The password of a URL's user info ends at its last "@" (`u:p@ss@host`, as normalize_url reads it): group 2.
_USERINFO_PASSWORD = re.compile(r"(://[^/?#@\s:]*:)([^/?#\s]*)@")
_LIBPQ_PASSWORD = re.compile(r"((?:^|\s)(?:password|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_EQUALS_PASSWORD = re.compile(r"([?&](?:password|passwd|sslpassword)=)([^&\s]+)", re.IGNORECASE)
HIDDEN = "***"


def is_libpq(text: str) -> bool:
    """Whether `text` is a libpq keyword string (`host=... dbname=...`): it starts with a libpq keyword and '='."""
    match = _KEYWORD_START.match(text)
    return bool(match) and match.group(1).lower() in LIBPQ_KEYWORDS


def libpq_url(text: str) -> str:
    """A libpq keyword string as the SQLAlchemy URL of the same connection (every keyword a query parameter, which
    the psycopg driver hands to libpq as it is); a word libpq does not know is a one-line error."""
    pairs: list[tuple[str, str]] = []
    at = 0
    while at < len(text.rstrip()):
        match = _PAIR.match(text, at)
        if not match or match.end() == at:
            raise UsageError(f"--db: {text[at:at + 20].strip()!r}... is no libpq KEY=VALUE pair")
        key, value = match.group(1).lower(), match.group(2)
        if key not in LIBPQ_KEYWORDS:
            raise UsageError(f"--db: {key!r} is no libpq connection keyword (give a postgresql:// URL or a file path)")
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        pairs.append((key, value))
        at = match.end()
    return "postgresql+psycopg:///?" + urlencode(pairs)


def normalize_url(url: str) -> str:
    """A plain path means a SQLite file; a libpq keyword string or `postgresql://` means PostgreSQL through the
    psycopg (3) driver gpuval installs."""
    url = url.strip()
    if is_libpq(url):
        return libpq_url(url)
    if "://" not in url:
        return "sqlite:///" + str(Path(url).expanduser().resolve())
    scheme, rest = url.split("://", 1)
    user, host, tail = _split_netloc(rest)
    if user is not None and "@" in user:  # `u:p@ss@host`: the host is after the last "@", the password's "@" quoted
        rest = user.replace("@", "%40") + "@" + host + tail
    if scheme in ("postgresql", "postgres"):
        return "postgresql+psycopg://" + rest
    return f"{scheme}://{rest}"


def _split_netloc(rest: str) -> tuple[str | None, str, str]:
    """(user info or None, host, path and query) of what follows `scheme://`."""
    cuts = [i for i in (rest.find("/"), rest.find("?")) if i >= 0]
    end = min(cuts) if cuts else len(rest)
    netloc, tail = rest[:end], rest[end:]
    if "@" not in netloc:
        return None, netloc, tail
    user, host = netloc.rsplit("@", 1)
    return user, host, tail


def redact_url(url: str) -> str:
    """The URL with no secret in it: the password of `user:password@` and of `?password=` as ***."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    user, host, tail = _split_netloc(rest)
    if user is not None and ":" in user:
        user = user.split(":", 1)[0] + ":***"
    tail = _QUERY_SECRET.sub(r"\1***", tail)
    return f"{scheme}://{'' if user is None else user + '@'}{host}{tail}"


def hide_url_passwords(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` in it as ***."""
    return _USERINFO_PASSWORD.sub(rf"\g<1>{HIDDEN}@", text)


def _hidden(name: str, value: str) -> str | None:
    """`value` with its secrets as ***, or None where it holds none: the whole value of a variable SECRET_NAME names
    (*PASSWORD*, *TOKEN*, *SECRET*, *KEY*, GPUVAL_DB as a file path; not one that turns the store off), and only the
    password inside a value that is a URL or a libpq string (postgresql://user:PASSWORD@..., ?password=,
    password=...: GPUVAL_DB's, where the host and user are no secret)."""
    if SECRET_NAME.search(name) and not ("://" in value or is_libpq(value)):
        return None if value.strip().lower() in DISABLED else HIDDEN
    found = 0
    for pattern, shown in ((_USERINFO_PASSWORD, rf"\g<1>{HIDDEN}@"), (_EQUALS_PASSWORD, rf"\g<1>{HIDDEN}"),
                           (_LIBPQ_PASSWORD, rf"\g<1>{HIDDEN}")):
        value, count = pattern.subn(shown, value)
        found += count
    return value if found else None


def holds_secret(name: str, value: str) -> bool:
    """Whether the variable `name=value` holds a secret (by hide_secrets' rule; a value already *** is one)."""
    return _hidden(name, value) is not None


def hide_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """A job's environment as a dry run shows it: every secret in it as *** (the rule of `_hidden`), the rest as it
    is; the same names, in the same order."""
    return {name: _hidden(name, value) or value for name, value in env.items()}


def recorded_env(prefixes: tuple[str, ...], environ: Mapping[str, str] | None = None) -> list[str]:
    """The variables under `prefixes` as sorted NAME=VALUE, never a credential (SECRET_NAME's value is
    "(not recorded)") and never a password in a URL: what a document that keeps a run's settings may record."""
    environ = dict(os.environ) if environ is None else environ
    kept = []
    for name, value in environ.items():
        if name.startswith(prefixes):
            kept.append(f"{name}={'(not recorded)' if SECRET_NAME.search(name) else hide_url_passwords(value)}")
    return sorted(kept)
