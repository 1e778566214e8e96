"""The elector on fake time: a standby waits out the lease on its own clock, a leader that
cannot renew within the deadline stops leading, a lease taken over ends a leadership."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.leader.elector import Elector, LeaseRecord


@dataclass
class MemoryLease:
    """A LeaseStore in memory, with compare-and-set like the real ones."""

    record: LeaseRecord | None = None
    renewals: int = 0
    down: bool = False
    log: list[str] = field(default_factory=list)

    def read(self) -> LeaseRecord | None:
        if self.down:
            raise OSError("the lease's store is away")
        return self.record

    def acquire(self, holder: str, seen: LeaseRecord | None) -> LeaseRecord | None:
        if self.record != seen:
            return None
        epoch = (seen.epoch if seen else 0) + 1
        self.record = LeaseRecord(holder, epoch, "0")
        self.log.append(f"{holder}@{epoch}")
        return self.record

    def release(self, holder: str, epoch: int) -> None:
        if self.record is not None and (self.record.holder, self.record.epoch) == (holder, epoch):
            self.record = LeaseRecord("", epoch + 1, "released")

    def renew(self, holder: str, epoch: int) -> bool:
        if self.down:
            raise OSError("the lease's store is away")
        if self.record is None or (self.record.holder, self.record.epoch) != (holder, epoch):
            return False
        self.renewals += 1
        self.record = LeaseRecord(holder, epoch, str(self.renewals))
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def elector(store: MemoryLease, holder: str, clock: Clock) -> Elector:
    return Elector(store, holder, lease_duration_s=15, renew_deadline_s=10, retry_s=2,
                   monotonic=clock)


def test_the_first_takes_a_free_lease_and_a_standby_waits_out_the_lease_on_its_clock() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_once()
    b.try_once()
    assert (a.leading(), a.epoch, b.leading()) == (True, 1, False)
    assert b.describe()["leader"] == "a"
    for _ in range(20):  # a renews every 2 s: b never takes over
        clock.now += 2
        a.try_once()
        b.try_once()
    assert a.leading() and not b.leading() and store.log == ["a@1"]
    # a stops renewing (killed): b takes over once the record is unchanged for 15 s
    clock.now += 14
    b.try_once()
    assert not b.leading()
    clock.now += 2
    b.try_once()
    assert (b.leading(), b.epoch, store.log) == (True, 2, ["a@1", "b@2"])


def test_a_leader_that_cannot_renew_stops_leading_at_the_deadline() -> None:
    store, clock = MemoryLease(), Clock()
    a = elector(store, "a", clock)
    a.try_once()
    store.down = True
    clock.now += 9.9
    a.try_once()
    assert a.leading(), "within the renew deadline a leader keeps leading"
    clock.now += 0.2
    assert not a.leading(), "past the deadline it stops at once, before any retry"
    a.try_once()
    assert a.epoch is None


def test_a_paused_leader_resumes_not_leading_and_learns_it_was_taken_over() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_once()
    b.try_once()
    clock.now += 30  # a is stopped (SIGSTOP) for twice the lease; b's clock runs on
    b.try_once()
    assert b.leading() and b.epoch == 2
    assert not a.leading(), "a's own clock says its last renewal is too old"
    a.try_once()  # its renewal is refused: the lease is b's
    assert a.epoch is None and not a.leading()


def test_a_leader_that_stops_releases_and_a_standby_takes_over_at_its_next_look() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_once()
    b.try_once()
    a.stop()  # a clean shutdown (a rolling update): no waiting out the lease
    assert not a.leading() and store.record is not None and store.record.holder == ""
    clock.now += 2
    b.try_once()
    assert b.leading() and b.epoch == 3, "released at epoch 2, taken at 3"
