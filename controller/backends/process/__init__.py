"""The process backend: one OS process per sandbox (the embedded default).

- `backend`: `ProcessBackend`; `forkserver`: forks the supervisors;
- `supervisor`: run as a script; owns one sandbox's process group and limits;
- `user`: a uid of its own per sandbox.
"""
