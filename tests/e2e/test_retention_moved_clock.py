"""Retention end to end, with the controller's clock moved (no sleeping).

Two real runs on the process backend with the real runtime: a staged run whose first
stage resumes from a checkpoint (a resume copy) and whose second stage is a batch template
(item files, a stage input), every sandbox with archived logs. One ends while the
controller's clock says 31 days ago, the other 29 days ago. `POST /v1/gc` (and the CLI)
then frees the first's store objects and event rows and keeps its report, ledger and
snapshots; the second keeps everything. The test reads the store (the directory, or the
bucket with its own client) and the database itself. Local store and S3 (rclone); SQLite
and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, func, select
from typer.testing import CliRunner

from controller.cli.embedded import EmbeddedServer
from controller.cli.main import app
from controller.db.schema import events
from controller.db.tasks import task_row
from controller.reconcile.daily_gc import GC_TASK
from controller.settings import Settings
from tests.e2e_helpers import report, start_run, wait_for, wait_run
from tests.services import (  # noqa: F401 - fixtures
    TEST_BUCKET,
    RcloneS3Server,
    pg_server,
    pg_server_url,
    s3_private_server,
)

pytestmark = [pytest.mark.slow]

TEMPLATES = [
    {"id": "resumes", "category": "test", "timeout_s": 120,
     "estimate": {"cost_usd": [0.0, 0.1], "runtime_s": [0.5, 2]},
     "config": {"agents": 1, "steps": 4, "llm_latency_ms": 0, "fail_at_step": 3,
                "fail_attempts": 1, "checkpoint_every_steps": 1, "checkpoint_interval_s": 0}},
    {"id": "evals", "category": "test", "timeout_s": 120, "batch_size": 2,
     "estimate": {"cost_usd": [0.0, 0.01], "runtime_s": [0.1, 0.5]},
     "items": [{"item_id": "a", "data": {"n": 1}},
               {"item_id": "b", "data": {"expect": False, "reason": "b is wrong"}},
               {"item_id": "c", "data": {"n": 3}}],
     "config": {"checkpoint_interval_s": 0}},
]
STAGED = {"stages": [{"templates": ["resumes"]}, {"templates": ["evals"]}]}


class MovedClock:
    """Real time, moved by `offset`: each run ends when the clock says it does."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@dataclass
class Setup:
    settings: Settings
    read_store: Callable[[], dict[str, int]]  # key -> size, read around the controller


@pytest.fixture(params=["local-default", "s3-default", "s3-postgres"])
def setup(request: pytest.FixtureRequest, settings: Settings, tmp_path: Path) -> Iterator[Setup]:
    store, database = request.param.split("-")
    if database == "postgres":
        settings = settings.model_copy(
            update={"database_url": request.getfixturevalue("pg_server_url")})
    if store == "local":
        root = settings.data_dir / "store"

        def read_local() -> dict[str, int]:
            return {p.relative_to(root).as_posix(): p.stat().st_size
                    for p in root.rglob("*") if p.is_file()}

        yield Setup(settings, read_local)
        return
    server: RcloneS3Server = request.getfixturevalue("s3_private_server")

    def read_bucket() -> dict[str, int]:
        return {k: len(v) for k, v in server.objects(TEST_BUCKET, "retention").items()}

    yield Setup(settings.model_copy(update=server.settings_update(TEST_BUCKET, "retention")),
                read_bucket)


def of_run(objects: dict[str, int], run_id: str) -> dict[str, int]:
    return {k: v for k, v in objects.items() if f"/{run_id}/" in k}


def kinds(keys: dict[str, int]) -> set[str]:
    return {"resume" if "/resume-for-attempt-" in k else k.split("/")[0] for k in keys}


