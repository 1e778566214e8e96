"""The Kubernetes Lease on kmock: two contenders, one leads, the other takes over when the
first stops renewing; the epoch (leaseTransitions) is mirrored into the database row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller.db.engine import create_db_engine, upgrade
from controller.leader.db_lease import DatabaseLease, read_lease
from controller.leader.elector import Elector
from controller.leader.k8s_lease import KubernetesLease
from tests.k8s.conftest import NAMESPACE, FakeCluster
from tests.leader.test_elector import Clock


def coordination(cluster: FakeCluster) -> Any:
    from kubernetes import client

    configuration = client.Configuration(host=cluster.url)
    configuration.retries = 0
    return client.CoordinationV1Api(client.ApiClient(configuration))


def test_two_contenders_one_leads_the_other_takes_over(cluster: FakeCluster,
                                                       tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'simple.db'}")
    upgrade(engine)
    row = DatabaseLease(engine, "simple-reconciler")
    clock = Clock()
    a, b = (Elector(KubernetesLease(coordination(cluster), NAMESPACE, "simple-reconciler", 15,
                                    mirror=row), holder, 15, 10, 2, monotonic=clock)
            for holder in ("a", "b"))
    a.try_once()
    b.try_once()
    assert a.leading() and a.epoch == 1 and not b.leading()
    lease = cluster.on_loop(lambda: cluster.emulator.objects[
        "coordination.k8s.io/v1/leases", NAMESPACE, "simple-reconciler"].raw)
    assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseTransitions"] == 1
    for _ in range(10):  # a renews: b stays standby
        clock.now += 2
        a.try_once()
        b.try_once()
    assert a.leading() and not b.leading()
    assert read_lease(engine, "simple-reconciler") == ("a", 1)
    clock.now += 16  # a stops renewing
    b.try_once()
    assert b.leading() and b.epoch == 2
    assert read_lease(engine, "simple-reconciler") == ("b", 2), "the fence's row follows"
    a.try_once()  # a's renewal finds b's Lease: it steps down
    assert not a.leading() and a.epoch is None
    b.stop()  # a clean shutdown releases the Lease: a takes it at its next look
    assert read_lease(engine, "simple-reconciler") == ("", 3)
    clock.now += 2
    a.try_once()
    assert a.leading() and a.epoch == 4
    assert read_lease(engine, "simple-reconciler") == ("a", 4)
    engine.dispose()
