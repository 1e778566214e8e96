"""The labels a run carries: `--label key=value`, and in CI what started it.

On GitHub Actions and GitLab CI the commit, the ref and the pipeline's URL are read from
their standard variables, so a run on the dashboard leads back to its pipeline and a
pipeline's runs are found with `simplectl status --label commit=SHA`. An explicit
`--label` wins over a variable; `--no-ci-labels` reads none. The server checks keys and
values (HTTP 422, exit 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import typer

from controller.cli.exits import fail

Labels = Annotated[
    list[str] | None,
    typer.Option(
        "--label",
        metavar="KEY=VALUE",
        help="A label the run carries (repeatable), e.g. --label team=sim.",
    ),
]


def parse_labels(pairs: list[str] | None) -> dict[str, str]:
    """`key=value` strings as a dict (the last of a key wins); exit 2 for a bad one."""
    labels: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise fail(f"--label {pair!r}: expected KEY=VALUE, e.g. --label team=sim")
        labels[key.strip()] = value
    return labels


def ci_labels(env: Mapping[str, str]) -> dict[str, str]:
    """commit, ref, pipeline_url and ci from GitHub Actions' or GitLab CI's variables."""
    if env.get("GITHUB_SHA"):
        labels = {"ci": "github", "commit": env["GITHUB_SHA"]}
        if env.get("GITHUB_REF"):
            labels["ref"] = env["GITHUB_REF"]
        names = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
        parts = [env.get(name, "") for name in names]
        if all(parts):
            server, repository, run_id = parts
            labels["pipeline_url"] = f"{server.rstrip('/')}/{repository}/actions/runs/{run_id}"
        return labels
    if env.get("CI_COMMIT_SHA"):
        labels = {"ci": "gitlab", "commit": env["CI_COMMIT_SHA"]}
        if env.get("CI_COMMIT_REF_NAME"):
            labels["ref"] = env["CI_COMMIT_REF_NAME"]
        if env.get("CI_PIPELINE_URL"):
            labels["pipeline_url"] = env["CI_PIPELINE_URL"]
        return labels
    return {}


def run_labels(pairs: list[str] | None, from_ci: bool, env: Mapping[str, str]) -> dict[str, str]:
    """The labels to send: CI's (unless `from_ci` is off), then `--label`s over them."""
    return {**(ci_labels(env) if from_ci else {}), **parse_labels(pairs)}
