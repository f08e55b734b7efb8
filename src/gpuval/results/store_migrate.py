"""Opening a results store: its schema brought to the newest alembic revision shipped with gpuval, under a lock
(SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock), so the ranks of a job opening it at once migrate it once;
a database from a newer gpuval, another program's database or a corrupt file refused with one line."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from gpuval.errors import GpuvalError

WRITE_TRIES = 8
_LOCK_KEY = 0x67707576616C  # "gpuval": PostgreSQL advisory lock taken while migrating


class StoreError(GpuvalError):
    """The results database cannot be used: unreachable, corrupt, another program's, or from a newer gpuval."""


def first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__


def is_locked(exc: BaseException) -> bool:
    text = str(getattr(exc, "orig", exc)).lower()
    return "locked" in text or "busy" in text



# The newest schema revision gpuval ships and every one it knows (alembic reads them from migrations/versions;
# tests/results/test_store.py holds these to alembic's own reading): a store already at HEAD is opened
# without importing alembic, a tenth of a second of every command that saves a result.
HEAD = "0002"
KNOWN = frozenset({"0001", "0002"})


def script_directory() -> Any:
    """Alembic's view of the revisions shipped with gpuval."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(Path(__file__).with_name("migrations")))


def _current_revision(conn: Any, tables: set[str], shown: str, dialect: str) -> str | None:
    import sqlalchemy as sa

    from gpuval.results.schema import OUR_TABLES, VERSION_TABLE

    if VERSION_TABLE not in tables:
        clash = sorted(set(OUR_TABLES) & tables)
        if clash or (dialect == "sqlite" and tables):
            what = ", ".join(sorted(tables)[:5])
            raise StoreError(f"{shown} is not a gpuval results database (it holds other tables: {what}); "
                             "use another file or URL")
        return None
    rows = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    return rows[0] if rows else None


def migrate(store: Any) -> None:
    """Bring the schema to the newest revision; refuse foreign, corrupt and newer databases."""
    import sqlalchemy as sa

    for attempt in range(WRITE_TRIES):
        try:
            with store.engine.connect().execution_options(gpuval_read=True) as conn:
                current = _current_revision(conn, set(sa.inspect(conn).get_table_names()), store.url,
                                            store.dialect)
            _check_known(current, store.url)
            if current != HEAD:
                _upgrade(store)
            return
        except StoreError:
            raise
        except Exception as exc:
            if is_locked(exc) and attempt < WRITE_TRIES - 1:
                time.sleep(0.05 * 2**attempt * (0.5 + random.random()))
                continue
            text = first_line(exc)
            if "not a database" in text or "malformed" in text:
                raise StoreError(f"{store.url} is not a SQLite database or is damaged ({text})") from None
            raise StoreError(f"cannot open the results database {store.url}: {text}") from None


def _upgrade(store: Any) -> None:
    """Alembic's upgrade to HEAD, in one transaction that holds the store's lock (SQLite: BEGIN IMMEDIATE;
    PostgreSQL: an advisory lock), the revision read again under it: another process may have migrated first."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    with store.engine.begin() as conn:
        if store.dialect == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        current = _current_revision(conn, set(sa.inspect(conn).get_table_names()), store.url, store.dialect)
        _check_known(current, store.url)
        if current != HEAD:
            cfg = Config()
            cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")


def _check_known(current: str | None, shown: str) -> None:
    if current is not None and current not in KNOWN:
        raise StoreError(f"{shown} was written by a newer gpuval (schema revision {current}); "
                         "upgrade gpuval to read it (pip install -U gpuval)")

