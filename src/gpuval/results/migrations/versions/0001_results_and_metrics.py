"""Results and their metrics.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpuval_results",
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
    op.create_index("ix_gpuval_results_run", "gpuval_results", ["run_id"])
    op.create_index("ix_gpuval_results_host_time", "gpuval_results", ["hostname", "started_at"])
    op.create_index("ix_gpuval_results_time", "gpuval_results", ["started_at"])
    op.create_table(
        "gpuval_metrics",
        sa.Column("result_id", sa.String(64), sa.ForeignKey("gpuval_results.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("value", sa.Float(precision=53)),
        sa.Column("unit", sa.String(32), nullable=False),
        sa.Column("size_bytes", sa.BigInteger),
    )
    op.create_index("ix_gpuval_metrics_name", "gpuval_metrics", ["name"])
