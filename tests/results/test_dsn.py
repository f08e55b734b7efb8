"""`--db` values and the secrets in them (results/dsn.py): a libpq keyword string is PostgreSQL (a real server,
tests/results/conftest.py), never a SQLite file of that name; a password is never shown; a job's secrets are
found in its environment and hidden wherever a dry run writes them."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gpuval.errors import UsageError
from gpuval.results.dsn import hide_secrets, holds_secret, normalize_url
from gpuval.results.query import Query
from gpuval.results.store import open_store
from tests.conftest import run_gpuval
from tests.helpers.records import record


def _keywords(url: str, password: str) -> str:
    """The libpq keyword string of a postgresql:// URL (the test server trusts every password)."""
    parts = urlsplit(url)
    return (f"host={parts.hostname} port={parts.port} user={parts.username} password={password} "
            f"dbname={parts.path.lstrip('/')}")


def test_a_libpq_keyword_string_is_postgresql_and_its_password_is_never_shown(pg_url: str, tmp_path: Path):
    """`--db 'host=... password=pw8 ...'` was taken for a SQLite path: a 0644 file of that name appeared in the
    working folder and the password was printed (reliability review D15 a)."""
    keywords = _keywords(pg_url, "pw8")
    store = open_store(keywords)
    assert store.dialect == "postgresql" and "pw8" not in store.url
    store.add([record(run="over-libpq")])
    assert [r.run_id for r in open_store(pg_url).runs(Query())] == ["over-libpq"]
    proc = run_gpuval("history", "--db", keywords, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "over-libpq" in proc.stdout and "pw8" not in proc.stdout + proc.stderr
    assert os.listdir(tmp_path) == []  # no file named after the connection string


def test_a_quoted_libpq_value_and_a_word_libpq_does_not_know():
    url = normalize_url("host=db.example password='p w\\'x' dbname=gv")
    assert url == "postgresql+psycopg:///?host=db.example&password=p+w%27x&dbname=gv"
    with pytest.raises(UsageError, match="'colour' is no libpq connection keyword"):
        normalize_url("host=db colour=blue")
    assert normalize_url("./my=file.db").startswith("sqlite:///")  # a path with '=' is still a path


def test_the_secrets_of_a_jobs_environment_are_found_and_hidden():
    """One rule (hide_secrets): a secret-named variable's whole value, the password alone inside a URL or a libpq
    string (host and user are no secret), quoted, non-ASCII or holding an `@` as it may be."""
    env = {"GPUVAL_DB": "postgresql://gv:TopSecret9@db:5432/gpuval", "HF_TOKEN": "hf_abc123",
           "PGCONN": "host=db password='s3 cr' dbname=x", "MLFLOW_URI": "https://u:pa55@ml/", "NCCL_DEBUG": "INFO",
           "DB_PASSWORD": "pw", "QUOTED": "postgresql://gv:pa'ss9@db/gv", "AT": "postgresql://gv:p@ss@db/gv",
           "API_KEY": "café-Secr3t", "Q": "https://h/x?sslmode=on&password=q9&x=1", "OFF_TOKEN": "none"}
    shown = hide_secrets(env)
    assert shown == {"GPUVAL_DB": "postgresql://gv:***@db:5432/gpuval", "HF_TOKEN": "***",
                     "PGCONN": "host=db password=*** dbname=x", "MLFLOW_URI": "https://u:***@ml/",
                     "NCCL_DEBUG": "INFO", "DB_PASSWORD": "***", "QUOTED": "postgresql://gv:***@db/gv",
                     "AT": "postgresql://gv:***@db/gv", "API_KEY": "***", "Q": "https://h/x?sslmode=on&password=***&x=1",
                     "OFF_TOKEN": "none"}
    assert [k for k, v in env.items() if holds_secret(k, v)] == [k for k in env if k not in ("NCCL_DEBUG", "OFF_TOKEN")]
    assert all(holds_secret(k, v) == holds_secret(k, shown[k]) for k, v in env.items())  # *** is still a secret
    assert hide_secrets({"GPUVAL_DB": "none"}) == {"GPUVAL_DB": "none"}  # the store off: no secret
    assert hide_secrets({"GPUVAL_DB": "/srv/gpuval/results.db"}) == {"GPUVAL_DB": "***"}