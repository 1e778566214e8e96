"""Alembic environment: runs migrations on the engine the controller hands over."""

from __future__ import annotations

from alembic import context

from controller.db.engine import create_db_engine
from controller.db.schema import metadata

config = context.config
engine = config.attributes.get("engine")
if engine is None:
    from controller.settings import load_settings

    engine = create_db_engine(load_settings().resolved_database_url)

with engine.begin() as connection:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
