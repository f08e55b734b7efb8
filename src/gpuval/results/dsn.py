"""Database URLs and the secrets in them: what `--db` and GPUVAL_DB may be, and what is never printed.

`--db` takes a SQLite file's path, a URL (`sqlite:///PATH`, `postgresql://USER:PASSWORD@HOST:PORT/DB`), or a libpq
keyword string (`host=db port=5432 user=gv password=... dbname=gpuval`, as psql takes it), which is PostgreSQL,
never a file name. Whatever is shown of one (`redact_url`) has its password as ***.

A job's environment has one rule for what is secret (`hide_secrets`; docs/engines.md, "What a dry run hides"): a
variable whose name says it holds a credential (`is_secret_name`) is secret whole, whatever its value looks like;
in any other value, the secrets inside it are (a URL's password, a secret-named parameter or command-line option,
an Authorization header's credentials, a token of a known shape).
A dry run renders the job from the environment with every secret as *** before any shell or YAML quoting, so no
quoting or escape of a secret can show it; and the Kubernetes engine keeps exactly those variables (`holds_secret`)
out of the pod spec, in the job's own Secret. A name taken for a secret that is none costs little (its value moves
to the Secret, a dry run shows ***); a secret missed is printed and stored in plain text: the rule leans to the
first."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping
from urllib.parse import urlencode

from gpuval.errors import UsageError

DISABLED = ("none", "off", "")  # GPUVAL_DB / --db values that turn the results store off
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
# The words of a name that say it holds a credential (case aside; a word is a run of letters and digits). Drawn from
# detect-secrets' KeywordDetector denylist, Sentry's scrubber denylist (mysql_pwd, session, cookie, auth), Django's
# hidden settings (SIGNATURE, COOKIE) and Spring Boot's sanitized keys (*credentials*), matched by word rather than
# by bare substring so that KEYBOARD, TOKENIZERS_PARALLELISM, GIT_AUTHOR_NAME and NCCL_IB_PKEY stay plain.
_B, _E, _W = r"(?<![A-Z0-9])", r"(?![A-Z0-9])", r"[A-Z0-9]*"
_WORDS_ENDING_IN_PASS = r"(?:BY|COM|ENCOM|SUR|TRES|OVER|UNDER)PASS"
_SECRET_WORD = re.compile(
    r"PASSWORD|PASSWD|PASSPHRASE|SECRET|CREDENTIAL|COOKIE|SIGNATURE|WEBHOOK|AUTHORIZATION"  # anywhere in a word
    rf"|{_B}{_W}(?:TOKENS?|PWD|AUTH|DSN|SESS(?:ION)?[_-]?ID){_E}"  # a word's end: ACCESSTOKEN, MYSQL_PWD, OAUTH
    # a key: the word KEY, or one of detect-secrets' compounds (APIKEY, ACCOUNTKEY, PRIVKEY; not a bare PKEY)
    rf"|{_B}(?:{_W}(?:API|APP|AUTH|SERVICE|APPLICATION|ACCOUNT|ACCESS|DB|DATABASE|CLIENT|PRIV|PRIVATE|SECRET"
    rf"|MASTER|ENCRYPTION|SIGNING|LICENSE|SUBSCRIPTION))?KEYS?{_E}"
    # a word's end: PASS (SSHPASS, what `sshpass -e` reads; SMBPASS, DBPASS), unless the word is an English one
    # ending in "pass" (BYPASS, COMPASS, ...: settings, not credentials); PW (ADMIN_PW, ROOTPW, PW_FILE)
    rf"|{_B}(?!{_WORDS_ENDING_IN_PASS}{_E}){_W}PASS{_E}|{_B}{_W}PW{_E}"
    rf"|{_B}(?:SAS|SIG|CREDS?|BEARER){_E}"  # whole words
    rf"|{_B}CONN(?:ECTION)?[_-]?STR(?:ING)?{_E}",  # a connection string (Azure's *_CONNECTION_STRING, ADO.NET)
    re.IGNORECASE)
_SHELL_FOLDERS = frozenset({"PWD", "OLDPWD"})  # the shell's working folders: a *PWD name that is no password
# The password of a URL's user info ends at its last "@" (`u:p@ss@host`, as normalize_url reads it): group 1 is
# what comes before it.
_USERINFO_PASSWORD = re.compile(r"(://[^/?#@\s:]*:)[^/?#\s]*(?=@)")
# NAME=VALUE pairs inside a value, whose NAME decides (by _SECRET_WORD) whether VALUE is secret: a libpq keyword
# string's (space-separated, 'quoted'), a URL query's (`?sig=`, `&X-Amz-Signature=`), a semicolon-separated
# connection string's (Azure's `AccountKey=`, ADO.NET's `Pwd=`); a command line's option (`--password=S`,
# `--hf-token S`, `-Dssl.keyStorePassword=S`; a next word that starts with "-" is another option, not its value) and
# netrc's `password S`; a JSON member's, a YAML key's or an HTTP header's `key: S` (not Authorization's: its scheme
# stays shown); an HTTP Authorization header's credentials after its scheme (`Authorization: Bearer S`, `Basic S`),
# and a bearer token anywhere. `lead` is what stays shown. The headers come first: a pair `Authorization=Bearer S`
# would otherwise hide the scheme alone.
_QUOTED_OR_WORD = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\S+"
_CREDENTIAL = r"[^\s'\",;]+"  # a header's credentials: a token or base64, up to a quote, a separator or a space
_PAIRS = (
    re.compile(r"(?P<lead>(?<![A-Za-z0-9])(?P<key>authorization)[\"']?\s*[:=]\s*[\"']?"
               rf"(?:(?:bearer|basic|token|negotiate|ntlm)\s+)?)(?P<value>{_CREDENTIAL})", re.IGNORECASE),
    re.compile(rf"(?P<lead>(?<![A-Za-z0-9])(?P<key>bearer)\s+)(?P<value>{_CREDENTIAL})", re.IGNORECASE),
    re.compile(rf"(?P<lead>(?<!\S)(?P<key>--?[A-Za-z][\w.-]*|password|passwd)(?:=|\s+(?!-)))"
               rf"(?P<value>{_QUOTED_OR_WORD})"),
    re.compile(r"(?P<lead>(?:^|(?<=\s))(?P<key>[A-Za-z_][\w.-]*)\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|\S+)"),
    re.compile(r"(?P<lead>[?&](?P<key>[^=&#\s]+)=)(?P<value>[^&#]*)"),
    # a JSON member, a YAML mapping's or an HTTP header's `key: value` (`{"password": "S"}`, `X-Api-Key: S`)
    re.compile(r"(?P<lead>(?<![\w.-])[\"']?(?P<key>(?![Aa]uthorization\b)[A-Za-z_][\w.-]*)[\"']?\s*:\s*[\"']?)"
               rf"(?P<value>{_CREDENTIAL})"),
    re.compile(r"(?P<lead>(?:^(?=.*;)|;)\s*(?P<key>[A-Za-z][\w .-]*?)\s*=\s*)(?P<value>\"(?:[^\"]|\"\")*\"|[^;]*)"),
)
# Tokens whose shape names them wherever they stand (detect-secrets' GitHubTokenDetector, SlackDetector and
# JwtTokenDetector; GitHub's fine-grained, GitLab's and Hugging Face's prefixes; an Office 365 / Teams incoming
# webhook's path): cheap, and seldom anything else.
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,}|glpat-[\w-]{20,}|hf_[A-Za-z0-9]{30,}"
    r"|xox[abposr]-[\w-]{10,}|eyJ[\w-]+\.eyJ[\w-]+\.[\w-]*)|(?<=hooks\.slack\.com/services/)[\w/]+"
    r"|(?<=webhook\.office\.com/)[\w/@.-]+|(?<=outlook\.office\.com/webhook/)[\w/@.-]+")  # Teams' webhooks
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
    """The URL as it may be shown: the secrets inside it as ***, by the rule for any value of a job's environment
    (`user:***@`, `?password=***`, `&sslpassword=***`, a token of a known shape)."""
    return _hide_inside(url)[0]


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (_SECRET_WORD): then its whole value is
    the secret. PWD and OLDPWD, the shell's working folders, are none."""
    return name not in _SHELL_FOLDERS and bool(_SECRET_WORD.search(name))


