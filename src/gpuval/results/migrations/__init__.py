"""Alembic migrations of the results store, shipped as package data and run by gpuval.results.store on open."""
