"""The results store: every Result record in SQLite (default) or PostgreSQL, through one SQLAlchemy URL.

Opening a store brings its schema to the newest alembic revision shipped with gpuval, under a lock (SQLite:
BEGIN IMMEDIATE; PostgreSQL: an advisory lock), so the ranks of a job opening it at once migrate it once. A database
from a newer gpuval, another program's database or a corrupt file is a one-line StoreError, never a traceback.

Many writers: SQLite runs in WAL mode with a busy timeout, each write is one short transaction, and a write that
still finds the database locked is retried with backoff. Records are keyed by their id, so writing or importing the
same record twice keeps one copy. SQLite's locking needs a local file system: nodes that share a results database
use PostgreSQL.
"""

from __future__ import annotations

import os
import random
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import platformdirs

from gpuval.errors import MissingDependency
from gpuval.results.dsn import DISABLED, normalize_url, redact_url
from gpuval.results.model import Result
from gpuval.results.query import MetricPoint, Query, RunSummary
from gpuval.results.store_migrate import WRITE_TRIES, StoreError, first_line, is_locked, migrate

if TYPE_CHECKING:
    import sqlalchemy as sa

# PostgreSQL gives row sequence numbers when a row is inserted, not when it commits: a reader asks again for the
# last OVERLAP numbers, so a batch that committed late (one write is at most 2000 rows) is not missed.
OVERLAP = 10_000
_BUSY_TIMEOUT_S = 30.0


def resolve_db_url(url: str | None = None) -> str | None:
    """The store to use: `url` (--db), else GPUVAL_DB, else results.db in the data directory; None where the
    choice is 'none' (the store is off)."""
    chosen = url if url is not None else os.environ.get("GPUVAL_DB")
    if chosen is None:
        return normalize_url(str(platformdirs.user_data_path("gpuval") / "results.db"))
    return None if chosen.strip().lower() in DISABLED else normalize_url(chosen)


