"""The lease as a row of the `leases` table: holder, epoch, when it was renewed.

Every change is a compare-and-set in one statement, so two contenders that read the same
record cannot both take it: the UPDATE of the second finds the epoch already moved.
`renewed_at` is this process's clock, used as the mark that changes at every renewal (and
shown to people); expiry is judged on each contender's own clock (`elector`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from controller.db.schema import leases
from controller.leader.elector import LeaseRecord


def _record(row: Any) -> LeaseRecord:
    return LeaseRecord(str(row.holder), int(row.epoch), row.renewed_at.isoformat())


def read_lease(engine: Engine, name: str) -> tuple[str, int] | None:
    """The lease's holder and epoch, or None while nobody has taken it."""
    with engine.connect() as conn:
        row = conn.execute(
            select(leases.c.holder, leases.c.epoch).where(leases.c.name == name)).first()
    return (str(row[0]), int(row[1])) if row is not None else None


class DatabaseLease:
    """A `LeaseStore` on the controller's database; `engine` is the lease's own (unfenced)."""

    def __init__(self, engine: Engine, name: str) -> None:
        self.engine, self.name = engine, name

    def read(self) -> LeaseRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(leases.c.holder, leases.c.epoch, leases.c.renewed_at).where(
                    leases.c.name == self.name)
            ).first()
        return _record(row) if row is not None else None

    def acquire(self, holder: str, seen: LeaseRecord | None) -> LeaseRecord | None:
        now = datetime.now(UTC)
        try:
            with self.engine.begin() as conn:
                if seen is None:
                    conn.execute(insert(leases).values(
                        name=self.name, holder=holder, epoch=1, renewed_at=now, acquired_at=now))
                    return LeaseRecord(holder, 1, now.isoformat())
                taken = conn.execute(
                    update(leases)
                    .where(leases.c.name == self.name, leases.c.epoch == seen.epoch,
                           leases.c.holder == seen.holder)
                    .values(holder=holder, epoch=seen.epoch + 1, renewed_at=now,
                            acquired_at=now)
                ).rowcount
        except IntegrityError:  # another contender created it first
            return None
        return LeaseRecord(holder, seen.epoch + 1, now.isoformat()) if taken else None

    def renew(self, holder: str, epoch: int) -> bool:
        with self.engine.begin() as conn:
            return bool(conn.execute(
                update(leases)
                .where(leases.c.name == self.name, leases.c.holder == holder,
                       leases.c.epoch == epoch)
                .values(renewed_at=datetime.now(UTC))
            ).rowcount)

    def release(self, holder: str, epoch: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(leases)
                .where(leases.c.name == self.name, leases.c.holder == holder,
                       leases.c.epoch == epoch)
                .values(holder="", epoch=epoch + 1, renewed_at=datetime.now(UTC))
            )

    def current_epoch(self) -> int:
        found = read_lease(self.engine, self.name)
        return found[1] if found else 0

    def mirror(self, holder: str, epoch: int) -> bool:
        """Record `epoch` (taken elsewhere, e.g. a Kubernetes Lease) as the fence's, if it
        is newer than the row's; False if the row already holds a newer one."""
        now = datetime.now(UTC)
        with self.engine.begin() as conn:
            current = conn.execute(
                select(leases.c.epoch).where(leases.c.name == self.name).with_for_update()
            ).scalar()
            if current is None:
                conn.execute(insert(leases).values(
                    name=self.name, holder=holder, epoch=epoch, renewed_at=now, acquired_at=now))
                return True
            if current > epoch:
                return False
            conn.execute(update(leases).where(leases.c.name == self.name).values(
                holder=holder, epoch=epoch, renewed_at=now,
                **({"acquired_at": now} if current < epoch else {})))
        return True
