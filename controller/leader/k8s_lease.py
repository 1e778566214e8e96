"""The lease as a Kubernetes `coordination.k8s.io/v1` Lease (the chart's default in a
cluster), like client-go's leader election: `holderIdentity`, `renewTime`, and
`leaseTransitions` as the epoch. Every change is a replace at the `resourceVersion` that
was read (a merge patch that carries `metadata.resourceVersion`), so of two contenders
that read the same Lease one gets 409 and stays standby.

The epoch is mirrored into the database's lease row (`DatabaseLease.mirror`) when the
Lease is taken, so the fence on every write (`controller.leader.fence`) is the same
whichever lease elects.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from controller.backends.kubernetes.api import api_error, load_api_client
from controller.leader.db_lease import DatabaseLease
from controller.leader.elector import LeaseRecord

# What a reconciler needs on its Lease (the chart's Role grants exactly this when split).
LEASE_RBAC: dict[tuple[str, str], frozenset[str]] = {
    ("coordination.k8s.io", "leases"): frozenset({"create", "get", "patch"}),
}


def load_coordination_api() -> Any:
    """A CoordinationV1Api from in-cluster config, else kubeconfig."""
    from kubernetes import client

    return client.CoordinationV1Api(load_api_client())


def micro_time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubernetesLease:
    """A `LeaseStore` on a Kubernetes Lease; `mirror` (the database row) gets its epoch."""

    def __init__(self, api: Any, namespace: str, name: str, duration_s: float,
                 mirror: DatabaseLease | None = None) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.duration_s, self.mirror = duration_s, mirror

    def _get(self) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            answer = self.api.read_namespaced_lease(self.name, self.namespace,
                                                    _preload_content=False)
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, "get", "leases", self.namespace, 1) from e
        return dict(json.loads(answer.data))

    @staticmethod
    def _record(lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return LeaseRecord(str(spec.get("holderIdentity") or ""),
                           int(spec.get("leaseTransitions") or 0), str(spec.get("renewTime")))

    def _patch(self, lease: dict[str, Any], spec: dict[str, Any]) -> None:
        """A merge patch at the version read: 409 if anyone changed the Lease since."""
        version = (lease.get("metadata") or {}).get("resourceVersion")
        body = {"metadata": {"resourceVersion": version} if version else {}, "spec": spec}
        self.api.patch_namespaced_lease(self.name, self.namespace, body,
                                        _content_type="application/merge-patch+json",
                                        _preload_content=False)

    def read(self) -> LeaseRecord | None:
        lease = self._get()
        return self._record(lease) if lease is not None else None

    def _spec(self, holder: str, epoch: int, now: datetime) -> dict[str, Any]:
        return {"holderIdentity": holder, "leaseDurationSeconds": max(1, round(self.duration_s)),
                "acquireTime": micro_time(now), "renewTime": micro_time(now),
                "leaseTransitions": epoch}

    def acquire(self, holder: str, seen: LeaseRecord | None) -> LeaseRecord | None:
        from kubernetes.client.exceptions import ApiException

        now = datetime.now(UTC)
        try:
            if seen is None:
                epoch = (self.mirror.current_epoch() if self.mirror else 0) + 1
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": self._spec(holder, epoch, now)}
                self.api.create_namespaced_lease(self.namespace, body, _preload_content=False)
            else:
                lease = self._get()
                if lease is None or self._record(lease) != seen:
                    return None
                epoch = seen.epoch + 1
                self._patch(lease, self._spec(holder, epoch, now))
        except ApiException as e:
            if e.status == 409:  # another contender changed it first
                return None
            raise api_error(e, "update", "leases", self.namespace, 1) from e
        if self.mirror is not None and not self.mirror.mirror(holder, epoch):
            return None
        return LeaseRecord(holder, epoch, micro_time(now))

    def renew(self, holder: str, epoch: int) -> bool:
        from kubernetes.client.exceptions import ApiException

        lease = self._get()
        if lease is None:
            return False
        record = self._record(lease)
        if (record.holder, record.epoch) != (holder, epoch):
            return False
        try:
            self._patch(lease, {"renewTime": micro_time(datetime.now(UTC))})
        except ApiException as e:
            if e.status == 409:
                return False
            raise api_error(e, "update", "leases", self.namespace, 1) from e
        return True

    def release(self, holder: str, epoch: int) -> None:
        from kubernetes.client.exceptions import ApiException

        lease = self._get()
        if lease is None:
            return
        record = self._record(lease)
        if (record.holder, record.epoch) != (holder, epoch):
            return
        now = micro_time(datetime.now(UTC))
        try:
            self._patch(lease, {"holderIdentity": "", "leaseTransitions": epoch + 1,
                                "renewTime": now})
        except ApiException as e:
            if e.status != 409:
                raise api_error(e, "update", "leases", self.namespace, 1) from e
            return
        if self.mirror is not None:
            self.mirror.mirror("", epoch + 1)