def _scrubbed(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


class ResultStore:
    """An open results database. Use `open_store()`; methods raise StoreError with one line on trouble."""

    def __init__(self, engine: "sa.Engine", shown_url: str):
        self.engine = engine
        self.url = shown_url
        self.dialect = engine.dialect.name

    # ---- writing ---------------------------------------------------------------------------------------------

    def add(self, records: Iterable[Result], batch: int = 2000) -> int:
        """Insert records (ones already stored, by id, are kept as they are); returns how many were given."""
        count = 0
        chunk: list[Result] = []
        for record in records:
            chunk.append(record)
            if len(chunk) >= batch:
                self._write(chunk)
                count += len(chunk)
                chunk = []
        if chunk:
            self._write(chunk)
            count += len(chunk)
        return count

    def _write(self, records: list[Result]) -> None:
        from gpuval.results import schema

        result_rows = [_result_row(r) for r in records]
        metric_rows = [
            {"result_id": r.id, "idx": i, "name": m.name, "value": m.value, "unit": m.unit, "size_bytes": m.size_bytes}
            for r in records for i, m in enumerate(r.metrics)
        ]
        for attempt in range(WRITE_TRIES):
            try:
                with self.engine.begin() as conn:
                    conn.execute(self._insert_ignoring_duplicates(schema.results), result_rows)
                    if metric_rows:
                        conn.execute(self._insert_ignoring_duplicates(schema.metrics), metric_rows)
                return
            except Exception as exc:
                if not is_locked(exc) or attempt == WRITE_TRIES - 1:
                    raise StoreError(f"cannot write to the results database {self.url}: {first_line(exc)}") from None
                time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))

    def _insert_ignoring_duplicates(self, table: "sa.Table") -> Any:
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        elif self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            raise StoreError(f"{self.url}: gpuval stores results in SQLite or PostgreSQL, not {self.dialect}")
        return insert(table).on_conflict_do_nothing()

    # ---- reading ---------------------------------------------------------------------------------------------

    def _read(self, statement: Any) -> list[Any]:
        try:
            with self.engine.connect().execution_options(gpuval_read=True) as conn:
                return list(conn.execute(statement))
        except Exception as exc:
            raise StoreError(f"cannot read the results database {self.url}: {first_line(exc)}") from None

    def rows_after(self, cursor: int, limit: int = 50_000) -> list[tuple[int, str]]:
        """(row number, record JSON) of the rows stored after row `cursor`, oldest first (PostgreSQL: from
        `cursor - OVERLAP`, see OVERLAP); the JSON unchecked, for the reader to skip what is no record."""
        import sqlalchemy as sa

        from gpuval.results import schema

        t = schema.results
        sqlite = self.dialect == "sqlite"
        seq = sa.literal_column("gpuval_results.rowid" if sqlite else "gpuval_results.seq")
        low = cursor if sqlite else cursor - OVERLAP
        rows = self._read(sa.select(seq, t.c.record).select_from(t).where(seq > low).order_by(seq).limit(limit))
        return [(int(number), str(text)) for number, text in rows]

    def results(self, query: Query) -> list[Result]:
        """The records that match, oldest first."""
        from gpuval.results import schema

        t = schema.results
        rows = self._read(_filtered(t, query, t.c.record).order_by(t.c.started_at, t.c.id))
        return [Result.model_validate_json(row[0]) for row in rows]

    def runs(self, query: Query, limit: int | None = 50) -> list[RunSummary]:
        """Runs that have a matching record, newest first, with their counts and verdict."""
        import sqlalchemy as sa

        from gpuval.results import schema

        t = schema.results
        end = sa.func.max(sa.func.coalesce(t.c.finished_at, t.c.started_at))
        stmt = _filtered(t, query, t.c.run_id, sa.func.min(t.c.started_at), end, sa.func.count(),
                         sa.func.count(sa.distinct(t.c.hostname)))
        stmt = stmt.group_by(t.c.run_id).order_by(sa.func.min(t.c.started_at).desc(), t.c.run_id.desc())
        if limit:
            stmt = stmt.limit(limit)
        heads = self._read(stmt)
        if not heads:
            return []
        ids = [h[0] for h in heads]
        detail = _filtered(t, Query(**{**query.__dict__, "run_ids": ids}), t.c.run_id, t.c.kind, t.c.status,
                           t.c.sku, sa.func.count())
        detail = detail.group_by(t.c.run_id, t.c.kind, t.c.status, t.c.sku)
        parts: dict[str, list[Any]] = {}
        for row in self._read(detail):
            parts.setdefault(row[0], []).append(row)
        summaries = []
        for run_id, first, last, records, hosts in heads:
            rows = parts.get(run_id, [])
            counts: dict[str, int] = {}
            for _, _, status, _, n in rows:
                counts[status] = counts.get(status, 0) + n
            summaries.append(RunSummary(
                run_id=run_id, started_at=_utc(first), finished_at=_utc(last), records=records, hosts=hosts,
                kinds=sorted({r[1] for r in rows}), skus=sorted({r[3] for r in rows if r[3]}), status_counts=counts,
            ))
        return summaries

    def latest_run(self, query: Query) -> str | None:
        """The newest run with a matching record."""
        found = self.runs(query, limit=1)
        return found[0].run_id if found else None

    def metric_points(self, query: Query, metric_names: Iterable[str]) -> list[MetricPoint]:
        """Metrics of the matching records (only the named ones), oldest first: the history behind trends."""
        from gpuval.results import schema

        r, m = schema.results, schema.metrics
        names = list(metric_names)
        stmt = _filtered(r, query, r.c.hostname, r.c.run_id, r.c.started_at, r.c.kind, r.c.name, m.c.name,
                         m.c.value, m.c.unit, m.c.size_bytes)
        stmt = stmt.join_from(r, m, m.c.result_id == r.c.id).where(m.c.name.in_(names)).order_by(r.c.started_at)
        return [MetricPoint(h, run, _utc(at), kind, name, metric, value, unit, size)
                for h, run, at, kind, name, metric, value, unit, size in self._read(stmt)]

    def close(self) -> None:
        """Release the connections."""
        self.engine.dispose()


