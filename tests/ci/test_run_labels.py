"""Runs carry their pipeline (issue 31): `--label key=value` and, in CI, the commit, ref
and pipeline URL from GitHub Actions' or GitLab CI's variables, stored with the run and
shown in its JSON, JUnit properties, Markdown report and run page; `GET /v1/runs?label=`
and `simplectl status --label` find it."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import httpx
import pytest

from controller.cli.labels import ci_labels, run_labels
from tests.ci.conftest import Served

GITHUB = {
    "GITHUB_SHA": "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
    "GITHUB_REF": "refs/pull/42/merge",
    "GITHUB_SERVER_URL": "https://github.example",
    "GITHUB_REPOSITORY": "acme/sims",
    "GITHUB_RUN_ID": "987654",
}
GITLAB = {
    "CI_COMMIT_SHA": "fedcba9876543210fedcba9876543210fedcba98",
    "CI_COMMIT_REF_NAME": "main",
    "CI_PIPELINE_URL": "https://gitlab.example/acme/sims/-/pipelines/5150",
}


def started(served: Served, tmp_path: Path, env: dict[str, str], *args: str) -> dict[str, object]:
    junit, markdown = tmp_path / "junit.xml", tmp_path / "report.md"
    done = served.simplectl(
        *served.remote("run", "ci-ok", "--json", "--junit", str(junit), "--markdown",
                       str(markdown), *args),
        env=env,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    return {"report": report, "junit": ET.parse(junit).getroot(), "markdown": markdown.read_text()}


def test_github_and_gitlab_runs_carry_their_pipeline_everywhere(
    served: Served, tmp_path: Path
) -> None:
    github = started(served, tmp_path, GITHUB, "--label", "team=sim", "--label", "ref=mine")
    report = github["report"]
    assert isinstance(report, dict)
    run_id = report["run_id"]
    want = {
        "ci": "github",
        "commit": GITHUB["GITHUB_SHA"],
        "ref": "mine",  # an explicit --label wins over the variable
        "pipeline_url": "https://github.example/acme/sims/actions/runs/987654",
        "team": "sim",
    }
    assert report["labels"] == want
    with served.client() as http:
        assert http.get(f"/v1/runs/{run_id}").json()["labels"] == want
    junit = github["junit"]
    assert isinstance(junit, ET.Element)
    properties = {p.get("name"): p.get("value") for p in junit.iter("property")}
    for key, value in want.items():
        assert properties[f"label.{key}"] == value
    assert f"` commit={GITHUB['GITHUB_SHA']} `" in str(github["markdown"])
    assert "` pipeline_url=https://github.example/acme/sims/actions/runs/987654 `" in str(
        github["markdown"]
    )

    gitlab = started(served, tmp_path, GITLAB)
    gitlab_report = gitlab["report"]
    assert isinstance(gitlab_report, dict)
    assert gitlab_report["labels"] == {
        "ci": "gitlab", "commit": GITLAB["CI_COMMIT_SHA"], "ref": "main",
        "pipeline_url": GITLAB["CI_PIPELINE_URL"],
    }
    plain = served.simplectl(*served.remote("run", "ci-ok", "--json", "--no-ci-labels"), env=GITHUB)
    assert json.loads(plain.stdout)["labels"] == {}

    with served.client() as http:
        def found(*labels: str) -> list[str]:
            response = http.get("/v1/runs", params={"label": list(labels)})
            assert response.status_code == 200, response.text
            return [r["run_id"] for r in response.json()["runs"]]

        assert found(f"commit={GITHUB['GITHUB_SHA']}") == [run_id]
        assert found("ci=gitlab") == [gitlab_report["run_id"]]
        assert found("team=sim", "ci=github") == [run_id]
        assert found("team=sim", "ci=gitlab") == []
        assert len(found()) == 3
        bad = http.get("/v1/runs", params={"label": "no-equals-sign"})
        assert bad.status_code == 422 and "label" in bad.json()["error"]["field"]

    listed = served.simplectl(*served.remote("status", "--json", "--label", "ci=gitlab"))
    assert [r["run_id"] for r in json.loads(listed.stdout)["runs"]] == [gitlab_report["run_id"]]
    shown = served.simplectl(*served.remote("status", run_id))
    assert f"commit={GITHUB['GITHUB_SHA']}" in shown.stdout

    with httpx.Client(base_url=served.url, timeout=30) as browser:
        browser.post("/login", data={"token": served.token, "next": "/"})
        page = browser.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert f"<code>commit={GITHUB['GITHUB_SHA']}</code>" in page.text
    assert "<code>team=sim</code>" in page.text


@pytest.mark.parametrize(
    ("label", "why"),
    [("bad key=1", "labels"), ("-x=1", "labels"), ("k=" + "v" * 501, "labels")],
)
def test_a_bad_label_is_exit_2_naming_it(served: Served, label: str, why: str) -> None:
    done = served.simplectl(*served.remote("run", "ci-ok", "--label", label))
    assert done.returncode == 2, done.stderr
    assert why in done.stderr
    assert served.runs() == []


def test_a_label_without_equals_is_exit_2_before_anything(served: Served) -> None:
    done = served.simplectl(*served.remote("run", "ci-ok", "--label", "team"))
    assert done.returncode == 2 and "expected KEY=VALUE" in done.stderr
    assert served.runs() == []


def test_ci_variables_read_as_labels() -> None:
    assert ci_labels({}) == {}
    assert ci_labels({"GITHUB_SHA": "abc"}) == {"ci": "github", "commit": "abc"}
    assert ci_labels({"CI_COMMIT_SHA": "def", "CI_PIPELINE_URL": "u"}) == {
        "ci": "gitlab", "commit": "def", "pipeline_url": "u"}
    assert run_labels(["a=b=c"], False, GITHUB) == {"a": "b=c"}
