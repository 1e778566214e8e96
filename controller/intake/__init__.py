"""Intake: what sandboxes send back (events, snapshots) and the credentials they send it with.

- `tokens`: sandbox tokens (whose token is this: one check) and the `Signer` of URLs;
- `event_intake`, `event_quota`, `event_writer`: a controller's way in for event batches,
  bounded and group-committed;
- `event_batch`, `ingest`, `event_rows`: a batch judged and stored exactly once;
- `snapshot_guard`, `snapshot_items`, `aggregator`: a hostile snapshot opened safely, loaded.
"""