def _filtered(table: "sa.Table", query: Query, *columns: Any) -> Any:
    import sqlalchemy as sa

    stmt = sa.select(*columns).select_from(table)
    if query.run_ids:
        stmt = stmt.where(table.c.run_id.in_(query.run_ids))
    if query.hosts:
        stmt = stmt.where(table.c.hostname.in_(query.hosts))
    if query.kinds:
        stmt = stmt.where(table.c.kind.in_(query.kinds))
    if query.names:
        stmt = stmt.where(table.c.name.in_(query.names))
    if query.skus:
        stmt = stmt.where(table.c.sku.in_(query.skus))
    if query.since:
        stmt = stmt.where(table.c.started_at >= _db_time(query.since))
    if query.until:
        stmt = stmt.where(table.c.started_at <= _db_time(query.until))
    if query.status:
        runs_with = sa.select(table.c.run_id).where(table.c.status == query.status.value)
        stmt = stmt.where(table.c.run_id.in_(runs_with))
    return stmt


def _db_time(when: datetime) -> datetime:
    """UTC without tzinfo: SQLite keeps naive text, and comparing like with like keeps ordering right."""
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when


def _utc(when: datetime | str) -> datetime:
    if isinstance(when, str):  # SQLite aggregates (min/max) come back as text
        when = datetime.fromisoformat(when)
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def _result_row(r: Result) -> dict[str, Any]:
    return {
        "id": r.id, "run_id": r.run_id, "kind": r.kind, "name": r.name, "hostname": r.where.hostname,
        "sku": r.where.sku, "status": r.status.value, "started_at": _db_time(r.started_at),
        "finished_at": _db_time(r.finished_at) if r.finished_at else None, "schema_version": r.schema_version,
        "record": r.model_dump_json(),
    }


# ---- opening and migrating --------------------------------------------------------------------------------------

_OPEN: dict[tuple[int, str], ResultStore] = {}


def open_store(url: str | None = None) -> ResultStore:
    """The store at `url` (a SQLAlchemy URL or a SQLite file path; see `resolve_db_url`), migrated to the
    newest schema. Stores are kept open per process, so writing many times costs one open."""
    resolved = resolve_db_url(url)
    if resolved is None:
        raise StoreError("the results database is turned off (GPUVAL_DB=none); pass --db URL to use one")
    key = (os.getpid(), resolved)
    if key not in _OPEN:
        _OPEN[key] = _open(resolved)
    return _OPEN[key]


def close_stores() -> None:
    """Close every store this process opened (for the tests and benchmarks, which open many stores in one process;
    a command's stores close when it exits)."""
    for key in [k for k in _OPEN if k[0] == os.getpid()]:
        _OPEN.pop(key).close()


def _open(url: str) -> ResultStore:
    try:
        import sqlalchemy as sa
    except ImportError:
        raise MissingDependency("the results store needs SQLAlchemy: pip install 'sqlalchemy>=2' alembic") from None
    try:
        parsed = sa.engine.make_url(url)
    except Exception:
        raise StoreError(f"bad results database URL {redact_url(url)!r}: use a file path, sqlite:///PATH or "
                         "postgresql://USER@HOST:PORT/DB") from None
    shown = redact_url(url)
    secrets = [parsed.password or "", str(parsed.query.get("password") or "")]
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        engine = _sqlite_engine(sa, parsed, shown)
    elif backend == "postgresql":
        try:
            engine = sa.create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": 10})
        except ImportError:
            raise MissingDependency("PostgreSQL needs the psycopg driver: pip install 'gpuval[postgres]'") from None
    else:
        raise StoreError(f"{shown}: gpuval stores results in SQLite or PostgreSQL, not {backend}")
    store = ResultStore(engine, shown)
    try:
        migrate(store)
    except StoreError as exc:  # a driver's message may quote what it was given
        engine.dispose()
        raise StoreError(_scrubbed(str(exc), [str(x) for x in secrets])) from None
    return store


def _sqlite_engine(sa: Any, parsed: Any, shown: str) -> "sa.Engine":
    database = parsed.database
    if database and database != ":memory:":
        path = Path(database)
        if path.is_dir():
            raise StoreError(f"{shown}: {path} is a folder, not a database file")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{shown}: cannot create {path.parent} ({exc.strerror})") from None
    engine = sa.create_engine(parsed, connect_args={"timeout": _BUSY_TIMEOUT_S})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (below), so the lock is taken up front
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")  # WAL stays consistent; the JSON Lines log covers a power cut
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A writer takes the write lock when it begins, so two writers never deadlock upgrading read locks.
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("gpuval_read") else "BEGIN IMMEDIATE")

    return engine
