"""Alembic environment: run on the connection gpuval.results.store hands over, inside its transaction and lock."""

from alembic import context

from gpuval.results.schema import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
