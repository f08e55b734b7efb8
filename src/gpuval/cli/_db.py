"""The `--db` option shared by the commands that read or write the results store."""

from __future__ import annotations

from typing import Any

import typer

DB_HELP = ("Results database: a SQLite file path or a SQLAlchemy URL (postgresql://user@host/db) "
           "[default: GPUVAL_DB, else results.db in gpuval's data directory].")


def db_option() -> Any:
    """A fresh `--db` typer option."""
    return typer.Option(None, "--db", help=DB_HELP)
