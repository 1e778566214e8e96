"""Attempts: start one attempt of a sandbox, and record once how it ended.

- `launcher`: claim, hand the spec to the backend;
- `urls`: every signed or presigned URL an attempt gets (snapshot, items, resume, stage);
- `inputs`: the items and resume inputs an attempt reads;
- `finisher`, `outcomes`, `exit_path`, `stamps`: an ended attempt recorded once.
"""
