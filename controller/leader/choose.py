"""Which `Leadership` a controller gets: one process leads alone; a reconciler among
several contends for the lease in PostgreSQL or in Kubernetes, fenced by the row."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine

from controller.db.engine import create_db_engine
from controller.errors import ConfigError
from controller.leader.db_lease import DatabaseLease
from controller.leader.elector import Elector, Leadership, LeaseStore, SoleLeader, default_holder
from controller.leader.fence import fence_engine
from controller.settings import Settings


def needs_postgres(settings: Settings) -> bool:
    """A split role shares the database between processes: SQLite cannot."""
    return settings.role != "all" and not settings.resolved_database_url.startswith("postgresql")


def create_leadership(
    settings: Settings, engine: Engine, on_change: Callable[[bool], None] | None = None
) -> Leadership:
    """The leadership of this process; for a reconciler, `engine` (what its reconciler
    writes with) is fenced by the lease's epoch."""
    holder = settings.holder_id or default_holder()
    if settings.role != "reconciler":
        return SoleLeader(holder)
    if needs_postgres(settings):
        raise ConfigError(
            "--role reconciler needs PostgreSQL: several processes share the database",
            hint="set SIMPLE_DATABASE_URL=postgresql+psycopg://… or serve with --role all",
        )
    row = DatabaseLease(create_db_engine(settings.resolved_database_url), settings.lease_name)
    store: LeaseStore = row
    if settings.lease_backend == "kubernetes":
        from controller.leader.k8s_lease import KubernetesLease, load_coordination_api

        store = KubernetesLease(
            load_coordination_api(), settings.lease_namespace or settings.kubernetes_namespace,
            settings.lease_name, settings.lease_duration_s, mirror=row)
    elector = Elector(
        store, holder, settings.lease_duration_s, settings.lease_renew_deadline_s,
        settings.lease_retry_s, on_change=on_change)
    fence_engine(engine, settings.lease_name, elector)
    return elector
