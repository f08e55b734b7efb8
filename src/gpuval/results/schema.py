"""The store's tables as SQLAlchemy Core objects, matching the head migration (imported only where a store opens)."""

from __future__ import annotations

import sqlalchemy as sa

VERSION_TABLE = "gpuval_schema_version"
OUR_TABLES = ("gpuval_results", "gpuval_metrics")

metadata = sa.MetaData()

results = sa.Table(
    "gpuval_results", metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("run_id", sa.String(128), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("hostname", sa.String(255), nullable=False),
    sa.Column("sku", sa.String(128)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("record", sa.Text, nullable=False),
)

metrics = sa.Table(
    "gpuval_metrics", metadata,
    sa.Column("result_id", sa.String(64), sa.ForeignKey("gpuval_results.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("value", sa.Float(precision=53)),
    sa.Column("unit", sa.String(32), nullable=False),
    sa.Column("size_bytes", sa.BigInteger),
)
