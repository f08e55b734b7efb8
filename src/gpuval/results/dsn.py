"""Database URLs and the secrets in them: what `--db` and GPUVAL_DB may be, and what is never printed.

`--db` takes a SQLite file's path, a URL (`sqlite:///PATH`, `postgresql://USER:PASSWORD@HOST:PORT/DB`), or a libpq
keyword string (`host=db port=5432 user=gv password=... dbname=gpuval`, as psql takes it), which is PostgreSQL,
never a file name. Whatever is shown of one (`redact_url`), and whatever a dry run prints of a job's environment
(`secrets_in`, `redact`), has its secrets as ***."""

from __future__ import annotations

import json
import os
import re
import shlex
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
_URL_PASSWORD = re.compile(r"(://[^/?#@\s:]*:)([^@\s]+)@")
_LIBPQ_PASSWORD = re.compile(r"(?:^|\s)(?:password|sslpassword)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_EQUALS_PASSWORD = re.compile(r"[?&](?:password|passwd|sslpassword)=([^&\s]+)", re.IGNORECASE)


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
    return _URL_PASSWORD.sub(r"\1***@", text)


def secrets_in(env: Mapping[str, str]) -> list[str]:
    """The secrets of a job's environment, as they are written there: the password inside any value that is a
    URL or a libpq string (postgresql://user:PASSWORD@..., ?password=, password=...: GPUVAL_DB's, where the host
    and user are no secret), and the whole value of any other variable SECRET_NAME names (*PASSWORD*, *TOKEN*,
    *SECRET*, *KEY*, GPUVAL_DB as a file path)."""
    found: list[str] = []
    for name, value in env.items():
        connection = "://" in value or is_libpq(value)
        if SECRET_NAME.search(name) and not connection:
            if value.strip().lower() not in DISABLED:  # GPUVAL_DB=none, the store off, is no secret
                found.append(value)
            continue
        found += [m.group(2) for m in _URL_PASSWORD.finditer(value)]
        for pattern in (_EQUALS_PASSWORD, _LIBPQ_PASSWORD):
            found += [m.group(1) for m in pattern.finditer(value)]
    return sorted({s for s in found if s}, key=len, reverse=True)  # the longest first: no half-redacted secret


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every secret as ***: as written, and as a shell script, JSON or YAML quotes it; only where it
    stands as a whole word (a secret `pw` leaves `pwd` alone; a very short one hides more than itself, never
    less)."""
    for secret in secrets:
        for form in dict.fromkeys((shlex.quote(secret), json.dumps(secret), json.dumps(secret)[1:-1],
                                   "'" + secret.replace("'", "''") + "'", secret)):
            text = re.sub(r"(?<!\w)" + re.escape(form) + r"(?!\w)", "***", text)
    return text


def recorded_env(prefixes: tuple[str, ...], environ: Mapping[str, str] | None = None) -> list[str]:
    """The variables under `prefixes` as sorted NAME=VALUE, never a credential (SECRET_NAME's value is
    "(not recorded)") and never a password in a URL: what a document that keeps a run's settings may record."""
    environ = dict(os.environ) if environ is None else environ
    kept = []
    for name, value in environ.items():
        if name.startswith(prefixes):
            kept.append(f"{name}={'(not recorded)' if SECRET_NAME.search(name) else hide_url_passwords(value)}")
    return sorted(kept)
