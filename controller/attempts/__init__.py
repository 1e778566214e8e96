"""Attempts: start one attempt of a sandbox, and record once how it ended.

- `launcher`: claim, sign its URLs, hand the spec to the backend;
- `inputs`: the items, resume and stage inputs an attempt reads;
- `finisher`, `outcomes`, `exit_path`, `stamps`: an ended attempt recorded once.
"""
