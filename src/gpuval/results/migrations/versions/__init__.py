"""Alembic revisions of the results store (alembic skips this file)."""
