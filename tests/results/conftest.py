"""Fixtures of the results tests: a real PostgreSQL server (Debian's postgresql 15) and stores on both backends."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from gpuval.node.dist_env import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _as_user(cmd: list[str]) -> list[str]:
    """postgres refuses to run as root: drop to nobody (setpriv execs, so the PID we hold is the server's)."""
    if os.geteuid() != 0:
        return cmd
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", *cmd]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server private to this test session on a free port; yields the admin URL."""
    if not (PG_BIN / "postgres").exists():
        pytest.fail("PostgreSQL 15 is not installed: run scripts/install.sh --test")
    base = Path(tempfile.mkdtemp(prefix="gpuval-pg-"))
    data, sockets = base / "data", base / "sock"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "nobody", "nogroup")
        shutil.chown(sockets, "nobody", "nogroup")
    subprocess.run(_as_user([str(PG_BIN / "initdb"), "-D", str(data), "-U", "gpuval", "-A", "trust", "-E", "UTF8",
                             "--no-sync"]), check=True, capture_output=True, timeout=120)
    port = free_port()
    server = subprocess.Popen(
        _as_user([str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port), "-h", "127.0.0.1", "-k", str(sockets),
                  "-c", "fsync=off", "-c", "max_connections=60"]),
        stdout=subprocess.DEVNULL, stderr=(base / "server.log").open("w"),
    )
    url = f"postgresql://gpuval@127.0.0.1:{port}/postgres"
    try:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(url, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("PostgreSQL did not start: " + (base / "server.log").read_text()[-2000:])
                time.sleep(0.2)
        yield url
    finally:
        server.send_signal(signal.SIGINT)  # fast shutdown
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_url(postgres_server: str) -> str:
    """A fresh database on the session's server."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_server.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test against a SQLite file and a real PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "store" / "results.db")
    return request.getfixturevalue("pg_url")

