"""Finding 7: the evaluation install published its secrets.

`values-evaluation.yaml` and `values.yaml` held fixed MinIO and PostgreSQL passwords and
an API token: any sandbox (or anyone who read the chart) could use them. Now the
evaluation install generates them, keeps them across upgrades with `lookup`, and its
NOTES say how to read them.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.k8s.test_chart import CHART, NAMESPACE, RELEASE, helm_run, one

WELL_KNOWN = ("simple-evaluation", "evaluation-token-not-for-production")


def render_fresh(helm: str) -> list[dict]:
    """One install's manifests (not cached: each render generates its own secrets)."""
    result = helm_run(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                      "-f", str(CHART / "values-evaluation.yaml"))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def decoded(secret: dict, key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


def generated(docs: list[dict]) -> dict[str, str]:
    evaluation = one(docs, "Secret", "simple-evaluation")
    controller = one(docs, "Secret", "simple")
    return {
        "postgres": decoded(evaluation, "postgres-password"),
        "minio": decoded(evaluation, "minio-root-password"),
        "api_token": decoded(controller, "api-tokens"),
        "database_url": decoded(controller, "database-url"),
        "s3_secret": decoded(controller, "s3-secret-access-key"),
    }


def test_no_well_known_secret_is_shipped_or_rendered(helm: str) -> None:
    # What users install with (the other ci/ files are test inputs with made-up tokens).
    files = [CHART / "values.yaml", CHART / "values-evaluation.yaml",
             CHART / "ci" / "evaluation-values.yaml", CHART / "ci" / "default-values.yaml"]
    for path in files:
        values = yaml.safe_load(path.read_text()) or {}
        evaluation = values.get("evaluation") or {}
        given = [(evaluation.get("postgresql") or {}).get("password"),
                 (evaluation.get("minio") or {}).get("rootPassword"),
                 *((values.get("auth") or {}).get("apiTokens") or [])]
        assert not any(given), f"{path} ships a secret: {given}"
    assert not set(generated(render_fresh(helm)).values()) & set(WELL_KNOWN)


def test_each_install_generates_its_own_and_wires_them_consistently(helm: str) -> None:
    first, second = generated(render_fresh(helm)), generated(render_fresh(helm))
    for key in ("postgres", "minio", "api_token"):
        assert len(first[key]) >= 32 and first[key] != second[key], key
    assert f":{first['postgres']}@" in first["database_url"]
    assert first["s3_secret"] == first["minio"]


def test_secrets_are_kept_across_upgrades_with_lookup() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert 'lookup "v1" "Secret"' in helpers
    for template in ("evaluation/secret.yaml", "controller/secret.yaml"):
        text = (CHART / "templates" / template).read_text()
        assert "simple.generatedSecret" in text or "simple.postgresPassword" in text


def test_the_notes_say_how_to_read_them(helm: str, tmp_path: Path) -> None:
    chart = tmp_path / "simple"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes_preview.tpl").write_text(
        '{{- define "notes-preview" }}' + notes + "{{- end }}")
    (chart / "templates" / "notes-preview.yaml").write_text(
        'notes: {{ include "notes-preview" . | toJson }}\n')
    result = subprocess.run(
        [helm, "template", RELEASE, str(chart), "-n", NAMESPACE, "-f",
         str(CHART / "values-evaluation.yaml"), "--show-only", "templates/notes-preview.yaml"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    text = yaml.safe_load(result.stdout)["notes"]
    assert "get secret simple-evaluation -o jsonpath='{.data.postgres-password}'" in text
    assert "get secret simple " in text and "{.data.api-tokens}" in text
