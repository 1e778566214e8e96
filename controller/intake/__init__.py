"""Intake: what sandboxes send back (events, snapshots) and the credentials they send it with.

- `tokens`: sandbox tokens and signatures;
- `ingest`, `event_writer`, `event_quota`: events checked, bounded and stored exactly once;
- `snapshot_guard`, `snapshot_items`, `aggregator`: a hostile snapshot opened safely, loaded.
"""
