"""Leader: which reconciler may act, and the fence that stops one that may no longer.

- `elector`: `Leadership` (who leads, since when, under which epoch), `SoleLeader` for one
  process, and `Elector`, the client-go style loop that contends for a lease;
- `db_lease`: the lease as a PostgreSQL row (holder, epoch, renewed);
- `k8s_lease`: the lease as a Kubernetes `coordination.k8s.io/v1` Lease, its epoch
  mirrored into the row so the fence is the same;
- `fence`: every write of a leader checks its epoch in the same transaction, and the
  backend is asked nothing (launch, stop, remove) by one that is no longer leading.
"""