def event_rows(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return dict(conn.execute(select(events.c.run_id, func.count())  # type: ignore[arg-type]
                                     .group_by(events.c.run_id)).all())
    finally:
        engine.dispose()


def test_gc_with_the_clock_moved_frees_old_runs_and_keeps_their_reports(
    setup: Setup, catalog_dir: Callable[..., Path]
) -> None:
    catalog = catalog_dir(json.dumps({"templates": TEMPLATES}))
    settings = setup.settings.model_copy(update={"catalog_dirs": [catalog]})
    clock = MovedClock()
    server = EmbeddedServer(settings)
    server.controller.clock = clock
    with server:
        # The reconciler's daily gc claims its day at the first pass; from then on it
        # stays out of this test (the clock never passes real time + 1 day).
        wait_for(lambda: task_row(server.controller.engine, GC_TASK), 30, "the daily claim")
        ran = {}
        for days in (31, 29):
            clock.offset = -timedelta(days=days)
            run_id = start_run(server.url, STAGED)
            run = wait_run(server.url, run_id, 180)
            assert run["status"] == "succeeded", run
            ran[days] = run_id
        old, recent = ran[31], ran[29]
        clock.offset = timedelta(0)
        before = {r: report(server.url, r) for r in (old, recent)}
        markdown = httpx.get(f"{server.url}/v1/runs/{old}/report?format=markdown").text
        objects, rows = setup.read_store(), event_rows(settings.resolved_database_url)
        # Every kind retention frees is there, for both runs, before it runs.
        for run_id in (old, recent):
            assert kinds(of_run(objects, run_id)) == {
                "logs", "items", "resume", "inputs", "snapshots"}, of_run(objects, run_id)
            assert rows[run_id] > 0
        freed = {k: v for k, v in of_run(objects, old).items()
                 if not k.startswith("snapshots/") or "/resume-for-attempt-" in k}

        cli = CliRunner().invoke(app, ["gc", "--dry-run", "--server", server.url])
        assert cli.exit_code == 0, cli.output
        assert (f"would free {len(freed)} store objects ({sum(freed.values())} bytes) and "
                f"{rows[old]} event rows of 1 runs") in cli.output
        assert setup.read_store() == objects  # a dry run removes nothing

        answer = httpx.post(f"{server.url}/v1/gc", timeout=60).json()
        assert (answer["runs"], answer["run_ids"], answer["objects"], answer["bytes"],
                answer["event_rows"], answer["complete"]) == (
            1, [old], len(freed), sum(freed.values()), rows[old], True)

        after, rows_after = setup.read_store(), event_rows(settings.resolved_database_url)
        assert of_run(after, old) == {k: v for k, v in of_run(objects, old).items()
                                      if k not in freed}
        assert kinds(of_run(after, old)) == {"snapshots"}
        assert of_run(after, recent) == of_run(objects, recent)
        assert old not in rows_after and rows_after[recent] == rows[recent]

        assert report(server.url, old) == before[old]
        assert report(server.url, recent) == before[recent]
        assert httpx.get(f"{server.url}/v1/runs/{old}/report?format=markdown").text == markdown
        verdict = httpx.get(f"{server.url}/v1/runs/{old}/verify", timeout=60).json()
        assert verdict["ok"], verdict
        run = httpx.get(f"{server.url}/v1/runs/{old}").json()
        assert run["purged_at"] and not httpx.get(f"{server.url}/v1/runs/{recent}").json()[
            "purged_at"]
        assert httpx.post(f"{server.url}/v1/gc").json()["runs"] == 0
        sandbox_id = run["sandboxes"][0]["sandbox_id"]
        gone = httpx.get(f"{server.url}/v1/sandboxes/{sandbox_id}/logs")
        assert gone.status_code == 404 and "SIMPLE_RETENTION_DAYS" in gone.json()["error"]["hint"]
        kept = run["sandboxes"][0]["sandbox_id"].replace(old.removeprefix("run-"),
                                                         recent.removeprefix("run-"))
        assert httpx.get(f"{server.url}/v1/sandboxes/{kept}/logs").status_code == 200