def _hide_inside(value: str) -> tuple[str, int]:
    """`value` with the secrets inside it as ***, and how many there were: a URL's user info password, the value
    of a secret-named pair (_PAIRS), a token of a known shape (_TOKEN)."""
    found = 0

    def hide(match: re.Match[str]) -> str:
        nonlocal found
        if not _SECRET_WORD.search(match["key"]):
            return match[0]
        found += 1
        return match["lead"] + HIDDEN

    value, count = _USERINFO_PASSWORD.subn(rf"\g<1>{HIDDEN}", value)
    for pattern in _PAIRS:
        value = pattern.sub(hide, value)
    value, tokens = _TOKEN.subn(HIDDEN, value)
    return value, found + count + tokens


def _hidden(name: str, value: str) -> str | None:
    """`value` as a dry run shows it, or None where it holds no secret: the whole value of a secret-named variable
    (an empty one holds none), else the value with the secrets inside it as ***. A value that shows *** already
    holds one: the render of a dry run's environment keeps the same variables in the Kubernetes Secret."""
    if is_secret_name(name):
        return HIDDEN if value else None
    shown, found = _hide_inside(value)
    return shown if found or HIDDEN in value else None


def holds_secret(name: str, value: str) -> bool:
    """Whether the variable `name=value` holds a secret (by hide_secrets' rule; a value already *** is one)."""
    return _hidden(name, value) is not None


def hide_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """A job's environment as a dry run shows it: every secret in it as *** (the rule of `_hidden`), the rest as it
    is; the same names, in the same order."""
    return {name: _hidden(name, value) or value for name, value in env.items()}


def recorded_env(prefixes: tuple[str, ...], environ: Mapping[str, str] | None = None) -> list[str]:
    """The variables under `prefixes` as sorted NAME=VALUE, never a credential (a secret-named variable's value is
    "(not recorded)", a secret inside another's ***): what a document that keeps a run's settings may record."""
    environ = dict(os.environ) if environ is None else environ
    kept = []
    for name, value in environ.items():
        if name.startswith(prefixes):
            kept.append(f"{name}={'(not recorded)' if is_secret_name(name) else _hidden(name, value) or value}")
    return sorted(kept)
