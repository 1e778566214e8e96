"""A template's secrets, by reference: the sandbox gets the value (an environment variable
on the process and Docker backends, a file the kubelet mounts on Kubernetes), and the value
appears in no plan, report, event, log or database row."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy import MetaData, create_engine, select

from controller.backends.template_secrets import resolve
from controller.catalog.templates import TemplateModel
from controller.cli.embedded import EmbeddedServer
from controller.errors import BackendError
from controller.settings import Settings
from sandbox_image.contract import ENV_TEMPLATE_SECRETS_DIR, export_template_secrets
from tests.e2e_helpers import report, start_run, wait_run

KEY = "sk-test-3f9a1c7e5b2d4f60a8e1"
REF = {"name": "openai", "key": "api-key", "as": "OPENAI_API_KEY"}
DIGEST = hashlib.sha256(KEY.encode()).hexdigest()
# the sandbox checks the value by its digest: the command itself is recorded
CHECK = ("import hashlib, os, sys; ok = hashlib.sha256(os.environ.get('OPENAI_API_KEY', '')"
         f".encode()).hexdigest() == {DIGEST!r}; print('key present:', ok); "
         "sys.exit(0 if ok else 3)")
FAST = {"agents": 1, "steps": 2, "llm_latency_ms": 0, "checkpoint_interval_s": 0}


def base(**extra: object) -> dict[str, object]:
    return {"id": "needs_key", "category": "test",
            "estimate": {"cost_usd": [0.1, 0.2], "runtime_s": [1, 2]}, **extra}


@pytest.mark.parametrize("ref", [
    {**REF, "name": "../etc"}, {**REF, "key": ".."}, {**REF, "as": "SIMPLE_SANDBOX_TOKEN"},
    {**REF, "as": "lower"}, {**REF, "extra": 1},
])
def test_a_bad_reference_is_refused_naming_the_field(ref: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="secrets"):
        TemplateModel.model_validate(base(secrets=[ref]))


def test_two_secrets_under_one_name_are_refused() -> None:
    with pytest.raises(ValidationError, match="one name"):
        TemplateModel.model_validate(base(secrets=[REF, {**REF, "key": "other"}]))


def test_resolve_reads_the_store_and_names_what_is_missing_never_a_value(tmp_path: Path
                                                                         ) -> None:
    (tmp_path / "openai").mkdir()
    (tmp_path / "openai" / "api-key").write_text(KEY + "\n")
    assert resolve([("openai", "api-key", "OPENAI_API_KEY")], tmp_path) == {
        "OPENAI_API_KEY": KEY}
    with pytest.raises(BackendError, match=r"openai/other .*cannot be read") as caught:
        resolve([("openai", "other", "X")], tmp_path)
    assert KEY not in str(caught.value)
    with pytest.raises(BackendError, match="SIMPLE_TEMPLATE_SECRETS_DIR is not set"):
        resolve([("openai", "api-key", "OPENAI_API_KEY")], None)
    assert resolve([], None) == {}


def test_the_runtime_exports_mounted_files_it_does_not_already_have(tmp_path: Path) -> None:
    (tmp_path / "OPENAI_API_KEY").write_text(KEY + "\n")
    (tmp_path / "..data").mkdir()  # the kubelet's own entries are not names
    environ = {ENV_TEMPLATE_SECRETS_DIR: str(tmp_path), "KEPT": "x"}
    (tmp_path / "KEPT").write_text("not this")
    assert export_template_secrets(environ) == ["OPENAI_API_KEY"]
    assert environ["OPENAI_API_KEY"] == KEY and environ["KEPT"] == "x"


def test_a_process_sandbox_gets_the_key_and_nothing_records_it(
        settings: Settings, catalog_dir: Callable[..., Path], tmp_path: Path) -> None:
    store = tmp_path / "secret-store"
    (store / "openai").mkdir(parents=True)
    (store / "openai" / "api-key").write_text(KEY)
    catalog = catalog_dir(json.dumps({"templates": [
        base(id="uses_key", secrets=[REF], timeout_s=120,
             command=[sys.executable, "-c", CHECK]),
        base(id="simulates_with_key", secrets=[REF], timeout_s=120, config=FAST),
    ]}))
    settings = settings.model_copy(update={"catalog_dirs": [catalog],
                                           "template_secrets_dir": store})
    seen: list[str] = []
    with EmbeddedServer(settings) as server:
        plan = httpx.post(f"{server.url}/v1/plans",
                          json={"templates": ["uses_key", "simulates_with_key"]}, timeout=30)
        seen.append(plan.text)
        run_id = start_run(server.url, {"templates": ["uses_key", "simulates_with_key"]})
        run = wait_run(server.url, run_id, 120)
        assert run["status"] == "succeeded", run
        seen.append(json.dumps(run))
        seen.append(json.dumps(report(server.url, run_id)))
        for fmt in ("markdown", "junit"):
            seen.append(httpx.get(f"{server.url}/v1/runs/{run_id}/report?format={fmt}",
                                  timeout=30).text)
        for sandbox in run["sandboxes"]:
            sid = sandbox["sandbox_id"]
            logs = httpx.get(f"{server.url}/v1/sandboxes/{sid}/logs", timeout=30).text
            seen.append(logs)
            seen.append(httpx.get(f"{server.url}/v1/sandboxes/{sid}", timeout=30).text)
        assert "key present: True" in "".join(seen)
    engine = create_engine(settings.database_url)
    tables = MetaData()
    tables.reflect(engine)
    with engine.connect() as conn:
        for table in tables.sorted_tables:
            seen.append(json.dumps([list(r) for r in conn.execute(select(table))], default=str))
    engine.dispose()
    everything = "\n".join(seen)
    assert "OPENAI_API_KEY" in everything  # the reference is recorded...
    assert KEY not in everything  # ...the value nowhere
    for path in settings.data_dir.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
